#include "bulk.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <gossamer/abi/attach.hpp>
#include <gossamer/detail/core.hpp>

namespace gossamer::detail {

namespace {
constexpr std::uint64_t kEventToken = ~std::uint64_t(0);
// As when the dataplane reports a peer lost (rack.cpp): a consequence of
// something outside this instance, not its own failure.
constexpr int kExitBulkLost = 75;
// A transfer's first buffer; it doubles as its bytes arrive.
constexpr std::size_t kFirstChunk = 64 * 1024;

// The bytes of a header or payload, as the tags take them.
std::string_view bytes_of(const void* p, std::size_t n) { return {static_cast<const char*>(p), n}; }

bool parse_u32(const std::string& s, std::uint32_t* out) {
  if (s.empty() || s.size() > 9) return false;
  std::uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + std::uint32_t(c - '0');
  }
  *out = v;
  return true;
}
}  // namespace

std::unique_ptr<Bulk> Bulk::from_env(const char* env, const Rack& rack, std::uint32_t threshold,
                                     std::string* error) {
  if (!env || !*env) return nullptr;
  std::unique_ptr<Bulk> b(new Bulk());
  b->rack_ = rack;
  b->threshold_ = threshold;
  b->peers_.resize(rack.hosts);
  // The fds become ours only when everything checks out.
  auto refuse = [&b, error](std::string why) -> std::unique_ptr<Bulk> {
    for (auto& p : b->peers_)
      if (p) p->fd = -1;
    *error = std::move(why);
    return nullptr;
  };
  std::string s(env);
  std::size_t at = 0;
  for (int entry = 1; at <= s.size(); ++entry) {
    std::size_t comma = s.find(',', at);
    std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? s.size() + 1 : comma + 1;
    // host:fd:send key:receive key. The message names the entry, not its
    // text: the keys must not reach a log.
    std::string field[4];
    std::size_t from = 0, n = 0;
    for (; n < 4; ++n) {
      const std::size_t colon = item.find(':', from);
      field[n] = item.substr(from, colon == std::string::npos ? std::string::npos : colon - from);
      if (colon == std::string::npos) break;
      from = colon + 1;
    }
    std::uint32_t host = 0, fd = 0;
    abi::SessionKeys keys;
    if (n != 3 || !parse_u32(field[0], &host) || !parse_u32(field[1], &fd) || fd > INT32_MAX ||
        !abi::parse_session_key(field[2], &keys.send) || !abi::parse_session_key(field[3], &keys.receive))
      return refuse("entry " + std::to_string(entry) +
                    " is not <host>:<fd>:<send key>:<receive key> (64 hex digits each)");
    if (host >= rack.hosts || host == rack.host)
      return refuse("host " + std::to_string(host) + " is not another host of this " +
                    std::to_string(rack.hosts) + "-host rack");
    if (b->peers_[host]) return refuse("host " + std::to_string(host) + " is named twice");
    for (auto& q : b->peers_)
      if (q && q->fd == int(fd)) return refuse("fd " + std::to_string(fd) + " is named twice");
    struct stat st {};
    int type = 0;
    socklen_t tl = sizeof type;
    sockaddr_storage peer{};
    socklen_t pl = sizeof peer;
    if (::fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode) ||
        ::getsockopt(int(fd), SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
        ::getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
      return refuse("fd " + std::to_string(fd) + " (host " + std::to_string(host) +
                    ") is not a connected stream socket");
    auto p = std::make_unique<Peer>();
    p->host = host;
    p->fd = int(fd);
    p->out_tags = abi::SessionDirection(keys.send);
    p->in_tags = abi::SessionDirection(keys.receive);
    b->peers_[host] = std::move(p);
  }
  for (std::uint32_t h = 0; h < rack.hosts; ++h)
    if (h != rack.host && !b->peers_[h]) return refuse("no connection for host " + std::to_string(h));
  // From here on the fds are ours: close-on-exec, non-blocking, no Nagle.
  for (auto& p : b->peers_) {
    if (!p) continue;
    ::fcntl(p->fd, F_SETFD, FD_CLOEXEC);
    ::fcntl(p->fd, F_SETFL, ::fcntl(p->fd, F_GETFL) | O_NONBLOCK);
    int one = 1;
    ::setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // A connection that stays idle for hours must not be dropped silently
    // by something in between: the run would only learn at its next large
    // body (keepalive probes; errors end the run, see close_peer).
    ::setsockopt(p->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  }
  abi::host_threads(rack.total, rack.hosts, rack.host, &b->first_, &b->local_);
  for (std::uint32_t i = 0; i < b->local_; ++i) b->inbox_.push_back(std::make_unique<Inbox>());
  b->woken_.assign(b->local_, false);
  b->epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  b->event_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (b->epoll_ < 0 || b->event_ < 0) {
    *error = std::string("epoll/eventfd: ") + std::strerror(errno);
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kEventToken;
  ::epoll_ctl(b->epoll_, EPOLL_CTL_ADD, b->event_, &ev);
  for (auto& p : b->peers_) {
    if (!p) continue;
    ev.events = EPOLLIN;
    ev.data.u64 = p->host;
    if (::epoll_ctl(b->epoll_, EPOLL_CTL_ADD, p->fd, &ev) != 0) {
      *error = std::string("epoll_ctl: ") + std::strerror(errno);
      return nullptr;
    }
    p->open.store(true, std::memory_order_release);
  }
  return b;
}

Bulk::~Bulk() {
  stop();
  for (auto& p : peers_)
    if (p && p->fd >= 0) ::close(p->fd);
  if (epoll_ >= 0) ::close(epoll_);
  if (event_ >= 0) ::close(event_);
}

void Bulk::start(std::function<void(std::uint32_t)> wake, std::function<bool()> finishing) {
  wake_ = std::move(wake);
  finishing_ = std::move(finishing);
  thread_ = std::thread([this] { loop(); });
}

void Bulk::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  std::uint64_t one = 1;
  (void)!::write(event_, &one, sizeof one);
  thread_.join();
}

bool Bulk::on_host(std::uint32_t g, std::uint32_t host) const {
  std::uint32_t first, count;
  abi::host_threads(rack_.total, rack_.hosts, host, &first, &count);
  return g - first < count;
}

bool Bulk::usable(std::uint32_t host) const {
  return host < peers_.size() && peers_[host] && peers_[host]->open.load(std::memory_order_acquire);
}

std::uint64_t Bulk::send(std::uint32_t host, Kind kind, std::uint32_t from, std::uint32_t to,
                         std::vector<std::byte> payload) {
  Peer& p = *peers_[host];
  Out o;
  o.h = BulkWireHeader{kBulkMagic, kind, {}, from, to, next_id_.fetch_add(1, std::memory_order_relaxed),
                       payload.size()};
  o.payload = std::move(payload);
  const std::uint64_t id = o.h.id;
  // Written here, by the sending worker, when nothing waits before it and
  // no other thread is writing to this peer: no hand-over to the I/O thread
  // and no wake-up of it on the way out. What the socket does not take (or
  // an error) is left to the I/O thread, kicked below. Only bodies up to
  // kDirectMax: the caller publishes the slot's reference after send()
  // returns, and for a larger body tagging and writing it here would hold
  // the reference back for longer than the hand-over costs (measured: 1
  // outstanding 64 KiB echo, p50 731-750 us handed over, 906-929 us written
  // here), while the I/O thread writes it in parallel with the slot.
  if (o.payload.size() <= Bulk::kDirectMax && p.send_mu.try_lock()) {
    std::unique_lock<std::mutex> s(p.send_mu, std::adopt_lock);
    bool idle;
    {
      std::lock_guard<std::mutex> g(p.mu);
      idle = p.queue.empty();
    }
    if (idle && p.sending.empty() && p.fd >= 0) {
      push_tagged(p, std::move(o));
      const bool left = write_some(p) != 0 || !p.sending.empty();
      s.unlock();
      if (left) kick();
      return id;
    }
  }
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.queue.push_back(std::move(o));
  }
  kick();
  return id;
}

void Bulk::kick() {
  // The I/O thread clears kicked_ before it takes the queues: a send that
  // finds it set is in a burst the I/O thread has yet to take.
  if (!kicked_.exchange(true, std::memory_order_seq_cst)) {
    std::uint64_t one = 1;
    (void)!::write(event_, &one, sizeof one);
  }
}

bool Bulk::take(std::uint32_t li, Kind kind, std::uint32_t from, std::uint64_t id, std::vector<std::byte>* out) {
  return take_all(li, kind, from, &id, 1, out);
}

bool Bulk::take_all(std::uint32_t li, Kind kind, std::uint32_t from, const std::uint64_t* ids, std::size_t n,
                    std::vector<std::byte>* out) {
  Inbox& in = *inbox_[li];
  std::lock_guard<std::mutex> g(in.mu);
  // A batch names at most a few hundred bodies (one 32-byte reference
  // record each in a 16.5 KiB slot), the inbox holds what has arrived for
  // this worker: small lists, searched in place.
  constexpr std::size_t kStack = 64;
  std::size_t stack[kStack];
  std::vector<std::size_t> heap;
  std::size_t* at = stack;
  if (n > kStack) {
    heap.resize(n);
    at = heap.data();
  }
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t i = 0;
    while (i < in.items.size() &&
           (in.items[i].kind != kind || in.items[i].from != from || in.items[i].id != ids[k]))
      ++i;
    if (i == in.items.size()) return false;
    at[k] = i;
  }
  for (std::size_t k = 0; k < n; ++k) {
    out[k] = std::move(in.items[at[k]].payload);
    in.items[at[k]].id = 0;  // taken (ids start at 1)
  }
  std::erase_if(in.items, [](const Arrival& a) { return a.id == 0; });
  return true;
}

// ---- the I/O thread ---------------------------------------------------------------

void Bulk::loop() {
  epoll_event evs[16];
  while (!stop_.load(std::memory_order_acquire)) {
    int n = ::epoll_wait(epoll_, evs, 16, -1);
    if (n < 0 && errno != EINTR) fatal("bulk: epoll_wait failed");
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == kEventToken) {
        std::uint64_t v;
        (void)!::read(event_, &v, sizeof v);
        kicked_.store(false, std::memory_order_seq_cst);  // before the queues are taken
        for (auto& p : peers_)
          if (p && p->fd >= 0) drain(*p);
        continue;
      }
      Peer& p = *peers_[evs[i].data.u64];
      if (p.fd < 0) continue;
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (!receive(p)) continue;
      }
      if (evs[i].events & EPOLLOUT) drain(p);
    }
    // Each worker that got something is woken once, after every read of
    // this round (a batch's several bodies often arrive together).
    wake_marked();
  }
}

void Bulk::wake_marked() {
  for (std::uint32_t li = 0; li < woken_.size(); ++li)
    if (woken_[li]) {
      woken_[li] = false;
      if (wake_) wake_(li);
    }
}

void Bulk::watch(Peer& p) {
  bool want = !p.sending.empty();
  if (want == p.want_out) return;
  p.want_out = want;
  epoll_event ev{};
  ev.events = want ? EPOLLIN | EPOLLOUT : EPOLLIN;
  ev.data.u64 = p.host;
  ::epoll_ctl(epoll_, EPOLL_CTL_MOD, p.fd, &ev);
}

// Tags a transfer and appends it to what is being written: under send_mu,
// so that the numbers follow the order on the wire.
void Bulk::push_tagged(Peer& p, Out&& o) {
  const auto header = bytes_of(&o.h, sizeof o.h);
  o.header_tag = p.out_tags.header_tag(header);
  o.body_tag = p.out_tags.body_tag(header, bytes_of(o.payload.data(), o.payload.size()));
  p.out_tags.advance();
  p.sending.push_back(std::move(o));
}

// Writes what the socket takes of p.sending (under send_mu): as many
// transfers as fit in one sendmsg (4 parts each: header, its tag, the
// payload, its tag), what is left of the first one first. 0, or the errno
// that ended the connection.
int Bulk::write_some(Peer& p) {
  constexpr std::size_t kBatch = 64;
  iovec iov[4 * kBatch];
  while (!p.sending.empty()) {
    int k = 0;
    std::size_t skip = p.sent;
    for (std::size_t t = 0; t < p.sending.size() && t < kBatch; ++t) {
      Out& o = p.sending[t];
      const iovec parts[4] = {{&o.h, sizeof o.h},
                              {o.header_tag.data(), o.header_tag.size()},
                              {o.payload.data(), o.payload.size()},
                              {o.body_tag.data(), o.body_tag.size()}};
      for (const iovec& part : parts) {
        if (skip >= part.iov_len) {
          skip -= part.iov_len;
          continue;
        }
        iov[k++] = {static_cast<char*>(part.iov_base) + skip, part.iov_len - skip};
        skip = 0;
      }
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = std::size_t(k);
    ssize_t w = ::sendmsg(p.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (errno == EINTR) continue;
      return errno;
    }
    // Whole transfers written leave the queue; the rest is counted in sent.
    std::size_t done = p.sent + std::size_t(w);
    bool partial = false;
    while (!p.sending.empty()) {
      const Out& o = p.sending.front();
      const std::size_t total = sizeof o.h + o.header_tag.size() + o.payload.size() + o.body_tag.size();
      if (done < total) {
        partial = true;
        break;
      }
      done -= total;
      bytes_sent_.fetch_add(o.payload.size(), std::memory_order_relaxed);
      p.sending.pop_front();
    }
    p.sent = done;
    if (partial) return 0;  // the socket's buffer is full: EPOLLOUT says when there is room
  }
  return 0;
}

void Bulk::drain(Peer& p) {
  int err = 0;
  {
    std::lock_guard<std::mutex> s(p.send_mu);
    if (p.fd < 0) return;
    {
      std::lock_guard<std::mutex> g(p.mu);
      p.taken.swap(p.queue);  // both keep their storage from burst to burst
    }
    for (Out& o : p.taken) push_tagged(p, std::move(o));
    p.taken.clear();
    err = write_some(p);
    if (!err) watch(p);
  }
  if (err) close_peer(p, std::strerror(err));
}

bool Bulk::receive(Peer& p) {
  static_assert(sizeof p.in == sizeof(BulkWireHeader) + abi::kSessionTagBytes);
  static_assert(sizeof p.ahead == sizeof p.in);
  // A whole header in p.in: authenticated first (its tag), then checked,
  // before anything is allocated or delivered.
  const auto accept_header = [this, &p] {
    const BulkWireHeader& h = p.in.h;
    if (!abi::SessionDirection::equal(p.in_tags.header_tag(bytes_of(&h, sizeof h)), p.in.tag.data())) {
      close_peer(p, "a transfer header failed its tag (injected, replayed or reordered)");
      return false;
    }
    if (h.magic != kBulkMagic || (h.kind != kRequest && h.kind != kResponse) || h.pad[0] || h.pad[1] ||
        h.pad[2] || h.id == 0 || !on_host(h.from, p.host) || h.to - first_ >= local_ || h.length > kMaxBulkBytes) {
      close_peer(p, "malformed transfer header");
      return false;
    }
    // The buffer grows with the bytes that arrive, not to what the header
    // claims: a header alone costs at most kFirstChunk.
    p.body.assign(std::min<std::uint64_t>(h.length, kFirstChunk), std::byte{0});
    p.body_got = 0;
    p.tag_got = 0;
    return true;
  };
  for (;;) {
    // Reading: the header and its tag, then the body, then the body's tag
    // together with the next transfer's header and tag, if they are there
    // (one readv per transfer on a busy connection, not three recvs).
    iovec iov[3];
    int k = 0;
    const bool whole_body_room = p.in_got == sizeof p.in && p.body.size() == p.in.h.length;
    if (p.in_got < sizeof p.in) {
      iov[k++] = {reinterpret_cast<char*>(&p.in) + p.in_got, sizeof p.in - p.in_got};
    } else {
      if (p.body_got < p.body.size()) iov[k++] = {p.body.data() + p.body_got, p.body.size() - p.body_got};
      if (whole_body_room) {
        iov[k++] = {p.body_tag.data() + p.tag_got, p.body_tag.size() - p.tag_got};
        iov[k++] = {&p.ahead, sizeof p.ahead};
      }
    }
    std::size_t want = 0;
    for (int i = 0; i < k; ++i) want += iov[i].iov_len;
    const ssize_t r = ::readv(p.fd, iov, k);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      close_peer(p, std::strerror(errno));
      return false;
    }
    if (r == 0) {
      // The other instance closed: the run is over there, or it died (the
      // dataplane tells the runtime, which ends this instance too). A
      // transfer cut in the middle is reported; an idle close is normal.
      close_peer(p, p.in_got ? "closed in the middle of a transfer" : "");
      return false;
    }
    std::size_t left = std::size_t(r), ahead = 0;
    if (p.in_got < sizeof p.in) {
      p.in_got += left;
      if (p.in_got == sizeof p.in && !accept_header()) return false;
    } else {
      const std::size_t body = std::min(left, p.body.size() - p.body_got);
      p.body_got += body;
      left -= body;
      if (whole_body_room) {
        const std::size_t tag = std::min(left, p.body_tag.size() - p.tag_got);
        p.tag_got += tag;
        ahead = left - tag;
      } else if (p.body_got == p.body.size()) {
        p.body.resize(std::min<std::uint64_t>(p.in.h.length, 2 * p.body.size()));
      }
    }
    if (p.in_got == sizeof p.in && p.body_got == p.in.h.length && p.tag_got == p.body_tag.size()) {
      if (!abi::SessionDirection::equal(p.in_tags.body_tag(bytes_of(&p.in.h, sizeof p.in.h),
                                                            bytes_of(p.body.data(), p.body.size())),
                                        p.body_tag.data())) {
        close_peer(p, "a transfer's bytes failed their tag");
        return false;
      }
      p.in_tags.advance();
      // A whole transfer: to the receiving worker's inbox; the worker is
      // woken after this round of reads (loop()).
      const std::uint32_t li = p.in.h.to - first_;
      bytes_received_.fetch_add(p.body.size(), std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> g(inbox_[li]->mu);
        inbox_[li]->items.push_back(Arrival{Kind(p.in.h.kind), p.in.h.from, p.in.h.id, std::move(p.body)});
      }
      woken_[li] = true;
      p.body = {};
      p.body_got = 0;
      p.tag_got = 0;
      // What was read of the next transfer's header.
      std::memcpy(&p.in, &p.ahead, ahead);
      p.in_got = ahead;
      if (p.in_got == sizeof p.in && !accept_header()) return false;
    }
    // A short read emptied the socket: epoll says when there is more.
    if (std::size_t(r) < want) return true;
  }
}

void Bulk::close_peer(Peer& p, const std::string& why) {
  wake_marked();  // what arrived before stays delivered
  p.open.store(false, std::memory_order_release);
  {
    std::lock_guard<std::mutex> s(p.send_mu);  // no worker is writing to it
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, p.fd, nullptr);
    ::close(p.fd);
    p.fd = -1;
    p.sending.clear();
  }
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.queue.clear();
  }
  // After the run a peer closes as it exits. Before, a reference already in
  // a slot could never complete: the run cannot go on. A peer that died is
  // reported by the dataplane, which ends this instance (fate sharing) and
  // names that host; a peer whose stop came before ours closes early. Give
  // both 2 s, then end the instance with the same status.
  for (int i = 0; i < 200; ++i) {
    if (stop_.load(std::memory_order_acquire) || (finishing_ && finishing_())) return;
    ::usleep(10'000);
  }
  std::fprintf(stderr, "gossamer: the TCP connection for large bodies to host %u was lost (%s); stopping this instance\n",
               p.host, why.empty() ? "closed by the other end" : why.c_str());
  std::fflush(stderr);
  std::_Exit(kExitBulkLost);
}

}  // namespace gossamer::detail
