// The TSC's frequency, measured (clock.hpp).
#include "clock.hpp"

#include <time.h>

namespace gossamer::dataplane {

namespace {
std::uint64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}
}  // namespace

std::uint64_t measure_tsc_hz(unsigned ms) {
  const std::uint64_t t0 = mono_ns(), c0 = tsc_now();
  timespec d{0, long(ms) * 1'000'000L};
  ::nanosleep(&d, nullptr);
  const std::uint64_t t1 = mono_ns(), c1 = tsc_now();
  return t1 > t0 ? (c1 - c0) * 1'000'000'000ull / (t1 - t0) : 1'000'000'000ull;
}

}  // namespace gossamer::dataplane
