// Keyspace notifications (notify.cpp) and the per-thread mailboxes that
// carry them, and MONITOR's lines (monitor.cpp), between the threads of one
// host.
//
// A shard closure that changes a key calls notify(class, event, key). With
// notify-keyspace-events off (g_notify 0, the default) that is one relaxed
// load and a branch. On, notify_slow builds Redis's two messages
// (__keyspace@0__:<key> <event>, __keyevent@0__:<event> <key>) and, while
// the closure still runs on the shard's trustee (so before its answer, and
// the command's reply, leaves):
//  - hands them to the mailbox of every thread of this host whose loop has
//    a subscriber that could match (a pattern, or a __keyspace@/__keyevent@
//    channel): in the order generated, under the mailbox's lock. So one
//    client's commands, each awaited, give every subscriber of this host
//    their events in command order, whatever shards the keys are on;
//  - keeps them (tl_remote_events) for the thread's loop, which publishes
//    them to the other hosts' subscribers through PUBLISH's own path (the
//    channel's home shard names the threads, then each gets the message):
//    in order per shard, but after the reply may have left.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hydra {

// Redis 7.0's classes (server.h NOTIFY_*), the same bits.
enum NotifyClass : std::uint32_t {
  kNotifyKeyspace = 1u << 0,   // K
  kNotifyKeyevent = 1u << 1,   // E
  kNotifyGeneric = 1u << 2,    // g
  kNotifyString = 1u << 3,     // $
  kNotifyList = 1u << 4,       // l
  kNotifySet = 1u << 5,        // s
  kNotifyHash = 1u << 6,       // h
  kNotifyZset = 1u << 7,       // z
  kNotifyExpired = 1u << 8,    // x
  kNotifyEvicted = 1u << 9,    // e
  kNotifyStream = 1u << 10,    // t
  kNotifyKeyMiss = 1u << 11,   // m (not in A)
  kNotifyModule = 1u << 13,    // d
  kNotifyNew = 1u << 14,       // n (not in A)
  kNotifyAll = kNotifyGeneric | kNotifyString | kNotifyList | kNotifySet | kNotifyHash | kNotifyZset |
               kNotifyExpired | kNotifyEvicted | kNotifyStream | kNotifyModule,
};

// notify-keyspace-events of this host (CONFIG SET sends it to every host).
extern std::atomic<std::uint32_t> g_notify;
// Redis's keyspaceEventsStringToFlags: -1 for a character that is no class.
long notify_flags(std::string_view classes);
// Redis's keyspaceEventsFlagsToString (CONFIG GET).
std::string notify_string(std::uint32_t flags);

[[gnu::cold]] void notify_slow(std::uint32_t flags, const char* event, const std::string& key) noexcept;
// A change of `key` of class `type`, from a shard closure (its trustee's thread).
inline void notify(std::uint32_t type, const char* event, const std::string& key) noexcept {
  const std::uint32_t f = g_notify.load(std::memory_order_relaxed);
  if (f & type) [[unlikely]] notify_slow(f, event, key);
}
// The same where the event depends on the outcome: true if any class is on.
inline bool notifying() noexcept { return g_notify.load(std::memory_order_relaxed) != 0; }

// A MONITOR line, built once and shared by every mailbox and monitor; text
// null: a line of `size` bytes over --pubsub-output-limit, never built (its
// monitors are disconnected, as Redis's output limit would).
struct MonitorLine {
  std::shared_ptr<const std::string> text;
  std::size_t size = 0;
};

// One per runtime thread of this host (by global thread index): what other
// threads hand to its loop. `ready` is tested each round without the lock.
struct alignas(64) Mailbox {
  std::atomic<bool> ready{false};
  std::atomic<std::uint32_t> key_subs{0};   // its loop's patterns and __key...@ channels
  std::atomic<std::uint32_t> monitors{0};   // its loop's MONITOR connections
  std::mutex lock;
  std::vector<std::pair<std::string, std::string>> messages;  // channel, message
  std::vector<MonitorLine> monitor_lines;
};
constexpr std::size_t kMailboxes = 256;  // server.hpp's kMaxThreads
extern std::array<Mailbox, kMailboxes> g_mailboxes;
// MONITOR connections on this host: 0 keeps each command's cost at one load.
extern std::atomic<std::uint32_t> g_monitors;

// Events this thread's shard made for subscribers on other hosts (only on a
// rack of several hosts): published by this thread's loop.
inline thread_local std::vector<std::pair<std::string, std::string>> tl_remote_events;

}  // namespace hydra
