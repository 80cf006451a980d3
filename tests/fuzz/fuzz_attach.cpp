// libFuzzer target for the attach handshake check (DESIGN.md §5: fuzzers on
// every parser). The attach message and the segment header come from an
// application, so from anyone who can reach the dataplane's socket: any of
// them must be refused with a reason or accepted, and an accepted attach must
// describe a segment in which everything the dataplane later indexes fits.
// Input format: tests/fuzz/fuzz_inputs.hpp. Mode kAttachRaw takes every
// field from the input; kAttachMutate builds a valid pair and overwrites one
// or two fields, which reaches the checks behind the version and size ones.
//
// AttachCheck's host_index and host_count come from the dataplane's own
// configuration, not from the application: they are kept in their contract
// (1 <= host_count, host_index < host_count), like the dataplane does.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "app.hpp"
#include "fuzz_inputs.hpp"

namespace {

using namespace gossamer;
using namespace gossamer::fuzz;
using dataplane::AttachCheck;

// Reads the input front to back; past its end, every byte is zero.
struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  std::size_t left() const { return n; }
  std::uint8_t byte() {
    std::uint8_t b = 0;
    take(&b, 1);
    return b;
  }
  void take(void* dst, std::size_t k) {
    const std::size_t m = std::min(k, n);
    if (m) std::memcpy(dst, p, m);
    if (k > m) std::memset(static_cast<std::uint8_t*>(dst) + m, 0, k - m);
    p += m;
    n -= m;
  }
};

volatile std::size_t g_sink;

void require(bool ok) {
  if (!ok) std::abort();
}

// What an accepted attach promises the rest of the dataplane (App's
// accessors index the segment with these offsets and the thread counts).
void check_accepted(const std::uint8_t* msg, std::size_t msg_len, const abi::SegmentHeader& hdr,
                    const AttachCheck& c, const abi::SegmentLayout& got) {
  require(msg_len == sizeof(abi::AttachRequest));
  abi::AttachRequest r;
  std::memcpy(&r, msg, sizeof r);
  require(r.type == abi::kMsgAttach && r.attach_version == abi::kAttachVersion &&
          r.slot_layout == abi::kLayoutVersion);
  require(r.build_id_len >= 1 && r.build_id_len <= abi::kMaxBuildId);
  require(c.fds == 2 && c.sealed);
  const std::uint64_t t = r.total_threads;
  require(t >= c.host_count && t <= abi::kMaxRackThreads);
  std::uint32_t first = 0, local = 0;
  abi::host_threads(r.total_threads, c.host_count, c.host_index, &first, &local);
  require(local >= 1 && std::uint64_t(first) + local <= t);
  abi::SegmentLayout l{};
  require(abi::segment_layout(r.total_threads, local, &l));
  require(got.request_primary == l.request_primary && got.response_primary == l.response_primary &&
          got.request_overflow == l.request_overflow && got.response_overflow == l.response_overflow &&
          got.wake_words == l.wake_words && got.doorbells == l.doorbells &&
          got.doorbell_stride == l.doorbell_stride && got.counters == l.counters && got.bytes == l.bytes &&
          got.doorbell_entries == l.doorbell_entries);
  require(c.segment_size == l.bytes && r.segment_bytes == l.bytes && hdr.segment_bytes == l.bytes);
  require(hdr.magic == abi::kSegmentMagic && hdr.attach_version == abi::kAttachVersion &&
          hdr.slot_layout == abi::kLayoutVersion);
  require(hdr.total_threads == t && hdr.first_thread == first && hdr.local_threads == local &&
          hdr.host_index == c.host_index && hdr.host_count == c.host_count);
  require(hdr.doorbell_entries == l.doorbell_entries && hdr.request_primary == l.request_primary &&
          hdr.response_primary == l.response_primary && hdr.request_overflow == l.request_overflow &&
          hdr.response_overflow == l.response_overflow && hdr.wake_words == l.wake_words &&
          hdr.doorbells == l.doorbells && hdr.doorbell_stride == l.doorbell_stride &&
          hdr.counters == l.counters);
  // Regions in order, not overlapping, inside the segment.
  const std::uint64_t cells = abi::kLanes * t * t;  // every lane of every pair
  require(l.request_primary >= sizeof(abi::SegmentHeader));
  require(l.request_primary + cells * abi::kPrimaryBytes <= l.response_primary);
  require(l.response_primary + cells * abi::kPrimaryBytes <= l.request_overflow);
  require(l.request_overflow + cells * abi::kOverflowBytes <= l.response_overflow);
  require(l.response_overflow + cells * abi::kOverflowBytes <= l.wake_words);
  require(l.wake_words + std::uint64_t(local) * abi::kWakeStride <= l.doorbells);
  require(l.doorbells + std::uint64_t(local) * l.doorbell_stride <= l.counters);
  require(l.counters + std::uint64_t(local) * sizeof(abi::ThreadCounters) <= l.bytes);
  require(l.doorbell_stride >= sizeof(abi::DoorbellRing) + std::uint64_t(l.doorbell_entries) * 4);
  require(l.doorbell_entries >= 2 * abi::kLanes * t && (l.doorbell_entries & (l.doorbell_entries - 1)) == 0);
}

// Calls check_attach on an exactly sized copy of the message (ASan sees a
// read past msg_len) with the header as the dataplane reads it: only when
// the segment is at least a header long.
void run(const std::uint8_t* msg_bytes, std::size_t msg_len, abi::SegmentHeader hdr,
         const AttachCheck& c, bool must_accept) {
  auto msg = std::make_unique<std::uint8_t[]>(msg_len ? msg_len : 1);
  if (msg_len) std::memcpy(msg.get(), msg_bytes, msg_len);
  if (c.segment_size < sizeof hdr) hdr = abi::SegmentHeader{};
  abi::SegmentLayout layout{};
  const std::string why = dataplane::check_attach(msg.get(), msg_len, hdr, c, &layout);
  if (why.empty())
    check_accepted(msg.get(), msg_len, hdr, c, layout);
  else
    require(!must_accept);
  g_sink = g_sink + why.size();
}

void host_fields(Reader& in, AttachCheck* c) {
  c->host_count = 1u + in.byte();                // 1..256
  c->host_index = in.byte() % c->host_count;
}

void raw(Reader in) {
  std::uint8_t msg[256] = {};
  const std::size_t msg_len = in.byte();
  AttachCheck c{};
  host_fields(in, &c);
  const std::uint8_t flags = in.byte();
  c.sealed = flags & 1;
  c.fds = flags >> 1 & 7;
  in.take(&c.segment_size, sizeof c.segment_size);
  in.take(msg, msg_len);
  abi::SegmentHeader hdr;
  in.take(&hdr, sizeof hdr);
  run(msg, msg_len, hdr, c, false);
}

// Where a field lives and how big it is; `ignored` fields are not checked.
struct Field {
  enum Where { kNowhere, kReq, kHdr, kChk, kSealed, kLen } where;
  std::size_t off, size;
  bool ignored;
};

Field field(AttachField f) {
  using R = abi::AttachRequest;
  using H = abi::SegmentHeader;
#define REQ(m) Field{Field::kReq, offsetof(R, m), sizeof(R::m), false}
#define HDR(m) Field{Field::kHdr, offsetof(H, m), sizeof(H::m), false}
  switch (f) {
    case kReqType: return REQ(type);
    case kReqAttachVersion: return REQ(attach_version);
    case kReqSlotLayout: return REQ(slot_layout);
    case kReqBuildIdLen: return REQ(build_id_len);
    case kReqBuildId: return {Field::kReq, offsetof(R, build_id), sizeof(R::build_id), true};
    case kReqRunId: return REQ(run_id);
    case kReqRunToken: return REQ(run_token);
    case kReqTotalThreads: return REQ(total_threads);
    case kReqPid: return {Field::kReq, offsetof(R, pid), sizeof(R::pid), true};
    case kReqSegmentBytes: return REQ(segment_bytes);
    case kHdrMagic: return HDR(magic);
    case kHdrAttachVersion: return HDR(attach_version);
    case kHdrSlotLayout: return HDR(slot_layout);
    case kHdrSegmentBytes: return HDR(segment_bytes);
    case kHdrTotalThreads: return HDR(total_threads);
    case kHdrFirstThread: return HDR(first_thread);
    case kHdrLocalThreads: return HDR(local_threads);
    case kHdrHostIndex: return HDR(host_index);
    case kHdrHostCount: return HDR(host_count);
    case kHdrDoorbellEntries: return HDR(doorbell_entries);
    case kHdrRequestPrimary: return HDR(request_primary);
    case kHdrResponsePrimary: return HDR(response_primary);
    case kHdrRequestOverflow: return HDR(request_overflow);
    case kHdrResponseOverflow: return HDR(response_overflow);
    case kHdrWakeWords: return HDR(wake_words);
    case kHdrDoorbells: return HDR(doorbells);
    case kHdrDoorbellStride: return HDR(doorbell_stride);
    case kHdrSleeping: return {Field::kHdr, offsetof(H, dataplane_sleeping), 4, true};
    case kHdrReserved:  // reserved[], after the counters offset
      return {Field::kHdr, offsetof(H, reserved), sizeof(H::reserved), true};
    case kHdrCounters: return HDR(counters);
    case kChkSegmentSize: return {Field::kChk, offsetof(AttachCheck, segment_size), 8, false};
    case kChkSealed: return {Field::kSealed, 0, 1, false};
    case kChkFds: return {Field::kChk, offsetof(AttachCheck, fds), sizeof(int), false};
    case kMsgLen: return {Field::kLen, 0, 2, false};
    case kFieldNone:
    case kFieldCount: break;
  }
#undef REQ
#undef HDR
  return {Field::kNowhere, 0, 0, true};
}

struct Valid {
  abi::AttachRequest req;
  abi::SegmentHeader hdr;
  AttachCheck chk;
  std::size_t msg_len;
};

// Overwrites `f` with the next bytes of the input; returns whether a field
// the check looks at changed.
bool overwrite(Valid& v, AttachField f, Reader& in) {
  const Field d = field(f);
  if (d.where == Field::kNowhere) return false;
  const std::size_t k = std::min(d.size, in.left());
  std::uint8_t before[256], after[256];
  std::uint8_t* at = nullptr;
  switch (d.where) {
    case Field::kReq: at = reinterpret_cast<std::uint8_t*>(&v.req) + d.off; break;
    case Field::kHdr: at = reinterpret_cast<std::uint8_t*>(&v.hdr) + d.off; break;
    case Field::kChk: at = reinterpret_cast<std::uint8_t*>(&v.chk) + d.off; break;
    case Field::kSealed: {
      v.chk.sealed = in.byte() & 1;
      return !v.chk.sealed;
    }
    case Field::kLen: {
      std::uint16_t len = 0;
      in.take(&len, k);  // a short input leaves the high byte 0
      v.msg_len = len % 513;  // the dataplane receives into 512 bytes
      return v.msg_len != sizeof(abi::AttachRequest);
    }
    case Field::kNowhere: return false;
  }
  std::memcpy(before, at, d.size);
  in.take(at, k);  // only the first k bytes: the rest keep their valid value
  std::memcpy(after, at, d.size);
  return !d.ignored && std::memcmp(before, after, d.size) != 0;
}

void mutate(Reader in) {
  std::uint16_t t16 = 0;
  in.take(&t16, 2);
  Valid v{};
  host_fields(in, &v.chk);
  const std::uint32_t total = std::max<std::uint32_t>(1u + t16 % abi::kMaxRackThreads, v.chk.host_count);
  const auto fa = AttachField(in.byte() % kFieldCount);
  const auto fb = AttachField(in.byte() % kFieldCount);

  ValidAttach va;
  if (!valid_attach(total, v.chk.host_count, v.chk.host_index, &va)) std::abort();  // valid by construction
  v.req = va.req;
  v.hdr = va.hdr;
  v.chk.segment_size = va.segment_size;
  v.chk.sealed = true;
  v.chk.fds = 2;
  v.msg_len = sizeof(abi::AttachRequest);

  bool changed = overwrite(v, fa, in);
  changed |= overwrite(v, fb, in);

  std::uint8_t msg[512] = {};
  std::memcpy(msg, &v.req, sizeof v.req);
  run(msg, v.msg_len, v.hdr, v.chk, !changed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const Reader in{data + 1, size - 1};
  if ((data[0] & 1) == kAttachRaw)
    raw(in);
  else
    mutate(in);
  return 0;
}
