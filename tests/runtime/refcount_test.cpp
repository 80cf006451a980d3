// Reference counting (symmetric difference id sets, papers 001 §5.4): every
// property is destroyed exactly once, never while a Trust to it is alive,
// whatever thread or context copies and drops its Trusts.
#include <atomic>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::FiberHandle;
using gossamer::Trust;
using gossamer::TrustRef;
using gossamer_test::g_tracked_destroyed;
using gossamer_test::kAlive;
using gossamer_test::Rng;
using gossamer_test::Tracked;
using gossamer_test::wait_until;

struct Registry {
  std::vector<Trust<Tracked>> all;
};
struct Bag {
  std::vector<Trust<Tracked>> items;
};

std::atomic<int> g_dead_seen{0};     // an apply found a destroyed property
std::atomic<int> g_stale_seen{0};    // an apply through a held Trust threw stale_trust
std::atomic<long> g_checks{0};       // alive checks done

bool alive(const Tracked& t) { return t.magic == kAlive; }

void check_alive(const Trust<Tracked>& t) {
  try {
    if (!t.apply([](Tracked& p) { return alive(p); })) g_dead_seen.fetch_add(1);
    g_checks.fetch_add(1);
  } catch (const gossamer::stale_trust&) {
    g_stale_seen.fetch_add(1);
  }
}

constexpr int kThreads = 4, kProps = 48, kFibersPerThread = 6, kRounds = 25;

TEST(RefCountTest, ConcurrentCopiesAndDropsDestroyExactlyOnce) {
  g_tracked_destroyed = 0;
  g_dead_seen = 0;
  g_stale_seen = 0;
  g_checks = 0;
  gossamer::run(kThreads, [] {
    auto registry = gossamer::local_trustee().entrust(Registry{});
    for (int i = 0; i < kProps; ++i) {
      auto t = gossamer::entrust(Tracked(i));  // round robin over every thread
      registry.apply_with([](Registry& r, Trust<Tracked> x) { r.all.push_back(std::move(x)); }, t);
    }
    std::vector<Trust<Bag>> bags;
    TrustRef<Bag> bag_refs[kThreads];
    for (std::size_t i = 0; i < kThreads; ++i) {
      bags.push_back(gossamer::trustee(i).entrust(Bag{}));
      bag_refs[i] = bags.back().ref();
    }
    auto reg = registry.ref();
    std::vector<FiberHandle> hs;
    for (int th = 0; th < kThreads; ++th) {
      for (int f = 0; f < kFibersPerThread; ++f) {
        std::uint64_t seed = std::uint64_t(th * 100 + f);
        hs.push_back(gossamer::spawn_on(std::size_t(th), [reg, seed, bag_refs] {
          Rng rng(seed);
          int pending = 0;
          for (int round = 0; round < kRounds; ++round) {
            int k = int(rng.below(kProps));
            // A Trust that arrives in a response (copied on the registry's trustee).
            Trust<Tracked> t = reg.apply_with([](Registry& r, int i) { return r.all[std::size_t(i)]; }, k);
            Trust<Tracked> c = t;  // a copy on this thread
            check_alive(c);
            // Into a bag, as an apply_with argument. A bag on the Trust's own
            // trustee is used only when that is this thread (see
            // IsolatedDeathTest.TrustArgumentToItsOwnTrustee).
            std::size_t b = rng.below(kThreads);
            if (b == t.trustee_index() && b != gossamer::thread_index()) b = gossamer::thread_index();
            bag_refs[b].apply_with(
                [](Bag& bag, Trust<Tracked> x) {
                  Trust<Tracked> extra = x;  // copies and drops in delegated context
                  bag.items.push_back(std::move(x));
                  if (bag.items.size() > 6) bag.items.erase(bag.items.begin());
                  if (bag.items.size() % 2) bag.items.push_back(extra);
                },
                c);
            // A then-callback holding Trusts, copying and dropping them.
            ++pending;
            c.apply_then([](Tracked& p) { return alive(p); },
                         [held = c, &pending](bool ok) {
                           if (!ok) g_dead_seen.fetch_add(1);
                           Trust<Tracked> again = held;  // copy in a callback
                           Trust<Tracked> moved = std::move(again);
                           --pending;
                         });
            // A local fiber that owns a copy for a while.
            FiberHandle local = gossamer::spawn([c] {
              gossamer::yield();
              check_alive(c);
            });
            // A Trust taken back out of a bag.
            Trust<Tracked> from_bag = bag_refs[rng.below(kThreads)].apply(
                [](Bag& bag) { return bag.items.empty() ? Trust<Tracked>{} : bag.items.front(); });
            if (from_bag) check_alive(from_bag);
            if (round % 3 == 0) local.join();  // else detached
          }
          EXPECT_TRUE(wait_until([&pending] { return pending == 0; }));
        }));
      }
    }
    for (auto& h : hs) h.join();
    EXPECT_EQ(g_tracked_destroyed.load(), 0) << "destroyed while the registry still holds them";
    // Drop everything: the registry, then every bag (in delegated context).
    registry = Trust<Registry>{};
    for (auto& b : bags) b.apply([](Bag& bag) { bag.items.clear(); });
    // Destruction happens while run is still active, by reference counting.
    EXPECT_TRUE(wait_until([] { return g_tracked_destroyed.load() >= kProps; }))
        << g_tracked_destroyed.load() << " of " << kProps << " destroyed";
  });
  EXPECT_EQ(g_tracked_destroyed.load(), kProps);
  EXPECT_EQ(g_dead_seen.load(), 0);
  EXPECT_EQ(g_stale_seen.load(), 0);
  EXPECT_GT(g_checks.load(), 0);
}

TEST(RefCountTest, CopiesMadeAndDroppedInsideClosures) {
  g_tracked_destroyed = 0;
  gossamer::run(3, [] {
    for (std::size_t where = 0; where < 3; ++where) {
      auto t = gossamer::trustee(where).entrust(Tracked(1));
      auto keeper = gossamer::trustee((where + 1) % 3).entrust(Bag{});
      keeper.apply_with(
          [](Bag& b, Trust<Tracked> x) {
            for (int i = 0; i < 20; ++i) b.items.push_back(x);
            for (int i = 0; i < 10; ++i) b.items.pop_back();
          },
          t);
      EXPECT_EQ(keeper.apply([](Bag& b) { return b.items.size(); }), 10u);
      auto r = t.ref();
      t = Trust<Tracked>{};
      EXPECT_EQ(r.apply([](Tracked& p) { return alive(p); }), true);
      keeper.apply([](Bag& b) {
        while (b.items.size() > 1) b.items.pop_back();
      });
      EXPECT_EQ(r.apply([](Tracked& p) { return alive(p); }), true);
      EXPECT_EQ(g_tracked_destroyed.load(), int(where));
      keeper.apply([](Bag& b) { b.items.clear(); });
      EXPECT_TRUE(wait_until([where] { return g_tracked_destroyed.load() == int(where) + 1; }));
    }
  });
  EXPECT_EQ(g_tracked_destroyed.load(), 3);
}

// A node whose Trusts form a cycle is never released by counting; run
// destroys what is left, once, at exit.
struct Node {
  Tracked tracked;
  std::optional<Trust<Node>> next;
};

std::optional<Trust<Tracked>> g_outliving;

TEST(RefCountTest, LeakedCycleDestroyedOnceAtRunExit) {
  g_tracked_destroyed = 0;
  gossamer::run(3, [] {
    auto a = gossamer::trustee(1).entrust(Node{Tracked(1), {}});
    auto b = gossamer::trustee(2).entrust(Node{Tracked(2), {}});
    auto self = gossamer::trustee(0).entrust(Node{Tracked(3), {}});
    auto link = [](Node& n, Trust<Node> to) { n.next = std::move(to); };
    a.apply_with(link, b);
    b.apply_with(link, a);
    self.apply_with(link, self);  // a Trust to itself (local trustee)
    TrustRef<Node> ra = a.ref(), rb = b.ref(), rs = self.ref();
    a = Trust<Node>{};
    b = Trust<Node>{};
    self = Trust<Node>{};
    // Still reachable: each is held by a Trust inside the cycle.
    EXPECT_EQ(ra.apply([](Node& n) { return n.tracked.value; }), 1);
    EXPECT_EQ(rb.apply([](Node& n) { return n.tracked.value; }), 2);
    EXPECT_EQ(rs.apply([](Node& n) { return n.tracked.value; }), 3);
    EXPECT_EQ(g_tracked_destroyed.load(), 0);
    // A Trust that outlives run (held outside the runtime): its property is
    // also cleaned up at exit, and dropping the Trust later is harmless.
    g_outliving = gossamer::trustee(1).entrust(Tracked(4));
  });
  EXPECT_EQ(g_tracked_destroyed.load(), 4);
  g_outliving.reset();
  EXPECT_EQ(g_tracked_destroyed.load(), 4);
}

}  // namespace
