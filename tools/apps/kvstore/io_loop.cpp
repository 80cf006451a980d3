// The per-thread I/O loop: one fiber per runtime thread owns that thread's
// client connections. It polls its epoll set with a zero timeout and yields
// to the thread's other work (its trustee serving shard requests, answers
// arriving) between rounds; no call in a round blocks the thread.
//
// Each host's first thread also listens and deals accepted sockets round
// robin to its host's threads (spawn_on a local thread: the descriptor is
// valid in this process only, and stays on this host).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstring>

#include <gossamer/abi/attach.hpp>

#include "server.hpp"

namespace hydra {

namespace {
constexpr std::uint64_t kListenerTag = ~std::uint64_t(0);
constexpr std::size_t kReadChunk = 64u << 10;
constexpr std::size_t kReadBudget = 1u << 20;  // per connection per round: others get their turn
constexpr std::size_t kAcceptsPerRound = 64;

// The loop of this thread, and sockets handed to it before it started.
// Fibers never change OS thread, so thread_local is this runtime thread's.
thread_local Loop* tl_loop = nullptr;
thread_local bool tl_loop_gone = false;
thread_local std::vector<int> tl_inbox;
thread_local std::unique_ptr<char[]> tl_read_buf;  // kReadChunk bytes (Loop::read_input)

// This thread's copy of the keys' access clock (shard.hpp, tl_lru_clock):
// the coarse monotonic clock, a read of the vDSO's page without a TSC read.
void tick_lru_clock() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  tl_lru_clock = std::uint32_t(std::uint64_t(ts.tv_sec) * 1000 + std::uint64_t(ts.tv_nsec) / 1000000);
}

void drop_socket(int fd) {
  ::close(fd);
  g_stats.connected_clients.fetch_sub(1, std::memory_order_relaxed);
}
}  // namespace

Loop::Loop(const ShardTable& shards) : shards_(shards), nshards_(shards.count), events_(256) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ < 0) {
    std::fprintf(stderr, "hydra: epoll_create1: %s\n", std::strerror(errno));
    g_exit_code.store(1);
    request_stop();
  }
  std::uint32_t count = 0;
  gossamer::abi::host_threads(std::uint32_t(gossamer::thread_count()), std::uint32_t(gossamer::host_count()),
                              std::uint32_t(gossamer::host_index()), &first_local_, &count);
  local_count_ = count ? count : 1;
  leader_ = gossamer::thread_index() == first_local_;
  local_index_ = gossamer::thread_index() - first_local_;
  g_order[local_index_].epoll.store(epoll_, std::memory_order_relaxed);  // asked during naps (order.cpp)
  setup_wake();  // idle.cpp
  setup_fold();  // fold.cpp
}

Loop* Loop::current() { return tl_loop; }

Loop::~Loop() {
  if (epoll_ >= 0) {
    g_order[local_index_].epoll.store(-1, std::memory_order_relaxed);  // no other loop polls it now (order.cpp)
    ::close(epoll_);
  }
  if (fold_.stat_fd >= 0) ::close(fold_.stat_fd);  // fold.cpp's, on the host's first loop
}

void Loop::hand_in(int fd) {
  if (tl_loop_gone || g_stop.load(std::memory_order_relaxed)) {
    drop_socket(fd);
    g_order_transit.fetch_sub(1, std::memory_order_acq_rel);  // dealt by spawn_on: several loops (order.cpp)
  } else {
    tl_inbox.push_back(fd);  // adopted at the loop's next round
  }
}

bool Loop::start_listening() {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(g_config.port);
  if (::inet_pton(AF_INET, g_config.bind.c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "hydra: --bind %s is not an IPv4 address\n", g_config.bind.c_str());
    return false;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  // SO_REUSEADDR only (not SO_REUSEPORT): a second server on the port fails
  // here instead of silently sharing its connections.
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 511) != 0) {
    std::fprintf(stderr, "hydra: host %zu: cannot listen on %s:%u: %s\n", gossamer::host_index(),
                 g_config.bind.c_str(), unsigned(g_config.port), std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return false;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerTag;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return false;
  }
  listen_fd_ = fd;
  std::printf("hydra: host %zu of %zu listening on %s:%u (threads %u..%u of %zu, one shard each)\n",
              gossamer::host_index(), gossamer::host_count(), g_config.bind.c_str(), unsigned(g_config.port),
              first_local_, first_local_ + local_count_ - 1, gossamer::thread_count());
  std::fflush(stdout);
  return true;
}

// ---- the loop ------------------------------------------------------------------

void Loop::run() {
  tl_loop = this;
  find_own_shard();
  if (leader_ && epoll_ >= 0 && !start_listening()) {
    g_exit_code.store(1);
    request_stop();
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(g_config.seconds));
  std::uint64_t idle_rounds = 0, round = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    bool worked = false, periodic = false;
    kick_sleepers();                            // loops waiting for what the last pass published (idle.cpp)
    tick_lru_clock();                           // the keys' access clock (shard.hpp)
    if (fold_.on) fold_round();                 // the CPUs the loops run on (fold.cpp)
    if (!tl_inbox.empty()) {                    // sockets dealt to this thread
      std::vector<int> fds;
      fds.swap(tl_inbox);
      for (int fd : fds) adopt(fd);
      if (local_count_ > 1) order_.adopted += std::uint32_t(fds.size());  // read by this round's poll (order.cpp)
      worked = true;
    }
    if (listen_paused_until_ != std::chrono::steady_clock::time_point{} &&
        std::chrono::steady_clock::now() >= listen_paused_until_) {
      listen_paused_until_ = {};
      if (local_count_ > 1) g_order_transit.fetch_sub(1, std::memory_order_acq_rel);  // the backlog is read again (order.cpp)
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenerTag;
      ::epoll_ctl(epoll_, EPOLL_CTL_ADD, listen_fd_, &ev);
    }
    if (!advance_.empty() || fence_work_) fence_rounds();  // transactions (transactions.cpp)
    if (!messages_.empty()) {                   // pub/sub messages for this loop's subscribers (pubsub.cpp)
      deliver_messages();
      worked = true;
    }
    if (!kills_.empty()) do_kills();            // CLIENT KILL (clients.cpp)
    if (g_mailboxes[own_shard_].ready.load(std::memory_order_relaxed) || !tl_remote_events.empty()) {
      take_mail();                              // keyspace events, MONITOR lines (notify.cpp)
      worked = true;
    }
    if (!tl_served.empty()) dispatch_served();  // blocked connections this thread's shard served (blocking.cpp)
    if (!tl_returns.empty()) dispatch_returns();  // credit back to the pushes whose replies wait (wake.cpp)
    if (!served_.empty() || !unblocks_.empty()) {  // ... and those served to this loop's connections
      handle_served();
      worked = true;
    }
    if (!blocked_.empty()) block_timeouts();
    worked |= poll_once(0);                     // accept, read, execute, write
    std::size_t retried = 0;                    // ordered commands: in place, or held and retried now (order.cpp)
    if (!order_.entries.empty()) retried = order_rounds();
    if (!dirty_.empty()) {                      // replies completed by shard answers
      const std::size_t marked = dirty_.size();
      const std::uint64_t ran = commands_;
      drain_dirty();
      // Held commands retried and held again are no work: the round may
      // count as idle, so that the loop yields or naps (idle.cpp) instead
      // of spinning on the core the loop it waits for needs. Any command
      // that ran (commands_ counts those past the order) is work.
      worked |= marked > retried || commands_ != ran;
    }
    if (reply_check_) {                         // a reply backlog grew (flush)
      reply_check_ = false;
      bound_replies();
    }
    if (worked) {
      idle_rounds = 0;
      busy();
    } else {
      periodic = idle(++idle_rounds);           // may nap (idle.cpp)
    }
    // --seconds and the expiry sweep: checked every 1024 rounds, and every
    // round when napping (such a round lasts up to idle_nap_ms). The sweep
    // comes last: the counters the next idle() reads are published at the yield.
    if ((++round & 1023) == 0 || periodic) {
      const auto now = std::chrono::steady_clock::now();
      if (g_config.seconds > 0 && now >= deadline) request_stop();
      now_ms_ = hydra::now_ms();                // CLIENT LIST's idle=
      bound_replies();                          // --max-reply-memory (pubsub.cpp)
      check_memory(now);                        // --maxmemory (memory.cpp)
      if (now >= next_sweep_) sweep(now);
    }
    if (!batch_used_.empty()) send_batches();  // this round's GETs and SETs for other shards (batch.cpp)
    gossamer::yield();                          // the trustee serves, answers arrive
  }
  stop_everything();
}

// Active expiry (shard.cpp, shard_sweep) on this thread's own shard, every
// 100 ms as Redis's default hz 10. A local apply: it runs at once, and
// counts once in the runtime's local_applies, which trustee_quiet
// discounts (sweeps_), so that the sweep never ends a quiet spell.
void Loop::sweep(std::chrono::steady_clock::time_point now) {
  next_sweep_ = now + std::chrono::milliseconds(100);
  ++inflight_;
  ++sweeps_;
  shard(gossamer::thread_index()).apply_then([](Shard& s) { return shard_sweep(s); }, [this](Count) { --inflight_; });
}

bool Loop::poll_once(int timeout_ms) {
  if (epoll_ < 0) return false;
  order_begin(timeout_ms > 0);  // the arrival order's frontier (order.cpp)
  int n = ::epoll_wait(epoll_, events_.data(), int(events_.size()), timeout_ms);
  order_woke(timeout_ms > 0);
  if (n < 0 || std::size_t(n) == events_.size()) order_.cut = true;  // a signal, or more may be ready
  for (int i = 0; i < n; ++i) {
    if (events_[i].data.u64 == kListenerTag) accept_all();
    else if (events_[i].data.u64 == kWakeTag) drain_wake();  // a kick (idle.cpp)
    else on_event(std::uint32_t(events_[i].data.u64), events_[i].events);
  }
  order_publish();
  return n > 0;  // EINTR (a signal) counts as nothing ready
}

// ---- connections ----------------------------------------------------------------

void Loop::accept_all() {
  for (std::size_t i = 0;; ++i) {
    if (i == kAcceptsPerRound) {  // more may wait: the arrival order's frontier stays (order.cpp)
      order_.cut = true;
      return;
    }
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the listener stays readable (level-triggered),
        // so leave it out of the epoll set for a while instead of spinning,
        // and say so once per pause.
        std::fprintf(stderr, "hydra: accept: %s (raise the descriptor limit); not accepting for 100 ms\n",
                     std::strerror(errno));
        ::epoll_ctl(epoll_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        // The connections left in the backlog hold the arrival order's
        // frontier as a socket in transit does (order.cpp), once per pause.
        if (local_count_ > 1 && listen_paused_until_ == std::chrono::steady_clock::time_point{})
          g_order_transit.fetch_add(1, std::memory_order_acq_rel);
        listen_paused_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      }
      return;  // EAGAIN: none left
    }
    g_stats.connections_received.fetch_add(1, std::memory_order_relaxed);
    if (std::size_t(g_stats.connected_clients.load(std::memory_order_relaxed)) >= g_config.maxclients) {
      static const char kFull[] = "-ERR max number of clients reached\r\n";
      [[maybe_unused]] ssize_t w = ::send(fd, kFull, sizeof kFull - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      g_stats.rejected_connections.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    g_stats.connected_clients.fetch_add(1, std::memory_order_relaxed);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (local_count_ > 1) {  // receive time stamps, and unread until its loop reads it (order.cpp)
      ::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
      g_order_transit.fetch_add(1, std::memory_order_acq_rel);
    }
    std::uint32_t target = first_local_ + next_target_++ % local_count_;
    if (target == gossamer::thread_index()) tl_inbox.push_back(fd);
    else gossamer::spawn_on(target, [fd] { Loop::hand_in(fd); });  // detached: it ends at once
  }
}

void Loop::adopt(int fd) {
  std::uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = std::uint32_t(conns_.size());
    conns_.emplace_back();
    gens_.push_back(0);
  }
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->gen = gens_[slot];
  c->id = g_stats.next_client_id.fetch_add(1, std::memory_order_relaxed);
  c->created_ms = c->active_ms = now_ms_ = hydra::now_ms();
  c->events = EPOLLIN | EPOLLRDHUP;
  epoll_event ev{};
  ev.events = c->events;
  ev.data.u64 = slot;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    drop_socket(fd);
    free_slots_.push_back(slot);
    return;
  }
  conns_[slot] = std::move(c);
}

Connection* Loop::find(std::uint32_t slot, std::uint32_t gen) {
  if (slot >= conns_.size() || !conns_[slot] || conns_[slot]->gen != gen) return nullptr;
  return conns_[slot].get();
}

void Loop::mark_dirty(std::uint32_t slot) {
  Connection* c = conns_[slot].get();
  if (c && !c->dirty) {
    c->dirty = true;
    dirty_.push_back(slot);
  }
}

// A connection whose transaction holds shards stays (dead, without its
// socket) until the transaction ends and releases them (Loop::flush).
void Loop::close_connection(std::uint32_t slot, bool force) {
  Connection* c = conns_[slot].get();
  if (!c) return;
  if (c->fd >= 0) drop_socket(c->fd);  // close() also leaves the epoll set
  c->fd = -1;
  if (c->subscribed) unsubscribe_all(slot, *c);
  if (c->blocked) drop_blocked(*c);
  if (c->txn && !force) {
    c->dead = true;
    c->out.clear();
    c->written = 0;
    return;
  }
  unwatch_all(*c);
  conns_[slot].reset();
  ++gens_[slot];       // answers still owed to it find nothing (Loop::find)
  free_slots_.push_back(slot);
}

// Room for more requests: not closing, and neither too many replies owed
// nor too many unsent (backpressure: the client must read its replies).
bool Loop::can_execute(const Connection& c) const {
  return !c.closing && c.txn == 0 && c.blocked == 0 && c.held.empty() && c.pending.size() < g_config.max_pending &&
         c.out.size() - c.written + c.reply_bytes < g_config.max_output;
}

// Requests already buffered are executed after EOF too (can_execute).
bool Loop::reading_allowed(const Connection& c) const { return !c.eof && can_execute(c); }

void Loop::on_event(std::uint32_t slot, std::uint32_t ev) {
  Connection* c = slot < conns_.size() ? conns_[slot].get() : nullptr;
  if (!c) return;
  if (ev & EPOLLERR) return close_connection(slot);
  if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) {
    // A hang-up while this connection is not reading: the replies it is
    // owed cannot be delivered any more.
    if (!reading_allowed(*c)) {
      // A blocked client (BLPOP...) that goes away is dropped at once, as
      // Redis does: only EPOLLRDHUP is watched for it (update_events).
      if ((ev & EPOLLHUP) || (c->blocked && (ev & EPOLLRDHUP))) return close_connection(slot);
    } else if (!read_input(slot, *c)) {
      return close_connection(slot);
    }
  }
  flush(slot, *c);
}

// Reads what is there, up to this round's budget. False on a read error.
bool Loop::read_input(std::uint32_t slot, Connection& c) {
  std::size_t budget = kReadBudget;
  // With several loops, with the kernel's receive time (the arrival order, order.cpp).
  auto read_some = [&](char* buf, std::size_t len) -> ssize_t {
    return local_count_ > 1 ? recv_stamped(c.fd, buf, len, c.rx_stamp) : ::read(c.fd, buf, len);
  };
  while (budget > 0) {
    std::size_t old = c.in.size();
    std::size_t chunk = kReadChunk;
    // A large bulk under way: read it in bigger pieces, straight into the
    // input (resize zero-fills them first: about as much as the read
    // writes). Otherwise into this thread's scratch buffer, and append what
    // came: growing the string by a whole chunk to read into it zero-filled
    // 64 KiB per read, 63 % of Hydra's instructions under redis-benchmark
    // -P 16 (README, Performance).
    std::size_t have = old - c.consumed, want = c.parser.expected();
    if (want > have) chunk = std::max(chunk, std::min(want - have, budget));
    ssize_t n;
    if (chunk > kReadChunk) {
      c.in.resize(old + chunk);
      n = read_some(c.in.data() + old, chunk);
      c.in.resize(old + std::size_t(std::max<ssize_t>(n, 0)));
    } else {
      if (!tl_read_buf) tl_read_buf.reset(new char[kReadChunk]);  // not zeroed
      n = read_some(tl_read_buf.get(), chunk);
      if (n > 0) c.in.append(tl_read_buf.get(), std::size_t(n));
    }
    if (n > 0) {
      c.active_ms = now_ms_;
      budget -= std::min(budget, std::size_t(n));
      if (std::size_t(n) < chunk) break;  // drained
      if (budget == 0) order_.cut = true;  // more may be there: the arrival order's frontier stays (order.cpp)
      continue;
    }
    if (n == 0) {
      c.eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;
  }
  process_input(slot, c);
  return true;
}

// Parses and executes what the buffer holds, while the connection has room
// for more replies; stops at a protocol error (replied, then closed).
void Loop::process_input(std::uint32_t slot, Connection& c) {
  std::size_t prefetched = 0;  // requests before this offset had their keys prefetched (prefetch.cpp)
  while (can_execute(c)) {
    if (c.consumed >= prefetched) prefetched = prefetch_keys(c);
    std::string_view in(c.in);
    in.remove_prefix(c.consumed);
    std::size_t used = 0;
    auto r = c.parser.parse(in, used);
    if (r == resp::RequestParser::Result::kNeedMore) {
      if (in.size() > g_max_query.load(std::memory_order_relaxed)) protocol_error(c, "Protocol error: query buffer limit exceeded");
      break;
    }
    if (r == resp::RequestParser::Result::kError) {
      protocol_error(c, c.parser.error());
      break;
    }
    c.consumed += used;
    // The arguments are views into c.in, which nothing changes until the
    // next parse; execute copies what it keeps.
    if (c.parser.args().empty()) continue;
    if (!c.quiet) {
      execute(slot, c, c.parser.args());
    } else {  // CLIENT REPLY OFF / SKIP (clients.cpp)
      const std::size_t first = c.pending.size();
      execute(slot, c, c.parser.args());
      silence(c, first);
    }
  }
  // Drop consumed bytes: at once when all are, else when they are most.
  if (c.consumed == c.in.size()) {
    c.in.clear();
    c.consumed = 0;
  } else if (c.consumed > 0 && c.consumed >= c.in.size() / 2) {
    c.in.erase(0, c.consumed);
    c.consumed = 0;
  }
  if (c.in.empty() && c.in.capacity() > (4u << 20)) std::string().swap(c.in);  // after a large value
}

void Loop::protocol_error(Connection& c, const std::string& why) {
  g_stats.protocol_errors.fetch_add(1, std::memory_order_relaxed);
  Pending& p = c.pending.emplace_back();
  resp::error(p.reply, "ERR " + why);
  c.closing = true;  // the reply, then close (as Redis)
  c.in.clear();
  c.consumed = 0;
}

// Moves completed replies to the output in request order, executes what
// was waiting for room, writes, and closes the connection when it is done.
void Loop::flush(std::uint32_t slot, Connection& c) {
  // Until the socket takes no more, or nothing more can run: requests that
  // waited for room run once the replies before them have gone out (their
  // bytes are already read, so no EPOLLIN would ever bring them back).
  for (bool blocked = true; blocked;) {
    blocked = false;
    for (;;) {
      while (!c.pending.empty()) {
        if (c.pending.front().waiting != 0) {
          // A transaction's end marker at the front: all its replies are
          // complete, its shards can go (transactions.cpp).
          if (c.txn == 0 || c.base != c.txn_end) break;
          end_txn(c.txn);
          c.pending.front().waiting = 0;
        }
        if (!c.pending.front().silent) c.out += c.pending.front().reply;
        c.reply_bytes -= c.pending.front().counted;
        c.pending.pop_front();
        ++c.base;
      }
      if (c.dead) {
        if (c.txn == 0) return close_connection(slot, true);
        c.out.clear();
        return;
      }
      if (!c.held.empty()) {  // a command waiting for a fence, or EXEC for earlier replies
        retry_held(slot, c);
        if (!c.held.empty()) break;
        continue;
      }
      if (c.consumed == c.in.size()) break;
      if (!can_execute(c)) {
        blocked = true;
        break;
      }
      std::size_t before = c.base + c.pending.size();
      process_input(slot, c);  // requests that waited for room
      if (c.base + c.pending.size() == before) break;
    }
    while (c.written < c.out.size() && !holding(c)) {
      ssize_t n = ::send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
      if (n > 0) {
        c.written += std::size_t(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return close_connection(slot);  // the peer is gone
    }
    if (c.written == c.out.size()) {
      c.out.clear();
      c.written = 0;
      if (c.out.capacity() > (4u << 20)) std::string().swap(c.out);
    } else if (c.written > (1u << 20) && c.written >= c.out.size() / 2) {
      c.out.erase(0, c.written);
      c.written = 0;
    }
    note_backlog(c);  // --max-reply-memory (pubsub.cpp)
    blocked = blocked && c.out.empty() && can_execute(c);
  }
  // Done: asked to close (QUIT, protocol error) or the peer stopped sending,
  // and every reply it is owed has gone out.
  if ((c.closing || c.eof) && c.pending.empty() && c.out.empty()) return close_connection(slot);
  update_events(slot, c);
}

void Loop::update_events(std::uint32_t slot, Connection& c) {
  std::uint32_t want = 0;
  if (reading_allowed(c)) want |= EPOLLIN | EPOLLRDHUP;
  else if (c.blocked) want |= EPOLLRDHUP;
  if (c.written < c.out.size() && !holding(c)) want |= EPOLLOUT;
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = slot;
  if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev) == 0) c.events = want;
}

void Loop::drain_dirty() {
  // Flushing may execute requests whose answers (from this thread's own
  // trustee) mark connections dirty again: they are appended and handled
  // in this same pass.
  for (std::size_t i = 0; i < dirty_.size(); ++i) {
    std::uint32_t slot = dirty_[i];
    Connection* c = slot < conns_.size() ? conns_[slot].get() : nullptr;
    if (!c) continue;
    c->dirty = false;
    flush(slot, *c);
  }
  dirty_.clear();
}

// ---- stopping ---------------------------------------------------------------------

void Loop::stop_everything() {
  withdraw();      // no nap announced (idle.cpp)
  send_batches();  // their answers are owed (inflight_)
  if (leader_) propagate_stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  for (std::uint32_t s = 0; s < conns_.size(); ++s) close_connection(s, true);
  // Shard answers still owed run callbacks that name this loop.
  while (inflight_ > 0) gossamer::yield();
  tl_loop = nullptr;
  tl_loop_gone = true;
  for (int fd : tl_inbox) drop_socket(fd);
  tl_inbox.clear();
}

// A stop seen on one host (its signal, --seconds, a listen error) reaches
// the others: one fiber on each other host's first thread sets its flag.
void Loop::propagate_stop() {
  std::size_t hosts = gossamer::host_count();
  for (std::size_t h = 0; h < hosts; ++h) {
    if (h == gossamer::host_index()) continue;
    std::uint32_t first = 0, count = 0;
    gossamer::abi::host_threads(std::uint32_t(gossamer::thread_count()), std::uint32_t(hosts), std::uint32_t(h),
                                &first, &count);
    if (count) gossamer::spawn_on(first, [] { request_stop(); });
  }
}

}  // namespace hydra
