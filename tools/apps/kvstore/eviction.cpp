// Evicting keys when the host is over --maxmemory with an evicting policy
// (shard.hpp: evict_for, memory.cpp: the measurement). Run by a shard's
// trustee on its own keys, so each shard evicts from itself: a write makes
// room on the shard it writes to, and each loop's periodic round makes room
// on its own thread's shard (memory.cpp) when no write comes.
//
// The LRU policies approximate LRU as Redis does (evict.c): sample 5 keys,
// put them in a pool of the 16 most idle seen so far (idle: the key's clock,
// Entry::lru / Obj::lru, against this thread's tl_lru_clock), evict the most
// idle of the pool that still exists. The pool lives on across calls, so
// the keys evicted are close to the least recently used of the whole shard
// after a few rounds; a candidate read since it was sampled is dropped from
// the pool instead of evicted (its idle time there is stale). The random policies evict a sampled key.
#include <algorithm>
#include <array>
#include <random>

#include <gossamer/gossamer.hpp>

#include "shard.hpp"

namespace hydra {

std::atomic<std::uint8_t> g_policy{std::uint8_t(Policy::kNoEviction)};
std::atomic<bool> g_evicting{false};
namespace {
struct alignas(64) Over {
  std::atomic<std::int64_t> bytes{0};
};
std::array<Over, 256> g_over;  // by thread index (a rack has at most 256 threads)
}  // namespace
std::atomic<std::int64_t>& over_of(std::size_t thread) { return g_over[thread % g_over.size()].bytes; }
std::atomic<std::uint64_t> g_evicted{0};

namespace {

constexpr std::size_t kSamples = 5;    // Redis's maxmemory-samples
constexpr std::size_t kPoolSize = 16;  // Redis's EVPOOL_SIZE
constexpr int kMaxPerCall = 64;        // keys one call evicts at most (bounds a write's latency)

std::mt19937_64& rng() {
  thread_local std::mt19937_64 r{std::random_device{}()};
  return r;
}

// A random key of `m`: a random bucket, then the next non-empty one.
template <class M>
const std::string* sample(const M& m) {
  if (m.empty()) return nullptr;
  const std::size_t nb = m.bucket_count();
  std::size_t b = std::uniform_int_distribution<std::size_t>(0, nb - 1)(rng());
  for (std::size_t i = 0; i < nb; ++i, b = b + 1 == nb ? 0 : b + 1) {
    const std::size_t n = m.bucket_size(b);
    if (n == 0) continue;
    auto it = m.begin(b);
    std::advance(it, std::uniform_int_distribution<std::size_t>(0, n - 1)(rng()));
    return &it->first;
  }
  return nullptr;
}

// A random key of the shard: of every key (allkeys-*) or of those with a
// TTL (volatile-*).
const std::string* sample_key(const Shard& s, bool volatile_only) {
  if (volatile_only) return sample(s.expires);
  const std::size_t total = s.map.size() + s.objs.size();
  if (total == 0) return nullptr;
  return std::uniform_int_distribution<std::size_t>(0, total - 1)(rng()) < s.map.size() ? sample(s.map) : sample(s.objs);
}

// The key's clock; false if it is gone.
bool clock_of(const Shard& s, const std::string& key, std::uint32_t& lru) {
  if (auto it = s.map.find(key); it != s.map.end()) return lru = it->second.lru, true;
  if (auto it = s.objs.find(key); it != s.objs.end()) return lru = it->second.lru, true;
  return false;
}

// Adds samples to the pool (ascending idle time, no key twice), as Redis's
// evictionPoolPopulate: a sample less idle than all of a full pool is dropped.
void populate(Shard& s, bool volatile_only) {
  for (std::size_t i = 0; i < kSamples; ++i) {
    const std::string* key = sample_key(s, volatile_only);
    std::uint32_t lru;
    if (!key || !clock_of(s, *key, lru)) return;
    const std::uint32_t idle = idle_ms(lru);
    if (std::any_of(s.pool.begin(), s.pool.end(), [&](const EvictCandidate& c) { return c.key == *key; })) continue;
    auto at = std::lower_bound(s.pool.begin(), s.pool.end(), idle,
                               [](const EvictCandidate& c, std::uint32_t v) { return c.idle < v; });
    if (s.pool.size() >= kPoolSize) {
      if (at == s.pool.begin()) continue;  // less idle than every candidate
      s.pool.erase(s.pool.begin());        // the least idle goes
      --at;
    }
    s.pool.insert(at, EvictCandidate{idle, lru, *key});
  }
}

// What evicting `key` frees, about (the same estimate writes add).
std::size_t bytes_of(const Shard& s, const std::string& key) {
  if (auto it = s.map.find(key); it != s.map.end()) return entry_bytes(key.size(), it->second.size());
  auto it = s.objs.find(key);
  if (it == s.objs.end()) return 0;
  std::size_t bytes = entry_bytes(key.size(), 0);
  std::visit([&](const auto& c) {
    for (const auto& e : c) {
      if constexpr (std::is_same_v<std::decay_t<decltype(c)>, Hash>) bytes += (c.listpack() ? 64 : 128) + e.first.size() + e.second.size();
      else if constexpr (std::is_same_v<std::decay_t<decltype(e)>, std::string>) bytes += 48 + e.size();
      else if constexpr (std::is_same_v<std::decay_t<decltype(e.second)>, double>) bytes += 128 + e.first.size();
      else bytes += 64 + e.first.size() + e.second.size();
    }
  }, static_cast<const Object&>(it->second));
  return bytes;
}

void drop(Shard& s, const std::string& key) {
  const std::size_t bytes = bytes_of(s, key);
  if (!s.expires.empty()) s.expires.erase(key);
  touch(s, key);  // a WATCHed key that is evicted fails the EXEC, as in Redis
  if (s.map.erase(key) == 0) s.objs.erase(key);
  over_of(gossamer::thread_index()).fetch_sub(std::int64_t(bytes), std::memory_order_relaxed);
  g_evicted.fetch_add(1, std::memory_order_relaxed);
  notify(kNotifyEvicted, "evicted", key);
}

// One key evicted by the policy; false if the shard has none to evict.
bool evict_one(Shard& s) {
  const auto policy = Policy(g_policy.load(std::memory_order_relaxed));
  const bool volatile_only = policy == Policy::kVolatileLru || policy == Policy::kVolatileRandom;
  if (policy == Policy::kAllkeysRandom || policy == Policy::kVolatileRandom) {
    const std::string* key = sample_key(s, volatile_only);
    if (!key) return false;
    const std::string copy = *key;
    drop(s, copy);
    return true;
  }
  // A few rounds of sampling, as the pool may hold only keys deleted since.
  for (int round = 0; round < 4; ++round) {
    populate(s, volatile_only);
    while (!s.pool.empty()) {
      EvictCandidate c = std::move(s.pool.back());
      s.pool.pop_back();
      std::uint32_t lru;
      // Gone, or read or written since it was sampled (its idle time is stale): not this one.
      if (!clock_of(s, c.key, lru) || lru != c.lru || (volatile_only && !s.expires.count(c.key))) continue;
      drop(s, c.key);
      return true;
    }
  }
  return false;
}

}  // namespace

void evict_for(Shard& s, std::size_t incoming) noexcept {
  try {
    // The shard's own part (shard.hpp): a measurement's excess is paid by
    // every shard, not all by the one whose writes come right after it,
    // which would lose its freshest keys (hydra_memory_test's keys read
    // on one shard of two did, when the measuring loop napped while the
    // other shard wrote a batch).
    std::atomic<std::int64_t>& over = over_of(gossamer::thread_index());
    if (incoming) over.fetch_add(std::int64_t(incoming), std::memory_order_relaxed);
    for (int n = 0; n < kMaxPerCall && over.load(std::memory_order_relaxed) > 0; ++n)
      if (!evict_one(s)) break;
  } catch (...) {  // out of memory while sampling: the write goes on, the next one evicts
  }
}

}  // namespace hydra
