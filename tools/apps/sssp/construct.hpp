// Building the partitions, as the reference's two timed phases:
//   graph_generation: each partition generates its own share (1/P) of the
//     edge list from the seed, all in parallel (the generator is counter-
//     based, so any range of edges can be generated alone);
//   construction_time: each partition sends every other partition the
//     halves of that partition's vertices from its share, in blocks, then
//     every partition builds its CSR from what it received, in parallel.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <gossamer/gossamer.hpp>

#include "kernel.hpp"
#include "partition.hpp"

namespace sssp {

// Edges of a share turned into halves between two rounds of sends: at most
// 2 * kExchangeBlock halves (1.5 MiB) go to one destination in one request.
inline constexpr std::uint64_t kExchangeBlock = std::uint64_t(1) << 16;

struct Generate {
  std::uint64_t operator()(Latch<Partition>& l, Setup s) const { return l.lock()->generate(s); }
};

struct AddHalves {
  void operator()(Latch<Partition>& l, std::vector<std::uint32_t> triples) const { l.lock()->add_halves(triples); }
};

struct BuildCsr {
  std::uint64_t operator()(Latch<Partition>& l) const { return l.lock()->build_csr(); }
};

// In a fiber on the partition's trustee (launch): the latch is held only to
// take the share and to add our own halves, never across the sends, so the
// other partitions' halves find it free.
struct Exchange {
  void operator()(Latch<Partition>& l) const {
    std::vector<Edge> edges;
    Setup s;
    {
      auto p = l.lock();
      edges = p->take_edges();
      s = p->setup();
    }
    const std::uint32_t parts = s.parts;
    std::vector<std::vector<std::uint32_t>> out(parts);
    const auto add = [&out, parts](std::uint32_t from, std::uint32_t to, std::uint32_t wbits) {
      auto& b = out[from % parts];
      b.push_back(from / parts);
      b.push_back(to);
      b.push_back(wbits);
    };
    for (std::uint64_t lo = 0; lo < edges.size(); lo += kExchangeBlock) {
      const std::uint64_t hi = std::min<std::uint64_t>(edges.size(), lo + kExchangeBlock);
      // Twice the expected share, so that a block rarely reallocates.
      for (auto& b : out) b.reserve(std::size_t(2 * kHalfWords * 2 * (hi - lo) / parts));
      for (std::uint64_t e = lo; e < hi; ++e) {
        const Edge& ed = edges[e];
        if (ed.u == ed.v) continue;
        const std::uint32_t wbits = std::bit_cast<std::uint32_t>(ed.w);
        add(ed.u, ed.v, wbits);
        add(ed.v, ed.u, wbits);
      }
      l.lock()->add_halves(out[s.index]);
      out[s.index].clear();
      std::vector<std::uint32_t> to;
      for (std::uint32_t p = 0; p < parts; ++p)
        if (!out[p].empty()) to.push_back(p);
      for_each_concurrently(to.size(), [&](std::size_t i) {
        s.refs[to[i]].apply_with(AddHalves{}, std::exchange(out[to[i]], {}));
      });
    }
  }
};

struct Built {
  double graph_generation = 0, construction_time = 0;
  std::uint64_t arcs = 0;
};

// Entrusts one empty partition to every trustee and builds them all.
inline Built construct(Parts& parts, const GraphSpec& spec, float delta) {
  const std::size_t nparts = parts.size();
  Built b;
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i] = gossamer::trustee(i).entrust(Latch<Partition>{}); });
  Setup setup;
  setup.spec = spec;
  setup.parts = std::uint32_t(nparts);
  setup.delta = delta;
  for (std::size_t i = 0; i < nparts; ++i) setup.refs[i] = parts[i].ref();
  auto t0 = Clock::now();
  for_each_concurrently(nparts, [&](std::size_t i) {
    Setup s = setup;
    s.index = std::uint32_t(i);
    parts[i].apply_with(Generate{}, s);
  });
  b.graph_generation = seconds_since(t0);
  t0 = Clock::now();
  for_each_concurrently(nparts, [&](std::size_t i) { parts[i].launch(Exchange{}); });
  for_each_concurrently(nparts, [&](std::size_t i) { b.arcs += parts[i].apply(BuildCsr{}); });
  b.construction_time = seconds_since(t0);
  return b;
}

}  // namespace sssp
