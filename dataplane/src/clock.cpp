// The TSC's frequency, measured (clock.hpp).
#include "clock.hpp"

#include <time.h>

namespace gossamer::dataplane {

std::uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

std::uint64_t measure_tsc_hz(unsigned ms) {
  const std::uint64_t t0 = monotonic_ns(), c0 = tsc_now();
  timespec d{0, long(ms) * 1'000'000L};
  ::nanosleep(&d, nullptr);
  const std::uint64_t t1 = monotonic_ns(), c1 = tsc_now();
  return t1 > t0 ? (c1 - c0) * 1'000'000'000ull / (t1 - t0) : 1'000'000'000ull;
}

}  // namespace gossamer::dataplane
