// Direct fiber handoff (issue 20): a fiber that suspends while its thread's
// pass has other ready fibers, and the loop has nothing to do between two
// fibers, resumes the next one itself instead of going back to the
// scheduler. These tests mix everything that suspends (blocking apply in
// both directions, yield, join of a child fiber, a closure that throws) so
// that fibers are resumed by the scheduler and by each other in every
// order; a context stored in the wrong place loses or duplicates a fiber
// (a hang, a crash, or wrong counts).
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

namespace {

constexpr int kFibers = 48;
constexpr int kIters = 400;

// Fibers on the calling thread apply to a counter on the other thread; each checks that
// the values it sees only grow.
void hammer(gossamer::TrustRef<long> counter, std::vector<int>* bad) {
  std::vector<gossamer::FiberHandle> fs;
  for (int f = 0; f < kFibers; ++f) {
    fs.push_back(gossamer::spawn([counter, f, bad] {
      long last = -1;
      for (int i = 0; i < kIters; ++i) {
        long v = counter.apply([](long& c) { return ++c; });
        if (v <= last) ++(*bad)[std::size_t(f)];
        last = v;
        if (i % 5 == 4) gossamer::yield();
        if (f % 8 == 0 && i % 100 == 0) {
          auto child = gossamer::spawn([counter] {
            for (int k = 0; k < 10; ++k) counter.apply([](long& c) { ++c; });
          });
          child.join();
        }
      }
    }));
  }
  for (auto& h : fs) h.join();
}

TEST(HandoffTest, BlockingFibersInBothDirectionsKeepEveryResult) {
  std::vector<int> bad0(kFibers, 0), bad1(kFibers, 0);
  long c0 = 0, c1 = 0;
  gossamer::run(2, [&] {
    auto on0 = gossamer::trustee(0).entrust(0L);
    auto on1 = gossamer::trustee(1).entrust(0L);
    auto r0 = on0.ref(), r1 = on1.ref();
    std::vector<int>* b0 = &bad0;
    std::vector<int>* b1 = &bad1;
    auto h0 = gossamer::spawn_on(0, [r1, b0] { hammer(r1, b0); });
    auto h1 = gossamer::spawn_on(1, [r0, b1] { hammer(r0, b1); });
    h0.join();
    h1.join();
    c0 = on0.apply([](long& c) { return c; });
    c1 = on1.apply([](long& c) { return c; });
  });
  // Each thread: kFibers * kIters applies, plus the children's: fibers
  // 0, 8, .. each start one every 100 iterations, 10 applies each.
  const long children = long((kFibers + 7) / 8) * (kIters / 100) * 10;
  EXPECT_EQ(c1, long(kFibers) * kIters + children);
  EXPECT_EQ(c0, long(kFibers) * kIters + children);
  for (int f = 0; f < kFibers; ++f) {
    EXPECT_EQ(bad0[std::size_t(f)], 0) << "fiber " << f << " on thread 0 saw a value go back";
    EXPECT_EQ(bad1[std::size_t(f)], 0) << "fiber " << f << " on thread 1 saw a value go back";
  }
}

// A closure that throws wakes its fiber with the exception, whichever
// context resumes it.
TEST(HandoffTest, ExceptionsReachTheirFiber) {
  int caught = 0, ok = 0;
  gossamer::run(2, [&] {
    auto t = gossamer::trustee(1).entrust(0L);
    auto r = t.ref();
    std::vector<gossamer::FiberHandle> fs;
    for (int f = 0; f < 32; ++f) {
      fs.push_back(gossamer::spawn([r, f, &caught, &ok] {
        for (int i = 0; i < 100; ++i) {
          try {
            r.apply([odd = (f + i) % 2](long& c) {
              ++c;
              if (odd) throw std::runtime_error("odd");
            });
            ++ok;
          } catch (const gossamer::remote_error&) {
            ++caught;
          }
        }
      }));
    }
    for (auto& h : fs) h.join();
  });
  EXPECT_EQ(caught, 32 * 100 / 2);
  EXPECT_EQ(ok, 32 * 100 / 2);
}

}  // namespace
