// The verbs transport's receive ring and immediate (issue 22; papers 002
// §3.4.1). Pure arithmetic, tested alone.
//
// Each direction of an RC queue pair has a receive ring at the receiver:
// registered memory of `units` units of kUnitBytes. The sender writes
// messages (records back to back, exactly the records of a UDP frame,
// wire.hpp) into it with RDMA WRITE_WITH_IMM, each at a unit boundary and
// never across the end: a message that does not fit before the end skips
// the rest and starts at unit 0. The 32-bit immediate tells the receiver
// where the message is and what it holds, so it finds the records without
// scanning the ring, and carries the sender's credit return for the other
// direction (no message of its own per renewal):
//
//   bits  0..13  position: the first unit of the message (rings of up to 2^14 units, 1 MiB)
//   bits 14..19  records in the message (0: a credit return alone, length 0)
//   bits 20..31  units of the sender's own receive ring freed since its last return
//
// The length written is the receive completion's byte_len. Credits are
// units: the sender may have written at most `units` units (skips count)
// that the receiver has not freed. The receiver frees a message's units
// (and a skip before it) once it has delivered its records (copied into
// slots), and returns them on the next message it sends on that QP, or in
// a credit return alone once a quarter of the ring is owed.
#pragma once

#include <cstdint>

namespace gossamer::dataplane::verbs {

inline constexpr std::uint32_t kUnitBytes = 64;
inline constexpr std::uint32_t kPosBits = 14, kCountBits = 6, kCreditBits = 12;
inline constexpr std::uint32_t kMaxUnits = 1u << kPosBits;            // 16384 units: 1 MiB
inline constexpr std::uint32_t kMaxRecords = (1u << kCountBits) - 1;   // 63 per message
inline constexpr std::uint32_t kMaxCreditReturn = (1u << kCreditBits) - 1;
static_assert(kPosBits + kCountBits + kCreditBits == 32);

struct Imm {
  std::uint32_t pos = 0;      // unit
  std::uint32_t records = 0;  // 0: credits alone
  std::uint32_t credits = 0;  // units returned
  bool operator==(const Imm&) const = default;
};

constexpr std::uint32_t encode_imm(const Imm& m) {
  return (m.pos & (kMaxUnits - 1)) | (m.records & kMaxRecords) << kPosBits |
         (m.credits & kMaxCreditReturn) << (kPosBits + kCountBits);
}
constexpr Imm decode_imm(std::uint32_t v) {
  return Imm{v & (kMaxUnits - 1), (v >> kPosBits) & kMaxRecords, v >> (kPosBits + kCountBits)};
}

constexpr std::uint32_t units_of(std::uint32_t bytes) { return (bytes + kUnitBytes - 1) / kUnitBytes; }

// A sender's view of the peer's ring: where the next message goes, and how
// many units it may still write. Positions are monotonic 64-bit unit counts
// (the ring offset is the count mod `units`), so wraparound is plain
// arithmetic.
class RingWriter {
 public:
  explicit RingWriter(std::uint32_t units = 0) : units_(units), limit_(units) {}
  // Where a message of `n` units would start (skipping the ring's tail if it
  // does not fit there), or false when the credits do not cover the skip
  // and the message. n must be 1..units.
  bool place(std::uint32_t n, std::uint32_t* pos, std::uint32_t* skip) const {
    const std::uint32_t off = std::uint32_t(head_ % units_);
    *skip = off + n > units_ ? units_ - off : 0;
    *pos = *skip ? 0 : off;
    return head_ + *skip + n <= limit_;
  }
  void advance(std::uint32_t skip, std::uint32_t n) { head_ += skip + n; }
  void grant(std::uint32_t n) { limit_ += n; }
  std::uint64_t credits() const { return limit_ - head_; }
  std::uint64_t head() const { return head_; }
  std::uint32_t units() const { return units_; }

 private:
  std::uint32_t units_;
  std::uint64_t head_ = 0, limit_;
};

// A receiver's view of its own ring: where the next message must start,
// and the units freed but not yet returned.
class RingReader {
 public:
  explicit RingReader(std::uint32_t units = 0) : units_(units), granted_(units) {}
  // Accepts a message of `bytes` at `pos`: it must start where the last one
  // ended, or at 0 after a skip of the tail, and fit the ring and what the
  // sender may have written. On success frees it (and the skip) for the
  // next return; false is a protocol error.
  bool accept(std::uint32_t pos, std::uint32_t bytes) {
    const std::uint32_t n = units_of(bytes);
    const std::uint32_t off = std::uint32_t(tail_ % units_);
    std::uint32_t skip = 0;
    if (pos != off) {
      if (pos != 0) return false;
      skip = units_ - off;
    }
    if (n == 0 || pos + n > units_ || (skip && off + n <= units_)) return false;  // a skip only when needed
    if (tail_ + skip + n > granted_) return false;  // beyond its credits: it wrote over unread messages
    tail_ += skip + n;
    owed_ += skip + n;
    return true;
  }
  // Takes up to kMaxCreditReturn of what is owed, for an immediate.
  std::uint32_t take_return() {
    const std::uint32_t r = owed_ > kMaxCreditReturn ? kMaxCreditReturn : std::uint32_t(owed_);
    owed_ -= r;
    granted_ += r;
    return r;
  }
  std::uint64_t owed() const { return owed_; }
  std::uint64_t tail() const { return tail_; }
  std::uint32_t units() const { return units_; }

 private:
  std::uint32_t units_;
  std::uint64_t tail_ = 0, owed_ = 0, granted_;  // granted_: the sender's limit, as we returned it
};

}  // namespace gossamer::dataplane::verbs
