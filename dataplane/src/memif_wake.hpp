// Readiness for DPDK's memif port, whose rings carry no interrupts: DPDK
// 22.11's net_memif masks its receive rings' interrupts at connect
// (MEMIF_RING_FLAG_MASK_INT) and has no call to unmask them, so the peer
// never signals a ring's eventfd. Instead, the two ends of a link share a
// doorbell of their own beside the memif socket (a path socket,
// socket-abstract=no):
//   SOCKET.wake  a small shared file: one word per (side, queue), set while
//                that side's core for that queue is about to sleep or sleeps;
//   SOCKET.ws<q> / SOCKET.wc<q>
//                each side's unix datagram socket for queue q (server,
//                client), in that queue's core's epoll set. One per queue:
//                a core that drained a shared socket could take another
//                core's wake-up away before that core saw it.
// Before a sleep of a quiet host (no work for 100 ms; its sleeps are then
// long) a core drains its socket and sets its word (arm), looks at its
// queue once more and sleeps. After a tx burst that put frames on queue q's
// ring, the sender reads the peer's word for q (one load of a line the peer
// writes only around its sleeps); only when it is set does the sender clear
// it and send one byte, which wakes the peer. No frame is missed: the arm's
// store and the last look on one side, the ring's write and the word's load
// on the other, are ordered by sequentially consistent fences (Dekker). A
// busy host does not arm (port_dpdk.cpp): its short sleeps end on their
// timers, because a doorbell costs the sender a sendto (about 12 k cycles
// per slot when every frame found the peer asleep under load). Before
// those sleeps the core clears its word and drains its socket (stay_awake),
// so that a late doorbell does not keep its epoll set readable.
//
// Either side may restart: each binds its own socket afresh and clears its
// own words at open; a byte sent to a peer that is gone is dropped.
#pragma once

#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "shm_access.hpp"

namespace gossamer::dataplane {

class MemifWake {
 public:
  static constexpr std::uint16_t kMaxQueues = 16;

  // For the memif socket file `socket_path`, as its `client` or server,
  // with `queues` queues. Returns "" or why not (the cores then wake on a
  // timer).
  static std::string open(const std::string& socket_path, bool client, std::uint16_t queues, MemifWake* out);
  MemifWake() { std::fill(fds_, fds_ + kMaxQueues, -1); }
  MemifWake(const MemifWake&) = delete;
  MemifWake& operator=(const MemifWake&) = delete;
  MemifWake(MemifWake&& o) noexcept { *this = std::move(o); }
  MemifWake& operator=(MemifWake&& o) noexcept;
  ~MemifWake();

  bool ready() const { return queues_ > 0; }
  int fd(std::uint16_t q) const { return q < queues_ ? fds_[q] : -1; }
  // Queue q's core, before its last look ahead of a sleep: discards the
  // doorbells received, then asks the peer for one. Returns "" or the error.
  std::string arm(std::uint16_t q);
  // Queue q's core, before a sleep that ends on its timer: asks for no
  // doorbell, and discards any received. Returns "" or the error.
  std::string stay_awake(std::uint16_t q);
  // After frames went on queue q's ring: rings the peer's doorbell if its
  // core for q sleeps (or is about to).
  void sent(std::uint16_t q) {
    fence(std::memory_order_seq_cst);  // the ring's write before the word's load
    std::atomic_ref<std::uint32_t> w(peer_[q]);
    if (w.load(std::memory_order_relaxed) && w.exchange(0, std::memory_order_acq_rel)) ring(q);
  }
  // Doorbells this side sent (each a sendto), and failed to send.
  std::uint64_t rung() const { return rung_.load(std::memory_order_relaxed); }
  std::uint64_t ring_errors() const { return ring_errors_.load(std::memory_order_relaxed); }

 private:
  void ring(std::uint16_t q);
  void reset();
  int fds_[kMaxQueues];
  void* map_ = nullptr;
  std::uint32_t* own_ = nullptr;   // in the shared file: our words, one per queue
  std::uint32_t* peer_ = nullptr;  // and the peer's, on a line of their own
  std::uint16_t queues_ = 0;
  sockaddr_un peer_addr_[kMaxQueues]{};
  std::string own_path_;           // our sockets' paths without the queue number
  std::atomic<std::uint64_t> rung_{0}, ring_errors_{0};  // several cores' tx may ring
};

}  // namespace gossamer::dataplane
