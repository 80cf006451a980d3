// FLOCK's two schedulers (papers 002 §3.4), as pure functions over the
// statistics the dataplane collects, so that they can be tested on
// deterministic inputs (issue 7). Wiring them into the connections
// (declined renewals, activation, thread moves) is separate.
//
// Receiver side (§3.4.1, formula 3.1): every scheduling interval, each
// sender host i gets AQP_i active connections to us:
//   - functioning (U_i > 0): max_active * U_i / sum(U), at least 1;
//   - dormant (U_i == 0 during the interval): 1;
//   - newcomer (no interval seen yet): the average of the functioning ones;
// never more than the sender has, and never more than max_active in total
// (when there are more senders than max_active, the ones left without a
// connection take turns: `rotation` picks who, interval after interval).
// U_i is the sum of the median coalescing degrees the sender reported in
// its credit renewals since the last interval.
//
// Sender side (§3.4.2, Algorithm 1): threads sorted by median request size,
// then by requests sent, are dealt to the active connections in order, each
// connection taking threads until it holds its share of the bytes. Beyond
// Algorithm 1, which only balances bytes (so a large-request thread joins
// the small ones whenever they carry more bytes in all): the sorted threads
// fall into size classes (a median kClassRatio times the previous thread's
// starts one), each class gets connections of its own while there are
// enough, spare connections go to classes by bytes, and Algorithm 1 runs
// within each class. Threads with large requests end up on other
// connections than threads with small ones (head-of-line blocking, §3.4.2).
#pragma once

#include <cstdint>
#include <vector>

namespace gossamer::dataplane {

struct SenderLoad {
  std::uint32_t connections = 0;  // the sender's connections to us (per_remote_host)
  std::uint64_t utilization = 0;  // U_i: reported coalescing degrees, summed
  bool known = false;             // false: a newcomer, no interval seen yet
};

// Active connections per sender, in input order. The sum is at most
// `max_active`; each entry is at most the sender's `connections`.
std::vector<std::uint32_t> assign_active_connections(const std::vector<SenderLoad>& senders,
                                                     std::uint32_t max_active, std::uint32_t rotation);

inline constexpr std::uint64_t kClassRatio = 4;

struct ThreadLoad {
  std::uint32_t median_bytes = 0;  // median request (slot) size in the interval
  std::uint64_t requests = 0;      // slots sent in the interval
  std::uint64_t bytes = 0;         // bytes sent in the interval
};

// The connection (one of `active`) of each thread, in input order; all 0
// when `active` is empty.
std::vector<std::uint32_t> assign_threads(const std::vector<ThreadLoad>& threads,
                                          const std::vector<std::uint32_t>& active);

// The median of the last kWindow values added (the coalescing degree a
// sender reports with a renewal; a request size for the thread scheduler).
class RunningMedian {
 public:
  static constexpr std::size_t kWindow = 64;
  void add(std::uint32_t v);
  std::uint32_t median() const;  // 0 when empty
  void clear() { n_ = 0; }

 private:
  std::uint32_t values_[kWindow] = {};
  std::size_t n_ = 0, next_ = 0;
};

}  // namespace gossamer::dataplane
