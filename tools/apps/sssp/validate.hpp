// The Graph500 SSSP validation (specification §7 and the reference's
// validate.c), run on host 0 over the whole input edge list:
//   1. the parent array is a tree rooted at the root: the root is its own
//      parent at distance 0, every parent is a vertex, and following parents
//      from any reached vertex ends at the root (no cycle);
//   2. every tree edge (parent[v], v) is an input edge whose weight is
//      exactly dist[v] - dist[parent[v]] (dist[v] == dist[p] + w in float);
//   3. no input edge violates the triangle rule: dist[u] + w >= dist[v] and
//      dist[v] + w >= dist[u] for every edge between reached vertices;
//   4. the tree spans the root's whole component: no input edge joins a
//      reached and an unreached vertex, and a vertex is reached (has a
//      parent) exactly when it has a distance;
//   5. the edge count used for TEPS equals the number of input edges, self-
//      loops excluded, with both ends in the component.
// Unreached vertices have parent -1 and distance -1, as in the reference.
// Errors are counted; the first few are described.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kronecker.hpp"

namespace sssp {

inline constexpr std::int64_t kNoParent = -1;
inline constexpr float kUnreached = -1.0f;

struct Validation {
  std::uint64_t errors = 0;
  std::uint64_t edges = 0;  // input edges, self-loops excluded, in the root's component
  std::vector<std::string> first;  // descriptions of the first errors
  bool ok() const { return errors == 0; }
};

namespace detail {
inline void report(Validation& r, const char* fmt, auto... args) {
  ++r.errors;
  if (r.first.size() >= 8) return;
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  r.first.emplace_back(buf);
}
}  // namespace detail

// claimed_edges: the kernel's TEPS edge count for this root.
inline Validation validate_sssp(std::uint64_t n, std::uint32_t root, const std::vector<Edge>& edges,
                                const std::vector<float>& dist, const std::vector<std::int64_t>& parent,
                                std::uint64_t claimed_edges) {
  using detail::report;
  using ull = unsigned long long;
  Validation r;
  if (dist.size() != n || parent.size() != n || root >= n) {
    report(r, "result has %llu distances and %llu parents for %llu vertices", ull(dist.size()), ull(parent.size()),
           ull(n));
    return r;
  }
  // Ranges and consistency of each vertex alone (check 4, second half).
  for (std::uint64_t v = 0; v < n; ++v) {
    const std::int64_t p = parent[v];
    if (p != kNoParent && (p < 0 || std::uint64_t(p) >= n))
      report(r, "parent %lld of vertex %llu is out of range", (long long)p, ull(v));
    if (dist[v] != kUnreached && !(dist[v] >= 0.0f))
      report(r, "distance %g of vertex %llu is out of range", double(dist[v]), ull(v));
    if ((p == kNoParent) != (dist[v] == kUnreached))
      report(r, "vertex %llu has inconsistent parent %lld and distance %g", ull(v), (long long)p, double(dist[v]));
  }
  if (parent[root] != root || dist[root] != 0.0f)
    report(r, "root %llu has parent %lld and distance %g", ull(root), (long long)parent[root], double(dist[root]));
  if (!r.ok()) return r;  // the edge checks below index with the parents

  // Every input edge (checks 2, 3, 4 and the count of 5).
  std::vector<std::uint8_t> confirmed(n, 0);
  confirmed[root] = 1;
  for (const Edge& e : edges) {
    if (e.u == e.v) continue;
    const bool ru = parent[e.u] != kNoParent, rv = parent[e.v] != kNoParent;
    if (!ru && !rv) continue;
    ++r.edges;
    if (ru != rv) {
      report(r, "edge %u-%u joins a reached and an unreached vertex", e.u, e.v);
      continue;
    }
    const float du = dist[e.u], dv = dist[e.v];
    if (du + e.w < dv || dv + e.w < du)
      report(r, "edge %u-%u weight %.9g breaks the triangle rule: distances %.9g and %.9g", e.u, e.v, double(e.w),
             double(du), double(dv));
    if (parent[e.v] == e.u && dv == du + e.w) confirmed[e.v] = 1;
    if (parent[e.u] == e.v && du == dv + e.w) confirmed[e.u] = 1;
  }
  for (std::uint64_t v = 0; v < n; ++v)
    if (parent[v] != kNoParent && !confirmed[v])
      report(r, "tree edge %lld-%llu to distance %.9g is not an input edge of that weight", (long long)parent[v],
             ull(v), double(dist[v]));

  // No cycle (check 1): with zero-weight edges, a cycle of tree edges could
  // pass every check above. Walk up from each vertex, marking the path;
  // a walk that meets its own path has found a cycle.
  std::vector<std::uint32_t> seen(n, 0);  // 0: not visited; else the walk that visited it (root: done)
  constexpr std::uint32_t kDone = ~std::uint32_t(0);
  seen[root] = kDone;
  std::uint32_t walk = 0;
  for (std::uint64_t s = 0; s < n; ++s) {
    if (parent[s] == kNoParent || seen[s]) continue;
    ++walk;
    std::uint64_t v = s;
    while (seen[v] == 0) {
      seen[v] = walk;
      v = std::uint64_t(parent[v]);
    }
    const bool cycle = seen[v] == walk;
    if (cycle) report(r, "the parents of vertex %llu form a cycle through vertex %llu", ull(s), ull(v));
    for (std::uint64_t u = s; seen[u] == walk; u = std::uint64_t(parent[u])) seen[u] = kDone;
  }

  if (claimed_edges != r.edges)
    report(r, "the kernel counted %llu edges for TEPS; the component has %llu", ull(claimed_edges), ull(r.edges));
  return r;
}

}  // namespace sssp
