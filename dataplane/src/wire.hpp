// The wire format between dataplanes: UDP/IPv4 frames (so tshark can read
// them and routers can carry them). Structs, constants and the parser; the
// format is also described in dataplane/README.md, which must stay in step.
//
//   Ethernet (14) | IPv4 (20, no options) | UDP (8) | FrameHeader (48) | records | nonce (8) | tag (16)
//
// Every frame belongs to one connection: (source host, destination host,
// connection index). Each direction of a connection is a reliable, in-order
// stream of data frames numbered from 1 (`seq`, wrapping at 2^32, compared
// as serial numbers; 0 comes after 2^32 - 1); `ack` acknowledges, for the
// reverse direction, every frame up to and including that number; `credit`
// is the highest seq the frame's receiver may send (FLOCK credits, papers
// 002 §3.4.1). `boot` names the sender's incarnation (incarnation.hpp: 64
// bits, never reused, compared as plain unsigned numbers): a larger value
// resets the connection, a smaller one is a frame from a previous life.
// Ack-only frames carry seq 0 and no records.
//
// A data frame carries `records` records back to back, each a WireRecord
// followed by `primary_len + overflow_len` payload bytes, padded to 8:
//   kRecRequest   a request slot's records: client (on the source host) ->
//                 trustee (on the destination host), slot seq `slot_seq`
//   kRecResponse  the answer to it, trustee -> client
//   kRecAttach    an application instance attached on the source host;
//                 payload: AttachAnnounce
//   kRecDetach    it detached (slot_flags kDetachGraceful: after finishing
//                 its run; else it died); payload: AttachAnnounce
//
// Fragments (version 2). A slot record whose payload does not fit one frame
// (more than kMaxFragmentBytes) travels as consecutive fragment records on
// its one connection: each has kFragment in `frag`, the slot's whole
// `primary_len`/`overflow_len`/count/ids/seq/flags/app, `frag_len` payload
// bytes from byte `frag_offset` of the slot payload, and kFragMore on every
// fragment but the last. A connection delivers records in order and the
// sender enqueues a slot's fragments contiguously, so the receiver
// reassembles in one buffer per connection (Reassembly in connection.hpp);
// anything else (a gap, an overlap, other ids, a whole record in between)
// is a protocol error. A record's body is `frag_len` bytes for a fragment,
// `primary_len + overflow_len` otherwise; `frag_len` and `frag_offset` are 0
// on whole records.
//
// All integers are little-endian (the byte order of every host we run on);
// IPv4/UDP headers are in network order as usual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gossamer::dataplane::wire {

inline constexpr std::uint32_t kMagic = 0x464d5347;  // "GSMF"
// 2: fragment records; 3: active connections; 4: tag trailer; 5: 64-bit incarnations;
// 6: the announce's owner; 7: a GMAC trailer (nonce and tag) for the SipHash tag
inline constexpr std::uint8_t kVersion = 7;
inline constexpr std::size_t kEthBytes = 14, kIpBytes = 20, kUdpBytes = 8;
inline constexpr std::size_t kL2L4Bytes = kEthBytes + kIpBytes + kUdpBytes;
// The MTU (IP packet bytes) is dataplane.mtu, the same on every host: frames
// are cut to it. The constants without a name for the MTU are those of the
// default, 1500; kMaxMtu bounds the setting (and every buffer for a frame).
inline constexpr std::size_t kMtu = 1500;                     // the default
inline constexpr std::size_t kMaxMtu = 9216;                  // the largest dataplane.mtu
inline constexpr std::size_t kMinMtu = 576;                   // the smallest
inline constexpr std::size_t kMaxFrame = kEthBytes + kMtu;    // 1514
inline constexpr std::size_t kMaxFrameAnyMtu = kEthBytes + kMaxMtu;
inline constexpr std::size_t kMaxUdpPayload = kMtu - kIpBytes - kUdpBytes;

enum FrameType : std::uint8_t { kData = 1, kAckOnly = 2 };
inline constexpr std::uint8_t kFlagRenew = 1;   // sender asks for more credit
// The frame's sender, as the receiver of the reverse direction, grants
// credit on this connection (FLOCK's active QP, papers 002 §3.4.1). A state,
// carried by every frame: without it, the frame's receiver puts no new
// slots on the connection (a declined renewal, or never activated).
inline constexpr std::uint8_t kFlagActive = 2;

struct FrameHeader {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t type;        // FrameType
  std::uint8_t conn;        // connection index within the host pair
  std::uint8_t flags;       // kFlagRenew, kFlagActive
  std::uint16_t src_host;
  std::uint16_t dst_host;
  std::uint32_t seq;        // data: this frame's number (from 1, wrapping); ack-only: 0
  std::uint64_t boot;       // sender incarnation
  std::uint64_t dst_boot;   // receiver incarnation this frame is for; 0: not known yet
  std::uint32_t ack;        // every frame <= ack of the reverse direction arrived
  std::uint32_t credit;     // the receiver of this frame may send up to this seq
  std::uint16_t records;
  std::uint16_t length;     // bytes of records after this header
  std::uint16_t coalesced;  // requests (slot records) in this frame, for stats
  std::uint16_t coalescing; // with kFlagRenew: median slots per data frame since the last renewal
};
// Every field at an offset that is a multiple of its size, and no padding.
// The header follows 42 bytes of Ethernet/IPv4/UDP, so it is copied out of
// the frame (memcpy), never read in place.
static_assert(sizeof(FrameHeader) == 48);
static_assert(offsetof(FrameHeader, seq) == 12 && offsetof(FrameHeader, boot) == 16 &&
              offsetof(FrameHeader, dst_boot) == 24 && offsetof(FrameHeader, ack) == 32 &&
              offsetof(FrameHeader, coalescing) == 46);
static_assert(std::is_trivially_copyable_v<FrameHeader>);

// The trailer that follows the records when frames are authenticated
// (auth.hpp): an 8-byte nonce and a 16-byte tag. Records leave room for it
// either way, so both settings cut slots alike. 24 bytes keep a frame of
// full records at the MTU (records are cut at multiples of 8) and a full
// slot of 4 KiB in 3 fragments at 1500.
inline constexpr std::size_t kTagBytes = 24;
// Record bytes of one frame at MTU `mtu` (a multiple of 8).
constexpr std::size_t max_record_bytes(std::size_t mtu) {
  return (mtu - kIpBytes - kUdpBytes - sizeof(FrameHeader) - kTagBytes) & ~std::size_t(7);
}
inline constexpr std::size_t kMaxRecordBytes = max_record_bytes(kMtu);  // 1400
static_assert(kMaxRecordBytes == 1400 && kMaxRecordBytes % 8 == 0);

enum RecordKind : std::uint8_t { kRecRequest = 1, kRecResponse = 2, kRecAttach = 3, kRecDetach = 4 };

struct WireRecord {
  std::uint8_t kind;        // RecordKind
  std::uint8_t frag;        // kFragment | kFragMore, or 0 for a whole record
  std::uint16_t count;      // slot header count
  std::uint16_t client;     // global thread ids
  std::uint16_t trustee;
  std::uint32_t slot_seq;
  std::uint16_t primary_len;   // of the whole slot, also in fragments
  std::uint16_t overflow_len;
  std::uint16_t slot_flags;
  std::uint16_t frag_len;      // fragment: payload bytes in this record; else 0
  std::uint32_t frag_offset;   // fragment: where they go in the slot payload; else 0
  std::uint64_t app;        // the run key of the application
};
static_assert(sizeof(WireRecord) == 32);
static_assert(std::is_trivially_copyable_v<WireRecord>);

// WireRecord::frag bits.
inline constexpr std::uint8_t kFragment = 1;  // part of a slot's payload
inline constexpr std::uint8_t kFragMore = 2;  // more fragments of the slot follow
inline constexpr std::uint8_t kFragMask = kFragment | kFragMore;

// WireRecord::slot_flags of a kRecDetach: the instance finished its run.
inline constexpr std::uint16_t kDetachGraceful = 1;

struct AttachAnnounce {
  std::uint64_t build_hash;     // hash of the executable's build-id
  std::uint32_t total_threads;
  std::uint32_t instance;       // random per attach, names this instance
  std::uint32_t owner;          // the uid a run without a token is bound to (app.hpp may_join)
  std::uint32_t reserved;       // 0
};
static_assert(sizeof(AttachAnnounce) == 24);

constexpr std::size_t pad8(std::size_t n) { return (n + 7) & ~std::size_t(7); }

// Largest payload of one record at MTU `mtu` (a fragment fills a frame
// alone). A receiver takes fragments up to the largest MTU's: the frame's
// length is checked against its own MTU before (Drop::kTooLong).
constexpr std::size_t max_fragment_bytes(std::size_t mtu) { return max_record_bytes(mtu) - sizeof(WireRecord); }
inline constexpr std::size_t kMaxFragmentBytes = max_fragment_bytes(kMtu);  // 1368
static_assert(kMaxFragmentBytes == 1368 && kMaxFragmentBytes % 8 == 0);
static_assert(max_record_bytes(kMaxMtu) < 0xffff && max_record_bytes(kMinMtu) >= 256);

// Payload bytes that follow a record (already validated by parse_frame).
constexpr std::size_t record_body(const WireRecord& r) {
  return (r.frag & kFragment) ? r.frag_len : std::size_t(r.primary_len) + r.overflow_len;
}

// Why a frame was dropped. Every value is a counter in the dataplane's stats.
enum class Drop : std::uint8_t {
  kNone = 0,
  kTooShort,        // shorter than the headers it claims
  kNotIpv4,         // ethertype
  kIpHeader,        // version, IHL (options), total length, fragment
  kIpChecksum,
  kNotUdp,
  kNotForUs,        // destination address or port
  kUdpLength,
  kUdpChecksum,
  kBadMagic,
  kBadVersion,
  kBadType,
  kBadHost,         // source host unknown or not matching the source address
  kBadConn,         // connection index out of range
  kBadRecord,       // a record's kind, lengths or fragment fields are wrong
  kBadMac,          // the tag does not verify (auth.hpp): forged, corrupted, or another secret
  kTooLong,         // longer than this host's MTU allows (the hosts disagree on dataplane.mtu),
                    // or not one contiguous buffer
  kCount
};
const char* drop_name(Drop d);

// What the parser returns for a frame that passed every check. Pointers
// point into the frame buffer.
struct ParsedFrame {
  FrameHeader hdr;
  std::uint32_t src_ip;            // network order
  const std::uint8_t* records;     // hdr.length bytes
  const std::uint8_t* src_mac;
};

struct Endpoint {
  std::uint32_t ip;                // network order
  std::uint16_t port;              // host order
};

// Checks a frame's tag: `payload` is the UDP payload up to the tag (`len`
// bytes: header and records), `h` its header (src_host already in range).
class FrameVerifier {
 public:
  virtual bool verify(const FrameHeader& h, const std::uint8_t* payload, std::size_t len,
                      const std::uint8_t* tag) = 0;

 protected:
  ~FrameVerifier() = default;
};

// The frame's bytes are untrusted. Checks every header, that the source is
// rack host `hdr.src_host` (its address in `hosts[src_host]`, of
// `host_count`), then — with a `verifier` — the tag after the records,
// before any record is looked at, then every record's lengths and kinds.
// Never reads beyond `len`. Without a verifier, frames carry no tag.
Drop parse_frame(const std::uint8_t* frame, std::size_t len, const Endpoint& self,
                 const Endpoint* hosts, std::size_t host_count, std::uint32_t self_host,
                 std::uint32_t connections, FrameVerifier* verifier, ParsedFrame* out);

// Checks `count` records back to back in `len` untrusted bytes (what
// parse_frame checks of a frame's records; the verbs transport's ring
// messages too): kinds, lengths, fragment fields, and that they fill `len`
// exactly. Drop::kNone or Drop::kBadRecord.
Drop check_records(const std::uint8_t* records, std::size_t len, std::uint32_t count);

// Walks the records of a parsed frame (already validated by parse_frame).
struct RecordView {
  WireRecord rec;
  const std::uint8_t* payload;     // record_body(rec) bytes
};
class RecordCursor {
 public:
  RecordCursor(const std::uint8_t* p, std::size_t len) : p_(p), end_(p + len) {}
  bool next(RecordView* out);
 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

// Writes Ethernet/IPv4/UDP headers for `payload_len` bytes already placed
// after them, with the IPv4 checksum and, unless `udp_checksum` is false,
// the UDP checksum (0 means none). The transport leaves it out of
// authenticated frames: their tag covers the payload the checksum would (the
// addresses and ports are checked against the configuration, the IPv4
// header keeps its checksum), and summing both ends of a 9000-byte frame
// cost about as much as the tag. A frame corrupted in flight then counts as
// bad_mac.
void write_l2l4(std::uint8_t* frame, const std::uint8_t src_mac[6], const std::uint8_t dst_mac[6],
                const Endpoint& src, const Endpoint& dst, std::size_t payload_len, bool udp_checksum = true);

}  // namespace gossamer::dataplane::wire
