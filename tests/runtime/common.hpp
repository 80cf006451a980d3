// Helpers shared by the runtime tests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gossamer/gossamer.hpp>

namespace gossamer_test {

// Yields the calling fiber until pred() holds. The deadline is only a hang
// guard (it turns a lost wake-up into a failed assertion instead of a test
// timeout); no test asserts on how long anything takes.
template <class P>
bool wait_until(P pred, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    gossamer::yield();
  }
  return true;
}

// Destructions of Tracked properties in the current test (tests in one
// binary run one after the other; each resets it).
inline std::atomic<int> g_tracked_destroyed{0};

constexpr std::uint64_t kAlive = 0xA11CE0A11CE0ull;
constexpr std::uint64_t kDead = 0xDEADDEADDEADull;

// A property that counts its destruction once (moved-from shells do not
// count) and carries an "alive" word closures can read.
struct Tracked {
  Tracked() = default;
  explicit Tracked(long v) : value(v) {}
  Tracked(Tracked&& o) noexcept : value(o.value), magic(o.magic) { o.moved_from = true; }
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;
  ~Tracked() {
    if (moved_from) return;
    magic = kDead;
    g_tracked_destroyed.fetch_add(1);
  }
  long value = 0;
  std::uint64_t magic = kAlive;
  bool moved_from = false;
};

// Deterministic PRNG (splitmix64) so expected results can be replayed.
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint32_t below(std::uint32_t n) { return std::uint32_t(next() % n); }
};

// A result that never decodes: saves nothing, loads an int (not trivially
// copyable, so it goes through cereal).
struct Undecodable {
  std::string text;
  template <class Ar>
  void save(Ar&) const {}
  template <class Ar>
  void load(Ar& ar) {
    int x;
    ar(x);
  }
};

}  // namespace gossamer_test
