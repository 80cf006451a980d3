#include "suggest.hpp"

#include <gtest/gtest.h>

namespace gossamer::config::detail {
namespace {

TEST(EditDistance, CountsInsertionsDeletionsSubstitutionsAndTranspositions) {
  EXPECT_EQ(edit_distance("port", "port"), 0u);
  EXPECT_EQ(edit_distance("port", "post"), 1u);
  EXPECT_EQ(edit_distance("core", "cores"), 1u);
  EXPECT_EQ(edit_distance("drvier", "driver"), 1u);
  EXPECT_EQ(edit_distance("Polling", "polling"), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

TEST(ClosestKey, SuggestsNearKeysAndKeysContainedInTheTypo) {
  const std::vector<std::string> keys = {"driver", "eal_args", "port", "verbs", "cores",
                                         "polling", "socket", "socket_group"};
  EXPECT_EQ(closest_key("polling_mode", keys), "polling");
  EXPECT_EQ(closest_key("drvier", keys), "driver");
  EXPECT_EQ(closest_key("socket_grp", keys), "socket_group");
  EXPECT_EQ(closest_key("core", keys), "cores");
  EXPECT_EQ(closest_key("frobnicate", keys), std::nullopt);
  EXPECT_EQ(closest_key("xy", keys), std::nullopt);
}

}  // namespace
}  // namespace gossamer::config::detail
