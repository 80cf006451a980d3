// FLOCK's two schedulers (papers 002 §3.4), as pure functions over the
// statistics the dataplane collects, so that they can be tested on
// deterministic inputs (issue 7), with hysteresis so that equal load does
// not move connections and threads back and forth (issue 17). Wiring them
// into the connections (declined renewals, activation, thread moves) is
// separate.
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
// its credit renewals since the last interval (at least 1 if it sent
// data), which the dataplane averages over intervals (SmoothedUtilization).
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
//
// Hysteresis (issue 17 item 6): `granted`, when given, is what each sender
// has now. Formula 3.1's shares are rounded one connection at a time (the
// whole parts, then the largest remainders), and a sender's claim on a
// connection it holds counts kIncumbency more: it keeps it until another
// sender's share exceeds its own by that much. Without it, equally busy
// senders (3 of them and a limit of 5: shares of 1.67 each) passed the
// spare connections around at every interval, by whoever reported a little
// more since the last one.
inline constexpr double kIncumbency = 0.5;  // of one connection
std::vector<std::uint32_t> assign_active_connections(const std::vector<SenderLoad>& senders,
                                                     std::uint32_t max_active, std::uint32_t rotation,
                                                     const std::vector<std::uint32_t>* granted = nullptr);

// The QP scheduler's decisions reach the polling cores in phases
// (flock.cpp; issue 17 item 6): each core applies a phase to its own
// connections, and the next phase starts once every core has applied it. From
// `granted` (in force on every core) towards `goal`, the next phase:
// first the revocations (each sender keeps the smaller of the two counts),
// then the grants (`goal`). A sender's active connections are a prefix, so
// two consecutive phases mixed over the cores give each sender the larger
// of its two counts, and one phase is the larger for every sender: the mix
// is never above the larger of the two phases' sums. Returns true when
// *next is `goal` (the last phase).
bool next_activation_phase(const std::vector<std::uint32_t>& granted, const std::vector<std::uint32_t>& goal,
                           std::vector<std::uint32_t>* next);

// U_i averaged over a window of intervals, for the QP scheduler (issue 17
// item 6). One interval's U_i is mostly noise: a sender renews credit every
// C/2 frames, so a 1 ms interval sees no renewal (U_i = 1 for "sent data"),
// one or two. The average starts as the plain mean of the intervals seen
// (a new sender counts at once) and becomes an exponential average over
// `window` intervals. Values are in 1/kScale units; a sender whose average
// fell below half a unit is dormant again (0) and starts over.
class SmoothedUtilization {
 public:
  static constexpr std::uint64_t kScale = 16;
  void add(std::uint64_t raw, std::uint32_t window);
  std::uint64_t value() const { return value_; }

 private:
  double mean_ = 0;
  std::uint32_t n_ = 0;
  std::uint64_t value_ = 0;
};

inline constexpr std::uint64_t kClassRatio = 4;

struct ThreadLoad {
  std::uint32_t median_bytes = 0;  // median request (slot) size in the interval
  std::uint64_t requests = 0;      // slots sent in the interval
  std::uint64_t bytes = 0;         // bytes sent in the interval
};

// The connection (one of `active`) of each thread, in input order; all 0
// when `active` is empty.
//
// Hysteresis (issue 17 item 6): `current`, when given, is each thread's
// connection now, and it is kept when every one of them is active, it
// mixes size classes on no more connections than the new placement would,
// and its busiest connection carries at most kPlacementSlack more bytes
// than the new placement's. Algorithm 1 deals threads in order of their
// counts since the last intervals, so equally busy threads swapped places
// at almost every interval.
inline constexpr double kPlacementSlack = 0.25;
std::vector<std::uint32_t> assign_threads(const std::vector<ThreadLoad>& threads,
                                          const std::vector<std::uint32_t>& active,
                                          const std::vector<std::uint32_t>* current = nullptr);

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
