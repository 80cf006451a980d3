// sssp: the Graph500 SSSP benchmark on a Kronecker graph, with the vertices
// partitioned over every trustee of the rack (see README.md).
//
// As the Graph500 reference does: build the graph, pick 64 roots with an
// edge, run the kernel once untimed, then for each root run the timed
// kernel (distance and parent of every vertex) and validate its result;
// print the reference's statistics block. The kernel is delta-stepping in
// rounds that the partitions synchronize among themselves (kernel.hpp).
//
//   sssp [--scale 14] [--edgefactor 16] [--seed 1] [--roots 64 | --root V]
//        [--delta 0.05] [--window 1] [--chunk 16384 | 8192] [--message-cost 10000]
//        [--threads 4] [--skip-validation]
// prints on host 0 one summary line (README.md lists the fields), then the
// block:
//   sssp scale=14 edgefactor=16 hosts=2 threads=4 roots=64 time_s=... teps=... validated=yes ...
//   SCALE:                          14
//   ...
//   sssp harmonic_mean_TEPS:     !  1.2e+07
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <gossamer/gossamer.hpp>

#include "construct.hpp"
#include "kernel.hpp"
#include "kronecker.hpp"
#include "partition.hpp"
#include "stats.hpp"
#include "validate.hpp"

namespace sssp {
namespace {

// A wrong answer the validator must catch (tests only).
enum class Corrupt { none, distance, parent };

struct Params {
  GraphSpec spec;
  std::optional<std::uint64_t> root;  // one given root instead of the sampled ones
  std::size_t roots = 64;             // the reference's NBFS
  bool validate = true;
  Corrupt corrupt = Corrupt::none;
  float delta = 0;  // 0: kDelta (below)
  std::size_t threads = 4;
  std::uint64_t chunk = 0;  // light relaxations between sends; 0: kChunk or kChunkRack (kernel.hpp)
  std::uint64_t message_cost = kMessageCost;  // path='s price of a message, in relaxations
  std::uint32_t window = 0;  // light buckets per round; 0: kWindow (below)
  gossamer::Polling polling = gossamer::Polling::adaptive;
  bool trace = false;  // print where the rounds' time went (trace.hpp)
};

// The defaults of --delta and --window, on one host and on a rack alike.
// Δ = 0.05 is ~1.6 / the average degree (32): near-minimal relaxations.
// Across hosts, where a round waits for a piece through both dataplanes
// (about 300 µs on this VM against 3 µs between two threads), Δ = 0.1 with
// a window of 2 halves the rounds, but the chunks' later arrival there
// costs 11 % more relaxations and 24 % more on the busier partition, and
// it was no faster (SCALING.md, "Across hosts").
inline constexpr float kDelta = 0.05f;
inline constexpr std::uint32_t kWindow = 1;

// ---- roots, results on host 0, spoiled results for the tests -------------------

// The roots as the reference's main.c picks them: for counter = 0, 2, 4, ...
// v = floor((u0 + u1) * n) mod n from two uniforms of the seed's root stream;
// a vertex already chosen or without an edge (self-loops are not edges here)
// is passed over, and the search gives up after 2n draws (fewer roots).
std::vector<std::uint32_t> sample_roots(Parts& parts, const GraphSpec& spec, std::size_t count) {
  const std::uint64_t n = spec.vertices(), key = stream_key(spec.seed, Stream::roots);
  const auto uniform = [key](std::uint64_t c) { return double(draw(key, c) >> 11) * 0x1p-53; };
  std::vector<std::uint32_t> roots;
  for (std::uint64_t counter = 0; roots.size() < count && counter < 2 * n; counter += 2) {
    const auto v = std::uint32_t(std::uint64_t((uniform(counter) + uniform(counter + 1)) * double(n)) % n);
    if (std::find(roots.begin(), roots.end(), v) != roots.end()) continue;
    if (parts[v % parts.size()].apply([v](Latch<Partition>& l) { return l.lock()->degree(v); }) > 0)
      roots.push_back(v);
  }
  return roots;
}

// The whole result on host 0, in the reference's convention (unreached:
// parent -1, distance -1).
struct Result {
  std::vector<float> dist;
  std::vector<std::int64_t> parent;
};
Result gather(Parts& parts, std::uint64_t n) {
  const std::size_t nparts = parts.size();
  Result r{std::vector<float>(n, kUnreached), std::vector<std::int64_t>(n, kNoParent)};
  for_each_concurrently(nparts, [&](std::size_t i) {
    auto [d, p] = parts[i].apply([](Latch<Partition>& l) {
      auto q = l.lock();
      return std::make_pair(q->distances(), q->parents());
    });
    for (std::size_t v = 0; v < d.size() && v * nparts + i < n; ++v) {
      if (p[v] == kNone) continue;
      r.dist[v * nparts + i] = d[v];
      r.parent[v * nparts + i] = p[v];
    }
  });
  return r;
}

// Spoils the result of one vertex other than the root that the run reached.
void corrupt(Result& r, std::uint32_t root, Corrupt how) {
  const std::uint64_t n = r.dist.size();
  for (std::uint64_t i = 1; i < n; ++i) {
    const std::uint64_t v = (root + i) % n;
    if (how == Corrupt::distance && r.parent[v] != kNoParent) {
      r.dist[v] += 0x1p-10f;  // a little farther than computed
      return;
    }
    if (how == Corrupt::parent && r.parent[v] != kNoParent && r.parent[v] != root) {
      r.parent[v] = r.parent[r.parent[v]];  // the grandparent, not joined to v by that weight
      return;
    }
  }
}

// The CPU time (user and system) of every host's process, summed over the
// hosts: their runtime threads, polling included, and their I/O threads.
// Host 0 asks each host's first partition.
double rack_cpu_s(Parts& parts) {
  std::vector<double> by_host(gossamer::host_count(), 0.0);
  for_each_concurrently(parts.size(), [&](std::size_t i) {
    const auto [host, cpu] = parts[i].apply([](Latch<Partition>&) {
      rusage u{};
      getrusage(RUSAGE_SELF, &u);
      const double s = double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
      return std::make_pair(std::uint64_t(gossamer::host_index()), s);
    });
    if (host < by_host.size()) by_host[host] = cpu;
  });
  double total = 0;
  for (double c : by_host) total += c;
  return total;
}

// ---- the driver (host 0's main fiber) -----------------------------------------

int drive(Params prm) {
  const std::size_t nparts = gossamer::thread_count();
  if (prm.delta == 0) prm.delta = kDelta;
  if (prm.window == 0) prm.window = kWindow;
  if (prm.chunk == 0) prm.chunk = gossamer::host_count() > 1 ? kChunkRack : kChunk;
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

  const Tuning tuning{prm.window, prm.chunk, prm.message_cost};
  Parts parts(nparts);
  const Built built = construct(parts, spec, prm.delta);
  Results res;
  res.scale = spec.scale;
  res.edgefactor = spec.edgefactor;
  res.processes = nparts;
  res.graph_generation = built.graph_generation;
  res.construction_time = built.construction_time;

  const std::vector<std::uint32_t> roots =
      prm.root ? std::vector<std::uint32_t>{std::uint32_t(*prm.root)} : sample_roots(parts, spec, prm.roots);
  if (prm.root) {
    const std::uint32_t v = roots[0];
    if (parts[v % nparts].apply([v](Latch<Partition>& l) { return l.lock()->degree(v); }) == 0) {
      std::fprintf(stderr, "sssp: --root %u has no edge (Graph500 never searches from one)\n", v);
      return 2;
    }
  }
  if (roots.empty()) {
    std::fprintf(stderr, "sssp: found no vertex with an edge to start from\n");
    return 2;
  }

  // The validator's own copy of the input edge list, generated again on
  // host 0 (untimed, as all validation).
  std::vector<Edge> edges;
  if (prm.validate) {
    const Kronecker gen(spec);
    edges.resize(spec.edges());
    for (std::uint64_t e = 0; e < edges.size(); ++e) edges[e] = gen.edge(e);
  }

  run_kernel(parts, roots[0], tuning);  // warm-up, untimed, as in the reference
  Run first, total;  // the first root's run; counters summed over all roots
  bool valid = true;
  double kernel_cpu_s = 0;  // the rack's processes' CPU time in the timed kernels
  for (std::size_t i = 0; i < roots.size() && valid; ++i) {
    const double cpu0 = rack_cpu_s(parts);
    const Run run = run_kernel(parts, roots[i], tuning);
    kernel_cpu_s += rack_cpu_s(parts) - cpu0;
    res.times.push_back(run.time_s);
    res.edges.push_back(double(run.edges()));
    if (i == 0) first = run;
    total.rounds += run.rounds;
    total.cpu_s += run.cpu_s;
    total.critical_s += run.critical_s;
    total.critical_relaxations += run.critical_relaxations;
    total.summary.relaxations += run.summary.relaxations;
    total.summary.light_relaxations += run.summary.light_relaxations;
    total.summary.updates_sent += run.summary.updates_sent;
    total.summary.batches_sent += run.summary.batches_sent;
    total.summary.path += run.summary.path;
    total.trace.add(run.trace);
    if (!prm.validate) {
      res.validate_times.push_back(-1);
      continue;
    }
    const auto t_val = Clock::now();
    Result r = gather(parts, n);
    if (i == 0 && prm.corrupt != Corrupt::none) corrupt(r, roots[i], prm.corrupt);
    const Validation v = validate_sssp(n, roots[i], edges, r.dist, r.parent, run.edges());
    res.validate_times.push_back(seconds_since(t_val));
    if (!v.ok()) {
      valid = false;
      std::fprintf(stderr, "sssp: validation FAILED for root %u (root %zu of %zu): %llu error(s)\n", roots[i], i + 1,
                   roots.size(), (unsigned long long)v.errors);
      for (const std::string& e : v.first) std::fprintf(stderr, "Validation Error: %s\n", e.c_str());
    }
  }

  // The summary line: medians and harmonic mean over the roots, counters
  // summed over them, the first root's component.
  const Stats time_stats = statistics(res.times);
  double secs_per_edge = 0;
  for (std::size_t i = 0; i < res.times.size(); ++i) secs_per_edge += res.times[i] / res.edges[i];
  const double hmean_teps = double(res.times.size()) / secs_per_edge;
  std::printf("sssp scale=%u edgefactor=%u hosts=%zu threads=%zu roots=%zu time_s=%.6f teps=%.4g validated=%s "
              "root=%u delta=%g window=%u rounds=%llu reached=%llu edges=%llu relaxations=%llu light=%llu updates=%llu "
              "batches=%llu cpu_s=%.4f proc_cpu_s=%.4f critical_s=%.4f critical_relaxations=%llu path=%llu build_s=%.3f arcs=%llu\n",
              spec.scale, spec.edgefactor, gossamer::host_count(), nparts, res.times.size(), time_stats.median,
              hmean_teps, !prm.validate ? "skipped" : valid ? "yes" : "no", roots[0], double(prm.delta), prm.window,
              (unsigned long long)total.rounds, (unsigned long long)first.summary.reached,
              (unsigned long long)first.edges(), (unsigned long long)total.summary.relaxations,
              (unsigned long long)total.summary.light_relaxations,
              (unsigned long long)total.summary.updates_sent, (unsigned long long)total.summary.batches_sent,
              total.cpu_s, kernel_cpu_s, total.critical_s,
              (unsigned long long)total.critical_relaxations, (unsigned long long)total.summary.path,
              res.graph_generation + res.construction_time, (unsigned long long)built.arcs);
  if (prm.trace) print_trace(total.trace);
  if (valid)
    print_results(stdout, res);
  else
    std::printf("No results printed for invalid run.\n");
  std::fflush(stdout);
  return valid ? 0 : 1;
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
  auto* root_opt = app.add_option("--root", root, "run this one source vertex instead of --roots sampled ones");
  app.add_option("--delta", p.delta,
                 "delta-stepping bucket width (>= 1: Bellman-Ford-like rounds; 0: the default, 0.05)")
      ->check(CLI::Number & (CLI::IsMember({0.0f}) | CLI::Range(0.001, 1e9)));
  app.add_option("--window", p.window, "light buckets a round processes (0: the default, 1)")
      ->check(CLI::Range(0, 64));
  app.add_option("--chunk", p.chunk,
                 "relaxations between two sends of the light phase's updates (and two yields of the heavy phase); "
                 "0: the default, 16384 on one host, 8192 across hosts")
      ->check(CLI::Range(std::uint64_t(0), std::uint64_t(1) << 40));
  app.add_option("--message-cost", p.message_cost, "what waiting for a message adds to path=, in relaxations")
      ->check(CLI::Range(std::uint64_t(0), std::uint64_t(1) << 40));
  app.add_option("--threads", p.threads, "runtime threads in the whole rack, one partition each")
      ->check(CLI::Range(1, 4096));
  app.add_option("--roots", p.roots, "search keys, as the reference's NBFS")->check(CLI::Range(1, 1 << 20));
  app.add_flag_callback("--skip-validation", [&p] { p.validate = false; },
                        "skip the Graph500 validation of every root (the reference's SKIP_VALIDATION)");
  app.add_flag("--trace", p.trace, "print where the rounds' time went (SCALING.md)");
  app.add_option("--polling", polling, "busy | adaptive")->check(CLI::IsMember({"busy", "adaptive"}));
  // For the tests: spoil the first root's result before validation, which must then fail.
  std::string corrupt = "none";
  app.add_option("--corrupt-for-test", corrupt)->check(CLI::IsMember({"none", "distance", "parent"}))->group("");
  CLI11_PARSE(app, argc, argv);
  if (root_opt->count()) p.root = root;
  p.corrupt = corrupt == "distance" ? sssp::Corrupt::distance
              : corrupt == "parent"  ? sssp::Corrupt::parent
                                     : sssp::Corrupt::none;
  p.polling = polling == "busy" ? gossamer::Polling::busy : gossamer::Polling::adaptive;

  gossamer::Options o;
  o.threads = p.threads;
  o.polling = p.polling;
  // main runs on host 0 only; the other hosts' instances serve their
  // trustees until the rack is quiet, then return 0.
  return gossamer::run(o, [p]() -> int { return sssp::drive(p); });
}
