// Latch<T>, launch and launch_then: trustee-side fibers that may block.
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::FiberHandle;
using gossamer::Latch;
using gossamer::Trust;
using gossamer::TrustRef;
using gossamer_test::g_tracked_destroyed;
using gossamer_test::kAlive;
using gossamer_test::Tracked;
using gossamer_test::wait_until;

TEST(LatchTest, LockGuardAndLocked) {
  gossamer::run(1, [] {
    Latch<std::vector<int>> l(std::vector<int>{1});
    EXPECT_FALSE(l.locked());
    {
      auto g = l.lock();
      EXPECT_TRUE(l.locked());
      g->push_back(2);
      (*g).push_back(3);
      auto moved = std::move(g);  // the guard moves; one unlock
      EXPECT_TRUE(l.locked());
    }
    EXPECT_FALSE(l.locked());
    EXPECT_EQ(*l.lock(), (std::vector<int>{1, 2, 3}));
    EXPECT_FALSE(l.locked());
    Latch<std::vector<int>> m(std::move(l));  // unlocked latches move
    EXPECT_EQ(m.lock()->size(), 3u);
  });
}

TEST(LatchTest, MutualExclusionAmongFibersOfOneThread) {
  gossamer::run(1, [] {
    Latch<int> l(0);
    std::vector<FiberHandle> hs;
    for (int f = 0; f < 10; ++f) {
      hs.push_back(gossamer::spawn([&l] {
        for (int i = 0; i < 20; ++i) {
          auto g = l.lock();
          int v = *g;
          gossamer::yield();  // others run, and must wait for the latch
          *g = v + 1;
        }
      }));
    }
    for (auto& h : hs) h.join();
    EXPECT_EQ(*l.lock(), 200);
  });
}

TEST(LaunchTest, ReturnsValueAndRunsOnTheTrusteeThread) {
  gossamer::run(3, [] {
    for (std::size_t where = 0; where < 3; ++where) {
      auto lt = gossamer::trustee(where).entrust(Latch<int>(5));
      auto [v, thread] = lt.launch([](Latch<int>& l) {
        auto g = l.lock();
        *g += 1;
        return std::make_pair(*g, gossamer::thread_index());
      });
      EXPECT_EQ(v, 6);
      EXPECT_EQ(thread, where);
      static_assert(std::is_void_v<decltype(lt.launch([](Latch<int>& l) { *l.lock() += 1; }))>);
      lt.launch([](Latch<int>& l) { *l.lock() += 1; });
      EXPECT_EQ(lt.apply([](Latch<int>& l) { return *l.lock(); }), 7);  // apply on a latch too
      // launch through a TrustRef.
      TrustRef<Latch<int>> r = lt.ref();
      EXPECT_EQ(r.launch([](Latch<int>& l) { return *l.lock() * 2; }), 14);
      std::string s = lt.launch([](Latch<int>& l) { return std::string(std::size_t(*l.lock()), 'x'); });
      EXPECT_EQ(s, "xxxxxxx");
    }
  });
}

TEST(LaunchTest, LaunchThenCallbackOnCallingThread) {
  gossamer::run(3, [] {
    auto lt = gossamer::trustee(2).entrust(Latch<std::string>(std::string("L")));
    std::string got;
    std::size_t cb_thread = 99;
    lt.launch_then(
        [](Latch<std::string>& l) {
          auto g = l.lock();
          gossamer::yield();  // a launched closure may block (holding the latch)
          return *g + "!";
        },
        [&](std::string s) {
          got = std::move(s);
          cb_thread = gossamer::thread_index();
        });
    bool void_done = false;
    lt.ref().launch_then([](Latch<std::string>& l) { *l.lock() += "v"; }, [&] { void_done = true; });
    ASSERT_TRUE(wait_until([&] { return !got.empty() && void_done; }));
    EXPECT_EQ(got, "L!");
    EXPECT_EQ(cb_thread, 0u);
    EXPECT_EQ(lt.apply([](Latch<std::string>& l) { return *l.lock(); }), "Lv");
  });
}

// Two launched closures on one latch: the first holds the lock across a
// blocking apply, the second must wait for it.
TEST(LaunchTest, TwoLaunchesTakeTurnsOnTheLatch) {
  gossamer::run(2, [] {
    auto counter = gossamer::local_trustee().entrust(0);
    auto cr = counter.ref();
    struct State {
      std::vector<int> trace;
      bool second_saw_locked = false;
    };
    auto lt = gossamer::trustee(1).entrust(Latch<State>{});
    int done = 0;
    lt.launch_then(
        [cr](Latch<State>& l) {
          auto g = l.lock();
          g->trace.push_back(1);
          for (int i = 0; i < 5; ++i) cr.apply([](int& c) { ++c; });  // blocks, holding the latch
          g->trace.push_back(2);
        },
        [&done] { ++done; });
    lt.launch_then(
        [](Latch<State>& l) {
          bool was_locked = l.locked();
          auto g = l.lock();
          g->second_saw_locked = was_locked;
          g->trace.push_back(3);
          g->trace.push_back(4);
        },
        [&done] { ++done; });
    ASSERT_TRUE(wait_until([&] { return done == 2; }));
    auto [trace, saw] = lt.launch([](Latch<State>& l) {
      auto g = l.lock();
      return std::make_pair(g->trace, g->second_saw_locked);
    });
    EXPECT_EQ(trace, (std::vector<int>{1, 2, 3, 4}));  // never interleaved
    EXPECT_TRUE(saw) << "the second closure did not find the latch held";
    EXPECT_EQ(counter.apply([](int& c) { return c; }), 5);
  });
}

TEST(LaunchTest, ContendedFromEveryThread) {
  constexpr int kFibers = 4, kRounds = 10;
  gossamer::run(4, [] {
    auto lt = gossamer::trustee(3).entrust(Latch<long>(0));
    auto r = lt.ref();
    std::vector<FiberHandle> hs;
    for (std::size_t t = 0; t < 4; ++t) {
      for (int f = 0; f < kFibers; ++f) {
        hs.push_back(gossamer::spawn_on(t, [r] {
          for (int i = 0; i < kRounds; ++i) {
            r.launch([](Latch<long>& l) {
              auto g = l.lock();
              long v = *g;
              gossamer::yield();  // lost updates would show without exclusion
              *g = v + 1;
            });
          }
        }));
      }
    }
    for (auto& h : hs) h.join();
    EXPECT_EQ(lt.apply([](Latch<long>& l) { return *l.lock(); }), 4L * kFibers * kRounds);
  });
}

TEST(LaunchTest, NestedBlockingDelegationInside) {
  gossamer::run(3, [] {
    auto a = gossamer::trustee(0).entrust(10);
    auto b = gossamer::trustee(2).entrust(std::string("b"));
    auto inner = gossamer::trustee(2).entrust(Latch<int>(100));
    auto lt = gossamer::trustee(1).entrust(Latch<std::vector<int>>{});
    auto ar = a.ref();
    auto br = b.ref();
    auto ir = inner.ref();
    int r = lt.launch([ar, br, ir](Latch<std::vector<int>>& l) {
      auto g = l.lock();  // held across everything below
      g->push_back(ar.apply([](int& x) { return ++x; }));  // remote apply
      g->push_back(int(br.apply_with([](std::string& s, std::string t) { return (s += t).size(); },
                                     std::string("cd"))));
      g->push_back(ir.launch([](Latch<int>& il) { return *il.lock() + 1; }));  // nested launch
      auto local = gossamer::local_trustee().entrust(7);  // entrust and apply on this thread
      g->push_back(local.apply([](int& x) { return x * 2; }));
      auto far = gossamer::trustee(0).entrust(8);  // entrust on another thread blocks
      g->push_back(far.apply([](int& x) { return x; }));
      int from_fiber = 0;
      gossamer::spawn([&from_fiber, ar] { from_fiber = ar.apply([](int& x) { return x; }); }).join();
      g->push_back(from_fiber);
      gossamer::spawn_on(2, [br] { br.apply([](std::string& s) { s += "!"; }); }).join();
      gossamer::yield();
      return int(g->size());
    });
    EXPECT_EQ(r, 6);
    auto v = lt.apply([](Latch<std::vector<int>>& l) { return *l.lock(); });
    EXPECT_EQ(v, (std::vector<int>{11, 3, 101, 14, 8, 11}));
    EXPECT_EQ(b.apply([](std::string& s) { return s; }), "bcd!");
  });
}

TEST(LaunchTest, ExceptionArrivesAsRemoteError) {
  gossamer::run(2, [] {
    for (std::size_t where : {0u, 1u}) {
      auto lt = gossamer::trustee(where).entrust(Latch<int>(1));
      try {
        lt.launch([](Latch<int>& l) -> int {
          gossamer::yield();
          if (*l.lock() == 1) throw std::runtime_error("latch said no");
          return 0;
        });
        ADD_FAILURE() << "no exception";
      } catch (const gossamer::remote_error& e) {
        EXPECT_NE(std::string(e.what()).find("latch said no"), std::string::npos) << e.what();
      }
      EXPECT_EQ(lt.launch([](Latch<int>& l) { return *l.lock(); }), 1);  // still usable, unlocked
    }
  });
}

// A launched closure pins its latch: dropping every Trust meanwhile defers
// the destruction until the closure ends, then it happens once.
TEST(LaunchTest, LatchOutlivesItsTrustsWhileLaunched) {
  g_tracked_destroyed = 0;
  gossamer::run(2, [] {
    auto lt = gossamer::trustee(1).entrust(Latch<Tracked>(Tracked(3)));
    auto r = lt.ref();
    long got = 0;
    lt.launch_then(
        [](Latch<Tracked>& l) {
          for (int i = 0; i < 500; ++i) gossamer::yield();
          auto g = l.lock();
          return (g->magic == kAlive && g_tracked_destroyed.load() == 0) ? g->value : -1L;
        },
        [&got](long v) { got = v; });
    lt = Trust<Latch<Tracked>>{};  // the last Trust, while the closure runs
    EXPECT_THROW(r.apply([](Latch<Tracked>& l) { return l.locked(); }), gossamer::stale_trust);
    ASSERT_TRUE(wait_until([&] { return got != 0; }));
    EXPECT_EQ(got, 3);
    ASSERT_TRUE(wait_until([] { return g_tracked_destroyed.load() == 1; }));
  });
  EXPECT_EQ(g_tracked_destroyed.load(), 1);
}

}  // namespace
