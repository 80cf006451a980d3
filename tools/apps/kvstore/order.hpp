// Arrival order across a host's I/O loops (order.cpp): commands whose
// order between connections a client can see take effect in the order their
// bytes reached the host (the kernel's receive time stamps), not the order
// in which the loops happened to read them.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
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
  std::chrono::steady_clock::time_point since{};
  bool started = false;          // executed (or held by a fence after the order let it go)
  bool blocking = false;         // in g_order_blocking until done
};

// A loop's own side.
struct ArrivalOrder {
  std::vector<OrderEntry> entries;    // not yet in place, in classification order
  std::vector<std::uint32_t> waiting;  // connections holding an entry not started
  std::int64_t t0 = 0;                // the current poll's start (CLOCK_REALTIME ns)
  std::int64_t frontier = 0;          // last published
  std::uint64_t next = 0;             // OrderEntry::n
  std::uint32_t adopted = 0;          // connections adopted this round (g_order_transit)
  bool cut = false;                   // this poll left ready input unread
};

// What each loop of this host publishes (by local index), read by the others.
struct alignas(64) OrderSlot {
  // Every byte that reached this loop's readable connections before
  // `frontier` has been read, and every ordered command among them has
  // taken effect; `oldest` is the arrival of the oldest ordered command of
  // this loop not yet in place (frontier <= oldest).
  std::atomic<std::int64_t> frontier{0};
  std::atomic<std::int64_t> oldest{INT64_MAX};
  std::atomic<std::uint32_t> nap_seq{0};  // odd while in a nap's epoll_wait
  std::atomic<int> epoll{-1};
};
extern OrderSlot g_order[kMaxThreads];
// Accepted sockets dealt to a loop that has not yet read them; blocking
// commands of this host not yet in place; ordered commands that waited
// past kOrderWait and went ahead anyway (INFO hydra_arrival_order_timeouts).
extern std::atomic<std::uint32_t> g_order_transit;
extern std::atomic<std::uint32_t> g_order_blocking;
extern std::atomic<std::uint64_t> g_order_timeouts;

// CLOCK_REALTIME in ns: the clock of the kernel's SO_TIMESTAMPNS stamps.
std::int64_t realtime_ns();
// recv() that also returns the kernel's receive time of the data (0 when
// the kernel gave none).
long recv_stamped(int fd, char* buf, std::size_t len, std::int64_t& stamp);

}  // namespace hydra
