// Frames for the wire format tests (wire_test.cpp, wire_frag_auth_test.cpp):
// a rack of three hosts as the parser sees it from host 1, records built
// from specs, checksums repaired after an edit, and the walk every accepted
// frame must allow.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "wire.hpp"

namespace wire_frames {


using namespace gossamer::dataplane::wire;

inline std::uint32_t ip4(std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) {
  return htonl(a << 24 | b << 16 | c << 8 | d);
}

// A rack of three hosts; the parser runs as host 1 with two connections.
inline const Endpoint kHosts[3] = {
    {ip4(10, 0, 0, 1), 7000},
    {ip4(10, 0, 0, 2), 7001},
    {ip4(10, 0, 0, 3), 7002},
};
inline constexpr std::size_t kHostCount = 3;
inline constexpr std::uint32_t kSelf = 1;
inline constexpr std::uint32_t kConns = 2;
inline constexpr std::uint8_t kMacSrc[6] = {0x02, 0, 0, 0, 0, 0x01};
inline constexpr std::uint8_t kMacDst[6] = {0x02, 0, 0, 0, 0, 0x02};

struct RecSpec {
  std::uint8_t kind;
  std::uint16_t primary;
  std::uint16_t overflow = 0;
  std::uint32_t slot_seq = 0;
};

inline std::uint8_t pattern(std::size_t rec, std::size_t i) { return std::uint8_t(rec * 37 + i * 11 + 5); }

// Records back to back: WireRecord, payload (a pattern), zero padding to 8.
inline std::vector<std::uint8_t> make_records(const std::vector<RecSpec>& specs) {
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

inline FrameHeader make_header(std::uint8_t type, std::uint32_t seq, std::uint16_t records,
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
inline std::vector<std::uint8_t> assemble(const FrameHeader& h, const std::vector<std::uint8_t>& recs,
                                   const Endpoint& src = kHosts[0],
                                   const Endpoint& dst = kHosts[kSelf]) {
  std::vector<std::uint8_t> f(kL2L4Bytes + sizeof h + recs.size());
  std::memcpy(f.data() + kL2L4Bytes, &h, sizeof h);
  if (!recs.empty()) std::memcpy(f.data() + kL2L4Bytes + sizeof h, recs.data(), recs.size());
  write_l2l4(f.data(), kMacSrc, kMacDst, src, dst, sizeof h + recs.size());
  return f;
}

inline std::vector<std::uint8_t> data_frame(const std::vector<RecSpec>& specs, std::uint32_t seq = 5) {
  auto recs = make_records(specs);
  return assemble(make_header(kData, seq, std::uint16_t(specs.size()), recs.size()), recs);
}

inline const std::vector<RecSpec> kThree = {
    {kRecRequest, 40, 0, 11}, {kRecResponse, 13, 200, 12}, {kRecRequest, 0, 0, 13}};

// Parses from a heap buffer of exactly `len` bytes so that ASan sees any
// read past the end. The result's pointers are not usable afterwards.
inline Drop parse_exact(const std::uint8_t* p, std::size_t len, ParsedFrame* out = nullptr) {
  std::vector<std::uint8_t> buf(p, p + len);
  ParsedFrame pf{};
  return parse_frame(buf.data(), len, kHosts[kSelf], kHosts, kHostCount, kSelf, kConns, nullptr,
                     out ? out : &pf);
}
inline Drop parse_exact(const std::vector<std::uint8_t>& f) { return parse_exact(f.data(), f.size()); }

// An independent Internet checksum, to repair headers after editing them.
inline std::uint16_t inet_sum(const std::uint8_t* p, std::size_t n, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < n; i += 2) sum += std::uint32_t(p[i]) << 8 | p[i + 1];
  if (n & 1) sum += std::uint32_t(p[n - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return std::uint16_t(sum);
}

inline std::uint8_t* ip_of(std::vector<std::uint8_t>& f) { return f.data() + kEthBytes; }
inline std::uint8_t* udp_of(std::vector<std::uint8_t>& f) { return f.data() + kEthBytes + kIpBytes; }

inline void fix_ip_checksum(std::vector<std::uint8_t>& f) {
  std::uint8_t* ip = ip_of(f);
  ip[10] = ip[11] = 0;
  std::uint16_t c = std::uint16_t(~inet_sum(ip, kIpBytes));
  ip[10] = std::uint8_t(c >> 8);
  ip[11] = std::uint8_t(c);
}

// Recomputes the UDP checksum over the bytes the UDP length field claims
// (clipped to the frame).
inline void fix_udp_checksum(std::vector<std::uint8_t>& f) {
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

inline void set_be16(std::uint8_t* p, std::size_t v) {
  p[0] = std::uint8_t(v >> 8);
  p[1] = std::uint8_t(v);
}

// Rebuilds a frame after editing its FrameHeader with `edit`.
template <class F>
inline std::vector<std::uint8_t> with_header(const std::vector<RecSpec>& specs, F edit) {
  auto recs = make_records(specs);
  FrameHeader h = make_header(kData, 5, std::uint16_t(specs.size()), recs.size());
  edit(h);
  return assemble(h, recs);
}

// Rebuilds a frame after editing its record bytes with `edit` (which may
// also adjust the header).
template <class F>
inline std::vector<std::uint8_t> with_records(const std::vector<RecSpec>& specs, F edit) {
  auto recs = make_records(specs);
  FrameHeader h = make_header(kData, 5, std::uint16_t(specs.size()), recs.size());
  edit(h, recs);
  h.length = std::uint16_t(recs.size());
  return assemble(h, recs);
}

inline void set_record(std::vector<std::uint8_t>& recs, std::size_t off, const WireRecord& r) {
  std::memcpy(recs.data() + off, &r, sizeof r);
}
inline WireRecord get_record(const std::vector<std::uint8_t>& recs, std::size_t off) {
  WireRecord r;
  std::memcpy(&r, recs.data() + off, sizeof r);
  return r;
}

// What must hold for every frame parse_frame accepts: the cursor walks
// exactly `records` records covering exactly `length` bytes.
inline void check_accepted_walk(const ParsedFrame& pf) {
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

}  // namespace wire_frames
