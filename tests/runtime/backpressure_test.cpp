// Backpressure (issue 20): a fiber that sends apply_then in a loop without
// counting what it has outstanding waits at Options::max_outstanding
// instead of queueing without bound.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::FiberHandle;
using gossamer_test::wait_until;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kOps = 300'000;  // the sanitizers are 10-50x slower
#else
constexpr std::uint64_t kOps = 3'000'000;
#endif

// `threads` runtime threads, at most `bound` requests outstanding per thread.
gossamer::Options bounded(std::size_t threads, std::size_t bound) {
  gossamer::Options o;
  o.threads = threads;
  o.max_outstanding = bound;
  return o;
}

// Keeps thread 1 from serving: a fiber there spins without yielding until
// released, so requests sent to it get no response and what the calling
// thread has outstanding is what it sent. A fiber of the calling thread
// releases it as soon as the caller waits (at the bound, or when it
// yields). Without it, the sending fiber yields to fetch responses whenever
// they are ready (preemption, issue 20), and the count it reaches depends on
// the schedule.
class HoldThread1 {
 public:
  HoldThread1() {
    HoldThread1* self = this;  // one process: a pointer may travel
    spinner_ = gossamer::spawn_on(1, [self] {
      self->holding_.store(true);
      while (!self->released_.load()) __builtin_ia32_pause();
    });
    EXPECT_TRUE(wait_until([this] { return holding_.load(); }));
    releaser_ = gossamer::spawn([self] { self->released_.store(true); });
  }
  ~HoldThread1() {
    released_.store(true);
    spinner_.join();
    releaser_.join();
  }

 private:
  std::atomic<bool> holding_{false}, released_{false};
  gossamer::FiberHandle spinner_, releaser_;
};

// One fiber, no window: millions of apply_then to another thread's
// property. The count of requests awaiting responses reaches the bound and
// never passes it; every callback runs, every increment lands.
TEST(BackpressureTest, UnwindowedApplyThenStaysWithinTheBound) {
  constexpr std::size_t kBound = 256;
  const gossamer::Options o = bounded(2, kBound);
  std::size_t max_seen = 0;
  std::uint64_t done = 0;
  long total = 0;
  gossamer::run(o, [&] {
    auto counter = gossamer::trustee(1).entrust(0L);
    auto ref = counter.ref();
    std::uint64_t* d = &done;
    HoldThread1 hold;  // the bound is reached (then released)
    for (std::uint64_t i = 0; i < kOps; ++i) {
      ref.apply_then([](long& c) { return ++c; }, [d](long) { ++*d; });
      max_seen = std::max(max_seen, gossamer::outstanding_requests());
    }
    ASSERT_TRUE(wait_until([&] { return done == kOps; }));
    EXPECT_EQ(gossamer::outstanding_requests(), 0u);
    total = counter.apply([](long& c) { return c; });
  });
  EXPECT_EQ(max_seen, kBound);
  EXPECT_EQ(done, kOps);
  EXPECT_EQ(total, long(kOps));
}

// Several fibers of one thread share the bound: apply_then, apply_with_then
// and blocking apply all wait for room, none starves, the count never
// passes the bound.
TEST(BackpressureTest, FibersOfAThreadShareTheBound) {
  constexpr std::size_t kBound = 64;
  constexpr int kFibers = 8;
  constexpr std::uint64_t kEach = kOps / 100;
  const gossamer::Options o = bounded(3, kBound);
  std::size_t max_seen = 0;
  std::uint64_t callbacks = 0, blocking = 0;
  long total = 0;
  gossamer::run(o, [&] {
    auto a = gossamer::trustee(1).entrust(0L);
    auto b = gossamer::trustee(2).entrust(0L);
    auto ra = a.ref(), rb = b.ref();
    std::vector<FiberHandle> fs;
    for (int f = 0; f < kFibers; ++f)
      fs.push_back(gossamer::spawn([&, f] {
        for (std::uint64_t i = 0; i < kEach; ++i) {
          if (f == 0 && i % 16 == 0) {
            ra.apply([](long& c) { ++c; });
            ++blocking;
          } else if (i % 2) {
            ra.apply_then([](long& c) { ++c; }, [&] { ++callbacks; });
          } else {
            rb.apply_with_then([](long& c, long by) { c += by; }, [&] { ++callbacks; }, 1L);
          }
          max_seen = std::max(max_seen, gossamer::outstanding_requests());
        }
      }));
    for (auto& h : fs) h.join();
    ASSERT_TRUE(wait_until([&] { return gossamer::outstanding_requests() == 0; }));
    total = a.apply([](long& c) { return c; }) + b.apply([](long& c) { return c; });
  });
  EXPECT_LE(max_seen, kBound);
  EXPECT_EQ(callbacks + blocking, kFibers * kEach);
  EXPECT_EQ(total, long(kFibers * kEach));
}

// A then-callback cannot wait: at the bound it still sends (and the count
// may pass the bound by what callbacks send), and nothing deadlocks.
TEST(BackpressureTest, ThenCallbacksSendWithoutWaiting) {
  const gossamer::Options o = bounded(2, 4);
  std::uint64_t chained = 0;
  gossamer::run(o, [&] {
    auto counter = gossamer::trustee(1).entrust(0L);
    auto ref = counter.ref();
    std::uint64_t* n = &chained;
    for (int i = 0; i < 1000; ++i)
      ref.apply_then([](long& c) { return ++c; },
                     [ref, n](long) { ref.apply_then([](long& c) { ++c; }, [n] { ++*n; }); });
    ASSERT_TRUE(wait_until([&] { return chained == 1000; }));
    EXPECT_EQ(counter.apply([](long& c) { return c; }), 2000);
  });
}

// The bound is optional.
TEST(BackpressureTest, ZeroMeansNoBound) {
  const gossamer::Options o = bounded(2, 0);
  std::size_t max_seen = 0;
  gossamer::run(o, [&] {
    auto counter = gossamer::trustee(1).entrust(0L);
    auto ref = counter.ref();
    HoldThread1 hold;
    for (int i = 0; i < 5000; ++i) {
      ref.apply_then([](long& c) { ++c; }, [] {});
      max_seen = std::max(max_seen, gossamer::outstanding_requests());
    }
  });
  EXPECT_GT(max_seen, gossamer::Options{}.max_outstanding);
}

// The bound of the most `apply_then` a thread left outstanding: 20000 sent
// from one fiber, with Options::max_outstanding = `bound`.
std::size_t max_outstanding_seen(std::size_t bound) {
  std::size_t max_seen = 0;
  gossamer::run(bounded(2, bound), [&] {
    auto counter = gossamer::trustee(1).entrust(0L);
    auto ref = counter.ref();
    HoldThread1 hold;
    for (int i = 0; i < 20000; ++i) {
      ref.apply_then([](long& c) { ++c; }, [] {});
      max_seen = std::max(max_seen, gossamer::outstanding_requests());
    }
  });
  return max_seen;
}

// runtime.max_outstanding in the GOSSAMER_CONFIG file replaces the
// program's value; a file without it leaves the program's value.
TEST(BackpressureTest, ConfigFileSetsTheBound) {
  const std::string path = testing::TempDir() + "backpressure_config.yaml";
  const auto write = [&](const char* text) { std::ofstream(path) << text; };
  write("runtime:\n  max_outstanding: 48\n");
  ASSERT_EQ(::setenv("GOSSAMER_CONFIG", path.c_str(), 1), 0);
  const std::size_t from_file = max_outstanding_seen(1000);
  write("runtime:\n  polling: adaptive\n");
  const std::size_t from_program = max_outstanding_seen(100);
  ::unsetenv("GOSSAMER_CONFIG");
  std::remove(path.c_str());
  EXPECT_EQ(from_file, 48u);
  EXPECT_EQ(from_program, 100u);
}

}  // namespace
