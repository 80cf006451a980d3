// The verbs transport's queue-pair exchange message (controlplane/src/proto.hpp
// VerbsEndpoints; issue 22): its codec and the checks a dataplane relies on
// before it writes into a peer's ring. gossamerd does not carry it yet.
#include <gtest/gtest.h>

#include "proto.hpp"

namespace gossamer::cp {
namespace {

VerbsEndpoints sample() {
  VerbsEndpoints m;
  m.from = 1;
  m.to = 2;
  m.boot = 0x1234567890abcdefull;
  for (std::uint8_t i = 0; i < 16; ++i) m.gid[i] = std::uint8_t(0xf0 + i);
  m.lid = 0;
  m.qps.push_back({0, 0x11a, 0xabcdef, 0x5566, 0x7f0000001000ull, 4096, 0});
  m.qps.push_back({1, 0x11b, 0x000001, 0x5567, 0x7f0000201000ull, 4096, 3});
  return m;
}

TEST(VerbsExchange, RoundTrips) {
  const VerbsEndpoints m = sample();
  const std::string body = encode(m);
  // 4 + 4 + 8 + 16 + 4 + (4 + 2 * 32)
  EXPECT_EQ(body.size(), 104u);
  VerbsEndpoints back;
  ASSERT_TRUE(decode(body, back));
  EXPECT_EQ(back.from, 1u);
  EXPECT_EQ(back.boot, m.boot);
  EXPECT_EQ(back.gid, m.gid);
  ASSERT_EQ(back.qps.size(), 2u);
  EXPECT_EQ(back.qps[1].qpn, 0x11bu);
  EXPECT_EQ(back.qps[1].ring_addr, 0x7f0000201000ull);
  EXPECT_EQ(back.qps[1].generation, 3u);
  EXPECT_EQ(check_verbs_endpoints(back, 1, 2, 3, 2), "");
}

TEST(VerbsExchange, CutOrPaddedBodiesDoNotDecode) {
  const std::string body = encode(sample());
  VerbsEndpoints m;
  for (std::size_t cut = 0; cut < body.size(); ++cut) EXPECT_FALSE(decode(body.substr(0, cut), m)) << cut;
  EXPECT_FALSE(decode(body + "x", m));
  // A count far beyond the bytes left is refused before anything is allocated.
  std::string lie = body;
  lie[36] = char(0xff), lie[37] = char(0xff), lie[38] = char(0xff), lie[39] = char(0x7f);
  EXPECT_FALSE(decode(lie, m));
}

TEST(VerbsExchange, ChecksEveryField) {
  auto why = [](auto change) {
    VerbsEndpoints m = sample();
    change(m);
    return check_verbs_endpoints(m, 1, 2, 3, 2);
  };
  EXPECT_NE(why([](VerbsEndpoints& m) { m.from = 0; }), "");      // not the link's host
  EXPECT_NE(why([](VerbsEndpoints& m) { m.to = 0; }), "");        // for another host
  EXPECT_NE(why([](VerbsEndpoints& m) { m.boot = 0; }), "");
  EXPECT_NE(why([](VerbsEndpoints& m) { m.lid = 0x10000; }), "");
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps.clear(); }), "");
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps.push_back(m.qps[0]); }), "");  // three for two connections
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps[1].conn = 0; }), "");          // twice
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps[1].conn = 2; }), "");          // out of range
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps[0].qpn = 0x1000000; }), "");
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps[0].psn = 0x1000000; }), "");
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps[0].ring_units = 16385; }), "");
  EXPECT_NE(why([](VerbsEndpoints& m) { m.qps[0].ring_addr = ~0ull - 100; }), "");  // wraps
  EXPECT_EQ(why([](VerbsEndpoints&) {}), "");
}

}  // namespace
}  // namespace gossamer::cp
