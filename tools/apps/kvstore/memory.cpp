// --maxmemory with the noeviction policy: when this host's process holds
// more than --maxmemory bytes of heap, commands that may grow the data are
// refused with Redis 7.0's OOM error until memory is freed (DEL, FLUSHALL,
// expiry). The heap in use is the allocator's own count (mallinfo2: bytes
// in use in every arena, and in mmapped chunks), as Redis's used_memory is
// its allocator's; one loop per host reads it every 100 ms at most and
// publishes a flag the others test. So a burst of writes may overshoot the
// bound by what arrives in that time. Each host of a rack bounds itself.
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

std::atomic<std::uint64_t> g_used{0};

// Redis 7.0's commands with the denyoom flag, of those Hydra has or may get.
bool denyoom(const std::string& n) {
  static const char* const kWrites[] = {
      "set",      "setnx",     "setex",       "psetex",      "append",      "incr",        "decr",     "incrby",
      "decrby",   "incrbyfloat", "mset",      "msetnx",      "getset",      "setrange",    "setbit",   "lpush",
      "rpush",    "lpushx",    "rpushx",      "linsert",     "lset",        "lmove",       "rpoplpush", "sadd",
      "smove",    "sunionstore", "sinterstore", "sdiffstore", "hset",       "hsetnx",      "hmset",    "hincrby",
      "hincrbyfloat", "copy",  "bitop",       "bitfield",    "zadd",        "zincrby",     "pfadd",    "xadd",
      "geoadd",   "restore",   "sort",        "getex"};
  for (const char* w : kWrites)
    if (n == w) return true;
  return false;
}

}  // namespace

std::uint64_t used_memory() { return g_used.load(std::memory_order_relaxed); }

// Every 100 ms on each host's first thread (Loop::run's periodic block).
void Loop::check_memory(std::chrono::steady_clock::time_point now) {
  if (local_index_ != 0 || now < next_memory_check_) return;
  next_memory_check_ = now + std::chrono::milliseconds(100);
  std::uint64_t used;
  if (__sanitizer_get_current_allocated_bytes) {
    used = __sanitizer_get_current_allocated_bytes();
  } else {
    const struct mallinfo2 m = ::mallinfo2();
    used = m.uordblks + m.hblkhd;
  }
  g_used.store(used, std::memory_order_relaxed);
  g_oom.store(g_config.maxmemory != 0 && used > g_config.maxmemory, std::memory_order_relaxed);
}

// True if refused: a command that may grow the data while the host is over
// --maxmemory, or any command but EXEC / DISCARD / QUIT inside MULTI then
// (Redis 7.0's processCommand; the refusal fails the MULTI).
bool Loop::oom_refused(Connection& c, const std::string& name) {
  if (!g_oom.load(std::memory_order_relaxed)) return false;
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
  if (key == "maxmemory") value = std::to_string(g_config.maxmemory);
  else if (key == "maxmemory-policy") value = "noeviction";
  else if (key == "maxclients") value = std::to_string(g_config.maxclients);
  else if (key == "maxmemory-clients") value = std::to_string(g_config.max_reply_memory);
  else if (key == "client-output-buffer-limit")
    value = "normal 0 0 0 slave 0 0 0 pubsub " + std::to_string(g_config.pubsub_hard_limit) + " 0 0";
  else return false;
  return true;
}

}  // namespace hydra
