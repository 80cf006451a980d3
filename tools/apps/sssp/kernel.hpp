// The timed SSSP kernel: delta-stepping in rounds driven by host 0's main
// fiber (README.md, "The algorithm"), and the closures it sends to the
// partitions.
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

struct ApplyBatch {
  std::uint32_t operator()(Latch<Partition>& l, std::vector<std::uint64_t> batch) const {
    return l.lock()->apply_updates(batch);
  }
};

// One round on one partition, in a fiber on its trustee's thread (launch).
// Returns the lowest bucket with work left on this partition or on any
// partition it sent updates to.
struct Round {
  Phase phase;
  std::uint32_t k;

  std::uint32_t operator()(Latch<Partition>& l) const {
    Outgoing out;
    PartitionRef refs[kMaxParts];
    std::uint32_t parts;
    {
      // Held only while computing: the batches below block, and a batch
      // from another partition must find the latch free.
      auto p = l.lock();
      out = p->relax(phase, k);
      parts = p->setup().parts;
      std::copy_n(p->setup().refs.begin(), parts, refs);
    }
    struct Send {
      std::uint32_t to;
      std::vector<std::uint64_t> updates;
    };
    std::vector<Send> sends;
    for (std::uint32_t to = 0; to < parts; ++to) {
      auto& b = out.batches[to];
      if (b.size() <= kMaxBatch) {
        if (!b.empty()) sends.push_back({to, std::move(b)});
        continue;
      }
      for (std::size_t i = 0; i < b.size(); i += kMaxBatch)
        sends.push_back({to, std::vector<std::uint64_t>(b.begin() + std::ptrdiff_t(i),
                                                        b.begin() + std::ptrdiff_t(std::min(b.size(), i + kMaxBatch)))});
    }
    std::vector<std::uint32_t> lowest(sends.size(), kNoBucket);
    for_each_concurrently(sends.size(), [&](std::size_t s) {
      lowest[s] = refs[sends[s].to].apply_with(ApplyBatch{}, std::move(sends[s].updates));
    });
    std::uint32_t low = out.local_min;
    for (std::uint32_t b : lowest) low = std::min(low, b);
    l.lock()->count_batches(sends.size());
    return low;
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
inline Run run_kernel(Parts& parts, std::uint32_t root, float delta) {
  const std::size_t nparts = parts.size();
  Run run;
  const auto t0 = Clock::now();
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i].apply([root](Latch<Partition>& l) { l.lock()->start(root); }); });
  // Weights are below 1: with delta >= 1 every edge is light and the heavy
  // rounds would have nothing to do.
  const bool has_heavy = delta < 1.0f;
  std::uint32_t k = 0;
  auto round = [&](Phase phase) {
    std::vector<std::uint32_t> low(nparts, kNoBucket);
    for_each_concurrently(nparts, [&](std::size_t i) { low[i] = parts[i].launch(Round{phase, k}); });
    ++run.rounds;
    return *std::min_element(low.begin(), low.end());
  };
  for (;;) {
    std::uint32_t next = round(Phase::light);
    if (next == k) continue;  // bucket k was refilled (by another partition)
    if (has_heavy) {
      next = round(Phase::heavy);
      if (next == k) continue;
    }
    if (next == kNoBucket) break;
    k = next;
  }
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
