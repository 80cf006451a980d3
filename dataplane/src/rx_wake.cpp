// The wake socket (rx_wake.hpp).
#include "rx_wake.hpp"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gossamer::dataplane {

namespace {
std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }
}  // namespace

std::string RxWakeSocket::open(int ifindex, RxWakeSocket* out) {
  RxWakeSocket s;
  s.fd_ = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);  // no protocol: nothing until bind
  if (s.fd_ < 0) return errno_text("socket(AF_PACKET)");
  const int one = 1, small = 1;  // the kernel raises it to its minimum
  if (::setsockopt(s.fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0)
    return errno_text("PACKET_IGNORE_OUTGOING");
  if (::setsockopt(s.fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) != 0) return errno_text("SO_RCVBUF");
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_IP);
  sll.sll_ifindex = ifindex;
  if (::bind(s.fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) return errno_text("bind");
  if (std::string e = s.drain(); !e.empty()) return e;
  *out = std::move(s);
  return "";
}

RxWakeSocket& RxWakeSocket::operator=(RxWakeSocket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

RxWakeSocket::~RxWakeSocket() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RxWakeSocket::drain() {
  char byte;
  for (int i = 0; i < 64; ++i) {  // the buffer holds a few frames at most
    if (::recv(fd_, &byte, 1, MSG_DONTWAIT | MSG_TRUNC) >= 0) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return "";
    if (errno != EINTR) return errno_text("recv");
  }
  return "";
}

}  // namespace gossamer::dataplane
