// --maxmemory and --maxmemory-policy. The heap in use is the allocator's
// own count (mallinfo2: bytes in use in every arena, and in mmapped
// chunks), as Redis's used_memory is its allocator's; one loop per host
// reads it every 100 ms (10 ms with an evicting policy). Each host of a
// rack bounds itself.
//
// noeviction: over the bound, commands that may grow the data are refused
// with Redis 7.0's OOM error until memory is freed (DEL, FLUSHALL, expiry);
// the loop publishes a flag the others test, so a burst of writes may
// overshoot the bound by what arrives in 100 ms.
// allkeys-lru, volatile-lru, allkeys-random, volatile-random: nothing is
// refused; the measurement publishes how far over the bound the host is,
// split evenly between its threads' shards (over_of), every write adds its
// size to its shard's part and evicts keys of its own shard while that is
// positive (eviction.cpp), and each loop evicts from its
// own thread's shard in its periodic round, so memory is freed without
// writes too.
//
// Also the small accessor CONFIG GET uses for the connection-side settings.
#include <malloc.h>

#include "server.hpp"

namespace hydra {

// Under AddressSanitizer the allocator is ASan's, and mallinfo2 counts
// nothing: its own count of bytes allocated is used then (a weak symbol,
// null in a normal build).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));

std::atomic<bool> g_oom{false};
namespace {
std::atomic<std::uint32_t> g_first_local{0}, g_local_count{1};  // this host's threads (Loop::check_memory)
}
std::atomic<std::size_t> g_maxmemory{0};
std::atomic<std::size_t> g_max_query{std::size_t(1) << 30};
std::atomic<std::size_t> g_max_reply_memory{std::size_t(512) << 20};
namespace {
std::atomic<int> g_reply_percent{-1};  // maxmemory-clients as a percentage of maxmemory; -1: in bytes
}

namespace {

constexpr const char* kPolicies[] = {"noeviction", "allkeys-lru", "volatile-lru", "allkeys-random", "volatile-random"};

void publish_policy() {
  g_evicting.store(g_maxmemory.load(std::memory_order_relaxed) != 0 &&
                       g_policy.load(std::memory_order_relaxed) != std::uint8_t(Policy::kNoEviction),
                   std::memory_order_relaxed);
}

std::atomic<std::uint64_t> g_used{0};

// Redis 7.0's commands with the denyoom flag, of those Hydra has or may get.
bool denyoom(const std::string& n) {
  static const char* const kWrites[] = {
      "set",      "setnx",     "setex",       "psetex",      "append",      "incr",        "decr",     "incrby",
      "decrby",   "incrbyfloat", "mset",      "msetnx",      "getset",      "setrange",    "setbit",   "lpush",
      "rpush",    "lpushx",    "rpushx",      "linsert",     "lset",        "lmove",       "rpoplpush", "sadd",
      "smove",    "sunionstore", "sinterstore", "sdiffstore", "hset",       "hsetnx",      "hmset",    "hincrby",
      "hincrbyfloat", "copy",  "bitop",       "bitfield",    "zadd",        "zincrby",     "pfadd",    "xadd",
      "geoadd",   "restore",   "sort",        "getex",
      "zunionstore", "zinterstore", "zdiffstore", "zrangestore"};
  for (const char* w : kWrites)
    if (n == w) return true;
  return false;
}

}  // namespace

std::uint64_t used_memory() { return g_used.load(std::memory_order_relaxed); }

// Reads the heap in use and publishes what follows from it: g_oom
// (noeviction) or each shard's part of the excess (over_of; evicting policies).
static void measure() {
  std::uint64_t used;
  if (__sanitizer_get_current_allocated_bytes) {
    used = __sanitizer_get_current_allocated_bytes();
  } else {
    const struct mallinfo2 m = ::mallinfo2();
    used = m.uordblks + m.hblkhd;
  }
  g_used.store(used, std::memory_order_relaxed);
  const std::size_t max = g_maxmemory.load(std::memory_order_relaxed);
  const bool evicting = g_evicting.load(std::memory_order_relaxed);
  if (evicting) {
    const std::uint32_t first = g_first_local.load(std::memory_order_relaxed);
    const std::uint32_t n = g_local_count.load(std::memory_order_relaxed);
    const std::int64_t part = (std::int64_t(used) - std::int64_t(max)) / std::int64_t(n);
    for (std::uint32_t t = first; t < first + n; ++t) over_of(t).store(part, std::memory_order_relaxed);
  }
  g_oom.store(max != 0 && used > max && !evicting, std::memory_order_relaxed);
}

bool set_policy(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kPolicies); ++i)
    if (name == kPolicies[i]) {
      g_policy.store(std::uint8_t(i), std::memory_order_relaxed);
      publish_policy();
      measure();
      return true;
    }
  return false;
}

// CONFIG SET takes effect for the next command, as in Redis.
void set_maxmemory(std::size_t bytes) {
  g_maxmemory.store(bytes, std::memory_order_relaxed);
  if (const int percent = g_reply_percent.load(std::memory_order_relaxed); percent >= 0)
    g_max_reply_memory.store(bytes / 100 * std::size_t(percent), std::memory_order_relaxed);
  publish_policy();
  measure();
}

void set_max_reply_memory(std::size_t bytes, int percent) {
  g_reply_percent.store(percent, std::memory_order_relaxed);
  if (percent >= 0) bytes = g_maxmemory.load(std::memory_order_relaxed) / 100 * std::size_t(percent);
  g_max_reply_memory.store(bytes, std::memory_order_relaxed);
}

const char* policy_name() { return kPolicies[g_policy.load(std::memory_order_relaxed) % std::size(kPolicies)]; }

// Each loop's periodic round (Loop::run): over the bound with an evicting
// policy, its own shard evicts, every 100 ms at most (a local apply, at
// once; not activity for the idle policy, as the expiry sweep). Every 100 ms (10 ms when evicting)
// the host's first thread measures the heap.
void Loop::check_memory(std::chrono::steady_clock::time_point now) {
  const bool evicting = g_evicting.load(std::memory_order_relaxed);
  // At most every 100 ms: a loop without connections goes round far more
  // often than a busy one, and would drain its own shard (fresh keys too)
  // while the writes on others keep the host over.
  if (evicting && now >= next_evict_ && over_of(gossamer::thread_index()).load(std::memory_order_relaxed) > 0) {
    next_evict_ = now + std::chrono::milliseconds(100);
    ++inflight_;
    ++sweeps_;
    shard(gossamer::thread_index()).apply_then([](Shard& s) { return evict_for(s, 0), Count{}; }, [this](Count) { --inflight_; });
  }
  if (local_index_ != 0 || now < next_memory_check_) return;
  g_first_local.store(first_local_, std::memory_order_relaxed);
  g_local_count.store(local_count_, std::memory_order_relaxed);
  next_memory_check_ = now + std::chrono::milliseconds(evicting ? 10 : 100);
  measure();
}

// True if refused: a command that may grow the data while the host is over
// --maxmemory, or any command but EXEC / DISCARD / QUIT inside MULTI then
// (Redis 7.0's processCommand; the refusal fails the MULTI).
bool Loop::oom_refused(Connection& c, const std::string& name) {
  if (!g_oom.load(std::memory_order_relaxed)) return false;
  // EXEC of a MULTI that queued a command that may grow the data counts as
  // such a command, and its refusal discards the transaction (Redis 7.0's
  // rejectCommand -> execCommandAbort).
  if (name == "exec" && c.in_multi) {
    bool grows = false;
    for (const auto& q : c.queued) grows = grows || (!q.empty() && denyoom(resp::lower(q[0])));
    if (!grows) return false;
    c.in_multi = c.multi_error = false;
    c.queued.clear();
    unwatch_all(c);
    Pending& p = c.pending.emplace_back();
    p.resp3 = c.resp3;
    resp::error(p.reply, "EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.");
    return true;
  }
  const bool in_multi = c.in_multi && name != "exec" && name != "discard" && name != "quit" && name != "reset";
  if (!in_multi && !denyoom(name)) return false;
  c.multi_error = c.in_multi;
  Pending& p = c.pending.emplace_back();
  p.resp3 = c.resp3;
  resp::error(p.reply, "OOM command not allowed when used memory > 'maxmemory'.");
  return true;
}

// CONFIG GET's values of the connection-side settings (and an empty
// optional for others): one place for whoever implements CONFIG.
bool connection_config(std::string_view key, std::string& value) {
  if (key == "maxmemory") value = std::to_string(g_maxmemory.load(std::memory_order_relaxed));
  else if (key == "maxmemory-policy") value = policy_name();
  else if (key == "maxclients") value = std::to_string(g_config.maxclients);
  else if (key == "maxmemory-clients") {
    const int percent = g_reply_percent.load(std::memory_order_relaxed);
    value = percent >= 0 ? std::to_string(percent) + "%" : std::to_string(g_max_reply_memory.load(std::memory_order_relaxed));
  } else if (key == "client-query-buffer-limit") value = std::to_string(g_max_query.load(std::memory_order_relaxed));
  else if (key == "client-output-buffer-limit")
    value = "normal 0 0 0 slave 0 0 0 pubsub " + std::to_string(g_config.pubsub_hard_limit) + " 0 0";
  else return false;
  return true;
}

}  // namespace hydra
