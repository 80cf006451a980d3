// The loopback port pair (port_loopback.hpp).
#include "port_loopback.hpp"

#include <atomic>
#include <cstring>

#include "clock.hpp"
#include "ring.hpp"
#include "wire.hpp"

namespace gossamer::dataplane {

namespace {

constexpr std::size_t kRingFrames = 4096;

struct Buffer {
  std::atomic<int> refs{1};
  std::uint32_t len = 0;
  std::uint8_t bytes[wire::kMaxFrameAnyMtu];
};

// What the two sides share: each side's receive ring (queue 0), and the
// frames lost because it was full (that side's rx_missed).
struct Link {
  MpscRing to[2]{MpscRing(kRingFrames), MpscRing(kRingFrames)};
  std::atomic<std::uint64_t> missed[2]{};
  bool push(int side, void* frame) {
    if (to[side].push(frame)) return true;
    missed[side].fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ~Link() {
    void* p;
    for (auto& r : to)
      while (r.pop_burst(&p, 1)) delete static_cast<Buffer*>(p);
  }
};

class LoopbackPort final : public Port {
 public:
  LoopbackPort(std::shared_ptr<Link> link, int side, std::uint16_t queues)
      : link_(std::move(link)), side_(side), queues_(queues) {}

  std::uint16_t queues() const override { return queues_; }
  std::array<std::uint8_t, 6> mac() const override {
    return {0x02, 0, 0, 0, 0, std::uint8_t(side_ == 0 ? 0x0a : 0x0b)};
  }
  std::uint16_t rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) override {
    if (q != 0) return 0;
    void* got[64];
    const std::size_t k = link_->to[side_].pop_burst(got, std::min<std::size_t>(n, 64));
    for (std::size_t i = 0; i < k; ++i) out[i] = frame(got[i]);
    return std::uint16_t(k);
  }
  bool alloc(std::uint32_t len, Frame* out) override {
    if (len > wire::kMaxFrameAnyMtu) return false;
    auto* b = new Buffer;
    b->len = len;
    *out = Frame{b, b->bytes, len};
    return true;
  }
  std::uint16_t tx_burst(std::uint16_t, Frame* frames, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i)
      if (!link_->push(1 - side_, frames[i].handle)) release(frames[i]);  // the peer's ring is full: lost
    return n;
  }
  void release(const Frame& f) override {
    auto* b = static_cast<Buffer*>(f.handle);
    if (b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete b;
  }
  void retain(const Frame& f) override { static_cast<Buffer*>(f.handle)->refs.fetch_add(1, std::memory_order_relaxed); }
  Frame frame(void* handle) const override {
    auto* b = static_cast<Buffer*>(handle);
    return Frame{b, b->bytes, b->len};
  }
  DeviceErrors device_errors() const override {
    DeviceErrors e;
    e.rx_missed = link_->missed[side_].load(std::memory_order_relaxed);
    return e;
  }
  std::string describe() const override {
    return std::string("loopback port ") + (side_ == 0 ? "a" : "b") + ", " + std::to_string(queues_) + " queue" +
           (queues_ == 1 ? "" : "s");
  }

 private:
  std::shared_ptr<Link> link_;
  int side_;
  std::uint16_t queues_;
};

}  // namespace

std::pair<std::unique_ptr<Port>, std::unique_ptr<Port>> make_loopback_pair(std::uint16_t queues,
                                                                          LoopbackInjector* injector,
                                                                          LoopbackReopener* reopen) {
  auto link = std::make_shared<Link>();
  if (reopen)
    *reopen = [link, queues](int side) -> std::unique_ptr<Port> {
      return std::make_unique<LoopbackPort>(link, side, queues);
    };
  if (injector)
    *injector = [link](int to, const std::vector<std::uint8_t>& bytes) {
      if (bytes.size() > wire::kMaxFrameAnyMtu) return false;
      auto* b = new Buffer;
      b->len = std::uint32_t(bytes.size());
      std::memcpy(b->bytes, bytes.data(), bytes.size());
      if (link->push(to, b)) return true;
      delete b;
      return false;
    };
  return {std::make_unique<LoopbackPort>(link, 0, queues), std::make_unique<LoopbackPort>(link, 1, queues)};
}

}  // namespace gossamer::dataplane
