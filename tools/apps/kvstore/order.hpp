// Arrival order across a host's I/O loops (order.cpp): commands whose
// order between connections a client can see take effect in the order their
// bytes reached the host (the kernel's receive time stamps), not the order
// in which the loops happened to read them.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "stats.hpp"  // kMaxThreads

namespace hydra {

// An ordered command of this loop, from its classification until its
// effect is in place (its reply has gone to the output, or, for a
// blocking command, it is registered on every shard of its keys).
struct OrderEntry {
  std::int64_t stamp = 0;        // arrival: CLOCK_REALTIME ns
  std::uint64_t n = 0;           // this loop's count: ties, and Connection::order_id
  std::uint32_t slot = 0, gen = 0;
  std::uint64_t seq = 0;         // its request number, once started
  std::uint64_t block = 0;       // the blocked id of a blocking command that blocked
  std::chrono::steady_clock::time_point since{};  // its first wait
  // kBlock: a blocking command (in g_order_blocking until done); kPush: a
  // command that can serve one; kExec: EXEC. Which wait for which: order.cpp.
  enum Kind : std::uint8_t { kBlock, kPush, kExec, kKinds } kind = kBlock;
  bool started = false;          // executed (or held by a fence after the order let it go)
};

// A loop's own side.
struct ArrivalOrder {
  std::vector<OrderEntry> entries;    // not yet in place, in classification order
  std::vector<std::uint32_t> waiting;  // connections holding an entry not started
  std::int64_t t0 = 0;                // the current poll's start (CLOCK_REALTIME ns)
  std::int64_t frontier = 0;          // last published (the reading part, OrderSlot::frontier)
  std::uint64_t next = 0;             // OrderEntry::n
  std::uint32_t adopted = 0;          // connections adopted this round (g_order_transit)
  std::vector<std::int64_t> seen;     // per loop and kind: the furthest frontier found (they only grow)
  std::uint32_t count[OrderEntry::kKinds] = {};  // entries of each kind
  bool cut = false;                   // this poll left ready input unread
};

// What each loop of this host publishes (by local index), read by the others.
struct alignas(64) OrderSlot {
  // Every byte that reached this loop's readable connections before
  // `frontier` has been read; oldest[k] is the arrival of its oldest
  // ordered command of kind k not yet in effect.
  std::atomic<std::int64_t> frontier{0};
  std::atomic<std::int64_t> oldest[OrderEntry::kKinds] = {INT64_MAX, INT64_MAX, INT64_MAX};
  // Odd while the loop is not reading: between its polls, or napping in
  // one (everything ready before is read; what came since is in its epoll set).
  std::atomic<std::uint32_t> outside{1};
  std::atomic<int> epoll{-1};
};
extern OrderSlot g_order[kMaxThreads];
// Accepted sockets dealt to a loop that has not yet read them; blocking
// commands of this host not yet in place; ordered commands that waited
// past kOrderWait and went ahead anyway (INFO hydra_arrival_order_timeouts).
extern std::atomic<std::uint32_t> g_order_transit;
extern std::atomic<std::uint32_t> g_order_blocking;
extern std::atomic<std::uint64_t> g_order_timeouts;
extern std::atomic<std::uint64_t> g_order_holds;  // ordered commands that had to wait (INFO hydra_arrival_order_holds)

// The keys connections of this host are blocked on, as counts in a table
// by a hash of the key (a key's count above 0 may be another key's: then a
// push is ordered when it need not be). A blocked command holds its marks
// as long as it lives (Loop::Blocked); a push to a key with none serves
// nobody, and needs no order.
constexpr std::size_t kBlockMarks = 4096;
extern std::atomic<std::uint32_t> g_block_marks[kBlockMarks];
std::size_t block_mark(std::string_view key);
class BlockMarks {
 public:
  BlockMarks() = default;
  BlockMarks(const BlockMarks&) = delete;
  BlockMarks& operator=(const BlockMarks&) = delete;
  BlockMarks(BlockMarks&& o) noexcept : marks_(std::move(o.marks_)) { o.marks_.clear(); }
  BlockMarks& operator=(BlockMarks&& o) noexcept {
    if (this != &o) {
      release();
      marks_ = std::move(o.marks_);
      o.marks_.clear();
    }
    return *this;
  }
  ~BlockMarks() { release(); }
  void add(std::string_view key) {
    marks_.push_back(std::uint32_t(block_mark(key)));
    g_block_marks[marks_.back()].fetch_add(1, std::memory_order_relaxed);
  }

 private:
  void release() {
    for (std::uint32_t m : marks_) g_block_marks[m].fetch_sub(1, std::memory_order_relaxed);
    marks_.clear();
  }
  std::vector<std::uint32_t> marks_;
};

// CLOCK_REALTIME in ns: the clock of the kernel's SO_TIMESTAMPNS stamps.
std::int64_t realtime_ns();
// recv() that also returns the kernel's receive time of the data (0 when
// the kernel gave none).
long recv_stamped(int fd, char* buf, std::size_t len, std::int64_t& stamp);

}  // namespace hydra
