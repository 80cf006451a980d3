#include "address.hpp"

#include <gtest/gtest.h>

namespace gossamer::config::detail {
namespace {

std::string parsed(std::string_view text, AddressUse use = AddressUse::peer) {
  std::string why;
  const auto a = parse_address(text, use, why);
  return a ? a->to_string() + (a->ipv6 ? " v6" : " v4") : "error: " + why;
}

TEST(ParseAddress, AcceptsIpv4AndBracketedIpv6InCanonicalForm) {
  EXPECT_EQ(parsed("10.0.0.1:7700"), "10.0.0.1:7700 v4");
  EXPECT_EQ(parsed("[::1]:7700"), "[::1]:7700 v6");
  EXPECT_EQ(parsed("[FD00:0::1]:1"), "[fd00::1]:1 v6");
  EXPECT_EQ(parsed("0.0.0.0:0", AddressUse::listen), "0.0.0.0:0 v4");
}

TEST(ParseAddress, RejectsWhatIsNotAnIpLiteralWithAPort) {
  const std::string format = "error: expected IP:PORT, e.g. 10.0.0.1:7700";
  EXPECT_EQ(parsed("10.0.0.1"), format);
  EXPECT_EQ(parsed("localhost:7700"), format);
  EXPECT_EQ(parsed("10.0.0.256:1"), format);
  EXPECT_EQ(parsed("::1:7700"), format);
  EXPECT_EQ(parsed("[::1]7700"), format);
  EXPECT_EQ(parsed(""), format);
}

TEST(ParseAddress, ChecksThePortRangeByUse) {
  EXPECT_EQ(parsed("10.0.0.1:0"), "error: port must be in [1, 65535]");
  EXPECT_EQ(parsed("10.0.0.1:65536"), "error: port must be in [1, 65535]");
  EXPECT_EQ(parsed("10.0.0.1:+1"), "error: port must be in [1, 65535]");
  EXPECT_EQ(parsed("10.0.0.1:", AddressUse::listen), "error: port must be in [0, 65535]");
}

TEST(ParseAddress, DataplaneNeedsIpv4) {
  EXPECT_EQ(parsed("[::1]:7800", AddressUse::dataplane),
            "error: the dataplane needs an IPv4 address");
}

TEST(ParseMac, AcceptsSixHexBytesOnly) {
  EXPECT_EQ(parse_mac("02:00:00:00:00:0a"), (MacAddress{2, 0, 0, 0, 0, 10}));
  EXPECT_EQ(parse_mac("02:00:00:00:00:0A"), (MacAddress{2, 0, 0, 0, 0, 10}));
  EXPECT_EQ(parse_mac("02:00:00:00:00"), std::nullopt);
  EXPECT_EQ(parse_mac("02-00-00-00-00-01"), std::nullopt);
  EXPECT_EQ(parse_mac("0g:00:00:00:00:01"), std::nullopt);
  EXPECT_EQ(parse_mac("02:00:00:00:00:01:"), std::nullopt);
}

}  // namespace
}  // namespace gossamer::config::detail
