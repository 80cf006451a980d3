// The Graph500 Kronecker generator (graph500.org specification, §3 and the
// Octave reference `kronecker_generator.m`), with the SSSP kernel's edge
// weights (uniform in [0, 1)).
//
// Every random number is a pure function of (seed, stream, counter): a
// counter-based SplitMix64. Any edge can be generated on its own, in any
// order, on any host, and every host computes the identical graph from the
// seed alone, without communicating.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace sssp {

// Initiator probabilities of the specification; D = 1 - A - B - C = 0.05.
inline constexpr double kA = 0.57, kB = 0.19, kC = 0.19;

struct GraphSpec {
  std::uint32_t scale = 14;       // 2^scale vertices
  std::uint32_t edgefactor = 16;  // edgefactor * 2^scale (undirected) edges
  std::uint64_t seed = 1;
  std::uint64_t vertices() const { return std::uint64_t(1) << scale; }
  std::uint64_t edges() const { return vertices() * edgefactor; }
};

// One input edge after the vertex permutation. Self-loops and duplicate
// edges are part of the specification's edge list; they are kept (they
// count for TEPS) and cost nothing to shortest paths.
struct Edge {
  std::uint32_t u, v;
  float w;
};

// SplitMix64's output function.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The `counter`-th output of a SplitMix64 stream whose state starts at `key`:
// random access into the stream, which is what makes generation splittable.
inline std::uint64_t draw(std::uint64_t key, std::uint64_t counter) {
  return mix64(key + (counter + 1) * 0x9e3779b97f4a7c15ull);
}

// Independent streams of one seed: the edges, the vertex permutation, roots.
enum class Stream : std::uint64_t { edges = 0x4544474553ull, permutation = 0x5045524dull, roots = 0x524f4f54ull };
inline std::uint64_t stream_key(std::uint64_t seed, Stream s) {
  return mix64(mix64(seed) ^ std::uint64_t(s));
}

// A uniform integer in [0, bound): Lemire's multiply-shift, without the
// rejection step (a bias below 2^-32 for the bounds used here), so that it
// consumes exactly one draw and stays random-access.
__extension__ using Uint128 = unsigned __int128;  // GCC and Clang; __extension__ for -Wpedantic
inline std::uint64_t uniform_below(std::uint64_t r, std::uint64_t bound) {
  return std::uint64_t((Uint128(r) * bound) >> 64);
}

class Kronecker {
 public:
  explicit Kronecker(const GraphSpec& spec)
      : spec_(spec),
        edge_key_(stream_key(spec.seed, Stream::edges)),
        // rand > p with rand uniform in [0,1) is u32 > p * 2^32 for a 32-bit draw.
        t_ab_(threshold(kA + kB)),
        t_anorm_(threshold(kA / (kA + kB))),
        t_cnorm_(threshold(kC / (1 - (kA + kB)))),
        perm_(permutation(spec)) {}

  // The specification's randperm(N): a Fisher-Yates shuffle that relabels
  // vertices so that labels say nothing about degree.
  static std::vector<std::uint32_t> permutation(const GraphSpec& spec) {
    const std::uint64_t n = spec.vertices();
    std::vector<std::uint32_t> p(n);
    for (std::uint64_t i = 0; i < n; ++i) p[i] = std::uint32_t(i);
    const std::uint64_t key = stream_key(spec.seed, Stream::permutation);
    for (std::uint64_t i = n - 1; i > 0; --i)
      std::swap(p[i], p[uniform_below(draw(key, i), i + 1)]);
    return p;
  }

  // Edge `e` of the edge list, 0 <= e < spec.edges(). Each of the `scale`
  // levels picks a quadrant of the adjacency matrix: the row bit with
  // P(1) = C + D, then the column bit with P(1) = D/(C+D) or B/(A+B) given
  // the row bit (the reference's c_norm / a_norm). One 64-bit draw per level
  // gives both 32-bit uniforms; one more draw gives the weight.
  Edge edge(std::uint64_t e) const {
    const std::uint64_t base = e * (spec_.scale + 1);
    std::uint32_t i = 0, j = 0;
    for (std::uint32_t b = 0; b < spec_.scale; ++b) {
      const std::uint64_t r = draw(edge_key_, base + b);
      const std::uint32_t ii = std::uint32_t(r >> 32) > t_ab_;
      const std::uint32_t jj = std::uint32_t(r) > (ii ? t_cnorm_ : t_anorm_);
      i |= ii << b;
      j |= jj << b;
    }
    // 24 random bits: every float in [0, 1) on a 2^-24 grid, never 1.
    const float w = float(draw(edge_key_, base + spec_.scale) >> 40) * 0x1p-24f;
    return Edge{perm_[i], perm_[j], w};
  }

  const GraphSpec& spec() const { return spec_; }

 private:
  static std::uint32_t threshold(double p) { return std::uint32_t(std::ldexp(p, 32)); }

  GraphSpec spec_;
  std::uint64_t edge_key_;
  std::uint32_t t_ab_, t_anorm_, t_cnorm_;
  std::vector<std::uint32_t> perm_;
};

}  // namespace sssp
