// The dataplane's order of a pair's two lanes (dataplane/src/app.hpp,
// deliver.cpp; gossamer/abi/attach.hpp "Lanes").
#include <gtest/gtest.h>

#include <gossamer/abi/attach.hpp>

#include "app.hpp"

namespace gossamer::dataplane {
namespace {

// Which request a lane takes next (deliver.cpp): batch seq of a pair uses
// lane seq & 1, so a lane takes every second seq, starting at 1 or 2.
TEST(Lanes, NextInLane) {
  EXPECT_TRUE(App::next_in_lane(0, 1));   // lane 1's first
  EXPECT_TRUE(App::next_in_lane(0, 2));   // lane 0's first, before or after batch 1
  EXPECT_FALSE(App::next_in_lane(0, 0));  // nothing is batch 0
  EXPECT_FALSE(App::next_in_lane(0, 3));  // lane 1, but batch 1 first
  EXPECT_FALSE(App::next_in_lane(0, 4));
  EXPECT_TRUE(App::next_in_lane(1, 3));
  EXPECT_FALSE(App::next_in_lane(1, 1));  // a repeat
  EXPECT_FALSE(App::next_in_lane(1, 2));  // the other lane's
  EXPECT_FALSE(App::next_in_lane(1, 5));  // a skip
  EXPECT_TRUE(App::next_in_lane(2, 4));
  EXPECT_FALSE(App::next_in_lane(4, 2));  // an old one
  // Across the wrap of the 32-bit seq (2^32 is even: the lanes alternate on).
  EXPECT_TRUE(App::next_in_lane(0xffff'fffeu, 0));
  EXPECT_TRUE(App::next_in_lane(0xffff'ffffu, 1));
  EXPECT_TRUE(App::next_in_lane(0, 2));  // lane 0 after the wrap took 0
  EXPECT_FALSE(App::next_in_lane(0xffff'ffffu, 0xffff'ffffu));
}

// A slot's block index: lane-major, and a seq names its lane by its low bit.
TEST(Lanes, SlotCell) {
  EXPECT_EQ(abi::slot_cell(4, 0, 0, 0), 0u);
  EXPECT_EQ(abi::slot_cell(4, 0, 2, 3), 11u);
  EXPECT_EQ(abi::slot_cell(4, 1, 2, 3), 16u + 11u);
  EXPECT_EQ(abi::slot_cell(4, 7, 2, 3), abi::slot_cell(4, 1, 2, 3));
  EXPECT_EQ(abi::slot_cell(4, 0xffff'fffeu, 2, 3), abi::slot_cell(4, 0, 2, 3));
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
// in either order across the two lanes; nothing before the first ship.
TEST(Lanes, ResponseAnswersItsLanesLastShip) {
  Pair p;
  App& a = p.a;
  // Nothing shipped: a response "to the batch before 0" was taken before.
  EXPECT_FALSE(a.lane_shipped(0, 1, 0xffff'ffffu));
  EXPECT_FALSE(a.lane_shipped(0, 1, 1));
  p.ship(1);
  EXPECT_TRUE(a.lane_shipped(0, 1, 1));
  EXPECT_FALSE(a.lane_shipped(0, 1, 2));
  EXPECT_FALSE(a.lane_shipped(0, 1, 3));
  p.ship(2);
  // Both out: 2's answer may come first, and 1's is still taken after it.
  EXPECT_TRUE(a.lane_shipped(0, 1, 2));
  EXPECT_TRUE(a.lane_shipped(0, 1, 1));
  EXPECT_FALSE(a.lane_shipped(0, 1, 0xffff'ffffu));
  p.ship(3);
  EXPECT_FALSE(a.lane_shipped(0, 1, 1));  // lane 1 moved on: 1's answer is stale
  EXPECT_TRUE(a.lane_shipped(0, 1, 3));
  EXPECT_EQ(a.last_shipped(0, 1), 3u);
}

TEST(Lanes, LastShippedAcrossTheWrap) {
  Pair p;
  App& a = p.a;
  EXPECT_EQ(a.last_shipped(0, 1), 0u);
  a.set(a.out_req, 0, 1, 0xffff'fffeu, 0);
  a.set(a.out_req, 0, 1, 0xffff'fffdu, 1);
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
  EXPECT_TRUE(a.batch_out(a.client_out, 0, 1));   // 0 -> 1: opens
  EXPECT_FALSE(a.batch_out(a.client_out, 0, 1));  // 1 -> 2: already open
  EXPECT_FALSE(a.batch_back(a.client_out, 0, 1));  // 2 -> 1: still open
  EXPECT_TRUE(a.batch_back(a.client_out, 0, 1));   // 1 -> 0: closes
  EXPECT_FALSE(a.batch_back(a.client_out, 0, 1));  // stays 0
  EXPECT_EQ(a.get(a.client_out, 0, 1), 0u);
  EXPECT_TRUE(a.batch_out(a.client_out, 0, 1));   // opens again
}

}  // namespace
}  // namespace gossamer::dataplane
