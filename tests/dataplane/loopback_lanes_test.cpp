// The lanes contract at the doorbell, end to end over the loopback rack
// (dataplane/src/doorbells.cpp, deliver.cpp; gossamer/abi/attach.hpp
// "Lanes"): what an application rings out of turn is counted and dropped,
// and leaves no exchange open (Peer::open) behind it.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "loopback_rack.hpp"
#include "loopback_traffic.hpp"

namespace gossamer::dataplane::testing {
namespace {

// Waits up to `limit` for `ok`.
template <class F>
bool eventually(F ok, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (!ok()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Client 0 (host a) has batches 1 to K out to trustee 2 (host b), one per
// lane, and rings batch K + 1 into lane 1 before batch 1's answer came:
// the lane is not free. Shipped, it counted a batch beyond kLanes in
// flight for the pair (client_out), took lane 1 from batch 1, whose answer
// was then rejected after its frame was acked, and left the exchange open
// for good (host b rejects batch K + 1 as well: its trustee has not
// answered 1). Dropped at the doorbell, the pair goes on as if it was
// never rung.
TEST(LoopbackLanes, RequestIntoABusyLaneIsDropped) {
  LoopbackRack rack({1, 1, 1, ""});
  const std::string key = fresh_id();
  FakeApp a(rack.socket(0), 0, kHosts, kTotal, key), b(rack.socket(1), 1, kHosts, kTotal, key);
  attach_both(a, b);
  const std::uint32_t client = 0, trustee = 2;  // a's local 0, b's local 0
  auto body = [&](std::uint32_t seq, bool response) {
    return pattern(client, trustee, seq, response, size_of(seq, response));
  };
  constexpr std::uint32_t K = abi::kLanes, extra = K + 1;  // `extra`: lane 1's second batch
  for (std::uint32_t q = 1; q <= K; ++q) a.request(0, trustee, q, body(q, false));
  ASSERT_TRUE(eventually(
      [&] {
        for (std::uint32_t q = 1; q <= K; ++q)
          if (b.request_seq(0, client, q) != q) return false;
        return true;
      },
      std::chrono::seconds(10)));
  a.request(0, trustee, extra, body(extra, false));  // lane 1 still waits for 1's answer
  ASSERT_TRUE(eventually([&] { return a.doorbells_taken(0); }, std::chrono::seconds(10)));
  for (std::uint32_t q = 1; q <= K; ++q) b.respond(0, client, q, body(q, true));
  ASSERT_TRUE(eventually([&] { return a.response_seq(0, trustee, K) == K; }, std::chrono::seconds(10)));
  EXPECT_TRUE(eventually([&] { return a.response_seq(0, trustee, 1) == 1; }, std::chrono::seconds(10)))
      << "batch 1's answer was dropped: the out-of-turn batch " << extra << " took its lane";
  EXPECT_EQ(a.response_body(0, trustee, 1), body(1, true));
  ASSERT_TRUE(eventually([&] { return rack.exchanges_open(0) == 0 && rack.exchanges_open(1) == 0; },
                         std::chrono::seconds(5)))
      << "exchanges open: host a " << rack.exchanges_open(0) << ", host b " << rack.exchanges_open(1);
  // Rung again now that its lane is free, the batch goes, and is answered.
  a.request(0, trustee, extra, body(extra, false));
  ASSERT_TRUE(eventually([&] { return b.request_seq(0, client, extra) == extra; }, std::chrono::seconds(10)))
      << "batch " << extra << " never reached its trustee";
  EXPECT_EQ(b.request_body(0, client, extra), body(extra, false));
  b.respond(0, client, extra, body(extra, true));
  ASSERT_TRUE(eventually([&] { return a.response_seq(0, trustee, extra) == extra; }, std::chrono::seconds(10)));
  EXPECT_TRUE(eventually([&] { return rack.exchanges_open(0) == 0 && rack.exchanges_open(1) == 0; },
                         std::chrono::seconds(5)));
  rack.stop();
  EXPECT_EQ(rack.stat(0, "records_rejected"), 1u) << "host a: the out-of-turn doorbell";
  EXPECT_EQ(rack.stat(1, "records_rejected"), 0u) << "host b";
}

// Host b restarts while run 1's client 0 has a batch out to it: that
// exchange will never close, and the restart forgets it (Peer::open). Run
// 2 then has a batch out: one exchange open. Run 1's application leaving
// (release(), closing what it still had in flight) must not close run 2's:
// its count belongs to b's previous incarnation. Before, it did (host a
// counted 0 exchanges open with run 2's batch out), as would every answer
// a trustee of run 1 still gave to a request of b's previous incarnation.
TEST(LoopbackLanes, ARestartForgetsTheExchangesOfThePeersLastLife) {
  LoopbackRack rack({1, 1, 2, ""});
  const std::uint32_t client = 0, trustee = 2;
  auto body = [&](std::uint32_t seq, bool response) {
    return pattern(client, trustee, seq, response, size_of(seq, response));
  };
  const std::string key1 = fresh_id(), key2 = fresh_id();
  FakeApp a1(rack.socket(0), 0, kHosts, kTotal, key1);
  {
    FakeApp b1(rack.socket(1), 1, kHosts, kTotal, key1);
    attach_both(a1, b1);
    a1.request(0, trustee, 1, body(1, false));
    ASSERT_TRUE(eventually([&] { return b1.request_seq(0, client, 1) == 1; }, std::chrono::seconds(10)));
    EXPECT_EQ(rack.exchanges_open(0), 1);
    rack.restart(1);
  }
  FakeApp a2(rack.socket(0), 0, kHosts, kTotal, key2), b2(rack.socket(1), 1, kHosts, kTotal, key2);
  attach_both(a2, b2);  // host a has heard b's new incarnation (its announce)
  a2.request(0, trustee, 1, body(1, false));
  ASSERT_TRUE(eventually([&] { return b2.request_seq(0, client, 1) == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(rack.exchanges_open(0), 1) << "run 2's batch";
  a1.send_detach();
  ASSERT_TRUE(a1.wait_message(abi::kMsgDetached, 10'000));
  // Released within a few control jobs (1 ms each) of its detach.
  EXPECT_FALSE(eventually([&] { return rack.exchanges_open(0) != 1; }, std::chrono::milliseconds(300)))
      << "host a: " << rack.exchanges_open(0) << " open with run 2's batch out after run 1 left";
  b2.respond(0, client, 1, body(1, true));
  ASSERT_TRUE(eventually([&] { return a2.response_seq(0, trustee, 1) == 1; }, std::chrono::seconds(10)));
  EXPECT_TRUE(eventually([&] { return rack.exchanges_open(0) == 0 && rack.exchanges_open(1) == 0; },
                         std::chrono::seconds(5)));
  rack.stop();
  EXPECT_GT(rack.stat(0, "apps_detached"), 0u);
}

}  // namespace
}  // namespace gossamer::dataplane::testing
