// The DPDK port (port_dpdk.hpp).
#include "port_dpdk.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <spdlog/spdlog.h>

namespace gossamer::dataplane {

namespace {
Frame view(rte_mbuf* m) {
  // A chained mbuf is never one of our frames: length 0, which no stage takes.
  return Frame{m, rte_pktmbuf_mtod(m, std::uint8_t*), m->nb_segs == 1 ? m->data_len : 0u};
}

// The value of `key` in a device's arguments ("iface=veth0,framesz=4096"), or "".
std::string devarg(const rte_eth_dev_info& info, const std::string& key) {
  const rte_devargs* da = info.device ? rte_dev_devargs(info.device) : nullptr;
  if (!da || !da->args) return "";
  const std::string args = std::string(",") + da->args + ",";
  const auto at = args.find("," + key + "=");
  if (at == std::string::npos) return "";
  const auto from = at + key.size() + 2;
  return args.substr(from, args.find(',', from) - from);
}

// The largest MTU the port carries, and what sets it (for the error). The
// ethdev's own figure (max_mtu, max_rx_pktlen less the Ethernet overhead);
// DPDK 22.11's net_af_packet and net_memif report 1518-byte frames whatever
// they are given, so for them it comes from what really limits them:
//   net_af_packet: a frame lands in a ring slot of `framesz` bytes (default
//     2048) after 66 bytes of kernel headers (TPACKET_V2), and the kernel
//     interface's MTU bounds what it sends and receives;
//   net_memif: a frame spans as many ring buffers as it needs and is copied
//     into one mbuf, which we size to the MTU: the mbuf is the limit.
std::uint32_t mtu_limit(const rte_eth_dev_info& info, const std::string& driver, std::uint32_t mbuf_room,
                        std::string* why) {
  constexpr std::uint32_t kEth = RTE_ETHER_HDR_LEN;
  if (driver == "net_memif") {
    *why = "net_memif: a frame must fit one mbuf of " + std::to_string(mbuf_room) + " bytes";
    return mbuf_room - kEth;
  }
  if (driver == "net_af_packet") {
    const std::string fs = devarg(info, "framesz");
    const std::uint32_t framesz = fs.empty() ? 2048 : std::uint32_t(std::strtoul(fs.c_str(), nullptr, 10));
    std::uint32_t limit = framesz > 80 ? framesz - 66 - kEth : 0;
    *why = "net_af_packet: ring frames of " + std::to_string(framesz) + " bytes (framesz= in the --vdev)";
    const std::string iface = devarg(info, "iface");
    if (std::FILE* f = std::fopen(("/sys/class/net/" + iface + "/mtu").c_str(), "r")) {
      unsigned kernel = 0;
      if (std::fscanf(f, "%u", &kernel) == 1 && kernel < limit) {
        limit = kernel;
        *why = "net_af_packet: interface " + iface + "'s MTU (ip link set dev " + iface + " mtu N)";
      }
      std::fclose(f);
    }
    return limit;
  }
  const std::uint32_t overhead = info.max_mtu != UINT16_MAX && info.max_rx_pktlen > info.max_mtu
                                     ? info.max_rx_pktlen - info.max_mtu
                                     : RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
  *why = driver + ": max_mtu " + std::to_string(info.max_mtu) + ", max_rx_pktlen " +
         std::to_string(info.max_rx_pktlen);
  return std::min<std::uint32_t>(info.max_mtu, info.max_rx_pktlen > overhead ? info.max_rx_pktlen - overhead : 0);
}

// Names the unix socket file at `path` (a new file gets a new name even
// when the file system reuses its inode number), or 0 when there is none.
std::uint64_t socket_inode(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  const std::uint64_t ctime = std::uint64_t(st.st_ctim.tv_sec) * 1'000'000'000ull + std::uint64_t(st.st_ctim.tv_nsec);
  return ((std::uint64_t(st.st_ino) * 0x9e3779b97f4a7c15ull) ^ ctime) | 1;
}

// Before the EAL starts a net_memif with a path socket. Nothing here
// connects to a server: DPDK 22.11's memif server panics (its interrupt
// thread) when a client hangs up right after connecting.
//  - a server binds its socket file and never removes it, so one left by a
//    killed dataplane would keep the next from starting: remove it (the
//    incarnation lock keeps a second dataplane of this host from getting
//    here while the first runs);
//  - a client whose first connect fails is started again by nobody, and
//    one started again after a failure carries nothing: wait until the
//    server's socket exists, up to 20 s, and a little more for it to listen.
std::string prepare_memif(const std::vector<std::string>& eal_args) {
  for (const std::string& a : eal_args) {
    if (a.find("net_memif") == std::string::npos || a.find("socket-abstract=no") == std::string::npos) continue;
    const std::string args = a + ",";
    const auto at = args.find(",socket=");
    if (at == std::string::npos) continue;
    const std::string path = args.substr(at + 8, args.find(',', at + 8) - at - 8);
    if (args.find(",role=server,") != std::string::npos) {
      if (socket_inode(path)) {
        spdlog::info("removing {}, a previous memif server's socket", path);
        ::unlink(path.c_str());
      }
      continue;
    }
    for (int tries = 0; !socket_inode(path); ++tries) {
      if (tries == 200) return "no memif server socket at " + path + " for 20 s (start the peer's dataplane)";
      if (tries == 0) spdlog::info("waiting for the memif server (the peer's dataplane) to create {}", path);
      ::usleep(100'000);
    }
    ::usleep(200'000);
  }
  return "";
}
}  // namespace

struct DpdkPort::Env {
  rte_mempool* pool = nullptr;
  ~Env() { rte_eal_cleanup(); }
};

std::string DpdkPort::open(const char* argv0, const std::vector<std::string>& eal_args,
                           const std::vector<std::string>& names, std::uint16_t port_id, std::uint16_t queues,
                           std::uint32_t mtu, std::uint16_t udp_port, std::vector<std::unique_ptr<Port>>* out) {
  if (std::string err = prepare_memif(eal_args); !err.empty()) return err;
  std::vector<std::string> args{argv0};
  for (const auto& a : eal_args) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  if (rte_eal_init(int(argv.size()), argv.data()) < 0)
    return std::string("DPDK EAL initialisation failed: ") + rte_strerror(rte_errno) +
           " (check dataplane.eal_args)";
  auto env = std::make_shared<Env>();
  // Every port checked before any starts; one mbuf pool, with room for the
  // largest frame any of them needs.
  std::vector<std::unique_ptr<DpdkPort>> ports;
  std::uint32_t room = 0;
  for (std::size_t i = 0; i < std::max<std::size_t>(names.size(), 1); ++i) {
    std::unique_ptr<DpdkPort> p(new DpdkPort);
    p->env_ = env;
    std::uint32_t r = 0;
    if (std::string err = p->probe(names.empty() ? "" : names[i], port_id, queues, mtu, udp_port, &r); !err.empty())
      return err;
    room = std::max(room, r);
    ports.push_back(std::move(p));
  }
  for (const auto& p : ports)
    if (std::string err = p->check_mtu(room); !err.empty()) return err;
  // 4096 mbufs per queue, and 2048 more per queue of each further port
  // (its rx ring's descriptors and frames in flight).
  const unsigned mbufs = std::max<unsigned>(8191, 4096u * queues + 2048u * queues * unsigned(ports.size() - 1) - 1);
  env->pool = rte_pktmbuf_pool_create("gsm_pool", mbufs, 256, 0, std::uint16_t(room), int(rte_socket_id()));
  if (!env->pool)
    return std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno) + " (" + std::to_string(mbufs) +
           " mbufs of " + std::to_string(room) + " bytes for " + std::to_string(ports.size()) + " port" +
           (ports.size() == 1 ? "" : "s") + " x " + std::to_string(queues) + " queue" + (queues == 1 ? "" : "s") +
           "; give the EAL more memory: -m in dataplane.eal_args)";
  for (auto& p : ports) {
    p->pool_ = env->pool;
    if (std::string err = p->start(udp_port); !err.empty()) return p->label_ + ": " + err;
    out->push_back(std::move(p));
  }
  return "";
}

std::string DpdkPort::probe(const std::string& name, std::uint16_t port_id, std::uint16_t queues, std::uint32_t mtu,
                            std::uint16_t udp_port, std::uint32_t* room_out) {
  if (!name.empty()) {
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) != 0) {
      std::string have;
      std::uint16_t id;
      RTE_ETH_FOREACH_DEV(id) {
        char n[RTE_ETH_NAME_MAX_LEN] = "";
        rte_eth_dev_get_name_by_port(id, n);
        have += (have.empty() ? "" : ", ") + std::string(n);
      }
      return "DPDK port '" + name + "' does not exist (the EAL has " + (have.empty() ? "none" : have) +
             "; check dataplane.ports and dataplane.eal_args)";
    }
    label_ = "port " + std::to_string(port_id) + " (" + name + ")";
  } else {
    label_ = "port " + std::to_string(port_id);
  }
  port_ = port_id;
  queues_ = queues;
  mtu_ = mtu;
  if (!rte_eth_dev_is_valid_port(port_id))
    return "DPDK port " + std::to_string(port_id) + " does not exist (" + std::to_string(rte_eth_dev_count_avail()) +
           " ports; give a --vdev such as net_af_packet0,iface=veth0 in dataplane.eal_args)";
  // One rx and one tx queue per core: a queue has one poller.
  rte_eth_dev_info info{};
  if (int r = rte_eth_dev_info_get(port_id, &info); r < 0)
    return "rte_eth_dev_info_get: " + std::string(rte_strerror(-r));
  driver_ = info.driver_name ? info.driver_name : "?";
  if (driver_ == "net_af_packet" && info.if_index && udp_port) {
    // The driver's packet sockets take every frame of the interface (the
    // kernel's TCP too: a benchmark's, gossamerd's), which a core would wake
    // for, read and drop. A filter, attached once, leaves them only ours.
    // The driver opened and bound them at probe time (rte_eal_init): the
    // filter goes on before the port starts and anything reads them.
    int filtered = 0;
    std::string err;
    for (int fd : packet_sockets_on(int(info.if_index)))
      if (err = gossamer_filter(fd, udp_port, 0x40000); err.empty()) ++filtered;
    if (filtered)
      spdlog::info("{}: {} driver socket{} take only UDP port {}", driver_, filtered, filtered == 1 ? "" : "s",
                   udp_port);
    else
      spdlog::warn("{}: could not filter the driver's sockets ({}): every frame of the interface reaches the cores",
                   driver_, err.empty() ? "none found in /proc/self/fd" : err);
  }
  if (info.max_rx_queues < queues || info.max_tx_queues < queues)
    return "dataplane.cores is " + std::to_string(queues) + ", but " + label_ + " (" + driver_ + ") has " +
           std::to_string(info.max_rx_queues) + " rx and " + std::to_string(info.max_tx_queues) +
           " tx queues; every core needs one of each " + "(net_af_packet: qpairs=" + std::to_string(queues) +
           ", net_af_xdp: queue_count=" + std::to_string(queues) + " in the --vdev argument)";
  // One mbuf holds a whole frame of the MTU (a chained one is dropped).
  // af_packet also wants every ring frame to fit one.
  std::uint32_t room =
      std::max<std::uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, RTE_PKTMBUF_HEADROOM + RTE_ETHER_HDR_LEN + mtu);
  if (const std::string fs = devarg(info, "framesz"); driver_ == "net_af_packet" && !fs.empty())
    room = std::max<std::uint32_t>(room, RTE_PKTMBUF_HEADROOM + std::uint32_t(std::strtoul(fs.c_str(), nullptr, 10)));
  *room_out = (room + 63) & ~63u;
  return "";
}

std::string DpdkPort::check_mtu(std::uint32_t room) const {
  rte_eth_dev_info info{};
  if (int r = rte_eth_dev_info_get(port_, &info); r < 0)
    return "rte_eth_dev_info_get: " + std::string(rte_strerror(-r));
  std::string why;
  if (const std::uint32_t limit = mtu_limit(info, driver_, room - RTE_PKTMBUF_HEADROOM, &why); mtu_ > limit)
    return "dataplane.mtu is " + std::to_string(mtu_) + ", but " + label_ + " carries at most " +
           std::to_string(limit) + " (" + why + ")";
  return "";
}

std::string DpdkPort::start(std::uint16_t udp_port) {
  const std::uint16_t port_id = port_, queues = queues_;
  rte_eth_dev_info info{};
  if (int r = rte_eth_dev_info_get(port_id, &info); r < 0)
    return "rte_eth_dev_info_get: " + std::string(rte_strerror(-r));
  rte_eth_conf conf{};
  if (queues > 1 && (info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP))) {
    // A NIC spreads flows over the queues; the vdevs spread by their own
    // means (af_packet: PACKET_FANOUT_HASH). Either way a frame may land
    // on another core than its connection's, which steers it (rx.cpp).
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP);
  }
  if (int r = rte_eth_dev_configure(port_id, queues, queues, &conf); r < 0)
    return "rte_eth_dev_configure: " + std::string(rte_strerror(-r));
  std::uint16_t nrx = 1024, ntx = 1024;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &nrx, &ntx);
  const int sock = rte_eth_dev_socket_id(port_id);
  for (std::uint16_t q = 0; q < queues; ++q) {
    if (int r = rte_eth_rx_queue_setup(port_id, q, nrx, sock < 0 ? 0 : unsigned(sock), nullptr, pool_); r < 0)
      return "rx queue " + std::to_string(q) + " setup: " + std::string(rte_strerror(-r));
    if (int r = rte_eth_tx_queue_setup(port_id, q, ntx, sock < 0 ? 0 : unsigned(sock), nullptr); r < 0)
      return "tx queue " + std::to_string(q) + " setup: " + std::string(rte_strerror(-r));
  }
  if (int r = rte_eth_dev_start(port_id); r < 0) return "port start: " + std::string(rte_strerror(-r));
  started_ = true;
  if (driver_ == "net_memif" && devarg(info, "role") == "client") {
    memif_socket_ = devarg(info, "socket");
    memif_inode_ = socket_inode(memif_socket_);
  }
  rte_ether_addr mac{};
  rte_eth_macaddr_get(port_id, &mac);
  std::memcpy(mac_.data(), mac.addr_bytes, 6);
  // af_packet has no receive interrupts: a wake socket per queue lets a
  // sleeping core hear frames (rx_wake.hpp). Without one, it wakes on a timer.
  if (driver_ == "net_af_packet") {
    std::string err = info.if_index ? "" : "the driver names no interface";
    for (std::uint16_t q = 0; q < queues && err.empty(); ++q) {
      RxWakeSocket s;
      if (err = RxWakeSocket::open(int(info.if_index), udp_port, &s); err.empty()) wake_.push_back(std::move(s));
    }
    wake_warned_.assign(wake_.size(), 0);
    if (!err.empty()) {
      wake_.clear();
      spdlog::warn("no wake socket for {} ({}): sleeping cores wake every millisecond to look for frames",
                   driver_, err);
    }
  }
  // af_xdp: Gossamer's XDP program signals a sleeping queue (xdp_wake.hpp).
  if (driver_ == "net_af_xdp") {
    std::string err = info.if_index ? XdpWake::open(int(info.if_index), queues, &xdp_wake_)
                                    : "the driver names no interface";
    if (!err.empty())
      spdlog::warn("no XDP wake-up for {} ({}): sleeping cores wake every millisecond to look for frames",
                   driver_, err);
    wake_warned_.assign(queues, 0);
  }
  // memif: a doorbell beside the socket (memif_wake.hpp), for a path socket.
  if (driver_ == "net_memif") {
    std::string err = devarg(info, "socket-abstract") != "no"
                          ? "an abstract socket (the doorbell needs socket-abstract=no)"
                          : MemifWake::open(devarg(info, "socket"), devarg(info, "role") == "client", queues,
                                            &memif_wake_);
    if (!err.empty())
      spdlog::warn("no memif wake-up ({}): sleeping cores wake every millisecond to look for frames", err);
    wake_warned_.assign(queues, 0);
  }
  return "";
}


DpdkPort::~DpdkPort() {
  if (started_) {
    rte_eth_dev_stop(port_);
    rte_eth_dev_close(port_);
  }
  // The EAL goes with the last port (env_).
}

std::uint16_t DpdkPort::rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) {
  rte_mbuf* bufs[64];
  const std::uint16_t got = rte_eth_rx_burst(port_, q, bufs, std::min<std::uint16_t>(n, 64));
  for (std::uint16_t i = 0; i < got; ++i) out[i] = view(bufs[i]);
  return got;
}

bool DpdkPort::alloc(std::uint32_t len, Frame* out) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) return false;
  auto* data = rte_pktmbuf_append(m, std::uint16_t(len));
  if (!data) {
    rte_pktmbuf_free(m);
    return false;
  }
  *out = Frame{m, reinterpret_cast<std::uint8_t*>(data), len};
  return true;
}

std::uint16_t DpdkPort::tx_burst(std::uint16_t q, Frame* frames, std::uint16_t n) {
  rte_mbuf* bufs[64];
  n = std::min<std::uint16_t>(n, 64);
  for (std::uint16_t i = 0; i < n; ++i) bufs[i] = static_cast<rte_mbuf*>(frames[i].handle);
  const std::uint16_t sent = rte_eth_tx_burst(port_, q, bufs, n);
  if (sent && memif_wake_.ready()) memif_wake_.sent(q);
  return sent;
}

void DpdkPort::release(const Frame& f) { rte_pktmbuf_free(static_cast<rte_mbuf*>(f.handle)); }
void DpdkPort::retain(const Frame& f) { rte_mbuf_refcnt_update(static_cast<rte_mbuf*>(f.handle), 1); }
Frame DpdkPort::frame(void* handle) const { return view(static_cast<rte_mbuf*>(handle)); }
std::uint64_t DpdkPort::tsc_hz() const { return rte_get_tsc_hz(); }

// A reading that fails keeps the last one: counters never go back (a
// Prometheus counter that fell would be counted again in full).
Port::DeviceErrors DpdkPort::device_errors() const {
  rte_eth_stats s{};
  if (rte_eth_stats_get(port_, &s) == 0) errors_ = {s.imissed, s.ierrors, s.rx_nombuf, s.oerrors};
  return errors_;
}

bool DpdkPort::rx_wake_arm(std::uint16_t q, bool quiet) {
  std::string e;
  if (q < wake_.size()) e = wake_[q].drain();
  else if (xdp_wake_.ready() && q < queues_) e = xdp_wake_.arm(q);
  // memif: the peer pays a sendto per doorbell (about 12 k cycles per slot
  // when every frame found us asleep under load), so only a quiet host's
  // long sleeps ask for one; the others clear the socket of late ones.
  else if (memif_wake_.ready() && q < queues_ && quiet) e = memif_wake_.arm(q);
  else if (memif_wake_.ready() && q < queues_) {
    e = memif_wake_.stay_awake(q);
    if (e.empty()) return false;
  } else
    return false;
  if (!e.empty() && !wake_warned_[q]) {  // that sleep is a timed one (loop.cpp)
    spdlog::warn("queue {}: wake-up: {}; this core's sleeps stay short", q, e);
    wake_warned_[q] = 1;
  }
  return e.empty();
}

void DpdkPort::thread_started(std::uint32_t core) {
  if (rte_thread_register() != 0)
    spdlog::warn("core {}: rte_thread_register: {} (mbufs without a per-core cache)", core, rte_strerror(rte_errno));
}
void DpdkPort::thread_stopped(std::uint32_t) { rte_thread_unregister(); }

namespace {
std::atomic<bool> g_restart_wanted{false};
}  // namespace
bool DpdkPort::restart_wanted() { return g_restart_wanted.load(); }

// A memif client does not connect again when its server goes away (its
// dataplane restarted): once the link is down and a server listens again,
// stop and start the port, which connects. With one queue, whose core is
// this one (core 0), no other core touches the port meanwhile. With
// several, the other cores poll their queues all the time and the port
// cannot be stopped under them: the dataplane stops instead, and gossamerd
// starts it again (a new incarnation; the peers reset their connections to
// it, as after any restart).
void DpdkPort::maintain() {
  if (memif_socket_.empty()) return;
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_, &link) != 0) return;
  if (link.link_status == RTE_ETH_LINK_UP) {
    if (!link_was_up_ && reconnect_logged_) spdlog::info("memif link up again");
    link_was_up_ = true;
    reconnect_logged_ = false;
    return;
  }
  if (!link_was_up_ && !reconnect_logged_ && started_) return;  // still connecting the first time
  if (!reconnect_logged_) spdlog::warn("memif link down (the server went away): connecting again when it listens");
  reconnect_logged_ = true;
  link_was_up_ = false;
  // A new server binds a new socket file; give it a moment to listen.
  const std::uint64_t ino = socket_inode(memif_socket_);
  if (!ino || ino == memif_inode_) return;
  if (queues_ != 1) {
    if (!g_restart_wanted.exchange(true)) {
      spdlog::warn("memif server is back, and a port of {} queues cannot be restarted under its cores: stopping, "
                   "so that gossamerd starts this dataplane again", queues_);
      std::raise(SIGTERM);
    }
    return;
  }
  ::usleep(200'000);
  memif_inode_ = ino;
  if (started_) rte_eth_dev_stop(port_);
  started_ = rte_eth_dev_start(port_) >= 0;
}

std::string DpdkPort::describe() const {
  return "DPDK port " + std::to_string(port_) + " (" + driver_ + "), " + std::to_string(queues_) + " queue" +
         (queues_ == 1 ? "" : "s") + ", MTU " + std::to_string(mtu_) +
         (wake_.empty() && !xdp_wake_.ready() && !memif_wake_.ready() ? ", cores wake on a timer"
                                                                      : ", cores wake on frames");
}

}  // namespace gossamer::dataplane
