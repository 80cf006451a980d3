// Several ports as one (port.hpp): a dataplane that reaches its peers
// through different DPDK ports, one per peer link (a memif mesh: one memif
// per pair of hosts; a dual-port NIC), dataplane.ports in the config. The
// stages see one port:
//   - every polling core owns queue q of every link;
//   - rx_burst polls all links, starting from the next one each time, so
//     that a busy link cannot starve the others;
//   - tx_burst sends each frame on the link that reaches its peer
//     (Frame::peer, through the table from the config), writing that
//     link's MAC as the source when it differs from link 0's;
//   - a sleeping core wakes on any link's descriptor: rx_wake_fds gives all
//     of them (the core's epoll set takes each), and rx_wake_arm arms every
//     link, so that the core sleeps only when every link is quiet.
// The links share one environment: their frames are of one kind (DPDK
// mbufs of one pool, loopback buffers), so alloc, release, retain, frame,
// tsc_hz and the thread hooks go to link 0. With one link, every call goes
// straight to it. Frames per link and direction are counted per queue
// (single writer) and summed by frames().
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "port.hpp"

namespace gossamer::dataplane {

class MultiPort final : public Port {
 public:
  static constexpr std::size_t kMaxLinks = 32;  // RTE_MAX_ETHPORTS of Debian's DPDK
  static constexpr std::uint16_t kNoLink = UINT16_MAX;  // in link_of_peer: not a peer (this host)

  // `links`: at least one, at most kMaxLinks, all with the same queue
  // count. `link_of_peer[h]`: the link host h is reached through, or
  // kNoLink (a frame for a host out of the table, or kNoLink, goes on link
  // 0). Returns "" or why not.
  static std::string make(std::vector<std::unique_ptr<Port>> links, std::vector<std::uint16_t> link_of_peer,
                          std::unique_ptr<MultiPort>* out);

  std::size_t links() const { return links_.size(); }
  Port& link(std::size_t i) { return *links_[i]; }
  std::uint16_t link_of(std::uint32_t peer) const { return peer < link_of_peer_.size() ? link_of_peer_[peer] : 0; }
  struct Frames {
    std::uint64_t rx = 0, tx = 0;
  };
  // Frames link i received (after injected faults) and sent, over all
  // queues; any thread.
  Frames frames(std::size_t link) const;
  // Every link's wake descriptor for queue q, or none if a link has none
  // (a core must then wake on a timer to look at that link).
  std::vector<int> rx_wake_fds(std::uint16_t q) const;

  std::uint16_t queues() const override { return queues_; }
  std::array<std::uint8_t, 6> mac() const override { return macs_[0]; }
  std::uint16_t rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) override;
  bool alloc(std::uint32_t len, Frame* out) override { return links_[0]->alloc(len, out); }
  std::uint16_t tx_burst(std::uint16_t q, Frame* frames, std::uint16_t n) override;
  void release(const Frame& f) override { links_[0]->release(f); }
  void retain(const Frame& f) override { links_[0]->retain(f); }
  Frame frame(void* handle) const override { return links_[0]->frame(handle); }
  int rx_wake_fd(std::uint16_t q) const override { return links_.size() == 1 ? links_[0]->rx_wake_fd(q) : -1; }
  bool rx_wake_arm(std::uint16_t q, bool quiet) override;
  std::uint64_t rx_due(std::uint16_t q) const override;
  std::uint64_t tsc_hz() const override { return links_[0]->tsc_hz(); }
  DeviceErrors device_errors() const override;  // summed over the links (link(i) has each one's)
  void thread_started(std::uint32_t core) override { links_[0]->thread_started(core); }
  void thread_stopped(std::uint32_t core) override { links_[0]->thread_stopped(core); }
  void maintain() override {
    for (auto& l : links_) l->maintain();
  }
  std::string describe() const override;

 private:
  MultiPort() = default;
  struct alignas(64) Queue {
    std::uint16_t next = 0;  // the link rx_burst looks at first
    // [link]: frames received and sent; written by the queue's core only.
    std::array<std::atomic<std::uint64_t>, kMaxLinks> rx{}, tx{};
  };
  static void add(std::atomic<std::uint64_t>& c, std::uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::uint16_t send(std::uint16_t q, std::size_t link, Frame* frames, std::uint16_t n);

  std::vector<std::unique_ptr<Port>> links_;
  std::vector<std::uint16_t> link_of_peer_;  // kNoLink made 0
  std::vector<char> listed_;                 // [host]: link_of_peer gave it a link
  std::vector<std::array<std::uint8_t, 6>> macs_;
  std::vector<char> own_mac_;  // [link]: its MAC differs from link 0's (tx writes it)
  std::uint16_t queues_ = 0;
  std::unique_ptr<Queue[]> q_;
};

}  // namespace gossamer::dataplane
