// Writes the seed corpora of the fuzz targets:
//   make_seeds DIR   ->  DIR/frame/*.bin, DIR/attach/*.bin, DIR/cp/*.bin
// Frames are built with wire::write_l2l4, so they are what a peer sends;
// every frame seed is checked to parse before it is written. Control plane
// messages are encoded with proto.hpp's Writer (header-only) and checked to
// decode. Input formats: fuzz_inputs.hpp, fuzz_cp_inputs.hpp.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_cp_inputs.hpp"
#include "fuzz_inputs.hpp"
#include "proto.hpp"
#include "wire.hpp"

namespace {

using namespace gossamer;
using namespace gossamer::fuzz;
using namespace gossamer::dataplane::wire;
using Bytes = std::vector<std::uint8_t>;

std::filesystem::path g_dir;
int g_written = 0;

void put(const std::string& sub, const std::string& name, const Bytes& b) {
  const auto path = g_dir / sub / (name + ".bin");
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!f) {
    std::fprintf(stderr, "make_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  ++g_written;
}

struct Rec {
  std::uint8_t kind;
  std::uint16_t primary, overflow;
  std::uint8_t frag = 0;  // a fragment of the slot: kFragment | kFragMore
  std::uint16_t frag_len = 0;
  std::uint32_t frag_offset = 0;
  std::size_t body() const { return frag ? frag_len : std::size_t(primary) + overflow; }
};

// The UDP payload of a frame from `src` to `dst` on connection `conn`.
Bytes payload(std::uint16_t src, std::uint16_t dst, std::uint8_t conn, std::uint8_t type,
              std::uint32_t seq, const std::vector<Rec>& recs, std::uint8_t flags = 0) {
  Bytes body;
  std::uint16_t slots = 0;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const Rec& r = recs[i];
    WireRecord w{};
    w.kind = r.kind;
    w.count = r.kind == kRecAttach || r.kind == kRecDetach ? 0 : std::uint16_t(1 + i % 3);
    w.client = std::uint16_t(src * 4 + i % 4);
    w.trustee = std::uint16_t(dst * 4 + i % 4);
    w.slot_seq = std::uint32_t(1 + i);
    w.primary_len = r.primary;
    w.overflow_len = r.overflow;
    w.frag = r.frag;
    w.frag_len = r.frag_len;
    w.frag_offset = r.frag_offset;
    w.app = 0x0123456789abcdefull;
    const std::size_t at = body.size();
    body.resize(at + sizeof w + pad8(r.body()));
    std::memcpy(body.data() + at, &w, sizeof w);
    if (r.kind == kRecAttach || r.kind == kRecDetach) {
      AttachAnnounce an{0xfeedface12345678ull, 16, 0xabcd0000u + std::uint32_t(i)};
      std::memcpy(body.data() + at + sizeof w, &an, sizeof an);
    } else {
      for (std::size_t k = 0; k < r.body(); ++k)
        body[at + sizeof w + k] = std::uint8_t(k * 7 + i);
      ++slots;
    }
  }
  FrameHeader h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.type = type;
  h.conn = conn;
  h.flags = flags;
  h.src_host = src;
  h.dst_host = dst;
  // Incarnations are 64-bit (nanoseconds since the epoch, incarnation.hpp):
  // both halves non-zero, so the fuzzer starts from real-looking ones.
  h.boot = 0x1800'0000'0000'1000ull + src;
  h.dst_boot = seq % 2 ? 0x1800'0000'0000'2000ull + dst : 0;
  h.seq = seq;
  h.ack = seq ? seq - 1 : 7;
  h.credit = seq + 32;
  h.records = std::uint16_t(recs.size());
  h.length = std::uint16_t(body.size());
  h.coalesced = slots;
  Bytes out(sizeof h + body.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!body.empty()) std::memcpy(out.data() + sizeof h, body.data(), body.size());
  return out;
}

Bytes wrap(const Bytes& udp_payload, std::uint16_t src) {
  Bytes f(kL2L4Bytes + udp_payload.size());
  std::memcpy(f.data() + kL2L4Bytes, udp_payload.data(), udp_payload.size());
  write_l2l4(f.data(), kMacs[src], kMacs[kSelfIndex], host_endpoint(src), host_endpoint(kSelfIndex),
             udp_payload.size());
  return f;
}

Bytes with_sel(const FrameSel& s, const Bytes& rest) {
  Bytes b(kFrameSelBytes);
  encode_frame_sel(s, b.data());
  b.insert(b.end(), rest.begin(), rest.end());
  return b;
}

std::uint32_t index_of(const std::uint32_t* table, std::uint32_t v) {
  for (std::uint32_t i = 0; i < 8; ++i)
    if (table[i] == v) return i;
  std::abort();
}

// One frame seed in every mode; checks the raw frame parses.
void frame_seed(const std::string& name, std::uint16_t src, std::uint32_t self_host,
                std::uint32_t connections, const Bytes& udp_payload) {
  const Bytes f = wrap(udp_payload, src);
  Endpoint hosts[kHostCount];
  for (std::size_t i = 0; i < kHostCount; ++i) hosts[i] = host_endpoint(i);
  ParsedFrame pf;
  const Drop d = parse_frame(f.data(), f.size(), host_endpoint(kSelfIndex), hosts, kHostCount,
                             self_host, connections, nullptr, &pf);
  if (d != Drop::kNone) {
    std::fprintf(stderr, "make_seeds: seed %s does not parse: %s\n", name.c_str(), drop_name(d));
    std::exit(1);
  }
  FrameSel s{kRaw, index_of(kSelfHosts, self_host), index_of(kConnections, connections), src, 0};
  put("frame", name + "-raw", with_sel(s, f));
  // Checksums spoiled: kFixSums repairs them.
  Bytes spoiled = f;
  spoiled[kEthBytes + 10] ^= 0x5a;
  spoiled[kEthBytes + kIpBytes + 6] ^= 0x33;
  s.mode = kFixSums;
  put("frame", name + "-fixsums", with_sel(s, spoiled));
  s.mode = kRebuild;
  put("frame", name + "-rebuild", with_sel(s, udp_payload));
  s.mode = kRebuildTrim;
  s.trim = 32 | 6;  // six bytes of Ethernet padding
  put("frame", name + "-padded", with_sel(s, udp_payload));
}

void frame_seeds() {
  const std::uint16_t self = kSelfIndex;
  const Rec req{kRecRequest, 40, 0}, req_over{kRecRequest, 112, 300}, req_odd{kRecRequest, 13, 0};
  const Rec resp{kRecResponse, 24, 0}, resp_over{kRecResponse, 104, 1024};
  const Rec attach{kRecAttach, sizeof(AttachAnnounce), 0}, detach{kRecDetach, sizeof(AttachAnnounce), 0};

  frame_seed("ack", 0, self, 1, payload(0, self, 0, kAckOnly, 0, {}));
  frame_seed("data-empty", 2, self, 1, payload(2, self, 0, kData, 1, {}));
  frame_seed("request", 0, self, 1, payload(0, self, 0, kData, 1, {req}));
  frame_seed("request-overflow", 3, self, 2, payload(3, self, 1, kData, 9, {req_over}, kFlagRenew));
  frame_seed("request-odd", 0, self, 1, payload(0, self, 0, kData, 2, {req_odd}));
  frame_seed("response", 2, self, 1, payload(2, self, 0, kData, 3, {resp}));
  frame_seed("response-overflow", 0, self, 4, payload(0, self, 3, kData, 4, {resp_over}));
  frame_seed("attach", 0, self, 1, payload(0, self, 0, kData, 1, {attach}));
  frame_seed("detach", 3, self, 1, payload(3, self, 0, kData, 5, {detach}));
  frame_seed("mixed", 0, self, 1,
             payload(0, self, 0, kData, 6, {req, resp, attach, req_odd, detach, req_over}));
  frame_seed("attaches", 2, self, 1, payload(2, self, 0, kData, 1, std::vector<Rec>(20, attach)));
  // Exactly kMaxRecordBytes of records: the largest frame.
  const std::uint16_t rest = std::uint16_t(kMaxRecordBytes - 2 * sizeof(WireRecord) - 1136);
  frame_seed("full", 0, self, 1, payload(0, self, 0, kData, 7, {{kRecRequest, 112, 1024}, {kRecResponse, rest, 0}}));
  // Fragments of a 4096-byte slot: a first one filling its frame, a middle
  // one, and the last one sharing its frame with a whole record.
  const std::uint16_t fr = std::uint16_t(kMaxFragmentBytes);
  frame_seed("fragment-first", 0, self, 1,
             payload(0, self, 0, kData, 8, {{kRecRequest, 112, 3984, kFragment | kFragMore, fr, 0}}));
  frame_seed("fragment-middle", 2, self, 1,
             payload(2, self, 0, kData, 9, {{kRecResponse, 104, 3992, kFragment | kFragMore, 8, fr}}));
  frame_seed("fragment-last", 0, self, 1,
             payload(0, self, 0, kData, 10,
                     {{kRecRequest, 112, 3984, kFragment, std::uint16_t(4096 - 2 * fr), 2u * fr}, req}));
  // Another host index and connection count (self_host 3 on host 1's
  // address, connections 8) and one outside the table.
  frame_seed("self3", 1, 3, 8, payload(1, 3, 7, kData, 1, {req, resp}));
  frame_seed("self-ffff", 2, 0xffff, 255, payload(2, 0xffff, 254, kData, 1, {attach}));
  // A frame with the UDP checksum off (0).
  Bytes f = wrap(payload(0, self, 0, kData, 1, {req}), 0);
  f[kEthBytes + kIpBytes + 6] = f[kEthBytes + kIpBytes + 7] = 0;
  put("frame", "udp-nocsum-raw", with_sel({kRaw, index_of(kSelfHosts, self), 0, 0, 0}, f));
}

Bytes raw_attach(std::size_t msg_len, std::uint32_t host_count, std::uint32_t host_index, bool sealed,
                 int fds, std::uint64_t segment_size, const void* msg, const abi::SegmentHeader& hdr) {
  Bytes b{kAttachRaw, std::uint8_t(msg_len), std::uint8_t(host_count - 1), std::uint8_t(host_index),
          std::uint8_t((sealed ? 1 : 0) | (fds & 7) << 1)};
  b.resize(kAttachRawFixed + msg_len + sizeof hdr);
  std::memcpy(b.data() + 5, &segment_size, 8);
  std::memcpy(b.data() + kAttachRawFixed, msg, msg_len);
  std::memcpy(b.data() + kAttachRawFixed + msg_len, &hdr, sizeof hdr);
  return b;
}

void attach_seeds() {
  struct Rack {
    std::uint32_t total, hosts, index;
  };
  const Rack racks[] = {{1, 1, 0}, {3, 3, 1}, {8, 4, 3}, {7, 3, 2}, {100, 64, 63}, {4096, 1, 0}, {4096, 256, 255}};
  for (const Rack& r : racks) {
    ValidAttach v;
    if (!valid_attach(r.total, r.hosts, r.index, &v)) std::abort();
    const std::string tag = std::to_string(r.total) + "-" + std::to_string(r.hosts) + "-" + std::to_string(r.index);
    put("attach", "raw-valid-" + tag, raw_attach(sizeof v.req, r.hosts, r.index, true, 2, v.segment_size, &v.req, v.hdr));
    // Refused: one descriptor; unsealed; a short message.
    put("attach", "raw-onefd-" + tag, raw_attach(sizeof v.req, r.hosts, r.index, true, 1, v.segment_size, &v.req, v.hdr));
    put("attach", "raw-unsealed-" + tag, raw_attach(sizeof v.req, r.hosts, r.index, false, 2, v.segment_size, &v.req, v.hdr));
    put("attach", "raw-short-" + tag, raw_attach(96, r.hosts, r.index, true, 2, v.segment_size, &v.req, v.hdr));
    // Mutate mode: every field once, with a value that differs from valid.
    for (std::uint32_t fi = 0; fi < kFieldCount; ++fi) {
      const std::uint16_t t16 = std::uint16_t(r.total - 1);
      Bytes b{kAttachMutate, std::uint8_t(t16), std::uint8_t(t16 >> 8), std::uint8_t(r.hosts - 1),
              std::uint8_t(r.index), std::uint8_t(fi), std::uint8_t(kFieldNone)};
      for (int k = 0; k < 8; ++k) b.push_back(std::uint8_t(0x40 + k));
      put("attach", "mutate-" + tag + "-f" + std::to_string(fi), b);
    }
  }
}


// One fuzz_cp seed: the selector byte of M, then m's encoding.
template <class M>
void cp_seed(const std::string& name, const M& m) {
  const std::string body = cp::encode(m);
  M back;
  if (!cp::decode(body, back) || cp::encode(back) != body) {
    std::fprintf(stderr, "make_seeds: cp seed %s does not decode\n", name.c_str());
    std::exit(1);
  }
  Bytes b{cp_selector<M>()};
  b.insert(b.end(), body.begin(), body.end());
  put("cp", name, b);
}

cp::Nonce fill(std::uint8_t k) {
  cp::Nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = std::uint8_t(k + 13 * i);
  return n;
}

void cp_seeds() {
  const std::string run = "r-0001-2-5eed";
  // Every message default-constructed (empty strings and lists), then typical
  // ones.
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (cp_seed(std::string(kCpMessageNames[I]) + "-empty", std::tuple_element_t<I, CpMessages>{}), ...);
  }(std::make_index_sequence<kCpMessages>{});
  cp_seed("hello", cp::Hello{cp::kVersion, 2, 0x0123456789abcdefull, fill(1)});
  cp_seed("bulkhello", cp::BulkHello{cp::kVersion, 1, 0x0123456789abcdefull, fill(5), "5eed0123456789ab"});
  cp_seed("bulkhello-longest", cp::BulkHello{cp::kVersion, 0, ~0ull, fill(6), std::string(cp::kMaxRunId, 'f')});
  cp_seed("challenge", cp::Challenge{3, fill(2), fill(3)});
  cp_seed("proof", cp::Proof{fill(4)});
  cp_seed("heartbeat", cp::Heartbeat{77, 1, 2, 1});
  cp_seed("heartbeat-max", cp::Heartbeat{~0ull, 255, ~0u, ~0u});
  cp_seed("prepare", cp::Prepare{run, 0, "/opt/app/bin/echo", std::string(64, 'a'),
                                 {"--size", "4096", "", "x y"}, "/home/user", 16});
  cp_seed("prepared-ok", cp::Prepared{run, 1, true, ""});
  cp_seed("prepared-error", cp::Prepared{run, 2, false, "sha256 differs: /opt/app/bin/echo"});
  cp_seed("runref", cp::RunRef{run});
  std::string data;
  for (int i = 0; i < 300; ++i) data += char(i);
  cp_seed("output", cp::Output{run, 1, 1, "hello from host 1\n"});
  cp_seed("output-bin", cp::Output{run, 2, 2, data});
  cp_seed("exited", cp::Exited{run, 1, 4242, 0, 0, false, ""});
  cp_seed("exited-signal", cp::Exited{run, 2, 4243, -1, 9, true, ""});
  cp_seed("exited-error", cp::Exited{run, 3, 0, -1, 0, false, "exec: No such file or directory"});
  cp_seed("stop", cp::Stop{run, "host 2 exited"});
  cp_seed("ctlrun", cp::CtlRun{"/opt/app/bin/echo", {"-n", "3"}, "/tmp", 0});
  cp_seed("ctlrun-many", cp::CtlRun{"/bin/true", std::vector<std::string>(40, "arg"), "/", 4096});
  cp::StatusReply st;
  st.self = 1;
  st.hosts = {{0, "h0", "up", 120, 1, 0, 1}, {1, "h1", "self", -1, 1, 3, 1}, {2, "h2", "down", -1, 3, 7, 0}};
  st.runs = {{run, "/opt/app/bin/echo", 16, 0, "running", 4242}, {"r2", "/bin/x", 0, 2, "preparing", 0}};
  cp_seed("statusreply", st);
  cp_seed("ctloutput", cp::CtlOutput{2, 2, "error: out of slots\n"});
  cp_seed("ctldone", cp::CtlDone{0, ""});
  cp_seed("ctldone-fail", cp::CtlDone{137, "host 2 lost"});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  g_dir = argv[1];
  std::filesystem::create_directories(g_dir / "frame");
  std::filesystem::create_directories(g_dir / "attach");
  std::filesystem::create_directories(g_dir / "cp");
  frame_seeds();
  attach_seeds();
  cp_seeds();
  std::printf("make_seeds: %d seeds in %s\n", g_written, g_dir.c_str());
  return 0;
}
