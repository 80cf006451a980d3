// Where a partition's rounds spend their wall-clock time (`--trace`;
// SCALING.md, "Where a round goes across hosts"). A few clock reads per
// piece and per round, always on; printed only with --trace.
//
// CLOCK_MONOTONIC is one clock for every process of a machine, so on a
// rack in a box a piece's latency is its arrival at the receiver (when its
// Deliver runs there) minus its sender's stamp. Across real hosts only the
// per-partition sums (compute, wait, wake, behind) mean something.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

namespace sssp {

// A body above this crosses hosts over TCP by default
// (controlplane.large_request_threshold_bytes, 256 KiB since 2026-11-29;
// 4096 before, in SCALING.md's traces): the trace's "large".
inline constexpr std::size_t kLargeBytes = 262144;

inline std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000u + std::uint64_t(ts.tv_nsec);
}

// Counters of one partition (or summed over partitions); trivially
// copyable, so it travels back to host 0 as bytes.
struct Trace {
  std::uint64_t rounds = 0;
  std::uint64_t compute_ns = 0;  // round start (the last round complete) to its last pieces handed to the runtime
  std::uint64_t wait_ns = 0;     // last pieces handed to the round's completion (the others' last pieces taken)
  std::uint64_t eager_ns = 0;    // of wait_ns: relaxing what the others' chunks brought
  std::uint64_t wake_ns = 0;     // of wait_ns: from the arrival of the round's last piece to the fiber resuming
  // Sender side. A last piece is "behind" when an earlier piece to the same
  // partition was still unanswered: the runtime keeps one batch in flight
  // per channel, so it is published only when that response is back.
  std::uint64_t last_sent = 0, last_behind = 0;
  std::uint64_t behind_chunk = 0;  // of last_behind: the latest earlier piece was a chunk (else the last round's last piece)
  std::uint64_t behind_ns = 0;  // behind ones: handed to the runtime until the earlier piece's response came
  std::uint64_t chunks_sent = 0;
  std::uint64_t chunk_bytes = 0, last_bytes = 0;  // the bodies of the chunks and last pieces sent
  std::uint64_t rtt_last_ns = 0, rtt_chunk_ns = 0;  // handed to the runtime until the response came
  std::uint64_t rtt_last_n = 0, rtt_chunk_n = 0;    // the responses those sum (some come after the run's trace)
  // Receiver side: handed to the runtime by the sender until applied here,
  // last pieces by [behind at the sender][above kLargeBytes: over TCP
  // across hosts, by default], and how many found the receiver busy (not waiting).
  std::uint64_t last_n[2][2] = {}, last_ns[2][2] = {}, last_busy = 0;
  std::uint64_t chunk_n[2] = {}, chunk_ns[2] = {};  // by [receiver busy]

  void add(const Trace& o) {
    rounds += o.rounds, compute_ns += o.compute_ns, wait_ns += o.wait_ns, eager_ns += o.eager_ns;
    wake_ns += o.wake_ns, last_sent += o.last_sent, last_behind += o.last_behind, behind_ns += o.behind_ns;
    behind_chunk += o.behind_chunk, last_busy += o.last_busy;
    chunks_sent += o.chunks_sent, chunk_bytes += o.chunk_bytes, last_bytes += o.last_bytes;
    rtt_last_ns += o.rtt_last_ns, rtt_chunk_ns += o.rtt_chunk_ns;
    rtt_last_n += o.rtt_last_n, rtt_chunk_n += o.rtt_chunk_n;
    for (int i = 0; i < 2; ++i) {
      chunk_n[i] += o.chunk_n[i], chunk_ns[i] += o.chunk_ns[i];
      for (int j = 0; j < 2; ++j) last_n[i][j] += o.last_n[i][j], last_ns[i][j] += o.last_ns[i][j];
    }
  }
};

// A partition's trace and what it needs between events: one per thread
// (thread_tracer()), since a partition's round fiber, the Delivers it
// receives and the completions of the pieces it sent all run on its
// trustee's thread, and no thread holds two partitions. A completion that
// comes late finds it still there.
class Tracer {
 public:
  Trace t;

  // Before a run: the channels' state carries over from the last run (its
  // last pieces may still be out), as it does in the runtime.
  void resize(std::uint32_t parts) {
    if (unanswered_.size() == parts) return;
    unanswered_.assign(parts, 0);
    behind_since_.assign(parts, 0);
    prev_last_.assign(parts, 0);
  }
  // A piece of `bytes` handed to the runtime for `to`; returns whether it is behind.
  bool sent(std::uint32_t to, bool last, std::uint64_t at, std::size_t bytes) {
    const bool behind = unanswered_[to] > 0;
    ++unanswered_[to];
    (last ? t.last_bytes : t.chunk_bytes) += bytes;
    if (last) {
      ++t.last_sent;
      if (behind) ++t.last_behind, t.behind_chunk += !prev_last_[to], behind_since_[to] = at;
    } else {
      ++t.chunks_sent;
    }
    prev_last_[to] = last;
    return behind;
  }
  // The response to a piece sent at `at` (responses come in order per channel).
  void answered(std::uint32_t to, bool last, std::uint64_t at) {
    const std::uint64_t now = now_ns();
    if (unanswered_[to]) --unanswered_[to];
    (last ? t.rtt_last_ns : t.rtt_chunk_ns) += now - at;
    ++(last ? t.rtt_last_n : t.rtt_chunk_n);
    if (behind_since_[to] && at < behind_since_[to]) {  // the piece the behind one waited for
      t.behind_ns += now - behind_since_[to];
      behind_since_[to] = 0;
    }
  }
  void received(bool last, bool behind, bool busy, bool large, std::uint64_t sent_at, std::uint32_t round) {
    const std::uint64_t now = now_ns();
    const std::uint64_t lat = now > sent_at ? now - sent_at : 0;
    if (last) {
      ++t.last_n[behind][large], t.last_ns[behind][large] += lat, t.last_busy += busy;
      arrived_[round % 4] = now;
    } else {
      ++t.chunk_n[busy], t.chunk_ns[busy] += lat;
    }
  }
  std::uint64_t arrived(std::uint32_t round) const { return arrived_[round % 4]; }

 private:
  std::vector<std::uint32_t> unanswered_;  // pieces sent to each partition, not answered yet
  std::vector<std::uint64_t> behind_since_;  // a behind last piece's hand-over, 0: none
  std::vector<std::uint8_t> prev_last_;      // the latest piece sent to each partition was a last piece
  std::uint64_t arrived_[4] = {};            // by round mod 4: the latest last piece's arrival
};

inline Tracer& thread_tracer() {
  thread_local Tracer tracer;
  return tracer;
}

// One line on stdout, in µs: per partition and round (compute, wait and
// its eager work and wake-up), per piece (latency from the sender's hand-
// over to the receiver's apply, by [behind][large]; round trips;
// behind: queued behind an unanswered piece until its response).
inline void print_trace(const Trace& t) {
  const auto per = [](std::uint64_t ns, std::uint64_t n) { return n ? double(ns) / double(n) / 1e3 : 0.0; };
  std::printf("trace rounds=%llu compute_us=%.1f wait_us=%.1f eager_us=%.1f wake_us=%.1f last=%llu behind=%llu "
              "behind_chunk=%llu behind_us=%.1f lat_last_us=%.1f/%.1f/%.1f/%.1f (n %llu/%llu/%llu/%llu: ahead small/ahead large/behind "
              "small/behind large; %llu busy) chunks=%llu lat_chunk_us=%.1f/%.1f (n %llu/%llu: idle/busy) rtt_last_us=%.1f "
              "rtt_chunk_us=%.1f chunk_kib=%.1f last_kib=%.1f\n",
              (unsigned long long)t.rounds, per(t.compute_ns, t.rounds), per(t.wait_ns, t.rounds),
              per(t.eager_ns, t.rounds), per(t.wake_ns, t.rounds), (unsigned long long)t.last_sent,
              (unsigned long long)t.last_behind, (unsigned long long)t.behind_chunk, per(t.behind_ns, t.last_behind), per(t.last_ns[0][0], t.last_n[0][0]),
              per(t.last_ns[0][1], t.last_n[0][1]), per(t.last_ns[1][0], t.last_n[1][0]),
              per(t.last_ns[1][1], t.last_n[1][1]), (unsigned long long)t.last_n[0][0],
              (unsigned long long)t.last_n[0][1], (unsigned long long)t.last_n[1][0],
              (unsigned long long)t.last_n[1][1], (unsigned long long)t.last_busy, (unsigned long long)t.chunks_sent, per(t.chunk_ns[0], t.chunk_n[0]),
              per(t.chunk_ns[1], t.chunk_n[1]), (unsigned long long)t.chunk_n[0], (unsigned long long)t.chunk_n[1],
              per(t.rtt_last_ns, t.rtt_last_n), per(t.rtt_chunk_ns, t.rtt_chunk_n),
              per(t.chunk_bytes, t.chunks_sent) * 1e3 / 1024, per(t.last_bytes, t.last_sent) * 1e3 / 1024);
}

}  // namespace sssp
