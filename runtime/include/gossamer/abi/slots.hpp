// The slot contract: the byte layout of request and response slots, shared by
// the runtime (which writes and serves them) and, later, the dataplane (which
// carries them between hosts). Structs only, no logic. Every field read from a
// slot is untrusted: the reader copies it, then validates it (STYLE.md).
//
// Layout (papers 001 §5.3, §5.3.1): a slot is a 128 B primary block followed
// (elsewhere in memory) by a 16 KiB overflow block. The primary block starts
// with a 16 B header. Records are appended in order: first into the primary
// block while they fit, then into the overflow block; a record never spans two
// blocks and the writer never goes back to the primary block once it has used
// the overflow block, so the reader can walk them in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gossamer::abi {

inline constexpr std::uint32_t kPrimaryBytes = 128;
// The dataplane carries slots larger than a frame (fragments), so this may
// grow (e.g. to 16 KiB); the slot and wire length fields are 16 bits: keep
// it below 65536.
inline constexpr std::uint32_t kOverflowBytes = 16384;
static_assert(kOverflowBytes < 65536);
inline constexpr std::uint32_t kRecordAlign = 8;

// Header at the start of a request slot's primary block. `seq` is the ready
// word: the client bumps it (release) after writing a batch; the batch is
// pending while it differs from the matching response slot's `seq`. A 32-bit
// sequence instead of a single bit lets a carrier detect a stale or repeated
// batch.
struct RequestSlotHeader {
  std::uint32_t seq;
  std::uint16_t count;         // records in this batch
  std::uint16_t primary_len;   // bytes of records after this header
  std::uint16_t overflow_len;  // bytes of records in the overflow block
  std::uint16_t flags;         // reserved, 0
  std::uint32_t reserved;      // 0
};
static_assert(sizeof(RequestSlotHeader) == 16);
static_assert(std::is_trivially_copyable_v<RequestSlotHeader>);

// Header at the start of a response slot's primary block. Responses are
// written for a whole batch at once, in request order; those that fit neither
// block go to a spill area named by `spill`/`spill_len` (in-process: a heap
// buffer owned by the client once `seq` is published).
struct ResponseSlotHeader {
  std::uint32_t seq;           // equals the request seq it answers
  std::uint16_t count;         // responses, == request count
  std::uint16_t primary_len;
  std::uint16_t overflow_len;
  std::uint16_t flags;
  std::uint32_t spill_len;
  std::uint64_t spill;         // in-process address of the spill buffer, or 0
};
static_assert(sizeof(ResponseSlotHeader) == 24);
static_assert(std::is_trivially_copyable_v<ResponseSlotHeader>);

// One request: what to run (`invoker`), on what (`property`), with `length`
// bytes of body (the closure's captured bytes, 8-aligned, then its serialized
// arguments). The record occupies sizeof(RequestHeader) + length rounded up to
// kRecordAlign.
struct RequestHeader {
  std::uint32_t invoker;   // kBuiltin* or a registered invoker id; never an address
  std::uint32_t length;    // body bytes that follow
  std::uint64_t property;  // PropertyHandle (index << 32 | generation), or 0
};
static_assert(sizeof(RequestHeader) == 16);
static_assert(std::is_trivially_copyable_v<RequestHeader>);

// invoker bit: the body is an ExternalBody naming the real body elsewhere.
// Only valid inside one process; a carrier must drop records that have it.
inline constexpr std::uint32_t kInvokerExternal = 0x8000'0000u;

struct ExternalBody {
  std::uint64_t address;  // in-process address of a heap buffer; the trustee frees it
  std::uint64_t length;
};
static_assert(sizeof(ExternalBody) == 16);

// invoker bit: the body is a BulkRef; the real body comes from another host
// over the run's TCP connection to that host (runtime/src/bulk.hpp). Any
// record of a batch may have it; the batch is served (or its responses
// taken) once every body it names has arrived. Also marks a response record
// (ResponseHeader::status, kStatusBulk in attach.hpp).
inline constexpr std::uint32_t kInvokerBulk = 0x4000'0000u;

struct BulkRef {
  std::uint64_t id;      // the sender's transfer id
  std::uint64_t length;  // bytes of the body
};
static_assert(sizeof(BulkRef) == 16);

// Built-in invoker ids; registered invokers start at kFirstUserInvoker.
enum BuiltinInvoker : std::uint32_t {
  kBuiltinInvalid = 0,
  kBuiltinToggleRef = 1,    // body: u64 trust id; symmetric difference (001 §5.4)
  kBuiltinComplete = 2,     // body: u64 token, then the result bytes (launch, spawn_on)
  kBuiltinProbe = 3,        // rack quiescence probe; response: RackProbe (no body)
  kBuiltinStop = 4,         // the rack run is over: stop serving (from host 0 only)
  kBuiltinPiece = 5,        // body: the next piece of the following record's body
                            // (records larger than a block, across hosts only)
  kBuiltinTooLarge = 6,     // no body: the client's request body was over 1 GiB
                            // (across hosts); the answer is kMalformed
  kFirstUserInvoker = 16,
};

// One response: `length` bytes follow, padded to kRecordAlign.
struct ResponseHeader {
  std::uint32_t length;
  std::uint32_t status;  // Status below
};
static_assert(sizeof(ResponseHeader) == 8);

enum Status : std::uint32_t {
  kOk = 0,
  kStaleProperty = 1,    // the property is gone (TrustRef used too late)
  kBadInvoker = 2,       // unknown invoker id
  kWrongType = 3,        // invoker's property type differs from the property's
  kMalformed = 4,        // lengths or body do not decode
  kException = 5,        // the closure threw; body is the what() text
  kNotAcrossHosts = 6,   // the request cannot come from another host
};

// Response of kBuiltinProbe.
struct RackProbe {
  std::uint32_t idle;       // every thread of the host idle (no fiber, request, parked completion)
  std::uint32_t reserved;
  std::uint64_t activity;   // sum of the threads' activity counters
};
static_assert(sizeof(RackProbe) == 16);

constexpr std::uint32_t align_record(std::uint32_t n) {
  return (n + kRecordAlign - 1) & ~(kRecordAlign - 1);
}

// Usable bytes of each block for records.
inline constexpr std::uint32_t kRequestPrimaryData = kPrimaryBytes - sizeof(RequestSlotHeader);
inline constexpr std::uint32_t kResponsePrimaryData = kPrimaryBytes - sizeof(ResponseSlotHeader);
static_assert(kRequestPrimaryData % kRecordAlign == 0);
static_assert(kResponsePrimaryData % kRecordAlign == 0);

// The layout version: bump when anything above changes.
inline constexpr std::uint32_t kLayoutVersion =
    3u << 24 | kPrimaryBytes << 12 | (kOverflowBytes >> 6);

}  // namespace gossamer::abi
