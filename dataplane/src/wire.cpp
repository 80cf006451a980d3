// Frame parsing and header writing. No DPDK here: the parser is a pure
// function of the bytes, so the fuzz target links it alone.
#include "wire.hpp"

#include <arpa/inet.h>

#include <bit>
#include <cstring>

namespace gossamer::dataplane::wire {

namespace {
constexpr std::uint16_t kEtherIpv4 = 0x0800;
constexpr std::uint8_t kProtoUdp = 17;

std::uint16_t load_be16(const std::uint8_t* p) { return std::uint16_t(p[0] << 8 | p[1]); }

std::uint16_t fold(std::uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return std::uint16_t(sum);
}

// `sum` plus the ones' complement sum of the big-endian 16-bit words of
// p[0, n) (an odd last byte padded with zero), not folded. The words are
// added in native (little-endian) order, 4 bytes at a time into 64-bit
// accumulators, and the folded result swapped once: the ones' complement
// sum commutes with swapping the bytes of every word (RFC 1071 §2(B)).
// Byte by byte, a 4 KiB frame's checksum cost ~2,000 adds on each side.
std::uint32_t sum16(const std::uint8_t* p, std::size_t n, std::uint32_t sum) {
  static_assert(std::endian::native == std::endian::little, "the words are added in little-endian order");
  std::uint64_t a = 0, b = 0;
  for (; n >= 16; n -= 16, p += 16) {
    std::uint32_t w[4];
    std::memcpy(w, p, 16);
    a += std::uint64_t(w[0]) + w[1];
    b += std::uint64_t(w[2]) + w[3];
  }
  for (; n >= 4; n -= 4, p += 4) {
    std::uint32_t w;
    std::memcpy(&w, p, 4);
    a += w;
  }
  if (n >= 2) {
    a += std::uint64_t(p[0] | p[1] << 8);
    p += 2;
    n -= 2;
  }
  if (n) a += p[0];  // big-endian p[0] << 8, in native order
  // a and b stay below 2^62 for any n below 2^32 bytes; fold 64 -> 32 -> 16 bits.
  std::uint64_t t = (a & 0xffffffff) + (a >> 32) + (b & 0xffffffff) + (b >> 32);
  t = (t & 0xffffffff) + (t >> 32);
  t = (t & 0xffffffff) + (t >> 32);
  const std::uint16_t native = fold(std::uint32_t(t));
  return sum + std::uint16_t(native >> 8 | native << 8);
}

// Sum of the UDP pseudo header, UDP header and payload (RFC 768).
std::uint32_t udp_sum(const std::uint8_t* ip, const std::uint8_t* udp, std::size_t udp_len) {
  std::uint32_t sum = sum16(ip + 12, 8, 0);  // source and destination addresses
  sum += kProtoUdp;
  sum += std::uint32_t(udp_len);
  return sum16(udp, udp_len, sum);
}
}  // namespace

const char* drop_name(Drop d) {
  switch (d) {
    case Drop::kNone: return "none";
    case Drop::kTooShort: return "too_short";
    case Drop::kNotIpv4: return "not_ipv4";
    case Drop::kIpHeader: return "ip_header";
    case Drop::kIpChecksum: return "ip_checksum";
    case Drop::kNotUdp: return "not_udp";
    case Drop::kNotForUs: return "not_for_us";
    case Drop::kUdpLength: return "udp_length";
    case Drop::kUdpChecksum: return "udp_checksum";
    case Drop::kBadMagic: return "bad_magic";
    case Drop::kBadVersion: return "bad_version";
    case Drop::kBadType: return "bad_type";
    case Drop::kBadHost: return "bad_host";
    case Drop::kBadConn: return "bad_connection";
    case Drop::kBadRecord: return "bad_record";
    case Drop::kBadMac: return "bad_mac";
    case Drop::kTooLong: return "too_long";
    case Drop::kCount: break;
  }
  return "unknown";
}

Drop check_records(const std::uint8_t* recs, std::size_t len, std::uint32_t count) {
  // Every record must be whole and of a known kind, and the count exact.
  std::size_t off = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (len - off < sizeof(WireRecord)) return Drop::kBadRecord;
    WireRecord r;
    std::memcpy(&r, recs + off, sizeof r);
    std::size_t total = std::size_t(r.primary_len) + r.overflow_len;
    std::size_t body = total;
    switch (r.kind) {
      case kRecRequest:
      case kRecResponse:
        break;
      case kRecAttach:
      case kRecDetach:
        if (r.primary_len != sizeof(AttachAnnounce) || r.overflow_len != 0 || r.frag != 0)
          return Drop::kBadRecord;
        break;
      default:
        return Drop::kBadRecord;
    }
    if (r.frag & ~kFragMask) return Drop::kBadRecord;
    if (r.frag & kFragment) {
      // A piece [frag_offset, +frag_len) of the slot payload: not empty,
      // inside it, and ending it exactly when no more fragments follow.
      body = r.frag_len;
      std::size_t end = std::size_t(r.frag_offset) + r.frag_len;
      if (r.frag_len == 0 || r.frag_len > max_fragment_bytes(kMaxMtu) || r.frag_offset >= total || end > total)
        return Drop::kBadRecord;
      if ((r.frag & kFragMore) ? end == total : end != total) return Drop::kBadRecord;
    } else if (r.frag != 0 || r.frag_len != 0 || r.frag_offset != 0) {
      return Drop::kBadRecord;
    }
    std::size_t size = sizeof r + pad8(body);
    if (size > len - off) return Drop::kBadRecord;
    off += size;
  }
  if (off != len) return Drop::kBadRecord;
  return Drop::kNone;
}

Drop parse_frame(const std::uint8_t* f, std::size_t len, const Endpoint& self,
                 const Endpoint* hosts, std::size_t host_count, std::uint32_t self_host,
                 std::uint32_t connections, FrameVerifier* verifier, ParsedFrame* out) {
  if (len < kEthBytes + kIpBytes) return Drop::kTooShort;
  if (load_be16(f + 12) != kEtherIpv4) return Drop::kNotIpv4;
  const std::uint8_t* ip = f + kEthBytes;
  if (ip[0] != 0x45) return Drop::kIpHeader;  // version 4, no options
  std::size_t ip_len = load_be16(ip + 2);
  if (ip_len < kIpBytes || ip_len > len - kEthBytes) return Drop::kIpHeader;
  if (load_be16(ip + 6) & 0x3fff) return Drop::kIpHeader;  // a fragment (MF or offset)
  if (ip[9] != kProtoUdp) return Drop::kNotUdp;
  if (fold(sum16(ip, kIpBytes, 0)) != 0xffff) return Drop::kIpChecksum;
  std::uint32_t dst_ip, src_ip;
  std::memcpy(&src_ip, ip + 12, 4);
  std::memcpy(&dst_ip, ip + 16, 4);
  if (ip_len < kIpBytes + kUdpBytes) return Drop::kTooShort;
  const std::uint8_t* udp = ip + kIpBytes;
  if (dst_ip != self.ip || load_be16(udp + 2) != self.port) return Drop::kNotForUs;
  std::size_t udp_len = load_be16(udp + 4);
  if (udp_len != ip_len - kIpBytes || udp_len < kUdpBytes) return Drop::kUdpLength;
  if (load_be16(udp + 6) != 0 && fold(udp_sum(ip, udp, udp_len)) != 0xffff)
    return Drop::kUdpChecksum;
  std::size_t payload = udp_len - kUdpBytes;
  if (payload < sizeof(FrameHeader)) return Drop::kTooShort;
  FrameHeader h;
  std::memcpy(&h, udp + kUdpBytes, sizeof h);
  if (h.magic != kMagic) return Drop::kBadMagic;
  if (h.version != kVersion) return Drop::kBadVersion;
  if (h.type != kData && h.type != kAckOnly) return Drop::kBadType;
  if (h.src_host >= host_count || h.src_host == self_host || h.dst_host != self_host ||
      hosts[h.src_host].ip != src_ip || hosts[h.src_host].port != load_be16(udp))
    return Drop::kBadHost;
  if (h.conn >= connections) return Drop::kBadConn;
  const std::size_t tag = verifier ? kTagBytes : 0;
  if (payload < sizeof h + tag || h.length != payload - sizeof h - tag) return Drop::kTooShort;
  // Authenticate, then parse: nothing below is looked at in a forged frame.
  if (verifier && !verifier->verify(h, udp + kUdpBytes, payload - tag, udp + kUdpBytes + payload - tag))
    return Drop::kBadMac;
  if (h.type == kAckOnly && (h.length != 0 || h.records != 0 || h.seq != 0)) return Drop::kBadType;
  const std::uint8_t* recs = udp + kUdpBytes + sizeof h;
  if (const Drop d = check_records(recs, h.length, h.records); d != Drop::kNone) return d;
  out->hdr = h;
  out->src_ip = src_ip;
  out->records = recs;
  out->src_mac = f + 6;
  return Drop::kNone;
}

bool RecordCursor::next(RecordView* out) {
  if (std::size_t(end_ - p_) < sizeof(WireRecord)) return false;
  std::memcpy(&out->rec, p_, sizeof(WireRecord));
  out->payload = p_ + sizeof(WireRecord);
  std::size_t size = sizeof(WireRecord) + pad8(record_body(out->rec));
  if (size > std::size_t(end_ - p_)) return false;
  p_ += size;
  return true;
}

void write_l2l4(std::uint8_t* f, const std::uint8_t src_mac[6], const std::uint8_t dst_mac[6],
                const Endpoint& src, const Endpoint& dst, std::size_t payload_len, bool udp_checksum) {
  std::memcpy(f, dst_mac, 6);
  std::memcpy(f + 6, src_mac, 6);
  f[12] = 0x08;
  f[13] = 0x00;
  std::uint8_t* ip = f + kEthBytes;
  std::size_t ip_len = kIpBytes + kUdpBytes + payload_len;
  ip[0] = 0x45;
  ip[1] = 0;
  ip[2] = std::uint8_t(ip_len >> 8);
  ip[3] = std::uint8_t(ip_len);
  ip[4] = ip[5] = 0;          // identification
  ip[6] = 0x40;               // don't fragment
  ip[7] = 0;
  ip[8] = 64;                 // TTL
  ip[9] = kProtoUdp;
  ip[10] = ip[11] = 0;
  std::memcpy(ip + 12, &src.ip, 4);
  std::memcpy(ip + 16, &dst.ip, 4);
  std::uint16_t c = std::uint16_t(~fold(sum16(ip, kIpBytes, 0)));
  ip[10] = std::uint8_t(c >> 8);
  ip[11] = std::uint8_t(c);
  std::uint8_t* udp = ip + kIpBytes;
  std::size_t udp_len = kUdpBytes + payload_len;
  udp[0] = std::uint8_t(src.port >> 8);
  udp[1] = std::uint8_t(src.port);
  udp[2] = std::uint8_t(dst.port >> 8);
  udp[3] = std::uint8_t(dst.port);
  udp[4] = std::uint8_t(udp_len >> 8);
  udp[5] = std::uint8_t(udp_len);
  udp[6] = udp[7] = 0;
  if (!udp_checksum) return;  // 0: no checksum (RFC 768)
  std::uint16_t uc = std::uint16_t(~fold(udp_sum(ip, udp, udp_len)));
  if (uc == 0) uc = 0xffff;  // 0 means "no checksum"
  udp[6] = std::uint8_t(uc >> 8);
  udp[7] = std::uint8_t(uc);
}

}  // namespace gossamer::dataplane::wire
