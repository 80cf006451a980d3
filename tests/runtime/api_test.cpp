// Every call of the runtime API: run, trustees and entrust, Trust copies,
// apply / apply_then / apply_with / apply_with_then, TrustRef, fibers.
#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::FiberHandle;
using gossamer::Trust;
using gossamer::TrustRef;
using gossamer_test::g_tracked_destroyed;
using gossamer_test::kAlive;
using gossamer_test::Tracked;
using gossamer_test::wait_until;

// A user type with a cereal serialize member.
struct Person {
  std::string name;
  std::vector<int> scores;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(name, scores);
  }
  bool operator==(const Person&) const = default;
};

// A trivially copyable type: travels as raw bytes.
struct Point {
  int x;
  double y;
  char tag;
  bool operator==(const Point&) const = default;
};
static_assert(std::is_trivially_copyable_v<Point>);

// ---- run -------------------------------------------------------------------

TEST(RunTest, ReturnsTheIntMainReturns) {
  EXPECT_EQ(gossamer::run(1, [] { return 42; }), 42);
  EXPECT_EQ(gossamer::run(3, [] { return -7; }), -7);
  int ran = 0;
  EXPECT_EQ(gossamer::run(2, [&] { ++ran; }), 0);  // void main: 0
  EXPECT_EQ(ran, 1);
}

TEST(RunTest, OptionsOverloadAndBusyPolling) {
  gossamer::Options o;
  o.threads = 3;
  o.polling = gossamer::Polling::busy;
  int r = gossamer::run(o, [] {
    auto t = gossamer::trustee(2).entrust(10);
    for (int i = 0; i < 100; ++i) t.apply([](int& v) { ++v; });
    return t.apply([](int& v) { return v; });
  });
  EXPECT_EQ(r, 110);
}

TEST(RunTest, CanRunSeveralTimesInOneProcess) {
  for (int i = 0; i < 5; ++i) {
    int r = gossamer::run(2, [i] {
      auto t = gossamer::trustee(1).entrust(i);
      return t.apply([](int& v) { return v * 2; });
    });
    EXPECT_EQ(r, 2 * i);
  }
}

// run returns only when every fiber, detached ones included, has finished.
std::atomic<int> g_detached_done{0};

TEST(RunTest, WaitsForDetachedFibersOnEveryThread) {
  g_detached_done = 0;
  gossamer::run(4, [] {
    for (std::size_t t = 0; t < gossamer::thread_count(); ++t) {
      // Handle dropped at once: detached.
      gossamer::spawn_on(t, [] {
        for (int i = 0; i < 2000; ++i) gossamer::yield();
        g_detached_done.fetch_add(1);
      });
    }
    {
      FiberHandle h = gossamer::spawn([] {
        for (int i = 0; i < 3000; ++i) gossamer::yield();
        g_detached_done.fetch_add(10);
      });
      EXPECT_TRUE(h.joinable());
    }  // dropped without join
  });
  EXPECT_EQ(g_detached_done.load(), 4 + 10);
}

TEST(RunTest, ThreadAndHostQueries) {
  std::atomic<int> checked{0};
  gossamer::run(3, [&] {
    EXPECT_EQ(gossamer::thread_count(), 3u);
    EXPECT_EQ(gossamer::thread_index(), 0u);  // main runs on thread 0
    EXPECT_EQ(gossamer::host_index(), 0u);
    EXPECT_EQ(gossamer::host_count(), 1u);
    std::vector<FiberHandle> hs;
    for (std::size_t t = 0; t < 3; ++t) {
      hs.push_back(gossamer::spawn_on(t, [t, &checked] {
        EXPECT_EQ(gossamer::thread_index(), t);
        EXPECT_EQ(gossamer::thread_count(), 3u);
        EXPECT_EQ(gossamer::host_index(), 0u);
        EXPECT_EQ(gossamer::host_count(), 1u);
        checked.fetch_add(1);
      }));
    }
    for (auto& h : hs) h.join();
  });
  EXPECT_EQ(checked.load(), 3);
}

// ---- trustees and entrust --------------------------------------------------

TEST(EntrustTest, TrusteeIndexAndWhereClosuresRun) {
  gossamer::run(4, [] {
    for (std::size_t i = 0; i < 4; ++i) {
      auto t = gossamer::trustee(i).entrust(int(i) * 10);
      EXPECT_EQ(t.trustee_index(), i);
      EXPECT_EQ(gossamer::trustee(i).index(), i);
      EXPECT_EQ(t.apply([](int& v) { return std::make_pair(v, gossamer::thread_index()); }),
                std::make_pair(int(i) * 10, i));
    }
    auto l = gossamer::local_trustee().entrust(std::string("here"));
    EXPECT_EQ(l.trustee_index(), 0u);
    EXPECT_EQ(gossamer::local_trustee().index(), 0u);
    // local_trustee() on another thread names that thread.
    gossamer::spawn_on(2, [] {
      auto t = gossamer::local_trustee().entrust(5);
      EXPECT_EQ(t.trustee_index(), 2u);
      EXPECT_EQ(t.apply([](int& v) { return v + int(gossamer::thread_index()); }), 7);
    }).join();
  });
}

TEST(EntrustTest, RoundRobinOverAllTrustees) {
  gossamer::run(4, [] {
    std::vector<Trust<int>> ts;
    for (int i = 0; i < 12; ++i) ts.push_back(gossamer::entrust(i));
    std::set<std::size_t> first;
    for (int i = 0; i < 4; ++i) first.insert(ts[i].trustee_index());
    EXPECT_EQ(first, (std::set<std::size_t>{0, 1, 2, 3}));
    for (int i = 4; i < 12; ++i) EXPECT_EQ(ts[i].trustee_index(), ts[i - 4].trustee_index()) << i;
    for (int i = 0; i < 12; ++i) {
      auto [v, where] = ts[i].apply([](int& x) { return std::make_pair(x, gossamer::thread_index()); });
      EXPECT_EQ(v, i);
      EXPECT_EQ(where, ts[i].trustee_index());
    }
  });
}

// ---- Trust copies and moves --------------------------------------------------

TEST(TrustTest, CopyMoveAssignShareOneProperty) {
  g_tracked_destroyed = 0;
  for (std::size_t where : {0u, 1u}) {
    g_tracked_destroyed = 0;
    gossamer::run(2, [where] {
      auto inc = [](Tracked& p) { return ++p.value; };
      auto read = [](Tracked& p) { return p.value; };
      Trust<Tracked> t = gossamer::trustee(where).entrust(Tracked(5));
      EXPECT_TRUE(t);
      Trust<Tracked> c = t;  // copy: a new reference, not a new property
      EXPECT_TRUE(c);
      EXPECT_TRUE(t);
      EXPECT_EQ(c.trustee_index(), where);
      EXPECT_EQ(c.apply(inc), 6);
      EXPECT_EQ(t.apply(read), 6);

      Trust<Tracked> m = std::move(c);
      EXPECT_FALSE(c);  // NOLINT(bugprone-use-after-move): moved-from is empty
      EXPECT_TRUE(m);
      EXPECT_EQ(m.apply(inc), 7);

      Trust<Tracked> a;
      EXPECT_FALSE(a);
      a = t;  // copy-assign
      EXPECT_TRUE(a);
      Trust<Tracked>& alias = a;
      a = alias;  // self-assign keeps it
      EXPECT_TRUE(a);
      a = std::move(m);  // move-assign releases a's old reference
      EXPECT_FALSE(m);   // NOLINT(bugprone-use-after-move)
      EXPECT_EQ(a.apply(inc), 8);

      TrustRef<Tracked> r = t.ref();
      t = Trust<Tracked>{};  // drop the original: a still holds it
      EXPECT_FALSE(t);
      EXPECT_EQ(r.apply(read), 8);
      EXPECT_EQ(g_tracked_destroyed.load(), 0);
      a = Trust<Tracked>{};  // the last reference
      // The drop travels before the next request on the same channel.
      EXPECT_THROW(r.apply(read), gossamer::stale_trust);
      EXPECT_EQ(g_tracked_destroyed.load(), 1);
    });
    EXPECT_EQ(g_tracked_destroyed.load(), 1) << "trustee " << where;
  }
}

TEST(TrustTest, TrustRefIsTriviallyCopyableTrustIsNot) {
  static_assert(std::is_trivially_copyable_v<TrustRef<std::string>>);
  static_assert(!std::is_trivially_copyable_v<Trust<int>>);
  static_assert(std::is_copy_constructible_v<Trust<int>>);
  SUCCEED();
}

// ---- apply ---------------------------------------------------------------------

TEST(ApplyTest, VoidAndValueResultsLocalAndRemote) {
  gossamer::run(3, [] {
    for (std::size_t where = 0; where < 3; ++where) {
      auto t = gossamer::trustee(where).entrust(std::vector<int>{});
      static_assert(std::is_void_v<decltype(t.apply([](std::vector<int>& v) { v.push_back(1); }))>);
      t.apply([](std::vector<int>& v) { v.push_back(1); });
      t.apply([](std::vector<int>& v) { v.push_back(2); });
      std::vector<int> copy = t.apply([](std::vector<int>& v) { return v; });
      EXPECT_EQ(copy, (std::vector<int>{1, 2}));
      double d = t.apply([](std::vector<int>& v) { return v.size() * 1.5; });
      EXPECT_DOUBLE_EQ(d, 3.0);
      std::string s = t.apply([](std::vector<int>& v) { return std::to_string(v.back()); });
      EXPECT_EQ(s, "2");
    }
  });
}

TEST(ApplyTest, FromFibersOnSeveralThreads) {
  constexpr int kPer = 200;
  long total = gossamer::run(4, [] {
    auto counter = gossamer::trustee(1).entrust(0L);
    auto r = counter.ref();
    std::vector<FiberHandle> hs;
    for (std::size_t t = 0; t < 4; ++t) {
      for (int f = 0; f < 3; ++f) {
        hs.push_back(gossamer::spawn_on(t, [r, t] {
          for (int i = 0; i < kPer; ++i) {
            long before = r.apply([t](long& c) {
              long b = c;
              c += long(t) + 1;
              return b;
            });
            EXPECT_GE(before, 0);
          }
        }));
      }
    }
    for (auto& h : hs) h.join();
    return int(counter.apply([](long& c) { return c; }));
  });
  EXPECT_EQ(total, 3L * kPer * (1 + 2 + 3 + 4));
}

// ---- apply_then ------------------------------------------------------------------

TEST(ApplyThenTest, CallbackRunsOnTheCallingThread) {
  std::vector<std::size_t> seen_threads;  // reported by fibers through a property
  gossamer::run(3, [&] {
    auto log = gossamer::local_trustee().entrust(std::vector<std::size_t>{});
    auto logr = log.ref();
    for (std::size_t where = 0; where < 3; ++where) {
      auto t = gossamer::trustee(where).entrust(100);
      // From main (thread 0).
      int got = -1;
      std::size_t cb_thread = 99;
      t.apply_then([](int& v) { return ++v; },
                   [&](int r) {
                     got = r;
                     cb_thread = gossamer::thread_index();
                   });
      ASSERT_TRUE(wait_until([&] { return got != -1; }));
      EXPECT_EQ(got, 101);
      EXPECT_EQ(cb_thread, 0u);
      // From a fiber on thread 2 and on thread 1.
      auto r = t.ref();
      for (std::size_t from : {2u, 1u}) {
        gossamer::spawn_on(from, [r, logr] {
          std::size_t cb = 99;
          bool done = false;
          r.apply_then([](int& v) { return v; },
                       [&](int) {
                         cb = gossamer::thread_index();
                         done = true;
                       });
          EXPECT_TRUE(wait_until([&] { return done; }));
          logr.apply_with([](std::vector<std::size_t>& v, std::size_t x) { v.push_back(x); }, cb);
        }).join();
      }
    }
    seen_threads = log.apply([](std::vector<std::size_t>& v) { return v; });
  });
  EXPECT_EQ(seen_threads, (std::vector<std::size_t>{2, 1, 2, 1, 2, 1}));
}

TEST(ApplyThenTest, VoidResultAndManyOutstandingInOrder) {
  gossamer::run(2, [] {
    for (std::size_t where : {0u, 1u}) {
      auto t = gossamer::trustee(where).entrust(0);
      std::vector<int> results;
      int voids = 0;
      for (int i = 0; i < 300; ++i) {
        t.apply_then([](int& v) { ++v; }, [&voids] { ++voids; });
        t.apply_then([](int& v) { return v; }, [&results](int r) { results.push_back(r); });
      }
      ASSERT_TRUE(wait_until([&] { return results.size() == 300; }));
      EXPECT_EQ(voids, 300);
      for (int i = 0; i < 300; ++i) ASSERT_EQ(results[i], i + 1) << "then callbacks out of order";
    }
  });
}

TEST(ApplyThenTest, CallbackMayCaptureAnythingAndDelegateAgain) {
  gossamer::run(2, [] {
    auto a = gossamer::trustee(1).entrust(1);
    auto b = gossamer::trustee(0).entrust(2);
    std::string captured(300, 'q');
    auto owner = std::make_unique<int>(5);
    int final_b = 0;
    bool done = false;
    // A then-callback (delegated context) may call apply_then again.
    a.apply_then([](int& v) { return v * 10; },
                 [&, captured, bref = b.ref(), p = std::move(owner)](int r) {
                   EXPECT_EQ(captured.size(), 300u);
                   bref.apply_with_then([](int& v, int add) { return v += add; },
                                        [&final_b, &done](int nb) {
                                          final_b = nb;
                                          done = true;
                                        },
                                        r + *p);
                 });
    ASSERT_TRUE(wait_until([&] { return done; }));
    EXPECT_EQ(final_b, 2 + 10 + 5);
  });
}

// ---- apply_with / apply_with_then ----------------------------------------------

TEST(ApplyWithTest, SerializedArgumentsLocalAndRemote) {
  gossamer::run(2, [] {
    for (std::size_t where : {0u, 1u}) {
      auto t = gossamer::trustee(where).entrust(std::string("p:"));
      EXPECT_EQ(t.apply_with([](std::string& p, std::string s) { return p + s; }, std::string("abc")),
                "p:abc");
      std::vector<int> v{1, 2, 3, 4};
      EXPECT_EQ(t.apply_with(
                    [](std::string&, std::vector<int> x) {
                      int s = 0;
                      for (int e : x) s += e;
                      return s;
                    },
                    v),
                10);
      EXPECT_EQ(v.size(), 4u);  // the caller's argument is untouched
      // Several arguments, raw and serialized, mixed.
      auto r = t.apply_with(
          [](std::string& p, int a, std::string b, std::vector<int> c, double d, char e) {
            return p + std::to_string(a) + b + std::to_string(c.size()) + std::to_string(int(d * 2)) + e;
          },
          7, std::string("x"), std::vector<int>{9, 9}, 1.5, 'z');
      EXPECT_EQ(r, "p:7x23z");
      // Only raw arguments.
      EXPECT_EQ(t.apply_with([](std::string& p, int a, long b, char c) { return long(p.size()) + a + b + c; },
                             1, 2L, char(3)),
                2 + 1 + 2 + 3);
      // A user struct with serialize, both ways.
      Person in{"ada", {3, 1, 4}};
      Person out = t.apply_with(
          [](std::string& p, Person x) {
            x.name = p + x.name;
            x.scores.push_back(int(x.scores.size()));
            return x;
          },
          in);
      EXPECT_EQ(out, (Person{"p:ada", {3, 1, 4, 3}}));
      // A trivially copyable struct, both ways.
      Point pt = t.apply_with([](std::string&, Point q) { return Point{q.x + 1, q.y * 2, char(q.tag + 1)}; },
                              Point{41, 1.25, 'a'});
      EXPECT_EQ(pt, (Point{42, 2.5, 'b'}));
      // An empty string and an empty vector.
      EXPECT_EQ(t.apply_with([](std::string&, std::string s, std::vector<int> e) { return s.size() + e.size(); },
                             std::string(), std::vector<int>{}),
                0u);
    }
  });
}

TEST(ApplyWithTest, ApplyWithThen) {
  gossamer::run(2, [] {
    for (std::size_t where : {0u, 1u}) {
      auto t = gossamer::trustee(where).entrust(std::vector<std::string>{});
      std::vector<std::size_t> sizes;
      for (int i = 0; i < 20; ++i) {
        t.apply_with_then(
            [](std::vector<std::string>& v, std::string s, int n) {
              v.push_back(s + std::to_string(n));
              return v.size();
            },
            [&sizes](std::size_t n) { sizes.push_back(n); }, std::string(i, 'k'), i);
      }
      bool void_done = false;
      t.apply_with_then([](std::vector<std::string>& v, Person p) { v.push_back(p.name); },
                        [&void_done] { void_done = true; }, Person{"end", {}});
      ASSERT_TRUE(wait_until([&] { return sizes.size() == 20 && void_done; }));
      for (int i = 0; i < 20; ++i) EXPECT_EQ(sizes[i], std::size_t(i + 1));
      auto all = t.apply([](std::vector<std::string>& v) { return v; });
      ASSERT_EQ(all.size(), 21u);
      EXPECT_EQ(all[3], "kkk3");
      EXPECT_EQ(all[20], "end");
    }
  });
}

// ---- TrustRef --------------------------------------------------------------------

TEST(TrustRefTest, ApplyApplyThenApplyWith) {
  gossamer::run(3, [] {
    for (std::size_t where = 0; where < 3; ++where) {
      auto t = gossamer::trustee(where).entrust(std::string("r"));
      TrustRef<std::string> r = t.ref();
      EXPECT_EQ(r.trustee_index(), where);
      r.apply([](std::string& s) { s += "1"; });
      EXPECT_EQ(r.apply([](std::string& s) { return s; }), "r1");
      EXPECT_EQ(r.apply_with([](std::string& s, std::string x) { return s += x; }, std::string("2")), "r12");
      std::string got;
      r.apply_then([](std::string& s) { return s + "!"; }, [&got](std::string v) { got = std::move(v); });
      ASSERT_TRUE(wait_until([&] { return !got.empty(); }));
      EXPECT_EQ(got, "r12!");
      std::string got2;
      r.apply_with_then([](std::string& s, int n) { return s + std::to_string(n); },
                        [&got2](std::string v) { got2 = std::move(v); }, 3);
      ASSERT_TRUE(wait_until([&] { return !got2.empty(); }));
      EXPECT_EQ(got2, "r123");
      // A TrustRef captured by a fiber on another thread.
      gossamer::spawn_on((where + 1) % 3, [r] {
        r.apply([](std::string& s) { s += "f"; });
      }).join();
      EXPECT_EQ(t.apply([](std::string& s) { return s; }), "r12f");
      // A TrustRef can itself be returned from a closure and passed around.
      auto holder = gossamer::trustee((where + 2) % 3).entrust(r);
      auto back = holder.apply([](TrustRef<std::string>& h) { return h; });
      EXPECT_EQ(back.apply([](std::string& s) { return s.size(); }), 4u);
    }
  });
}

// ---- fibers ------------------------------------------------------------------------

TEST(FiberTest, SpawnJoinAnyCallable) {
  gossamer::run(2, [] {
    std::string text(1000, 'a');
    auto t = gossamer::local_trustee().entrust(0);
    auto remote = gossamer::trustee(1).entrust(0);
    int out = 0;
    // spawn never leaves the thread: it may capture a string, a Trust, references.
    FiberHandle h = gossamer::spawn([text, t, remote, &out] {
      EXPECT_EQ(gossamer::thread_index(), 0u);
      t.apply([](int& v) { v = 3; });
      remote.apply([](int& v) { v = 4; });  // may block
      out = int(text.size());
    });
    EXPECT_TRUE(h.joinable());
    h.join();
    EXPECT_FALSE(h.joinable());
    EXPECT_EQ(out, 1000);
    EXPECT_EQ(t.apply([](int& v) { return v; }), 3);
    EXPECT_EQ(remote.apply([](int& v) { return v; }), 4);
    // Joining a fiber that has already finished.
    bool ran = false;
    FiberHandle quick = gossamer::spawn([&ran] { ran = true; });
    for (int i = 0; i < 10; ++i) gossamer::yield();
    EXPECT_TRUE(ran);
    quick.join();
    // Handles move.
    FiberHandle a = gossamer::spawn([] {});
    FiberHandle b = std::move(a);
    EXPECT_FALSE(a.joinable());  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(b.joinable());
    b.join();
    // Nested: a fiber spawns and joins its own fibers.
    int sum = 0;
    gossamer::spawn([&sum] {
      std::vector<FiberHandle> inner;
      for (int i = 1; i <= 10; ++i) inner.push_back(gossamer::spawn([&sum, i] { sum += i; }));
      for (auto& f : inner) f.join();
    }).join();
    EXPECT_EQ(sum, 55);
  });
}

TEST(FiberTest, SpawnOnJoin) {
  gossamer::run(4, [] {
    auto results = gossamer::local_trustee().entrust(std::vector<int>(4, -1));
    auto rr = results.ref();
    std::vector<FiberHandle> hs;
    for (std::size_t t = 0; t < 4; ++t) {  // includes the calling thread
      hs.push_back(gossamer::spawn_on(t, [rr, t] {
        for (int i = 0; i < 5; ++i) gossamer::yield();
        rr.apply_with([](std::vector<int>& v, std::size_t idx, int val) { v[idx] = val; }, t,
                      int(gossamer::thread_index()) * 100);
      }));
    }
    for (auto& h : hs) {
      EXPECT_TRUE(h.joinable());
      h.join();
      EXPECT_FALSE(h.joinable());
    }
    // join() returned only after each fiber finished: all results are there.
    EXPECT_EQ(results.apply([](std::vector<int>& v) { return v; }), (std::vector<int>{0, 100, 200, 300}));
    // spawn_on from a fiber that is itself on another thread.
    int v = 0;
    auto hop = gossamer::trustee(3).entrust(0);
    auto hr = hop.ref();
    gossamer::spawn_on(1, [hr] {
      gossamer::spawn_on(2, [hr] {
        hr.apply_with([](int& x, int from) { x = from + 40; }, int(gossamer::thread_index()));
      }).join();
    }).join();
    v = hop.apply([](int& x) { return x; });
    EXPECT_EQ(v, 42);
  });
}

std::atomic<bool> g_detached_flag{false};

TEST(FiberTest, DetachedSpawnOnOtherThreadFinishesBeforeRunReturns) {
  g_detached_flag = false;
  gossamer::run(2, [] {
    // The handle is dropped at once; main returns long before the fiber ends.
    gossamer::spawn_on(1, [] {
      for (int i = 0; i < 5000; ++i) gossamer::yield();
      g_detached_flag = true;
    });
  });
  EXPECT_TRUE(g_detached_flag.load());
}

TEST(FiberTest, YieldLetsOtherFibersRun) {
  gossamer::run(1, [] {
    std::string trace;
    auto a = gossamer::spawn([&trace] {
      for (int i = 0; i < 4; ++i) {
        trace += 'a';
        gossamer::yield();
      }
    });
    auto b = gossamer::spawn([&trace] {
      for (int i = 0; i < 4; ++i) {
        trace += 'b';
        gossamer::yield();
      }
    });
    a.join();
    b.join();
    EXPECT_EQ(trace, "abababab");
  });
}

}  // namespace
