// The sequential reference the distributed result is checked against:
// the whole graph in one CSR, and Dijkstra with a binary heap.
//
// Distances are floats added in the same order as in the distributed code
// (dist[u] + w along each path), so both compute the minimum over paths of
// the same rounded sums: with monotone IEEE addition that minimum is unique,
// and the two results must be equal bit for bit, not just approximately.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "kronecker.hpp"

namespace sssp {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

struct Arc {
  std::uint32_t v;
  float w;
};

// Both directions of every non-loop edge, grouped by source vertex.
struct Csr {
  std::vector<std::uint64_t> offsets;  // vertices + 1
  std::vector<Arc> arcs;
};

inline Csr build_reference_csr(const GraphSpec& spec) {
  const Kronecker gen(spec);
  const std::uint64_t n = spec.vertices(), m = spec.edges();
  std::vector<Edge> edges;
  edges.reserve(m);
  Csr g;
  g.offsets.assign(n + 1, 0);
  for (std::uint64_t e = 0; e < m; ++e) {
    Edge ed = gen.edge(e);
    if (ed.u == ed.v) continue;
    ++g.offsets[ed.u + 1];
    ++g.offsets[ed.v + 1];
    edges.push_back(ed);
  }
  for (std::uint64_t v = 0; v < n; ++v) g.offsets[v + 1] += g.offsets[v];
  g.arcs.resize(g.offsets[n]);
  std::vector<std::uint64_t> fill(g.offsets.begin(), g.offsets.end() - 1);
  for (const Edge& ed : edges) {
    g.arcs[fill[ed.u]++] = Arc{ed.v, ed.w};
    g.arcs[fill[ed.v]++] = Arc{ed.u, ed.w};
  }
  return g;
}

inline std::vector<float> dijkstra(const Csr& g, std::uint32_t root) {
  const std::size_t n = g.offsets.size() - 1;
  std::vector<float> dist(n, kInf);
  using Item = std::pair<float, std::uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  dist[root] = 0;
  heap.push({0.0f, root});
  while (!heap.empty()) {
    auto [d, u] = heap.top();
    heap.pop();
    if (d > dist[u]) continue;  // a stale entry: u was settled with less
    for (std::uint64_t a = g.offsets[u]; a < g.offsets[u + 1]; ++a) {
      const float nd = d + g.arcs[a].w;
      if (nd < dist[g.arcs[a].v]) {
        dist[g.arcs[a].v] = nd;
        heap.push({nd, g.arcs[a].v});
      }
    }
  }
  return dist;
}

}  // namespace sssp
