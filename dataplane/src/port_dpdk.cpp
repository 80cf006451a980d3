// The DPDK port (port_dpdk.hpp).
#include "port_dpdk.hpp"

#include <algorithm>
#include <cstring>

#include <rte_cycles.h>
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
}  // namespace

std::string DpdkPort::open(const char* argv0, const std::vector<std::string>& eal_args, std::uint16_t port_id,
                           std::uint16_t queues, std::unique_ptr<Port>* out) {
  std::unique_ptr<DpdkPort> p(new DpdkPort);
  std::vector<std::string> args{argv0};
  for (const auto& a : eal_args) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  if (rte_eal_init(int(argv.size()), argv.data()) < 0)
    return std::string("DPDK EAL initialisation failed: ") + rte_strerror(rte_errno) +
           " (check dataplane.eal_args)";
  p->eal_ready_ = true;
  p->port_ = port_id;
  p->queues_ = queues;
  if (!rte_eth_dev_is_valid_port(port_id))
    return "DPDK port " + std::to_string(port_id) + " does not exist (" + std::to_string(rte_eth_dev_count_avail()) +
           " ports; give a --vdev such as net_af_packet0,iface=veth0 in dataplane.eal_args)";
  // One rx and one tx queue per core: a queue has one poller.
  rte_eth_dev_info info{};
  if (int r = rte_eth_dev_info_get(port_id, &info); r < 0)
    return "rte_eth_dev_info_get: " + std::string(rte_strerror(-r));
  p->driver_ = info.driver_name ? info.driver_name : "?";
  if (info.max_rx_queues < queues || info.max_tx_queues < queues)
    return "dataplane.cores is " + std::to_string(queues) + ", but port " + std::to_string(port_id) + " (" +
           p->driver_ + ") has " + std::to_string(info.max_rx_queues) + " rx and " +
           std::to_string(info.max_tx_queues) + " tx queues; every core needs one of each " +
           "(net_af_packet: qpairs=" + std::to_string(queues) + ", net_af_xdp: queue_count=" +
           std::to_string(queues) + " in the --vdev argument)";
  p->pool_ = rte_pktmbuf_pool_create("gsm_pool", std::max<unsigned>(8191, 4096u * queues - 1), 256, 0,
                                     RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id()));
  if (!p->pool_) return std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno);
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
    if (int r = rte_eth_rx_queue_setup(port_id, q, nrx, sock < 0 ? 0 : unsigned(sock), nullptr, p->pool_); r < 0)
      return "rx queue " + std::to_string(q) + " setup: " + std::string(rte_strerror(-r));
    if (int r = rte_eth_tx_queue_setup(port_id, q, ntx, sock < 0 ? 0 : unsigned(sock), nullptr); r < 0)
      return "tx queue " + std::to_string(q) + " setup: " + std::string(rte_strerror(-r));
  }
  if (int r = rte_eth_dev_start(port_id); r < 0) return "port start: " + std::string(rte_strerror(-r));
  p->started_ = true;
  rte_ether_addr mac{};
  rte_eth_macaddr_get(port_id, &mac);
  std::memcpy(p->mac_.data(), mac.addr_bytes, 6);
  // af_packet has no receive interrupts: a wake socket per queue lets a
  // sleeping core hear frames (rx_wake.hpp). Without one, it wakes on a timer.
  if (p->driver_ == "net_af_packet") {
    std::string err = info.if_index ? "" : "the driver names no interface";
    for (std::uint16_t q = 0; q < queues && err.empty(); ++q) {
      RxWakeSocket s;
      if (err = RxWakeSocket::open(int(info.if_index), &s); err.empty()) p->wake_.push_back(std::move(s));
    }
    p->wake_warned_.assign(p->wake_.size(), 0);
    if (!err.empty()) {
      p->wake_.clear();
      spdlog::warn("no wake socket for {} ({}): sleeping cores wake every millisecond to look for frames",
                   p->driver_, err);
    }
  }
  *out = std::move(p);
  return "";
}

DpdkPort::~DpdkPort() {
  if (started_) {
    rte_eth_dev_stop(port_);
    rte_eth_dev_close(port_);
  }
  if (eal_ready_) rte_eal_cleanup();
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
  return rte_eth_tx_burst(port_, q, bufs, n);
}

void DpdkPort::release(const Frame& f) { rte_pktmbuf_free(static_cast<rte_mbuf*>(f.handle)); }
void DpdkPort::retain(const Frame& f) { rte_mbuf_refcnt_update(static_cast<rte_mbuf*>(f.handle), 1); }
Frame DpdkPort::frame(void* handle) const { return view(static_cast<rte_mbuf*>(handle)); }
std::uint64_t DpdkPort::tsc_hz() const { return rte_get_tsc_hz(); }

bool DpdkPort::rx_wake_arm(std::uint16_t q) {
  if (q >= wake_.size()) return false;
  std::string e = wake_[q].drain();
  if (!e.empty() && !wake_warned_[q]) {  // that sleep is a timed one (loop.cpp)
    spdlog::warn("queue {}: wake socket: {}; this core's sleeps stay short", q, e);
    wake_warned_[q] = 1;
  }
  return e.empty();
}

void DpdkPort::thread_started(std::uint32_t core) {
  if (rte_thread_register() != 0)
    spdlog::warn("core {}: rte_thread_register: {} (mbufs without a per-core cache)", core, rte_strerror(rte_errno));
}
void DpdkPort::thread_stopped(std::uint32_t) { rte_thread_unregister(); }

std::string DpdkPort::describe() const {
  return "DPDK port " + std::to_string(port_) + " (" + driver_ + "), " + std::to_string(queues_) + " queue" +
         (queues_ == 1 ? "" : "s") + (wake_.empty() ? ", cores wake on a timer" : ", cores wake on frames");
}

}  // namespace gossamer::dataplane
