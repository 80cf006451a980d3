// The inline path: a fiber applying to a property of its own thread's
// trustee runs the closure at once, without a slot. Each test runs the same
// program against a property on thread 0 (inline) and on thread 1 (through
// a slot) and expects the same observable behaviour.
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::FiberHandle;
using gossamer::Latch;
using gossamer::Trust;
using gossamer_test::Rng;
using gossamer_test::wait_until;

constexpr std::size_t kInline = 0, kSlot = 1;

struct Outcome {
  std::vector<long> results;    // every value returned, in issue order
  std::vector<long> property;   // the property at the end
  std::uint64_t sent = 0;       // requests thread 0 sent meanwhile
  std::uint64_t inline_runs = 0;
};

// A fixed random mix of apply, apply_with, apply_then and apply_with_then.
Outcome mixed_program(std::size_t where) {
  Outcome out;
  gossamer::run(2, [&] {
    auto prop = gossamer::trustee(where).entrust(std::vector<long>{});
    // The stats are published by the thread's loop: read them after a yield.
    gossamer::yield();
    auto before = gossamer::trustee_stats(0);
    std::vector<long>* res = &out.results;
    Rng rng(7);
    for (int i = 0; i < 3000; ++i) {
      long x = long(rng.next() % 1000);
      switch (rng.next() % 4) {
        case 0:
          res->push_back(prop.apply([x](std::vector<long>& v) {
            v.push_back(x);
            return long(v.size());
          }));
          break;
        case 1:
          res->push_back(prop.apply_with(
              [](std::vector<long>& v, long a, std::string s) {
                v.push_back(a + long(s.size()));
                return v.back() * 2;
              },
              x, std::string(std::size_t(x % 7), 'z')));
          break;
        case 2:
          prop.apply_then(
              [x](std::vector<long>& v) {
                if (!v.empty() && x % 3 == 0) v.pop_back();
                return long(v.size()) * 1000 + x;
              },
              [res](long r) { res->push_back(r); });
          break;
        default:
          prop.apply_with_then([](std::vector<long>& v, long a) { v.push_back(-a); }, [res] { res->push_back(-1); },
                               x);
      }
    }
    ASSERT_TRUE(wait_until([&] { return gossamer::outstanding_requests() == 0; }));
    gossamer::yield();
    auto after = gossamer::trustee_stats(0);
    out.sent = after.requests_sent - before.requests_sent;
    out.inline_runs = after.local_applies - before.local_applies;
    out.property = prop.apply([](std::vector<long>& v) { return v; });
  });
  return out;
}

TEST(LocalApplyTest, SameResultsInlineAndThroughASlot) {
  Outcome in = mixed_program(kInline), slot = mixed_program(kSlot);
  EXPECT_EQ(in.results, slot.results);
  EXPECT_EQ(in.property, slot.property);
  EXPECT_EQ(in.results.size(), 3000u);
  // And the inline run really took no slot.
  EXPECT_EQ(in.sent, 0u);
  EXPECT_EQ(in.inline_runs, 3000u);
  EXPECT_EQ(slot.sent, 3000u);
}

// What apply throws: remote_error (exactly), with the closure's message,
// and what the closure did before it threw stays done.
struct Thrown {
  std::string type, what;
  bool operator==(const Thrown&) const = default;
};
template <class F>
Thrown catch_it(F f) {
  try {
    f();
  } catch (const gossamer::remote_error& e) {
    return {typeid(e).name(), e.what()};
  } catch (...) {
    return {"something else", ""};
  }
  return {"nothing", ""};
}

std::vector<Thrown> throwing_program(std::size_t where, long* final_value) {
  std::vector<Thrown> t;
  gossamer::run(2, [&] {
    auto p = gossamer::trustee(where).entrust(0L);
    t.push_back(catch_it([&] {
      p.apply([](long& v) -> long {
        ++v;
        throw std::runtime_error("closure failed");
      });
    }));
    t.push_back(catch_it([&] { p.apply([](long& v) { v += 10, throw 42; }); }));
    t.push_back(catch_it([&] {
      p.apply_with([](long& v, std::string s) { v += long(s.size()), throw std::out_of_range(s); },
                   std::string("argument said no"));
    }));
    t.push_back(catch_it([&] { (void)p.apply([](long& v) { return v; }); }));  // still usable
    *final_value = p.apply([](long& v) { return v; });
  });
  return t;
}

TEST(LocalApplyTest, SameExceptionsInlineAndThroughASlot) {
  long in_value = 0, slot_value = 0;
  auto in = throwing_program(kInline, &in_value), slot = throwing_program(kSlot, &slot_value);
  EXPECT_EQ(in, slot);
  ASSERT_EQ(in.size(), 4u);
  EXPECT_EQ(in[0].type, typeid(gossamer::remote_error).name());
  EXPECT_EQ(in[0].what, "closure failed");
  EXPECT_EQ(in[1].what, "the closure threw something that is not a std::exception");
  EXPECT_EQ(in[2].what, "argument said no");
  EXPECT_EQ(in[3].type, "nothing");
  EXPECT_EQ(in_value, 1 + 10 + 16);
  EXPECT_EQ(slot_value, in_value);
}

// A closure runs in delegated context on its trustee's thread either way.
TEST(LocalApplyTest, ClosuresRunOnTheTrusteeThreadEitherWay) {
  for (std::size_t where : {kInline, kSlot}) {
    gossamer::run(2, [where] {
      auto p = gossamer::trustee(where).entrust(0L);
      EXPECT_EQ(p.apply([](long&) { return long(gossamer::thread_index()); }), long(where));
    });
  }
}

// launch on a Latch: always a fiber of its own on the trustee's thread
// (even on this thread), which may block and takes turns on the latch;
// launch_then and exceptions alike.
struct LatchOutcome {
  std::set<long> seen;
  long final_value = 0;
  std::set<long> threads;
  std::string error;
  bool operator==(const LatchOutcome&) const = default;
};

LatchOutcome latch_program(std::size_t where) {
  LatchOutcome out;
  gossamer::run(2, [&] {
    auto latch = gossamer::trustee(where).entrust(Latch<long>(0));
    auto other = gossamer::trustee(1 - where).entrust(100L);
    auto other_ref = other.ref();
    std::vector<FiberHandle> fs;
    for (int f = 0; f < 4; ++f)
      fs.push_back(gossamer::spawn([&] {
        for (int i = 0; i < 10; ++i) {
          out.seen.insert(latch.launch([other_ref](Latch<long>& l) {
            auto g = l.lock();
            long v = *g;
            long o = other_ref.apply([](long& x) { return x; });  // blocks, holding the latch
            gossamer::yield();
            *g = v + 1;
            return *g + o * 1000;
          }));
        }
      }));
    for (auto& h : fs) h.join();
    bool done = false;
    latch.launch_then([](Latch<long>&) { return long(gossamer::thread_index()); },
                      [&](long t) {
                        out.threads.insert(t);
                        done = true;
                      });
    EXPECT_TRUE(wait_until([&] { return done; }));
    try {
      latch.launch([](Latch<long>&) -> long { throw std::runtime_error("launched closure failed"); });
    } catch (const gossamer::remote_error& e) {
      out.error = e.what();
    }
    out.final_value = latch.launch([](Latch<long>& l) { return *l.lock(); });
  });
  return out;
}

TEST(LocalApplyTest, SameLatchAndLaunchSemanticsInlineAndThroughASlot) {
  LatchOutcome in = latch_program(kInline), slot = latch_program(kSlot);
  EXPECT_EQ(in.seen.size(), 40u);  // one distinct value per launch: they took turns
  EXPECT_EQ(in.final_value, 40);
  EXPECT_EQ(in.error, "launched closure failed");
  EXPECT_EQ(in.threads, std::set<long>{0});
  EXPECT_EQ(slot.threads, std::set<long>{1});
  slot.threads = in.threads;  // the only expected difference: where it ran
  EXPECT_EQ(in, slot);
}

}  // namespace
