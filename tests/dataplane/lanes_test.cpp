// The dataplane's order of a pair's lanes (dataplane/src/app.hpp,
// deliver.cpp; gossamer/abi/attach.hpp "Lanes").
#include <gtest/gtest.h>

#include <gossamer/abi/attach.hpp>

#include "app.hpp"

namespace gossamer::dataplane {
namespace {

constexpr std::uint32_t K = abi::kLanes;
static_assert(K >= 2);

// Which request a lane takes next (deliver.cpp): batch seq of a pair uses
// lane seq % K, so a lane takes every K-th seq, starting at 1 to K.
TEST(Lanes, NextInLane) {
  EXPECT_TRUE(App::next_in_lane(0, 1));   // lane 1's first
  EXPECT_TRUE(App::next_in_lane(0, 2));   // lane 2's first, before or after batch 1
  EXPECT_TRUE(App::next_in_lane(0, K));   // lane 0's first
  EXPECT_FALSE(App::next_in_lane(0, 0));  // nothing is batch 0
  EXPECT_FALSE(App::next_in_lane(0, K + 1));  // lane 1, but batch 1 first
  EXPECT_FALSE(App::next_in_lane(0, 2 * K));
  EXPECT_TRUE(App::next_in_lane(1, K + 1));
  EXPECT_FALSE(App::next_in_lane(1, 1));  // a repeat
  EXPECT_FALSE(App::next_in_lane(1, 2));  // another lane's
  EXPECT_FALSE(App::next_in_lane(1, K + 2));  // another lane's next
  EXPECT_FALSE(App::next_in_lane(1, 2 * K + 1));  // a skip
  EXPECT_TRUE(App::next_in_lane(2, K + 2));
  EXPECT_FALSE(App::next_in_lane(K + 2, 2));  // an old one
  // Across the wrap of the 32-bit seq (2^32 is a multiple of K: each seq
  // keeps its lane).
  EXPECT_TRUE(App::next_in_lane(0u - K, 0));
  EXPECT_TRUE(App::next_in_lane(0u - K + 1, 1));
  EXPECT_TRUE(App::next_in_lane(0, K));  // lane 0 after the wrap took 0
  EXPECT_FALSE(App::next_in_lane(0xffff'ffffu, 0xffff'ffffu));
}

// A slot's block index: lane-major, and a seq names its lane (seq % K).
TEST(Lanes, SlotCell) {
  EXPECT_EQ(abi::slot_cell(4, 0, 0, 0), 0u);
  EXPECT_EQ(abi::slot_cell(4, 0, 2, 3), 11u);
  EXPECT_EQ(abi::slot_cell(4, 1, 2, 3), 16u + 11u);
  EXPECT_EQ(abi::slot_cell(4, K - 1, 2, 3), (K - 1) * 16u + 11u);
  EXPECT_EQ(abi::slot_cell(4, K + 1, 2, 3), abi::slot_cell(4, 1, 2, 3));
  EXPECT_EQ(abi::slot_cell(4, 0u - K, 2, 3), abi::slot_cell(4, 0, 2, 3));
}

// Thread 0 of one host, a client of trustee 1 on the other: the
// bookkeeping the doorbell and delivery stages keep for the pair.
struct Pair {
  App a;
  Pair() {
    a.total = 2, a.first = 0, a.local = 1;
    a.out_req.assign(abi::kLanes * 2, 0);
    a.client_out.assign(2, 0);
  }
  // What doorbell() does for a request, in its order.
  void ship(std::uint32_t seq) {
    ASSERT_EQ(a.last_shipped(0, 1) + 1, seq);
    a.batch_out(a.client_out, 0, 1);
    a.set(a.out_req, 0, 1, seq, seq, std::memory_order_release);
  }
};

// Which responses deliver_response takes: the one its lane shipped last,
// in any order across the lanes; nothing before the first ship.
TEST(Lanes, ResponseAnswersItsLanesLastShip) {
  Pair p;
  App& a = p.a;
  // Nothing shipped: a response "to the batch before 0" was taken before.
  EXPECT_FALSE(a.lane_shipped(0, 1, 0xffff'ffffu));
  EXPECT_FALSE(a.lane_shipped(0, 1, 1));
  p.ship(1);
  EXPECT_TRUE(a.lane_shipped(0, 1, 1));
  EXPECT_FALSE(a.lane_shipped(0, 1, 2));
  EXPECT_FALSE(a.lane_shipped(0, 1, K + 1));
  for (std::uint32_t q = 2; q <= K; ++q) p.ship(q);
  // All K out: any answer may come first, and 1's is still taken after K's.
  for (std::uint32_t q = 1; q <= K; ++q) EXPECT_TRUE(a.lane_shipped(0, 1, q)) << q;
  EXPECT_FALSE(a.lane_shipped(0, 1, 0xffff'ffffu));
  p.ship(K + 1);
  EXPECT_FALSE(a.lane_shipped(0, 1, 1));  // lane 1 moved on: 1's answer is stale
  EXPECT_TRUE(a.lane_shipped(0, 1, 2));   // the others did not
  EXPECT_TRUE(a.lane_shipped(0, 1, K + 1));
  EXPECT_EQ(a.last_shipped(0, 1), K + 1);
}

TEST(Lanes, LastShippedAcrossTheWrap) {
  Pair p;
  App& a = p.a;
  EXPECT_EQ(a.last_shipped(0, 1), 0u);
  // Every lane shipped once, the last of them 2^32 - 2 (lane K - 2).
  for (std::uint32_t q = 0xffff'fffeu - (K - 1); q != 0xffff'ffffu; ++q) a.set(a.out_req, 0, 1, q, q);
  EXPECT_EQ(a.last_shipped(0, 1), 0xffff'fffeu);
  p.ship(0xffff'ffffu);
  EXPECT_EQ(a.last_shipped(0, 1), 0xffff'ffffu);
  p.ship(0);
  EXPECT_EQ(a.last_shipped(0, 1), 0u);
  p.ship(1);
  EXPECT_EQ(a.last_shipped(0, 1), 1u);
}

// A pair opens one exchange (Peer::open) however many of its batches are
// out, and closes it with the answer to its last; never below 0.
TEST(Lanes, APairOpensOneExchange) {
  Pair p;
  App& a = p.a;
  EXPECT_TRUE(a.batch_out(a.client_out, 0, 1));  // 0 -> 1: opens
  for (std::uint32_t n = 2; n <= K; ++n) EXPECT_FALSE(a.batch_out(a.client_out, 0, 1)) << n;  // already open
  for (std::uint32_t n = K; n > 1; --n) EXPECT_FALSE(a.batch_back(a.client_out, 0, 1)) << n;  // still open
  EXPECT_TRUE(a.batch_back(a.client_out, 0, 1));  // 1 -> 0: closes
  EXPECT_FALSE(a.batch_back(a.client_out, 0, 1));  // stays 0
  EXPECT_EQ(a.get(a.client_out, 0, 1), 0u);
  EXPECT_TRUE(a.batch_out(a.client_out, 0, 1));   // opens again
}

}  // namespace
}  // namespace gossamer::dataplane
