// The attach contract (runtime/include/gossamer/abi/attach.hpp) and the
// dataplane's handshake check (dataplane/src/app.hpp check_attach): the
// struct layouts both sides compile against, the segment layout, the split
// of the rack's threads over hosts, and every reason to refuse an attach;
// then who may claim which run (claim_run, run tokens, may_join).
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/abi/attach.hpp>

#include "app.hpp"
#include "wire.hpp"

namespace {

namespace abi = gossamer::abi;
using gossamer::dataplane::AttachCheck;
using gossamer::dataplane::check_attach;
using gossamer::dataplane::claim_run;
using gossamer::dataplane::kIssuedRunBit;
using gossamer::dataplane::may_join;
using gossamer::dataplane::RunClaim;
using gossamer::dataplane::RunToken;
using gossamer::dataplane::RunTokens;

// ---- struct layouts ------------------------------------------------------------

static_assert(sizeof(abi::SegmentHeader) == 256);
static_assert(offsetof(abi::SegmentHeader, magic) == 0);
static_assert(offsetof(abi::SegmentHeader, attach_version) == 8);
static_assert(offsetof(abi::SegmentHeader, slot_layout) == 12);
static_assert(offsetof(abi::SegmentHeader, segment_bytes) == 16);
static_assert(offsetof(abi::SegmentHeader, total_threads) == 24);
static_assert(offsetof(abi::SegmentHeader, first_thread) == 28);
static_assert(offsetof(abi::SegmentHeader, local_threads) == 32);
static_assert(offsetof(abi::SegmentHeader, host_index) == 36);
static_assert(offsetof(abi::SegmentHeader, host_count) == 40);
static_assert(offsetof(abi::SegmentHeader, doorbell_entries) == 44);
static_assert(offsetof(abi::SegmentHeader, request_primary) == 48);
static_assert(offsetof(abi::SegmentHeader, response_primary) == 56);
static_assert(offsetof(abi::SegmentHeader, request_overflow) == 64);
static_assert(offsetof(abi::SegmentHeader, response_overflow) == 72);
static_assert(offsetof(abi::SegmentHeader, wake_words) == 80);
static_assert(offsetof(abi::SegmentHeader, doorbells) == 88);
static_assert(offsetof(abi::SegmentHeader, doorbell_stride) == 96);
static_assert(offsetof(abi::SegmentHeader, counters) == 112);
static_assert(offsetof(abi::SegmentHeader, dataplane_sleeping) == 104);
static_assert(offsetof(abi::SegmentHeader, reserved) == 120);

static_assert(sizeof(abi::DoorbellRing) == 128);
static_assert(offsetof(abi::DoorbellRing, head) == 0);
static_assert(offsetof(abi::DoorbellRing, tail) == 64);

static_assert(sizeof(abi::AttachRequest) == 224);
static_assert(offsetof(abi::AttachRequest, type) == 0);
static_assert(offsetof(abi::AttachRequest, attach_version) == 4);
static_assert(offsetof(abi::AttachRequest, slot_layout) == 8);
static_assert(offsetof(abi::AttachRequest, build_id_len) == 12);
static_assert(offsetof(abi::AttachRequest, build_id) == 16);
static_assert(offsetof(abi::AttachRequest, run_id) == 80);
static_assert(offsetof(abi::AttachRequest, run_token) == 144);
static_assert(offsetof(abi::AttachRequest, total_threads) == 208);
static_assert(offsetof(abi::AttachRequest, pid) == 212);
static_assert(offsetof(abi::AttachRequest, segment_bytes) == 216);

static_assert(sizeof(abi::DataplaneMessage) == 256);
static_assert(offsetof(abi::DataplaneMessage, host) == 4);
static_assert(offsetof(abi::DataplaneMessage, host_count) == 8);
static_assert(offsetof(abi::DataplaneMessage, text) == 16);
static_assert(sizeof(abi::AppMessage) == 8);

static_assert(sizeof(gossamer::dataplane::wire::FrameHeader) == 48);
static_assert(sizeof(gossamer::dataplane::wire::WireRecord) == 32);
static_assert(sizeof(gossamer::dataplane::wire::AttachAnnounce) == 24);

// segment_layout is usable at compile time.
constexpr abi::SegmentLayout kLayout8x4 = [] {
  abi::SegmentLayout l{};
  bool ok = abi::segment_layout(8, 4, &l);
  if (!ok) l.bytes = 0;
  return l;
}();
static_assert(kLayout8x4.request_primary == abi::kPage);
static_assert(kLayout8x4.doorbell_entries == 16 * abi::kLanes);  // 2 * kLanes * 8, a power of two
static_assert(kLayout8x4.bytes % abi::kPage == 0);

TEST(AttachAbi, Sizes) {
  // The same facts at run time, so that a report lists them.
  EXPECT_EQ(sizeof(abi::SegmentHeader), 256u);
  EXPECT_EQ(sizeof(abi::DoorbellRing), 128u);
  EXPECT_EQ(offsetof(abi::DoorbellRing, tail), 64u);
  EXPECT_EQ(sizeof(abi::AttachRequest), 224u);
  EXPECT_EQ(sizeof(abi::DataplaneMessage), 256u);
}

// ---- segment_layout ------------------------------------------------------------

void check_layout(std::uint32_t t, std::uint32_t l) {
  SCOPED_TRACE("T=" + std::to_string(t) + " L=" + std::to_string(l));
  abi::SegmentLayout s{};
  ASSERT_TRUE(abi::segment_layout(t, l, &s));
  const std::uint64_t cells = std::uint64_t(abi::kLanes) * t * t;  // every lane of every pair
  // Regions in order, with the size each must hold at least.
  const std::pair<std::uint64_t, std::uint64_t> regions[] = {
      {s.request_primary, cells * abi::kPrimaryBytes},
      {s.response_primary, cells * abi::kPrimaryBytes},
      {s.request_overflow, cells * abi::kOverflowBytes},
      {s.response_overflow, cells * abi::kOverflowBytes},
      {s.wake_words, std::uint64_t(l) * abi::kWakeStride},
      {s.doorbells, std::uint64_t(l) * s.doorbell_stride},
      {s.counters, std::uint64_t(l) * sizeof(abi::ThreadCounters)},
  };
  EXPECT_EQ(s.request_primary, abi::kPage);  // after the header page
  EXPECT_GE(s.request_primary, sizeof(abi::SegmentHeader));
  std::uint64_t prev_end = abi::kPage;
  for (std::size_t i = 0; i < std::size(regions); ++i) {
    auto [off, size] = regions[i];
    EXPECT_EQ(off % abi::kPage, 0u) << "region " << i;
    EXPECT_GE(off, prev_end) << "region " << i << " overlaps the one before";
    EXPECT_GT(size, 0u);
    prev_end = off + size;
  }
  EXPECT_GE(s.bytes, prev_end);
  EXPECT_EQ(s.bytes % abi::kPage, 0u);
  EXPECT_LT(s.bytes - prev_end, abi::kPage);  // no more than rounding
  // Doorbell rings: a power of two of at least 2 * kLanes * T entries (a
  // request and a response per lane of every pair; the smallest such),
  // cache-line strided, large enough for the ring and its entries.
  EXPECT_EQ(s.doorbell_entries & (s.doorbell_entries - 1), 0u);
  EXPECT_GE(s.doorbell_entries, 2 * abi::kLanes * t);
  EXPECT_LT(s.doorbell_entries, 4 * abi::kLanes * t);
  EXPECT_EQ(s.doorbell_stride % 64, 0u);
  EXPECT_GE(s.doorbell_stride, sizeof(abi::DoorbellRing) + 4ull * s.doorbell_entries);
  // The header's offsets fit their fields.
  EXPECT_LE(s.bytes, UINT64_MAX / 2);
}

TEST(AttachAbi, SegmentLayout) {
  for (std::uint32_t t : {1u, 2u, 3u, 8u, 64u, 4096u}) {
    for (std::uint32_t l : {1u, t / 2, t}) {
      if (l == 0) continue;
      check_layout(t, l);
    }
  }
  for (std::uint32_t t = 1; t <= 100; ++t)
    for (std::uint32_t l = 1; l <= t; l += 7) check_layout(t, l);
}

TEST(AttachAbi, SegmentLayoutGrowsWithCounts) {
  abi::SegmentLayout a{}, b{};
  ASSERT_TRUE(abi::segment_layout(64, 8, &a));
  ASSERT_TRUE(abi::segment_layout(64, 64, &b));
  EXPECT_EQ(a.request_primary, b.request_primary);
  EXPECT_EQ(a.wake_words, b.wake_words);  // L only changes the tail
  EXPECT_LT(a.bytes, b.bytes);
  ASSERT_TRUE(abi::segment_layout(65, 8, &b));
  EXPECT_LT(a.bytes, b.bytes);
}

TEST(AttachAbi, SegmentLayoutRejectsBadCounts) {
  abi::SegmentLayout s{};
  s.bytes = 12345;
  EXPECT_FALSE(abi::segment_layout(0, 0, &s));
  EXPECT_FALSE(abi::segment_layout(0, 1, &s));
  EXPECT_FALSE(abi::segment_layout(1, 0, &s));
  EXPECT_FALSE(abi::segment_layout(4, 5, &s));
  EXPECT_FALSE(abi::segment_layout(abi::kMaxRackThreads + 1, 1, &s));
  EXPECT_FALSE(abi::segment_layout(UINT32_MAX, 1, &s));
  EXPECT_EQ(s.bytes, 12345u);  // untouched when refused
}

// ---- host_threads --------------------------------------------------------------

void check_partition(std::uint32_t t, std::uint32_t h) {
  SCOPED_TRACE("T=" + std::to_string(t) + " H=" + std::to_string(h));
  std::uint64_t sum = 0;
  std::uint32_t expect_first = 0, lo = UINT32_MAX, hi = 0;
  for (std::uint32_t i = 0; i < h; ++i) {
    std::uint32_t first = 0, count = 0;
    abi::host_threads(t, h, i, &first, &count);
    ASSERT_EQ(first, expect_first) << "host " << i;
    expect_first = first + count;
    sum += count;
    lo = std::min(lo, count);
    hi = std::max(hi, count);
  }
  EXPECT_EQ(sum, t);
  EXPECT_EQ(expect_first, t);
  EXPECT_LE(hi - lo, 1u) << "uneven";
  if (t >= h) {
    EXPECT_GE(lo, 1u);
  }
}

TEST(AttachAbi, HostThreadsPartition) {
  for (std::uint32_t t = 1; t <= 300; ++t)
    for (std::uint32_t h = 1; h <= abi::kMaxRackHosts; ++h) check_partition(t, h);
  for (std::uint32_t t : {1000u, 1023u, 1024u, 4095u, 4096u})
    for (std::uint32_t h = 1; h <= abi::kMaxRackHosts; ++h) check_partition(t, h);
}

// ---- check_attach --------------------------------------------------------------

struct Valid {
  abi::AttachRequest req{};
  abi::SegmentHeader hdr{};
  AttachCheck check{};
  abi::SegmentLayout layout{};

  Valid(std::uint32_t total = 8, std::uint32_t host_count = 2, std::uint32_t host_index = 1) {
    std::uint32_t first = 0, count = 0;
    abi::host_threads(total, host_count, host_index, &first, &count);
    EXPECT_TRUE(abi::segment_layout(total, count, &layout));
    req.type = abi::kMsgAttach;
    req.attach_version = abi::kAttachVersion;
    req.slot_layout = abi::kLayoutVersion;
    req.build_id_len = 20;
    for (std::uint32_t i = 0; i < 20; ++i) req.build_id[i] = std::uint8_t(0xa0 + i);
    std::memcpy(req.run_id, "demo-run", 8);
    req.total_threads = total;
    req.pid = 4242;
    req.segment_bytes = layout.bytes;

    hdr = abi::segment_header(layout, total, first, count, host_index, host_count);

    check.host_index = host_index;
    check.host_count = host_count;
    check.segment_size = layout.bytes;
    check.sealed = true;
    check.fds = 2;
  }

  std::string run(std::size_t len = sizeof(abi::AttachRequest)) const {
    // The message buffer is larger than the request, as a recv buffer is.
    std::vector<std::uint8_t> buf(sizeof(abi::AttachRequest) + 64, 0xee);
    std::memcpy(buf.data(), &req, sizeof req);
    abi::SegmentLayout out{};
    return check_attach(buf.data(), len, hdr, check, &out);
  }
};

TEST(CheckAttach, ValidIsAccepted) {
  Valid v;
  abi::SegmentLayout out{};
  EXPECT_EQ(check_attach(&v.req, sizeof v.req, v.hdr, v.check, &out), "");
  EXPECT_EQ(out.bytes, v.layout.bytes);
  EXPECT_EQ(out.request_primary, v.layout.request_primary);
  EXPECT_EQ(out.response_primary, v.layout.response_primary);
  EXPECT_EQ(out.request_overflow, v.layout.request_overflow);
  EXPECT_EQ(out.response_overflow, v.layout.response_overflow);
  EXPECT_EQ(out.wake_words, v.layout.wake_words);
  EXPECT_EQ(out.doorbells, v.layout.doorbells);
  EXPECT_EQ(out.doorbell_stride, v.layout.doorbell_stride);
  EXPECT_EQ(out.doorbell_entries, v.layout.doorbell_entries);
}

TEST(CheckAttach, ValidForManyRacks) {
  for (std::uint32_t hosts : {1u, 2u, 3u, 5u, 64u})
    for (std::uint32_t total : {hosts, hosts + 1, 2 * hosts + 1, 100u, 4096u}) {
      if (total < hosts) continue;
      for (std::uint32_t h : {0u, hosts / 2, hosts - 1}) {
        SCOPED_TRACE("T=" + std::to_string(total) + " hosts=" + std::to_string(hosts) +
                     " host=" + std::to_string(h));
        Valid v(total, hosts, h);
        EXPECT_EQ(v.run(), "");
      }
    }
}

TEST(CheckAttach, FieldsTheDataplaneOwnsAreIgnored) {
  Valid v;
  v.hdr.dataplane_sleeping = 1;
  v.hdr.reserved0 = 7;
  std::memset(v.hdr.reserved, 0x5a, sizeof v.hdr.reserved);
  std::memset(v.req.run_id, 0, sizeof v.req.run_id);
  v.req.pid = 0;
  std::memset(v.req.build_id + v.req.build_id_len, 0xff,
              abi::kMaxBuildId - v.req.build_id_len);
  EXPECT_EQ(v.run(), "");
  v.req.build_id_len = abi::kMaxBuildId;
  EXPECT_EQ(v.run(), "");
  v.req.build_id_len = 1;
  EXPECT_EQ(v.run(), "");
}

TEST(CheckAttach, WrongMessageSize) {
  Valid v;
  for (std::size_t len : {std::size_t(0), sizeof(abi::AttachRequest) - 1,
                          sizeof(abi::AttachRequest) + 1, sizeof(abi::AttachRequest) + 64}) {
    SCOPED_TRACE(len);
    std::string why = v.run(len);
    EXPECT_NE(why, "");
    EXPECT_NE(why.find(std::to_string(len) + " bytes"), std::string::npos) << why;
    EXPECT_NE(why.find(std::to_string(sizeof(abi::AttachRequest))), std::string::npos) << why;
  }
}

TEST(CheckAttach, WrongType) {
  Valid v;
  for (std::uint32_t type : {0u, std::uint32_t(abi::kMsgDetach), std::uint32_t(abi::kMsgAttachOk),
                             0xffffffffu}) {
    v.req.type = type;
    EXPECT_EQ(v.run(), "first message is not an attach request") << type;
  }
}

TEST(CheckAttach, WrongAttachVersion) {
  Valid v;
  for (std::uint32_t ver : {0u, abi::kAttachVersion + 1, 0x7fffffffu}) {
    v.req.attach_version = ver;
    std::string why = v.run();
    EXPECT_NE(why.find("attach contract version " + std::to_string(ver)), std::string::npos) << why;
    EXPECT_NE(why.find(std::to_string(abi::kAttachVersion)), std::string::npos) << why;
  }
}

TEST(CheckAttach, WrongSlotLayout) {
  Valid v;
  v.req.slot_layout = abi::kLayoutVersion + 1;
  std::string why = v.run();
  EXPECT_NE(why.find("slot layout version " + std::to_string(abi::kLayoutVersion + 1)),
            std::string::npos)
      << why;
  EXPECT_NE(why.find(std::to_string(abi::kLayoutVersion)), std::string::npos) << why;
}

TEST(CheckAttach, NoBuildId) {
  Valid v;
  for (std::uint32_t n : {0u, abi::kMaxBuildId + 1, 0xffffffffu}) {
    v.req.build_id_len = n;
    EXPECT_NE(v.run().find("build-id"), std::string::npos) << n;
  }
}

TEST(CheckAttach, DescriptorCount) {
  Valid v;
  for (int fds : {0, 1, 3, -1}) {
    v.check.fds = fds;
    EXPECT_NE(v.run().find("exactly two descriptors"), std::string::npos) << fds;
  }
}

TEST(CheckAttach, NotSealed) {
  Valid v;
  v.check.sealed = false;
  EXPECT_NE(v.run().find("not sealed"), std::string::npos);
}

TEST(CheckAttach, ThreadCount) {
  Valid v;
  v.req.total_threads = 0;
  EXPECT_EQ(v.run(), "thread count 0 out of range");
  v.req.total_threads = abi::kMaxRackThreads + 1;
  EXPECT_EQ(v.run(), "thread count 4097 out of range");
  v.req.total_threads = 0xffffffffu;
  EXPECT_NE(v.run().find("out of range"), std::string::npos);
}

TEST(CheckAttach, FewerThreadsThanHosts) {
  Valid v(8, 4, 3);
  v.req.total_threads = 3;
  std::string why = v.run();
  EXPECT_NE(why.find("a rack of 4 hosts"), std::string::npos) << why;
  EXPECT_NE(why.find("got 3"), std::string::npos) << why;
}

TEST(CheckAttach, SegmentSizeMismatch) {
  {
    Valid v;
    v.check.segment_size = v.layout.bytes + abi::kPage;  // the memfd
    EXPECT_NE(v.run().find("segment is"), std::string::npos);
    v.check.segment_size = v.layout.bytes - 1;
    EXPECT_NE(v.run().find("segment is"), std::string::npos);
    v.check.segment_size = 0;
    EXPECT_NE(v.run().find("segment is"), std::string::npos);
  }
  {
    Valid v;
    v.req.segment_bytes = v.layout.bytes + abi::kPage;  // the message
    EXPECT_NE(v.run().find("expected " + std::to_string(v.layout.bytes)), std::string::npos);
  }
  {
    // The application computed its layout for another thread count.
    Valid v;
    v.req.total_threads = 9;
    EXPECT_NE(v.run().find("segment is"), std::string::npos);
  }
}

TEST(CheckAttach, HeaderMagic) {
  Valid v;
  v.hdr.magic ^= 1;
  EXPECT_EQ(v.run(), "segment header has a bad magic number");
  v.hdr.magic = 0;
  EXPECT_EQ(v.run(), "segment header has a bad magic number");
}

TEST(CheckAttach, HeaderVersions) {
  Valid v;
  v.hdr.attach_version = abi::kAttachVersion + 1;
  EXPECT_EQ(v.run(), "segment header versions differ from the attach message");
  v = Valid();
  v.hdr.slot_layout = abi::kLayoutVersion ^ 1;
  EXPECT_EQ(v.run(), "segment header versions differ from the attach message");
}

TEST(CheckAttach, HeaderFieldsOneAtATime) {
  using Edit = std::function<void(abi::SegmentHeader&)>;
  const std::vector<std::pair<const char*, Edit>> edits = {
      {"segment_bytes", [](auto& h) { h.segment_bytes += abi::kPage; }},
      {"total_threads", [](auto& h) { h.total_threads += 1; }},
      {"first_thread", [](auto& h) { h.first_thread -= 1; }},
      {"local_threads", [](auto& h) { h.local_threads += 1; }},
      {"host_index", [](auto& h) { h.host_index = 0; }},
      {"host_count", [](auto& h) { h.host_count = 3; }},
      {"doorbell_entries", [](auto& h) { h.doorbell_entries *= 2; }},
      {"request_primary", [](auto& h) { h.request_primary += abi::kPage; }},
      {"response_primary", [](auto& h) { h.response_primary += 8; }},
      {"request_overflow", [](auto& h) { h.request_overflow -= abi::kPage; }},
      {"response_overflow", [](auto& h) { h.response_overflow = 0; }},
      {"wake_words", [](auto& h) { h.wake_words += 64; }},
      {"doorbells", [](auto& h) { h.doorbells += abi::kPage; }},
      {"doorbell_stride", [](auto& h) { h.doorbell_stride += 64; }},
      {"counters", [](auto& h) { h.counters -= abi::kPage; }},
  };
  for (const auto& [name, edit] : edits) {
    SCOPED_TRACE(name);
    Valid v;
    edit(v.hdr);
    std::string why = v.run();
    EXPECT_NE(why.find("segment header does not match the layout for 8 threads on host 1 of 2"),
              std::string::npos)
        << why;
  }
}

TEST(CheckAttach, RefusalOrder) {
  // With everything wrong, the first check wins: the message size.
  Valid v;
  v.req.type = 0;
  v.check.fds = 0;
  v.check.sealed = false;
  v.hdr.magic = 0;
  EXPECT_NE(v.run(sizeof(abi::AttachRequest) - 4).find("attach message has"), std::string::npos);
  EXPECT_EQ(v.run(), "first message is not an attach request");
}

TEST(CheckAttach, RunIdAndTokenFormat) {
  Valid v;
  v.req.run_id[3] = '\n';
  EXPECT_NE(v.run().find("not printable ASCII"), std::string::npos);
  v = Valid();
  std::memset(v.req.run_id, 'x', sizeof v.req.run_id);  // 64 bytes, no NUL: the longest id
  EXPECT_EQ(v.run(), "");
  std::memset(v.req.run_token, 'a', 10);
  EXPECT_NE(v.run().find("is not 64 hex digits"), std::string::npos);
  std::memset(v.req.run_token, 'a', sizeof v.req.run_token);
  EXPECT_EQ(v.run(), "");  // the format; claim_run checks the token
}

// ---- who may claim a run (issue 18, finding 12) ----------------------------------

constexpr char kIssued[] = "gossamerd-00112233445566778899aabbccddeeff";

RunTokens tokens(const std::string& secret = "the rack secret of this test") {
  RunTokens t;
  EXPECT_EQ(t.set_secret(secret), "");
  return t;
}

struct Claim {
  abi::AttachRequest req = Valid().req;
  Claim(const std::string& id, const std::string& token = "") {
    std::memset(req.run_id, 0, sizeof req.run_id);
    std::memcpy(req.run_id, id.data(), std::min(id.size(), sizeof req.run_id));
    std::memcpy(req.run_token, token.data(), std::min(token.size(), sizeof req.run_token));
  }
  std::string run(const RunTokens& t, std::uint32_t host, RunClaim* out) const { return claim_run(req, host, t, out); }
};

TEST(ClaimRun, HandStartedRunsHaveNoToken) {
  const RunTokens t = tokens();
  RunClaim c;
  EXPECT_EQ(Claim("demo").run(t, 1, &c), "");
  EXPECT_EQ(c.id, "demo");
  EXPECT_FALSE(c.issued);
  EXPECT_EQ(c.key, gossamer::dataplane::hash_run_id("demo") & ~kIssuedRunBit);
  // No GOSSAMER_RUN_ID: the build-id names the run.
  Claim b("");
  EXPECT_EQ(b.run(t, 1, &c), "");
  EXPECT_EQ(c.id, "");
  EXPECT_EQ(c.key, gossamer::dataplane::hash_build_id(b.req.build_id, b.req.build_id_len) & ~kIssuedRunBit);
  // Without a secret too: nothing to check.
  EXPECT_EQ(Claim("demo").run(RunTokens(), 1, &c), "");
}

TEST(ClaimRun, GossamerdRunWithItsToken) {
  const RunTokens t = tokens();
  RunClaim c;
  const std::string token = RunTokens::to_hex(t.token(kIssued, 1));
  EXPECT_EQ(token.size(), 2 * abi::kRunTokenBytes);
  EXPECT_EQ(Claim(kIssued, token).run(t, 1, &c), "");
  EXPECT_TRUE(c.issued);
  EXPECT_EQ(c.key, gossamer::dataplane::hash_run_id(kIssued) | kIssuedRunBit);
  // Upper-case hex is the same token.
  std::string upper = token;
  for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(Claim(kIssued, upper).run(t, 1, &c), "");
}

TEST(ClaimRun, GossamerdRunWithoutItsTokenIsDenied) {
  const RunTokens t = tokens();
  RunClaim c;
  c.key = 77;
  const std::string good = RunTokens::to_hex(t.token(kIssued, 1));
  std::string flipped = good;
  flipped[10] = flipped[10] == '0' ? '1' : '0';
  const std::vector<std::pair<const char*, std::string>> bad = {
      {"no token", ""},
      {"another host's", RunTokens::to_hex(t.token(kIssued, 0))},
      {"another run's", RunTokens::to_hex(t.token("gossamerd-ffeeddccbbaa99887766554433221100", 1))},
      {"another secret's", RunTokens::to_hex(tokens("another rack's secret, as long").token(kIssued, 1))},
      {"one digit changed", flipped},
      {"not hex", std::string(64, 'z')},
      {"zeros", std::string(64, '0')},
  };
  for (const auto& [what, token] : bad) {
    SCOPED_TRACE(what);
    const std::string why = Claim(kIssued, token).run(t, 1, &c);
    EXPECT_NE(why, "");
    EXPECT_NE(why.find(kIssued), std::string::npos) << why;
    EXPECT_NE(why.find(token.empty() ? "was started by gossamerd" : "is not the one gossamerd issued"),
              std::string::npos)
        << why;
  }
  EXPECT_EQ(c.key, 77u);  // untouched when refused
  // A dataplane without the secret cannot check one: it says so.
  EXPECT_NE(Claim(kIssued, good).run(RunTokens(), 1, &c).find("no rack secret"), std::string::npos);
}

TEST(ClaimRun, TokenOnlyWithAnIssuedId) {
  const RunTokens t = tokens();
  RunClaim c;
  const std::string why = Claim("demo", RunTokens::to_hex(t.token("demo", 1))).run(t, 1, &c);
  EXPECT_NE(why.find("comes only with a run id gossamerd issued"), std::string::npos) << why;
}

TEST(ClaimRun, KeySpacesApart) {
  // A hand-started run never has a gossamerd run's key, whatever its id
  // hashes to: the top bit tells them apart.
  const RunTokens t = tokens();
  int top_bit_hashes = 0;
  for (int i = 0; i < 64; ++i) {
    const std::string id = "id-" + std::to_string(i);
    top_bit_hashes += (gossamer::dataplane::hash_run_id(id) & kIssuedRunBit) != 0;
    RunClaim c;
    ASSERT_EQ(Claim(id).run(t, 0, &c), "");
    EXPECT_EQ(c.key & kIssuedRunBit, 0u) << id;
  }
  EXPECT_GT(top_bit_hashes, 0);  // the test covered ids whose hash has the bit
  RunClaim c;
  ASSERT_EQ(Claim(kIssued, RunTokens::to_hex(t.token(kIssued, 0))).run(t, 0, &c), "");
  EXPECT_NE(c.key & kIssuedRunBit, 0u);
}

TEST(RunTokens, Hex) {
  RunToken a{}, b{};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::uint8_t(i * 37);
  EXPECT_TRUE(RunTokens::from_hex(RunTokens::to_hex(a), &b));
  EXPECT_EQ(a, b);
  EXPECT_FALSE(RunTokens::from_hex(RunTokens::to_hex(a).substr(1), &b));
  EXPECT_FALSE(RunTokens::from_hex(RunTokens::to_hex(a) + "0", &b));
  EXPECT_FALSE(RunTokens::from_hex(std::string(63, '0') + " ", &b));
}

TEST(MayJoin, OwnerOrRoot) {
  EXPECT_TRUE(may_join(1000, 1000));
  EXPECT_TRUE(may_join(0, 1000));   // root joins under the run's owner
  EXPECT_TRUE(may_join(0, 0));
  EXPECT_FALSE(may_join(1001, 1000));
  EXPECT_FALSE(may_join(1000, 0));  // nobody else joins root's run
  EXPECT_FALSE(may_join(std::uint32_t(-1), 1000));
}

}  // namespace
