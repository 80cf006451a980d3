#include "rack.hpp"

#include <elf.h>
#include <link.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include <gossamer/config.hpp>

namespace gossamer::detail {

namespace {
[[noreturn]] void die(const std::string& m, int status = 1) {
  std::fprintf(stderr, "gossamer: %s\n", m.c_str());
  std::fflush(stderr);
  std::_Exit(status);
}

// Exit status of an instance stopped because another host's instance left:
// gossamerd tells this consequence from the cause (controlplane/src/daemon.hpp).
constexpr int kExitPeerLost = 75;

// The executable's GNU build-id (NT_GNU_BUILD_ID note), the identity every
// host's instance must share.
struct BuildId {
  std::uint8_t bytes[abi::kMaxBuildId];
  std::uint32_t len = 0;
};

int find_build_id(dl_phdr_info* info, std::size_t, void* data) {
  auto* out = static_cast<BuildId*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    auto* p = reinterpret_cast<const std::uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const std::uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) n;
      std::memcpy(&n, p, sizeof n);
      const std::uint8_t* name = p + sizeof n;
      const std::uint8_t* desc = name + ((n.n_namesz + 3) & ~3u);
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          n.n_descsz <= abi::kMaxBuildId && desc + n.n_descsz <= end) {
        std::memcpy(out->bytes, desc, n.n_descsz);
        out->len = n.n_descsz;
        return 1;
      }
      p = desc + ((n.n_descsz + 3) & ~3u);
    }
  }
  return 1;  // only the first object: the executable
}


// GOSSAMER_RUN_ID and GOSSAMER_RUN_TOKEN, as the dataplane gets them
// (abi::AttachRequest); the dataplane checks what they say.
void copy_run(abi::AttachRequest* req) {
  const std::string id = std::getenv("GOSSAMER_RUN_ID") ? std::getenv("GOSSAMER_RUN_ID") : "";
  if (id.size() > sizeof req->run_id)
    die("GOSSAMER_RUN_ID='" + id + "' is longer than " + std::to_string(sizeof req->run_id) + " bytes");
  std::memcpy(req->run_id, id.data(), id.size());
  const std::string token = std::getenv(abi::kRunTokenEnv) ? std::getenv(abi::kRunTokenEnv) : "";
  if (token.size() > sizeof req->run_token)
    die(std::string(abi::kRunTokenEnv) + " is longer than " + std::to_string(sizeof req->run_token) + " hex digits");
  std::memcpy(req->run_token, token.data(), token.size());
  // For this instance alone: a program it starts must not attach in its name.
  ::unsetenv(abi::kRunTokenEnv);
}

bool recv_msg(int fd, abi::DataplaneMessage* m, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  ssize_t n = ::recv(fd, m, sizeof *m, 0);
  if (n != ssize_t(sizeof *m)) {
    std::memset(m, 0, sizeof *m);
    m->type = 0;
    return n >= 0;  // 0: closed
  }
  m->text[sizeof m->text - 1] = 0;
  return true;
}
}  // namespace

std::uint32_t Rack::host_of(std::uint32_t g) const {
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    std::uint32_t f, c;
    abi::host_threads(total_, hosts_, h, &f, &c);
    if (g < f + c) return h;
  }
  return hosts_;
}

std::unique_ptr<Rack> Rack::join(std::uint32_t threads, std::size_t* max_outstanding, std::uint32_t* yield_us) {
  const char* path = std::getenv("GOSSAMER_CONFIG");
  if (!path || !*path) return nullptr;
  auto result = config::load_file(path);
  if (!result) {
    std::ostringstream o;
    config::write_errors(result, o);
    die("GOSSAMER_CONFIG=" + std::string(path) + " is not a valid configuration:\n" + o.str());
  }
  const config::Config& cfg = result.config();
  if (cfg.runtime.max_outstanding) *max_outstanding = *cfg.runtime.max_outstanding;
  if (cfg.runtime.yield_us) *yield_us = *cfg.runtime.yield_us;
  if (cfg.rack.hosts.size() < 2) return nullptr;
  // The slot layout is fixed at build time; the file must agree with it.
  if (cfg.slots.primary_bytes != abi::kPrimaryBytes || cfg.slots.overflow_bytes != abi::kOverflowBytes)
    die(std::string(path) + ": slots.primary_bytes " + std::to_string(cfg.slots.primary_bytes) +
        " and slots.overflow_bytes " + std::to_string(cfg.slots.overflow_bytes) + " differ from this build's " +
        std::to_string(abi::kPrimaryBytes) + " and " + std::to_string(abi::kOverflowBytes));
  std::unique_ptr<Rack> r(new Rack());
  r->host_ = cfg.host.index;
  r->hosts_ = std::uint32_t(cfg.rack.hosts.size());
  if (const char* t = std::getenv("GOSSAMER_THREADS"); t && *t) {
    char* end = nullptr;
    unsigned long v = std::strtoul(t, &end, 10);
    if (*end || v == 0 || v > abi::kMaxRackThreads) die("GOSSAMER_THREADS='" + std::string(t) + "' is not a thread count in [1, 4096]");
    threads = std::uint32_t(v);
  }
  r->total_ = threads;
  if (r->total_ < r->hosts_)
    die("a rack of " + std::to_string(r->hosts_) + " hosts needs at least " + std::to_string(r->hosts_) +
        " threads (run() was given " + std::to_string(threads) + ")");
  abi::host_threads(r->total_, r->hosts_, r->host_, &r->first_, &r->local_);
  if (!abi::segment_layout(r->total_, r->local_, &r->layout_)) die("thread counts out of range");
  // Connections for large payloads, when gossamerd started us with them.
  std::string bulk_error;
  r->bulk_ = Bulk::from_env(std::getenv("GOSSAMER_BULK"), Bulk::Rack{r->host_, r->hosts_, r->total_},
                            cfg.controlplane.large_request_threshold_bytes, &bulk_error);
  if (!bulk_error.empty()) die("GOSSAMER_BULK: " + bulk_error);
  // The fds are close-on-exec now: a child of the application must not
  // read numbers that name something else there.
  ::unsetenv("GOSSAMER_BULK");

  // The segment: a sealed memfd, so the dataplane can map it without fear
  // of it shrinking under its feet.
  r->memfd_ = ::memfd_create("gossamer-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r->memfd_ < 0 || ::ftruncate(r->memfd_, off_t(r->layout_.bytes)) != 0 ||
      ::fcntl(r->memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    die(std::string("cannot create the shared segment: ") + std::strerror(errno));
  void* p = ::mmap(nullptr, r->layout_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd_, 0);
  if (p == MAP_FAILED) die(std::string("cannot map the shared segment: ") + std::strerror(errno));
  r->seg_ = static_cast<std::byte*>(p);
  const abi::SegmentHeader h = abi::segment_header(r->layout_, r->total_, r->first_, r->local_, r->host_, r->hosts_);
  std::memcpy(r->seg_, &h, sizeof h);
  r->eventfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

  r->socket_path_ = cfg.dataplane_socket();
  r->sock_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", r->socket_path_.c_str());
  if (::connect(r->sock_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    die("cannot reach the dataplane at " + r->socket_path_ + ": " + std::strerror(errno) +
        " (is gossamer-dataplane running on this host? GOSSAMER_CONFIG=" + path + ")");
  abi::AttachRequest req{};
  req.type = abi::kMsgAttach;
  req.attach_version = abi::kAttachVersion;
  req.slot_layout = abi::kLayoutVersion;
  BuildId id;
  dl_iterate_phdr(find_build_id, &id);
  std::memcpy(req.build_id, id.bytes, id.len);
  req.build_id_len = id.len;
  copy_run(&req);
  req.total_threads = r->total_;
  req.pid = std::uint32_t(::getpid());
  req.segment_bytes = r->layout_.bytes;
  int fds[2] = {r->memfd_, r->eventfd_};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{&req, sizeof req};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  if (::sendmsg(r->sock_, &mh, MSG_NOSIGNAL) != ssize_t(sizeof req))
    die(std::string("cannot send the attach request: ") + std::strerror(errno));
  abi::DataplaneMessage m{};
  if (!recv_msg(r->sock_, &m, 10000)) die("the dataplane did not answer the attach request within 10 s");
  if (m.type == abi::kMsgRefused) die(std::string("the dataplane refused the attach: ") + m.text);
  if (m.type != abi::kMsgAttachOk) die("the dataplane closed the connection during the attach");
  return r;
}

void Rack::wait_start() {
  const char* t = std::getenv("GOSSAMER_START_TIMEOUT");
  int timeout_s = t && *t ? std::atoi(t) : 120;
  auto start = std::chrono::steady_clock::now();
  for (int waited = 0;; waited += 5) {
    abi::DataplaneMessage m{};
    if (recv_msg(sock_, &m, 5000)) {
      if (m.type == abi::kMsgStart) break;
      if (m.type == abi::kMsgRefused) die(std::string("the rack refused this run: ") + m.text);
      if (m.type == abi::kMsgPeerLost) continue;  // a previous instance leaving
      die("the dataplane closed the connection before the start");
    }
    auto s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count();
    if (s >= timeout_s)
      die("not every host's instance attached within " + std::to_string(timeout_s) +
          " s (GOSSAMER_START_TIMEOUT); start the program on every host of the rack");
    std::fprintf(stderr, "gossamer: host %u waiting for the other hosts' instances to attach (%llds)\n", host_,
                 static_cast<long long>(s));
  }
  monitor_ = std::thread([this] { monitor(); });
}

void Rack::monitor() {
  for (;;) {
    abi::DataplaneMessage m{};
    ssize_t n = ::recv(sock_, &m, sizeof m, 0);
    if (n == ssize_t(sizeof m) && m.type == abi::kMsgDetached) {
      std::lock_guard<std::mutex> g(mu_);
      detached_ = true;
      cv_.notify_all();
      return;
    }
    if (n == ssize_t(sizeof m) && m.type == abi::kMsgPeerLost) {
      // Peers that finished detach quietly; this is a crash or a kill.
      if (detaching_.load(std::memory_order_acquire)) continue;
      m.text[sizeof m.text - 1] = 0;
      die("host " + std::to_string(m.host) + " left the rack (" + m.text + "); stopping this instance too",
          kExitPeerLost);
    }
    if (n <= 0) {
      if (finishing_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> g(mu_);
        detached_ = true;
        cv_.notify_all();
        return;
      }
      die("the dataplane closed its connection to this instance (did it stop?)");
    }
  }
}

void Rack::kick() {
  std::uint64_t one = 1;
  (void)!::write(eventfd_, &one, sizeof one);
}

void Rack::detach() {
  finishing();
  // Every request has its response: no payload is on its way.
  if (bulk_) bulk_->stop();
  detaching_.store(true, std::memory_order_release);
  abi::AppMessage m{abi::kMsgDetach, 0};
  ::send(sock_, &m, sizeof m, MSG_NOSIGNAL);
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait_for(g, std::chrono::seconds(5), [this] { return detached_; });
}

Rack::~Rack() {
  if (sock_ >= 0) ::shutdown(sock_, SHUT_RDWR);
  if (monitor_.joinable()) monitor_.join();
  if (sock_ >= 0) ::close(sock_);
  if (seg_) ::munmap(seg_, layout_.bytes);
  if (memfd_ >= 0) ::close(memfd_);
  if (eventfd_ >= 0) ::close(eventfd_);
}

}  // namespace gossamer::detail
