// hydra-prefetch-bench [KEYS]: what the key prefetch (key_prefetch.hpp)
// saves per lookup on this machine, in one process. A shard's map
// (Shard::map's type) of KEYS random 16-byte keys (default 1 M draws, as
// redis-benchmark -r), then 2^20 lookups of random keys, 16 at a time, as a
// pipeline: runs without and with prefetch_chains alternate, 40 of each;
// prints ns per lookup (minimum and median of the runs) and their ratio. A
// ratio of two kinds of run in one process, so a loaded machine shifts
// both (README, Performance).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "key_prefetch.hpp"

int main(int argc, char** argv) {
  using namespace hydra;
  const std::size_t draws = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000000;
  if (draws == 0) return std::fprintf(stderr, "usage: hydra-prefetch-bench [KEYS > 0]\n"), 2;
  StringMap map;
  std::mt19937_64 rng(1);
  char buf[32];
  auto random_key = [&] {
    std::snprintf(buf, sizeof buf, "key:%012llu", static_cast<unsigned long long>(rng() % draws));
    return std::string(buf);
  };
  for (std::size_t i = 0; i < draws; ++i) map.insert_or_assign(random_key(), std::string("xxx"));
  constexpr std::size_t kLookups = 1 << 20, kRuns = 40;
  std::vector<std::string> keys(kLookups);
  for (auto& k : keys) k = random_key();
  std::vector<double> ns[2];
  std::size_t found = 0;
  for (std::size_t run = 0; run < kRuns; ++run) {
    for (int with = 0; with < 2; ++with) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < kLookups; i += kPrefetchWindow) {
        if (with) {
          std::string_view v[kPrefetchWindow];
          for (std::size_t j = 0; j < kPrefetchWindow; ++j) v[j] = keys[i + j];
          prefetch_chains(map, v, kPrefetchWindow);
        }
        for (std::size_t j = 0; j < kPrefetchWindow; ++j) {
          auto it = map.find(keys[i + j]);
          if (it != map.end()) ++found, it->second.lru = std::uint32_t(i);
        }
      }
      ns[with].push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                         kLookups);
    }
  }
  for (auto& v : ns) std::sort(v.begin(), v.end());
  std::printf("%zu keys (%zu buckets), %zu lookups per run, %zu runs of each, alternating; ns per lookup:\n",
              map.size(), map.bucket_count(), kLookups, kRuns);
  std::printf("  find alone             min %7.1f  median %7.1f\n", ns[0][0], ns[0][kRuns / 2]);
  std::printf("  prefetch_chains, find  min %7.1f  median %7.1f\n", ns[1][0], ns[1][kRuns / 2]);
  std::printf("  ratio (alone / with)   min %6.2fx  median %6.2fx   (%zu found)\n", ns[0][0] / ns[1][0],
              ns[0][kRuns / 2] / ns[1][kRuns / 2], found);
  return 0;
}
