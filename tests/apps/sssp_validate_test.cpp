// tools/apps/sssp's Graph500 validator and statistics block on hand-made
// inputs: a correct result passes, and each kind of wrong result (a parent
// that is not joined by the right weight, a distance too high or too low, an
// unreached vertex of the component, a zero-weight parent cycle, a wrong
// root, a wrong TEPS edge count) is caught. The block has the reference's
// field names and layout.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "stats.hpp"
#include "validate.hpp"

namespace sssp {
namespace {

// 0 -.5- 1 -.25- 2 -.125- 3, a chord 0 -1- 2, a self-loop on 3, a duplicate
// of 1-2, and a second component 4 -.5- 5.
struct Graph {
  std::uint64_t n = 6;
  std::uint32_t root = 0;
  std::vector<Edge> edges{{0, 1, .5f}, {1, 2, .25f}, {0, 2, 1.f}, {2, 3, .125f}, {3, 3, .5f}, {2, 1, .25f}, {4, 5, .5f}};
  std::vector<float> dist{0.f, .5f, .75f, .875f, kUnreached, kUnreached};
  std::vector<std::int64_t> parent{0, 0, 1, 2, kNoParent, kNoParent};
  std::uint64_t component_edges = 5;  // 0-1, 1-2 twice, 0-2, 2-3; not the loop
  Validation check() const { return validate_sssp(n, root, edges, dist, parent, component_edges); }
};

TEST(SsspValidate, CorrectResultPasses) {
  const Graph g;
  const Validation v = g.check();
  EXPECT_TRUE(v.ok()) << (v.first.empty() ? "" : v.first[0]);
  EXPECT_EQ(v.edges, 5u);
}

TEST(SsspValidate, ParentNotJoinedByThatWeightFails) {
  Graph g;
  g.parent[3] = 1;  // 1 and 3 share no edge
  EXPECT_FALSE(g.check().ok());
  g = Graph{};
  g.parent[2] = 0;  // 0-2 is an edge, but of weight 1, not 0.75
  EXPECT_FALSE(g.check().ok());
}

TEST(SsspValidate, WrongDistanceFails) {
  Graph g;
  g.dist[3] = 1.f;  // too far: breaks the triangle rule on 2-3
  EXPECT_FALSE(g.check().ok());
  g = Graph{};
  g.dist[2] = .7f;  // too near: the tree edge 1-2 no longer matches
  EXPECT_FALSE(g.check().ok());
  g = Graph{};
  g.dist[1] = -.5f;  // negative
  EXPECT_FALSE(g.check().ok());
}

TEST(SsspValidate, UnreachedVertexOfTheComponentFails) {
  Graph g;
  g.parent[3] = kNoParent;
  g.dist[3] = kUnreached;
  g.component_edges = 4;
  EXPECT_FALSE(g.check().ok());
  g = Graph{};
  g.parent[3] = kNoParent;  // a distance without a parent
  EXPECT_FALSE(g.check().ok());
}

TEST(SsspValidate, ZeroWeightParentCycleFails) {
  // 0 -.5- 1 -0- 2: 1 and 2 as each other's parents pass every edge check.
  const std::vector<Edge> edges{{0, 1, .5f}, {1, 2, 0.f}};
  const std::vector<float> dist{0.f, .5f, .5f};
  EXPECT_TRUE(validate_sssp(3, 0, edges, dist, {0, 0, 1}, 2).ok());
  const Validation v = validate_sssp(3, 0, edges, dist, {0, 2, 1}, 2);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.first.back().find("cycle"), std::string::npos) << v.first.back();
}

TEST(SsspValidate, WrongRootOrRangeOrEdgeCountFails) {
  Graph g;
  g.parent[0] = 1;
  EXPECT_FALSE(g.check().ok());
  g = Graph{};
  g.parent[3] = 6;  // not a vertex
  EXPECT_FALSE(g.check().ok());
  g = Graph{};
  g.component_edges = 6;  // the self-loop counted
  EXPECT_FALSE(g.check().ok());
  g = Graph{};
  g.dist.pop_back();
  EXPECT_FALSE(g.check().ok());
}

TEST(SsspStats, QuartilesAndMeansAsTheReference) {
  const Stats s = statistics({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.firstquartile, 1.5);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.thirdquartile, 3.5);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.stddev, 1.2909944487, 1e-9);  // n - 1 in the denominator
}

TEST(SsspStats, BlockHasTheReferenceFieldNames) {
  Results r;
  r.scale = 10;
  r.edgefactor = 16;
  r.processes = 2;
  r.times = {0.5, 0.25};
  r.edges = {100, 100};
  r.validate_times = {1, 1};
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ASSERT_NE(f, nullptr);
  print_results(f, r);
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  // Exact lines, columns included, as the reference's main.c prints them.
  for (const char* line : {"SCALE:                          10\n", "NBFS:                           2\n",
                           "num_mpi_processes:              2\n", "sssp mean_time:                 0.375\n",
                           "sssp median_TEPS:               266.667\n", "sssp harmonic_mean_TEPS:     !  266.667\n",
                           "min_nedge:                      100\n", "sssp max_validate:              1\n"})
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "in:\n" << out;
}

}  // namespace
}  // namespace sssp
