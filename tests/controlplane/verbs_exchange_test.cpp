// The verbs transport's queue-pair exchange message (controlplane/src/proto.hpp
// VerbsEndpoints; issue 22): its codec and the checks a dataplane relies on
// before it writes into a peer's ring; and gossamerd's relay
// (verbs_relay.hpp) between the dataplane's files and the mesh, with bad input
// of every kind.
#include <gtest/gtest.h>

#include "proto.hpp"
#include "verbs_relay.hpp"

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

// ---- the relay: the files and the mesh as gossamerd runs them ----------------

namespace dv = dataplane::verbs;

dv::ExchangeEntry entry(std::uint32_t host, std::uint64_t boot, std::uint32_t conn, std::uint32_t qpn,
                        std::uint32_t generation = 0) {
  dv::ExchangeEntry e;
  e.host = host;
  e.boot = boot;
  for (std::uint8_t i = 0; i < 16; ++i) e.gid[i] = std::uint8_t(0x10 * (boot & 0xf) + i);
  e.lid = 7;
  e.conn = conn;
  e.ep = dv::Endpoint{qpn, 0x1234 + qpn, 0x7f0000000000ull + 0x100000ull * conn, 0x99, 2048, generation};
  return e;
}

TEST(VerbsRelay, DataplaneFileToPeersAndBack) {
  // Host 0 of 3 with 2 connections per pair: its dataplane's file names
  // QPs to hosts 1 and 2.
  VerbsRelay r0(0, 3, 2), r1(1, 3, 2);
  const std::vector<dv::ExchangeEntry> mine = {entry(1, 50, 0, 0x101), entry(1, 50, 1, 0x102),
                                               entry(2, 50, 0, 0x201), entry(2, 50, 1, 0x202)};
  auto msgs = r0.local(dv::format_entries(mine));
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_TRUE(r0.local(dv::format_entries(mine)).empty());  // nothing changed: nothing to send
  VerbsEndpoints to1;
  ASSERT_TRUE(r0.message_for(1, &to1));
  EXPECT_EQ(to1.from, 0u);
  EXPECT_EQ(to1.to, 1u);
  EXPECT_EQ(to1.boot, 50u);
  ASSERT_EQ(to1.qps.size(), 2u);
  // Host 1's gossamerd takes it and writes host 0's QPs for its dataplane.
  EXPECT_TRUE(r1.on_message(0, encode(to1)));
  const auto peers = dv::parse_entries(r1.remote_text(), 3, 2);
  ASSERT_EQ(peers.size(), 2u);
  // The same QPs, with the sender (host 0) in place of the peer (host 1).
  for (std::size_t i = 0; i < 2; ++i) {
    dv::ExchangeEntry want = mine[i];
    want.host = 0;
    EXPECT_EQ(peers[i], want) << i;
  }
  EXPECT_FALSE(r1.on_message(0, encode(to1)));  // the same again changes nothing
  // A QP of connection 1 created again (generation 1): only host 1 hears of it.
  auto next = mine;
  next[1] = entry(1, 50, 1, 0x103, 1);
  msgs = r0.local(dv::format_entries(next));
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].to, 1u);
  EXPECT_TRUE(r1.on_message(0, encode(msgs[0])));
  EXPECT_EQ(dv::parse_entries(r1.remote_text(), 3, 2)[1].ep.qpn, 0x103u);
  // The older generation arriving late is ignored.
  EXPECT_FALSE(r1.on_message(0, encode(to1)));
  EXPECT_EQ(dv::parse_entries(r1.remote_text(), 3, 2)[1].ep.qpn, 0x103u);
  // A new incarnation of host 0 replaces all of its QPs; the previous
  // incarnation's, late, are ignored.
  VerbsEndpoints reborn = to1;
  reborn.boot = 60;
  reborn.qps.resize(1);
  EXPECT_TRUE(r1.on_message(0, encode(reborn)));
  auto after = dv::parse_entries(r1.remote_text(), 3, 2);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].boot, 60u);
  EXPECT_FALSE(r1.on_message(0, encode(msgs[0])));
  EXPECT_EQ(r1.messages_rejected(), 0u);
}

TEST(VerbsRelay, BadMessagesAreCountedAndDropped) {
  VerbsRelay r0(0, 3, 2), r1(1, 3, 2);
  r0.local(dv::format_entries({entry(1, 50, 0, 0x101)}));
  VerbsEndpoints good;
  ASSERT_TRUE(r0.message_for(1, &good));
  const std::string body = encode(good);
  std::uint64_t expect = 0;
  // Empty, cut at every length, padded, garbage.
  EXPECT_FALSE(r1.on_message(0, ""));
  ++expect;
  for (std::size_t cut = 1; cut < body.size(); ++cut, ++expect) EXPECT_FALSE(r1.on_message(0, body.substr(0, cut)));
  EXPECT_FALSE(r1.on_message(0, body + "x"));
  ++expect;
  EXPECT_FALSE(r1.on_message(0, std::string(4096, '\xff')));
  ++expect;
  // Decodes, but wrong: sent on host 2's link, for host 2, QPN beyond 24
  // bits, a ring that wraps, a connection out of range.
  EXPECT_FALSE(r1.on_message(2, body));
  ++expect;
  auto bent = [&](auto change) {
    VerbsEndpoints m = good;
    change(m);
    return r1.on_message(0, encode(m));
  };
  EXPECT_FALSE(bent([](VerbsEndpoints& m) { m.to = 2; }));
  EXPECT_FALSE(bent([](VerbsEndpoints& m) { m.qps[0].qpn = 1u << 24; }));
  EXPECT_FALSE(bent([](VerbsEndpoints& m) { m.qps[0].ring_addr = ~0ull - 64; }));
  EXPECT_FALSE(bent([](VerbsEndpoints& m) { m.qps[0].conn = 2; }));
  expect += 4;
  EXPECT_EQ(r1.messages_rejected(), expect);
  EXPECT_EQ(r1.messages_received(), expect);
  EXPECT_NE(r1.last_rejection(), "");
  EXPECT_EQ(r1.remote_text(), "");  // nothing of it reaches the dataplane
  // The good one still goes through afterwards.
  EXPECT_TRUE(r1.on_message(0, body));
  EXPECT_EQ(dv::parse_entries(r1.remote_text(), 3, 2).size(), 1u);
}

TEST(VerbsRelay, BadLinesOfTheDataplanesFileAreCountedAndSkipped) {
  VerbsRelay r0(0, 3, 2);
  std::string text = dv::format_entry(entry(1, 50, 0, 0x101));
  text += "qp 1 50\n";                                                // short
  text += "hello world\n";                                            // not a line of ours
  text += dv::format_entry(entry(3, 50, 0, 0x101));                   // no host 3
  text += dv::format_entry(entry(0, 50, 0, 0x101));                   // to ourselves
  text += dv::format_entry(entry(2, 50, 5, 0x101));                   // connection 5 of 2
  text += dv::format_entry(entry(2, 50, 1, 0));                       // QPN 0
  std::string big = dv::format_entry(entry(2, 50, 1, 0x7));
  big.replace(big.find(" 50 "), 4, " 99999999999999999999999 ");      // the incarnation overflows
  text += big;
  text += std::string(3000, 'z') + "\n";
  const auto msgs = r0.local(text);
  ASSERT_EQ(msgs.size(), 1u);  // host 1's line only
  EXPECT_EQ(msgs[0].to, 1u);
  EXPECT_EQ(r0.local_lines_rejected(), 8u);
}

TEST(VerbsRelay, EntriesRoundTripThroughTheFileFormat) {
  std::vector<dv::ExchangeEntry> es = {entry(1, 0xfedcba9876543210ull, 1, 0xffffff, 0xffffffffu)};
  es[0].ep.psn = 0xffffff;
  es[0].ep.rkey = 0xffffffffu;
  es[0].lid = 0xffff;
  std::uint64_t bad = 0;
  EXPECT_EQ(dv::parse_entries(dv::format_entries(es), 2, 2, &bad), es);
  EXPECT_EQ(bad, 0u);
  // Upper-case hex, a 31-digit GID, a negative number: refused.
  std::string line = dv::format_entry(es[0]);
  for (std::string b : {std::string("qp 1 1 ") + std::string(32, 'A') + " 0 0 1 0 0 64 1 0",
                        std::string("qp 1 1 ") + std::string(31, 'a') + " 0 0 1 0 0 64 1 0",
                        std::string("qp 1 1 ") + std::string(32, 'a') + " 0 0 -1 0 0 64 1 0"}) {
    std::string why;
    bad = 0;
    EXPECT_TRUE(dv::parse_entries(b, 2, 2, &bad, &why).empty()) << b;
    EXPECT_EQ(bad, 1u);
    EXPECT_NE(why, "");
  }
}

}  // namespace
}  // namespace gossamer::cp
