// The square (papers 001 §4.7, Fig. 21): every (client, trustee) pair of the
// rack has a request slot and a response slot (and lanes, below). Request
// slots are laid
// out trustee-major, so a trustee scans its clients' primary blocks in one
// contiguous run of 128 B blocks; response slots are client-major, so a
// client scans its responses contiguously. Overflow blocks live apart, so
// that scanning ready words stays dense (001 §5.3.1).
//
// The memory follows the attach contract (gossamer/abi/attach.hpp): one
// process alone maps it anonymously; in a rack it is the sealed memfd the
// dataplane maps too, with wake words and doorbell rings after the slots.
//
// Lanes: a pair of threads on the same host has kLanes request slots and
// kLanes response slots, used in turn, so that a client can publish its
// next batch while the trustee still serves the previous one: two batches
// in flight per channel, where the paper's design (001 §5.3) has one, so
// that the trustee finds the next batch when it finishes one instead of
// waiting for the client's next pass (runtime/PERFORMANCE.md, "Lanes").
// Lane 0 is the slot of the attach contract; the other lanes are private
// anonymous memory of this process, indexed by local thread, since the
// dataplane never carries a slot between two threads of one host. A pair
// across hosts uses lane 0 only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <gossamer/abi/attach.hpp>

namespace gossamer::detail {

inline constexpr std::uint32_t kLanes = 2;

class Square {
 public:
  // Anonymous memory for `total` threads all on this host.
  explicit Square(std::uint32_t total);
  // Memory of a rack segment (owned by the caller), `total` threads of
  // which [first, first + local) are on this host.
  Square(std::byte* segment, const abi::SegmentLayout& layout, std::uint32_t total, std::uint32_t first,
         std::uint32_t local);
  ~Square();
  Square(const Square&) = delete;
  Square& operator=(const Square&) = delete;

  std::uint32_t size() const { return n_; }
  std::byte* request_primary(std::uint32_t trustee, std::uint32_t client) {
    return req_primary_ + (std::size_t(trustee) * n_ + client) * abi::kPrimaryBytes;
  }
  std::byte* request_overflow(std::uint32_t trustee, std::uint32_t client) {
    return req_overflow_ + (std::size_t(trustee) * n_ + client) * abi::kOverflowBytes;
  }
  std::byte* response_primary(std::uint32_t client, std::uint32_t trustee) {
    return resp_primary_ + (std::size_t(client) * n_ + trustee) * abi::kPrimaryBytes;
  }
  std::byte* response_overflow(std::uint32_t client, std::uint32_t trustee) {
    return resp_overflow_ + (std::size_t(client) * n_ + trustee) * abi::kOverflowBytes;
  }
  // Lane `lane` of a pair: lane 0 is the slot above; lanes 1 .. kLanes-1
  // exist for a pair of threads on this host only.
  std::byte* request_primary(std::uint32_t trustee, std::uint32_t client, std::uint32_t lane) {
    return lane ? lane_block(lane, trustee, client) : request_primary(trustee, client);
  }
  std::byte* request_overflow(std::uint32_t trustee, std::uint32_t client, std::uint32_t lane) {
    return lane ? lane_block(lane, trustee, client) + 2 * abi::kPrimaryBytes : request_overflow(trustee, client);
  }
  std::byte* response_primary(std::uint32_t client, std::uint32_t trustee, std::uint32_t lane) {
    return lane ? lane_block(lane, trustee, client) + abi::kPrimaryBytes : response_primary(client, trustee);
  }
  std::byte* response_overflow(std::uint32_t client, std::uint32_t trustee, std::uint32_t lane) {
    return lane ? lane_block(lane, trustee, client) + 2 * abi::kPrimaryBytes + abi::kOverflowBytes
                : response_overflow(client, trustee);
  }
  // Rack segments only.
  std::byte* segment() const { return segment_; }
  const abi::SegmentLayout& layout() const { return layout_; }

 private:
  void place(std::byte* base);
  void map_lanes();
  // One lane of one pair: request primary, response primary, request
  // overflow, response overflow, together (the pair's two threads are the
  // only ones to touch it).
  static constexpr std::size_t kLaneBlock = 2 * (abi::kPrimaryBytes + abi::kOverflowBytes);
  std::byte* lane_block(std::uint32_t lane, std::uint32_t trustee, std::uint32_t client) {
    return lane_ + ((std::size_t(lane - 1) * local_ + (trustee - first_)) * local_ + (client - first_)) * kLaneBlock;
  }
  std::uint32_t n_;
  std::uint32_t first_ = 0, local_;
  std::size_t lane_bytes_ = 0;
  std::byte* lane_ = nullptr;
  abi::SegmentLayout layout_{};
  std::size_t anon_bytes_ = 0;
  std::byte* anon_ = nullptr;
  std::byte* segment_ = nullptr;
  std::byte *req_primary_, *req_overflow_, *resp_primary_, *resp_overflow_;
};

}  // namespace gossamer::detail
