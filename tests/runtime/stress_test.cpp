// Many fibers on more threads than cores, and dedicated trustee threads.
#include <array>
#include <atomic>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::FiberHandle;
using gossamer::Trust;
using gossamer::TrustRef;
using gossamer_test::Rng;
using gossamer_test::wait_until;

struct Acc {
  std::uint64_t sum = 0;
  std::uint64_t count = 0;
  std::size_t owner = ~std::size_t(0);  // the trustee thread, set after entrust
  std::uint64_t wrong_thread = 0;
};

std::atomic<long> g_bad_results{0};
std::atomic<long> g_ops{0};

constexpr int kThreads = 8;
constexpr int kFibers = 1000;
constexpr int kOpsPerFiber = 50;
constexpr int kProps = 32;

std::uint32_t value_of(std::uint64_t r) { return std::uint32_t(r % 1000) + 1; }

// 8 threads × 1000 fibers in all, each doing 50 applies (blocking and
// apply_then) to random properties on random trustees; sums must be exact.
TEST(StressTest, EightThreadsThousandFibers) {
  g_bad_results = 0;
  g_ops = 0;
  std::vector<Acc> finals;
  gossamer::run(kThreads, [&finals] {
    std::vector<Trust<Acc>> props;
    std::array<TrustRef<Acc>, kProps> refs;
    for (int i = 0; i < kProps; ++i) {
      props.push_back(gossamer::entrust(Acc{}));
      props.back().apply_with([](Acc& a, std::size_t o) { a.owner = o; }, props.back().trustee_index());
      refs[std::size_t(i)] = props.back().ref();
    }
    std::vector<FiberHandle> hs;
    hs.reserve(kFibers);
    for (int f = 0; f < kFibers; ++f) {
      hs.push_back(gossamer::spawn_on(std::size_t(f % kThreads), [refs, f] {
        Rng rng{std::uint64_t(f)};
        int pending = 0;
        for (int op = 0; op < kOpsPerFiber; ++op) {
          std::size_t k = rng.below(kProps);
          std::uint32_t v = value_of(rng.next());
          auto body = [](Acc& a, std::uint32_t x) {
            a.sum += x;
            ++a.count;
            if (gossamer::thread_index() != a.owner) ++a.wrong_thread;
            return x * 3u + 1u;
          };
          if (op % 2 == 0) {
            if (refs[k].apply_with(body, v) != v * 3u + 1u) g_bad_results.fetch_add(1);
          } else {
            ++pending;
            refs[k].apply_with_then(
                body,
                [v, &pending](std::uint32_t r) {
                  if (r != v * 3u + 1u) g_bad_results.fetch_add(1);
                  --pending;
                },
                v);
          }
          g_ops.fetch_add(1, std::memory_order_relaxed);
          if (op % 10 == 9) gossamer::yield();
        }
        if (!wait_until([&pending] { return pending == 0; })) g_bad_results.fetch_add(1000000);
      }));
    }
    for (auto& h : hs) h.join();
    for (auto& p : props) finals.push_back(p.apply([](Acc& a) { return a; }));
  });
  // Replay every fiber's choices.
  std::array<std::uint64_t, kProps> sum{}, count{};
  for (int f = 0; f < kFibers; ++f) {
    Rng rng{std::uint64_t(f)};
    for (int op = 0; op < kOpsPerFiber; ++op) {
      std::size_t k = rng.below(kProps);
      sum[k] += value_of(rng.next());
      ++count[k];
    }
  }
  EXPECT_EQ(g_ops.load(), long(kFibers) * kOpsPerFiber);
  EXPECT_EQ(g_bad_results.load(), 0);
  ASSERT_EQ(finals.size(), std::size_t(kProps));
  std::set<std::size_t> owners;
  for (std::size_t k = 0; k < kProps; ++k) {
    EXPECT_EQ(finals[k].sum, sum[k]) << "property " << k;
    EXPECT_EQ(finals[k].count, count[k]) << "property " << k;
    EXPECT_EQ(finals[k].wrong_thread, 0u) << "property " << k;
    owners.insert(finals[k].owner);
  }
  EXPECT_EQ(owners.size(), std::size_t(kThreads)) << "entrust did not use every trustee";
}

TEST(StressTest, DedicatedTrustees) {
  g_bad_results = 0;
  gossamer::Options o{.threads = 4, .dedicated_trustees = 2};
  std::vector<std::size_t> placed;
  long total = 0;
  gossamer::run(o, [&] {
    std::vector<Trust<long>> props;
    for (int i = 0; i < 8; ++i) props.push_back(gossamer::entrust(0L));
    for (auto& p : props) placed.push_back(p.trustee_index());
    // entrust from a client fiber on thread 1 too.
    auto sink = gossamer::local_trustee().entrust(std::vector<std::size_t>{});
    auto sr = sink.ref();
    gossamer::spawn_on(1, [sr] {
      for (int i = 0; i < 4; ++i) {
        auto t = gossamer::entrust(1L);
        sr.apply_with([](std::vector<std::size_t>& v, std::size_t x) { v.push_back(x); }, t.trustee_index());
      }
    }).join();
    for (std::size_t x : sink.apply([](std::vector<std::size_t>& v) { return v; })) placed.push_back(x);
    // Clients on threads 0 and 1 delegate to the dedicated trustees.
    std::array<TrustRef<long>, 8> refs;
    for (std::size_t i = 0; i < 8; ++i) refs[i] = props[i].ref();
    std::vector<FiberHandle> hs;
    for (std::size_t client : {0u, 1u}) {
      for (int f = 0; f < 5; ++f) {
        hs.push_back(gossamer::spawn_on(client, [refs] {
          for (int rep = 0; rep < 20; ++rep)
            for (auto& r : refs) {
              std::size_t at = r.apply([](long& v) {
                ++v;
                return gossamer::thread_index();
              });
              if (at < 2) g_bad_results.fetch_add(1);
            }
        }));
      }
    }
    for (auto& h : hs) h.join();
    for (auto& p : props) total += p.apply([](long& v) { return v; });
  });
  ASSERT_EQ(placed.size(), 12u);
  std::set<std::size_t> used(placed.begin(), placed.end());
  EXPECT_EQ(used, (std::set<std::size_t>{2, 3}));
  EXPECT_EQ(total, 8L * 2 * 5 * 20);
  EXPECT_EQ(g_bad_results.load(), 0) << "a closure ran on a client thread";
}

}  // namespace
