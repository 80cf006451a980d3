// Waking a sleeping core on af_xdp (xdp_wake.hpp).
#include "xdp_wake.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace gossamer::dataplane {

namespace {
std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }
int discard(void*, void*, std::size_t) { return 0; }
}  // namespace

std::string XdpWake::open(int ifindex, std::uint16_t queues, XdpWake* out) {
  XdpWake w;
  w.queues_ = queues;
  __u32 prog_id = 0;
  // The one attached program, else the native or generic mode's.
  for (int mode : {0, int(XDP_FLAGS_DRV_MODE), int(XDP_FLAGS_SKB_MODE)}) {
    if (int r = bpf_xdp_query_id(ifindex, mode, &prog_id); r < 0) return errno_text("bpf_xdp_query_id", -r);
    if (prog_id) break;
  }
  if (!prog_id) return "no XDP program is attached to the interface";
  const int prog = bpf_prog_get_fd_by_id(prog_id);
  if (prog < 0) return errno_text("bpf_prog_get_fd_by_id", errno);
  bpf_prog_info info{};
  std::uint32_t len = sizeof info;
  std::vector<__u32> maps;
  int r = bpf_obj_get_info_by_fd(prog, &info, &len);
  if (r == 0 && info.nr_map_ids) {
    maps.resize(info.nr_map_ids);
    const __u32 n = info.nr_map_ids;
    info = bpf_prog_info{};
    info.nr_map_ids = n;
    info.map_ids = reinterpret_cast<std::uint64_t>(maps.data());
    len = sizeof info;
    r = bpf_obj_get_info_by_fd(prog, &info, &len);
    maps.resize(std::min<std::size_t>(maps.size(), info.nr_map_ids));
  }
  const int err = errno;
  ::close(prog);
  if (r < 0) return errno_text("bpf_obj_get_info_by_fd (program)", err);
  for (__u32 id : maps) {
    const int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_map_info m{};
    std::uint32_t mlen = sizeof m;
    if (bpf_obj_get_info_by_fd(fd, &m, &mlen) == 0) {
      if (std::strcmp(m.name, "gsm_wake") == 0 && m.type == BPF_MAP_TYPE_RINGBUF && w.wake_fd_ < 0) {
        w.wake_fd_ = fd;
        continue;
      }
      if (std::strcmp(m.name, "gsm_sleeping") == 0 && m.type == BPF_MAP_TYPE_ARRAY && m.value_size == 4 &&
          m.max_entries >= queues && (m.map_flags & BPF_F_MMAPABLE) && w.sleeping_fd_ < 0) {
        w.sleeping_fd_ = fd;
        continue;
      }
    }
    ::close(fd);
  }
  if (w.wake_fd_ < 0 || w.sleeping_fd_ < 0)
    return "the interface's XDP program has no gsm_wake/gsm_sleeping maps (not Gossamer's xdp_prog?)";
  const long page = ::sysconf(_SC_PAGESIZE);
  w.sleeping_len_ = (queues * sizeof(std::uint32_t) + std::size_t(page) - 1) / std::size_t(page) * std::size_t(page);
  void* p = ::mmap(nullptr, w.sleeping_len_, PROT_READ | PROT_WRITE, MAP_SHARED, w.sleeping_fd_, 0);
  if (p == MAP_FAILED) return errno_text("mmap gsm_sleeping", errno);
  w.sleeping_ = static_cast<std::uint32_t*>(p);
  w.rb_ = ring_buffer__new(w.wake_fd_, discard, nullptr, nullptr);
  if (!w.rb_) return errno_text("ring_buffer__new (gsm_wake)", errno);
  *out = std::move(w);
  return "";
}

XdpWake::XdpWake(XdpWake&& o) noexcept { *this = std::move(o); }

XdpWake& XdpWake::operator=(XdpWake&& o) noexcept {
  if (this != &o) {
    reset();
    wake_fd_ = std::exchange(o.wake_fd_, -1);
    sleeping_fd_ = std::exchange(o.sleeping_fd_, -1);
    rb_ = std::exchange(o.rb_, nullptr);
    sleeping_ = std::exchange(o.sleeping_, nullptr);
    sleeping_len_ = std::exchange(o.sleeping_len_, 0);
    queues_ = o.queues_;
  }
  return *this;
}

XdpWake::~XdpWake() { reset(); }

void XdpWake::reset() {
  if (rb_) ring_buffer__free(rb_);
  if (sleeping_) ::munmap(sleeping_, sleeping_len_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (sleeping_fd_ >= 0) ::close(sleeping_fd_);
  rb_ = nullptr;
  sleeping_ = nullptr;
  wake_fd_ = sleeping_fd_ = -1;
}

std::string XdpWake::arm(std::uint16_t q) {
  if (!rb_ || q >= queues_) return "not open";
  // Records are wake-ups, not data: consume whatever is there (any queue's:
  // its core was woken when it was written), unless another core is at it.
  // Only a new record wakes a sleep (the descriptor is edge-triggered in
  // the epoll sets), so leaving one unread loses nothing.
  if (!draining_.exchange(true, std::memory_order_acquire)) {
    const int r = ring_buffer__consume(rb_);
    draining_.store(false, std::memory_order_release);
    if (r < 0) return errno_text("ring_buffer__consume", -r);
  }
  std::atomic_ref<std::uint32_t>(sleeping_[q]).store(1, std::memory_order_seq_cst);
  return "";
}

}  // namespace gossamer::dataplane
