// Start-up and shut-down of the dataplane (dataplane.hpp): an ordered list
// of named steps, each with a clear error when it fails.
#include "dataplane.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <spdlog/spdlog.h>

namespace gossamer::dataplane {

namespace {

std::uint32_t parse_ip(const std::string& s) {
  in_addr a{};
  ::inet_pton(AF_INET, s.c_str(), &a);
  return a.s_addr;
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

}  // namespace gossamer::dataplane
