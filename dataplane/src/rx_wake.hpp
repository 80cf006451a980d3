// Readiness for a port whose driver has no receive interrupts (DPDK's
// af_packet): a packet socket of our own on the same interface, which a
// polling core adds to its epoll set so that a frame wakes its sleep
// (loop.cpp). It has the smallest receive buffer the kernel allows and is
// never read while the core works: once full (a frame or two), the kernel
// drops what else arrives for it after one comparison, without copying.
// Before a long sleep the core drains it (arm), looks at its queue once
// more, and sleeps: a frame that arrived before the drain is in the queue
// and that look finds it; one that arrives after makes the socket readable.
// It takes IPv4 frames, not only ours (a frame of gossamerd's TCP wakes a
// core for nothing, rarely), and ignores outgoing ones
// (PACKET_IGNORE_OUTGOING): our own sends do not wake us.
//
// No BPF filter on purpose: replacing a socket filter before every sleep
// JIT-compiles a program each time and frees the old one through the
// kernel's shared workqueue; thousands a second wedged a 6.18 kernel's BPF
// allocator (every later BPF program load, XDP included, then blocks).
#pragma once

#include <string>

namespace gossamer::dataplane {

class RxWakeSocket {
 public:
  // A socket on interface `ifindex`. Returns "" or why not.
  static std::string open(int ifindex, RxWakeSocket* out);
  RxWakeSocket() = default;
  RxWakeSocket(RxWakeSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RxWakeSocket& operator=(RxWakeSocket&& o) noexcept;
  ~RxWakeSocket();

  int fd() const { return fd_; }
  // Discards what the socket holds, so that it is readable again only when
  // a frame arrives after this call. Returns "" or the error.
  std::string drain();

 private:
  int fd_ = -1;
};

}  // namespace gossamer::dataplane
