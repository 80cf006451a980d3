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
  std::uint32_t round, piece, pieces, low;
  bool settled;
  void operator()(Latch<Partition>& l, std::vector<std::uint64_t> batch) const {
    l.lock()->receive(round, piece, pieces, low, settled, batch);
  }
};

// A whole run on one partition, in a fiber on its trustee's thread (launch),
// in rounds that the partitions synchronize among themselves: in each, a
// partition does its step, sends every other partition its batch (maybe
// empty) with its report, and waits for theirs. Every partition then holds
// the same reports and takes the same decision (README.md, "The
// algorithm"). Returns the number of rounds.
struct Solve {
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
    bool heavy = false;
    for (std::uint32_t round = 0;; ++round) {
      Outgoing out;
      {
        // Held only while computing: no blocking call under it, so a batch
        // from another partition always finds it free.
        auto p = l.lock();
        out = p->step(heavy, g);
      }
      Reports all;
      all.add(out.low, out.settled);
      std::uint64_t sent = 0;
      for (std::uint32_t to = 0; to < parts; ++to) {
        if (to == self) continue;
        auto& b = out.batches[to];
        const auto pieces = std::uint32_t(std::max<std::size_t>(1, (b.size() + kMaxBatch - 1) / kMaxBatch));
        for (std::uint32_t i = 0; i < pieces; ++i) {
          const std::size_t lo = std::size_t(i) * kMaxBatch, hi = std::min(b.size(), lo + kMaxBatch);
          std::vector<std::uint64_t> piece =
              pieces == 1 ? std::move(b)
                          : std::vector<std::uint64_t>(b.begin() + std::ptrdiff_t(lo), b.begin() + std::ptrdiff_t(hi));
          refs[to].apply_with_then(Deliver{round, i, pieces, out.low, out.settled}, [] {}, std::move(piece));
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
      // all.low == g: bucket g was refilled, another light pass. Above g:
      // bucket g is empty everywhere, so the vertices it held get their
      // heavy phase next round, with the next bucket's first light pass
      // (or alone, when no bucket is left). Below g (a heavy arc landed
      // there): a light pass, the heavy phase waiting.
      heavy = all.low > g || all.low == kNoBucket;
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
  std::uint64_t edges() const { return summary.half_edges / 2; }  // TEPS count: non-loop edges in the component
};

// The timed kernel, from resetting the distances and parents to the end of
// the last round, then the (untimed) counters.
inline Run run_kernel(Parts& parts, std::uint32_t root) {
  const std::size_t nparts = parts.size();
  Run run;
  const auto t0 = Clock::now();
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i].apply([root](Latch<Partition>& l) { l.lock()->start(root); }); });
  std::vector<std::uint32_t> rounds(nparts);
  for_each_concurrently(nparts, [&](std::size_t i) { rounds[i] = parts[i].launch(Solve{}); });
  run.rounds = rounds[0];  // the same on every partition
  run.time_s = seconds_since(t0);

  for_each_concurrently(nparts, [&](std::size_t i) {
    const Summary s = parts[i].apply([](Latch<Partition>& l) { return l.lock()->summary(); });
    run.summary.reached += s.reached;
    run.summary.half_edges += s.half_edges;
    run.summary.relaxations += s.relaxations;
    run.summary.updates_sent += s.updates_sent;
    run.summary.batches_sent += s.batches_sent;
  });
  return run;
}

}  // namespace sssp
