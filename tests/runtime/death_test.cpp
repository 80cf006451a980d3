// What must abort, with a message that says what to do instead: blocking in
// delegated context, calls outside gossamer::run, misuse of run, failures
// of apply_then/launch_then (no caller to throw to). Plus
// scenarios that hang or crash the process today and therefore run in a
// child process (IsolatedDeathTest), where a failure cannot take the rest of
// the suite down.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer::Latch;
using gossamer::Trust;
using gossamer::TrustRef;
using testing::AllOf;
using testing::HasSubstr;

class DeathTestBase : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// ---- blocking in delegated context -----------------------------------------------

class DelegatedContextDeathTest : public DeathTestBase {};

auto blocking_message(const char* op) {
  return AllOf(HasSubstr(op), HasSubstr("delegated context"), HasSubstr("apply_then"),
               HasSubstr("launch"));
}

void apply_inside_closure(std::size_t outer_at, std::size_t inner_at) {
  gossamer::run(2, [=] {
    auto outer = gossamer::trustee(outer_at).entrust(0);
    auto inner = gossamer::trustee(inner_at).entrust(0);
    TrustRef<int> ir = inner.ref();
    outer.apply([ir](int&) { ir.apply([](int&) {}); });
  });
}

TEST_F(DelegatedContextDeathTest, ApplyInsideRemoteClosure) {
  EXPECT_DEATH(apply_inside_closure(1, 0), blocking_message("apply()"));
}

TEST_F(DelegatedContextDeathTest, ApplyInsideLocalClosure) {
  // Even to a property of the same trustee (which would not need a channel).
  EXPECT_DEATH(apply_inside_closure(0, 0), blocking_message("apply()"));
}

void apply_inside_then_callback() {
  gossamer::run(2, [] {
    auto a = gossamer::trustee(1).entrust(0);
    TrustRef<int> ar = a.ref();
    bool done = false;
    a.apply_then([](int& v) { return v; },
                 [ar, &done](int) {
                   ar.apply([](int&) {});
                   done = true;
                 });
    while (!done) gossamer::yield();
  });
}

TEST_F(DelegatedContextDeathTest, ApplyInsideThenCallback) {
  EXPECT_DEATH(apply_inside_then_callback(), blocking_message("apply()"));
}

void join_inside_closure() {
  gossamer::run(2, [] {
    auto a = gossamer::trustee(1).entrust(0);
    a.apply([](int&) { gossamer::spawn([] {}).join(); });
  });
}

TEST_F(DelegatedContextDeathTest, JoinInsideClosure) {
  EXPECT_DEATH(join_inside_closure(), blocking_message("join()"));
}

void latch_contended_inside_closure() {
  gossamer::run(2, [] {
    auto lt = gossamer::trustee(1).entrust(Latch<int>(0));
    // A launched fiber takes the latch and keeps it.
    lt.launch_then(
        [](Latch<int>& l) {
          auto g = l.lock();
          for (int i = 0; i < 2000000; ++i) gossamer::yield();
        },
        [] {});
    while (!lt.apply([](Latch<int>& l) { return l.locked(); })) gossamer::yield();
    // A plain closure (delegated context) must not wait for it.
    lt.apply([](Latch<int>& l) { *l.lock() += 1; });
  });
  std::fprintf(stderr, "survived a contended Latch::lock() in delegated context\n");
}

TEST_F(DelegatedContextDeathTest, LatchLockContendedInsideClosure) {
  EXPECT_DEATH(latch_contended_inside_closure(), blocking_message("Latch::lock()"));
}

void other_blocking_inside_closure(int which) {
  gossamer::run(2, [which] {
    auto a = gossamer::trustee(1).entrust(0);
    auto lt = gossamer::trustee(0).entrust(Latch<int>(0));
    TrustRef<Latch<int>> lr = lt.ref();
    a.apply([which, lr](int&) {
      if (which == 0) gossamer::yield();
      if (which == 1) lr.launch([](Latch<int>&) {});
      if (which == 2) (void)gossamer::trustee(0).entrust(5);  // another thread's trustee
    });
  });
}

TEST_F(DelegatedContextDeathTest, YieldLaunchEntrustInsideClosure) {
  EXPECT_DEATH(other_blocking_inside_closure(0), blocking_message("yield()"));
  EXPECT_DEATH(other_blocking_inside_closure(1), blocking_message("launch()"));
  EXPECT_DEATH(other_blocking_inside_closure(2), blocking_message("entrust()"));
}

// ---- outside gossamer::run --------------------------------------------------------

class OutsideRunDeathTest : public DeathTestBase {};

TEST_F(OutsideRunDeathTest, ApplyOutsideRun) {
  EXPECT_DEATH(
      {
        Trust<int> t;
        t.apply([](int&) {});
      },
      AllOf(HasSubstr("apply()"), HasSubstr("outside gossamer::run")));
}

TEST_F(OutsideRunDeathTest, TrustFromAnEndedRun) {
  Trust<int> kept;
  gossamer::run(2, [&kept] { kept = gossamer::trustee(1).entrust(3); });
  EXPECT_TRUE(kept);
  EXPECT_DEATH(kept.apply([](int& v) { return v; }), HasSubstr("outside gossamer::run"));
  kept = Trust<int>{};  // harmless after run
}

TEST_F(OutsideRunDeathTest, OtherCallsOutsideRun) {
  EXPECT_DEATH((void)gossamer::entrust(1), HasSubstr("outside gossamer::run"));
  EXPECT_DEATH((void)gossamer::local_trustee(), HasSubstr("outside gossamer::run"));
  EXPECT_DEATH((void)gossamer::spawn([] {}), HasSubstr("outside gossamer::run"));
  EXPECT_DEATH(gossamer::yield(), HasSubstr("outside gossamer::run"));
}

// ---- misuse and failures that cannot be reported to a caller ----------------------

class MisuseDeathTest : public DeathTestBase {};

TEST_F(MisuseDeathTest, RunInsideRun) {
  EXPECT_DEATH(gossamer::run(1, [] { gossamer::run(1, [] {}); }), HasSubstr("inside gossamer::run"));
}

TEST_F(MisuseDeathTest, BadOptions) {
  EXPECT_DEATH(gossamer::run(0, [] {}), HasSubstr("threads"));
  gossamer::Options o;
  o.threads = 2;
  o.dedicated_trustees = 2;
  EXPECT_DEATH(gossamer::run(o, [] {}), HasSubstr("dedicated_trustees"));
}

TEST_F(MisuseDeathTest, UncaughtExceptionInAFiber) {
  EXPECT_DEATH(gossamer::run(1, [] { throw std::runtime_error("fiber went wrong"); }),
               AllOf(HasSubstr("uncaught exception"), HasSubstr("fiber went wrong")));
}

void stale_apply_then() {
  gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(1);
    auto r = t.ref();
    t = Trust<int>{};
    bool done = false;
    r.apply_then([](int& v) { return v; }, [&done](int) { done = true; });
    while (!done) gossamer::yield();
  });
}

TEST_F(MisuseDeathTest, StaleRefWithApplyThen) {
  // No caller to throw to: documented to abort with the stale-trust message.
  EXPECT_DEATH(stale_apply_then(), AllOf(HasSubstr("property is gone"), HasSubstr("apply()")));
}

TEST_F(MisuseDeathTest, NoSuchTrustee) {
  EXPECT_DEATH(gossamer::run(2, [] { (void)gossamer::trustee(2); }), HasSubstr("no such trustee"));
  EXPECT_DEATH(gossamer::run(2, [] { gossamer::spawn_on(5, [] {}); }), HasSubstr("no such thread"));
}

// ---- known-bad scenarios, isolated in a child process --------------------------------

class IsolatedDeathTest : public DeathTestBase {};

// A hang guard, far above the few milliseconds these scenarios take: turns a
// hang into a failure (exit 3) instead of a test timeout.
void arm_hang_guard() {
  std::signal(SIGALRM, [](int) {
    static const char msg[] = "HUNG: no progress after 10 s\n";
    (void)!::write(2, msg, sizeof msg - 1);
    std::_Exit(3);
  });
  ::alarm(10);
}

// Exits 0 when `ok`, else 1 after printing why.
[[noreturn]] void finish(bool ok, const std::string& why) {
  if (!ok) std::fprintf(stderr, "FAILED: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(ok ? 0 : 1);
}

struct Holder {
  std::optional<Trust<long>> held;
};

// A Trust passed as an apply_with argument to the trustee that owns the
// Trust's property, from another thread.
void trust_argument_to_its_own_trustee() {
  arm_hang_guard();
  std::string why;
  bool ok = true;
  gossamer::run(3, [&] {
    for (std::size_t at : {1u, 2u}) {
      auto p = gossamer::trustee(at).entrust(7L);
      auto h = gossamer::trustee(at).entrust(Holder{});
      bool got = h.apply_with(
          [](Holder& hd, Trust<long> t) {
            bool g = bool(t);
            hd.held = std::move(t);
            return g;
          },
          p);
      p = Trust<long>{};
      long v = h.apply([](Holder& hd) { return hd.held->ref(); }).apply([](long& x) { return x; });
      if (!got || v != 7) {
        ok = false;
        why = "trustee " + std::to_string(at) + ": got=" + std::to_string(got) + " v=" + std::to_string(v);
      }
    }
  });
  finish(ok, why);
}

TEST_F(IsolatedDeathTest, TrustArgumentToItsOwnTrustee) {
  EXPECT_EXIT(trust_argument_to_its_own_trustee(), testing::ExitedWithCode(0), "");
}

// An exception that is not a std::exception, thrown by a closure.
void non_std_exception(std::size_t where) {
  arm_hang_guard();
  std::string why;
  bool ok = false;
  gossamer::run(2, [&] {
    auto t = gossamer::trustee(where).entrust(1);
    try {
      t.apply([](int&) { throw 42; });
      why = "no exception";
    } catch (const gossamer::remote_error&) {
      ok = true;
    } catch (...) {
      why = "not a gossamer::remote_error";
    }
  });
  finish(ok, why);
}

TEST_F(IsolatedDeathTest, NonStdExceptionFromRemoteClosure) {
  EXPECT_EXIT(non_std_exception(1), testing::ExitedWithCode(0), "");
}

TEST_F(IsolatedDeathTest, NonStdExceptionFromLocalClosure) {
  EXPECT_EXIT(non_std_exception(0), testing::ExitedWithCode(0), "");
}

// A response whose load() throws something that is not a std::exception:
// apply still throws remote_error (it escaped the runtime's loop before).
struct ThrowsOnLoad {
  std::string text;
  template <class Ar>
  void save(Ar&) const {}
  template <class Ar>
  void load(Ar&) {
    throw 42;
  }
};

void non_std_exception_decoding() {
  arm_hang_guard();
  std::string why;
  bool ok = false;
  gossamer::run(2, [&] {
    auto t = gossamer::trustee(1).entrust(1);
    try {
      t.apply([](int&) { return ThrowsOnLoad{}; });
      why = "no exception";
    } catch (const gossamer::remote_error& e) {
      ok = std::string(e.what()).find("could not be decoded") != std::string::npos;
      if (!ok) why = e.what();
    } catch (...) {
      why = "not a gossamer::remote_error";
    }
    if (ok) ok = t.apply([](int& v) { return ++v; }) == 2;
  });
  finish(ok, why);
}

TEST_F(IsolatedDeathTest, NonStdExceptionDecodingAResponse) {
  EXPECT_EXIT(non_std_exception_decoding(), testing::ExitedWithCode(0), "");
}

// ---- failures of apply_then/launch_then, which have no caller ------------------------

class AsyncFailureDeathTest : public DeathTestBase {};

// Then-callbacks and responses of apply_then/launch_then: no caller to throw
// to, so the process ends with the runtime's message, never std::terminate
// from inside its loop (which printed no gossamer message).
void then_callback_throws(std::size_t where, bool launch) {
  arm_hang_guard();
  gossamer::run(2, [=] {
    if (launch) {
      auto l = gossamer::trustee(where).entrust(Latch<int>(5));
      l.launch_then([](Latch<int>& x) { return *x.lock(); },
                    [](int) { throw std::runtime_error("boom in the callback"); });
    } else {
      auto t = gossamer::trustee(where).entrust(1);
      t.apply_then([](int& v) { return v; }, [](int) { throw std::runtime_error("boom in the callback"); });
    }
    for (;;) gossamer::yield();  // until the callback ends the process
  });
}

auto callback_message() {
  return AllOf(HasSubstr("gossamer: fatal"), HasSubstr("callback threw"), HasSubstr("boom in the callback"));
}

TEST_F(AsyncFailureDeathTest, ApplyThenCallbackThrows) {
  EXPECT_DEATH(then_callback_throws(1, false), callback_message());
  EXPECT_DEATH(then_callback_throws(0, false), callback_message());  // own trustee: runs at once
}

TEST_F(AsyncFailureDeathTest, LaunchThenCallbackThrows) {
  EXPECT_DEATH(then_callback_throws(1, true), callback_message());
}

void apply_then_undecodable() {
  using gossamer_test::Undecodable;
  arm_hang_guard();
  gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(1);
    bool done = false;
    t.apply_then([](int&) { return Undecodable{}; }, [&done](Undecodable) { done = true; });
    while (!done) gossamer::yield();
  });
}

TEST_F(AsyncFailureDeathTest, ApplyThenResponseThatDoesNotDecode) {
  EXPECT_DEATH(apply_then_undecodable(),
               AllOf(HasSubstr("gossamer: fatal"), HasSubstr("apply_then"), HasSubstr("could not be decoded")));
}

}  // namespace
