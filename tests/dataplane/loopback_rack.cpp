// The loopback rack and fake applications (loopback_rack.hpp).
#include "loopback_rack.hpp"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>
#include <stdexcept>

#include <gossamer/config.hpp>

#include "port_loopback.hpp"
#include "rack_keys.hpp"
#include "shm_access.hpp"

namespace gossamer::dataplane::testing {

namespace {

config::Config host_config(const std::string& dir, int host, std::uint32_t cores, std::uint32_t conns,
                           bool authenticate, std::uint32_t max_apps, std::uint32_t mtu,
                           const LoopbackRack::Options& o) {
  std::ostringstream y;
  y << "host: {index: " << host << "}\n"
    << "rack:\n  hosts:\n"
    << "    - {name: a, control: 127.0.0.1:17700, data: 198.18.0.1:7800, mac: \"02:00:00:00:00:0a\"}\n"
    << "    - {name: b, control: 127.0.0.1:17701, data: 198.18.0.2:7800, mac: \"02:00:00:00:00:0b\"}\n"
    << "dataplane:\n  cores: " << cores << "\n  socket: " << dir << "/{host}.sock\n"
    << "  incarnation_file: " << dir << "/{host}.incarnation\n"
    << "  authenticate: " << (authenticate ? "true" : "false") << "\n"
    << "  max_applications: " << max_apps << "\n"
    << "  mtu: " << mtu << "\n"
    << (o.yield_us >= 0 ? "  yield_us: " + std::to_string(o.yield_us) + "\n" : std::string())
    << "  transport: " << (o.verbs ? "verbs" : "udp") << "\n"
    << "  verbs: {device: \"" << o.verbs_device << "\", gid_index: " << o.verbs_gid << "}\n"
    << "controlplane:\n  psk_file: " << dir << "/psk\n"
    << "connections:\n  per_remote_host: " << conns << "\n";
  auto r = config::load_string(y.str(), "loopback-rack.yaml");
  if (!r) {
    std::ostringstream e;
    config::write_errors(r, e);
    throw std::runtime_error(e.str());
  }
  return r.config();
}

}  // namespace

LoopbackRack::LoopbackRack(const Options& o) : o_(o) {
  char tmpl[] = "/tmp/gossamer-loopback-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  {
    // The rack secret both dataplanes derive their frame keys from: 256
    // random bits in hex (load_rack_secret refuses fewer than 128).
    const mode_t old = ::umask(077);
    std::random_device rd;
    char hex[65];
    for (int i = 0; i < 8; ++i) std::snprintf(hex + 8 * i, 9, "%08x", unsigned(rd()));
    std::ofstream(dir_ + "/psk") << hex << "\n";
    ::umask(old);
  }
  if (!o.incarnation_b.empty()) std::ofstream(incarnation_file(1)) << o.incarnation_b;
  auto [a, b] = make_loopback_pair(std::uint16_t(std::max(o.cores_a, o.cores_b)), &inject_, &reopen_);
  std::unique_ptr<Port> ports[2] = {std::move(a), std::move(b)};
  try {
    for (int h = 0; h < 2; ++h) {
      if (!o.faults.empty()) std::ofstream(socket(h) + ".faults") << o.faults << "\n";
      start(h, std::move(ports[h]));
    }
  } catch (...) {
    stop();
    for (auto& d : dp_) d.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

void LoopbackRack::start(int h, std::unique_ptr<Port> port) {
  dp_[h] = std::make_unique<Dataplane>(
      host_config(dir_, h, h == 0 ? o_.cores_a : o_.cores_b, o_.conns, o_.authenticate, o_.max_applications,
                  h == 1 && o_.mtu_b ? o_.mtu_b : o_.mtu, o_));
  if (o_.prepare) o_.prepare(h, *dp_[h]);
  if (o_.before_start) o_.before_start(h, *this, inject_);
  auto open = [&](std::uint16_t, std::vector<std::unique_ptr<Port>>* out) {
    out->push_back(std::move(port));
    return std::string();
  };
  if (std::string err = dp_[h]->start(open); !err.empty()) throw std::runtime_error(err);
  threads_[h] = std::thread([this, h] { dp_[h]->run(stop_[h]); });
}

void LoopbackRack::restart(int h) {
  stop_[h].store(true);
  if (threads_[h].joinable()) threads_[h].join();
  dp_[h].reset();  // as the process exits: its socket goes, its incarnation file's lock is released
  stop_[h].store(false);
  start(h, reopen_(h));
}

std::uint64_t LoopbackRack::incarnation(int host) const {
  abi::MetricsHeader h{};
  std::ifstream(socket(host) + ".metrics", std::ios::binary).read(reinterpret_cast<char*>(&h), sizeof h);
  return h.magic == abi::kMetricsMagic ? h.boot : 0;
}

void LoopbackRack::stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& s : stop_) s.store(true);
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

LoopbackRack::~LoopbackRack() {
  stop();
  for (auto& d : dp_) d.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string LoopbackRack::socket(int host) const { return dir_ + (host == 0 ? "/a.sock" : "/b.sock"); }

std::uint64_t LoopbackRack::stat(int host, const std::string& name) const {
  std::ifstream in(socket(host) + ".stats");
  std::string key;
  std::uint64_t v, sum = 0;
  // `name` with labels ("dropped{reason=\"bad_mac\"}") matches that line only.
  const bool labelled = name.find('{') != std::string::npos;
  while (in >> key >> v) {
    if (const auto brace = key.find('{'); !labelled && brace != std::string::npos) key.resize(brace);
    if (key == name) sum += v;
  }
  return sum;
}

std::string LoopbackRack::run_token(const std::string& id, int host) const {
  std::string secret, err;
  RunTokens tokens;
  if (!config::load_rack_secret(dir_ + "/psk", &secret, &err) || !(err = tokens.set_secret(secret)).empty())
    throw std::runtime_error(err);
  return RunTokens::to_hex(tokens.token(id, std::uint32_t(host)));
}

FakeApp::FakeApp(std::string socket, std::uint32_t host, std::uint32_t hosts, std::uint32_t total,
                 std::string run_id, std::string run_token)
    : socket_(std::move(socket)),
      host_(host),
      hosts_(hosts),
      total_(total),
      run_id_(std::move(run_id)),
      run_token_(std::move(run_token)) {
  abi::host_threads(total, hosts, host, &first_, &local_);
  if (!abi::segment_layout(total, local_, &layout_)) throw std::runtime_error("bad thread counts");
  memfd_ = ::memfd_create("fake-app", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd_ < 0 || ::ftruncate(memfd_, off_t(layout_.bytes)) != 0 ||
      ::fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw std::runtime_error("memfd");
  void* p = ::mmap(nullptr, layout_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap");
  base_ = static_cast<std::uint8_t*>(p);
  const abi::SegmentHeader h = abi::segment_header(layout_, total_, first_, local_, host_, hosts_);
  std::memcpy(base_, &h, sizeof h);
  eventfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

FakeApp::~FakeApp() {
  if (base_) ::munmap(base_, layout_.bytes);
  for (int fd : {memfd_, eventfd_, sock_})
    if (fd >= 0) ::close(fd);
}

abi::DataplaneMessage FakeApp::attach() {
  sock_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", socket_.c_str());
  if (::connect(sock_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    throw std::runtime_error("connect " + socket_ + ": " + std::strerror(errno));
  abi::AttachRequest req{};
  req.type = abi::kMsgAttach;
  req.attach_version = abi::kAttachVersion;
  req.slot_layout = abi::kLayoutVersion;
  req.build_id_len = 20;
  std::memset(req.build_id, 0x5a, 20);
  std::memcpy(req.run_id, run_id_.data(), std::min(run_id_.size(), sizeof req.run_id));
  std::memcpy(req.run_token, run_token_.data(), std::min(run_token_.size(), sizeof req.run_token));
  req.total_threads = total_;
  req.pid = std::uint32_t(::getpid());
  req.segment_bytes = layout_.bytes;
  int fds[2] = {memfd_, eventfd_};
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
  if (::sendmsg(sock_, &mh, 0) != ssize_t(sizeof req)) throw std::runtime_error("sendmsg");
  abi::DataplaneMessage m{};
  if (!wait_message(0, 10'000, &m)) throw std::runtime_error("no answer to the attach request");
  return m;
}

bool FakeApp::wait_message(std::uint32_t type, int timeout_ms, abi::DataplaneMessage* out) {
  pollfd pfd{sock_, POLLIN, 0};
  if (::poll(&pfd, 1, timeout_ms) <= 0) return false;
  abi::DataplaneMessage m{};
  if (::recv(sock_, &m, sizeof m, 0) != ssize_t(sizeof m)) return false;
  if (out) *out = m;
  return type == 0 || m.type == type;
}

void FakeApp::send_detach() {
  abi::AppMessage m{abi::kMsgDetach, 0};
  ::send(sock_, &m, sizeof m, MSG_NOSIGNAL);
}

std::uint8_t* FakeApp::slot(std::uint64_t region, std::uint32_t row, std::uint32_t col, std::size_t size,
                            std::uint32_t lane_of) const {
  return base_ + region + abi::slot_cell(total_, lane_of, row, col) * size;
}

void FakeApp::ring(std::uint32_t li, std::uint32_t entry) {
  auto* r = reinterpret_cast<abi::DoorbellRing*>(base_ + layout_.doorbells + li * layout_.doorbell_stride);
  auto* entries = reinterpret_cast<std::uint32_t*>(r + 1);
  const std::uint32_t head = std::atomic_ref<std::uint32_t>(r->head).load(std::memory_order_relaxed);
  store_release<std::uint32_t>(&entries[head & (layout_.doorbell_entries - 1)], entry);
  store_release<std::uint32_t>(&r->head, head + 1);
  // Dekker with the dataplane's sleep: kick it if any core sleeps.
  auto* hdr = reinterpret_cast<abi::SegmentHeader*>(base_);
  if (std::atomic_ref<std::uint32_t>(hdr->dataplane_sleeping).fetch_or(0, std::memory_order_seq_cst)) {
    std::uint64_t one = 1;
    (void)!::write(eventfd_, &one, sizeof one);
  }
}

namespace {

// A slot's body: the header's primary_len bytes after it, then overflow_len
// bytes in the overflow block. Written before the seq word (release).
template <class Header>
void write_slot(std::uint8_t* primary, std::uint8_t* overflow, std::uint32_t primary_cap, std::uint32_t seq,
                const std::vector<std::uint8_t>& body, std::uint16_t flags = 0) {
  Header h{};
  h.seq = seq;
  h.count = 1;
  if constexpr (requires { h.flags; }) h.flags = flags;
  h.primary_len = std::uint16_t(std::min<std::size_t>(body.size(), primary_cap));
  h.overflow_len = std::uint16_t(body.size() - h.primary_len);
  std::memcpy(primary + sizeof h, body.data(), h.primary_len);
  std::memcpy(overflow, body.data() + h.primary_len, h.overflow_len);
  std::memcpy(primary + sizeof h.seq, reinterpret_cast<const std::uint8_t*>(&h) + sizeof h.seq, sizeof h - sizeof h.seq);
  store_release<std::uint32_t>(primary, seq);
}

template <class Header>
std::vector<std::uint8_t> read_slot(const std::uint8_t* primary, const std::uint8_t* overflow) {
  Header h;
  std::memcpy(&h, primary, sizeof h);
  std::vector<std::uint8_t> b(std::size_t(h.primary_len) + h.overflow_len);
  std::memcpy(b.data(), primary + sizeof h, h.primary_len);
  std::memcpy(b.data() + h.primary_len, overflow, h.overflow_len);
  return b;
}

}  // namespace

void FakeApp::request(std::uint32_t li, std::uint32_t trustee, std::uint32_t seq,
                      const std::vector<std::uint8_t>& body) {
  const std::uint32_t client = first_ + li;
  write_slot<abi::RequestSlotHeader>(slot(layout_.request_primary, trustee, client, abi::kPrimaryBytes, seq),
                                     slot(layout_.request_overflow, trustee, client, abi::kOverflowBytes, seq),
                                     abi::kRequestPrimaryData, seq, body);
  ring(li, trustee);
}

void FakeApp::respond(std::uint32_t li, std::uint32_t client, std::uint32_t seq,
                      const std::vector<std::uint8_t>& body, std::uint16_t flags) {
  const std::uint32_t trustee = first_ + li;
  write_slot<abi::ResponseSlotHeader>(slot(layout_.response_primary, client, trustee, abi::kPrimaryBytes, seq),
                                      slot(layout_.response_overflow, client, trustee, abi::kOverflowBytes, seq),
                                      abi::kResponsePrimaryData, seq, body, flags);
  ring(li, client | abi::kDoorbellResponse);
}

std::uint16_t FakeApp::response_flags(std::uint32_t li, std::uint32_t trustee, std::uint32_t lane_of) const {
  abi::ResponseSlotHeader h;
  std::memcpy(&h, slot(layout_.response_primary, first_ + li, trustee, abi::kPrimaryBytes, lane_of), sizeof h);
  return h.flags;
}

bool FakeApp::doorbells_taken(std::uint32_t li) const {
  auto* r = reinterpret_cast<abi::DoorbellRing*>(base_ + layout_.doorbells + li * layout_.doorbell_stride);
  return load_acquire<std::uint32_t>(&r->tail) == std::atomic_ref<std::uint32_t>(r->head).load(std::memory_order_relaxed);
}

bool FakeApp::dataplane_sleeping() const {
  auto* hdr = reinterpret_cast<abi::SegmentHeader*>(base_);
  return std::atomic_ref<std::uint32_t>(hdr->dataplane_sleeping).load(std::memory_order_seq_cst) != 0;
}

std::uint32_t FakeApp::response_seq(std::uint32_t li, std::uint32_t trustee, std::uint32_t lane_of) const {
  return load_acquire<std::uint32_t>(
      slot(layout_.response_primary, first_ + li, trustee, abi::kPrimaryBytes, lane_of));
}

std::vector<std::uint8_t> FakeApp::response_body(std::uint32_t li, std::uint32_t trustee,
                                                 std::uint32_t lane_of) const {
  return read_slot<abi::ResponseSlotHeader>(
      slot(layout_.response_primary, first_ + li, trustee, abi::kPrimaryBytes, lane_of),
      slot(layout_.response_overflow, first_ + li, trustee, abi::kOverflowBytes, lane_of));
}

std::uint32_t FakeApp::request_seq(std::uint32_t li, std::uint32_t client, std::uint32_t lane_of) const {
  return load_acquire<std::uint32_t>(slot(layout_.request_primary, first_ + li, client, abi::kPrimaryBytes, lane_of));
}

std::vector<std::uint8_t> FakeApp::request_body(std::uint32_t li, std::uint32_t client, std::uint32_t lane_of) const {
  return read_slot<abi::RequestSlotHeader>(
      slot(layout_.request_primary, first_ + li, client, abi::kPrimaryBytes, lane_of),
      slot(layout_.request_overflow, first_ + li, client, abi::kOverflowBytes, lane_of));
}

std::vector<std::uint8_t> pattern(std::uint32_t client, std::uint32_t trustee, std::uint32_t seq, bool response,
                                  std::size_t len) {
  std::vector<std::uint8_t> b(len);
  std::uint32_t x = client * 0x9e3779b1u ^ trustee * 0x85ebca6bu ^ seq * 0xc2b2ae35u ^ (response ? 0x27d4eb2fu : 0);
  for (auto& c : b) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = std::uint8_t(x);
  }
  return b;
}

}  // namespace gossamer::dataplane::testing
