// Readiness for a port whose driver has no receive interrupts (DPDK's
// af_packet): a packet socket of our own on the same interface, which a
// polling core adds to its epoll set so that a frame wakes its sleep
// (loop.cpp). It has the smallest receive buffer the kernel allows and is
// never read while the core works: once full (a frame or two), the kernel
// drops what else arrives for it after one comparison, without copying.
// Before every sleep the core drains it (arm), looks at its queue once
// more, and sleeps: a frame that arrived before the drain is in the queue
// and that look finds it; one that arrives after makes the socket readable.
// It ignores outgoing frames (PACKET_IGNORE_OUTGOING): our own sends do not
// wake us; and with a UDP port, it takes only the IPv4 UDP frames to that
// port (gossamer_filter below), so the kernel's TCP on the same interface
// (gossamerd's, or a benchmark's) does not wake a sleeping core.
//
// Filters are attached once, when a socket is opened, never replaced:
// replacing a socket filter before every sleep (a first version)
// JIT-compiles a program each time and frees the old one through the
// kernel's shared workqueue; thousands a second wedged a 6.18 kernel's BPF
// allocator (every later BPF program load, XDP included, then blocks).
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gossamer::dataplane {

// Discards what non-blocking datagram or packet socket `fd` holds (at most
// 64 messages a call: a flood cannot keep a core here; what is left only
// wakes it once more). Returns "" or the error. The wake sockets' arm step
// (RxWakeSocket::drain, and memif's doorbell, memif_wake.hpp).
inline std::string discard_datagrams(int fd) {
  char byte;
  for (int i = 0; i < 64; ++i) {
    if (::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_TRUNC) >= 0) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return "";
    if (errno != EINTR) return std::string("recv: ") + std::strerror(errno);
  }
  return "";
}

// Attaches, once, a classic BPF filter to packet socket `fd` that passes
// only IPv4 UDP frames to `udp_port` that are not later IP fragments (the
// dataplane's frames), at most `snap` bytes of each. Returns "" or why not.
std::string gossamer_filter(int fd, std::uint16_t udp_port, std::uint32_t snap);

// This process's packet sockets bound to interface `ifindex` (a DPDK
// af_packet port's, which the driver keeps to itself), found in
// /proc/self/fd.
std::vector<int> packet_sockets_on(int ifindex);

class RxWakeSocket {
 public:
  // A socket on interface `ifindex`; with `udp_port` non-zero, only the
  // dataplane's frames wake it (gossamer_filter). Returns "" or why not.
  static std::string open(int ifindex, std::uint16_t udp_port, RxWakeSocket* out);
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
