// Errors that reach the caller (remote_error, stale_trust), and Trusts that
// travel inside requests and responses.
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::Trust;
using gossamer::TrustRef;
using gossamer_test::g_tracked_destroyed;
using gossamer_test::kAlive;
using gossamer_test::Tracked;
using gossamer_test::Undecodable;
using gossamer_test::wait_until;
using testing::HasSubstr;

// ---- exceptions thrown by closures --------------------------------------------

TEST(RemoteErrorTest, ClosureExceptionArrivesAsRemoteError) {
  gossamer::run(3, [] {
    for (std::size_t where = 0; where < 3; ++where) {
      auto t = gossamer::trustee(where).entrust(1);
      try {
        t.apply([](int&) { throw std::runtime_error("boom from the trustee"); });
        ADD_FAILURE() << "apply did not throw (trustee " << where << ")";
      } catch (const gossamer::stale_trust&) {
        ADD_FAILURE() << "an exception is not a stale trust";
      } catch (const gossamer::remote_error& e) {
        EXPECT_THAT(e.what(), HasSubstr("boom from the trustee")) << "trustee " << where;
      }
      // Value-returning, with arguments, through a TrustRef.
      EXPECT_THROW(t.ref().apply_with(
                       [](int& v, std::string s) -> int {
                         if (s == "bad") throw std::invalid_argument("bad arg");
                         return v;
                       },
                       std::string("bad")),
                   gossamer::remote_error);
      // The property is intact and the channel still works afterwards.
      EXPECT_EQ(t.apply([](int& v) { return ++v; }), 2);
    }
  });
}

TEST(RemoteErrorTest, FromFibersOnOtherThreads) {
  int caught = 0;
  gossamer::run(4, [&caught] {
    auto t = gossamer::trustee(3).entrust(std::vector<int>{});
    auto r = t.ref();
    auto count = gossamer::local_trustee().entrust(0);
    auto cr = count.ref();
    std::vector<gossamer::FiberHandle> hs;
    for (std::size_t from = 0; from < 4; ++from) {
      hs.push_back(gossamer::spawn_on(from, [r, cr] {
        try {
          r.apply([](std::vector<int>& v) { v.at(5) = 1; });  // std::out_of_range
        } catch (const gossamer::remote_error&) {
          cr.apply([](int& c) { ++c; });
        }
      }));
    }
    for (auto& h : hs) h.join();
    caught = count.apply([](int& c) { return c; });
  });
  EXPECT_EQ(caught, 4);
}

// ---- arguments that cannot be encoded ------------------------------------------------

// An argument whose save() throws (not trivially copyable: it goes through
// cereal, so save() runs while the request is being encoded).
struct Unsendable {
  std::string text = "x";
  template <class Ar>
  void save(Ar&) const {
    throw std::runtime_error("this argument cannot be encoded");
  }
  template <class Ar>
  void load(Ar& ar) {
    ar(text);
  }
};

void expect_encoding_error(const gossamer::remote_error& e, const char* op) {
  EXPECT_THAT(e.what(), HasSubstr("could not be encoded"));
  EXPECT_THAT(e.what(), HasSubstr("this argument cannot be encoded"));
  EXPECT_THAT(e.what(), HasSubstr(op));
  // The argument's own exception is nested.
  try {
    std::rethrow_if_nested(e);
    ADD_FAILURE() << "no nested exception";
  } catch (const std::runtime_error& inner) {
    EXPECT_STREQ(inner.what(), "this argument cannot be encoded");
  }
}

// The request is dropped whole: the caller gets remote_error, the channel
// takes the next request, and a Trust encoded before the failing argument
// does not keep its property alive (its copy went with the dropped bytes).
TEST(EncodingErrorTest, ApplyWithThrowsAndNothingStaysOpen) {
  for (std::size_t prop_at : {0u, 1u, 2u}) {
    g_tracked_destroyed = 0;
    gossamer::run(3, [prop_at] {
      auto p = gossamer::trustee(prop_at).entrust(Tracked(3));
      auto counter = gossamer::trustee(1).entrust(0);
      auto use = [](int& c, Trust<Tracked>, Unsendable) { return ++c; };
      try {
        counter.apply_with(use, p, Unsendable{});
        ADD_FAILURE() << "apply_with did not throw";
      } catch (const gossamer::remote_error& e) {
        expect_encoding_error(e, "apply()");
      }
      bool ran = false;
      try {
        counter.apply_with_then(use, [&ran](int) { ran = true; }, p, Unsendable{});
        ADD_FAILURE() << "apply_with_then did not throw";
      } catch (const gossamer::remote_error& e) {
        expect_encoding_error(e, "apply_then()");
      }
      // Nothing ran, and the channel serves the next requests (the old code
      // aborted here: "a request was started while another was being encoded").
      EXPECT_EQ(counter.apply([](int& c) { return c; }), 0);
      bool then_ran = false;
      counter.apply_then([](int& c) { return ++c; }, [&then_ran](int) { then_ran = true; });
      EXPECT_TRUE(wait_until([&then_ran] { return then_ran; }));
      EXPECT_FALSE(ran);
      // The only Trust left is p: dropping it destroys the property.
      p = Trust<Tracked>{};
      EXPECT_TRUE(wait_until([] { return g_tracked_destroyed.load() == 1; })) << "property on " << prop_at;
    });
    EXPECT_EQ(g_tracked_destroyed.load(), 1) << "property on " << prop_at;
  }
}

// Inside a launched closure holding a Latch: the exception unwinds it like
// any other, so the latch is released.
TEST(EncodingErrorTest, ALatchHeldAcrossTheFailureIsReleased) {
  gossamer::run(2, [] {
    auto latch = gossamer::trustee(1).entrust(gossamer::Latch<int>(0));
    auto counter = gossamer::trustee(0).entrust(0);
    auto cr = counter.ref();
    bool caught = latch.launch([cr](gossamer::Latch<int>& l) {
      try {
        auto g = l.lock();
        cr.apply_with([](int& c, Unsendable) { return ++c; }, Unsendable{});
      } catch (const gossamer::remote_error&) {
        return !l.locked();
      }
      return false;
    });
    EXPECT_TRUE(caught);
    EXPECT_EQ(latch.launch([](gossamer::Latch<int>& l) { return ++*l.lock(); }), 1);
    EXPECT_EQ(counter.apply([](int& c) { return c; }), 0);
  });
}

// ---- responses that cannot be decoded -----------------------------------------------

TEST(DecodingErrorTest, ApplyThrowsRemoteError) {
  gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(0);
    try {
      t.apply([](int&) { return Undecodable{}; });
      ADD_FAILURE() << "apply did not throw";
    } catch (const gossamer::remote_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("could not be decoded"));
    }
    EXPECT_EQ(t.apply([](int& v) { return ++v; }), 1);
  });
}

// ---- stale TrustRefs ---------------------------------------------------------------

TEST(StaleTrustTest, RefAfterLastTrustDroppedThrows) {
  for (std::size_t where : {0u, 1u}) {
    g_tracked_destroyed = 0;
    gossamer::run(2, [where] {
      auto t = gossamer::trustee(where).entrust(Tracked(9));
      TrustRef<Tracked> r = t.ref();
      EXPECT_EQ(r.apply([](Tracked& p) { return p.value; }), 9);
      t = Trust<Tracked>{};
      EXPECT_THROW(r.apply([](Tracked& p) { return p.value; }), gossamer::stale_trust);
      EXPECT_THROW(r.apply([](Tracked&) {}), gossamer::stale_trust);
      EXPECT_THROW(r.apply_with([](Tracked& p, std::string s) { return p.value + long(s.size()); },
                                std::string("x")),
                   gossamer::stale_trust);
      try {
        r.apply([](Tracked& p) { return p.value; });
      } catch (const gossamer::stale_trust& e) {
        EXPECT_THAT(e.what(), HasSubstr("property is gone"));
      }
      // stale_trust is a remote_error.
      EXPECT_THROW(r.apply([](Tracked& p) { return p.value; }), gossamer::remote_error);
      EXPECT_EQ(g_tracked_destroyed.load(), 1);
      // A new property in the (reused) table entry is not reachable through
      // the old ref, and is itself fine.
      auto n = gossamer::trustee(where).entrust(Tracked(11));
      EXPECT_THROW(r.apply([](Tracked& p) { return p.value; }), gossamer::stale_trust);
      EXPECT_EQ(n.apply([](Tracked& p) { return p.value; }), 11);
    });
    EXPECT_EQ(g_tracked_destroyed.load(), 2) << "trustee " << where;
  }
}

TEST(StaleTrustTest, StaleLatchLaunchThrows) {
  gossamer::run(2, [] {
    for (std::size_t where : {0u, 1u}) {
      auto lt = gossamer::trustee(where).entrust(gossamer::Latch<int>(1));
      auto r = lt.ref();
      lt = Trust<gossamer::Latch<int>>{};
      EXPECT_THROW(r.launch([](gossamer::Latch<int>& l) { return *l.lock(); }), gossamer::stale_trust);
    }
  });
}

// ---- Trusts inside requests and responses ------------------------------------------

struct Holder {
  std::optional<Trust<Tracked>> held;
};

// (property's trustee, holder's trustee); the client is thread 0.
class TrustArgumentTest : public testing::TestWithParam<std::tuple<int, int>> {};

// A Trust passed as an apply_with argument keeps its property alive: the
// sender drops its copy, the property stays usable through the one the
// holder received, and is destroyed once when that one goes.
TEST_P(TrustArgumentTest, KeepsPropertyAlive) {
  auto [prop_at, holder_at] = GetParam();
  g_tracked_destroyed = 0;
  gossamer::run(3, [prop_at = std::size_t(prop_at), holder_at = std::size_t(holder_at)] {
    auto p = gossamer::trustee(prop_at).entrust(Tracked(7));
    auto h = gossamer::trustee(holder_at).entrust(Holder{});
    TrustRef<Tracked> pref = p.ref();
    bool ok = h.apply_with(
        [](Holder& hd, Trust<Tracked> t) {
          bool got = bool(t);
          hd.held = std::move(t);
          return got;
        },
        p);
    EXPECT_TRUE(ok);
    p = Trust<Tracked>{};  // the sender's copy
    // Through the received Trust.
    TrustRef<Tracked> via = h.apply([](Holder& hd) { return hd.held->ref(); });
    EXPECT_EQ(via.apply([](Tracked& t) { return t.magic == kAlive ? t.value : -1L; }), 7);
    EXPECT_EQ(pref.apply([](Tracked& t) { return ++t.value; }), 8);
    EXPECT_EQ(g_tracked_destroyed.load(), 0);
    // Drop it inside delegated context, on the holder's trustee.
    h.apply([](Holder& hd) { hd.held.reset(); });
    EXPECT_TRUE(wait_until([] { return g_tracked_destroyed.load() == 1; }));
    EXPECT_THROW(pref.apply([](Tracked& t) { return t.value; }), gossamer::stale_trust);
  });
  EXPECT_EQ(g_tracked_destroyed.load(), 1);
}

// Every placement except "the Trust's property and the holder on the same
// trustee, which is not the caller's thread": that one hangs today and is
// run in a child process by IsolatedDeathTest.TrustArgumentToItsOwnTrustee.
INSTANTIATE_TEST_SUITE_P(Placements, TrustArgumentTest,
                         testing::Values(std::make_tuple(0, 0), std::make_tuple(0, 1),
                                         std::make_tuple(1, 0), std::make_tuple(1, 2),
                                         std::make_tuple(2, 1)),
                         [](const auto& param_info) {
                           return "prop" + std::to_string(std::get<0>(param_info.param)) + "_holder" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

// A trustee reuses a record's property lookup for the next records of the
// batch that name the same property with the same closure; a closure in the
// middle of the batch that destroys that property (dropping its last Trust,
// on the trustee's own thread) makes the records after it stale, not a use
// of freed memory.
TEST(StaleTrustTest, PropertyDestroyedMidBatch) {
  g_tracked_destroyed = 0;
  gossamer::run(2, [] {
    Holder holder;  // on thread 0, the property's trustee: only its closures touch it
    holder.held = gossamer::trustee(0).entrust(Tracked(5));
    const TrustRef<Tracked> ref = holder.held->ref();
    Holder* hp = &holder;
    constexpr int kBefore = 10, kAfter = 20, kAll = kBefore + 1 + kAfter;
    std::vector<int> outcome(kAll, 0);  // 1 the value, 2 stale, 3 anything else
    int* out = outcome.data();
    auto before = gossamer::trustee_stats(0);
    // Fibers on thread 1, one request each, sent in spawn order; request
    // kBefore drops the last Trust after reading the value.
    gossamer::spawn_on(1, [ref, hp, out] {
      std::vector<gossamer::FiberHandle> fs;
      for (int i = 0; i < kAll; ++i)
        fs.push_back(gossamer::spawn([ref, hp, out, i] {
          try {
            long v = ref.apply_with(
                [hp](Tracked& t, int drop) {
                  long seen = t.magic == kAlive ? t.value : -1L;
                  if (drop) hp->held.reset();  // destroys t
                  return seen;
                },
                int(i == kBefore));
            out[i] = v == 5 ? 1 : 3;
          } catch (const gossamer::stale_trust&) {
            out[i] = 2;
          }
        }));
      for (auto& f : fs) f.join();
    }).join();
    gossamer::yield();
    auto after = gossamer::trustee_stats(0);
    for (int i = 0; i < kAll; ++i) EXPECT_EQ(outcome[std::size_t(i)], i <= kBefore ? 1 : 2) << i;
    EXPECT_EQ(g_tracked_destroyed.load(), 1);
    // The case under test needs the dropping record and those after it in
    // one batch: the first request goes at once (nothing was in flight),
    // the other 30 wait for its answer and go together; the spawn's
    // completion is the third batch.
    EXPECT_EQ(after.requests_served - before.requests_served, std::uint64_t(kAll) + 1);
    EXPECT_LE(after.slots_served - before.slots_served, 3u);
  });
}

TEST(TrustResultTest, ApplyMayReturnATrust) {
  g_tracked_destroyed = 0;
  gossamer::run(3, [] {
    for (std::size_t where = 0; where < 3; ++where) {
      auto p = gossamer::trustee((where + 1) % 3).entrust(Tracked(where));
      auto h = gossamer::trustee(where).entrust(Holder{});
      h.apply_with([](Holder& hd, Trust<Tracked> t) { hd.held = std::move(t); }, p);
      p = Trust<Tracked>{};
      // The holder hands out a copy; the caller owns it.
      Trust<Tracked> back = h.apply([](Holder& hd) { return *hd.held; });
      EXPECT_TRUE(back);
      h.apply([](Holder& hd) { hd.held.reset(); });
      EXPECT_EQ(back.apply([](Tracked& t) { return t.magic == kAlive ? t.value : -1L; }), long(where));
      // An empty Trust travels as an empty Trust.
      Trust<Tracked> none = h.apply([](Holder& hd) { return hd.held ? *hd.held : Trust<Tracked>{}; });
      EXPECT_FALSE(none);
      auto r = back.ref();
      back = Trust<Tracked>{};
      EXPECT_TRUE(wait_until([where] { return g_tracked_destroyed.load() == int(where) + 1; }));
      EXPECT_THROW(r.apply([](Tracked& t) { return t.value; }), gossamer::stale_trust);
    }
  });
  EXPECT_EQ(g_tracked_destroyed.load(), 3);
}

}  // namespace
