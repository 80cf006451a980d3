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

}  // namespace
}  // namespace gossamer::dataplane
