// The payload of an echo request, shared by tools/bench/echo (gossamer) and
// tools/bench/tcp-echo (the kernel-TCP baseline), so that both harnesses
// spend the same on it: distinct per (id, seq), so that an echo of the
// wrong bytes is caught, and written 8 bytes at a time. Byte by byte it was
// 323 instructions per 32-byte request, a third of what echo's client did
// per request (callgrind), which measured the harness rather than the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace echo_payload {

inline void fill(char* p, std::size_t n, std::uint64_t id, std::uint64_t seq) {
  const std::uint64_t x = id * 0x9E3779B97F4A7C15ull + seq;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t w = x + i * 0x0101010101010101ull;
    std::memcpy(p + i, &w, 8);
  }
  for (; i < n; ++i) p[i] = char((x >> ((i % 8) * 8)) + i);
}

}  // namespace echo_payload
