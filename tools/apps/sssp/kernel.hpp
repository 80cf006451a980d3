// The timed SSSP kernel: delta-stepping in rounds that the partitions
// synchronize among themselves (README.md, "The algorithm"); host 0 only
// starts a run on every partition and waits for them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include <gossamer/gossamer.hpp>

#include "partition.hpp"

namespace sssp {

using gossamer::Latch;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Above this, a destination's updates of one round go as several requests
// (1 MiB each), so that no single slot chain grows without bound. Even: an
// update is two words.
inline constexpr std::size_t kMaxBatch = std::size_t(1) << 17;
static_assert(kMaxBatch % kUpdateWords == 0);

// Runs fn(i) for i in [0, n), each in a fiber of its own on this thread, so
// their blocking delegations are in flight together; returns when all are done.
template <class F>
inline void for_each_concurrently(std::size_t n, F&& fn) {
  std::vector<gossamer::FiberHandle> fibers;
  fibers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) fibers.push_back(gossamer::spawn([&fn, i] { fn(i); }));
  for (auto& f : fibers) f.join();
}

// ---- closures sent to partitions (trivially copyable functors) ----------------

// One piece of a round's batch from one partition to another, with the
// sender's report; applied at once by the receiver (Partition::receive).
struct Deliver {
  std::uint32_t round, piece, pieces;
  Reports report;
  std::uint64_t stamp;  // the sender's critical path when it sent this (Summary::path)
  void operator()(Latch<Partition>& l, std::vector<std::uint64_t> batch) const {
    const double t0 = thread_cpu_s();
    auto p = l.lock();
    const std::uint64_t r0 = p->relaxations();
    p->receive(round, piece, pieces, report, stamp, batch);
    p->add_round_work(round, thread_cpu_s() - t0, p->relaxations() - r0);
  }
};

// A whole run on one partition, in a fiber on its trustee's thread (launch),
// in rounds that the partitions synchronize among themselves: in each, a
// partition does its heavy phase and its light phase, sends every other
// partition its batch (maybe empty) with its report, and waits for theirs.
// Every partition then holds the same reports and takes the same decision
// (README.md, "The algorithm"). Returns the number of rounds.
struct Solve {
  std::uint32_t window = 1;  // light buckets a round processes (Partition::light)
  std::uint32_t operator()(Latch<Partition>& l) const {
    PartitionRef refs[kMaxParts];
    std::uint32_t parts, self;
    {
      auto p = l.lock();
      parts = p->setup().parts;
      self = p->setup().index;
      std::copy_n(p->setup().refs.begin(), parts, refs);
    }
    std::uint32_t g = 0;  // the root is in bucket 0
    for (std::uint32_t round = 0;; ++round) {
      std::vector<std::vector<std::uint64_t>> batches;
      Reports all;
      std::uint64_t stamp;
      {
        // Held only while computing: no blocking call under it, so a batch
        // from another partition always finds it free.
        const double t0 = thread_cpu_s();
        auto p = l.lock();
        const std::uint64_t r0 = p->relaxations();
        p->heavy(g);
        p->light(g, window);
        batches = p->take_updates();
        all = p->end_round();
        p->add_round_work(round, thread_cpu_s() - t0, p->relaxations() - r0);
        stamp = p->clock();
      }
      const Reports mine = all;
      std::uint64_t sent = 0;
      for (std::uint32_t to = 0; to < parts; ++to) {
        if (to == self) continue;
        auto& b = batches[to];
        const auto pieces = std::uint32_t(std::max<std::size_t>(1, (b.size() + kMaxBatch - 1) / kMaxBatch));
        for (std::uint32_t i = 0; i < pieces; ++i) {
          const std::size_t lo = std::size_t(i) * kMaxBatch, hi = std::min(b.size(), lo + kMaxBatch);
          std::vector<std::uint64_t> piece =
              pieces == 1 ? std::move(b)
                          : std::vector<std::uint64_t>(b.begin() + std::ptrdiff_t(lo), b.begin() + std::ptrdiff_t(hi));
          refs[to].apply_with_then(Deliver{round, i, pieces, mine, stamp}, [] {}, std::move(piece));
          ++sent;
        }
      }
      for (;;) {
        {
          auto p = l.lock();
          Reports theirs;
          if (p->take_reports(round, theirs)) {
            all.add(theirs.low, theirs.settled);
            p->count_batches(sent);
            break;
          }
        }
        gossamer::detail::suspend_current();  // the batch that completes the round wakes us
      }
      // Nothing anywhere: done, on every partition in this same round.
      if (all.low == kNoBucket && !all.settled) return round + 1;
      // Otherwise the next round's heavy phase takes the vertices below
      // all.low, and its light phase the window from all.low (README.md).
      g = all.low;
    }
  }
};

using Parts = std::vector<gossamer::Trust<Latch<Partition>>>;

// One root's run: the kernel's time and what it did.
struct Run {
  double time_s = 0;
  std::uint64_t rounds = 0;
  Summary summary;
  // CPU seconds of the partitions' round work (steps and applied batches):
  // summed over them, and summed over the rounds of the busiest partition
  // of each round, the time the run would take with a free CPU per
  // partition and nothing spent waiting on each other.
  double cpu_s = 0, critical_s = 0;
  std::uint64_t critical_relaxations = 0;  // the same for relaxations
  std::uint64_t edges() const { return summary.half_edges / 2; }  // TEPS count: non-loop edges in the component
};

// The timed kernel, from resetting the distances and parents to the end of
// the last round, then the (untimed) counters.
inline Run run_kernel(Parts& parts, std::uint32_t root, std::uint32_t window) {
  const std::size_t nparts = parts.size();
  Run run;
  const auto t0 = Clock::now();
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i].apply([root](Latch<Partition>& l) { l.lock()->start(root); }); });
  std::vector<std::uint32_t> rounds(nparts);
  for_each_concurrently(nparts, [&](std::size_t i) { rounds[i] = parts[i].launch(Solve{window}); });
  run.rounds = rounds[0];  // the same on every partition
  run.time_s = seconds_since(t0);

  std::vector<std::vector<RoundWork>> work(nparts);
  for_each_concurrently(nparts, [&](std::size_t i) {
    work[i] = parts[i].apply([](Latch<Partition>& l) { return l.lock()->round_work(); });
    const Summary s = parts[i].apply([](Latch<Partition>& l) { return l.lock()->summary(); });
    run.summary.reached += s.reached;
    run.summary.half_edges += s.half_edges;
    run.summary.relaxations += s.relaxations;
    run.summary.light_relaxations += s.light_relaxations;
    run.summary.updates_sent += s.updates_sent;
    run.summary.batches_sent += s.batches_sent;
    run.summary.path = std::max(run.summary.path, s.path);
  });
  for (std::size_t r = 0; r < run.rounds; ++r) {
    RoundWork busiest;
    for (const auto& w : work) {
      const RoundWork x = r < w.size() ? w[r] : RoundWork{};
      run.cpu_s += x.cpu_s;
      busiest.cpu_s = std::max(busiest.cpu_s, x.cpu_s);
      busiest.relaxations = std::max(busiest.relaxations, x.relaxations);
    }
    run.critical_s += busiest.cpu_s;
    run.critical_relaxations += busiest.relaxations;
  }
  return run;
}

}  // namespace sssp
