// Fault injection on received frames (port_faults.hpp).
#include "port_faults.hpp"

#include <cstdlib>
#include <sstream>

#include "clock.hpp"

namespace gossamer::dataplane {

std::string parse_faults(const std::string& text, FaultSpec* out) {
  FaultSpec f;
  std::istringstream words(text);
  std::string key, value;
  while (words >> key) {
    double* slot = key == "loss" ? &f.loss : key == "duplicate" ? &f.duplicate : key == "reorder" ? &f.reorder : nullptr;
    if (!slot || !(words >> value) || value.empty() || value.back() != '%')
      return "cannot use '" + text + "' (supported: loss N%, duplicate N%, reorder N%)";
    char* end = nullptr;
    const double pct = std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size() - 1 || !(pct >= 0 && pct <= 100))
      return "cannot use '" + value + "' in '" + text + "': a percentage from 0% to 100%";
    *slot = pct / 100.0;
  }
  *out = f;
  return "";
}

FaultPort::FaultPort(std::unique_ptr<Port> inner, std::uint64_t hold_ticks)
    : inner_(std::move(inner)), hold_ticks_(hold_ticks), queues_(inner_->queues()) {
  for (std::size_t q = 0; q < queues_.size(); ++q) queues_[q].rng ^= (q + 1) * 0x2545f4914f6cdd1dull;
}

FaultPort::~FaultPort() {
  for (Queue& s : queues_)
    if (s.held.handle) inner_->release(s.held);
}

void FaultPort::set(const FaultSpec& s) {
  loss_.store(s.loss, std::memory_order_relaxed);
  duplicate_.store(s.duplicate, std::memory_order_relaxed);
  reorder_.store(s.reorder, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_release);
}

double FaultPort::Queue::random() {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return double(rng >> 11) / double(1ull << 53);
}

std::uint16_t FaultPort::rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) {
  Queue& s = queues_[q];
  if (const std::uint32_t g = gen_.load(std::memory_order_acquire); g != s.gen) [[unlikely]] {
    s.gen = g;
    s.spec = FaultSpec{loss_.load(std::memory_order_relaxed), duplicate_.load(std::memory_order_relaxed),
                       reorder_.load(std::memory_order_relaxed)};
  }
  if (!s.spec.any() && !s.held.handle) [[likely]]
    return inner_->rx_burst(q, out, n);
  // Each frame may come out twice, and a held one with them: take at most
  // (n - 1) / 2 from the port.
  Frame in[64];
  const std::uint16_t want = std::uint16_t(std::min<unsigned>((n - 1u) / 2u, 64u));
  const std::uint16_t got = want ? inner_->rx_burst(q, in, want) : 0;
  std::uint16_t k = 0, i = 0;
  if (s.held.handle && (got || tsc_now() - s.held_at > hold_ticks_)) {
    // The held frame goes in after the next one (or alone, once it waited).
    if (got) out[k++] = in[i++];
    out[k++] = s.held;
    s.held = Frame{};
  }
  for (; i < got; ++i) {
    const Frame f = in[i];
    if (s.random() < s.spec.loss) {
      ++s.counters.loss;
      inner_->release(f);
      continue;
    }
    if (s.random() < s.spec.duplicate) {
      ++s.counters.duplicates;
      inner_->retain(f);
      out[k++] = f;
    }
    if (!s.held.handle && s.random() < s.spec.reorder) {
      ++s.counters.reorders;
      s.held = f;
      s.held_at = tsc_now();
      continue;
    }
    out[k++] = f;
  }
  return k;
}

}  // namespace gossamer::dataplane
