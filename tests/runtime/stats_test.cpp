// trustee_stats: per-thread counters, during and after run.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer_test::wait_until;

TEST(StatsTest, TrusteeWithWorkServesRequestsInSlots) {
  constexpr int kApplies = 300;
  gossamer::run(3, [] {
    auto t = gossamer::trustee(1).entrust(0);
    for (int i = 0; i < kApplies; ++i) t.apply([](int& v) { ++v; });
    // Batched: many requests outstanding at once.
    int done = 0;
    for (int i = 0; i < kApplies; ++i) t.apply_then([](int& v) { ++v; }, [&done] { ++done; });
    EXPECT_TRUE(wait_until([&] { return done == kApplies; }));
    // Readable while run is active (published by thread 1 itself, so wait).
    EXPECT_TRUE(wait_until([] { return gossamer::trustee_stats(1).requests_served >= 2u * kApplies; }));
    auto local = gossamer::local_trustee().entrust(0);
    for (int i = 0; i < 50; ++i) local.apply([](int& v) { ++v; });
  });
  auto s0 = gossamer::trustee_stats(0);
  auto s1 = gossamer::trustee_stats(1);
  auto s2 = gossamer::trustee_stats(2);
  EXPECT_GE(s1.requests_served, 2u * kApplies);
  EXPECT_GT(s1.slots_served, 0u);
  EXPECT_GE(s1.requests_served, s1.slots_served);
  EXPECT_GT(s1.serve_cycles, 0u);
  EXPECT_GE(s1.busy_cycles, s1.serve_cycles);
  EXPECT_GE(s0.requests_sent, 2u * kApplies);
  EXPECT_GE(s0.local_applies, 50u);
  // Nothing was sent to thread 2's trustee... except what the runtime
  // itself sends; it served no more than it was sent.
  std::uint64_t sent = s0.requests_sent + s1.requests_sent + s2.requests_sent;
  std::uint64_t served = s0.requests_served + s1.requests_served + s2.requests_served;
  std::uint64_t received = s0.responses_received + s1.responses_received + s2.responses_received;
  EXPECT_EQ(sent, served) << "every request sent was served";
  EXPECT_EQ(sent, received) << "every request got its response";
  // Out of range: zeros.
  auto none = gossamer::trustee_stats(17);
  EXPECT_EQ(none.requests_served, 0u);
  EXPECT_EQ(none.idle_cycles, 0u);
}

TEST(StatsTest, IdleThreadsAccumulateIdleCycles) {
  gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(0);
    t.apply([](int&) {});  // thread 1's loop is running
    // Thread 1 has nothing to do now; its idle cycles must grow.
    std::uint64_t before = gossamer::trustee_stats(1).idle_cycles;
    EXPECT_TRUE(wait_until([before] { return gossamer::trustee_stats(1).idle_cycles > before; }));
  });
  EXPECT_GT(gossamer::trustee_stats(1).idle_cycles, 0u);
  EXPECT_GT(gossamer::trustee_stats(1).slots_served, 0u);
  // A run with nothing to do at all is idle too.
  gossamer::run(1, [] {});
  auto s = gossamer::trustee_stats(0);
  EXPECT_GT(s.idle_cycles, 0u);
  EXPECT_EQ(s.requests_served, 0u);
  EXPECT_EQ(s.slots_served, 0u);
}

// Issue 6's unit test: utilization = busy / (busy + idle) tells a trustee
// with nothing to do (all idle, however fast it polls) from one that has
// more work than it can do (> 90 % busy).
TEST(StatsTest, UtilizationSeparatesIdleFromSaturated) {
  gossamer::Options o;
  o.threads = 3;
  o.max_outstanding = 4096;  // the backlog below is 2000 (the default bound is lower)
  gossamer::run(o, [] {
    // Thread 1: a trustee with a backlog of closures of ~50 us each; this
    // fiber (thread 0) keeps 2000 in flight. Thread 2 does nothing at all.
    auto t = gossamer::trustee(1).entrust(0L);
    t.apply([](long&) {});  // every thread's loop is up
    auto work = [](long& v) {
      auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (std::chrono::steady_clock::now() < end) {
      }
      ++v;
    };
    long sent = 0, done = 0;
    auto refill = [&] {
      while (sent - done < 2000) {
        t.apply_then(work, [&done] { ++done; });
        ++sent;
      }
    };
    refill();
    EXPECT_TRUE(wait_until([&] { return done >= 200; }));  // serving has started
    const auto b1 = gossamer::trustee_stats(1), i1 = gossamer::trustee_stats(2);
    const auto window_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (std::chrono::steady_clock::now() < window_end) {
      refill();
      gossamer::yield();
    }
    const auto b2 = gossamer::trustee_stats(1), i2 = gossamer::trustee_stats(2);
    EXPECT_TRUE(wait_until([&] { return done == sent; }));

    const double busy = double(b2.busy_cycles - b1.busy_cycles), idle = double(b2.idle_cycles - b1.idle_cycles);
    std::printf("saturated trustee: utilization %.3f\n", busy / (busy + idle));
    EXPECT_GT(busy / (busy + idle), 0.9) << "busy " << busy << " idle " << idle;
    EXPECT_GT(b2.serve_cycles - b1.serve_cycles, 0u);
    EXPECT_GT(b2.requests_served, b1.requests_served);
    // The idle thread: idle grew, busy did not, nothing served.
    EXPECT_EQ(i2.busy_cycles, i1.busy_cycles);
    EXPECT_GT(i2.idle_cycles, i1.idle_cycles);
    EXPECT_EQ(i2.requests_served, i1.requests_served);
  });
}

}  // namespace
