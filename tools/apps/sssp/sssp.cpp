// sssp: single-source shortest paths on a Graph500 Kronecker graph, with the
// vertices partitioned over every trustee of the rack (see README.md).
//
// Host 0's main fiber drives delta-stepping in rounds. A round launches one
// fiber on every partition's trustee; it relaxes that partition's share of
// the current bucket, applies improvements of its own vertices at once, and
// sends every other partition at most one apply_with per round carrying all
// of its (vertex, distance) updates, combined per vertex. The round ends when
// every batch has been applied: the launches return the lowest bucket still
// holding work, which decides the next round.
//
//   sssp [--scale 14] [--edgefactor 16] [--seed 1] [--root V] [--delta 0.05]
//        [--threads 4] [--validate | --no-validate]
// prints one line on host 0 (README.md lists the fields):
//   sssp scale=14 edgefactor=16 hosts=2 threads=4 time_s=0.123 teps=1.2e+06 validated=yes root=...
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <gossamer/gossamer.hpp>

#include "kronecker.hpp"
#include "partition.hpp"
#include "reference.hpp"

namespace sssp {
namespace {

using gossamer::Latch;
using Clock = std::chrono::steady_clock;

// Above this, a destination's updates of one round go as several requests
// (1 MiB each), so that no single slot chain grows without bound.
constexpr std::size_t kMaxBatch = std::size_t(1) << 17;

struct Params {
  GraphSpec spec;
  std::optional<std::uint64_t> root;
  std::optional<bool> validate;  // unset: validate when scale <= 14
  bool corrupt_for_test = false;
  float delta = 0.05f;  // ~1.6 / average degree (32): near-minimal relaxations, ~90 rounds at scale 16
  std::size_t threads = 4;
  gossamer::Polling polling = gossamer::Polling::adaptive;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn(i) for i in [0, n), each in a fiber of its own on this thread, so
// their blocking delegations are in flight together; returns when all are done.
template <class F>
void for_each_concurrently(std::size_t n, F&& fn) {
  std::vector<gossamer::FiberHandle> fibers;
  fibers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) fibers.push_back(gossamer::spawn([&fn, i] { fn(i); }));
  for (auto& f : fibers) f.join();
}

// ---- closures sent to partitions (trivially copyable functors) ----------------

struct Build {
  std::uint64_t operator()(Latch<Partition>& l, Setup s) const {
    auto p = l.lock();
    p->build(s);
    return p->arcs();
  }
};

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

// ---- the driver (host 0's main fiber) -----------------------------------------

int drive(const Params& prm) {
  const std::size_t nparts = gossamer::thread_count();
  const GraphSpec& spec = prm.spec;
  const std::uint64_t n = spec.vertices();
  if (nparts > kMaxParts) {
    std::fprintf(stderr, "sssp: %zu threads; at most %zu partitions are supported\n", nparts, kMaxParts);
    return 2;
  }
  if (prm.root && *prm.root >= n) {
    std::fprintf(stderr, "sssp: --root %llu is not a vertex (the graph has %llu)\n",
                 (unsigned long long)*prm.root, (unsigned long long)n);
    return 2;
  }

  // One empty partition per trustee, then every trustee builds its own from
  // the seed, all at once.
  const auto t_build = Clock::now();
  std::vector<gossamer::Trust<Latch<Partition>>> parts(nparts);
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i] = gossamer::trustee(i).entrust(Latch<Partition>{}); });
  Setup setup;
  setup.spec = spec;
  setup.parts = std::uint32_t(nparts);
  setup.delta = prm.delta;
  for (std::size_t i = 0; i < nparts; ++i) setup.refs[i] = parts[i].ref();
  std::uint64_t arcs = 0;
  for_each_concurrently(nparts, [&](std::size_t i) {
    Setup s = setup;
    s.index = std::uint32_t(i);
    arcs += parts[i].apply_with(Build{}, s);
  });
  const double build_s = seconds_since(t_build);

  // The root: given, or the first vertex of the seed's root stream with an
  // edge that is not a self-loop (as Graph500 picks its search keys).
  std::uint32_t root = 0;
  if (prm.root) {
    root = std::uint32_t(*prm.root);
  } else {
    const std::uint64_t key = stream_key(spec.seed, Stream::roots);
    bool found = false;
    for (std::uint64_t attempt = 0; attempt < 100000 && !found; ++attempt) {
      const auto v = std::uint32_t(uniform_below(draw(key, attempt), n));
      found = parts[v % nparts].apply([v](Latch<Partition>& l) { return l.lock()->degree(v); }) > 0;
      if (found) root = v;
    }
    if (!found) {
      std::fprintf(stderr, "sssp: found no vertex with an edge to start from\n");
      return 2;
    }
  }

  // ---- the timed kernel: delta-stepping -------------------------------------
  const auto t0 = Clock::now();
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i].apply([root](Latch<Partition>& l) { l.lock()->start(root); }); });
  // Weights are below 1: with delta >= 1 every edge is light and the heavy
  // rounds would have nothing to do.
  const bool has_heavy = prm.delta < 1.0f;
  std::uint32_t k = 0;
  std::uint64_t rounds = 0;
  auto round = [&](Phase phase) {
    std::vector<std::uint32_t> low(nparts, kNoBucket);
    for_each_concurrently(nparts, [&](std::size_t i) { low[i] = parts[i].launch(Round{phase, k}); });
    ++rounds;
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
  const double time_s = seconds_since(t0);

  Summary total;
  for_each_concurrently(nparts, [&](std::size_t i) {
    Summary s = parts[i].apply([](Latch<Partition>& l) { return l.lock()->summary(); });
    total.reached += s.reached;
    total.half_edges += s.half_edges;
    total.relaxations += s.relaxations;
    total.updates_sent += s.updates_sent;
    total.batches_sent += s.batches_sent;
  });
  const std::uint64_t edges = total.half_edges / 2;  // input edges in the root's component
  const double teps = time_s > 0 ? double(edges) / time_s : 0.0;

  // ---- validation against sequential Dijkstra ------------------------------------
  const bool validate = prm.validate.value_or(spec.scale <= 14) || prm.corrupt_for_test;
  const char* verdict = "skipped";
  std::string mismatch;
  if (validate) {
    std::vector<float> dist(n, kInf);
    for_each_concurrently(nparts, [&](std::size_t i) {
      std::vector<float> mine = parts[i].apply([](Latch<Partition>& l) { return l.lock()->distances(); });
      for (std::size_t v = 0; v < mine.size(); ++v) dist[v * nparts + i] = mine[v];
    });
    if (prm.corrupt_for_test) {
      // A wrong answer the check must catch: a vertex other than the root
      // a little farther than computed, or reached when it was not.
      const std::uint64_t v = (root + n / 2) % n;
      dist[v] = dist[v] == kInf ? 0.0f : dist[v] + 0x1p-10f;
    }
    const std::vector<float> ref = dijkstra(build_reference_csr(spec), root);
    verdict = "yes";
    for (std::uint64_t v = 0; v < n; ++v)
      if (std::bit_cast<std::uint32_t>(dist[v]) != std::bit_cast<std::uint32_t>(ref[v])) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "vertex %llu: distance %.9g, sequential Dijkstra %.9g",
                      (unsigned long long)v, double(dist[v]), double(ref[v]));
        mismatch = buf;
        verdict = "no";
        break;
      }
  }

  std::printf("sssp scale=%u edgefactor=%u hosts=%zu threads=%zu time_s=%.6f teps=%.4g validated=%s "
              "root=%u delta=%g rounds=%llu reached=%llu edges=%llu relaxations=%llu updates=%llu "
              "batches=%llu build_s=%.3f arcs=%llu\n",
              spec.scale, spec.edgefactor, gossamer::host_count(), nparts, time_s, teps, verdict, root,
              double(prm.delta), (unsigned long long)rounds, (unsigned long long)total.reached,
              (unsigned long long)edges, (unsigned long long)total.relaxations,
              (unsigned long long)total.updates_sent, (unsigned long long)total.batches_sent, build_s,
              (unsigned long long)arcs);
  std::fflush(stdout);
  if (!mismatch.empty()) {
    std::fprintf(stderr, "sssp: validation FAILED at the first differing %s\n", mismatch.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace sssp

int main(int argc, char** argv) {
  CLI::App app{"sssp: single-source shortest paths on a Graph500 Kronecker graph, partitioned over "
               "the trustees of the rack (run on every host with the same arguments)"};
  sssp::Params p;
  std::uint64_t root = 0;
  std::string polling = "adaptive";
  app.add_option("--scale", p.spec.scale, "log2 of the number of vertices")->check(CLI::Range(1, 30));
  app.add_option("--edgefactor", p.spec.edgefactor, "edges per vertex")->check(CLI::Range(1, 1024));
  app.add_option("--seed", p.spec.seed, "generates the graph (the same on every host) and the default root");
  auto* root_opt = app.add_option("--root", root, "source vertex (default: from the seed, with an edge)");
  app.add_option("--delta", p.delta, "delta-stepping bucket width (>= 1: Bellman-Ford-like rounds)")
      ->check(CLI::Range(0.001, 1e9));
  app.add_option("--threads", p.threads, "runtime threads in the whole rack, one partition each")
      ->check(CLI::Range(1, 4096));
  app.add_flag_callback("--validate", [&p] { p.validate = true; }, "check against sequential Dijkstra on host 0");
  app.add_flag_callback("--no-validate", [&p] { p.validate = false; }, "skip the check (default above scale 14)");
  app.add_option("--polling", polling, "busy | adaptive")->check(CLI::IsMember({"busy", "adaptive"}));
  // For the tests: spoil one distance before validation, which must then fail.
  app.add_flag("--corrupt-for-test", p.corrupt_for_test)->group("");
  CLI11_PARSE(app, argc, argv);
  if (root_opt->count()) p.root = root;
  p.polling = polling == "busy" ? gossamer::Polling::busy : gossamer::Polling::adaptive;

  gossamer::Options o;
  o.threads = p.threads;
  o.polling = p.polling;
  // main runs on host 0 only; the other hosts' instances serve their
  // trustees until the rack is quiet, then return 0.
  return gossamer::run(o, [p]() -> int { return sssp::drive(p); });
}
