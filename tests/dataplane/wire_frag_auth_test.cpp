// The wire format (dataplane/src/wire.hpp), continued from wire_test.cpp:
// fragment records, truncated and bit-flipped frames (rejected without
// reading outside the buffer: the ASan build checks), and authenticated
// frames (auth.hpp).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "auth.hpp"
#include "wire.hpp"
#include "wire_frames.hpp"

namespace {

using namespace gossamer::dataplane::wire;
using namespace wire_frames;

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
  static std::uint64_t count = 0;  // a new nonce for every frame signed (auth.hpp)
  EXPECT_TRUE(gossamer::dataplane::FrameAuth::sign(a.key(h.src_host, h.dst_host, h.boot), /*core=*/0, count++,
                                                   f.data() + kL2L4Bytes, payload, f.data() + kL2L4Bytes + payload));
  // As the transport sends them: no UDP checksum (wire.hpp, write_l2l4).
  write_l2l4(f.data(), kMacSrc, kMacDst, kHosts[h.src_host], kHosts[kSelf], payload + kTagBytes,
             /*udp_checksum=*/false);
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

// The trailer's nonce is part of what the tag covers: a frame whose nonce
// was changed (or whose tag was moved to another frame) fails; two frames
// with the same bytes under different nonces carry different tags.
// A nonce that would collide (a core index past 8 bits, a count past 56)
// is refused rather than wrapped.
TEST(WireAuth, OutOfRangeNoncesAreRefused) {
  using gossamer::dataplane::FrameAuth;
  FrameAuth a;
  ASSERT_EQ(a.set_secret(kSecret), "");
  const auto k = a.key(0, 1, 7);
  std::uint8_t data[64] = {}, trailer[kTagBytes];
  EXPECT_TRUE(FrameAuth::sign(k, 255, (std::uint64_t(1) << 56) - 1, data, sizeof data, trailer));
  EXPECT_FALSE(FrameAuth::sign(k, 256, 0, data, sizeof data, trailer));
  EXPECT_FALSE(FrameAuth::sign(k, 0, std::uint64_t(1) << 56, data, sizeof data, trailer));
}

TEST(WireAuth, TheNonceCounts) {
  SecretVerifier v(kSecret);
  auto f = sign(data_frame(kThree));
  auto g = sign(data_frame(kThree));
  const std::size_t trailer = f.size() - kTagBytes;
  ASSERT_EQ(f.size(), g.size());
  EXPECT_NE(std::memcmp(f.data() + trailer, g.data() + trailer, kTagBytes), 0);
  EXPECT_EQ(parse_signed(f, v), Drop::kNone);
  for (std::size_t i : {std::size_t(0), std::size_t(4), gossamer::dataplane::kNonceBytes - 1}) {
    auto h = f;
    h[trailer + i] ^= 0x01;
    write_l2l4(h.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], h.size() - kL2L4Bytes);
    EXPECT_EQ(parse_signed(h, v), Drop::kBadMac) << "trailer byte " << i;
  }
  // g's nonce and tag on f's bytes (the same bytes): g's tag is for g's
  // nonce, so moving the whole trailer keeps it valid, but mixing does not.
  auto moved = f;
  std::memcpy(moved.data() + trailer, g.data() + trailer, kTagBytes);
  write_l2l4(moved.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], moved.size() - kL2L4Bytes);
  EXPECT_EQ(parse_signed(moved, v), Drop::kNone);
  auto mixed = f;
  std::memcpy(mixed.data() + trailer + gossamer::dataplane::kMacOffset,
              g.data() + trailer + gossamer::dataplane::kMacOffset, gossamer::dataplane::kMacBytes);
  write_l2l4(mixed.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], mixed.size() - kL2L4Bytes);
  EXPECT_EQ(parse_signed(mixed, v), Drop::kBadMac);
}

// libsodium's AES-GCM (AES-NI) and OpenSSL's (the path for CPUs without it)
// compute the same tags: each verifies the other's frames, and both refuse
// a flipped bit. On a CPU without AES-NI only the portable path is checked.
TEST(WireAuth, AcceleratedAndPortableTagsAgree) {
  using gossamer::dataplane::FrameAuth;
  SecretVerifier v(kSecret);
  struct Restore {
    ~Restore() { FrameAuth::force_portable(false); }
  } restore;
  if (!FrameAuth::accelerated()) std::printf("note: no AES-NI here; checking the portable path alone\n");
  for (bool sign_portable : {false, true}) {
    for (bool verify_portable : {false, true}) {
      FrameAuth::force_portable(sign_portable);
      auto f = sign(data_frame({{kRecRequest, 40, 0, 11}, {kRecRequest, 1200, 1, 12}}));
      FrameAuth::force_portable(verify_portable);
      EXPECT_EQ(parse_signed(f, v), Drop::kNone) << sign_portable << verify_portable;
      for (std::size_t at : {kL2L4Bytes + sizeof(FrameHeader) + 3, f.size() / 2, f.size() - 1}) {
        auto g = f;
        g[at] ^= 0x20;
        write_l2l4(g.data(), kMacSrc, kMacDst, kHosts[0], kHosts[kSelf], g.size() - kL2L4Bytes);
        EXPECT_EQ(parse_signed(g, v), Drop::kBadMac) << sign_portable << verify_portable << " byte " << at;
      }
    }
  }
}

// The portable path keeps an OpenSSL context per key in use (256 per
// thread, least recently used out): whatever the order of keys, more keys
// than contexts, or two keys filed under one id, each tag is its own key's,
// and the same as the accelerated path's.
TEST(WireAuth, PortableContextsFollowTheirKeys) {
  using gossamer::dataplane::FrameAuth;
  using gossamer::dataplane::FrameKey;
  using gossamer::dataplane::kMacOffset;
  FrameAuth a;
  ASSERT_EQ(a.set_secret(kSecret), "");
  struct Restore {
    ~Restore() { FrameAuth::force_portable(false); }
  } restore;
  FrameAuth::force_portable(false);
  const bool accelerated = FrameAuth::accelerated();  // this CPU's (forcing hides it)
  std::vector<FrameKey> keys;
  for (std::uint32_t i = 0; i < 300; ++i) keys.push_back(a.key(0, i + 1, 5));
  FrameKey twin = a.key(0, 1000, 5);  // a key of its own (no other key has dst 1000)
  twin.id = keys[0].id;  // another key under the same id
  keys.push_back(twin);  // keys[300]
  const std::vector<std::uint8_t> data(100, 0x33);
  auto tag = [&](const FrameKey& k) {
    std::vector<std::uint8_t> t(kTagBytes);
    EXPECT_TRUE(FrameAuth::sign(k, 1, 7, data.data(), data.size(), t.data()));
    return std::vector<std::uint8_t>(t.begin() + kMacOffset, t.end());
  };
  FrameAuth::force_portable(true);
  std::vector<std::vector<std::uint8_t>> first;
  for (const FrameKey& k : keys) first.push_back(tag(k));
  for (std::size_t i = 0; i < first.size(); ++i)
    for (std::size_t j = i + 1; j < first.size(); ++j) EXPECT_NE(first[i], first[j]) << i << " " << j;
  // Again: backwards, a few keys over and over (they stay cached) with the
  // twin between them, and every key once more.
  for (std::size_t i = keys.size(); i-- > 0;) EXPECT_EQ(tag(keys[i]), first[i]) << "key " << i;
  for (int round = 0; round < 3; ++round)
    for (std::size_t i : {std::size_t(0), std::size_t(300), std::size_t(3), std::size_t(0), std::size_t(17)})
      EXPECT_EQ(tag(keys[i]), first[i]) << "key " << i << ", round " << round;
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(tag(keys[i]), first[i]) << "key " << i;
  if (!accelerated) {
    std::printf("note: no AES-NI here; the tags are checked against each other only\n");
    return;
  }
  FrameAuth::force_portable(false);
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(tag(keys[i]), first[i]) << "accelerated, key " << i;
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
