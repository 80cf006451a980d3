// The dataplane's loop: application doorbells -> connections -> DPDK, and
// DPDK -> connections -> application slots. One polling core, adaptive
// (spin, yield, then sleep on the applications' eventfds with a timeout that
// keeps the NIC and the retransmission timers served). NIC frames do not wake
// a sleep (the vdevs we run on have no rx interrupts), so the timeout grows
// with the time since the last work: tens of microseconds right after
// traffic, when a reply is likely, up to a millisecond on an idle host.
#include "dataplane.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <spdlog/spdlog.h>

namespace gossamer::dataplane {

namespace {
// Short: on a machine with fewer cores than pollers (our 2-core test hosts run
// two dataplanes and two applications), spinning delays the very processes
// that would produce the work. Measured with tools/bench/echo-rack: spin 2000
// and yield 200 gave 2.0 k requests/s with one outstanding and 105 k with 64;
// 20 and 20 give 15 k and 480 k.
constexpr std::uint32_t kSpin = 20, kYield = 20;
constexpr std::uint64_t kMinSleepNs = 20'000, kMaxSleepNs = 1'000'000;
// Sleep for this fraction of the time since the last work: a quiet host backs
// off to kMaxSleepNs within ~8 ms; a busy one wakes often enough that a frame
// waits for at most about 1/8 of the gap it arrived after.
constexpr std::uint64_t kSleepShift = 3;
constexpr std::uint16_t kBurst = 32;

template <class T>
T load_acquire(const void* p) {
  return std::atomic_ref<T>(*static_cast<T*>(const_cast<void*>(p))).load(std::memory_order_acquire);
}
template <class T>
void store_release(void* p, T v) {
  std::atomic_ref<T>(*static_cast<T*>(p)).store(v, std::memory_order_release);
}

std::uint32_t parse_ip(const std::string& s) {
  in_addr a{};
  ::inet_pton(AF_INET, s.c_str(), &a);
  return a.s_addr;
}

// The connected process, as the kernel knows it (an application's own
// claims are not used to name it).
std::uint32_t peer_pid(int fd) {
  ucred cr{};
  socklen_t len = sizeof cr;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 ? std::uint32_t(cr.pid) : 0;
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

Dataplane::Dataplane(const config::Config& cfg)
    : cfg_(cfg),
      self_(cfg.host.index),
      hosts_(std::uint32_t(cfg.rack.hosts.size())),
      conns_per_host_(std::max<std::uint32_t>(1, std::min<std::uint32_t>(cfg.connections.per_remote_host, 255))) {
  socket_path_ = cfg.dataplane_socket();
  for (const auto& h : cfg.rack.hosts) endpoints_.push_back({parse_ip(h.data.ip), h.data.port});
  self_ep_ = endpoints_[self_];
  // Incarnations are ordered by start time (4 ms ticks), so a frame of a
  // previous life can be told from one of the next.
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  boot_ = std::uint32_t((std::uint64_t(ts.tv_sec) * 1000 + std::uint64_t(ts.tv_nsec) / 1000000) >> 2);
  if (boot_ == 0) boot_ = 1;
}

Dataplane::~Dataplane() {
  while (!apps_.empty()) drop_app(apps_.size() - 1, false, "dataplane shutting down");
  close_metrics();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(socket_path_.c_str());
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (icmp_guard_fd_ >= 0) ::close(icmp_guard_fd_);
  if (port_started_) {
    rte_eth_dev_stop(port_id_);
    rte_eth_dev_close(port_id_);
  }
  if (eal_ready_) rte_eal_cleanup();
}

std::string Dataplane::start(const char* argv0) {
  std::vector<std::string> args{argv0};
  for (const auto& a : cfg_.dataplane.eal_args) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  if (rte_eal_init(int(argv.size()), argv.data()) < 0)
    return std::string("DPDK EAL initialisation failed: ") + rte_strerror(rte_errno) +
           " (check dataplane.eal_args)";
  eal_ready_ = true;
  tsc_hz_ = rte_get_tsc_hz();
  port_id_ = cfg_.dataplane.port;
  if (!rte_eth_dev_is_valid_port(port_id_))
    return "DPDK port " + std::to_string(port_id_) + " does not exist (" +
           std::to_string(rte_eth_dev_count_avail()) +
           " ports; give a --vdev such as net_af_packet0,iface=veth0 in dataplane.eal_args)";
  pool_ = rte_pktmbuf_pool_create("gsm_pool", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id()));
  if (!pool_) return std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno);
  rte_eth_conf conf{};
  if (int r = rte_eth_dev_configure(port_id_, 1, 1, &conf); r < 0)
    return "rte_eth_dev_configure: " + std::string(rte_strerror(-r));
  std::uint16_t nrx = 1024, ntx = 1024;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &nrx, &ntx);
  int sock = rte_eth_dev_socket_id(port_id_);
  if (int r = rte_eth_rx_queue_setup(port_id_, 0, nrx, sock < 0 ? 0 : unsigned(sock), nullptr, pool_); r < 0)
    return "rx queue setup: " + std::string(rte_strerror(-r));
  if (int r = rte_eth_tx_queue_setup(port_id_, 0, ntx, sock < 0 ? 0 : unsigned(sock), nullptr); r < 0)
    return "tx queue setup: " + std::string(rte_strerror(-r));
  if (int r = rte_eth_dev_start(port_id_); r < 0) return "port start: " + std::string(rte_strerror(-r));
  port_started_ = true;
  rte_ether_addr mac{};
  rte_eth_macaddr_get(port_id_, &mac);
  std::memcpy(mac_.data(), mac.addr_bytes, 6);
  if (cfg_.self().mac && std::memcmp(cfg_.self().mac->data(), mac_.data(), 6) != 0)
    spdlog::warn("the port's MAC differs from rack.hosts[{}].mac; peers will not reach us", self_);

  peers_.resize(hosts_);
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    Peer& p = peers_[h];
    p.ep = endpoints_[h];
    if (cfg_.rack.hosts[h].mac) {
      std::memcpy(p.mac.data(), cfg_.rack.hosts[h].mac->data(), 6);
      p.mac_known = true;
    } else {
      p.mac.fill(0xff);  // broadcast until we hear from it
    }
    if (h == self_) continue;
    for (std::uint32_t c = 0; c < conns_per_host_; ++c) {
      p.conns.push_back(std::make_unique<Connection>(std::uint16_t(self_), std::uint16_t(h),
                                                     std::uint8_t(c), cfg_.connections.credits,
                                                     boot_, tsc_hz_));
      p.conns.back()->set_coalescing(cfg_.connections.coalescing);
    }
    p.resets_seen.assign(conns_per_host_, 0);
  }

  // A kernel socket on our UDP port keeps the namespace's kernel from
  // answering our peers' frames with ICMP port-unreachable. Best effort.
  icmp_guard_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(self_ep_.port);
  sa.sin_addr.s_addr = self_ep_.ip;
  if (icmp_guard_fd_ >= 0 && ::bind(icmp_guard_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(icmp_guard_fd_);
    icmp_guard_fd_ = -1;
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  try {
    open_socket();
    open_metrics();
  } catch (const std::exception& e) {
    return e.what();
  }
  spdlog::info("host {} ({}) ready: port {} MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, {} peers x {} "
               "connections, credits {}, socket {}",
               self_, cfg_.self().name, port_id_, mac_[0], mac_[1], mac_[2], mac_[3], mac_[4], mac_[5],
               hosts_ - 1, conns_per_host_, cfg_.connections.credits, socket_path_);
  return "";
}

// ---- the unix socket -----------------------------------------------------------

void Dataplane::open_socket() {
  std::filesystem::path p(socket_path_);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  ::unlink(socket_path_.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof sa.sun_path) throw std::runtime_error("socket path too long");
  std::memcpy(sa.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  // Created with no access, then opened to the configured group: no window
  // in which anybody else could connect.
  mode_t old = ::umask(0777);
  int r = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::umask(old);
  if (r != 0) throw std::runtime_error("cannot bind " + socket_path_ + ": " + std::strerror(errno));
  mode_t mode = 0600;
  if (!cfg_.dataplane.socket_group.empty()) {
    group* g = ::getgrnam(cfg_.dataplane.socket_group.c_str());
    if (!g) throw std::runtime_error("dataplane.socket_group '" + cfg_.dataplane.socket_group + "' does not exist");
    if (::chown(socket_path_.c_str(), ::geteuid(), g->gr_gid) != 0)
      throw std::runtime_error("cannot chown " + socket_path_ + ": " + std::strerror(errno));
    mode = 0660;
  }
  ::chmod(socket_path_.c_str(), mode);
  if (::listen(listen_fd_, 64) != 0) throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = UINT64_MAX;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
}

void Dataplane::accept_apps() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    attach(fd);
  }
}

void Dataplane::send_msg(App& a, std::uint32_t type, std::uint32_t host, const std::string& text) {
  abi::DataplaneMessage m{};
  m.type = type;
  m.host = host;
  m.host_count = hosts_;
  std::snprintf(m.text, sizeof m.text, "%s", text.c_str());
  ::send(a.sock, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Dataplane::refuse(int fd, const std::string& why) {
  ++stats_.apps_refused;
  spdlog::warn("attach refused: {}", why);
  abi::DataplaneMessage m{};
  m.type = abi::kMsgRefused;
  m.host = self_;
  m.host_count = hosts_;
  std::snprintf(m.text, sizeof m.text, "%s", why.c_str());
  ::send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

void Dataplane::attach(int fd) {
  // The attach message arrives right after connect; wait for it briefly.
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, 2000) <= 0) return refuse(fd, "no attach message within 2 s");
  alignas(8) std::uint8_t buf[512];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buf, sizeof buf};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t n = ::recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
  int fds[4] = {-1, -1, -1, -1};
  int nfds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = int((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k && nfds < 4; ++i) std::memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  }
  auto close_fds = [&] {
    for (int i = 0; i < nfds; ++i) ::close(fds[i]);
  };
  if (n <= 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    close_fds();
    return refuse(fd, "attach message truncated or missing");
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
  a->peer_pid = peer_pid(fd);
  a->name = process_name(a->peer_pid);
  // A run is named by GOSSAMER_RUN_ID when given (so that a different
  // build on another host is found and refused), else by the build-id.
  a->build_hash = hash_build_id(req.build_id, req.build_id_len);
  a->key = req.run_key ? req.run_key : a->build_hash;
  a->instance = std::random_device{}();
  a->total = req.total_threads;
  abi::host_threads(a->total, hosts_, self_, &a->first, &a->local);
  a->base = static_cast<std::uint8_t*>(base);
  a->bytes = layout.bytes;
  a->layout = layout;
  a->tail.assign(a->local, 0);
  for (std::uint32_t i = 0; i < a->local; ++i)
    a->tail[i] = load_acquire<std::uint32_t>(&a->ring(i)->tail);
  std::size_t cells = std::size_t(a->local) * a->total;
  a->flows.resize(std::size_t(hosts_) * a->local);
  for (std::uint32_t h = 0; h < hosts_; ++h)
    for (std::uint32_t i = 0; i < a->local; ++i) a->flow(h, i).conn = std::uint8_t(i % conns_per_host_);
  a->out_req.assign(cells, 0);
  a->in_req.assign(cells, 0);
  a->out_resp.assign(cells, 0);
  for (const auto& other : apps_)
    if (other->key == a->key) {
      ::munmap(base, layout.bytes);
      a->base = nullptr;
      close_fds();
      return refuse(fd, "an instance of this run (same binary and GOSSAMER_RUN_ID) is already attached "
                        "(pid " + std::to_string(other->pid) + ")");
    }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = apps_.size();  // refreshed on every epoll wait
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a->eventfd, &ev);
  ev.events = EPOLLIN | EPOLLRDHUP;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a->sock, &ev);
  ++stats_.apps_attached;
  spdlog::info("attached pid {} ({} threads in the rack, {} here from {}), run key {:016x}", a->pid,
               a->total, a->local, a->first, a->key);
  send_msg(*a, abi::kMsgAttachOk, self_, "");
  apps_.push_back(std::move(a));
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_) announce(h, wire::kRecAttach, *apps_.back());
  check_starts();
}

void Dataplane::drop_app(std::size_t i, bool do_announce, const char* why) {
  std::unique_ptr<App> a = std::move(apps_[i]);
  apps_.erase(apps_.begin() + std::ptrdiff_t(i));
  spdlog::info("detached pid {}: {}", a->pid, why);
  if (do_announce)
    for (std::uint32_t h = 0; h < hosts_; ++h)
      if (h != self_) announce(h, wire::kRecDetach, *a);
  if (a->base) ::munmap(a->base, a->bytes);
  if (a->eventfd >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a->eventfd, nullptr);
    ::close(a->eventfd);
  }
  if (a->sock >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a->sock, nullptr);
    ::close(a->sock);
  }
  if (a->memfd >= 0) ::close(a->memfd);
  ++stats_.apps_detached;
}

void Dataplane::app_message(App& a) {
  abi::AppMessage m{};
  ssize_t n = ::recv(a.sock, &m, sizeof m, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n == 0 || n < 0) {
    a.bad = true;
    a.bad_reason = "the application went away (exit or kill) without detaching";
    ++stats_.apps_lost;
    return;
  }
  if (n != sizeof m || m.type != abi::kMsgDetach) {
    a.bad = true;
    a.bad_reason = "unexpected message on the attach socket";
    return;
  }
  // Drain what it rang before detaching, send it, then confirm.
  for (std::uint32_t i = 0; i < a.local; ++i) {
    abi::DoorbellRing* r = a.ring(i);
    std::uint32_t head = load_acquire<std::uint32_t>(&r->head);
    std::uint32_t* entries = reinterpret_cast<std::uint32_t*>(r + 1);
    for (std::uint32_t t = a.tail[i]; t != head && head - t <= a.layout.doorbell_entries; ++t)
      doorbell(a, i, load_acquire<std::uint32_t>(&entries[t & (a.layout.doorbell_entries - 1)]));
    a.tail[i] = head;
  }
  pump_all();
  flush_tx();
  send_msg(a, abi::kMsgDetached, self_, "");
  a.bad = true;
  a.bad_reason = "detached";
}

void Dataplane::check_starts() {
  for (std::size_t i = 0; i < apps_.size(); ++i) {
    App& a = *apps_[i];
    if (a.started || a.bad) continue;
    bool all = true;
    for (std::uint32_t h = 0; h < hosts_ && !a.bad; ++h) {
      if (h == self_) continue;
      auto it = peers_[h].apps.find(a.key);
      if (it == peers_[h].apps.end()) {
        all = false;
        continue;
      }
      const wire::AttachAnnounce& r = it->second.a;
      if (r.build_hash != a.build_hash || r.total_threads != a.total) {
        std::string why = "host " + std::to_string(h) + " (" + cfg_.rack.hosts[h].name + ") runs " +
                          (r.build_hash != a.build_hash ? "a different build of this program (build-id differs)"
                                                        : "this program with " + std::to_string(r.total_threads) +
                                                              " threads instead of " + std::to_string(a.total));
        send_msg(a, abi::kMsgRefused, h, why);
        a.bad = true;
        a.bad_reason = why;
      }
    }
    if (all && !a.bad) {
      a.started = true;
      spdlog::info("pid {}: every host attached, start", a.pid);
      send_msg(a, abi::kMsgStart, self_, "");
    }
  }
}

App* Dataplane::app_by_key(std::uint64_t key) {
  for (auto& a : apps_)
    if (a->key == key && !a->bad) return a.get();
  return nullptr;
}

std::uint32_t Dataplane::host_of(std::uint32_t total, std::uint32_t g) const {
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    std::uint32_t first, count;
    abi::host_threads(total, hosts_, h, &first, &count);
    if (g < first + count) return h;
  }
  return hosts_;
}

// ---- applications' memory --------------------------------------------------------

bool Dataplane::any_doorbell() {
  for (auto& a : apps_)
    for (std::uint32_t i = 0; i < a->local; ++i)
      if (load_acquire<std::uint32_t>(&a->ring(i)->head) != a->tail[i]) return true;
  return false;
}

bool Dataplane::poll_doorbells() {
  bool worked = false;
  for (auto& ap : apps_) {
    App& a = *ap;
    if (a.bad) continue;
    for (std::uint32_t i = 0; i < a.local && !a.bad; ++i) {
      abi::DoorbellRing* r = a.ring(i);
      std::uint32_t head = load_acquire<std::uint32_t>(&r->head);
      std::uint32_t tail = a.tail[i];
      if (head == tail) continue;
      if (head - tail > a.layout.doorbell_entries) {
        a.bad = true;
        a.bad_reason = "doorbell ring head out of range";
        ++a.malformed;
        break;
      }
      const std::uint32_t* entries = reinterpret_cast<const std::uint32_t*>(r + 1);
      for (; tail != head; ++tail)
        doorbell(a, i, load_acquire<std::uint32_t>(&entries[tail & (a.layout.doorbell_entries - 1)]));
      a.tail[i] = tail;
      store_release<std::uint32_t>(&r->tail, tail);
      worked = true;
    }
  }
  return worked;
}

// One doorbell entry: copy the slot it names, validate the copy, queue it.
void Dataplane::doorbell(App& a, std::uint32_t li, std::uint32_t entry) {
  ++a.doorbells;
  std::uint32_t self_g = a.first + li;
  std::uint32_t peer = entry & abi::kDoorbellPeerMask;
  bool response = entry & abi::kDoorbellResponse;
  auto bad = [&](const char*) { ++a.malformed; ++stats_.records_rejected; };
  if ((entry & ~(abi::kDoorbellResponse | abi::kDoorbellPeerMask)) || peer >= a.total || a.is_local(peer))
    return bad("doorbell names a local or unknown thread");
  std::uint32_t host = host_of(a.total, peer);
  wire::WireRecord w{};
  w.app = a.key;
  scratch_.resize(abi::kPrimaryBytes + abi::kOverflowBytes);
  if (!response) {
    const std::uint8_t* primary = a.request_primary(peer, self_g);
    std::uint32_t seq = load_acquire<std::uint32_t>(primary);
    std::uint32_t& last = a.at(a.out_req, li, peer);
    if (seq != last + 1) return bad("request slot seq is not the next one");
    abi::RequestSlotHeader h;
    std::memcpy(&h, primary, sizeof h);
    if (h.primary_len > abi::kRequestPrimaryData || h.overflow_len > abi::kOverflowBytes)
      return bad("request slot lengths out of range");
    std::memcpy(scratch_.data(), primary + sizeof h, h.primary_len);
    std::memcpy(scratch_.data() + h.primary_len, a.request_overflow(peer, self_g), h.overflow_len);
    last = seq;
    w.kind = wire::kRecRequest;
    w.count = h.count;
    w.client = std::uint16_t(self_g);
    w.trustee = std::uint16_t(peer);
    w.slot_seq = seq;
    w.primary_len = h.primary_len;
    w.overflow_len = h.overflow_len;
  } else {
    const std::uint8_t* primary = a.response_primary(peer, self_g);
    std::uint32_t seq = load_acquire<std::uint32_t>(primary);
    std::uint32_t& shipped = a.at(a.out_resp, li, peer);
    if (seq != a.at(a.in_req, li, peer) || seq == shipped) return bad("response slot seq unexpected");
    abi::ResponseSlotHeader h;
    std::memcpy(&h, primary, sizeof h);
    if (h.primary_len > abi::kResponsePrimaryData || h.overflow_len > abi::kOverflowBytes)
      return bad("response slot lengths out of range");
    std::memcpy(scratch_.data(), primary + sizeof h, h.primary_len);
    std::memcpy(scratch_.data() + h.primary_len, a.response_overflow(peer, self_g), h.overflow_len);
    shipped = seq;
    w.kind = wire::kRecResponse;
    w.count = h.count;
    w.client = std::uint16_t(peer);
    w.trustee = std::uint16_t(self_g);
    w.slot_seq = seq;
    w.primary_len = h.primary_len;
    w.overflow_len = h.overflow_len;
    w.slot_flags = h.flags & abi::kResponseMore;
  }
  // Any usable connection keeps a pair's slots in order: a pair has one
  // slot in flight at a time (the next request follows the response, the
  // next response the request), so two never race on two connections.
  App::Flow& f = a.flow(host, li);
  const std::size_t body = std::size_t(w.primary_len) + w.overflow_len;
  f.size.add(std::uint32_t(body));
  f.bytes += body;
  ++f.slots;
  peers_[host].conns[route(a, host, li)]->enqueue(w, scratch_.data());
}

std::uint32_t Dataplane::route(App& a, std::uint32_t host, std::uint32_t li) {
  const std::uint32_t c = a.flow(host, li).conn;
  return c < conns_per_host_ && peers_[host].conns[c]->usable() ? c : 0;  // 0 is always usable
}

void Dataplane::schedule() {
  // Receiver side: our peers' connections to us (formula 3.1).
  std::vector<SenderLoad> loads;
  std::vector<std::uint32_t> senders;
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    SenderLoad l;
    l.connections = conns_per_host_;
    for (auto& c : p.conns) l.utilization += c->take_utilization();
    const bool heard = p.conns[0]->peer_boot() != 0;
    // Not heard from yet: dormant (its connection 0); heard for the first
    // interval: a newcomer.
    l.known = !heard || p.intervals_heard > 0;
    if (heard) ++p.intervals_heard;
    loads.push_back(l);
    senders.push_back(h);
  }
  const auto active = assign_active_connections(loads, cfg_.connections.max_active_qps, schedule_rotation_++);
  for (std::size_t i = 0; i < senders.size(); ++i)
    for (std::uint32_t j = 0; j < conns_per_host_; ++j) {
      Connection& c = *peers_[senders[i]].conns[j];
      c.set_inbound_active(j < active[i]);
      c.remind_activation();
    }

  // Sender side: our threads over our usable connections to each peer
  // (Algorithm 1), all applications together (they share the connections).
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    std::vector<std::uint32_t> usable;
    for (std::uint32_t j = 0; j < conns_per_host_; ++j)
      if (p.conns[j]->usable()) usable.push_back(j);
    std::vector<ThreadLoad> threads;
    std::vector<App::Flow*> flows;
    std::uint64_t bytes = 0;
    for (auto& a : apps_)
      for (std::uint32_t i = 0; i < a->local; ++i) {
        App::Flow& f = a->flow(h, i);
        threads.push_back({f.size.median(), f.slots, f.bytes});
        flows.push_back(&f);
        bytes += f.bytes;
      }
    if (bytes > 0 && cfg_.connections.thread_scheduler) {  // an idle interval changes nothing
      const auto to = assign_threads(threads, usable);
      for (std::size_t k = 0; k < flows.size(); ++k) {
        if (flows[k]->conn != to[k]) ++stats_.thread_moves;
        flows[k]->conn = std::uint8_t(to[k]);
      }
    }
    // Algorithm 1 looks at the interval since the last scheduling. Our
    // intervals are short (a thread sending 8 KiB round trips may send none
    // in one), so the counts decay by half instead of starting from zero,
    // and the median is over the thread's last slots, whenever they went.
    for (App::Flow* f : flows) f->bytes /= 2, f->slots /= 2;
    // What waits on a connection the peer no longer takes from us moves to
    // connection 0, whole slots at a time (Connection::take_pending).
    for (std::uint32_t j = 1; j < conns_per_host_; ++j) {
      Connection& c = *p.conns[j];
      if (c.usable() || !c.has_pending()) continue;
      p.moved.clear();
      c.take_pending(&p.moved);
      p.conns[0]->enqueue_records(p.moved.data(), p.moved.size());
    }
  }
}

// ---- the wire --------------------------------------------------------------------

void Dataplane::announce(std::uint32_t peer, std::uint8_t kind, const App& a) {
  wire::WireRecord w{};
  w.kind = kind;
  // A detach after the application said goodbye is the end of its run, not
  // a failure its peers must share.
  if (kind == wire::kRecDetach && a.bad_reason == "detached") w.slot_flags = wire::kDetachGraceful;
  w.app = a.key;
  w.primary_len = sizeof(wire::AttachAnnounce);
  wire::AttachAnnounce an{a.build_hash, a.total, a.instance};
  peers_[peer].conns[0]->enqueue(w, &an);
}

void Dataplane::transmit(std::uint32_t peer, const std::uint8_t* payload, std::size_t len) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) {
    ++stats_.tx_failed;  // the retransmission timer covers it
    return;
  }
  auto* f = static_cast<std::uint8_t*>(static_cast<void*>(rte_pktmbuf_append(m, std::uint16_t(wire::kL2L4Bytes + len))));
  std::memcpy(f + wire::kL2L4Bytes, payload, len);
  wire::write_l2l4(f, mac_.data(), peers_[peer].mac.data(), self_ep_, peers_[peer].ep, len);
  tx_batch_.push_back(m);
  if (tx_batch_.size() >= kBurst) flush_tx();
}

void Dataplane::flush_tx() {
  std::size_t off = 0;
  int tries = 0;
  while (off < tx_batch_.size() && tries++ < 8) {
    off += rte_eth_tx_burst(port_id_, 0, tx_batch_.data() + off, std::uint16_t(tx_batch_.size() - off));
  }
  stats_.tx_frames += off;
  for (std::size_t i = off; i < tx_batch_.size(); ++i) {
    rte_pktmbuf_free(tx_batch_[i]);
    ++stats_.tx_failed;
  }
  tx_batch_.clear();
}

bool Dataplane::pump_all() {
  bool worked = false;
  std::uint64_t now = rte_rdtsc();
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    for (auto& c : peers_[h].conns) {
      auto emit = [this, h](const std::uint8_t* p, std::size_t n) { transmit(h, p, n); };
      worked |= c->pump(now, emit) != 0;
      c->timers(now, emit);
      c->flush_ack(emit);
    }
  }
  flush_tx();
  return worked;
}

bool Dataplane::poll_rx() {
  rte_mbuf* bufs[kBurst];
  std::uint16_t n = rte_eth_rx_burst(port_id_, 0, bufs, kBurst);
  std::uint64_t now = rte_rdtsc();
  if (!held_.empty() && (n || now - held_at_ > tsc_hz_ / 1000)) {
    // A reordered frame goes in after the next one (or after 1 ms).
    std::vector<std::uint8_t> f;
    f.swap(held_);
    if (n) {
      rte_mbuf* m = bufs[0];
      ++stats_.rx_frames;
      process_frame(rte_pktmbuf_mtod(m, const std::uint8_t*), m->nb_segs == 1 ? m->data_len : 0, now);
      rte_pktmbuf_free(m);
      std::memmove(bufs, bufs + 1, sizeof(bufs[0]) * --n);
    }
    process_frame(f.data(), f.size(), now);
  }
  if (!n) return false;
  for (std::uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = bufs[i];
    ++stats_.rx_frames;
    const auto* data = rte_pktmbuf_mtod(m, const std::uint8_t*);
    std::size_t len = m->nb_segs == 1 ? m->data_len : 0;  // chained mbufs: never ours
    if (faults_.any()) {
      auto rnd = [this] {
        faults_rng_ ^= faults_rng_ << 13;
        faults_rng_ ^= faults_rng_ >> 7;
        faults_rng_ ^= faults_rng_ << 17;
        return double(faults_rng_ >> 11) / double(1ull << 53);
      };
      if (rnd() < faults_.loss) {
        ++stats_.injected_loss;
        rte_pktmbuf_free(m);
        continue;
      }
      if (rnd() < faults_.duplicate) {
        ++stats_.injected_duplicates;
        process_frame(data, len, now);
      }
      if (held_.empty() && rnd() < faults_.reorder) {
        ++stats_.injected_reorders;
        held_.assign(data, data + len);
        held_at_ = now;
        rte_pktmbuf_free(m);
        continue;
      }
    }
    process_frame(data, len, now);
    rte_pktmbuf_free(m);
  }
  return true;
}

void Dataplane::process_frame(const std::uint8_t* data, std::size_t len, std::uint64_t now) {
  wire::ParsedFrame pf;
  wire::Drop d = wire::parse_frame(data, len, self_ep_, endpoints_.data(), endpoints_.size(), self_,
                                   conns_per_host_, &pf);
  if (d != wire::Drop::kNone) {
    ++stats_.drops[std::size_t(d)];
    return;
  }
  std::uint32_t src = pf.hdr.src_host;
  Peer& p = peers_[src];
  if (!p.mac_known) {
    std::memcpy(p.mac.data(), pf.src_mac, 6);
    p.mac_known = true;
  }
  Connection& c = *p.conns[pf.hdr.conn];
  auto emit = [this, src](const std::uint8_t* b, std::size_t n) { transmit(src, b, n); };
  const bool accepted = c.on_frame(pf.hdr, now, emit) == Connection::Accept::kDeliver;
  if (c.stats().resets != p.resets_seen[pf.hdr.conn]) {
    // The peer restarted. Every connection to it starts over with the new
    // incarnation at once: one that had not heard from it yet would still
    // carry the old sequence numbers, and would throw away what the new run
    // sends on it when it finally resets. Then forget the peer's old
    // applications and announce ours again (on connection 0, now fresh),
    // before delivering this frame's records: the new peer's first frame
    // may carry its own announce.
    for (auto& other : p.conns) other->peer_restarted(c.peer_boot());
    for (std::size_t i = 0; i < p.conns.size(); ++i) p.resets_seen[i] = p.conns[i]->stats().resets;
    p.apps.clear();
    p.intervals_heard = 0;  // a newcomer again for the QP scheduler
    for (auto& a : apps_)
      if (!a->bad) announce(src, wire::kRecAttach, *a);
  }
  if (accepted) {
    wire::RecordCursor cur(pf.records, pf.hdr.length);
    wire::RecordView v, whole;
    while (cur.next(&v)) {
      switch (c.reassemble(v, &whole)) {
        case Reassembly::Result::kWhole:
          c.count_delivered(v.rec.kind);
          deliver(src, v);
          break;
        case Reassembly::Result::kComplete:
          c.count_delivered(whole.rec.kind);
          deliver(src, whole);
          break;
        case Reassembly::Result::kHeld: break;
        case Reassembly::Result::kDropped: ++stats_.records_rejected; break;
      }
    }
  }
}

void Dataplane::read_faults() {
  std::ifstream in(socket_path_ + ".faults");
  std::string text;
  if (in) std::getline(in, text);
  if (text == faults_text_) return;
  faults_text_ = text;
  Faults f;
  std::istringstream words(text);
  std::string key, value;
  while (words >> key) {
    double* slot = key == "loss" ? &f.loss : key == "duplicate" ? &f.duplicate : key == "reorder" ? &f.reorder : nullptr;
    if (!slot || !(words >> value) || value.empty() || value.back() != '%') {
      spdlog::warn("faults file: cannot use '{}' (supported: loss N%, duplicate N%, reorder N%)", text);
      f = Faults{};
      break;
    }
    *slot = std::strtod(value.c_str(), nullptr) / 100.0;
  }
  faults_ = f;
  spdlog::info("fault injection on received frames: loss {}%, duplicate {}%, reorder {}%", f.loss * 100,
               f.duplicate * 100, f.reorder * 100);
}

void Dataplane::deliver(std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.kind == wire::kRecAttach || r.kind == wire::kRecDetach) {
    wire::AttachAnnounce an;
    std::memcpy(&an, v.payload, sizeof an);
    auto& apps = peers_[src].apps;
    if (r.kind == wire::kRecAttach) {
      apps[r.app] = RemoteApp{an};
      check_starts();
    } else {
      auto it = apps.find(r.app);
      if (it != apps.end() && it->second.a.instance == an.instance) apps.erase(it);
      if (App* a = app_by_key(r.app); a && a->started && !(r.slot_flags & wire::kDetachGraceful))
        send_msg(*a, abi::kMsgPeerLost, src,
                 "its instance on host " + std::to_string(src) + " (" + cfg_.rack.hosts[src].name +
                     ") went away without finishing");
    }
    return;
  }
  App* a = app_by_key(r.app);
  if (!a) {
    ++stats_.records_no_app;
    return;
  }
  if (r.kind == wire::kRecRequest) deliver_request(*a, src, v);
  else deliver_response(*a, src, v);
}

void Dataplane::deliver_request(App& a, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.client >= a.total || r.trustee >= a.total || !a.is_local(r.trustee) ||
      host_of(a.total, r.client) != src || r.primary_len > abi::kRequestPrimaryData ||
      r.overflow_len > abi::kOverflowBytes) {
    ++stats_.records_rejected;
    return;
  }
  std::uint32_t li = r.trustee - a.first;
  std::uint32_t& last = a.at(a.in_req, li, r.client);
  std::uint8_t* primary = a.request_primary(r.trustee, r.client);
  // The next batch, and the trustee has answered the previous one.
  if (r.slot_seq != last + 1 ||
      load_acquire<std::uint32_t>(a.response_primary(r.client, r.trustee)) != last) {
    ++stats_.records_rejected;
    return;
  }
  abi::RequestSlotHeader h{};
  h.count = r.count;
  h.primary_len = r.primary_len;
  h.overflow_len = r.overflow_len;
  std::memcpy(primary + sizeof h.seq, reinterpret_cast<std::uint8_t*>(&h) + sizeof h.seq, sizeof h - sizeof h.seq);
  std::memcpy(primary + sizeof h, v.payload, r.primary_len);
  std::memcpy(a.request_overflow(r.trustee, r.client), v.payload + r.primary_len, r.overflow_len);
  last = r.slot_seq;
  store_release<std::uint32_t>(primary, r.slot_seq);
  a.wake_thread(li);
}

void Dataplane::deliver_response(App& a, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.client >= a.total || r.trustee >= a.total || !a.is_local(r.client) ||
      host_of(a.total, r.trustee) != src || r.primary_len > abi::kResponsePrimaryData ||
      r.overflow_len > abi::kOverflowBytes) {
    ++stats_.records_rejected;
    return;
  }
  std::uint32_t li = r.client - a.first;
  std::uint8_t* primary = a.response_primary(r.client, r.trustee);
  // Answers the request we shipped last, and only once.
  if (r.slot_seq != a.at(a.out_req, li, r.trustee) || load_acquire<std::uint32_t>(primary) == r.slot_seq) {
    ++stats_.records_rejected;
    return;
  }
  abi::ResponseSlotHeader h{};
  h.count = r.count;
  h.primary_len = r.primary_len;
  h.overflow_len = r.overflow_len;
  h.flags = r.slot_flags & abi::kResponseMore;
  std::memcpy(primary + sizeof h.seq, reinterpret_cast<std::uint8_t*>(&h) + sizeof h.seq, sizeof h - sizeof h.seq);
  std::memcpy(primary + sizeof h, v.payload, r.primary_len);
  std::memcpy(a.response_overflow(r.client, r.trustee), v.payload + r.primary_len, r.overflow_len);
  store_release<std::uint32_t>(primary, r.slot_seq);
  a.wake_thread(li);
}

// ---- the loop ------------------------------------------------------------------------

void Dataplane::write_stats() {
  std::string tmp = socket_path_ + ".stats.tmp";
  {
    std::ofstream o(tmp);
    o << "rx_frames " << stats_.rx_frames << "\ntx_frames " << stats_.tx_frames << "\ntx_failed "
      << stats_.tx_failed << "\nrecords_no_app " << stats_.records_no_app << "\nrecords_rejected "
      << stats_.records_rejected << "\napps_attached " << stats_.apps_attached << "\napps_refused "
      << stats_.apps_refused << "\napps_detached " << stats_.apps_detached << "\napps_lost " << stats_.apps_lost
      << "\napps " << apps_.size() << "\ninjected_loss " << stats_.injected_loss << "\ninjected_duplicates "
      << stats_.injected_duplicates << "\ninjected_reorders " << stats_.injected_reorders << "\nbusy_cycles " << stats_.busy_cycles << "\nidle_cycles "
      << stats_.idle_cycles << "\n";
    for (std::size_t d = 1; d < stats_.drops.size(); ++d)
      o << "dropped{reason=\"" << wire::drop_name(wire::Drop(d)) << "\"} " << stats_.drops[d] << "\n";
    for (std::uint32_t h = 0; h < hosts_; ++h) {
      if (h == self_) continue;
      for (std::size_t c = 0; c < peers_[h].conns.size(); ++c) {
        const ConnectionStats& s = peers_[h].conns[c]->stats();
        std::string l = "{peer=\"" + std::to_string(h) + "\",conn=\"" + std::to_string(c) + "\"} ";
        o << "frames_sent" << l << s.frames_sent << "\nframes_received" << l << s.frames_received
          << "\nrecords_sent" << l << s.records_sent << "\nrequests_sent" << l << s.requests_sent
          << "\nresponses_sent" << l << s.responses_sent << "\nrecords_received" << l << s.records_received
          << "\nretransmits" << l << s.retransmits << "\ntimeouts" << l << s.timeouts << "\nfast_retransmits"
          << l << s.fast_retransmits << "\nduplicates" << l << s.duplicates << "\nout_of_order" << l
          << s.out_of_order << "\ncredit_stalls" << l << s.credit_stalls << "\nrenewals_requested" << l
          << s.renewals_requested << "\nrenewals_granted" << l << s.renewals_granted << "\ncredits" << l
          << peers_[h].conns[c]->credits_left() << "\nresets" << l << s.resets << "\nwrong_incarnation" << l
          << s.wrong_incarnation << "\nfragments_sent" << l << s.fragments_sent << "\nfragments_received" << l
          << s.fragments_received << "\nslots_reassembled" << l << s.slots_reassembled << "\ninbound_active" << l
          << peers_[h].conns[c]->inbound_active() << "\noutbound_active" << l << peers_[h].conns[c]->usable()
          << "\nrenewals_declined" << l << s.renewals_declined << "\n";
        std::string r = "{peer=\"" + std::to_string(h) + "\",conn=\"" + std::to_string(c) + "\",reason=\"";
        o << "fragments_dropped" << r << "bad_offset\"} " << s.frag_bad_offset << "\nfragments_dropped" << r
          << "oversize\"} " << s.frag_oversize << "\nfragments_dropped" << r << "mismatch\"} " << s.frag_mismatch
          << "\nfragments_dropped" << r << "interrupted\"} " << s.frag_interrupted << "\n";
      }
    }
  }
  {
    // The thread scheduler's placement: per application thread and peer.
    std::ofstream o(tmp, std::ios::app);
    o << "thread_moves " << stats_.thread_moves << "\n";
    for (const auto& a : apps_)
      for (std::uint32_t h = 0; h < hosts_; ++h) {
        if (h == self_) continue;
        for (std::uint32_t i = 0; i < a->local; ++i)
          o << "thread_conn{pid=\"" << a->pid << "\",thread=\"" << a->first + i << "\",peer=\"" << h << "\"} "
            << unsigned(a->flow(h, i).conn) << "\n";
      }
  }
  std::rename(tmp.c_str(), (socket_path_ + ".stats").c_str());
}

void Dataplane::sleep_until_work(std::uint64_t now) {
  for (auto& a : apps_) std::atomic_ref<std::uint32_t>(*a->sleeping()).store(1, std::memory_order_seq_cst);
  std::uint64_t deadline = UINT64_MAX;
  for (auto& p : peers_)
    for (auto& c : p.conns) deadline = std::min(deadline, c->next_deadline());
  std::uint64_t since_work = now - last_work_;
  std::uint64_t timeout_ns =
      since_work >= tsc_hz_ ? kMaxSleepNs
                            : std::clamp<std::uint64_t>((since_work * 1'000'000'000ull / tsc_hz_) >> kSleepShift, kMinSleepNs,
                                         kMaxSleepNs);
  if (deadline <= now) {
    timeout_ns = 0;
  } else if (deadline != UINT64_MAX) {
    timeout_ns = std::min<std::uint64_t>(timeout_ns, (deadline - now) * 1'000'000'000ull / tsc_hz_ + 1);
  }
  if (timeout_ns && !any_doorbell()) {
    epoll_event evs[16];
    timespec ts{time_t(timeout_ns / 1'000'000'000ull), long(timeout_ns % 1'000'000'000ull)};
    ::epoll_pwait2(epoll_fd_, evs, 16, &ts, nullptr);
    std::uint64_t buf;
    for (auto& a : apps_) (void)!::read(a->eventfd, &buf, sizeof buf);
  }
  for (auto& a : apps_) std::atomic_ref<std::uint32_t>(*a->sleeping()).store(0, std::memory_order_relaxed);
}

void Dataplane::run(const std::atomic<bool>& stop) {
  // The default 50 us timer slack would swallow the short sleeps.
  ::prctl(PR_SET_TIMERSLACK, 5'000UL);
  std::uint32_t idle = 0;
  std::uint64_t last = rte_rdtsc();
  std::uint32_t iter = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    bool worked = poll_rx();
    worked |= poll_doorbells();
    worked |= pump_all();
    if ((++iter & 63) == 0 || idle >= kSpin) {
      // Sockets: new applications, detaches, deaths.
      accept_apps();
      for (std::size_t i = 0; i < apps_.size(); ++i) app_message(*apps_[i]);
      for (std::size_t i = apps_.size(); i-- > 0;)
        if (apps_[i]->bad) {
          bool lost = apps_[i]->bad_reason != "detached";
          if (lost) spdlog::warn("pid {}: {}", apps_[i]->pid, apps_[i]->bad_reason);
          drop_app(i, true, apps_[i]->bad_reason.c_str());
          (void)lost;
        }
    }
    std::uint64_t now = rte_rdtsc();
    (worked ? stats_.busy_cycles : stats_.idle_cycles) += now - last;
    last = now;
    if (now - last_schedule_ > tsc_hz_ / 1'000'000 * cfg_.connections.scheduler_interval_us) {
      schedule();
      last_schedule_ = now;
    }
    if (now - last_metrics_write_ > tsc_hz_ / 1000 * abi::kMetricsPeriodMs) {
      write_metrics();
      last_metrics_write_ = now;
    }
    if (now - last_stats_write_ > tsc_hz_) {
      read_faults();
      write_stats();
      last_stats_write_ = now;
    }
    if (worked) {
      idle = 0;
      last_work_ = now;
      continue;
    }
    ++idle;
    if (cfg_.dataplane.polling == config::Polling::busy || idle < kSpin) {
      rte_pause();
    } else if (idle < kSpin + kYield) {
      ::sched_yield();
    } else {
      sleep_until_work(now);
      idle = kSpin;  // after a sleep: check sockets, then sleep again soon
    }
    std::uint64_t after = rte_rdtsc();
    stats_.idle_cycles += after - last;
    last = after;
  }
  write_stats();
  write_metrics();
}

}  // namespace gossamer::dataplane
