// The dataplane's clock: the time-stamp counter, read without a system call
// (every stage stamps with it), and its frequency.
#pragma once

#include <cstdint>

#include <x86intrin.h>

namespace gossamer::dataplane {

inline std::uint64_t tsc_now() { return __rdtsc(); }
inline void cpu_relax() { _mm_pause(); }

// CLOCK_MONOTONIC in nanoseconds (a system call's worth: not for the hot path).
std::uint64_t monotonic_ns();

// Measured against CLOCK_MONOTONIC over `ms` milliseconds (for ports that do
// not know it, such as the loopback port).
std::uint64_t measure_tsc_hz(unsigned ms = 20);

}  // namespace gossamer::dataplane
