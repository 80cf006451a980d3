// Readiness for a port whose driver has no receive interrupts (DPDK's
// af_packet): a packet socket of our own on the same interface, which a
// polling core adds to its epoll set so that a frame wakes its sleep
// (loop.cpp). It copies nothing while the core is awake: its filter drops
// every frame, and arm(true) swaps in one that keeps one byte of each
// received IPv4 UDP frame, just before the core's last look at its queue.
// A frame that arrived before arming is in the queue and that look finds
// it; one that arrives after makes the socket readable. Outgoing frames
// are ignored (PACKET_IGNORE_OUTGOING): our own sends do not wake us.
#pragma once

#include <string>

namespace gossamer::dataplane {

class RxWakeSocket {
 public:
  // A socket on interface `ifindex`, disarmed. Returns "" or why not.
  static std::string open(int ifindex, RxWakeSocket* out);
  RxWakeSocket() = default;
  RxWakeSocket(RxWakeSocket&& o) noexcept : fd_(o.fd_), armed_(o.armed_) { o.fd_ = -1; }
  RxWakeSocket& operator=(RxWakeSocket&& o) noexcept;
  ~RxWakeSocket();

  int fd() const { return fd_; }
  // true: frames make fd() readable; false: they are dropped, and what the
  // socket holds is discarded. Returns "" or the setsockopt error.
  std::string arm(bool on);

 private:
  int fd_ = -1;
  bool armed_ = false;
};

}  // namespace gossamer::dataplane
