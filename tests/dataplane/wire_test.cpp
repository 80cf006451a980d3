// The dataplane wire format (dataplane/src/wire.hpp): frames built with
// write_l2l4 pass parse_frame and walk with RecordCursor; every Drop reason
// is reached by the frame that should reach it; truncated and corrupted
// frames are rejected without reading outside the buffer (the ASan build
// checks that: every parse below reads from a buffer of exactly the frame's
// length).
#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "auth.hpp"
#include "wire.hpp"

namespace {

using namespace gossamer::dataplane::wire;

std::uint32_t ip4(std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) {
  return htonl(a << 24 | b << 16 | c << 8 | d);
}

// A rack of three hosts; the parser runs as host 1 with two connections.
const Endpoint kHosts[3] = {
    {ip4(10, 0, 0, 1), 7000},
    {ip4(10, 0, 0, 2), 7001},
    {ip4(10, 0, 0, 3), 7002},
};
constexpr std::size_t kHostCount = 3;
constexpr std::uint32_t kSelf = 1;
constexpr std::uint32_t kConns = 2;
constexpr std::uint8_t kMacSrc[6] = {0x02, 0, 0, 0, 0, 0x01};
constexpr std::uint8_t kMacDst[6] = {0x02, 0, 0, 0, 0, 0x02};

struct RecSpec {
  std::uint8_t kind;
  std::uint16_t primary;
  std::uint16_t overflow = 0;
  std::uint32_t slot_seq = 0;
};

std::uint8_t pattern(std::size_t rec, std::size_t i) { return std::uint8_t(rec * 37 + i * 11 + 5); }

// Records back to back: WireRecord, payload (a pattern), zero padding to 8.
std::vector<std::uint8_t> make_records(const std::vector<RecSpec>& specs) {
  std::vector<std::uint8_t> out;
  for (std::size_t j = 0; j < specs.size(); ++j) {
    const RecSpec& s = specs[j];
    WireRecord r{};
    r.kind = s.kind;
    r.count = std::uint16_t(j + 1);
    r.client = std::uint16_t(j);
    r.trustee = std::uint16_t(100 + j);
    r.slot_seq = s.slot_seq;
    r.primary_len = s.primary;
    r.overflow_len = s.overflow;
    r.slot_flags = 0;
    r.app = 0xabcd'0000ull + j;
    std::size_t body = std::size_t(s.primary) + s.overflow;
    std::size_t at = out.size();
    out.resize(at + sizeof r + pad8(body), 0);
    std::memcpy(out.data() + at, &r, sizeof r);
    for (std::size_t i = 0; i < body; ++i) out[at + sizeof r + i] = pattern(j, i);
  }
  return out;
}

FrameHeader make_header(std::uint8_t type, std::uint32_t seq, std::uint16_t records,
                        std::size_t length) {
  FrameHeader h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.type = type;
  h.conn = 1;
  h.flags = 0;
  h.src_host = 0;
  h.dst_host = std::uint16_t(kSelf);
  h.boot = 7;
  h.seq = seq;
  h.ack = 3;
  h.credit = 9;
  h.records = records;
  h.length = std::uint16_t(length);
  h.coalesced = records;
  return h;
}

// Ethernet/IPv4/UDP + `h` + `recs`, checksums by write_l2l4.
std::vector<std::uint8_t> assemble(const FrameHeader& h, const std::vector<std::uint8_t>& recs,
                                   const Endpoint& src = kHosts[0],
                                   const Endpoint& dst = kHosts[kSelf]) {
  std::vector<std::uint8_t> f(kL2L4Bytes + sizeof h + recs.size());
  std::memcpy(f.data() + kL2L4Bytes, &h, sizeof h);
  if (!recs.empty()) std::memcpy(f.data() + kL2L4Bytes + sizeof h, recs.data(), recs.size());
  write_l2l4(f.data(), kMacSrc, kMacDst, src, dst, sizeof h + recs.size());
  return f;
}

std::vector<std::uint8_t> data_frame(const std::vector<RecSpec>& specs, std::uint32_t seq = 5) {
  auto recs = make_records(specs);
  return assemble(make_header(kData, seq, std::uint16_t(specs.size()), recs.size()), recs);
}

const std::vector<RecSpec> kThree = {
    {kRecRequest, 40, 0, 11}, {kRecResponse, 13, 200, 12}, {kRecRequest, 0, 0, 13}};

// Parses from a heap buffer of exactly `len` bytes so that ASan sees any
// read past the end. The result's pointers are not usable afterwards.
Drop parse_exact(const std::uint8_t* p, std::size_t len, ParsedFrame* out = nullptr) {
  std::vector<std::uint8_t> buf(p, p + len);
  ParsedFrame pf{};
  return parse_frame(buf.data(), len, kHosts[kSelf], kHosts, kHostCount, kSelf, kConns, nullptr,
                     out ? out : &pf);
}
Drop parse_exact(const std::vector<std::uint8_t>& f) { return parse_exact(f.data(), f.size()); }

// An independent Internet checksum, to repair headers after editing them.
std::uint16_t inet_sum(const std::uint8_t* p, std::size_t n, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < n; i += 2) sum += std::uint32_t(p[i]) << 8 | p[i + 1];
  if (n & 1) sum += std::uint32_t(p[n - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return std::uint16_t(sum);
}

std::uint8_t* ip_of(std::vector<std::uint8_t>& f) { return f.data() + kEthBytes; }
std::uint8_t* udp_of(std::vector<std::uint8_t>& f) { return f.data() + kEthBytes + kIpBytes; }

void fix_ip_checksum(std::vector<std::uint8_t>& f) {
  std::uint8_t* ip = ip_of(f);
  ip[10] = ip[11] = 0;
  std::uint16_t c = std::uint16_t(~inet_sum(ip, kIpBytes));
  ip[10] = std::uint8_t(c >> 8);
  ip[11] = std::uint8_t(c);
}

// Recomputes the UDP checksum over the bytes the UDP length field claims
// (clipped to the frame).
void fix_udp_checksum(std::vector<std::uint8_t>& f) {
  std::uint8_t* ip = ip_of(f);
  std::uint8_t* udp = udp_of(f);
  std::size_t claimed = std::size_t(udp[4]) << 8 | udp[5];
  std::size_t avail = f.size() - kEthBytes - kIpBytes;
  std::size_t n = claimed < avail ? claimed : avail;
  udp[6] = udp[7] = 0;
  std::uint32_t pseudo = inet_sum(ip + 12, 8);
  pseudo += 17;
  pseudo += std::uint32_t(claimed);
  std::uint16_t c = std::uint16_t(~inet_sum(udp, n, pseudo));
  if (c == 0) c = 0xffff;
  udp[6] = std::uint8_t(c >> 8);
  udp[7] = std::uint8_t(c);
}

void set_be16(std::uint8_t* p, std::size_t v) {
  p[0] = std::uint8_t(v >> 8);
  p[1] = std::uint8_t(v);
}

// Rebuilds a frame after editing its FrameHeader with `edit`.
template <class F>
std::vector<std::uint8_t> with_header(const std::vector<RecSpec>& specs, F edit) {
  auto recs = make_records(specs);
  FrameHeader h = make_header(kData, 5, std::uint16_t(specs.size()), recs.size());
  edit(h);
  return assemble(h, recs);
}

// Rebuilds a frame after editing its record bytes with `edit` (which may
// also adjust the header).
template <class F>
std::vector<std::uint8_t> with_records(const std::vector<RecSpec>& specs, F edit) {
  auto recs = make_records(specs);
  FrameHeader h = make_header(kData, 5, std::uint16_t(specs.size()), recs.size());
  edit(h, recs);
  h.length = std::uint16_t(recs.size());
  return assemble(h, recs);
}

void set_record(std::vector<std::uint8_t>& recs, std::size_t off, const WireRecord& r) {
  std::memcpy(recs.data() + off, &r, sizeof r);
}
WireRecord get_record(const std::vector<std::uint8_t>& recs, std::size_t off) {
  WireRecord r;
  std::memcpy(&r, recs.data() + off, sizeof r);
  return r;
}

// What must hold for every frame parse_frame accepts: the cursor walks
// exactly `records` records covering exactly `length` bytes.
void check_accepted_walk(const ParsedFrame& pf) {
  RecordCursor cur(pf.records, pf.hdr.length);
  RecordView v;
  std::size_t n = 0, bytes = 0;
  while (cur.next(&v)) {
    ++n;
    bytes += sizeof(WireRecord) + pad8(std::size_t(v.rec.primary_len) + v.rec.overflow_len);
    EXPECT_TRUE(v.rec.kind >= kRecRequest && v.rec.kind <= kRecDetach);
  }
  EXPECT_EQ(n, pf.hdr.records);
  EXPECT_EQ(bytes, pf.hdr.length);
}

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

// ---- fragments (version 2) ---------------------------------------------------------

// A data frame of the given records, each followed by record_body() bytes.
std::vector<std::uint8_t> frame_of(const std::vector<WireRecord>& rs) {
  std::vector<std::uint8_t> recs;
  for (const WireRecord& r : rs) {
    std::size_t body = std::size_t(r.frag & kFragment ? r.frag_len : r.primary_len + r.overflow_len);
    std::size_t at = recs.size();
    recs.resize(at + sizeof r + pad8(body), 0);
    std::memcpy(recs.data() + at, &r, sizeof r);
    for (std::size_t i = 0; i < body; ++i) recs[at + sizeof r + i] = pattern(0, i);
  }
  return assemble(make_header(kData, 5, std::uint16_t(rs.size()), recs.size()), recs);
}

WireRecord frag_rec(std::uint16_t primary, std::uint16_t overflow, std::uint32_t offset, std::uint16_t len,
                    bool more) {
  WireRecord r{};
  r.kind = kRecRequest;
  r.count = 3;
  r.client = 1;
  r.trustee = 2;
  r.slot_seq = 9;
  r.primary_len = primary;
  r.overflow_len = overflow;
  r.frag = std::uint8_t(kFragment | (more ? kFragMore : 0));
  r.frag_len = len;
  r.frag_offset = offset;
  r.app = 77;
  return r;
}

TEST(WireFragments, FragmentRecordsParseAndWalk) {
  static_assert(kVersion >= 2);  // fragments since version 2
  static_assert(kMaxFragmentBytes + sizeof(WireRecord) == kMaxRecordBytes);
  // A full first fragment fills a frame alone; a last one may share a frame.
  auto f = frame_of({frag_rec(96, 4000, 0, kMaxFragmentBytes, true)});
  EXPECT_EQ(f.size(), kL2L4Bytes + sizeof(FrameHeader) + kMaxRecordBytes);
  ParsedFrame pf;
  std::vector<std::uint8_t> keep = f;
  ASSERT_EQ(parse_frame(keep.data(), keep.size(), kHosts[kSelf], kHosts, kHostCount, kSelf, kConns, nullptr, &pf),
            Drop::kNone);
  WireRecord small{};
  small.kind = kRecResponse;
  small.primary_len = 24;
  auto g = frame_of({frag_rec(96, 4000, 2 * 1400, 4096 - 2800, false), small});
  keep = g;
  ASSERT_EQ(parse_frame(keep.data(), keep.size(), kHosts[kSelf], kHosts, kHostCount, kSelf, kConns, nullptr, &pf),
            Drop::kNone);
  RecordCursor cur(pf.records, pf.hdr.length);
  RecordView v;
  ASSERT_TRUE(cur.next(&v));
  EXPECT_EQ(record_body(v.rec), 4096u - 2800u);
  EXPECT_EQ(v.rec.frag_offset, 2800u);
  ASSERT_TRUE(cur.next(&v));
  EXPECT_EQ(v.rec.kind, kRecResponse);
  EXPECT_EQ(record_body(v.rec), 24u);
  EXPECT_FALSE(cur.next(&v));
}

TEST(WireFragments, MalformedFragmentFieldsDropped) {
  struct Case {
    const char* what;
    WireRecord r;
  };
  WireRecord unknown_bit = frag_rec(96, 4000, 0, 100, true);
  unknown_bit.frag |= 4;
  WireRecord more_without_fragment = frag_rec(96, 0, 0, 0, false);
  more_without_fragment.frag = kFragMore;
  WireRecord whole_with_offset{};
  whole_with_offset.kind = kRecRequest;
  whole_with_offset.primary_len = 16;
  whole_with_offset.frag_offset = 8;
  WireRecord whole_with_len = whole_with_offset;
  whole_with_len.frag_offset = 0;
  whole_with_len.frag_len = 16;
  WireRecord attach_fragment = frag_rec(sizeof(AttachAnnounce), 0, 0, sizeof(AttachAnnounce), false);
  attach_fragment.kind = kRecAttach;
  // Beyond the largest MTU's fragment (a frame within our MTU is checked before).
  WireRecord huge = frag_rec(0xffff, 0xffff, 0, std::uint16_t(max_fragment_bytes(kMaxMtu) + 8), true);
  std::vector<Case> cases = {
      {"unknown frag bit", unknown_bit},
      {"more without fragment", more_without_fragment},
      {"whole record with an offset", whole_with_offset},
      {"whole record with a fragment length", whole_with_len},
      {"attach as a fragment", attach_fragment},
      {"empty fragment", frag_rec(96, 4000, 0, 0, true)},
      {"beyond the slot", frag_rec(96, 4000, 4000, 200, false)},
      {"offset beyond the slot", frag_rec(96, 4000, 5000, 8, false)},
      {"offset wraps", frag_rec(96, 4000, 0xffff'fff8u, 16, false)},
      {"more, but ends the slot", frag_rec(96, 4000, 4096 - 96, 96, true)},
      {"last, but short of the end", frag_rec(96, 4000, 0, 1000, false)},
      {"larger than a frame", huge},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(parse_exact(frame_of({c.r})), Drop::kBadRecord);
  }
  EXPECT_EQ(parse_exact(frame_of({frag_rec(96, 4000, 4096 - 96, 96, false)})), Drop::kNone);
}

// ---- robustness ------------------------------------------------------------------

TEST(WireRobust, EveryTruncationRejected) {
  auto f = data_frame(kThree);
  ASSERT_EQ(parse_exact(f), Drop::kNone);
  for (std::size_t n = 0; n < f.size(); ++n) {
    Drop d = parse_exact(f.data(), n);
    EXPECT_NE(d, Drop::kNone) << "truncated to " << n << " of " << f.size();
  }
}

TEST(WireRobust, TruncationWithRepairedHeadersRejected) {
  // Truncate and make the IP/UDP lengths and checksums agree with the new
  // size, so that the FrameHeader and record checks are what reject it.
  auto f = data_frame(kThree);
  for (std::size_t n = kL2L4Bytes; n < f.size(); ++n) {
    std::vector<std::uint8_t> g(f.begin(), f.begin() + std::ptrdiff_t(n));
    set_be16(ip_of(g) + 2, n - kEthBytes);
    fix_ip_checksum(g);
    set_be16(udp_of(g) + 4, n - kEthBytes - kIpBytes);
    fix_udp_checksum(g);
    EXPECT_NE(parse_exact(g), Drop::kNone) << "truncated to " << n;
  }
}

// Flips bits; `mode` 0 leaves the checksums wrong, 1 clears the UDP checksum
// (so the frame header and records are parsed), 2 repairs both checksums.
void flip_fuzz(int mode, std::uint32_t seed, int iterations) {
  std::mt19937 rng(seed);
  std::vector<RecSpec> specs = {{kRecRequest, 40, 0, 11},
                                {kRecAttach, sizeof(AttachAnnounce), 0, 0},
                                {kRecResponse, 13, 200, 12},
                                {kRecRequest, 0, 0, 13}};
  const auto base = data_frame(specs);
  int accepted = 0;
  for (int it = 0; it < iterations; ++it) {
    auto f = base;
    int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      // Bias towards the FrameHeader and the record headers.
      std::size_t at = rng() % 2 ? kL2L4Bytes + rng() % (sizeof(FrameHeader) + 64)
                                 : rng() % f.size();
      if (at >= f.size()) at = rng() % f.size();
      f[at] ^= std::uint8_t(1u << (rng() % 8));
    }
    if (rng() % 8 == 0) f.resize(rng() % (f.size() + 1));
    if (rng() % 8 == 0) f.resize(f.size() + rng() % 16, std::uint8_t(rng()));
    if (f.size() >= kL2L4Bytes) {
      if (mode == 1) udp_of(f)[6] = udp_of(f)[7] = 0;
      if (mode == 2) {
        fix_ip_checksum(f);
        fix_udp_checksum(f);
      }
    }
    std::vector<std::uint8_t> buf(f);
    ParsedFrame pf{};
    Drop d = parse_frame(buf.data(), buf.size(), kHosts[kSelf], kHosts, kHostCount, kSelf,
                         kConns, nullptr, &pf);
    ASSERT_LT(int(d), int(Drop::kCount));
    if (d == Drop::kNone) {
      ++accepted;
      ASSERT_GE(pf.records, buf.data());
      ASSERT_LE(pf.records + pf.hdr.length, buf.data() + buf.size());
      check_accepted_walk(pf);
    }
  }
  // Some flips hit bytes that do not matter (MACs, padding, flags), so a few
  // frames pass; most do not.
  EXPECT_LT(accepted, iterations);
  if (mode != 0) {
    EXPECT_GT(accepted, 0);  // the record walk below was exercised
  }
  ::testing::Test::RecordProperty("accepted", accepted);
}

TEST(WireRobust, RandomFlipsChecksumsWrong) { flip_fuzz(0, 1, 3000); }
TEST(WireRobust, RandomFlipsNoUdpChecksum) { flip_fuzz(1, 2, 3000); }
TEST(WireRobust, RandomFlipsChecksumsRepaired) { flip_fuzz(2, 3, 3000); }

// ---- authenticated frames (auth.hpp) ----------------------------------------

struct SecretVerifier final : FrameVerifier {
  explicit SecretVerifier(const std::string& secret) { EXPECT_EQ(auth.set_secret(secret), ""); }
  bool verify(const FrameHeader& h, const std::uint8_t* payload, std::size_t len, const std::uint8_t* tag) override {
    ++calls;
    return gossamer::dataplane::FrameAuth::verify(auth.key(h.src_host, kSelf, h.boot), payload, len, tag);
  }
  gossamer::dataplane::FrameAuth auth;
  int calls = 0;
};

const std::string kSecret = "a rack secret of thirty-two bytes";

// `f` (unauthenticated, from host 0) with the tag `secret` gives it under
// the incarnation its header names.
std::vector<std::uint8_t> sign(std::vector<std::uint8_t> f, const std::string& secret = kSecret) {
  gossamer::dataplane::FrameAuth a;
  EXPECT_EQ(a.set_secret(secret), "");
  FrameHeader h;
  std::memcpy(&h, f.data() + kL2L4Bytes, sizeof h);
  const std::size_t payload = f.size() - kL2L4Bytes;
  f.resize(f.size() + kTagBytes);
  gossamer::dataplane::FrameAuth::sign(a.key(h.src_host, h.dst_host, h.boot), f.data() + kL2L4Bytes, payload,
                                       f.data() + kL2L4Bytes + payload);
  write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[h.src_host], kHosts[kSelf], payload + kTagBytes);
  return f;
}

Drop parse_signed(const std::vector<std::uint8_t>& f, SecretVerifier& v, ParsedFrame* out = nullptr) {
  std::vector<std::uint8_t> buf(f);
  ParsedFrame pf{};
  return parse_frame(buf.data(), buf.size(), kHosts[kSelf], kHosts, kHostCount, kSelf, kConns, &v, out ? out : &pf);
}

TEST(WireAuth, SignedFramesParse) {
  SecretVerifier v(kSecret);
  ParsedFrame pf{};
  EXPECT_EQ(parse_signed(sign(data_frame(kThree)), v, &pf), Drop::kNone);
  EXPECT_EQ(pf.hdr.records, 3);
  EXPECT_EQ(parse_signed(sign(assemble(make_header(kAckOnly, 0, 0, 0), {})), v), Drop::kNone);
  // The largest frame, with its tag, fills the MTU exactly.
  std::uint16_t body = std::uint16_t(kMaxRecordBytes - sizeof(WireRecord));
  auto full = sign(data_frame({{kRecRequest, 100, std::uint16_t(body - 100), 9}}));
  EXPECT_EQ(full.size(), kMaxFrame);
  EXPECT_EQ(parse_signed(full, v), Drop::kNone);
}

TEST(WireAuth, EveryChangedByteIsRefused) {
  SecretVerifier v(kSecret);
  const auto good = sign(data_frame(kThree));
  // Any byte of the UDP payload (header, records, tag), changed, fails the
  // tag (or an earlier header check); UDP checksum fixed up each time.
  for (std::size_t i = kL2L4Bytes; i < good.size(); ++i) {
    auto f = good;
    f[i] ^= 0x20;
    write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], f.size() - kL2L4Bytes);
    const Drop d = parse_signed(f, v);
    EXPECT_NE(d, Drop::kNone) << "byte " << i;
    if (i >= kL2L4Bytes + sizeof(FrameHeader)) {
      EXPECT_EQ(d, Drop::kBadMac) << "byte " << i;
    }
  }
}

TEST(WireAuth, ForgeriesAreRefusedBeforeTheRecords) {
  SecretVerifier v(kSecret);
  // Another secret: refused.
  EXPECT_EQ(parse_signed(sign(data_frame(kThree), "somebody else's secret, 32 bytes"), v), Drop::kBadMac);
  // A newer incarnation than the one the tag was made for (a forged
  // restart): refused, the key depends on it.
  auto f = sign(data_frame(kThree));
  FrameHeader h;
  std::memcpy(&h, f.data() + kL2L4Bytes, sizeof h);
  h.boot += 1000;
  std::memcpy(f.data() + kL2L4Bytes, &h, sizeof h);
  write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], f.size() - kL2L4Bytes);
  EXPECT_EQ(parse_signed(f, v), Drop::kBadMac);
  // Also one that differs in the high half only (an incarnation 2^32 ns,
  // 4.3 s, later: the same one in 32 bits).
  h.boot -= 1000;
  h.boot += 1ull << 32;
  std::memcpy(f.data() + kL2L4Bytes, &h, sizeof h);
  write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], f.size() - kL2L4Bytes);
  EXPECT_EQ(parse_signed(f, v), Drop::kBadMac);
  // No tag at all: the lengths do not add up.
  EXPECT_EQ(parse_signed(data_frame(kThree), v), Drop::kTooShort);
  // Malformed records behind a bad tag are never looked at: kBadMac, not
  // kBadRecord.
  auto bad = data_frame({{kRecRequest, 40, 0, 11}});
  bad[kL2L4Bytes + sizeof(FrameHeader)] = 0x77;  // the record's kind
  write_l2l4(bad.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], bad.size() - kL2L4Bytes);
  auto forged = bad;
  forged.resize(forged.size() + kTagBytes, 0xab);
  write_l2l4(forged.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], forged.size() - kL2L4Bytes);
  EXPECT_EQ(parse_signed(forged, v), Drop::kBadMac);
  // ... and with a good tag they are (authenticated, then parsed).
  EXPECT_EQ(parse_signed(sign(bad), v), Drop::kBadRecord);
}

TEST(WireAuth, KeysDifferPerDirectionAndIncarnation) {
  gossamer::dataplane::FrameAuth a;
  ASSERT_EQ(a.set_secret(kSecret), "");
  const auto k = a.key(0, 1, 7);
  auto same = [](const gossamer::dataplane::FrameKey& x, const gossamer::dataplane::FrameKey& y) {
    return std::memcmp(x.bytes, y.bytes, sizeof x.bytes) == 0;
  };
  EXPECT_TRUE(same(k, a.key(0, 1, 7)));
  EXPECT_FALSE(same(k, a.key(1, 0, 7)));
  EXPECT_FALSE(same(k, a.key(0, 1, 8)));
  EXPECT_FALSE(same(k, a.key(0, 1, 7 + (1ull << 32))));  // every bit of the incarnation counts
  EXPECT_FALSE(same(k, a.key(0, 2, 7)));
  EXPECT_NE(a.set_secret("short"), "");
}

}  // namespace
