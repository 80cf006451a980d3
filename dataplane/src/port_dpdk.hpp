// DPDK ethdevs as the dataplane's ports (port.hpp): the EAL and one mbuf
// pool, shared by every port, and on each port one rx and one tx queue per
// polling core. The only file that calls rte_eth_* and rte_pktmbuf_*.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "port.hpp"
#include "memif_wake.hpp"
#include "rx_wake.hpp"
#include "xdp_wake.hpp"

struct rte_mempool;
struct rte_eth_dev_info;

namespace gossamer::dataplane {

class DpdkPort final : public Port {
 public:
  // Initialises the EAL with `eal_args` and starts the ports named in
  // `names` (ethdev names: a vdev's, "net_memif1", or a PCI address; in
  // that order in `out`), or, with no names, port id `port`; each with
  // `queues` rx and tx queues, for frames of `mtu` IP bytes (mbufs hold one
  // whole; every port must carry it). `udp_port`: the dataplane's own UDP
  // port; on af_packet only frames to it reach the driver's sockets and wake
  // a core (the interface's other traffic stays the kernel's). Returns "" or
  // an error naming the port and what to check.
  static std::string open(const char* argv0, const std::vector<std::string>& eal_args,
                          const std::vector<std::string>& names, std::uint16_t port, std::uint16_t queues,
                          std::uint32_t mtu, std::uint16_t udp_port, std::vector<std::unique_ptr<Port>>* out);
  ~DpdkPort() override;
  // True once a port asked for its process to be started again (maintain:
  // a memif client with several queues whose server came back). The
  // dataplane then stops (SIGTERM) and exits 75, and gossamerd starts it.
  static bool restart_wanted();

  std::uint16_t queues() const override { return queues_; }
  std::array<std::uint8_t, 6> mac() const override { return mac_; }
  std::uint16_t rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) override;
  bool alloc(std::uint32_t len, Frame* out) override;
  std::uint16_t tx_burst(std::uint16_t q, Frame* frames, std::uint16_t n) override;
  void release(const Frame& f) override;
  void retain(const Frame& f) override;
  Frame frame(void* handle) const override;
  int rx_wake_fd(std::uint16_t q) const override {
    if (q < wake_.size()) return wake_[q].fd();
    if (q >= queues_) return -1;
    return xdp_wake_.ready() ? xdp_wake_.fd() : memif_wake_.fd(q);
  }
  bool rx_wake_arm(std::uint16_t q, bool quiet) override;
  std::uint64_t tsc_hz() const override;
  DeviceErrors device_errors() const override;
  void thread_started(std::uint32_t core) override;
  void thread_stopped(std::uint32_t core) override;
  void maintain() override;
  std::string describe() const override;

 private:
  struct Env;  // the EAL and the mbuf pool, shared by the ports
  DpdkPort() = default;
  // Finds the port and checks it (queues, MTU); sets *room to the mbuf
  // room it needs. Then start() on the pool made for every port.
  std::string probe(const std::string& name, std::uint16_t id, std::uint16_t queues, std::uint32_t mtu,
                    std::uint16_t udp_port, std::uint32_t* room);
  std::string check_mtu(std::uint32_t room) const;
  std::string start(std::uint16_t udp_port);
  std::shared_ptr<Env> env_;
  std::uint16_t port_ = 0, queues_ = 0;
  std::string label_;  // "port 0", or "port 1 (net_memif1)"
  std::array<std::uint8_t, 6> mac_{};
  rte_mempool* pool_ = nullptr;
  bool started_ = false;
  std::string driver_;
  std::vector<RxWakeSocket> wake_;  // per queue, for drivers without rx interrupts (af_packet)
  XdpWake xdp_wake_;                // af_xdp with Gossamer's XDP program: its wake ring buffer
  MemifWake memif_wake_;            // memif on a path socket: the doorbell beside it
  std::vector<char> wake_warned_;   // per queue: an arming error was logged
  std::uint32_t mtu_ = 0;
  mutable DeviceErrors errors_;  // the last reading rte_eth_stats_get gave (core 0's)
  std::string memif_socket_;  // a memif client's socket, else ""
  std::uint64_t memif_inode_ = 0;  // names the socket file its server bound when we connected
  bool link_was_up_ = false, reconnect_logged_ = false;
};

}  // namespace gossamer::dataplane
