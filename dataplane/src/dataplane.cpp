// The dataplane's loop, run by every polling core over what it owns
// (dataplane.hpp): application doorbells -> connections -> DPDK, and DPDK ->
// connections -> application slots. Adaptive (spin, yield, then sleep on
// the applications' eventfds with a timeout that keeps the NIC and the
// retransmission timers served). NIC frames do not wake a sleep (the vdevs
// we run on have no rx interrupts), so the timeout grows with the time since
// the last work: tens of microseconds right after traffic, when a reply is
// likely, up to a millisecond on an idle host.
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
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
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
      conns_per_host_(std::max<std::uint32_t>(1, std::min<std::uint32_t>(cfg.connections.per_remote_host, 255))),
      ncores_(std::max<std::uint32_t>(1, cfg.dataplane.cores)) {
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
  // run() has joined the other cores: nothing reads the list any more.
  while (!apps_.empty()) drop_app(apps_.size() - 1, false, "dataplane shutting down");
  free_retired(true);
  delete app_list_.load();
  close_metrics();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(socket_path_.c_str());
  }
  for (auto& k : cores_) {
    if (k->epoll_fd >= 0) ::close(k->epoll_fd);
    if (k->wake_fd >= 0) ::close(k->wake_fd);
    if (k->held) rte_pktmbuf_free(k->held);
    for (auto& q : k->backlog)
      for (CoreMsg* m : q) delete m;
    if (k->msgs) {
      void* m;
      while (rte_ring_dequeue(k->msgs, &m) == 0) delete static_cast<CoreMsg*>(m);
      rte_ring_free(k->msgs);
    }
    if (k->frames) {
      void* m;
      while (rte_ring_dequeue(k->frames, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
      rte_ring_free(k->frames);
    }
  }
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
  // One rx and one tx queue per core: a queue has one poller.
  rte_eth_dev_info info{};
  if (int r = rte_eth_dev_info_get(port_id_, &info); r < 0)
    return "rte_eth_dev_info_get: " + std::string(rte_strerror(-r));
  if (info.max_rx_queues < ncores_ || info.max_tx_queues < ncores_)
    return "dataplane.cores is " + std::to_string(ncores_) + ", but port " + std::to_string(port_id_) + " (" +
           (info.driver_name ? info.driver_name : "?") + ") has " + std::to_string(info.max_rx_queues) +
           " rx and " + std::to_string(info.max_tx_queues) + " tx queues; every core needs one of each " +
           "(net_af_packet: qpairs=" + std::to_string(ncores_) + ", net_af_xdp: queue_count=" +
           std::to_string(ncores_) + " in the --vdev argument)";
  pool_ = rte_pktmbuf_pool_create("gsm_pool", std::max<unsigned>(8191, 4096 * ncores_ - 1), 256, 0,
                                  RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id()));
  if (!pool_) return std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno);
  rte_eth_conf conf{};
  if (ncores_ > 1 && (info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP))) {
    // A NIC spreads flows over the queues; the vdevs spread by their own
    // means (af_packet: PACKET_FANOUT_HASH). Either way a frame may land
    // on another core than its connection's, which steers it (poll_rx).
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP);
  }
  if (int r = rte_eth_dev_configure(port_id_, std::uint16_t(ncores_), std::uint16_t(ncores_), &conf); r < 0)
    return "rte_eth_dev_configure: " + std::string(rte_strerror(-r));
  std::uint16_t nrx = 1024, ntx = 1024;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &nrx, &ntx);
  int sock = rte_eth_dev_socket_id(port_id_);
  for (std::uint16_t q = 0; q < ncores_; ++q) {
    if (int r = rte_eth_rx_queue_setup(port_id_, q, nrx, sock < 0 ? 0 : unsigned(sock), nullptr, pool_); r < 0)
      return "rx queue " + std::to_string(q) + " setup: " + std::string(rte_strerror(-r));
    if (int r = rte_eth_tx_queue_setup(port_id_, q, ntx, sock < 0 ? 0 : unsigned(sock), nullptr); r < 0)
      return "tx queue " + std::to_string(q) + " setup: " + std::string(rte_strerror(-r));
  }
  if (int r = rte_eth_dev_start(port_id_); r < 0) return "port start: " + std::string(rte_strerror(-r));
  port_started_ = true;
  rte_ether_addr mac{};
  rte_eth_macaddr_get(port_id_, &mac);
  std::memcpy(mac_.data(), mac.addr_bytes, 6);
  if (cfg_.self().mac && std::memcmp(cfg_.self().mac->data(), mac_.data(), 6) != 0)
    spdlog::warn("the port's MAC differs from rack.hosts[{}].mac; peers will not reach us", self_);

  peers_ = std::vector<Peer>(hosts_);
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
    p.usable = std::make_unique<std::atomic<bool>[]>(conns_per_host_);
    for (std::uint32_t c = 0; c < conns_per_host_; ++c) p.usable[c].store(p.conns[c]->usable());
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
  if (std::string err = make_cores(); !err.empty()) return err;
  try {
    open_socket();
    open_metrics();
  } catch (const std::exception& e) {
    return e.what();
  }
  spdlog::info("host {} ({}) ready: port {} MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, {} peers x {} "
               "connections, credits {}, {} polling core{}, socket {}",
               self_, cfg_.self().name, port_id_, mac_[0], mac_[1], mac_[2], mac_[3], mac_[4], mac_[5],
               hosts_ - 1, conns_per_host_, cfg_.connections.credits, ncores_, ncores_ == 1 ? "" : "s",
               socket_path_);
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
  ::epoll_ctl(cores_[0]->epoll_fd, EPOLL_CTL_ADD, listen_fd_, &ev);
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
  ++cores_[0]->stats.apps_refused;
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
    for (std::uint32_t i = 0; i < a->local; ++i) a->flow(h, i).set_conn(std::uint8_t(i % conns_per_host_));
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
  // Its kicks wake every sleeping core: edge triggered, so that each write
  // is an event for every epoll set, and nobody reads the eventfd (a read
  // by one core would take the event from a core that had not collected
  // it yet). Its counter cannot reach 2^64 - 1.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  for (auto& k : cores_) ::epoll_ctl(k->epoll_fd, EPOLL_CTL_ADD, a->eventfd, &ev);
  ev.events = EPOLLIN | EPOLLRDHUP;
  ::epoll_ctl(cores_[0]->epoll_fd, EPOLL_CTL_ADD, a->sock, &ev);
  ++cores_[0]->stats.apps_attached;
  spdlog::info("attached pid {} ({} threads in the rack, {} here from {}), run key {:016x}", a->pid,
               a->total, a->local, a->first, a->key);
  send_msg(*a, abi::kMsgAttachOk, self_, "");
  apps_.push_back(std::move(a));
  publish_apps();
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_) announce(h, wire::kRecAttach, *apps_.back());
  check_starts();
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
  ::epoll_ctl(cores_[0]->epoll_fd, EPOLL_CTL_DEL, a->sock, nullptr);
  publish_apps();
  retired_.back().app = std::move(a);
}

void Dataplane::release(App& a) {
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
  pump(*cores_[0]);
  send_msg(a, abi::kMsgDetached, self_, "");
  a.bad_reason = "detached";
  a.bad = true;
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
    if (all && !a.bad && !a.drains_pending) {
      a.started = true;
      spdlog::info("pid {}: every host attached, start", a.pid);
      send_msg(a, abi::kMsgStart, self_, "");
    }
  }
}

App* Dataplane::app_by_key(const Core& k, std::uint64_t key) {
  for (App* a : *k.apps)
    if (a->key == key && !a->bad) return a;
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

bool Dataplane::any_doorbell(const Core& k) {
  for (App* a : *k.apps)
    for (std::uint32_t i = k.index; i < a->local; i += ncores_)
      if (load_acquire<std::uint32_t>(&a->ring(i)->head) != a->tail[i]) return true;
  return false;
}

// The rings of this core's threads (local thread i: core i % cores).
bool Dataplane::poll_doorbells(Core& k) {
  bool worked = false;
  for (App* a : *k.apps)
    if (!a->bad) worked |= drain_doorbells(k, *a);
  return worked;
}

bool Dataplane::drain_doorbells(Core& k, App& a) {
  bool worked = false;
  for (std::uint32_t i = k.index; i < a.local && !a.bad; i += ncores_) {
    abi::DoorbellRing* r = a.ring(i);
    std::uint32_t head = load_acquire<std::uint32_t>(&r->head);
    std::uint32_t tail = a.tail[i];
    if (head == tail) continue;
    if (head - tail > a.layout.doorbell_entries) {
      ++k.stats.records_rejected;
      a.fail("doorbell ring head out of range");
      break;
    }
    const std::uint32_t* entries = reinterpret_cast<const std::uint32_t*>(r + 1);
    for (; tail != head; ++tail)
      doorbell(k, a, i, load_acquire<std::uint32_t>(&entries[tail & (a.layout.doorbell_entries - 1)]));
    a.tail[i] = tail;
    store_release<std::uint32_t>(&r->tail, tail);
    worked = true;
  }
  return worked;
}

// One doorbell entry: copy the slot it names, validate the copy, queue it.
void Dataplane::doorbell(Core& k, App& a, std::uint32_t li, std::uint32_t entry) {
  ++k.stats.doorbells;
  std::uint32_t self_g = a.first + li;
  std::uint32_t peer = entry & abi::kDoorbellPeerMask;
  bool response = entry & abi::kDoorbellResponse;
  auto bad = [&](const char*) { ++k.stats.records_rejected; };
  if ((entry & ~(abi::kDoorbellResponse | abi::kDoorbellPeerMask)) || peer >= a.total || a.is_local(peer))
    return bad("doorbell names a local or unknown thread");
  std::uint32_t host = host_of(a.total, peer);
  wire::WireRecord w{};
  w.app = a.key;
  std::vector<std::uint8_t>& scratch = k.scratch;
  scratch.resize(abi::kPrimaryBytes + abi::kOverflowBytes);
  if (!response) {
    const std::uint8_t* primary = a.request_primary(peer, self_g);
    std::uint32_t seq = load_acquire<std::uint32_t>(primary);
    if (seq != a.get(a.out_req, li, peer) + 1) return bad("request slot seq is not the next one");
    abi::RequestSlotHeader h;
    std::memcpy(&h, primary, sizeof h);
    if (h.primary_len > abi::kRequestPrimaryData || h.overflow_len > abi::kOverflowBytes)
      return bad("request slot lengths out of range");
    std::memcpy(scratch.data(), primary + sizeof h, h.primary_len);
    std::memcpy(scratch.data() + h.primary_len, a.request_overflow(peer, self_g), h.overflow_len);
    a.set(a.out_req, li, peer, seq);
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
    if (seq != a.get(a.in_req, li, peer) || seq == a.get(a.out_resp, li, peer))
      return bad("response slot seq unexpected");
    abi::ResponseSlotHeader h;
    std::memcpy(&h, primary, sizeof h);
    if (h.primary_len > abi::kResponsePrimaryData || h.overflow_len > abi::kOverflowBytes)
      return bad("response slot lengths out of range");
    std::memcpy(scratch.data(), primary + sizeof h, h.primary_len);
    std::memcpy(scratch.data() + h.primary_len, a.response_overflow(peer, self_g), h.overflow_len);
    a.set(a.out_resp, li, peer, seq);
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
  enqueue(k, host, route(a, host, li), w, scratch.data());
}

std::uint32_t Dataplane::route(App& a, std::uint32_t host, std::uint32_t li) {
  const std::uint32_t c = a.flow(host, li).get_conn();
  if (c >= conns_per_host_) return 0;  // 0 is always usable
  // Our own connection's state is current; another core's, as of its last pump.
  const bool usable = conn_owner(c) == li % ncores_ ? peers_[host].conns[c]->usable()
                                                   : peers_[host].usable[c].load(std::memory_order_relaxed);
  return usable ? c : 0;
}

// On the connection, or to its core when another core owns it.
void Dataplane::enqueue(Core& k, std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& w,
                        const std::uint8_t* payload) {
  if (owns_conn(k, conn)) return peers_[peer].conns[conn]->enqueue(w, payload);
  ++k.stats.handoffs;
  auto* m = new CoreMsg{CoreMsg::Kind::kRecord};
  m->peer = peer;
  m->conn = conn;
  m->rec = w;
  m->bytes.assign(payload, payload + std::size_t(w.primary_len) + w.overflow_len);
  hand_over(k, m);
}

// Core 0, every interval: how many of each peer's connections to us are
// active (formula 3.1), from the utilization every core added for its own
// connections. Each core applies it to its own at its next interval.
void Dataplane::decide_active() {
  std::vector<SenderLoad> loads;
  std::vector<std::uint32_t> senders;
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    SenderLoad l;
    l.connections = conns_per_host_;
    l.utilization = p.utilization.exchange(0, std::memory_order_relaxed);
    const bool heard = p.conns[0]->peer_boot() != 0;  // connection 0 is ours (core 0)
    // Not heard from yet: dormant (its connection 0); heard for the first
    // interval: a newcomer.
    l.known = !heard || p.intervals_heard > 0;
    if (heard) ++p.intervals_heard;
    loads.push_back(l);
    senders.push_back(h);
  }
  const auto active = assign_active_connections(loads, cfg_.connections.max_active_qps, schedule_rotation_++);
  for (std::size_t i = 0; i < senders.size(); ++i) peers_[senders[i]].active.store(active[i], std::memory_order_relaxed);
}

void Dataplane::schedule(Core& k) {
  // Receiver side: our peers' connections to us that this core owns.
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    std::uint64_t u = 0;
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) u += p.conns[j]->take_utilization();
    p.utilization.fetch_add(u, std::memory_order_relaxed);
  }
  if (k.index == 0) decide_active();
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    const std::uint32_t active = peers_[h].active.load(std::memory_order_relaxed);
    if (active == UINT32_MAX) continue;  // no decision yet
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      Connection& c = *peers_[h].conns[j];
      c.set_inbound_active(j < active);
      c.remind_activation();
    }
  }

  // Sender side: this core's threads over this core's usable connections
  // to each peer (Algorithm 1), all applications together (they share the
  // connections). With none usable, connection 0 (core 0's) carries them.
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    std::vector<std::uint32_t> usable;
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_)
      if (p.conns[j]->usable()) usable.push_back(j);
    std::vector<ThreadLoad> threads;
    std::vector<App::Flow*> flows;
    std::uint64_t bytes = 0;
    for (App* a : *k.apps)
      for (std::uint32_t i = k.index; i < a->local; i += ncores_) {
        App::Flow& f = a->flow(h, i);
        threads.push_back({f.size.median(), f.slots, f.bytes});
        flows.push_back(&f);
        bytes += f.bytes;
      }
    if (bytes > 0 && cfg_.connections.thread_scheduler) {  // an idle interval changes nothing
      const auto to = assign_threads(threads, usable);
      for (std::size_t t = 0; t < flows.size(); ++t) {
        if (flows[t]->get_conn() != to[t]) ++k.stats.thread_moves;
        flows[t]->set_conn(std::uint8_t(to[t]));
      }
    }
    // Algorithm 1 looks at the interval since the last scheduling. Our
    // intervals are short (a thread sending 8 KiB round trips may send none
    // in one), so the counts decay by half instead of starting from zero,
    // and the median is over the thread's last slots, whenever they went.
    for (App::Flow* f : flows) f->bytes /= 2, f->slots /= 2;
    // What waits on a connection the peer no longer takes from us moves to
    // connection 0, whole slots at a time (Connection::take_pending).
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      Connection& c = *p.conns[j];
      if (j == 0 || c.usable() || !c.has_pending()) continue;
      k.moved.clear();
      c.take_pending(&k.moved);
      if (k.index == 0) {
        p.conns[0]->enqueue_records(k.moved.data(), k.moved.size());
      } else {
        auto* m = new CoreMsg{CoreMsg::Kind::kRecords};  // conn 0
        m->peer = h;
        m->bytes = k.moved;
        hand_over(k, m);
      }
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

void Dataplane::transmit(Core& k, std::uint32_t peer, const std::uint8_t* payload, std::size_t len) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) {
    ++k.stats.tx_failed;  // the retransmission timer covers it
    return;
  }
  auto* f = static_cast<std::uint8_t*>(static_cast<void*>(rte_pktmbuf_append(m, std::uint16_t(wire::kL2L4Bytes + len))));
  std::memcpy(f + wire::kL2L4Bytes, payload, len);
  if (!k.mac_known[peer]) [[unlikely]] {
    if (const std::uint64_t l = peers_[peer].learned_mac.load(std::memory_order_relaxed); l >> 63) {
      for (int b = 0; b < 6; ++b) k.macs[peer][std::size_t(b)] = std::uint8_t(l >> (8 * b));
      k.mac_known[peer] = true;
    }
  }
  wire::write_l2l4(f, mac_.data(), k.macs[peer].data(), self_ep_, peers_[peer].ep, len);
  k.tx_batch.push_back(m);
  if (k.tx_batch.size() >= kBurst) flush_tx(k);
}

void Dataplane::flush_tx(Core& k) {
  std::size_t off = 0;
  int tries = 0;
  while (off < k.tx_batch.size() && tries++ < 8) {
    off += rte_eth_tx_burst(port_id_, std::uint16_t(k.index), k.tx_batch.data() + off,
                            std::uint16_t(k.tx_batch.size() - off));
  }
  k.stats.tx_frames += off;
  for (std::size_t i = off; i < k.tx_batch.size(); ++i) {
    rte_pktmbuf_free(k.tx_batch[i]);
    ++k.stats.tx_failed;
  }
  k.tx_batch.clear();
}

// This core's connections: send what credits allow, timers, owed acks.
bool Dataplane::pump(Core& k) {
  bool worked = false;
  std::uint64_t now = rte_rdtsc();
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    auto emit = [this, &k, h](const std::uint8_t* b, std::size_t n) { transmit(k, h, b, n); };
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      Connection& c = *p.conns[j];
      worked |= c.pump(now, emit) != 0;
      c.timers(now, emit);
      c.flush_ack(emit);
      if (const bool u = c.usable(); u != p.usable[j].load(std::memory_order_relaxed))
        p.usable[j].store(u, std::memory_order_relaxed);
    }
  }
  flush_tx(k);
  return worked;
}

namespace {
std::size_t frame_len(const rte_mbuf* m) { return m->nb_segs == 1 ? m->data_len : 0; }  // chained: never ours

// The connection a frame names, if it is long enough to name one (the
// owner validates it all).
std::uint32_t frame_conn(const std::uint8_t* data, std::size_t len) {
  if (len < wire::kL2L4Bytes + sizeof(wire::FrameHeader)) return 0;
  wire::FrameHeader h;
  std::memcpy(&h, data + wire::kL2L4Bytes, sizeof h);
  return h.conn;
}
}  // namespace

// Frames from this core's NIC queue (fault injection first, when asked).
bool Dataplane::poll_rx(Core& k) {
  rte_mbuf* bufs[kBurst];
  std::uint16_t n = rte_eth_rx_burst(port_id_, std::uint16_t(k.index), bufs, kBurst);
  std::uint64_t now = rte_rdtsc();
  k.stats.rx_frames += n;
  std::uint16_t i = 0;
  if (k.held && (n || now - k.held_at > tsc_hz_ / 1000)) {
    // A reordered frame goes in after the next one (or after 1 ms).
    rte_mbuf* held = k.held;
    k.held = nullptr;
    if (n) dispatch(k, bufs[i++], now);
    dispatch(k, held, now);
  }
  if (!n) return false;
  for (; i < n; ++i) {
    rte_mbuf* m = bufs[i];
    if (k.faults.any()) {
      auto rnd = [&k] {
        k.rng ^= k.rng << 13;
        k.rng ^= k.rng >> 7;
        k.rng ^= k.rng << 17;
        return double(k.rng >> 11) / double(1ull << 53);
      };
      if (rnd() < k.faults.loss) {
        ++k.stats.injected_loss;
        rte_pktmbuf_free(m);
        continue;
      }
      if (rnd() < k.faults.duplicate) {
        ++k.stats.injected_duplicates;
        rte_mbuf_refcnt_update(m, 1);
        dispatch(k, m, now);
      }
      if (!k.held && rnd() < k.faults.reorder) {
        ++k.stats.injected_reorders;
        k.held = m;
        k.held_at = now;
        continue;
      }
    }
    dispatch(k, m, now);
  }
  return true;
}

// A frame from our queue: ours to process, or its connection's core's.
void Dataplane::dispatch(Core& k, rte_mbuf* m, std::uint64_t now) {
  const auto* data = rte_pktmbuf_mtod(m, const std::uint8_t*);
  const std::size_t len = frame_len(m);
  if (ncores_ > 1) {
    if (const std::uint32_t owner = conn_owner(frame_conn(data, len)); owner != k.index) {
      if (rte_ring_mp_enqueue(cores_[owner]->frames, m) == 0) {
        ++k.stats.steered;
        wake(*cores_[owner]);
      } else {
        ++k.stats.steer_dropped;  // the sender retransmits it
        rte_pktmbuf_free(m);
      }
      return;
    }
  }
  process_frame(k, data, len, now);
  rte_pktmbuf_free(m);
}

// Frames other cores' queues received for our connections.
bool Dataplane::poll_steered(Core& k) {
  void* bufs[kBurst];
  const unsigned n = rte_ring_sc_dequeue_burst(k.frames, bufs, kBurst, nullptr);
  if (!n) return false;
  const std::uint64_t now = rte_rdtsc();
  for (unsigned i = 0; i < n; ++i) {
    auto* m = static_cast<rte_mbuf*>(bufs[i]);
    process_frame(k, rte_pktmbuf_mtod(m, const std::uint8_t*), frame_len(m), now);
    rte_pktmbuf_free(m);
  }
  return true;
}

void Dataplane::process_frame(Core& k, const std::uint8_t* data, std::size_t len, std::uint64_t now) {
  wire::ParsedFrame pf;
  wire::Drop d = wire::parse_frame(data, len, self_ep_, endpoints_.data(), endpoints_.size(), self_,
                                   conns_per_host_, &pf);
  if (d != wire::Drop::kNone) {
    ++k.stats.drops[std::size_t(d)];
    return;
  }
  ++k.stats.frames_processed;
  const std::uint32_t src = pf.hdr.src_host;
  if (!k.mac_known[src]) [[unlikely]] {
    std::memcpy(k.macs[src].data(), pf.src_mac, 6);
    k.mac_known[src] = true;
    std::uint64_t l = 1ull << 63;
    for (int b = 0; b < 6; ++b) l |= std::uint64_t(pf.src_mac[b]) << (8 * b);
    peers_[src].learned_mac.store(l, std::memory_order_relaxed);
  }
  Peer& p = peers_[src];
  Connection& c = *p.conns[pf.hdr.conn];
  auto emit = [this, &k, src](const std::uint8_t* b, std::size_t n) { transmit(k, src, b, n); };
  const bool accepted = c.on_frame(pf.hdr, now, emit) == Connection::Accept::kDeliver;
  if (c.stats().resets != k.resets_seen[src][pf.hdr.conn]) {
    // The peer restarted. Every connection to it starts over with the new
    // incarnation at once: one that had not heard from it yet would still
    // carry the old sequence numbers, and would throw away what the new run
    // sends on it when it finally resets. Then (core 0) forget the peer's
    // old applications and announce ours again (on connection 0, now
    // fresh), before delivering this frame's records: the new peer's first
    // frame may carry its own announce.
    // Records posted to other cores before now were for the previous one.
    std::uint32_t seen = p.boot_seen.load(std::memory_order_relaxed);
    while (std::int32_t(c.peer_boot() - seen) > 0 &&
           !p.boot_seen.compare_exchange_weak(seen, c.peer_boot(), std::memory_order_acq_rel)) {
    }
    peer_restarted(k, src, c.peer_boot());
    for (std::uint32_t o = 0; o < ncores_; ++o) {
      if (o == k.index) continue;
      auto* m = new CoreMsg{CoreMsg::Kind::kRestart};
      m->peer = src;
      m->boot = c.peer_boot();
      post(k, o, m);
    }
  }
  if (accepted) {
    wire::RecordCursor cur(pf.records, pf.hdr.length);
    wire::RecordView v, whole;
    while (cur.next(&v)) {
      switch (c.reassemble(v, &whole)) {
        case Reassembly::Result::kWhole:
          c.count_delivered(v.rec.kind);
          deliver(k, src, v);
          break;
        case Reassembly::Result::kComplete:
          c.count_delivered(whole.rec.kind);
          deliver(k, src, whole);
          break;
        case Reassembly::Result::kHeld: break;
        case Reassembly::Result::kDropped: ++k.stats.records_rejected; break;
      }
    }
  }
}

// The peer restarted as `boot` (seen by this core, or posted by the core
// that saw it): our connections to it start over.
void Dataplane::peer_restarted(Core& k, std::uint32_t peer, std::uint32_t boot) {
  Peer& p = peers_[peer];
  for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
    p.conns[j]->peer_restarted(boot);
    k.resets_seen[peer][j] = p.conns[j]->stats().resets;
  }
  if (k.index == 0) peer_restarted_control(peer, boot);
}

// Core 0: once per incarnation (several cores may report it).
void Dataplane::peer_restarted_control(std::uint32_t peer, std::uint32_t boot) {
  Peer& p = peers_[peer];
  if (p.handled_boot != 0 && std::int32_t(boot - p.handled_boot) <= 0) return;
  p.handled_boot = boot;
  p.apps.clear();
  p.intervals_heard = 0;  // a newcomer again for the QP scheduler
  for (auto& a : apps_)
    if (!a->bad) announce(peer, wire::kRecAttach, *a);
}

void Dataplane::read_faults(Core& k) {
  std::ifstream in(socket_path_ + ".faults");
  std::string text;
  if (in) std::getline(in, text);
  if (text == k.faults_text) return;
  k.faults_text = text;
  Faults f;
  std::istringstream words(text);
  std::string key, value;
  while (words >> key) {
    double* slot = key == "loss" ? &f.loss : key == "duplicate" ? &f.duplicate : key == "reorder" ? &f.reorder : nullptr;
    if (!slot || !(words >> value) || value.empty() || value.back() != '%') {
      if (k.index == 0)
        spdlog::warn("faults file: cannot use '{}' (supported: loss N%, duplicate N%, reorder N%)", text);
      f = Faults{};
      break;
    }
    *slot = std::strtod(value.c_str(), nullptr) / 100.0;
  }
  k.faults = f;
  if (k.index == 0)
    spdlog::info("fault injection on received frames: loss {}%, duplicate {}%, reorder {}%", f.loss * 100,
                 f.duplicate * 100, f.reorder * 100);
}

void Dataplane::deliver(Core& k, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.kind == wire::kRecAttach || r.kind == wire::kRecDetach) {
    if (k.index != 0) {  // announces travel on connection 0 (core 0's)
      ++k.stats.records_rejected;
      return;
    }
    wire::AttachAnnounce an;
    std::memcpy(&an, v.payload, sizeof an);
    auto& apps = peers_[src].apps;
    if (r.kind == wire::kRecAttach) {
      apps[r.app] = RemoteApp{an};
      check_starts();
    } else {
      auto it = apps.find(r.app);
      if (it != apps.end() && it->second.a.instance == an.instance) apps.erase(it);
      if (App* a = app_by_key(k, r.app); a && a->started && !(r.slot_flags & wire::kDetachGraceful))
        send_msg(*a, abi::kMsgPeerLost, src,
                 "its instance on host " + std::to_string(src) + " (" + cfg_.rack.hosts[src].name +
                     ") went away without finishing");
    }
    return;
  }
  App* a = app_by_key(k, r.app);
  if (!a) {
    ++k.stats.records_no_app;
    return;
  }
  if (r.kind == wire::kRecRequest) deliver_request(k, *a, src, v);
  else deliver_response(k, *a, src, v);
}

void Dataplane::deliver_request(Core& k, App& a, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.client >= a.total || r.trustee >= a.total || !a.is_local(r.trustee) ||
      host_of(a.total, r.client) != src || r.primary_len > abi::kRequestPrimaryData ||
      r.overflow_len > abi::kOverflowBytes) {
    ++k.stats.records_rejected;
    return;
  }
  std::uint32_t li = r.trustee - a.first;
  const std::uint32_t last = a.get(a.in_req, li, r.client);
  std::uint8_t* primary = a.request_primary(r.trustee, r.client);
  // The next batch, and the trustee has answered the previous one.
  if (r.slot_seq != last + 1 ||
      load_acquire<std::uint32_t>(a.response_primary(r.client, r.trustee)) != last) {
    ++k.stats.records_rejected;
    return;
  }
  abi::RequestSlotHeader h{};
  h.count = r.count;
  h.primary_len = r.primary_len;
  h.overflow_len = r.overflow_len;
  std::memcpy(primary + sizeof h.seq, reinterpret_cast<std::uint8_t*>(&h) + sizeof h.seq, sizeof h - sizeof h.seq);
  std::memcpy(primary + sizeof h, v.payload, r.primary_len);
  std::memcpy(a.request_overflow(r.trustee, r.client), v.payload + r.primary_len, r.overflow_len);
  a.set(a.in_req, li, r.client, r.slot_seq);
  store_release<std::uint32_t>(primary, r.slot_seq);
  a.wake_thread(li);
}

void Dataplane::deliver_response(Core& k, App& a, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.client >= a.total || r.trustee >= a.total || !a.is_local(r.client) ||
      host_of(a.total, r.trustee) != src || r.primary_len > abi::kResponsePrimaryData ||
      r.overflow_len > abi::kOverflowBytes) {
    ++k.stats.records_rejected;
    return;
  }
  std::uint32_t li = r.client - a.first;
  std::uint8_t* primary = a.response_primary(r.client, r.trustee);
  // Answers the request we shipped last, and only once.
  if (r.slot_seq != a.get(a.out_req, li, r.trustee) || load_acquire<std::uint32_t>(primary) == r.slot_seq) {
    ++k.stats.records_rejected;
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
  Stats t;
  std::vector<Stats> per_core;
  std::vector<abi::ConnCounters> conns;
  collect(&t, &per_core, &conns);
  std::string tmp = socket_path_ + ".stats.tmp";
  {
    std::ofstream o(tmp);
    o << "rx_frames " << t.rx_frames << "\ntx_frames " << t.tx_frames << "\ntx_failed "
      << t.tx_failed << "\nrecords_no_app " << t.records_no_app << "\nrecords_rejected "
      << t.records_rejected << "\napps_attached " << t.apps_attached << "\napps_refused "
      << t.apps_refused << "\napps_detached " << t.apps_detached << "\napps_lost " << t.apps_lost
      << "\napps " << apps_.size() << "\ninjected_loss " << t.injected_loss << "\ninjected_duplicates "
      << t.injected_duplicates << "\ninjected_reorders " << t.injected_reorders << "\nbusy_cycles "
      << t.busy_cycles << "\nidle_cycles " << t.idle_cycles << "\ncores " << ncores_ << "\nsteer_dropped "
      << t.steer_dropped << "\n";
    for (std::size_t d = 1; d < t.drops.size(); ++d)
      o << "dropped{reason=\"" << wire::drop_name(wire::Drop(d)) << "\"} " << t.drops[d] << "\n";
    for (std::size_t k = 0; k < per_core.size(); ++k) {
      const Stats& c = per_core[k];
      const std::string l = "{core=\"" + std::to_string(k) + "\"} ";
      o << "core_busy_cycles" << l << c.busy_cycles << "\ncore_idle_cycles" << l << c.idle_cycles
        << "\ncore_rx_frames" << l << c.rx_frames << "\ncore_frames_processed" << l << c.frames_processed
        << "\ncore_doorbells" << l << c.doorbells << "\ncore_steered" << l << c.steered << "\ncore_handoffs" << l
        << c.handoffs << "\n";
    }
    for (std::uint32_t h = 0; h < hosts_; ++h) {
      if (h == self_) continue;
      for (std::uint32_t c = 0; c < conns_per_host_; ++c) {
        const abi::ConnCounters& s = conns[std::size_t(h) * conns_per_host_ + c];
        std::string l = "{peer=\"" + std::to_string(h) + "\",conn=\"" + std::to_string(c) + "\"} ";
        o << "frames_sent" << l << s.frames_sent << "\nframes_received" << l << s.frames_received
          << "\nrecords_sent" << l << s.records_sent << "\nrequests_sent" << l << s.requests_sent
          << "\nresponses_sent" << l << s.responses_sent << "\nrecords_received" << l << s.records_received
          << "\nretransmits" << l << s.retransmits << "\ntimeouts" << l << s.timeouts << "\nfast_retransmits"
          << l << s.fast_retransmits << "\nduplicates" << l << s.duplicates << "\nout_of_order" << l
          << s.out_of_order << "\ncredit_stalls" << l << s.credit_stalls << "\nrenewals_requested" << l
          << s.renewals_requested << "\nrenewals_granted" << l << s.renewals_granted << "\ncredits" << l
          << s.credits << "\nresets" << l << s.resets << "\nwrong_incarnation" << l
          << s.wrong_incarnation << "\nfragments_sent" << l << s.fragments_sent << "\nfragments_received" << l
          << s.fragments_received << "\nslots_reassembled" << l << s.slots_reassembled << "\ninbound_active" << l
          << s.inbound_active << "\noutbound_active" << l << s.outbound_active << "\nrenewals_declined" << l
          << s.renewals_declined << "\ncore" << l << conn_owner(c) << "\n";
        std::string r = "{peer=\"" + std::to_string(h) + "\",conn=\"" + std::to_string(c) + "\",reason=\"";
        o << "fragments_dropped" << r << "bad_offset\"} " << s.frag_bad_offset << "\nfragments_dropped" << r
          << "oversize\"} " << s.frag_oversize << "\nfragments_dropped" << r << "mismatch\"} " << s.frag_mismatch
          << "\nfragments_dropped" << r << "interrupted\"} " << s.frag_interrupted << "\n";
      }
    }
    // The thread scheduler's placement: per application thread and peer.
    o << "thread_moves " << t.thread_moves << "\n";
    for (const auto& a : apps_)
      for (std::uint32_t h = 0; h < hosts_; ++h) {
        if (h == self_) continue;
        for (std::uint32_t i = 0; i < a->local; ++i)
          o << "thread_conn{pid=\"" << a->pid << "\",thread=\"" << a->first + i << "\",peer=\"" << h << "\"} "
            << unsigned(a->flow(h, i).get_conn()) << "\n";
      }
  }
  std::rename(tmp.c_str(), (socket_path_ + ".stats").c_str());
}

void Dataplane::sleep_until_work(Core& k, std::uint64_t now) {
  // Applications see a non-zero word while any core sleeps, and kick
  // (their eventfd wakes every core).
  const std::uint32_t bit = 1u << (k.index % 32);
  for (App* a : *k.apps) std::atomic_ref<std::uint32_t>(*a->sleeping()).fetch_or(bit, std::memory_order_seq_cst);
  k.sleeping.store(true, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // Dekker with dispatch() and post()
  std::uint64_t deadline = UINT64_MAX;
  for (std::uint32_t h = 0; h < hosts_; ++h)
    for (std::uint32_t j = k.index; h != self_ && j < conns_per_host_; j += ncores_)
      deadline = std::min(deadline, peers_[h].conns[j]->next_deadline());
  std::uint64_t since_work = now - k.last_work;
  std::uint64_t timeout_ns =
      since_work >= tsc_hz_ ? kMaxSleepNs
                            : std::clamp<std::uint64_t>((since_work * 1'000'000'000ull / tsc_hz_) >> kSleepShift, kMinSleepNs,
                                         kMaxSleepNs);
  if (deadline <= now) {
    timeout_ns = 0;
  } else if (deadline != UINT64_MAX) {
    timeout_ns = std::min<std::uint64_t>(timeout_ns, (deadline - now) * 1'000'000'000ull / tsc_hz_ + 1);
  }
  if (timeout_ns && !any_doorbell(k) && rte_ring_empty(k.frames) && rte_ring_empty(k.msgs)) {
    epoll_event evs[16];
    timespec ts{time_t(timeout_ns / 1'000'000'000ull), long(timeout_ns % 1'000'000'000ull)};
    ::epoll_pwait2(k.epoll_fd, evs, 16, &ts, nullptr);
  }
  k.sleeping.store(false, std::memory_order_relaxed);
  std::uint64_t buf;
  (void)!::read(k.wake_fd, &buf, sizeof buf);
  for (App* a : *k.apps) std::atomic_ref<std::uint32_t>(*a->sleeping()).fetch_and(~bit, std::memory_order_relaxed);
}

void Dataplane::run(const std::atomic<bool>& stop) {
  for (std::size_t i = 1; i < cores_.size(); ++i) {
    Core& k = *cores_[i];
    k.thread = std::thread([this, &k, &stop] {
      if (rte_thread_register() != 0)
        spdlog::warn("core {}: rte_thread_register: {} (mbufs without a per-core cache)", k.index,
                     rte_strerror(rte_errno));
      core_loop(k, stop);
      rte_thread_unregister();
    });
  }
  core_loop(*cores_[0], stop);
  for (std::size_t i = 1; i < cores_.size(); ++i) cores_[i]->thread.join();
  write_stats();
  write_metrics();
}

// One polling core. Core 0 also serves the sockets, frees what no core
// uses any more, and writes the stats and metrics files.
void Dataplane::core_loop(Core& k, const std::atomic<bool>& stop) {
  // The default 50 us timer slack would swallow the short sleeps.
  ::prctl(PR_SET_TIMERSLACK, 5'000UL);
  const bool control = k.index == 0;
  std::uint32_t idle = 0;
  std::uint64_t last = rte_rdtsc();
  std::uint32_t iter = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    refresh_apps(k);                  // the application list (generation)
    bool worked = poll_rx(k);         // our NIC queue: process, or steer to the owner
    worked |= poll_steered(k);        // frames other queues received for our connections
    worked |= poll_msgs(k);           // records and control from other cores
    worked |= poll_doorbells(k);      // our threads' rings -> connections
    worked |= pump(k);                // our connections -> our tx queue
    if (k.backlogged) flush_backlog(k);
    if (control && ((++iter & 63) == 0 || idle >= kSpin)) {
      // Sockets: new applications, detaches, deaths.
      accept_apps();
      for (std::size_t i = 0; i < apps_.size(); ++i) app_message(*apps_[i]);
      sweep_apps();
      free_retired(false);
    }
    std::uint64_t now = rte_rdtsc();
    (worked ? k.stats.busy_cycles : k.stats.idle_cycles) += now - last;
    last = now;
    if (now - k.last_schedule > tsc_hz_ / 1'000'000 * cfg_.connections.scheduler_interval_us) {
      schedule(k);
      k.last_schedule = now;
    }
    if (now - k.last_publish > tsc_hz_ / 1000 * abi::kMetricsPeriodMs) {
      publish(k);
      k.last_publish = now;
    }
    if (now - k.last_faults > tsc_hz_) {
      read_faults(k);
      k.last_faults = now;
    }
    if (control && now - last_metrics_write_ > tsc_hz_ / 1000 * abi::kMetricsPeriodMs) {
      write_metrics();
      last_metrics_write_ = now;
    }
    if (control && now - last_stats_write_ > tsc_hz_) {
      write_stats();
      last_stats_write_ = now;
    }
    if (worked) {
      idle = 0;
      k.last_work = now;
      continue;
    }
    ++idle;
    if (cfg_.dataplane.polling == config::Polling::busy || idle < kSpin) {
      rte_pause();
    } else if (idle < kSpin + kYield) {
      ::sched_yield();
    } else {
      sleep_until_work(k, now);
      idle = kSpin;  // after a sleep: check sockets, then sleep again soon
    }
    std::uint64_t after = rte_rdtsc();
    k.stats.idle_cycles += after - last;
    last = after;
  }
  flush_tx(k);
  publish(k);
}

}  // namespace gossamer::dataplane
