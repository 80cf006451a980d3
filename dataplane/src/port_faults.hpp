// Fault injection on a port's receive path (DESIGN.md §5 "Faults"): loss,
// duplication and reordering, for kernels without netem (the rack in a box)
// and for the loopback tests. A decorator: the stages see a Port.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "port.hpp"

namespace gossamer::dataplane {

struct FaultSpec {
  double loss = 0, duplicate = 0, reorder = 0;  // probabilities, 0..1
  bool any() const { return loss > 0 || duplicate > 0 || reorder > 0; }
};

// A netem-style spec, e.g. "loss 2% reorder 10% duplicate 2%" ("" is no
// faults). Returns "" or what is wrong with it.
std::string parse_faults(const std::string& text, FaultSpec* out);

class FaultPort final : public Port {
 public:
  // `hold_ticks`: how long (TSC) a frame held back to be reordered waits
  // for a frame to overtake it.
  FaultPort(std::unique_ptr<Port> inner, std::uint64_t hold_ticks);
  ~FaultPort() override;

  // Any thread; each queue applies it at its next burst.
  void set(const FaultSpec& s);
  struct Counters {
    std::uint64_t loss = 0, duplicates = 0, reorders = 0;
  };
  // Queue q's core only.
  const Counters& counters(std::uint16_t q) const { return queues_[q].counters; }

  std::uint16_t queues() const override { return inner_->queues(); }
  std::array<std::uint8_t, 6> mac() const override { return inner_->mac(); }
  std::uint16_t rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) override;
  bool alloc(std::uint32_t len, Frame* out) override { return inner_->alloc(len, out); }
  std::uint16_t tx_burst(std::uint16_t q, Frame* f, std::uint16_t n) override { return inner_->tx_burst(q, f, n); }
  void release(const Frame& f) override { inner_->release(f); }
  void retain(const Frame& f) override { inner_->retain(f); }
  Frame frame(void* handle) const override { return inner_->frame(handle); }
  int rx_wake_fd(std::uint16_t q) const override { return inner_->rx_wake_fd(q); }
  bool rx_wake_arm(std::uint16_t q, bool quiet) override { return inner_->rx_wake_arm(q, quiet); }
  std::uint64_t rx_due(std::uint16_t q) const override {
    return queues_[q].held.handle ? queues_[q].held_at + hold_ticks_ + 1 : inner_->rx_due(q);
  }
  std::uint64_t tsc_hz() const override { return inner_->tsc_hz(); }
  DeviceErrors device_errors() const override { return inner_->device_errors(); }
  void thread_started(std::uint32_t core) override { inner_->thread_started(core); }
  void thread_stopped(std::uint32_t core) override { inner_->thread_stopped(core); }
  void maintain() override { inner_->maintain(); }
  std::string describe() const override { return inner_->describe(); }

 private:
  struct alignas(64) Queue {
    std::uint32_t gen = 0;
    FaultSpec spec;
    std::uint64_t rng = 0x9e3779b97f4a7c15ull;
    Frame held;             // a frame held back to reorder it
    std::uint64_t held_at = 0;
    Counters counters;
    double random();
  };
  std::unique_ptr<Port> inner_;
  std::uint64_t hold_ticks_;
  std::vector<Queue> queues_;
  std::atomic<std::uint32_t> gen_{0};
  std::atomic<double> loss_{0}, duplicate_{0}, reorder_{0};
};

}  // namespace gossamer::dataplane
