// Readiness for DPDK's af_xdp port, whose driver has no receive interrupts
// and keeps its XDP socket to itself: Gossamer's XDP program
// (dataplane/xdp/gossamer_xdp.c), which the driver loads from xdp_prog=,
// has two maps for it. gsm_sleeping holds one word per queue, memory-mapped
// here; gsm_wake is a BPF ring buffer whose descriptor every polling core
// adds to its epoll set. Before every sleep a core drains the ring buffer
// and sets its queue's word (arm), looks at its queue once more and sleeps;
// the first of our frames on that queue afterwards clears the word and
// writes one record, which wakes the sleepers. All cores sleep on the one
// ring buffer, so a record wakes every sleeping core (the others find
// nothing and sleep again); no core can miss its own.
//
// The maps are found from the program attached to the interface (its id,
// then its map ids), once at start: no BPF program is loaded or replaced
// here, ever (rx_wake.hpp says why that matters on this project's kernel).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

struct ring_buffer;

namespace gossamer::dataplane {

class XdpWake {
 public:
  // Finds the maps of the XDP program attached to interface `ifindex`, for
  // `queues` queues. Returns "" or why not (e.g. DPDK's default program,
  // which has no such maps: the cores then wake on a timer).
  static std::string open(int ifindex, std::uint16_t queues, XdpWake* out);
  XdpWake() = default;
  XdpWake(const XdpWake&) = delete;
  XdpWake& operator=(const XdpWake&) = delete;
  XdpWake(XdpWake&& o) noexcept;
  XdpWake& operator=(XdpWake&& o) noexcept;
  ~XdpWake();

  bool ready() const { return wake_fd_ >= 0; }
  int fd() const { return wake_fd_; }
  // Queue q's core, before its last look ahead of a sleep: discards
  // the records, then asks for one when a frame of ours arrives on q.
  std::string arm(std::uint16_t q);

 private:
  void reset();
  int wake_fd_ = -1, sleeping_fd_ = -1;
  ring_buffer* rb_ = nullptr;
  std::uint32_t* sleeping_ = nullptr;  // mmap of gsm_sleeping: one word per queue
  std::size_t sleeping_len_ = 0;
  std::uint16_t queues_ = 0;
  // A core is draining the ring buffer (libbpf's consumer is not safe
  // for two threads at once; one drain serves every core).
  std::atomic<bool> draining_{false};
};

}  // namespace gossamer::dataplane
