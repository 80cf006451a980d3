// Per-host counters and settings the loops of one host share (server.hpp
// includes it; split from it to keep it short).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hydra {

constexpr std::size_t kMaxThreads = 256;  // the rack's threads: one shard each

// Per-host counters for INFO (relaxed atomics: the loops of one host's
// threads share them, and only INFO reads them).
struct HostStats {
  std::atomic<std::uint64_t> connections_received{0};
  std::atomic<std::int64_t> connected_clients{0};
  std::atomic<std::uint64_t> rejected_connections{0};
  std::atomic<std::uint64_t> protocol_errors{0};
  std::atomic<std::uint64_t> next_client_id{1};  // HELLO's id
  std::atomic<std::uint64_t> client_output_kills{0};  // closed over --pubsub-output-limit or --max-reply-memory
  std::atomic<std::int64_t> blocked_clients{0};       // waiting in BLPOP... (blocking.cpp)
};
extern HostStats g_stats;
// memory.cpp: this host over --maxmemory (tested before each command), the
// heap in use, and CONFIG GET's values of the connection-side settings.
extern std::atomic<bool> g_oom;
extern std::atomic<std::size_t> g_maxmemory;  // --maxmemory, CONFIG SET maxmemory
// --max-query-buffer and --max-reply-memory as they run: CONFIG SET
// client-query-buffer-limit and maxmemory-clients change them.
extern std::atomic<std::size_t> g_max_query;
extern std::atomic<std::size_t> g_max_reply_memory;
// maxmemory-clients in bytes, or (percent >= 0) as that share of maxmemory,
// followed when maxmemory changes, as Redis's.
void set_max_reply_memory(std::size_t bytes, int percent);
std::uint64_t used_memory();
bool set_policy(std::string_view name);        // false: not a policy Hydra has
void set_maxmemory(std::size_t bytes);
const char* policy_name();
bool connection_config(std::string_view key, std::string& value);
extern const std::chrono::steady_clock::time_point g_started;

// Commands executed by each of this host's threads: written by that
// thread's loop only (a store, no read-modify-write on the hot path).
struct alignas(64) ThreadCounter {
  std::atomic<std::uint64_t> value{0};
};
extern std::array<ThreadCounter, kMaxThreads> g_commands;
// INFO commandstats: each command's calls and rejected calls (refused
// before it ran: NOAUTH, OOM, not allowed while subscribed), counted by
// each of this host's threads for its own connections (written by that
// thread only), by command_index.
constexpr std::size_t kMaxCommands = 256;
struct CommandCounts {
  std::array<std::atomic<std::uint64_t>, kMaxCommands> calls, rejected;
};
extern std::array<CommandCounts, kMaxThreads> g_command_counts;
inline void count_command(std::array<std::atomic<std::uint64_t>, kMaxCommands>& counts, int cmd) {
  if (cmd < 0) return;
  auto& n = counts[std::size_t(cmd)];
  n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
// Reply bytes owed to each of this host's threads' connections (Loop::bound_replies).
extern std::array<ThreadCounter, kMaxThreads> g_owed;

}  // namespace hydra
