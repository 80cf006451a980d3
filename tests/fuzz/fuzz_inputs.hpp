// The input formats of the dataplane fuzz targets, shared by the targets and
// by make_seeds.cpp (which writes valid inputs in these formats). Everything
// here is test scaffolding: no dataplane code depends on it.
//
// fuzz_frame input:  FrameSel (2 bytes) | frame bytes
//   byte 0: bits 0-1 mode, bits 2-4 self_host (kSelfHosts), bits 5-7
//           connections (kConnections)
//   byte 1: bits 0-1 source host for the rebuild modes, bits 2-7 trim
//   modes:  kRaw        the rest is the whole frame, as received
//           kFixSums    the rest is the whole frame; the IPv4 header checksum
//                       is recomputed and the UDP checksum zeroed first, so
//                       mutations behind the headers are not all dropped
//           kRebuild    the rest is the UDP payload (FrameHeader | records);
//                       write_l2l4 wraps it, from hosts[src] to the self
//                       endpoint
//           kRebuildTrim  as kRebuild, then trim: bit 5 set appends
//                       (trim & 31) bytes of Ethernet padding, else cuts
//                       (trim & 31) bytes off the end
//
// fuzz_attach input: byte 0 selects the mode (bit 0).
//   kAttachRaw:     [1] msg_len  [2] host_count - 1  [3] host_index (mod
//                   host_count)  [4] bit 0 sealed, bits 1-3 fds
//                   [5..12] segment_size (LE)  then msg_len message bytes,
//                   then the segment header's bytes (zero-padded to 256)
//   kAttachMutate:  [1..2] total threads (LE, 1 + v % kMaxRackThreads)
//                   [3] host_count - 1  [4] host_index (mod host_count)
//                   [5] field A  [6] field B  (AttachField, mod kFieldCount)
//                   then value bytes: field A takes min(its size, left), B
//                   the next ones. A valid request/header pair is built with
//                   abi::segment_layout, then A and B are overwritten.
#pragma once

#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <gossamer/abi/attach.hpp>

#include "wire.hpp"

namespace gossamer::fuzz {

// The rack of the seeds: 198.18.0.1-4:7800 (config/examples/rack3*.yaml and
// a fourth host). The fuzzed dataplane is always host 1's endpoint; which
// host index it believes it is comes from the selector.
inline constexpr std::uint16_t kDataPort = 7800;
inline constexpr std::size_t kHostCount = 4;
inline dataplane::wire::Endpoint host_endpoint(std::size_t i) {
  return {htonl(0xc6120001u + std::uint32_t(i)), kDataPort};
}
inline constexpr std::size_t kSelfIndex = 1;
inline const std::uint8_t kMacs[kHostCount][6] = {
    {0x02, 0, 0, 0, 0, 1}, {0x02, 0, 0, 0, 0, 2}, {0x02, 0, 0, 0, 0, 3}, {0x02, 0, 0, 0, 0, 4}};

// self_host values: the four hosts, then values outside the table.
inline constexpr std::uint32_t kSelfHosts[8] = {0, 1, 2, 3, 4, 63, 0xffff, 0xffffffffu};
// connections per remote host: the dataplane clamps to 1..255; 0 is out of
// contract but must still not crash.
inline constexpr std::uint32_t kConnections[8] = {1, 2, 4, 8, 16, 255, 3, 0};

enum FrameMode : std::uint8_t { kRaw = 0, kFixSums = 1, kRebuild = 2, kRebuildTrim = 3 };

struct FrameSel {
  FrameMode mode;
  std::uint32_t self_host_i;   // index into kSelfHosts
  std::uint32_t connections_i; // index into kConnections
  std::uint32_t src;           // host index, rebuild modes
  std::uint32_t trim;          // 6 bits
};
inline constexpr std::size_t kFrameSelBytes = 2;
inline FrameSel decode_frame_sel(const std::uint8_t* p) {
  return {FrameMode(p[0] & 3), std::uint32_t(p[0] >> 2 & 7), std::uint32_t(p[0] >> 5 & 7),
          std::uint32_t(p[1] & 3), std::uint32_t(p[1] >> 2)};
}
inline void encode_frame_sel(const FrameSel& s, std::uint8_t* p) {
  p[0] = std::uint8_t(s.mode | (s.self_host_i & 7) << 2 | (s.connections_i & 7) << 5);
  p[1] = std::uint8_t((s.src & 3) | (s.trim & 63) << 2);
}

enum AttachMode : std::uint8_t { kAttachRaw = 0, kAttachMutate = 1 };
inline constexpr std::size_t kAttachRawFixed = 13;     // bytes before the message
inline constexpr std::size_t kAttachMutateFixed = 7;   // bytes before the values

// The fields the mutate mode can overwrite. The `ignored` ones are not part
// of the handshake check: changing them must never refuse a valid attach.
enum AttachField : std::uint8_t {
  kFieldNone,
  kReqType, kReqAttachVersion, kReqSlotLayout, kReqBuildIdLen, kReqBuildId, kReqRunId,
  kReqTotalThreads, kReqPid, kReqSegmentBytes,
  kHdrMagic, kHdrAttachVersion, kHdrSlotLayout, kHdrSegmentBytes, kHdrTotalThreads,
  kHdrFirstThread, kHdrLocalThreads, kHdrHostIndex, kHdrHostCount, kHdrDoorbellEntries,
  kHdrRequestPrimary, kHdrResponsePrimary, kHdrRequestOverflow, kHdrResponseOverflow,
  kHdrWakeWords, kHdrDoorbells, kHdrDoorbellStride, kHdrSleeping, kHdrReserved, kHdrCounters,
  kChkSegmentSize, kChkSealed, kChkFds, kMsgLen, kReqRunToken,
  kFieldCount
};

// A request and segment header the dataplane accepts, for `total` threads on
// host `host_index` of `host_count` (1 <= host_count <= total <= 4096).
struct ValidAttach {
  abi::AttachRequest req;
  abi::SegmentHeader hdr;
  std::uint64_t segment_size;
};
inline bool valid_attach(std::uint32_t total, std::uint32_t host_count, std::uint32_t host_index,
                         ValidAttach* out) {
  std::uint32_t first = 0, local = 0;
  abi::host_threads(total, host_count, host_index, &first, &local);
  abi::SegmentLayout l{};
  if (!abi::segment_layout(total, local, &l)) return false;
  ValidAttach v{};
  v.req.type = abi::kMsgAttach;
  v.req.attach_version = abi::kAttachVersion;
  v.req.slot_layout = abi::kLayoutVersion;
  v.req.build_id_len = 20;
  for (std::size_t i = 0; i < 20; ++i) v.req.build_id[i] = std::uint8_t(0x11 * i);
  std::memcpy(v.req.run_id, "5eed", 4);
  v.req.total_threads = total;
  v.req.pid = 4242;
  v.req.segment_bytes = l.bytes;
  v.hdr = abi::segment_header(l, total, first, local, host_index, host_count);
  v.segment_size = l.bytes;
  *out = v;
  return true;
}

}  // namespace gossamer::fuzz
