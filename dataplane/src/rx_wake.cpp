// The wake socket (rx_wake.hpp).
#include "rx_wake.hpp"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>

namespace gossamer::dataplane {

namespace {
// Classic BPF: keep 1 byte of an IPv4 UDP frame, drop anything else.
sock_filter kKeepUdp[] = {
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),               // EtherType
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 3),   // not IPv4: drop
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 9),           // IPv4 protocol
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, 1),
    BPF_STMT(BPF_RET | BPF_K, 0),
};
sock_filter kDropAll[] = {BPF_STMT(BPF_RET | BPF_K, 0)};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

std::string set_filter(int fd, sock_filter* code, std::size_t n) {
  sock_fprog prog{static_cast<unsigned short>(n), code};
  if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) return errno_text("SO_ATTACH_FILTER");
  return "";
}

void drain(int fd) {
  char byte;
  while (::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_TRUNC) >= 0) {
  }
}
}  // namespace

std::string RxWakeSocket::open(int ifindex, RxWakeSocket* out) {
  RxWakeSocket s;
  s.fd_ = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (s.fd_ < 0) return errno_text("socket(AF_PACKET)");
  // The filter first: nothing queues before bind narrows it to the interface.
  if (std::string e = set_filter(s.fd_, kDropAll, std::size(kDropAll)); !e.empty()) return e;
  const int one = 1;
  if (::setsockopt(s.fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0)
    return errno_text("PACKET_IGNORE_OUTGOING");
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = ifindex;
  if (::bind(s.fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) return errno_text("bind");
  drain(s.fd_);
  *out = std::move(s);
  return "";
}

RxWakeSocket& RxWakeSocket::operator=(RxWakeSocket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    armed_ = o.armed_;
    o.fd_ = -1;
  }
  return *this;
}

RxWakeSocket::~RxWakeSocket() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RxWakeSocket::arm(bool on) {
  if (fd_ < 0 || on == armed_) return "";
  std::string e = on ? set_filter(fd_, kKeepUdp, std::size(kKeepUdp)) : set_filter(fd_, kDropAll, std::size(kDropAll));
  if (!e.empty()) return e;
  armed_ = on;
  if (!on) drain(fd_);
  return "";
}

}  // namespace gossamer::dataplane
