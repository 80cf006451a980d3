// A request whose body is a closure without arguments is written and
// closed in one call (detail::send_record, issue 20) instead of through
// RecordWriter; closures larger than detail::kSmallBody and closures with
// arguments keep the general encoder. Closures of every size around the
// 8-byte words and that limit must reach the trustee whole, with apply and
// apply_then, from threads that also serve (both directions at once), and
// their results must come back to the right caller.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

namespace {

template <std::size_t N>
std::array<unsigned char, N> pattern(unsigned salt) {
  std::array<unsigned char, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<unsigned char>(i * 31 + N + salt);
  return a;
}

// The bytes weighted by their position: a byte lost, changed or moved
// changes it. The trustee computes it from the closure it received, the
// client from the bytes it sent.
template <std::size_t N>
long weighted(const std::array<unsigned char, N>& a) {
  long sum = 0;
  for (std::size_t i = 0; i < N; ++i) sum += long(a[i]) * long(i + 1);
  return sum;
}

// Blocking apply and apply_then of a closure of exactly N bytes (the array
// alone: alignment 1, so no padding inside the closure), `reps` times, to a
// counter on `ref`'s trustee; counts mismatches.
template <std::size_t N>
int round_trip(gossamer::TrustRef<long> ref, int reps) {
  int bad = 0;
  int pending = 0;
  for (int r = 0; r < reps; ++r) {
    const auto bytes = pattern<N>(unsigned(r));
    const long want = weighted<N>(bytes);
    auto f = [bytes](long& c) {
      ++c;
      return weighted<N>(bytes);
    };
    static_assert(sizeof(f) == N, "the closure is its N bytes");
    if (ref.apply(f) != want) ++bad;
    ++pending;
    ref.apply_then(f, [&bad, &pending, want](long v) {
      if (v != want) ++bad;
      --pending;
    });
  }
  while (pending) gossamer::yield();
  return bad;
}

template <std::size_t... Ns>
int all_sizes(gossamer::TrustRef<long> ref, int reps) {
  return (round_trip<Ns>(ref, reps) + ...);
}

// The sizes: around a word, around several, and around kSmallBody (240:
// send_record; 241 and up: RecordWriter).
int every_size(gossamer::TrustRef<long> ref, int reps) {
  return all_sizes<1, 7, 8, 9, 15, 16, 17, 100, 232, 233, 236, 240, 241, 248, 300>(ref, reps);
}
constexpr int kSizes = 15;

TEST(SmallRecordTest, ClosuresOfEverySizeArriveWhole) {
  constexpr int kReps = 40;
  int bad0 = -1, bad1 = -1;
  long c0 = 0, c1 = 0;
  gossamer::run(2, [&] {
    auto on0 = gossamer::trustee(0).entrust(0L);
    auto on1 = gossamer::trustee(1).entrust(0L);
    auto r0 = on0.ref(), r1 = on1.ref();
    // Thread 0's fiber sends to thread 1 and thread 1's to thread 0, at once.
    auto h0 = gossamer::spawn_on(0, [r1, &bad0] { bad0 = every_size(r1, kReps); });
    auto h1 = gossamer::spawn_on(1, [r0, &bad1] { bad1 = every_size(r0, kReps); });
    h0.join();
    h1.join();
    c0 = on0.apply([](long& c) { return c; });
    c1 = on1.apply([](long& c) { return c; });
  });
  EXPECT_EQ(bad0, 0);
  EXPECT_EQ(bad1, 0);
  EXPECT_EQ(c1, 2L * kReps * kSizes);
  EXPECT_EQ(c0, 2L * kReps * kSizes);
}

// Many blocking fibers with one-byte closures (the benchmark's shape): each
// gets its own answer, in order.
TEST(SmallRecordTest, ManyFibersGetTheirOwnAnswers) {
  constexpr int kFibers = 40, kIters = 300;
  std::vector<int> bad(kFibers, 0);
  gossamer::run(2, [&] {
    auto t = gossamer::trustee(1).entrust(std::vector<long>(kFibers, 0));
    auto r = t.ref();
    std::vector<gossamer::FiberHandle> fs;
    for (int f = 0; f < kFibers; ++f)
      fs.push_back(gossamer::spawn([r, f, &bad] {
        for (long i = 1; i <= kIters; ++i) {
          long v = r.apply([f](std::vector<long>& c) { return ++c[std::size_t(f)]; });
          if (v != i) ++bad[std::size_t(f)];
        }
      }));
    for (auto& h : fs) h.join();
  });
  for (int f = 0; f < kFibers; ++f) EXPECT_EQ(bad[std::size_t(f)], 0) << "fiber " << f;
}

}  // namespace
