// Requests and responses larger than a slot (128 B primary + 1024 B overflow):
// they must arrive intact, alone or batched with others.
#include <array>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/abi/slots.hpp>
#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer_test::wait_until;

// A deterministic string of n bytes that depends on `salt`.
std::string pattern(std::size_t n, int salt) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = char('a' + (i * 7 + std::size_t(salt)) % 26);
  return s;
}

constexpr std::size_t kSlotBytes = gossamer::abi::kPrimaryBytes + gossamer::abi::kOverflowBytes;

TEST(LargeTest, HugeResults) {
  gossamer::run(2, [] {
    for (std::size_t where : {0u, 1u}) {
      auto t = gossamer::trustee(where).entrust(3);
      std::string s = t.apply([](int& salt) { return pattern(100 * 1024, salt); });
      ASSERT_EQ(s.size(), 100u * 1024);
      EXPECT_EQ(s, pattern(100 * 1024, 3));
      std::vector<int> v = t.apply([](int& salt) {
        std::vector<int> r(50000);
        std::iota(r.begin(), r.end(), salt);
        return r;
      });
      ASSERT_EQ(v.size(), 50000u);
      for (int i = 0; i < 50000; ++i) ASSERT_EQ(v[std::size_t(i)], i + 3) << i;
      // And the channel keeps working with small requests afterwards.
      EXPECT_EQ(t.apply([](int& salt) { return salt + 1; }), 4);
    }
  });
}

TEST(LargeTest, HugeArguments) {
  gossamer::run(2, [] {
    for (std::size_t where : {0u, 1u}) {
      auto t = gossamer::trustee(where).entrust(std::string());
      std::string big = pattern(100 * 1024, 5);
      std::size_t n = t.apply_with(
          [](std::string& keep, std::string s) {
            keep = std::move(s);
            return keep.size();
          },
          big);
      EXPECT_EQ(n, big.size());
      EXPECT_TRUE(t.apply_with([](std::string& keep, std::string s) { return keep == s; }, big));
      std::vector<int> vec(30000);
      std::iota(vec.begin(), vec.end(), -100);
      long sum = t.apply_with(
          [](std::string& keep, std::vector<int> v, std::string tail) {
            return std::accumulate(v.begin(), v.end(), 0L) + long(keep.size()) + long(tail.size());
          },
          vec, pattern(5000, 1));
      EXPECT_EQ(sum, std::accumulate(vec.begin(), vec.end(), 0L) + long(big.size()) + 5000);
      // Large argument and large result together.
      std::string echoed = t.apply_with([](std::string&, std::string s) { return s + s; }, pattern(3000, 9));
      EXPECT_EQ(echoed, pattern(3000, 9) + pattern(3000, 9));
    }
  });
}

// Many apply_then outstanding at once, each answered with ~900 bytes: the
// responses of one batch overflow the response slot and must spill.
TEST(LargeTest, ManyOutstandingLargeResponses) {
  gossamer::run(3, [] {
    for (std::size_t where : {0u, 1u, 2u}) {
      auto t = gossamer::trustee(where).entrust(0);
      constexpr int kN = 200;
      int arrived = 0, wrong = 0;
      std::vector<int> order;
      for (int i = 0; i < kN; ++i) {  // no yield in between: one fiber fills the channel
        t.apply_with_then(
            [](int& count, int salt) {
              ++count;
              return pattern(900, salt);
            },
            [&, i](std::string s) {
              if (s != pattern(900, i)) ++wrong;
              order.push_back(i);
              ++arrived;
            },
            i);
      }
      ASSERT_TRUE(wait_until([&] { return arrived == kN; }));
      EXPECT_EQ(wrong, 0);
      for (int i = 0; i < kN; ++i) ASSERT_EQ(order[std::size_t(i)], i);
      EXPECT_EQ(t.apply([](int& c) { return c; }), kN);
    }
  });
}

// Every size around the block boundaries, as argument and as result, both
// blocking and batched.
TEST(LargeTest, EverySizeAroundTheSlotBoundaries) {
  gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(0);
    std::vector<std::size_t> sizes;
    for (std::size_t n = 0; n < 160; ++n) sizes.push_back(n);
    for (std::size_t n = 1000; n < 1200; n += 3) sizes.push_back(n);
    for (std::size_t n = kSlotBytes - 40; n < kSlotBytes + 40; ++n) sizes.push_back(n);
    sizes.push_back(4096);
    sizes.push_back(65536 + 3);
    for (std::size_t n : sizes) {
      std::string r = t.apply_with([](int&, std::string s) { return s + "|"; }, pattern(n, int(n)));
      ASSERT_EQ(r, pattern(n, int(n)) + "|") << "size " << n;
    }
    int arrived = 0, wrong = 0;
    for (std::size_t n : sizes) {
      t.apply_with_then([](int&, std::string s, std::size_t m) { return s.size() == m ? s : std::string("bad"); },
                        [&, n](std::string s) {
                          if (s != pattern(n, int(n) + 1)) ++wrong;
                          ++arrived;
                        },
                        pattern(n, int(n) + 1), n);
    }
    ASSERT_TRUE(wait_until([&] { return arrived == int(sizes.size()); }));
    EXPECT_EQ(wrong, 0);
  });
}

// Closures whose captured bytes alone exceed a slot.
TEST(LargeTest, LargeCapturedClosures) {
  gossamer::run(3, [] {
    std::array<int, 700> table{};  // 2800 bytes, trivially copyable
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = int(i);
    auto t = gossamer::trustee(1).entrust(0L);
    long s = t.apply([table](long& acc) {
      for (int x : table) acc += x;
      return acc;
    });
    EXPECT_EQ(s, 699L * 700 / 2);
    auto r = t.ref();
    gossamer::spawn_on(2, [table, r] {
      r.apply([table](long& acc) { acc += table[699]; });
    }).join();
    EXPECT_EQ(t.apply([](long& acc) { return acc; }), 699L * 700 / 2 + 699);
    auto lt = gossamer::trustee(2).entrust(gossamer::Latch<int>(1));
    std::string big = lt.launch([table](gossamer::Latch<int>& l) {
      return pattern(std::size_t(table[100]) * 1000, *l.lock());  // 100 KB launch result
    });
    EXPECT_EQ(big, pattern(100000, 1));
  });
}

}  // namespace
