// The attach contract between an application (libgossamer) and its host's
// gossamer-dataplane: the shared-memory segment the application hands over
// (a sealed memfd) and the messages on the dataplane's unix socket. Structs
// only, no logic; offsets, never pointers (STYLE.md "Interfaces between
// processes"). Included by both sides; neither includes the other's private
// headers.
//
// The dataplane treats everything in the segment as untrusted: it copies a
// value out, then validates it, and recomputes every offset from the thread
// counts instead of following the header's.
//
// Segment layout (all offsets from the segment start, 4 KiB aligned):
//
//   SegmentHeader                                   at 0, one page
//   request primary blocks   [lane][trustee][client]  K*T*T * kPrimaryBytes
//   response primary blocks  [lane][client][trustee]  K*T*T * kPrimaryBytes
//   request overflow blocks  [lane][trustee][client]  K*T*T * kOverflowBytes
//   response overflow blocks [lane][client][trustee]  K*T*T * kOverflowBytes
//   wake words               [local thread]         L * kWakeStride
//   doorbell rings           [local thread]         L * doorbell_stride
//   thread counters          [local thread]         L * sizeof(ThreadCounters)
//
// T is the rack's thread count (global thread ids), L this host's share, K
// the lanes (kLanes; 1 for a single process's square, segment_layout). A
// request slot (trustee r, client c) with c local and r remote is written by
// client c and read by the dataplane; with c remote and r local it is written
// by the dataplane and served by trustee r. Response slots mirror that.
// Thread counters are written by their thread and only read by the
// dataplane, which copies them into its metrics file (abi/metrics.hpp).
//
// Lanes: a pair on two hosts may have kLanes batches in flight, so that
// the next batches cross while the trustee serves the one before, and a
// request body larger than a slot (a piece or two a batch) crosses in one
// round trip up to kLanes slots (a response larger than a slot still
// comes a slot per round trip: the client fetches each rest). Batch `seq`
// uses the request and response slots of lane `seq % kLanes`; the trustee
// serves them in seq order whichever arrives first. A pair on one host
// uses lane 0 only, one batch at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <gossamer/abi/counters.hpp>
#include <gossamer/abi/slots.hpp>

namespace gossamer::abi {

inline constexpr std::uint64_t kSegmentMagic = 0x31524d4153534f47ull;  // "GOSSAMR1"
inline constexpr std::uint32_t kAttachVersion = 5;  // 2: thread counters; 3: run id and token; 4: lanes; 5: 8 lanes
// Slot pairs per (client, trustee) pair; a power of two (seqs wrap at 2^32).
// 2 until 2026-11-29: a thread that computes between its loop's passes
// moved 32 KiB a round trip to another host (tools/apps/sssp/SCALING.md,
// "Eight lanes").
inline constexpr std::uint32_t kLanes = 8;
static_assert((kLanes & (kLanes - 1)) == 0);
inline constexpr std::uint32_t kMaxRackThreads = 4096;
inline constexpr std::uint32_t kMaxRackHosts = 64;
inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kWakeStride = 64;  // one futex word per cache line

// Index of a slot block in its region: [lane][major][minor], T x T per lane
// (requests: major trustee, minor client; responses the other way round).
// `lane` may be a batch's seq: seq % kLanes names the lane.
constexpr std::size_t slot_cell(std::uint32_t total, std::uint32_t lane, std::uint32_t major, std::uint32_t minor) {
  return (std::size_t(lane % kLanes) * total + major) * total + minor;
}

// Doorbell ring entries. A client rings after publishing a request slot to a
// remote trustee; a trustee rings after answering a remote client.
inline constexpr std::uint32_t kDoorbellResponse = 0x8000'0000u;  // else: request
inline constexpr std::uint32_t kDoorbellPeerMask = 0x0000'ffffu;  // global thread id

// One single-producer (the application thread), single-consumer (the
// dataplane) ring. `head` and `tail` are free-running counters.
struct DoorbellRing {
  std::uint32_t head;  // written by the application thread (release)
  std::uint8_t pad0[60];
  std::uint32_t tail;  // written by the dataplane (release)
  std::uint8_t pad1[60];
  // std::uint32_t entries[doorbell_entries] follow
};
static_assert(sizeof(DoorbellRing) == 128);
static_assert(offsetof(DoorbellRing, tail) == 64);

// Flags in ResponseSlotHeader::flags for slots that crossed hosts.
inline constexpr std::uint16_t kResponseMore = 1;  // the trustee holds more responses

// ResponseHeader::status bit: this record is a piece of a response; the next
// record continues it (responses larger than a slot cross hosts in pieces).
inline constexpr std::uint32_t kStatusPiece = 0x8000'0000u;
// ResponseHeader::status bit: the record's body is a BulkRef (slots.hpp);
// the response itself comes over the run's TCP connection. Only the last
// record of a response batch may have it.
inline constexpr std::uint32_t kStatusBulk = 0x4000'0000u;

// One application thread's counters (issue 6; monitoring/README.md): the
// rows of GOSSAMER_THREAD_COUNTERS (counters.hpp), in that order. The thread
// stores each field (relaxed, whole words) once per loop iteration; nothing
// else writes them. Each exported series is one word the thread keeps
// monotonic (a reader never subtracts two words it loaded at different
// times); fibers_ready is a gauge.
inline constexpr std::size_t kThreadCounterFields = 0 GOSSAMER_THREAD_COUNTERS(GOSSAMER_COUNTER_ONE);
struct ThreadCounters {
  GOSSAMER_THREAD_COUNTERS(GOSSAMER_COUNTER_FIELD)
  std::uint64_t reserved[16 - kThreadCounterFields];
};
static_assert(sizeof(ThreadCounters) == 128);
static_assert(offsetof(ThreadCounters, busy_cycles) == 0);
static_assert(offsetof(ThreadCounters, fibers_ready) == 80);
static_assert(offsetof(ThreadCounters, tcp_bytes_received) == 8 * (kThreadCounterFields - 1));
static_assert(std::is_trivially_copyable_v<ThreadCounters>);

struct SegmentHeader {
  std::uint64_t magic;               // kSegmentMagic
  std::uint32_t attach_version;      // kAttachVersion
  std::uint32_t slot_layout;         // kLayoutVersion
  std::uint64_t segment_bytes;
  std::uint32_t total_threads;       // T
  std::uint32_t first_thread;        // global id of this host's thread 0
  std::uint32_t local_threads;       // L
  std::uint32_t host_index;
  std::uint32_t host_count;
  std::uint32_t doorbell_entries;    // power of two, >= 2 * kLanes * T
  std::uint64_t request_primary;     // offsets, see above
  std::uint64_t response_primary;
  std::uint64_t request_overflow;
  std::uint64_t response_overflow;
  std::uint64_t wake_words;
  std::uint64_t doorbells;
  std::uint64_t doorbell_stride;
  // The dataplane sets this (seq_cst) before it blocks on its eventfd and
  // clears it when it wakes; an application thread that rang a doorbell and
  // sees it set writes the eventfd (Dekker, as for the runtime's threads).
  std::uint32_t dataplane_sleeping;
  std::uint32_t reserved0;
  std::uint64_t counters;            // offset of the thread counters
  std::uint8_t reserved[136];
};
static_assert(sizeof(SegmentHeader) == 256);
static_assert(offsetof(SegmentHeader, counters) == 112);
static_assert(offsetof(SegmentHeader, total_threads) == 24);
static_assert(offsetof(SegmentHeader, request_primary) == 48);
static_assert(offsetof(SegmentHeader, dataplane_sleeping) == 104);
static_assert(std::is_trivially_copyable_v<SegmentHeader>);

// The layout every reader recomputes from (T, L); returns false when the
// counts are out of range.
struct SegmentLayout {
  std::uint64_t request_primary, response_primary, request_overflow, response_overflow;
  std::uint64_t wake_words, doorbells, doorbell_stride, counters, bytes;
  std::uint32_t doorbell_entries;
};

constexpr std::uint64_t page_round(std::uint64_t n) { return (n + kPage - 1) & ~std::uint64_t(kPage - 1); }

// `lanes`: kLanes for a rack's segment; 1 for the square of a process
// that is alone (every pair on one host uses lane 0 only).
constexpr bool segment_layout(std::uint32_t total, std::uint32_t local, SegmentLayout* out,
                              std::uint32_t lanes = kLanes) {
  if (total == 0 || total > kMaxRackThreads || local == 0 || local > total) return false;
  if (lanes != 1 && lanes != kLanes) return false;
  // Every doorbell a thread may owe at once: a request and a response per
  // lane of each pair it is in.
  std::uint32_t entries = 2;
  while (entries < 2 * kLanes * total) entries *= 2;
  std::uint64_t cells = std::uint64_t(lanes) * total * total;
  SegmentLayout l{};
  l.request_primary = kPage;
  l.response_primary = l.request_primary + page_round(cells * kPrimaryBytes);
  l.request_overflow = l.response_primary + page_round(cells * kPrimaryBytes);
  l.response_overflow = l.request_overflow + page_round(cells * kOverflowBytes);
  l.wake_words = l.response_overflow + page_round(cells * kOverflowBytes);
  l.doorbells = l.wake_words + page_round(std::uint64_t(local) * kWakeStride);
  l.doorbell_entries = entries;
  l.doorbell_stride = (sizeof(DoorbellRing) + entries * 4 + 63) & ~std::uint64_t(63);
  l.counters = l.doorbells + page_round(local * l.doorbell_stride);
  l.bytes = l.counters + page_round(std::uint64_t(local) * sizeof(ThreadCounters));
  *out = l;
  return true;
}

// The header an application writes at the start of its segment: the layout
// for (total, local) and where the host's threads start. The dataplane
// recomputes and compares every field (check_attach).
constexpr SegmentHeader segment_header(const SegmentLayout& l, std::uint32_t total, std::uint32_t first,
                                       std::uint32_t local, std::uint32_t host_index, std::uint32_t host_count) {
  SegmentHeader h{};
  h.magic = kSegmentMagic;
  h.attach_version = kAttachVersion;
  h.slot_layout = kLayoutVersion;
  h.segment_bytes = l.bytes;
  h.total_threads = total;
  h.first_thread = first;
  h.local_threads = local;
  h.host_index = host_index;
  h.host_count = host_count;
  h.doorbell_entries = l.doorbell_entries;
  h.request_primary = l.request_primary;
  h.response_primary = l.response_primary;
  h.request_overflow = l.request_overflow;
  h.response_overflow = l.response_overflow;
  h.wake_words = l.wake_words;
  h.doorbells = l.doorbells;
  h.doorbell_stride = l.doorbell_stride;
  h.counters = l.counters;
  return h;
}

// ---- the unix socket (SOCK_SEQPACKET): one struct per message ---------------

enum MessageType : std::uint32_t {
  kMsgAttach = 1,       // app -> dataplane, with the memfd and an eventfd (SCM_RIGHTS)
  kMsgAttachOk = 2,     // dataplane -> app: attached; wait for kMsgStart
  kMsgRefused = 3,      // dataplane -> app: `text` says why; the socket closes
  kMsgStart = 4,        // dataplane -> app: every host's instance is attached: run
  kMsgPeerLost = 5,     // dataplane -> app: host `host` lost its instance
  kMsgDetach = 6,       // app -> dataplane: finished; drain my doorbells
  kMsgDetached = 7,     // dataplane -> app: drained; the app may unmap and exit
};

inline constexpr std::uint32_t kMaxBuildId = 64;

// A run is named by GOSSAMER_RUN_ID (at most kMaxRunId bytes of printable
// ASCII), else by the executable's build-id. Run ids that start with
// kIssuedRunPrefix are gossamerd's (`gossamerctl run`): the dataplane admits
// an instance to such a run only with the run token gossamerd gave it
// (GOSSAMER_RUN_TOKEN: kRunTokenBytes as hex digits, passed on as they are),
// and never one without a token; a run named any other way has no token and
// is bound to the uid of its first instance (dataplane/README.md
// "Attaching", SECURITY.md "Runs and users").
inline constexpr std::size_t kMaxRunId = 64;
inline constexpr char kIssuedRunPrefix[] = "gossamerd-";
inline constexpr std::size_t kRunTokenBytes = 32;
inline constexpr char kRunTokenEnv[] = "GOSSAMER_RUN_TOKEN";

struct AttachRequest {
  std::uint32_t type;            // kMsgAttach
  std::uint32_t attach_version;  // kAttachVersion
  std::uint32_t slot_layout;     // kLayoutVersion
  std::uint32_t build_id_len;    // bytes of build_id used
  std::uint8_t build_id[kMaxBuildId];  // GNU build-id of the executable
  char run_id[kMaxRunId];        // GOSSAMER_RUN_ID, NUL-padded; all NUL = none
  char run_token[2 * kRunTokenBytes];  // GOSSAMER_RUN_TOKEN, NUL-padded; all NUL = none
  std::uint32_t total_threads;
  std::uint32_t pid;
  std::uint64_t segment_bytes;
};
static_assert(sizeof(AttachRequest) == 224);
static_assert(offsetof(AttachRequest, run_id) == 80);
static_assert(offsetof(AttachRequest, run_token) == 144);
static_assert(offsetof(AttachRequest, total_threads) == 208);
static_assert(std::is_trivially_copyable_v<AttachRequest>);

struct DataplaneMessage {
  std::uint32_t type;            // kMsgAttachOk .. kMsgDetached
  std::uint32_t host;            // kMsgPeerLost: the host; else this host's index
  std::uint32_t host_count;
  std::uint32_t reserved;
  char text[240];                // NUL-terminated reason (kMsgRefused, kMsgPeerLost)
};
static_assert(sizeof(DataplaneMessage) == 256);

struct AppMessage {
  std::uint32_t type;            // kMsgDetach
  std::uint32_t reserved;
};
static_assert(sizeof(AppMessage) == 8);

// Threads of the rack, spread evenly: host h holds [first, first + count).
constexpr void host_threads(std::uint32_t total, std::uint32_t hosts, std::uint32_t h,
                            std::uint32_t* first, std::uint32_t* count) {
  std::uint32_t base = total / hosts, extra = total % hosts;
  *count = base + (h < extra ? 1 : 0);
  *first = h * base + (h < extra ? h : extra);
}

}  // namespace gossamer::abi
