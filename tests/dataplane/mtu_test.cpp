// dataplane.mtu: a full slot travels in one frame when the MTU allows it,
// and in fragments when it does not (issue 19 item 2). Two dataplanes over
// the loopback port, a fake application on each side; the figures come
// from the dataplanes' stats files.
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "loopback_rack.hpp"
#include "wire.hpp"

namespace gossamer::dataplane::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kHosts = 2, kTotal = 2;  // thread 0 on host a, thread 1 on host b
// A full slot: 64 closures of an echo-sized request (16-byte header, 48
// bytes of captures and arguments) each.
constexpr std::size_t kFullSlot = 64 * 64;
constexpr std::uint32_t kRounds = 50;

struct Sent {
  std::uint64_t requests, frames, fragments, too_long;
};

// Host a's thread sends kRounds full slots to host b's, one at a time;
// every one comes back answered. Returns host a's counters.
LoopbackRack::Options mtus(std::uint32_t a, std::uint32_t b) {
  LoopbackRack::Options o;
  o.conns = 1;
  o.mtu = a;
  o.mtu_b = b;
  return o;
}

std::string fresh_id() { return "m-" + std::to_string(std::random_device{}()) + "-" + std::to_string(std::random_device{}()); }

// Attaches both, waits for the start barrier.
void attach_both(FakeApp& a, FakeApp& b) {
  EXPECT_EQ(a.attach().type, abi::kMsgAttachOk);
  EXPECT_EQ(b.attach().type, abi::kMsgAttachOk);
  EXPECT_TRUE(a.wait_message(abi::kMsgStart, 10'000));
  EXPECT_TRUE(b.wait_message(abi::kMsgStart, 10'000));
}

Sent full_slots(std::uint32_t mtu) {
  LoopbackRack rack(mtus(mtu, mtu));
  const std::string key = fresh_id();
  FakeApp a(rack.socket(0), 0, kHosts, kTotal, key), b(rack.socket(1), 1, kHosts, kTotal, key);
  attach_both(a, b);
  for (std::uint32_t seq = 1; seq <= kRounds && !::testing::Test::HasFailure(); ++seq) {
    a.request(0, 1, seq, pattern(0, 1, seq, false, kFullSlot));
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (b.request_seq(0, 0, seq) != seq && Clock::now() < end)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    EXPECT_EQ(b.request_body(0, 0, seq), pattern(0, 1, seq, false, kFullSlot)) << "request " << seq;
    b.respond(0, 0, seq, pattern(0, 1, seq, true, 64));
    while (a.response_seq(0, 1, seq) != seq && Clock::now() < end)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    EXPECT_EQ(a.response_seq(0, 1, seq), seq) << "no answer to request " << seq;
  }
  a.send_detach();
  b.send_detach();
  EXPECT_TRUE(a.wait_message(abi::kMsgDetached, 10'000));
  EXPECT_TRUE(b.wait_message(abi::kMsgDetached, 10'000));
  rack.stop();
  return {rack.stat(0, "requests_sent"), rack.stat(0, "frames_sent"), rack.stat(0, "fragments_sent"),
          rack.stat(1, "dropped{reason=\"too_long\"}")};
}

// With jumbo frames each full slot is one frame: host a sent its requests
// in as many data frames (plus its attach announce), and no fragment.
TEST(Mtu, JumboFrameCarriesAFullSlot) {
  static_assert(kFullSlot + sizeof(wire::WireRecord) > wire::kMaxRecordBytes);
  static_assert(kFullSlot + sizeof(wire::WireRecord) <= wire::max_record_bytes(9000));
  const Sent s = full_slots(9000);
  EXPECT_EQ(s.requests, kRounds);
  EXPECT_EQ(s.fragments, 0u);
  EXPECT_LE(s.frames, kRounds + 2) << "frames sent for " << kRounds << " full slots";
  EXPECT_EQ(s.too_long, 0u);
}

// At the default MTU the same slots take ceil(4096 / 1368) = 3 fragments,
// each its own frame.
TEST(Mtu, DefaultMtuFragmentsAFullSlot) {
  const Sent s = full_slots(1500);
  EXPECT_EQ(s.requests, kRounds);
  EXPECT_EQ(s.fragments, 3u * kRounds);
  EXPECT_GE(s.frames, 3u * kRounds);
}

// Hosts that disagree: host a (9000) sends frames host b (1500) cannot
// take. b counts them (too_long) and drops them, and the slot never
// arrives; nothing crashes, and host a keeps retransmitting.
TEST(Mtu, FrameLargerThanThePeersMtuIsCountedAndDropped) {
  LoopbackRack rack(mtus(9000, 1500));
  const std::string key = fresh_id();
  FakeApp a(rack.socket(0), 0, kHosts, kTotal, key), b(rack.socket(1), 1, kHosts, kTotal, key);
  attach_both(a, b);
  ASSERT_FALSE(HasFailure());
  a.request(0, 1, 1, pattern(0, 1, 1, false, kFullSlot));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_NE(b.request_seq(0, 0, 1), 1u) << "a frame longer than host b's MTU was delivered";
  rack.stop();
  EXPECT_GT(rack.stat(1, "dropped{reason=\"too_long\"}"), 0u);
  EXPECT_GT(rack.stat(0, "retransmits"), 0u);
}

}  // namespace
}  // namespace gossamer::dataplane::testing
