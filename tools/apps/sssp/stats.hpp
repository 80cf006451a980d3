// The Graph500 results block: order statistics, mean and standard deviation
// over the roots, the same fields, names, column and number formats as the
// reference's src/main.c prints for SSSP, so scripts that parse its output
// parse ours. TEPS statistics are taken over seconds per edge and inverted,
// which makes "harmonic_mean_TEPS" the harmonic mean of the per-root TEPS.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace sssp {

struct Stats {
  double min = 0, firstquartile = 0, median = 0, thirdquartile = 0, max = 0, mean = 0, stddev = 0;
};

// Quartiles as the reference computes them (the mean of the two middle
// elements); stddev with n - 1 (NaN for a single root).
inline Stats statistics(std::vector<double> x) {
  Stats s;
  const std::size_t n = x.size();
  if (n == 0) return s;
  for (double v : x) s.mean += v;
  s.mean /= double(n);
  double sq = 0;
  for (double v : x) sq += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(sq / double(n - 1));
  std::sort(x.begin(), x.end());
  s.min = x[0];
  s.firstquartile = (x[(n - 1) / 4] + x[n / 4]) * .5;
  s.median = (x[(n - 1) / 2] + x[n / 2]) * .5;
  s.thirdquartile = (x[n - 1 - (n - 1) / 4] + x[n - 1 - n / 4]) * .5;
  s.max = x[n - 1];
  return s;
}

struct Results {
  unsigned scale = 0, edgefactor = 0;
  std::size_t processes = 0;  // partitions (the reference's MPI ranks)
  double graph_generation = 0, construction_time = 0;
  std::vector<double> times, edges, validate_times;  // per root; validate -1 when skipped
};

// One statistics group: "<prefix>min<suffix>:" ... "<prefix>stddev<suffix>:"
// in the reference's order, the name left-aligned in 32 columns.
inline void print_group(std::FILE* out, const char* prefix, const char* suffix, const Stats& s, const char* fmt) {
  const std::pair<const char*, double> rows[] = {{"min", s.min},       {"firstquartile", s.firstquartile},
                                                 {"median", s.median}, {"thirdquartile", s.thirdquartile},
                                                 {"max", s.max},       {"mean", s.mean},
                                                 {"stddev", s.stddev}};
  for (const auto& [name, v] : rows) {
    char label[64];
    std::snprintf(label, sizeof label, "%s%s%s:", prefix, name, suffix);
    std::fprintf(out, "%-32s", label);
    std::fprintf(out, fmt, v);
    std::fputc('\n', out);
  }
}

// Prints the block to `out`, in the reference's order (its BFS lines left out:
// this program runs only the SSSP kernel).
inline void print_results(std::FILE* out, const Results& r) {
  const auto line = [out](const char* name, double v) { std::fprintf(out, "%-32s%g\n", name, v); };
  std::fprintf(out, "%-32s%u\n", "SCALE:", r.scale);
  std::fprintf(out, "%-32s%u\n", "edgefactor:", r.edgefactor);
  std::fprintf(out, "%-32s%zu\n", "NBFS:", r.times.size());
  line("graph_generation:", r.graph_generation);
  std::fprintf(out, "%-32s%zu\n", "num_mpi_processes:", r.processes);
  line("construction_time:", r.construction_time);
  print_group(out, "sssp ", "_time", statistics(r.times), "%g");
  print_group(out, "", "_nedge", statistics(r.edges), "%.11g");
  std::vector<double> secs_per_edge(r.times.size());
  for (std::size_t i = 0; i < r.times.size(); ++i) secs_per_edge[i] = r.times[i] / r.edges[i];
  const Stats s = statistics(secs_per_edge);
  line("sssp min_TEPS:", 1. / s.max);
  line("sssp firstquartile_TEPS:", 1. / s.thirdquartile);
  line("sssp median_TEPS:", 1. / s.median);
  line("sssp thirdquartile_TEPS:", 1. / s.firstquartile);
  line("sssp max_TEPS:", 1. / s.min);
  std::fprintf(out, "%-29s!  %g\n", "sssp harmonic_mean_TEPS:", 1. / s.mean);
  line("sssp harmonic_stddev_TEPS:", s.stddev / (s.mean * s.mean * std::sqrt(double(r.times.size()) - 1)));
  print_group(out, "sssp ", "_validate", statistics(r.validate_times), "%g");
}

}  // namespace sssp
