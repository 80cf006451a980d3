// FLOCK's schedulers (dataplane/src/scheduler.hpp) on deterministic inputs:
// formula 3.1's cases and edges (one sender, dormant senders, a newcomer,
// limits smaller than the number of senders, connection caps) and
// Algorithm 1 (large and small requests apart, fair shares).
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler.hpp"

namespace {

using namespace gossamer::dataplane;
using V = std::vector<std::uint32_t>;

SenderLoad busy(std::uint64_t u, std::uint32_t conns = 64) { return {conns, u, true}; }
SenderLoad dormant(std::uint32_t conns = 64) { return {conns, 0, true}; }
SenderLoad newcomer(std::uint32_t conns = 64) { return {conns, 0, false}; }

TEST(QpScheduler, OneSenderGetsEverythingItHas) {
  EXPECT_EQ(assign_active_connections({busy(10)}, 256, 0), V{64});
  EXPECT_EQ(assign_active_connections({busy(10, 4)}, 256, 0), V{4});
  EXPECT_EQ(assign_active_connections({busy(10)}, 8, 0), V{8});
}

TEST(QpScheduler, SharesFollowUtilization) {
  EXPECT_EQ(assign_active_connections({busy(3), busy(1)}, 8, 0), (V{6, 2}));
  // Floors leave 1 over; the larger remainder takes it.
  EXPECT_EQ(assign_active_connections({busy(2), busy(1)}, 8, 0), (V{5, 3}));
  // A sender with few connections cannot use its share; the rest goes on.
  EXPECT_EQ(assign_active_connections({busy(100, 2), busy(1), busy(1)}, 8, 0), (V{2, 3, 3}));
}

TEST(QpScheduler, DormantSendersKeepOne) {
  EXPECT_EQ(assign_active_connections({busy(5), dormant(), dormant()}, 8, 0), (V{6, 1, 1}));
  EXPECT_EQ(assign_active_connections({dormant(), dormant()}, 8, 0), (V{1, 1}));
}

TEST(QpScheduler, NewcomerGetsTheAverage) {
  // Functioning: 6 and 2 before the newcomer, average 4; then trimmed to fit.
  auto a = assign_active_connections({busy(3), busy(1), newcomer()}, 8, 0);
  EXPECT_EQ(std::accumulate(a.begin(), a.end(), 0u), 8u);
  EXPECT_GE(a[2], 2u);
  EXPECT_LE(a[2], 4u);
  // Only newcomers: the limit split evenly.
  EXPECT_EQ(assign_active_connections({newcomer(), newcomer()}, 8, 0), (V{4, 4}));
}

TEST(QpScheduler, LimitSmallerThanSendersTakesTurns) {
  std::vector<SenderLoad> five(5, dormant());
  std::map<std::size_t, int> turns;
  for (std::uint32_t r = 0; r < 5; ++r) {
    auto a = assign_active_connections(five, 2, r);
    EXPECT_EQ(std::accumulate(a.begin(), a.end(), 0u), 2u) << "rotation " << r;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(a[i], 1u);
      turns[i] += int(a[i]);
    }
  }
  for (std::size_t i = 0; i < 5; ++i) EXPECT_GE(turns[i], 1) << "sender " << i << " never got a connection";
}

TEST(QpScheduler, NeverOverTheLimitNorOverWhatASenderHas) {
  std::mt19937 rng(42);
  for (int round = 0; round < 20000; ++round) {
    std::vector<SenderLoad> s(1 + rng() % 12);
    for (auto& x : s) {
      x.connections = 1 + rng() % 8;
      x.known = rng() % 5 != 0;
      x.utilization = rng() % 3 == 0 ? 0 : rng() % 1000;
    }
    const std::uint32_t limit = 1 + rng() % 40;
    auto a = assign_active_connections(s, limit, rng());
    ASSERT_EQ(a.size(), s.size());
    std::uint64_t total = 0, have = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      ASSERT_LE(a[i], s[i].connections);
      total += a[i];
      have += s[i].connections;
    }
    ASSERT_LE(total, limit) << "round " << round;
    // Nobody is left with nothing while the limit allows one each.
    if (s.size() <= limit) {
      for (std::size_t i = 0; i < s.size(); ++i) ASSERT_GE(a[i], 1u) << "round " << round;
    } else {
      ASSERT_EQ(total, limit);
    }
    (void)have;
  }
}

TEST(ThreadScheduler, LargeRequestsDoNotShareWithSmallOnes) {
  // 9 threads of 32 B requests, 1 of 8 KiB (issue 7's mix), 2 connections.
  std::vector<ThreadLoad> t(10);
  for (int i = 0; i < 10; ++i) t[i] = {32, 1000, 32 * 1000};
  t[3] = {8192, 1000, 8192ull * 1000};
  auto a = assign_threads(t, {0, 1});
  for (int i = 0; i < 10; ++i) {
    if (i != 3) {
      EXPECT_NE(a[i], a[3]) << "thread " << i;
    }
  }
  // With one connection there is no choice.
  auto one = assign_threads(t, {5});
  for (auto c : one) EXPECT_EQ(c, 5u);
}

TEST(ThreadScheduler, LargeThreadsApartEvenWhenSmallOnesCarryMoreBytes) {
  // Pipelined small requests outweigh one blocking 8 KiB thread in bytes;
  // Algorithm 1 alone would put it with the last small ones.
  std::vector<ThreadLoad> t(10, ThreadLoad{700, 30, 21'000});
  t[0] = {8192 + 100, 2, 16'600};
  for (std::uint32_t conns : {2u, 3u, 4u}) {
    std::vector<std::uint32_t> active(conns);
    std::iota(active.begin(), active.end(), 10u);
    auto a = assign_threads(t, active);
    for (int i = 1; i < 10; ++i) EXPECT_NE(a[i], a[0]) << conns << " connections, thread " << i;
  }
  // Three classes on two connections: the two largest share the last.
  std::vector<ThreadLoad> three = {{32, 10, 320}, {4096, 10, 40960}, {65536, 10, 655360}};
  auto a = assign_threads(three, {0, 1});
  EXPECT_EQ(a, (V{0, 1, 1}));
}

TEST(ThreadScheduler, EqualThreadsSpreadEvenly) {
  std::vector<ThreadLoad> t(8, ThreadLoad{64, 100, 6400});
  auto a = assign_threads(t, {0, 1, 2, 3});
  std::map<std::uint32_t, int> per;
  for (auto c : a) ++per[c];
  EXPECT_EQ(per.size(), 4u);
  for (auto [c, n] : per) EXPECT_EQ(n, 2) << "connection " << c;
}

TEST(ThreadScheduler, UnmeasuredThreadsAreSpread) {
  std::vector<ThreadLoad> t(6);
  auto a = assign_threads(t, {2, 7});
  EXPECT_EQ(std::count(a.begin(), a.end(), 2u), 3);
  EXPECT_EQ(std::count(a.begin(), a.end(), 7u), 3);
  EXPECT_EQ(assign_threads(t, {}), V(6, 0));
}

TEST(ThreadScheduler, OnlyActiveConnectionsAreUsed) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::vector<ThreadLoad> t(1 + rng() % 20);
    for (auto& x : t) x = {std::uint32_t(rng() % 10000), rng() % 1000, rng() % 100000};
    std::vector<std::uint32_t> active;
    for (std::uint32_t c = 0; c < 8; ++c)
      if (rng() % 2) active.push_back(c);
    if (active.empty()) active.push_back(3);
    auto a = assign_threads(t, active);
    const std::set<std::uint32_t> ok(active.begin(), active.end());
    for (auto c : a) ASSERT_TRUE(ok.count(c));
  }
}

TEST(RunningMedian, OverTheLastWindow) {
  RunningMedian m;
  EXPECT_EQ(m.median(), 0u);
  for (std::uint32_t v : {5u, 1u, 9u}) m.add(v);
  EXPECT_EQ(m.median(), 5u);
  for (std::size_t i = 0; i < RunningMedian::kWindow; ++i) m.add(100);  // the old values leave the window
  EXPECT_EQ(m.median(), 100u);
  m.clear();
  EXPECT_EQ(m.median(), 0u);
}

}  // namespace
