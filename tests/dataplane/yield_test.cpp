// dataplane.yield_us (dataplane/src/loop.cpp): after its last traffic a
// polling core with nothing to do yields the CPU for that long, then sleeps.
// Seen as the applications see it: the segment's dataplane_sleeping word,
// set while a core of their dataplane sleeps. Two dataplanes over the
// loopback port, one polling core each, a fake application on each side.
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "loopback_rack.hpp"

namespace gossamer::dataplane::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr std::uint32_t kHosts = 2, kTotal = 2;  // thread 0 on host a, thread 1 on host b

LoopbackRack::Options yield_of(std::int64_t us) {
  LoopbackRack::Options o;
  o.conns = 1;
  o.yield_us = us;
  return o;
}

std::string fresh_id() {
  return "y-" + std::to_string(std::random_device{}()) + "-" + std::to_string(std::random_device{}());
}

// Attaches both; then one request from host a's thread to host b's and its
// answer. Returns when host a's application has the answer (its dataplane
// has just had traffic).
void attach_and_round_trip(FakeApp& a, FakeApp& b) {
  ASSERT_EQ(a.attach().type, abi::kMsgAttachOk);
  ASSERT_EQ(b.attach().type, abi::kMsgAttachOk);
  ASSERT_TRUE(a.wait_message(abi::kMsgStart, 10'000));
  ASSERT_TRUE(b.wait_message(abi::kMsgStart, 10'000));
  a.request(0, 1, 1, pattern(0, 1, 1, false, 64));
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (b.request_seq(0, 0, 1) != 1 && Clock::now() < end) std::this_thread::sleep_for(std::chrono::microseconds(50));
  ASSERT_EQ(b.request_seq(0, 0, 1), 1u) << "the request never arrived";
  b.respond(0, 0, 1, pattern(0, 1, 1, true, 64));
  while (a.response_seq(0, 1, 1) != 1 && Clock::now() < end) std::this_thread::sleep_for(std::chrono::microseconds(50));
  ASSERT_EQ(a.response_seq(0, 1, 1), 1u) << "no answer";
}

// How long until host a's dataplane is seen asleep, looking until `deadline`;
// nullopt if it never was.
std::optional<Clock::duration> until_asleep(const FakeApp& a, Clock::time_point deadline) {
  const auto t0 = Clock::now();
  while (Clock::now() < deadline) {
    if (a.dataplane_sleeping()) return Clock::now() - t0;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return std::nullopt;
}

void detach(LoopbackRack& rack, FakeApp& a, FakeApp& b) {
  a.send_detach();
  b.send_detach();
  EXPECT_TRUE(a.wait_message(abi::kMsgDetached, 10'000));
  EXPECT_TRUE(b.wait_message(abi::kMsgDetached, 10'000));
  rack.stop();
}

// yield_us 0: the core sleeps right after its spin, traffic or not.
TEST(Yield, ZeroSleepsRightAfterTraffic) {
  LoopbackRack rack(yield_of(0));
  const std::string key = fresh_id();
  FakeApp a(rack.socket(0), 0, kHosts, kTotal, key), b(rack.socket(1), 1, kHosts, kTotal, key);
  attach_and_round_trip(a, b);
  ASSERT_FALSE(HasFailure());
  const auto slept = until_asleep(a, Clock::now() + std::chrono::seconds(2));
  EXPECT_TRUE(slept) << "host a's dataplane did not sleep within 2 s of its last traffic with yield_us 0";
  detach(rack, a, b);
}

// yield_us 1 s: for a second after the answer passed, the core does not
// sleep (the default, 50 us, or the old fixed 2 ms would have); then it
// does. The start-up log
// names the value.
TEST(Yield, ACoreYieldsForYieldUsAfterTrafficThenSleeps) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  spdlog::default_logger()->sinks().push_back(ring);
  struct Unhook {
    std::shared_ptr<spdlog::sinks::sink> s;
    ~Unhook() { std::erase(spdlog::default_logger()->sinks(), s); }
  } unhook{ring};
  LoopbackRack rack(yield_of(1'000'000));
  const std::string key = fresh_id();
  FakeApp a(rack.socket(0), 0, kHosts, kTotal, key), b(rack.socket(1), 1, kHosts, kTotal, key);
  attach_and_round_trip(a, b);
  ASSERT_FALSE(HasFailure());
  // The answer left host a's dataplane before we saw it: the second of
  // yielding covers the next 500 ms unless this thread was held up for
  // more than half a second, which the bound below leaves room for.
  const auto answered = Clock::now();
  const auto early = until_asleep(a, answered + milliseconds(500));
  EXPECT_FALSE(early) << "host a's dataplane slept "
                      << std::chrono::duration_cast<std::chrono::microseconds>(*early).count()
                      << " us after its last traffic with yield_us 1000000";
  const auto late = until_asleep(a, Clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(late) << "host a's dataplane never slept after its yield phase";
  detach(rack, a, b);
  bool logged = false;
  for (const std::string& line : ring->last_formatted())
    logged |= line.find("polling adaptive, yield_us 1000000") != std::string::npos;
  EXPECT_TRUE(logged) << "the start-up log does not name yield_us";
}

}  // namespace
}  // namespace gossamer::dataplane::testing
