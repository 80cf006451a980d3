// The dataplane wire format (dataplane/src/wire.hpp): frames built with
// write_l2l4 pass parse_frame and walk with RecordCursor; every Drop reason
// is reached by the frame that should reach it; truncated and corrupted
// frames are rejected without reading outside the buffer (the ASan build
// checks that: every parse below reads from a buffer of exactly the frame's
// length).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "auth.hpp"
#include "wire.hpp"
#include "wire_frames.hpp"

namespace {

using namespace gossamer::dataplane::wire;
using namespace wire_frames;

// ---- accepted frames ---------------------------------------------------------

void expect_walk(const std::vector<RecSpec>& specs) {
  auto f = data_frame(specs, 42);
  ParsedFrame pf{};
  ASSERT_EQ(parse_frame(f.data(), f.size(), kHosts[kSelf], kHosts, kHostCount, kSelf, kConns, nullptr, &pf),
            Drop::kNone);
  EXPECT_EQ(pf.hdr.magic, kMagic);
  EXPECT_EQ(pf.hdr.type, kData);
  EXPECT_EQ(pf.hdr.seq, 42u);
  EXPECT_EQ(pf.hdr.records, specs.size());
  EXPECT_EQ(pf.src_ip, kHosts[0].ip);
  EXPECT_EQ(pf.records, f.data() + kL2L4Bytes + sizeof(FrameHeader));
  EXPECT_EQ(pf.src_mac, f.data() + 6);
  EXPECT_EQ(std::memcmp(pf.src_mac, kMacSrc, 6), 0);

  RecordCursor cur(pf.records, pf.hdr.length);
  RecordView v;
  for (std::size_t j = 0; j < specs.size(); ++j) {
    SCOPED_TRACE(j);
    ASSERT_TRUE(cur.next(&v));
    EXPECT_EQ(v.rec.kind, specs[j].kind);
    EXPECT_EQ(v.rec.primary_len, specs[j].primary);
    EXPECT_EQ(v.rec.overflow_len, specs[j].overflow);
    EXPECT_EQ(v.rec.slot_seq, specs[j].slot_seq);
    EXPECT_EQ(v.rec.client, j);
    EXPECT_EQ(v.rec.trustee, 100 + j);
    EXPECT_EQ(v.rec.app, 0xabcd'0000ull + j);
    std::size_t body = std::size_t(specs[j].primary) + specs[j].overflow;
    for (std::size_t i = 0; i < body; ++i) ASSERT_EQ(v.payload[i], pattern(j, i)) << i;
  }
  EXPECT_FALSE(cur.next(&v));
  check_accepted_walk(pf);
}

TEST(WireParse, ThreeRecordsWalk) { expect_walk(kThree); }

TEST(WireParse, EmptyDataFrame) { expect_walk({}); }

TEST(WireParse, OddLengthsArePadded) {
  std::vector<RecSpec> specs;
  for (std::uint16_t n = 0; n < 17; ++n)
    specs.push_back({std::uint8_t(n % 2 ? kRecResponse : kRecRequest), n, std::uint16_t(n % 3), n});
  expect_walk(specs);
}

TEST(WireParse, AttachAndDetachRecords) {
  expect_walk({{kRecAttach, sizeof(AttachAnnounce), 0, 0},
               {kRecRequest, 7, 0, 1},
               {kRecDetach, sizeof(AttachAnnounce), 0, 0}});
}

TEST(WireParse, FullSizeFrame) {
  // One record filling kMaxRecordBytes: with its tag, the frame is
  // kMaxFrame bytes.
  std::uint16_t body = std::uint16_t(kMaxRecordBytes - sizeof(WireRecord));
  auto f = data_frame({{kRecRequest, 100, std::uint16_t(body - 100), 9}});
  EXPECT_EQ(f.size() + kTagBytes, kMaxFrame);
  expect_walk({{kRecRequest, 100, std::uint16_t(body - 100), 9}});
}

TEST(WireParse, AckOnlyFrame) {
  FrameHeader h = make_header(kAckOnly, 0, 0, 0);
  // Incarnations are 64 bits (nanoseconds since the epoch): all of them travel.
  h.boot = 0x1781'2345'6789'abcdull;
  h.dst_boot = 0x1781'0000'0000'0001ull;
  auto f = assemble(h, {});
  EXPECT_EQ(f.size(), kL2L4Bytes + 48);
  ParsedFrame pf{};
  ASSERT_EQ(parse_frame(f.data(), f.size(), kHosts[kSelf], kHosts, kHostCount, kSelf, kConns, nullptr, &pf),
            Drop::kNone);
  EXPECT_EQ(pf.hdr.type, kAckOnly);
  EXPECT_EQ(pf.hdr.ack, 3u);
  EXPECT_EQ(pf.hdr.credit, 9u);
  EXPECT_EQ(pf.hdr.boot, 0x1781'2345'6789'abcdull);
  EXPECT_EQ(pf.hdr.dst_boot, 0x1781'0000'0000'0001ull);
  EXPECT_EQ(parse_exact(f), Drop::kNone);
}

TEST(WireParse, FromAnotherHostAndConnection) {
  auto recs = make_records(kThree);
  FrameHeader h = make_header(kData, 1, 3, recs.size());
  h.src_host = 2;
  h.conn = 0;
  EXPECT_EQ(parse_exact(assemble(h, recs, kHosts[2])), Drop::kNone);
}

TEST(WireParse, EthernetPaddingAfterThePacketIsIgnored) {
  auto f = data_frame(kThree);
  f.resize(f.size() + 6, 0);
  EXPECT_EQ(parse_exact(f), Drop::kNone);
}

TEST(WireParse, ZeroUdpChecksumMeansNone) {
  auto f = data_frame(kThree);
  udp_of(f)[6] = udp_of(f)[7] = 0;
  EXPECT_EQ(parse_exact(f), Drop::kNone);
}

TEST(WireParse, IndependentChecksumAgrees) {
  auto f = data_frame(kThree);
  auto g = f;
  fix_ip_checksum(g);
  fix_udp_checksum(g);
  EXPECT_EQ(f, g);
  EXPECT_EQ(inet_sum(ip_of(f), kIpBytes), 0xffff);
}

// write_l2l4's checksums (summed 4 bytes at a time) against the test's
// byte-by-byte sum, for every payload length up to 300 (odd and even, each
// tail of the word loop) and a few up to the largest MTU, with random bytes.
TEST(WireParse, ChecksumsAgreeAtEveryLength) {
  std::uint32_t x = 12345;
  auto next = [&x] { return x = x * 1103515245u + 12345u; };
  std::vector<std::size_t> lens;
  for (std::size_t n = 0; n <= 300; ++n) lens.push_back(n);
  for (std::size_t n : {1023u, 1408u, 4097u, 8953u, 9174u}) lens.push_back(n);
  for (std::size_t n : lens) {
    std::vector<std::uint8_t> f(kL2L4Bytes + n);
    for (std::size_t i = kL2L4Bytes; i < f.size(); ++i) f[i] = std::uint8_t(next() >> 16);
    if (n % 7 == 0)  // all ones: sums that fold to 0xffff
      std::fill(f.begin() + kL2L4Bytes, f.end(), std::uint8_t(0xff));
    write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], n);
    auto g = f;
    fix_ip_checksum(g);
    fix_udp_checksum(g);
    ASSERT_EQ(f, g) << "payload of " << n << " bytes";
  }
}

TEST(WireParse, NoUdpChecksumWhenAsked) {
  std::vector<std::uint8_t> f(kL2L4Bytes + 64, 0x5a);
  write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], 64, /*udp_checksum=*/false);
  EXPECT_EQ(udp_of(f)[6], 0);
  EXPECT_EQ(udp_of(f)[7], 0);
  EXPECT_EQ(inet_sum(ip_of(f), kIpBytes), 0xffff);  // the IPv4 checksum is still there
}

TEST(WireParse, DropNames) {
  for (int d = 0; d < int(Drop::kCount); ++d)
    EXPECT_STRNE(drop_name(Drop(d)), "unknown") << d;
  EXPECT_STREQ(drop_name(Drop::kNone), "none");
  EXPECT_STREQ(drop_name(Drop::kCount), "unknown");
}

// ---- one test per Drop reason --------------------------------------------------

TEST(WireDrop, TooShortForIpHeader) {
  auto f = data_frame(kThree);
  EXPECT_EQ(parse_exact(f.data(), kEthBytes + kIpBytes - 1), Drop::kTooShort);
  EXPECT_EQ(parse_exact(f.data(), 0), Drop::kTooShort);
}

TEST(WireDrop, TooShortForUdpHeader) {
  // A valid IP header whose total length leaves no room for UDP.
  auto f = data_frame(kThree);
  set_be16(ip_of(f) + 2, kIpBytes + 4);
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kTooShort);
}

TEST(WireDrop, TooShortForFrameHeader) {
  std::vector<std::uint8_t> f(kL2L4Bytes + sizeof(FrameHeader) - 1, 0);
  FrameHeader h = make_header(kAckOnly, 0, 0, 0);
  std::memcpy(f.data() + kL2L4Bytes, &h, sizeof h - 1);
  write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], sizeof h - 1);
  EXPECT_EQ(parse_exact(f), Drop::kTooShort);
}

TEST(WireDrop, TooShortHeaderLengthMismatch) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.length += 8; })),
            Drop::kTooShort);
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.length -= 8; })),
            Drop::kTooShort);
}

TEST(WireDrop, NotIpv4) {
  auto f = data_frame(kThree);
  f[12] = 0x86;
  f[13] = 0xdd;
  EXPECT_EQ(parse_exact(f), Drop::kNotIpv4);
  f[12] = 0x08;
  f[13] = 0x06;  // ARP
  EXPECT_EQ(parse_exact(f), Drop::kNotIpv4);
}

TEST(WireDrop, IpOptions) {
  auto f = data_frame(kThree);
  ip_of(f)[0] = 0x46;
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kIpHeader);
}

TEST(WireDrop, IpVersion) {
  auto f = data_frame(kThree);
  ip_of(f)[0] = 0x65;
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kIpHeader);
}

TEST(WireDrop, IpTotalLengthBeyondFrame) {
  auto f = data_frame(kThree);
  set_be16(ip_of(f) + 2, f.size() - kEthBytes + 1);
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kIpHeader);
  set_be16(ip_of(f) + 2, kIpBytes - 1);
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kIpHeader);
}

TEST(WireDrop, Fragment) {
  auto f = data_frame(kThree);
  ip_of(f)[6] = 0x20;  // more fragments
  ip_of(f)[7] = 0;
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kIpHeader);
  ip_of(f)[6] = 0x00;
  ip_of(f)[7] = 0x10;  // offset 16*8
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kIpHeader);
  ip_of(f)[6] = 0x40;  // don't fragment alone is fine
  ip_of(f)[7] = 0;
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kNone);
}

TEST(WireDrop, IpChecksum) {
  auto f = data_frame(kThree);
  ip_of(f)[11] ^= 0x01;
  EXPECT_EQ(parse_exact(f), Drop::kIpChecksum);
  f = data_frame(kThree);
  ip_of(f)[8] = 3;  // TTL changed, checksum not updated
  EXPECT_EQ(parse_exact(f), Drop::kIpChecksum);
}

TEST(WireDrop, NotUdp) {
  auto f = data_frame(kThree);
  ip_of(f)[9] = 6;  // TCP
  fix_ip_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kNotUdp);
}

TEST(WireDrop, WrongDestinationAddress) {
  auto recs = make_records(kThree);
  auto h = make_header(kData, 5, 3, recs.size());
  Endpoint other{ip4(10, 0, 0, 9), kHosts[kSelf].port};
  EXPECT_EQ(parse_exact(assemble(h, recs, kHosts[0], other)), Drop::kNotForUs);
}

TEST(WireDrop, WrongDestinationPort) {
  auto recs = make_records(kThree);
  auto h = make_header(kData, 5, 3, recs.size());
  Endpoint other{kHosts[kSelf].ip, std::uint16_t(kHosts[kSelf].port + 1)};
  EXPECT_EQ(parse_exact(assemble(h, recs, kHosts[0], other)), Drop::kNotForUs);
}

TEST(WireDrop, UdpLengthMismatch) {
  auto f = data_frame(kThree);
  std::size_t udp_len = f.size() - kEthBytes - kIpBytes;
  set_be16(udp_of(f) + 4, udp_len - 1);
  fix_udp_checksum(f);
  EXPECT_EQ(parse_exact(f), Drop::kUdpLength);
  set_be16(udp_of(f) + 4, udp_len + 1);
  udp_of(f)[6] = udp_of(f)[7] = 0;
  EXPECT_EQ(parse_exact(f), Drop::kUdpLength);
  set_be16(udp_of(f) + 4, 0);
  EXPECT_EQ(parse_exact(f), Drop::kUdpLength);
}

TEST(WireDrop, UdpChecksum) {
  auto f = data_frame(kThree);
  f[kL2L4Bytes + sizeof(FrameHeader) + sizeof(WireRecord) + 3] ^= 0x40;  // record 0 payload
  EXPECT_EQ(parse_exact(f), Drop::kUdpChecksum);
  f = data_frame(kThree);
  udp_of(f)[7] ^= 0x01;  // the checksum itself
  EXPECT_EQ(parse_exact(f), Drop::kUdpChecksum);
}

TEST(WireDrop, BadMagic) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.magic ^= 1; })),
            Drop::kBadMagic);
}

TEST(WireDrop, BadVersion) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.version = kVersion + 1; })),
            Drop::kBadVersion);
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.version = 0; })),
            Drop::kBadVersion);
}

TEST(WireDrop, BadType) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.type = 0; })), Drop::kBadType);
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.type = 3; })), Drop::kBadType);
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.type = 0xff; })),
            Drop::kBadType);
}

TEST(WireDrop, AckOnlyWithRecords) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) {
              h.type = kAckOnly;
              h.seq = 0;
            })),
            Drop::kBadType);
}

TEST(WireDrop, AckOnlyWithSeqOrCount) {
  auto ack = [](auto edit) {
    FrameHeader h = make_header(kAckOnly, 0, 0, 0);
    edit(h);
    return assemble(h, {});
  };
  EXPECT_EQ(parse_exact(ack([](FrameHeader& h) { h.seq = 1; })), Drop::kBadType);
  EXPECT_EQ(parse_exact(ack([](FrameHeader& h) { h.records = 1; })), Drop::kBadType);
  EXPECT_EQ(parse_exact(ack([](FrameHeader&) {})), Drop::kNone);
}

// Sequence numbers wrap at 2^32 (issue 18 finding 4): a data frame's seq
// may be 0, like any other; the type tells data from ack-only.
TEST(WireParse, DataSeqZeroAfterTheWrap) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.seq = 0; })), Drop::kNone);
}

TEST(WireDrop, SourceHostUnknown) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.src_host = kHostCount; })),
            Drop::kBadHost);
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.src_host = 0xffff; })),
            Drop::kBadHost);
}

TEST(WireDrop, SourceHostIsSelf) {
  auto recs = make_records(kThree);
  FrameHeader h = make_header(kData, 5, 3, recs.size());
  h.src_host = kSelf;
  // Even from our own address (a looped-back frame).
  EXPECT_EQ(parse_exact(assemble(h, recs, kHosts[kSelf])), Drop::kBadHost);
  EXPECT_EQ(parse_exact(assemble(h, recs, kHosts[0])), Drop::kBadHost);
}

TEST(WireDrop, SourceAddressMismatch) {
  auto recs = make_records(kThree);
  FrameHeader h = make_header(kData, 5, 3, recs.size());
  h.src_host = 2;  // claims host 2, sent from host 0's address
  EXPECT_EQ(parse_exact(assemble(h, recs, kHosts[0])), Drop::kBadHost);
  h.src_host = 0;  // host 0's address, wrong source port
  Endpoint wrong_port{kHosts[0].ip, std::uint16_t(kHosts[0].port + 1)};
  EXPECT_EQ(parse_exact(assemble(h, recs, wrong_port)), Drop::kBadHost);
}

TEST(WireDrop, DestinationHostNotSelf) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.dst_host = 2; })),
            Drop::kBadHost);
}

TEST(WireDrop, ConnectionOutOfRange) {
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.conn = kConns; })),
            Drop::kBadConn);
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.conn = 0xff; })),
            Drop::kBadConn);
}

TEST(WireDrop, RecordUnknownKind) {
  for (std::uint8_t kind : {std::uint8_t(0), std::uint8_t(5), std::uint8_t(0xff)}) {
    SCOPED_TRACE(int(kind));
    auto f = with_records(kThree, [kind](FrameHeader&, std::vector<std::uint8_t>& recs) {
      WireRecord r = get_record(recs, 0);
      r.kind = kind;
      set_record(recs, 0, r);
    });
    EXPECT_EQ(parse_exact(f), Drop::kBadRecord);
  }
}

TEST(WireDrop, RecordLengthsOverrun) {
  // The last record claims more payload than the frame holds.
  auto f = with_records({{kRecRequest, 8, 0, 1}, {kRecRequest, 8, 0, 2}},
                        [](FrameHeader&, std::vector<std::uint8_t>& recs) {
                          WireRecord r = get_record(recs, 40);
                          r.primary_len = 9;
                          set_record(recs, 40, r);
                        });
  EXPECT_EQ(parse_exact(f), Drop::kBadRecord);
  // The first record's lengths swallow the second one and more.
  f = with_records({{kRecRequest, 8, 0, 1}, {kRecRequest, 8, 0, 2}},
                   [](FrameHeader&, std::vector<std::uint8_t>& recs) {
                     WireRecord r = get_record(recs, 0);
                     r.overflow_len = 0xffff;
                     r.primary_len = 0xffff;
                     set_record(recs, 0, r);
                   });
  EXPECT_EQ(parse_exact(f), Drop::kBadRecord);
  // More records claimed than present.
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.records = 4; })),
            Drop::kBadRecord);
  // A partial record header at the end.
  f = with_records(kThree, [](FrameHeader& h, std::vector<std::uint8_t>& recs) {
    recs.resize(recs.size() + 16, 0);
    h.records = 4;
  });
  EXPECT_EQ(parse_exact(f), Drop::kBadRecord);
}

TEST(WireDrop, AttachRecordWrongLength) {
  for (std::uint8_t kind : {kRecAttach, kRecDetach}) {
    SCOPED_TRACE(int(kind));
    EXPECT_EQ(parse_exact(data_frame({{kind, sizeof(AttachAnnounce) - 8, 0, 0}})),
              Drop::kBadRecord);
    EXPECT_EQ(parse_exact(data_frame({{kind, sizeof(AttachAnnounce) + 8, 0, 0}})),
              Drop::kBadRecord);
    EXPECT_EQ(parse_exact(data_frame({{kind, 0, sizeof(AttachAnnounce), 0}})), Drop::kBadRecord);
    EXPECT_EQ(parse_exact(data_frame({{kind, sizeof(AttachAnnounce), 8, 0}})), Drop::kBadRecord);
    EXPECT_EQ(parse_exact(data_frame({{kind, sizeof(AttachAnnounce), 0, 0}})), Drop::kNone);
  }
}

TEST(WireDrop, TrailingBytesAfterRecords) {
  // Fewer records claimed than the length holds.
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.records = 2; })),
            Drop::kBadRecord);
  EXPECT_EQ(parse_exact(with_header(kThree, [](FrameHeader& h) { h.records = 0; })),
            Drop::kBadRecord);
  // Bytes after the last record, counted in the length.
  auto f = with_records(kThree, [](FrameHeader&, std::vector<std::uint8_t>& recs) {
    recs.resize(recs.size() + 8, 0);
  });
  EXPECT_EQ(parse_exact(f), Drop::kBadRecord);
  // Fewer than 8: a record without its padding (lengths 7 -> 8 padded).
  f = with_records({{kRecRequest, 7, 0, 1}}, [](FrameHeader&, std::vector<std::uint8_t>& recs) {
    recs.pop_back();
  });
  EXPECT_EQ(parse_exact(f), Drop::kBadRecord);
}

}  // namespace
