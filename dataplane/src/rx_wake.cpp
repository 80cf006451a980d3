// The wake socket (rx_wake.hpp).
#include "rx_wake.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gossamer::dataplane {

namespace {
std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }
}  // namespace

std::string gossamer_filter(int fd, std::uint16_t udp_port, std::uint32_t snap) {
  // Offsets in the Ethernet frame: EtherType 12, IPv4 header at 14
  // (protocol 23, flags and fragment offset 20), UDP destination port at
  // 14 + IHL * 4 + 2.
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 8),  // jumps count from the next instruction
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 17 /* UDP */, 0, 6),
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 20),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 4, 0),  // a later fragment has no UDP header
      BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14),
      BPF_STMT(BPF_LD | BPF_H | BPF_IND, 16),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, udp_port, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, snap),
      BPF_STMT(BPF_RET | BPF_K, 0),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) return errno_text("SO_ATTACH_FILTER");
  return "";
}

std::vector<int> packet_sockets_on(int ifindex) {
  std::vector<int> fds;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return fds;
  const int own = ::dirfd(d);
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end || fd == own) continue;
    int domain = 0;
    socklen_t len = sizeof domain;
    if (::getsockopt(int(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_PACKET) continue;
    sockaddr_ll sll{};
    len = sizeof sll;
    if (::getsockname(int(fd), reinterpret_cast<sockaddr*>(&sll), &len) == 0 && sll.sll_ifindex == ifindex)
      fds.push_back(int(fd));
  }
  ::closedir(d);
  return fds;
}

std::string RxWakeSocket::open(int ifindex, std::uint16_t udp_port, RxWakeSocket* out) {
  RxWakeSocket s;
  s.fd_ = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);  // no protocol: nothing until bind
  if (s.fd_ < 0) return errno_text("socket(AF_PACKET)");
  const int one = 1, small = 1;  // the kernel raises it to its minimum
  if (::setsockopt(s.fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0)
    return errno_text("PACKET_IGNORE_OUTGOING");
  if (::setsockopt(s.fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) != 0) return errno_text("SO_RCVBUF");
  // Before bind: no frame arrives unfiltered.
  if (udp_port)
    if (std::string e = gossamer_filter(s.fd_, udp_port, 64); !e.empty()) return e;
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

std::string RxWakeSocket::drain() { return discard_datagrams(fd_); }  // it holds a few frames at most

}  // namespace gossamer::dataplane
