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
#include "trace.hpp"

namespace sssp {

using gossamer::Latch;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Above this, a destination's updates of one chunk or of a round's last
// piece go as several requests (2^16 updates, 768 KiB, each), so that no
// single body grows without bound.
inline constexpr std::size_t kMaxBatch = kUpdateWords << 16;
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

// A piece of one partition's updates for another, sent in round `round`:
// a chunk during the light phase (last = false), or the round's last piece,
// with the sender's report and how many pieces it sent this destination in
// the round, this one included. Applied at once by the receiver
// (Partition::receive), whatever round it is in.
struct Deliver {
  std::uint32_t round, pieces;
  bool last;
  Reports report;
  std::uint64_t stamp;  // the sender's critical path when it sent this (Summary::path)
  std::uint64_t sent_at = 0;  // now_ns() when handed to the runtime (trace.hpp)
  bool behind = false;        // queued behind an unanswered piece to us (trace.hpp)
  void operator()(Latch<Partition>& l, Batch batch) const {
    const double t0 = thread_cpu_s();
    auto p = l.lock();
    thread_tracer().received(last, behind, !p->waiting(), batch.size() * sizeof(std::uint32_t) > kLargeBytes, sent_at, round);
    p->receive(round, last, pieces, report, stamp, batch);
    p->add_round_work(round, thread_cpu_s() - t0, 0);
  }
};

// --chunk's defaults. On one host: at scale 20 on 2 partitions (4 roots),
// 4 Ki 144.7 M relaxations, 16 Ki 137.1 M, 64 Ki 138.1 M; 1 partition
// 135.0 M, and one send at the end 149.5 M. Across hosts half of that
// (2026-11-29): a partition's pass, which hands the other host's pieces to
// it and lets the dataplane sharing its CPU run, comes twice as often, and
// 2 hosts / 1 host went from 0.90x to 0.95x at scale 18, where on one host
// 8 Ki was 0.98x of 16 Ki and at scale 20 about 0.95x with the same 541 M
// relaxations (tools/apps/sssp/SCALING.md, "A CPU per host").
inline constexpr std::uint64_t kChunk = std::uint64_t(1) << 14;
inline constexpr std::uint64_t kChunkRack = std::uint64_t(1) << 13;

// How a run goes; the same on every partition.
struct Tuning {
  std::uint32_t window = 1;  // light buckets a round processes (Partition::light)
  // Relaxations of the light phase between two sends of its updates to
  // the other partitions (README.md, "Chunks"), and of the heavy phase
  // between two yields: kChunk, or kChunkRack across hosts (sssp.cpp).
  std::uint64_t chunk = kChunk;
  std::uint64_t message_cost = kMessageCost;  // Summary::path's price of waiting for a message
};

// A whole run on one partition, in a fiber on its trustee's thread (launch),
// in rounds that the partitions synchronize among themselves: in each, a
// partition does its heavy phase, then its light phase in chunks, sending
// each chunk's updates as it goes and applying the others' between chunks;
// then it sends every other partition its round's last piece (maybe empty)
// with its report, and waits for theirs, relaxing meanwhile what their
// chunks bring (as its next round's work). Every partition then holds the
// same reports and takes the same decision (README.md, "The algorithm").
// Returns the number of rounds.
struct Solve {
  Tuning tuning;
  std::uint32_t operator()(Latch<Partition>& l) const {
    PartitionRef refs[kMaxParts];
    std::uint32_t parts, self;
    Tracer* tr = &thread_tracer();  // this thread's, that is this partition's
    {
      auto p = l.lock();
      parts = p->setup().parts;
      self = p->setup().index;
      std::copy_n(p->setup().refs.begin(), parts, refs);
    }
    tr->resize(parts);
    const std::uint64_t budget = parts > 1 ? tuning.chunk : ~std::uint64_t(0);
    // Pieces sent to each partition in the current round (chunks, then the
    // last piece), and in all.
    std::vector<std::uint32_t> pieces(parts, 0);
    std::uint64_t sent = 0;
    const auto send = [&](std::uint32_t to, Deliver d, Batch b) {
      d.sent_at = now_ns();
      d.behind = tr->sent(to, d.last, d.sent_at, b.size() * sizeof(std::uint32_t));
      refs[to].apply_with_then(
          d, [tr, to, last = d.last, at = d.sent_at] { tr->answered(to, last, at); }, std::move(b));
      ++pieces[to];
      ++sent;
    };
    // Chunks: a destination's updates, in pieces of at most kMaxBatch words.
    const auto send_chunks = [&](std::uint32_t r, std::vector<Batch>& batches, std::uint64_t stamp) {
      for (std::uint32_t to = 0; to < parts; ++to) {
        auto& b = batches[to];
        if (b.size() <= kMaxBatch) {
          if (!b.empty()) send(to, Deliver{r, 0, false, {}, stamp}, std::move(b));
          continue;
        }
        for (std::size_t lo = 0; lo < b.size(); lo += kMaxBatch)
          send(to, Deliver{r, 0, false, {}, stamp},
               Batch(b.begin() + std::ptrdiff_t(lo), b.begin() + std::ptrdiff_t(std::min(b.size(), lo + kMaxBatch))));
      }
    };
    // At most `budget` relaxations of the light phase from bucket g, counted
    // as round r's work, and their updates sent (unless the window is done
    // and `eager` false: the round's last piece takes them); true when the
    // window is empty here. Between two calls, the fiber yields, so that the
    // other partitions' pieces are applied.
    const auto light_chunk = [&](std::uint32_t r, std::uint32_t g, bool eager) {
      std::vector<Batch> batches;
      bool done;
      std::uint64_t stamp;
      {
        // Held only while computing: no blocking call under it, so a piece
        // from another partition always finds it free.
        const double t0 = thread_cpu_s();
        auto p = l.lock();
        const std::uint64_t r0 = p->relaxations();
        done = p->light(g, tuning.window, budget);
        if (!done || eager) batches = p->take_updates();
        p->add_round_work(r, thread_cpu_s() - t0, p->relaxations() - r0);
        stamp = p->clock();
      }
      if (!batches.empty()) send_chunks(r, batches, stamp);
      return done;
    };

    std::uint32_t g = 0;  // the root is in bucket 0
    for (std::uint32_t round = 0;; ++round) {
      const std::uint64_t round_start = now_ns();
      // The heavy phase, in chunks too: a fiber that computes does not
      // let its thread send what it has queued (a round's last pieces wait
      // in the runtime's channel until the thread's loop runs) nor answer
      // the others' pieces. At scale 20 one heavy phase is 14.7 M
      // relaxations a partition; without the yields, the partition that
      // sent the last piece of the round before it kept that piece for the
      // whole phase, and the other started its own after it.
      for (bool done = false; !done;) {
        {
          const double t0 = thread_cpu_s();
          auto p = l.lock();
          const std::uint64_t r0 = p->relaxations();
          done = p->heavy(g, budget);
          p->add_round_work(round, thread_cpu_s() - t0, p->relaxations() - r0);
        }
        if (!done) gossamer::yield();
      }
      while (!light_chunk(round, g, false)) gossamer::yield();
      // The round's last pieces: the heavy phase's updates and the light
      // phase's since its last chunk, with the report.
      Reports mine;
      std::vector<Batch> rest;
      std::uint64_t stamp;
      {
        auto p = l.lock();
        rest = p->take_updates();
        mine = p->end_round();
        stamp = p->clock();
      }
      for (std::uint32_t to = 0; to < parts; ++to) {
        if (to == self) continue;
        auto& b = rest[to];
        if (b.size() > kMaxBatch) {  // all but the last kMaxBatch words go first, as chunks
          std::vector<Batch> head(parts);
          head[to].assign(b.begin(), b.end() - std::ptrdiff_t(kMaxBatch));
          b.erase(b.begin(), b.end() - std::ptrdiff_t(kMaxBatch));
          send_chunks(round, head, stamp);
        }
        send(to, Deliver{round, pieces[to] + 1, true, mine, stamp}, std::move(b));
      }
      std::fill(pieces.begin(), pieces.end(), 0);
      const std::uint64_t handed = now_ns();
      ++tr->t.rounds;
      tr->t.compute_ns += handed - round_start;
      // Wait for the others' last pieces of this round. Their chunks that
      // refill the window meanwhile are relaxed at once, as the next
      // round's work: a report of this round that comes later counts the
      // updates that caused it, so no partition ends the run or moves its
      // heavy phase past them (README.md).
      Reports all = mine;
      for (;;) {
        bool work;
        {
          auto p = l.lock();
          Reports theirs;
          if (p->take_reports(round, theirs)) {
            all.add(theirs.low, theirs.settled);
            const std::uint64_t now = now_ns();
            tr->t.wait_ns += now - handed;
            tr->t.wake_ns += now - std::max(handed, std::min(now, tr->arrived(round)));
            break;
          }
          work = g != kNoBucket && p->window_live(g, tuning.window);
          if (!work) p->wait_here();  // the next non-empty piece, or the one that completes the round, wakes us
        }
        if (!work) {
          gossamer::detail::suspend_current();
          continue;
        }
        const std::uint64_t e0 = now_ns();
        light_chunk(round + 1, g, true);
        tr->t.eager_ns += now_ns() - e0;
        gossamer::yield();
      }
      // Nothing anywhere: done, on every partition in this same round.
      if (all.low == kNoBucket && !all.settled) {
        l.lock()->count_batches(sent);
        return round + 1;
      }
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
  Trace trace;  // summed over the partitions (trace.hpp)
  std::uint64_t edges() const { return summary.half_edges / 2; }  // TEPS count: non-loop edges in the component
};

// The timed kernel, from resetting the distances and parents to the end of
// the last round, then the (untimed) counters.
inline Run run_kernel(Parts& parts, std::uint32_t root, const Tuning& tuning) {
  const std::size_t nparts = parts.size();
  Run run;
  const auto t0 = Clock::now();
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i].apply([root, cost = tuning.message_cost](Latch<Partition>& l) { l.lock()->start(root, cost); }); });
  std::vector<std::uint32_t> rounds(nparts);
  for_each_concurrently(nparts, [&](std::size_t i) { rounds[i] = parts[i].launch(Solve{tuning}); });
  run.rounds = rounds[0];  // the same on every partition
  run.time_s = seconds_since(t0);

  std::vector<std::vector<RoundWork>> work(nparts);
  for_each_concurrently(nparts, [&](std::size_t i) {
    work[i] = parts[i].apply([](Latch<Partition>& l) { return l.lock()->round_work(); });
    run.trace.add(parts[i].apply([](Latch<Partition>&) { return std::exchange(thread_tracer().t, Trace{}); }));
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
