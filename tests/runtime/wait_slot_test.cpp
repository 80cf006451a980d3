// A blocking apply or launch whose result is void or raw bytes of at most
// detail::kWaitBytes (32) waits in a WaitSlot that the runtime fills while
// it reads the responses, and decodes it after resuming; larger results
// (and cereal types) decode in their completion, complete_wait (issue 20).
// Results of every size around the words and that limit must come back
// whole to the right caller, from another thread's trustee and inline, and
// a closure's exception must throw the same remote_error on both paths.
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

namespace {

using testing::HasSubstr;

template <std::size_t N>
struct Bytes {
  unsigned char b[N];
};

template <std::size_t N>
Bytes<N> make(long seed) {
  Bytes<N> r{};
  for (std::size_t i = 0; i < N; ++i) r.b[i] = static_cast<unsigned char>(seed * 7 + long(i) * 13 + long(N));
  return r;
}

static_assert(gossamer::detail::kSlotWait<void>);
static_assert(gossamer::detail::kSlotWait<int>);
static_assert(gossamer::detail::kSlotWait<Bytes<32>>);
static_assert(!gossamer::detail::kSlotWait<Bytes<33>>);
static_assert(!gossamer::detail::kSlotWait<std::string>);

// `reps` blocking applies returning N bytes that depend on the request;
// counts results that differ from what the closure computed.
template <std::size_t N>
int round_trip(gossamer::TrustRef<long> ref, int reps) {
  int bad = 0;
  for (int r = 0; r < reps; ++r) {
    const long seed = long(r) * 3 + long(N);
    Bytes<N> got = ref.apply([seed](long& c) {
      ++c;
      return make<N>(seed);
    });
    const Bytes<N> want = make<N>(seed);
    if (std::memcmp(got.b, want.b, N) != 0) ++bad;
  }
  return bad;
}

template <std::size_t... Ns>
int all_sizes(gossamer::TrustRef<long> ref, int reps) {
  return (round_trip<Ns>(ref, reps) + ...);
}

// Around a word (the slot copies whole words, then the rest), and around
// the slot's 32 bytes (33 and up: complete_wait).
int every_size(gossamer::TrustRef<long> ref, int reps) {
  return all_sizes<1, 4, 7, 8, 9, 12, 16, 24, 31, 32, 33, 40, 64>(ref, reps);
}
constexpr int kSizes = 13;

TEST(WaitSlotTest, ResultsOfEverySizeComeBackWhole) {
  constexpr int kReps = 30;
  int bad_remote0 = -1, bad_remote1 = -1, bad_local = -1;
  long c0 = 0, c1 = 0;
  gossamer::run(2, [&] {
    auto on0 = gossamer::trustee(0).entrust(0L);
    auto on1 = gossamer::trustee(1).entrust(0L);
    auto r0 = on0.ref(), r1 = on1.ref();
    // Both directions at once, and thread 0 to its own trustee (inline).
    auto h0 = gossamer::spawn_on(0, [r1, &bad_remote0] { bad_remote0 = every_size(r1, kReps); });
    auto h1 = gossamer::spawn_on(1, [r0, &bad_remote1] { bad_remote1 = every_size(r0, kReps); });
    auto h2 = gossamer::spawn_on(0, [r0, &bad_local] { bad_local = every_size(r0, kReps); });
    h0.join();
    h1.join();
    h2.join();
    c0 = on0.apply([](long& c) { return c; });
    c1 = on1.apply([](long& c) { return c; });
  });
  EXPECT_EQ(bad_remote0, 0);
  EXPECT_EQ(bad_remote1, 0);
  EXPECT_EQ(bad_local, 0);
  EXPECT_EQ(c1, long(kReps) * kSizes);
  EXPECT_EQ(c0, 2L * kReps * kSizes);
}

// A closure that throws: the same remote_error with its message whether
// the result waits in a slot (void, int, 32 bytes) or decodes in its
// completion (33 bytes), and the fiber goes on (the next call works).
TEST(WaitSlotTest, ClosureExceptionsThrowTheSameOnBothPaths) {
  std::string what_void, what_int, what_32, what_33;
  int after = 0;
  gossamer::run(2, [&] {
    auto t = gossamer::trustee(1).entrust(0L);
    auto r = t.ref();
    auto catch_what = [](auto call) -> std::string {
      try {
        call();
      } catch (const gossamer::remote_error& e) {
        return e.what();
      }
      return "(nothing thrown)";
    };
    what_void = catch_what([r] { r.apply([](long&) { throw std::runtime_error("boom void"); }); });
    what_int = catch_what([r] {
      (void)r.apply([](long&) -> int { throw std::runtime_error("boom int"); });
    });
    what_32 = catch_what([r] {
      (void)r.apply([](long&) -> Bytes<32> { throw std::runtime_error("boom 32"); });
    });
    what_33 = catch_what([r] {
      (void)r.apply([](long&) -> Bytes<33> { throw std::runtime_error("boom 33"); });
    });
    after = r.apply([](long& c) { return int(++c); });
  });
  EXPECT_THAT(what_void, HasSubstr("boom void"));
  EXPECT_THAT(what_int, HasSubstr("boom int"));
  EXPECT_THAT(what_32, HasSubstr("boom 32"));
  EXPECT_THAT(what_33, HasSubstr("boom 33"));
  EXPECT_EQ(after, 1);
}

// launch through a slot (int) and through complete_wait (33 bytes).
TEST(WaitSlotTest, LaunchResultsOnBothPaths) {
  int small = 0;
  Bytes<33> big{};
  gossamer::run(2, [&] {
    auto lt = gossamer::trustee(1).entrust(gossamer::Latch<int>(5));
    small = lt.launch([](gossamer::Latch<int>& l) { return *l.lock() + 1; });
    big = lt.launch([](gossamer::Latch<int>& l) { return make<33>(*l.lock()); });
  });
  EXPECT_EQ(small, 6);
  const Bytes<33> want = make<33>(5);
  EXPECT_EQ(std::memcmp(big.b, want.b, 33), 0);
}

}  // namespace
