// Cooperative preemption (issue 20, Options::preempt_ops): a fiber that
// applies to its own thread's properties in a loop never waits, so its
// thread serves no other thread's request until the loop ends. With
// preempt_ops set, every that many operations it yields if its thread has
// requests to serve or responses to fetch. In delegated context (a
// closure, a then-callback) nothing yields.
#include <atomic>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer_test::wait_until;

// Far more iterations than the loops below need once the other thread's
// request is served; without preemption they run to this limit.
constexpr long kLimit = 20'000'000;

gossamer::Options preempting(std::size_t threads) {
  gossamer::Options o;
  o.threads = threads;
  o.preempt_ops = 64;
  return o;
}

// Thread 0's fiber loops on a local apply until a flag on thread 0 is set
// by a fiber of thread 1 (through a slot, so thread 0 must serve it).
TEST(PreemptionTest, ALocalApplyLoopLetsItsThreadServe) {
  long iterations = 0;
  gossamer::run(preempting(2), [&] {
    auto flag = gossamer::trustee(0).entrust(false);
    auto counter = gossamer::trustee(0).entrust(0L);
    auto fref = flag.ref();
    auto h = gossamer::spawn_on(1, [fref] { fref.apply([](bool& f) { f = true; }); });
    long i = 0;
    while (i < kLimit && !flag.apply([](bool& f) { return f; })) {
      counter.apply([](long& c) { ++c; });
      ++i;
    }
    iterations = i;
    h.join();
    EXPECT_EQ(counter.apply([](long& c) { return c; }), i);
  });
  EXPECT_LT(iterations, kLimit);
}

// Off (the default), the same loop runs to its limit: thread 0 serves
// nothing while it runs (what preempt_ops is for).
TEST(PreemptionTest, OffByDefault) {
  constexpr long kShort = 200'000;
  long iterations = 0;
  gossamer::run(2, [&] {
    auto flag = gossamer::trustee(0).entrust(false);
    auto fref = flag.ref();
    auto h = gossamer::spawn_on(1, [fref] { fref.apply([](bool& f) { f = true; }); });
    long i = 0;
    while (i < kShort && !flag.apply([](bool& f) { return f; })) ++i;
    iterations = i;
    h.join();
  });
  EXPECT_EQ(iterations, kShort);
}

// The same with apply_then to a local property: it runs inline, and its
// callback at once, in order.
TEST(PreemptionTest, ALocalApplyThenLoopLetsItsThreadServe) {
  long iterations = 0;
  bool in_order = true;
  gossamer::run(preempting(2), [&] {
    auto flag = gossamer::trustee(0).entrust(false);
    auto counter = gossamer::trustee(0).entrust(0L);
    auto fref = flag.ref();
    auto h = gossamer::spawn_on(1, [fref] { fref.apply([](bool& f) { f = true; }); });
    long i = 0, seen = 0;
    long* s = &seen;
    bool* ok = &in_order;
    bool set = false;
    while (i < kLimit && !set) {
      counter.apply_then([](long& c) { return ++c; }, [s, ok](long c) { *ok &= c == ++*s; });
      flag.apply_then([](bool& f) { return f; }, [&set](bool f) { set = f; });
      ++i;
    }
    iterations = i;
    h.join();
    EXPECT_EQ(seen, i);
  });
  EXPECT_LT(iterations, kLimit);
  EXPECT_TRUE(in_order);
}

// In delegated context nothing yields: a closure that issues many local
// apply_then (each a preemption point) keeps its property to itself while
// another thread's fiber waits to increment it, and a closure run for
// another thread does the same.
TEST(PreemptionTest, DelegatedContextNeverYields) {
  constexpr long kOps = 20'000, kInside = 200'000;
  bool changed = true;
  std::vector<long> got;
  std::atomic<bool> sent{false};
  gossamer::run(preempting(2), [&] {
    auto counter = gossamer::trustee(0).entrust(0L);
    auto other = gossamer::trustee(0).entrust(0L);
    auto cref = counter.ref();
    auto oref = other.ref();
    auto stop = gossamer::trustee(1).entrust(false);
    auto sref = stop.ref();
    // Thread 1 increments the counter until told to stop: from its second
    // request on, one is always waiting on thread 0 or about to.
    std::atomic<bool>* sent_p = &sent;  // one process: a pointer may travel
    auto hammer = gossamer::spawn_on(1, [cref, sref, sent_p] {
      while (!sref.apply([](bool& s) { return s; })) {
        cref.apply([](long& c) { ++c; });
        sent_p->store(true);
      }
    });
    ASSERT_TRUE(wait_until([&] { return sent.load(); }));
    // Inline, in this fiber, in delegated context; long enough for thread 1
    // to have sent its next request even on a busy machine.
    changed = counter.apply([oref](long& c) {
      const long start = c;
      for (long i = 0; i < kInside; ++i) oref.apply_then([](long& o) { return ++o; }, [](long) {});
      return c != start;
    });
    stop.apply([](bool& s) { s = true; });
    hammer.join();
    // On thread 1, for thread 0: local apply_then from a closure and from
    // their callbacks.
    auto c1 = gossamer::trustee(1).entrust(0L);
    auto log = gossamer::trustee(1).entrust(std::vector<long>{});
    auto c1ref = c1.ref();
    auto lref = log.ref();
    c1.apply([c1ref, lref](long&) {
      for (long i = 0; i < kOps; ++i)
        c1ref.apply_then([](long& c) { return ++c; },
                         [lref](long c) { lref.apply_then([c](std::vector<long>& v) { v.push_back(c); }, [] {}); });
    });
    got = log.apply([](std::vector<long>& v) { return v; });
    EXPECT_EQ(other.apply([](long& o) { return o; }), kInside);
  });
  EXPECT_FALSE(changed);
  ASSERT_EQ(got.size(), std::size_t(kOps));
  for (long i = 0; i < kOps; ++i) ASSERT_EQ(got[std::size_t(i)], i + 1);
}

constexpr int kThreads = 3;

// Many fibers of a thread, each applying locally in a loop, while other
// threads' fibers use the same properties through slots: every operation
// lands once.
TEST(PreemptionTest, LocalLoopsAndRemoteFibersMix) {
  constexpr int kFibers = 8;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr long kOps = 2'000;
#else
  constexpr long kOps = 20'000;
#endif
  long total = 0;
  gossamer::run(preempting(kThreads), [&] {
    std::vector<gossamer::Trust<long>> counters;
    for (int t = 0; t < kThreads; ++t) counters.push_back(gossamer::trustee(std::size_t(t)).entrust(0L));
    std::vector<gossamer::TrustRef<long>> refs;
    for (auto& c : counters) refs.push_back(c.ref());
    const gossamer::TrustRef<long>* r = refs.data();  // one process: a pointer may travel
    std::vector<gossamer::FiberHandle> hs;
    for (int t = 0; t < kThreads; ++t)
      for (int f = 0; f < kFibers; ++f)
        hs.push_back(gossamer::spawn_on(std::size_t(t), [r, t, f] {
          for (long i = 0; i < kOps; ++i) {
            // Mostly this thread's own counter (inline), sometimes another's.
            std::size_t to = (i + f) % 4 == 0 ? std::size_t((t + 1) % kThreads) : std::size_t(t);
            if (i % 2) r[to].apply([](long& c) { ++c; });
            else r[to].apply_then([](long& c) { ++c; }, [] {});
          }
          // Requests of a thread to a trustee run in order: once this one
          // returns, the fiber's apply_then there have landed.
          r[std::size_t((t + 1) % kThreads)].apply([](long&) {});
        }));
    for (auto& h : hs) h.join();
    for (auto& c : counters) total += c.apply([](long& v) { return v; });
  });
  EXPECT_EQ(total, long(kThreads) * kFibers * kOps);
}

}  // namespace
