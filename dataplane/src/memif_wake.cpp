// Waking a sleeping core on memif (memif_wake.hpp).
#include "memif_wake.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "rx_wake.hpp"  // discard_datagrams

namespace gossamer::dataplane {

namespace {
// The shared file: a version word, then each side's words on a cache line
// of their own (server, client).
constexpr std::uint32_t kVersion = 1;
struct alignas(64) Words {
  std::uint32_t sleeping[MemifWake::kMaxQueues];
};
struct Shared {
  alignas(64) std::uint32_t version;
  Words side[2];
};
static_assert(sizeof(Words) == 64);
constexpr std::size_t kFileSize = 4096;
static_assert(sizeof(Shared) <= kFileSize);

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

bool fill_addr(const std::string& path, sockaddr_un* a) {
  if (path.size() >= sizeof a->sun_path) return false;
  *a = sockaddr_un{};
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path, path.c_str(), path.size() + 1);
  return true;
}
}  // namespace

MemifWake& MemifWake::operator=(MemifWake&& o) noexcept {
  if (this != &o) {
    reset();
    for (std::uint16_t q = 0; q < kMaxQueues; ++q) {
      fds_[q] = std::exchange(o.fds_[q], -1);
      peer_addr_[q] = o.peer_addr_[q];
    }
    map_ = std::exchange(o.map_, nullptr);
    own_ = std::exchange(o.own_, nullptr);
    peer_ = std::exchange(o.peer_, nullptr);
    queues_ = std::exchange(o.queues_, 0);
    own_path_ = std::move(o.own_path_);
    rung_.store(o.rung(), std::memory_order_relaxed);
    ring_errors_.store(o.ring_errors(), std::memory_order_relaxed);
  }
  return *this;
}

MemifWake::~MemifWake() { reset(); }

void MemifWake::reset() {
  for (std::uint16_t q = 0; q < kMaxQueues; ++q)
    if (fds_[q] >= 0) {
      ::close(std::exchange(fds_[q], -1));
      ::unlink((own_path_ + std::to_string(q)).c_str());
    }
  if (map_) ::munmap(map_, kFileSize);
  map_ = nullptr;
  own_ = peer_ = nullptr;
  queues_ = 0;
}

std::string MemifWake::open(const std::string& socket_path, bool client, std::uint16_t queues, MemifWake* out) {
  if (queues == 0 || queues > kMaxQueues)
    return std::to_string(queues) + " queues (at most " + std::to_string(kMaxQueues) + ")";
  MemifWake w;
  const std::string file = socket_path + ".wake";
  w.own_path_ = socket_path + (client ? ".wc" : ".ws");
  const std::string peer_path = socket_path + (client ? ".ws" : ".wc");
  for (std::uint16_t q = 0; q < queues; ++q)
    if (!fill_addr(peer_path + std::to_string(q), &w.peer_addr_[q]))
      return "the socket path " + peer_path + std::to_string(q) + " is too long for a unix socket";

  // The shared file: whichever side comes first makes it; both size it.
  const int f = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (f < 0) return errno_text("open " + file, errno);
  struct stat st{};
  std::string err;
  if (::fstat(f, &st) != 0) err = errno_text("fstat " + file, errno);
  else if (!S_ISREG(st.st_mode)) err = file + " is not a regular file";
  else if (std::size_t(st.st_size) < kFileSize && ::ftruncate(f, kFileSize) != 0) err = errno_text("ftruncate " + file, errno);
  if (err.empty()) {
    void* m = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (m == MAP_FAILED) err = errno_text("mmap " + file, errno);
    else w.map_ = m;
  }
  ::close(f);
  if (!err.empty()) return err;
  auto* sh = static_cast<Shared*>(w.map_);
  std::uint32_t v = 0;
  std::atomic_ref<std::uint32_t> version(sh->version);
  if (!version.compare_exchange_strong(v, kVersion) && v != kVersion)
    return file + " has layout version " + std::to_string(v) + ", this dataplane " + std::to_string(kVersion);
  w.own_ = sh->side[client ? 1 : 0].sleeping;
  w.peer_ = sh->side[client ? 0 : 1].sleeping;
  for (std::uint16_t q = 0; q < kMaxQueues; ++q)  // a previous incarnation may have left them set
    std::atomic_ref<std::uint32_t>(w.own_[q]).store(0, std::memory_order_relaxed);

  // Our doorbells, one per queue.
  for (std::uint16_t q = 0; q < queues; ++q) {
    const std::string path = w.own_path_ + std::to_string(q);
    sockaddr_un own{};
    if (!fill_addr(path, &own)) return "the socket path " + path + " is too long for a unix socket";
    const int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return errno_text("socket", errno);
    ::unlink(path.c_str());  // a previous incarnation's
    if (::bind(s, reinterpret_cast<const sockaddr*>(&own), sizeof own) != 0) {
      err = errno_text("bind " + path, errno);
      ::close(s);
      return err;
    }
    w.fds_[q] = s;
    w.queues_ = std::uint16_t(q + 1);  // reset() unlinks what was bound
  }
  *out = std::move(w);
  return "";
}

std::string MemifWake::stay_awake(std::uint16_t q) {
  if (q >= queues_) return "queue " + std::to_string(q) + " of " + std::to_string(queues_);
  std::atomic_ref<std::uint32_t>(own_[q]).store(0, std::memory_order_relaxed);
  return discard_datagrams(fds_[q]);
}

std::string MemifWake::arm(std::uint16_t q) {
  if (q >= queues_) return "queue " + std::to_string(q) + " of " + std::to_string(queues_);
  if (std::string e = discard_datagrams(fds_[q]); !e.empty()) return e;
  // Before the caller's last look at the queue (Dekker with sent()).
  std::atomic_ref<std::uint32_t>(own_[q]).store(1, std::memory_order_seq_cst);
  return "";
}

void MemifWake::ring(std::uint16_t q) {
  const char b = 1;
  if (::sendto(fds_[q], &b, 1, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&peer_addr_[q]), sizeof peer_addr_[q]) == 1)
    rung_.fetch_add(1, std::memory_order_relaxed);
  else
    ring_errors_.fetch_add(1, std::memory_order_relaxed);  // the peer is gone or restarting (ENOENT, ECONNREFUSED), or its socket is full (EAGAIN):
                     // it is awake then, or its next open clears its words
}

}  // namespace gossamer::dataplane
