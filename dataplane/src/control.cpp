// The control stage, on core 0 (dataplane.hpp): the unix socket, attach and
// detach, the applications' lifecycle (peers.cpp: the start barrier and the
// peers' announces).
#include "dataplane.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <spdlog/spdlog.h>

#include "clock.hpp"
#include "shm_access.hpp"

namespace gossamer::dataplane {

namespace {

// Who is at the other end of an attach socket, as the kernel says
// (SO_PEERCRED: the credentials at connect time); what the request claims is
// not used to decide anything. Without an answer, nobody: uid -1.
ucred peer_cred(int fd) {
  ucred cr{};
  socklen_t len = sizeof cr;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) cr = {0, uid_t(-1), gid_t(-1)};
  return cr;
}

// Its executable's short name, for the metrics' `app` label: letters,
// digits, '_', '-' and '.', anything else as '_'.
std::string process_name(std::uint32_t pid) {
  std::string name;
  if (pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
    std::getline(f, name);
  }
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  return name.empty() ? "unknown" : name;
}


}  // namespace

// ---- the unix socket -----------------------------------------------------------
//
// Nothing here blocks: the listening socket, the sockets of attaches in
// progress and the applications' sockets are in control_epoll_fd_, which is
// itself in core 0's sleep set. An accepted socket waits there until its
// attach message arrives (or kAttachWaitMs pass); core 0 keeps polling.

namespace {
constexpr std::uint64_t kTagListen = 1, kTagAttaching = 2, kTagApp = 3;  // << 32 | fd
constexpr std::size_t kMaxAttaching = 16;   // attaches in progress; a newer one displaces the oldest
constexpr std::uint64_t kAttachWaitMs = 2000;

void watch(int epfd, int fd, std::uint64_t kind) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = kind << 32 | std::uint32_t(fd);
  ::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}
}  // namespace

std::string Dataplane::open_socket() {
  std::filesystem::path p(socket_path_);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  ::unlink(socket_path_.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return std::string("socket: ") + std::strerror(errno);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof sa.sun_path) return "dataplane.socket path too long: " + socket_path_;
  std::memcpy(sa.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  // Created with no access, then opened to the configured group: no window
  // in which anybody else could connect.
  mode_t old = ::umask(0777);
  int r = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::umask(old);
  if (r != 0) return "cannot bind " + socket_path_ + ": " + std::strerror(errno);
  mode_t mode = 0600;
  if (!cfg_.dataplane.socket_group.empty()) {
    group* g = ::getgrnam(cfg_.dataplane.socket_group.c_str());
    if (!g) return "dataplane.socket_group '" + cfg_.dataplane.socket_group + "' does not exist";
    if (::chown(socket_path_.c_str(), ::geteuid(), g->gr_gid) != 0)
      return "cannot chown " + socket_path_ + ": " + std::strerror(errno);
    mode = 0660;
  }
  ::chmod(socket_path_.c_str(), mode);
  if (::listen(listen_fd_, 64) != 0) return std::string("listen: ") + std::strerror(errno);
  control_epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (control_epoll_fd_ < 0) return std::string("epoll_create1: ") + std::strerror(errno);
  watch(control_epoll_fd_, listen_fd_, kTagListen);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagControl;
  if (::epoll_ctl(cores_[0]->epoll_fd, EPOLL_CTL_ADD, control_epoll_fd_, &ev) != 0)
    return std::string("epoll_ctl: ") + std::strerror(errno);
  return "";
}

// What rx posted, what epoll says is ready (without waiting), then the
// applications that went bad (an EOF stays ready until the socket leaves
// the set).
bool Dataplane::poll_control(Core&) {
  control_ready_ = false;
  const bool posted = !control_events_.empty();
  for (; !control_events_.empty(); control_events_.pop_front()) {
    const ControlEvent& e = control_events_.front();
    if (e.boot) peer_restarted_control(e.peer, e.boot);
    else on_announce(e.peer, e.rec, e.an);
  }
  epoll_event evs[32];
  const int n = ::epoll_wait(control_epoll_fd_, evs, 32, 0);
  for (int i = 0; i < n; ++i) control_event(evs[i].data.u64);
  if (n == 32) control_ready_ = true;  // more may be ready
  sweep_apps();
  return posted || n > 0;
}

void Dataplane::control_event(std::uint64_t tag) {
  const int fd = int(std::uint32_t(tag));
  switch (tag >> 32) {
    case kTagListen: return accept_apps();
    case kTagAttaching:
      ::epoll_ctl(control_epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      std::erase_if(attaching_, [fd](const Attaching& p) { return p.fd == fd; });
      return attach(fd);
    case kTagApp:
      for (auto& a : apps_)
        if (a->sock == fd) return app_message(*a);
      return;
  }
}

void Dataplane::accept_apps() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (attaching_.size() >= kMaxAttaching) {
      // Full: the oldest gives way. An application sends its attach message
      // right after connecting, so only a connection that has been silent
      // while kMaxAttaching newer ones arrived is dropped; refusing the new
      // one instead would let 16 silent connections lock every application
      // out.
      const Attaching oldest = attaching_.front();
      attaching_.erase(attaching_.begin());
      ::epoll_ctl(control_epoll_fd_, EPOLL_CTL_DEL, oldest.fd, nullptr);
      refuse(oldest.fd, "no attach message while " + std::to_string(kMaxAttaching) + " newer connections arrived");
    }
    attaching_.push_back({fd, tsc_now() + tsc_hz_ / 1000 * kAttachWaitMs});
    watch(control_epoll_fd_, fd, kTagAttaching);
  }
}

void Dataplane::expire_attaches(std::uint64_t now) {
  std::erase_if(attaching_, [&](const Attaching& p) {
    if (std::int64_t(now - p.deadline) < 0) return false;
    ::epoll_ctl(control_epoll_fd_, EPOLL_CTL_DEL, p.fd, nullptr);
    refuse(p.fd, "no attach message within " + std::to_string(kAttachWaitMs / 1000) + " s");
    return true;
  });
}

void Dataplane::send_msg(App& a, std::uint32_t type, std::uint32_t host, const std::string& text) {
  abi::DataplaneMessage m{};
  m.type = type;
  m.host = host;
  m.host_count = hosts_;
  std::snprintf(m.text, sizeof m.text, "%s", text.c_str());
  ::send(a.sock, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Dataplane::refuse(int fd, const std::string& why, bool denied) {
  if (denied) ++cores_[0]->stats.apps_denied;
  else ++cores_[0]->stats.apps_refused;
  spdlog::warn("attach {}: {}", denied ? "denied" : "refused", why);
  abi::DataplaneMessage m{};
  m.type = abi::kMsgRefused;
  m.host = self_;
  m.host_count = hosts_;
  std::snprintf(m.text, sizeof m.text, "%s", why.c_str());
  ::send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

// An accepted socket that epoll reported readable (its message, or EOF).
void Dataplane::attach(int fd) {
  alignas(8) std::uint8_t buf[512];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buf, sizeof buf};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t n = ::recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  int fds[4] = {-1, -1, -1, -1};
  int nfds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); n >= 0 && c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = int((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k && nfds < 4; ++i) std::memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  }
  auto close_fds = [&] {
    for (int i = 0; i < nfds; ++i) ::close(fds[i]);
  };
  if (n <= 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    close_fds();
    return refuse(fd, n < 0 ? std::string("attach message: ") + std::strerror(errno)
                            : "attach message truncated or missing");
  }
  AttachCheck chk{self_, hosts_, 0, false, nfds};
  abi::SegmentHeader hdr{};
  if (nfds >= 1) {
    struct stat st{};
    if (::fstat(fds[0], &st) == 0) chk.segment_size = std::uint64_t(st.st_size);
    int seals = ::fcntl(fds[0], F_GET_SEALS);
    chk.sealed = seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW);
    if (chk.segment_size >= sizeof hdr) ::pread(fds[0], &hdr, sizeof hdr, 0);
  }
  abi::SegmentLayout layout{};
  std::string why = check_attach(buf, std::size_t(n), hdr, chk, &layout);
  if (!why.empty()) {
    close_fds();
    return refuse(fd, why);
  }
  abi::AttachRequest req;
  std::memcpy(&req, buf, sizeof req);
  // Which run, and may this attacher join it (app.hpp claim_run, may_join)?
  const ucred cred = peer_cred(fd);
  RunClaim claim;
  why = claim_run(req, self_, tokens_, &claim);
  std::uint32_t owner = cred.uid;
  if (why.empty() && !claim.issued) why = check_owner(claim, cred.uid, &owner);
  if (!why.empty()) {
    close_fds();
    return refuse(fd, why, true);
  }
  void* base = ::mmap(nullptr, layout.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  if (base == MAP_FAILED) {
    close_fds();
    return refuse(fd, std::string("cannot map the segment: ") + std::strerror(errno));
  }
  auto a = std::make_unique<App>();
  a->sock = fd;
  a->memfd = fds[0];
  a->eventfd = fds[1];
  a->pid = req.pid;
  a->peer_pid = std::uint32_t(cred.pid);
  a->uid = cred.uid;
  a->owner = owner;
  a->name = process_name(a->peer_pid);
  // A run is named by GOSSAMER_RUN_ID when given (so that a different
  // build on another host is found and refused), else by the build-id.
  a->build_hash = hash_build_id(req.build_id, req.build_id_len);
  a->key = claim.key;
  a->issued = claim.issued;
  a->instance = std::random_device{}();
  a->total = req.total_threads;
  abi::host_threads(a->total, hosts_, self_, &a->first, &a->local);
  a->base = static_cast<std::uint8_t*>(base);
  a->bytes = layout.bytes;
  a->layout = layout;
  // Before the bookkeeping below (kLanes words per pair and lane).
  if (apps_.size() >= cfg_.dataplane.max_applications) {
    ::munmap(base, layout.bytes);
    a->base = nullptr;
    close_fds();
    return refuse(fd, "this dataplane has " + std::to_string(apps_.size()) +
                          " applications attached, its limit (dataplane.max_applications)");
  }
  a->tail.assign(a->local, 0);
  for (std::uint32_t i = 0; i < a->local; ++i)
    a->tail[i] = load_acquire<std::uint32_t>(&a->ring(i)->tail);
  std::size_t cells = std::size_t(a->local) * a->total;
  a->flows.resize(std::size_t(hosts_) * a->local);
  for (std::uint32_t h = 0; h < hosts_; ++h)
    for (std::uint32_t i = 0; i < a->local; ++i) a->flow(h, i).set_conn(std::uint8_t(i % conns_per_host_));
  a->out_req.assign(abi::kLanes * cells, 0);
  a->in_req.assign(abi::kLanes * cells, 0);
  a->out_resp.assign(cells, 0);
  a->client_out.assign(cells, 0);
  a->trustee_out.assign(cells, 0);
  a->client_epoch.assign(cells, 0);
  a->trustee_epoch.assign(cells, 0);
  for (const auto& other : apps_)
    if (other->key == a->key) {
      ::munmap(base, layout.bytes);
      a->base = nullptr;
      close_fds();
      return refuse(fd, "an instance of this run (same binary and GOSSAMER_RUN_ID) is already attached "
                        "(pid " + std::to_string(other->pid) + ")");
    }
  // Its kicks wake every sleeping core: edge triggered, so that each write
  // is an event for every epoll set, and nobody reads the eventfd (a read
  // by one core would take the event from a core that had not collected
  // it yet). Its counter cannot reach 2^64 - 1.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = kTagKick;
  for (auto& k : cores_) ::epoll_ctl(k->epoll_fd, EPOLL_CTL_ADD, a->eventfd, &ev);
  watch(control_epoll_fd_, a->sock, kTagApp);
  ++cores_[0]->stats.apps_attached;
  spdlog::info("attached pid {} uid {} ({} threads in the rack, {} here from {}), run {} key {:016x}", a->pid,
               a->uid, a->total, a->local, a->first, claim.id.empty() ? "by build-id" : claim.id, a->key);
  send_msg(*a, abi::kMsgAttachOk, self_, "");
  apps_.push_back(std::move(a));
  publish_apps();
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_) announce(h, wire::kRecAttach, *apps_.back());
  check_starts();
}

// A run without a token (a hand-started one) is bound to the uid of its
// first instance in the rack: when a peer has announced one, its owner
// decides; else this attacher becomes the owner. "" or why not.
std::string Dataplane::check_owner(const RunClaim& claim, std::uint32_t uid, std::uint32_t* owner) const {
  *owner = uid;
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    auto it = peers_[h].apps.find(claim.key);
    if (it == peers_[h].apps.end()) continue;
    const std::uint32_t o = it->second.a.owner;
    if (!may_join(uid, o))
      return "run " + (claim.id.empty() ? std::string("of this build-id") : claim.id) + " belongs to uid " +
             std::to_string(o) + " (its instance on host " + std::to_string(h) + " (" + cfg_.rack.hosts[h].name +
             ")); uid " + std::to_string(uid) + " may not join it";
    *owner = o;
  }
  return "";
}

// Out of the list at once; its memory and descriptors go when every core
// has moved on to a list without it (free_retired).
void Dataplane::drop_app(std::size_t i, bool do_announce, const char* why) {
  std::unique_ptr<App> a = std::move(apps_[i]);
  apps_.erase(apps_.begin() + std::ptrdiff_t(i));
  spdlog::info("detached pid {}: {}", a->pid, why);
  if (do_announce)
    for (std::uint32_t h = 0; h < hosts_; ++h)
      if (h != self_) announce(h, wire::kRecDetach, *a);
  a->bad = true;
  ++cores_[0]->stats.apps_detached;
  // Its socket is ours alone (core 0): out of the epoll set now, or an
  // EOF there would end every sleep until the descriptor closes.
  ::epoll_ctl(control_epoll_fd_, EPOLL_CTL_DEL, a->sock, nullptr);
  publish_apps();
  retired_.back().app = std::move(a);
}

void Dataplane::release(App& a) {
  close_exchanges(a);
  if (a.base) ::munmap(a.base, a.bytes);
  if (a.eventfd >= 0) {
    for (auto& k : cores_) ::epoll_ctl(k->epoll_fd, EPOLL_CTL_DEL, a.eventfd, nullptr);
    ::close(a.eventfd);
  }
  if (a.sock >= 0) ::close(a.sock);
  if (a.memfd >= 0) ::close(a.memfd);
}

// Applications that broke the contract, went away or detached: out. One
// whose detach drain still runs on other cores waits for it.
void Dataplane::sweep_apps() {
  for (std::size_t i = apps_.size(); i-- > 0;) {
    App& a = *apps_[i];
    if (!a.bad || a.drains_pending) continue;
    if (a.bad_reason.empty()) {
      const char* f = a.failure.load();
      a.bad_reason = f ? f : "broke the contract";
    }
    if (a.bad_reason != "detached") spdlog::warn("pid {}: {}", a.pid, a.bad_reason);
    drop_app(i, true, a.bad_reason.c_str());
  }
}

void Dataplane::app_message(App& a) {
  if (a.bad) return;  // on its way out (sweep_apps): counted once
  abi::AppMessage m{};
  ssize_t n = ::recv(a.sock, &m, sizeof m, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n == 0 || n < 0) {
    if (a.bad_reason.empty()) a.bad_reason = "the application went away (exit or kill) without detaching";
    a.bad = true;
    ++cores_[0]->stats.apps_lost;
    return;
  }
  if (n != sizeof m || m.type != abi::kMsgDetach || a.drains_pending) {
    if (a.bad_reason.empty()) a.bad_reason = "unexpected message on the attach socket";
    a.bad = true;
    return;
  }
  // Every core serves what the application rang before detaching (each
  // its own threads' rings); once all have, confirm (detached()).
  Core& k0 = *cores_[0];
  drain_doorbells(k0, a);
  a.drains_pending = ncores_ - 1;
  for (std::uint32_t k = 1; k < ncores_; ++k) {
    auto* msg = new CoreMsg{CoreMsg::Kind::kDrain};
    msg->app = &a;
    post(k0, k, msg);
  }
  if (!a.drains_pending && !a.bad) detached(a);  // bad: the drain found a broken ring
}

void Dataplane::detached(App& a) {
  cores_[0]->transport->pump();
  send_msg(a, abi::kMsgDetached, self_, "");
  a.bad_reason = "detached";
  a.bad = true;
}

}  // namespace gossamer::dataplane
