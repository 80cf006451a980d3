// libFuzzer target for the dataplane's frame parser (DESIGN.md §5: fuzzers on
// every parser). Frames come from anyone on the segment: any bytes must be
// dropped with a known reason or accepted, never read past their end, and an
// accepted frame must be exactly what RecordCursor and deliver() expect.
// Input format: tests/fuzz/fuzz_inputs.hpp (two selector bytes, then the
// frame or its UDP payload).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "auth.hpp"
#include "fuzz_inputs.hpp"
#include "wire.hpp"

namespace {

const gossamer::dataplane::FrameAuth g_auth = [] {
  gossamer::dataplane::FrameAuth a;
  if (!a.set_secret("fuzzing rack secret, 32 bytes..").empty()) std::abort();
  return a;
}();

struct TestVerifier final : gossamer::dataplane::wire::FrameVerifier {
  bool verify(const gossamer::dataplane::wire::FrameHeader& h, const std::uint8_t* payload, std::size_t len,
              const std::uint8_t* tag) override {
    return gossamer::dataplane::FrameAuth::verify(g_auth.key(h.src_host, self, h.boot), payload, len, tag);
  }
  std::uint32_t self = 0;
};

using namespace gossamer::dataplane::wire;
using namespace gossamer::fuzz;

volatile std::uint64_t g_sink;  // keeps the byte sums alive

void fix_ip_checksum(std::uint8_t* ip) {
  ip[10] = ip[11] = 0;
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < kIpBytes; i += 2) sum += std::uint32_t(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const std::uint16_t c = std::uint16_t(~sum);
  ip[10] = std::uint8_t(c >> 8);
  ip[11] = std::uint8_t(c);
}

// An exactly sized heap copy, so that ASan sees a read one byte past `len`.
std::unique_ptr<std::uint8_t[]> exact(const std::uint8_t* p, std::size_t len) {
  auto b = std::make_unique<std::uint8_t[]>(len ? len : 1);
  if (len) std::memcpy(b.get(), p, len);
  return b;
}

void check_accepted(const std::uint8_t* f, std::size_t len, const ParsedFrame& pf,
                    std::uint32_t self_host, std::uint32_t connections) {
  const FrameHeader& h = pf.hdr;
  if (h.magic != kMagic || h.version != kVersion) std::abort();
  if (h.type != kData && h.type != kAckOnly) std::abort();
  if (h.src_host >= kHostCount || h.src_host == self_host || h.dst_host != self_host) std::abort();
  if (h.conn >= connections) std::abort();
  if (pf.src_ip != host_endpoint(h.src_host).ip) std::abort();
  if (pf.src_mac != f + 6) std::abort();
  if (pf.records != f + kL2L4Bytes + sizeof(FrameHeader)) std::abort();
  if (kL2L4Bytes + sizeof(FrameHeader) + h.length > len) std::abort();
  if (h.type == kAckOnly && (h.records || h.length || h.seq)) std::abort();

  // Walk the records as Dataplane::poll_rx does, touching every byte of each
  // record's body and padding.
  std::uint64_t sum = 0;
  std::size_t count = 0, off = 0;
  RecordCursor cur(pf.records, h.length);
  RecordView v;
  while (cur.next(&v)) {
    if (v.payload != pf.records + off + sizeof(WireRecord)) std::abort();
    // A fragment carries frag_len bytes of its slot, a whole record all of them.
    const std::size_t body = record_body(v.rec);
    const std::size_t total = std::size_t(v.rec.primary_len) + v.rec.overflow_len;
    if (v.rec.frag & kFragment) {
      const std::size_t end = std::size_t(v.rec.frag_offset) + v.rec.frag_len;
      if ((v.rec.frag & ~kFragMask) || v.rec.frag_len == 0 || v.rec.frag_len > max_fragment_bytes(kMaxMtu) ||
          end > total || ((v.rec.frag & kFragMore) != 0) == (end == total))
        std::abort();
    } else if (v.rec.frag || v.rec.frag_len || v.rec.frag_offset) {
      std::abort();
    }
    for (std::size_t i = 0; i < pad8(body); ++i) sum += v.payload[i];
    switch (v.rec.kind) {
      case kRecRequest:
      case kRecResponse:
        break;
      case kRecAttach:
      case kRecDetach: {
        if (v.rec.primary_len != sizeof(AttachAnnounce) || v.rec.overflow_len) std::abort();
        AttachAnnounce an;
        std::memcpy(&an, v.payload, sizeof an);
        sum += an.build_hash + an.instance + an.total_threads;
        break;
      }
      default:
        std::abort();  // the parser lets only known kinds through
    }
    off += sizeof(WireRecord) + pad8(body);
    ++count;
  }
  // The parser checked the count and that the records fill `length` exactly.
  if (count != h.records || off != h.length) std::abort();
  g_sink = g_sink + sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kFrameSelBytes) return 0;
  const FrameSel sel = decode_frame_sel(data);
  const std::uint32_t self_host = kSelfHosts[sel.self_host_i];
  const std::uint32_t connections = kConnections[sel.connections_i];
  const std::uint8_t* in = data + kFrameSelBytes;
  std::size_t len = size - kFrameSelBytes;

  std::unique_ptr<std::uint8_t[]> frame;
  switch (sel.mode) {
    case kRaw:
      frame = exact(in, len);
      break;
    case kFixSums:
      frame = exact(in, len);
      if (len >= kEthBytes + kIpBytes) fix_ip_checksum(frame.get() + kEthBytes);
      if (len >= kL2L4Bytes) frame[kEthBytes + kIpBytes + 6] = frame[kEthBytes + kIpBytes + 7] = 0;
      break;
    case kRebuild:
    case kRebuildTrim: {
      const std::size_t payload = len < kMaxUdpPayload ? len : kMaxUdpPayload;
      std::uint8_t buf[kMaxFrame + 32] = {};
      std::memcpy(buf + kL2L4Bytes, in, payload);
      write_l2l4(buf, kMacs[sel.src], kMacs[kSelfIndex], host_endpoint(sel.src),
                 host_endpoint(kSelfIndex), payload);
      len = kL2L4Bytes + payload;
      if (sel.mode == kRebuildTrim) {
        const std::size_t n = sel.trim & 31;
        if (sel.trim & 32) {
          std::memset(buf + len, 0xa5, n);  // Ethernet padding after the IP packet
          len += n;
        } else {
          len = n < len ? len - n : 0;
        }
      }
      frame = exact(buf, len);
      break;
    }
  }

  const Endpoint self = host_endpoint(kSelfIndex);
  Endpoint hosts[kHostCount];
  for (std::size_t i = 0; i < kHostCount; ++i) hosts[i] = host_endpoint(i);

  ParsedFrame pf;
  const Drop d = parse_frame(frame.get(), len, self, hosts, kHostCount, self_host, connections, nullptr, &pf);
  if (d == Drop::kNone)
    check_accepted(frame.get(), len, pf, self_host, connections);
  else if (d >= Drop::kCount || std::strcmp(drop_name(d), "unknown") == 0)
    std::abort();

  // The MAC-checked path (auth.hpp): the same UDP payload with a tag. A
  // correct tag changes nothing else; a wrong one is always kBadMac.
  if (sel.mode == kRebuild && len >= kL2L4Bytes + sizeof(FrameHeader)) {
    const std::size_t payload = len - kL2L4Bytes;
    std::uint8_t buf[kMaxFrame + kTagBytes] = {};
    std::memcpy(buf, frame.get(), len);
    FrameHeader h;
    std::memcpy(&h, buf + kL2L4Bytes, sizeof h);
    const auto key = g_auth.key(h.src_host, self_host, h.boot);
    static std::uint64_t count = 0;  // a new nonce per frame (auth.hpp)
    if (!gossamer::dataplane::FrameAuth::sign(key, /*core=*/0, count++, buf + kL2L4Bytes, payload, buf + len))
      std::abort();
    write_l2l4(buf, kMacs[sel.src], kMacs[kSelfIndex], host_endpoint(sel.src), host_endpoint(kSelfIndex),
               payload + kTagBytes);
    auto signed_frame = exact(buf, len + kTagBytes);
    TestVerifier v;
    v.self = self_host;
    ParsedFrame spf;
    const Drop sd = parse_frame(signed_frame.get(), len + kTagBytes, self, hosts, kHostCount, self_host,
                                connections, &v, &spf);
    if (sd != d) std::abort();
    if (sd == Drop::kNone) check_accepted(signed_frame.get(), len + kTagBytes, spf, self_host, connections);
    signed_frame[len + kTagBytes - 1] ^= 1;
    write_l2l4(signed_frame.get(), kMacs[sel.src], kMacs[kSelfIndex], host_endpoint(sel.src),
               host_endpoint(kSelfIndex), payload + kTagBytes);  // the UDP checksum covers the tag
    const Drop bad = parse_frame(signed_frame.get(), len + kTagBytes, self, hosts, kHostCount, self_host,
                                 connections, &v, &spf);
    if (d == Drop::kNone && bad != Drop::kBadMac) std::abort();
  }
  return 0;
}
