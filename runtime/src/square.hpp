// The square (papers 001 §4.7, Fig. 21): every (client, trustee) pair of the
// rack has one request slot and one response slot (kLanes of each across
// hosts: lanes, gossamer/abi/attach.hpp). Request slots are laid
// out trustee-major, so a trustee scans its clients' primary blocks in one
// contiguous run of 128 B blocks; response slots are client-major, so a
// client scans its responses contiguously. Overflow blocks live apart, so
// that scanning ready words stays dense (001 §5.3.1).
//
// The memory follows the attach contract (gossamer/abi/attach.hpp): one
// process alone maps it anonymously; in a rack it is the sealed memfd the
// dataplane maps too, with wake words and doorbell rings after the slots.
#pragma once

#include <cstddef>
#include <cstdint>

#include <gossamer/abi/attach.hpp>

namespace gossamer::detail {

class Square {
 public:
  // Anonymous memory for `total` threads all on this host.
  explicit Square(std::uint32_t total);
  // Memory of a rack segment (owned by the caller), `total` threads.
  Square(std::byte* segment, const abi::SegmentLayout& layout, std::uint32_t total);
  ~Square();
  Square(const Square&) = delete;
  Square& operator=(const Square&) = delete;

  std::uint32_t size() const { return n_; }
  // Lane 0 unless given: pairs across hosts use lane seq % abi::kLanes.
  std::byte* request_primary(std::uint32_t trustee, std::uint32_t client, std::uint32_t lane = 0) {
    return req_primary_ + cell(lane, trustee, client) * abi::kPrimaryBytes;
  }
  std::byte* request_overflow(std::uint32_t trustee, std::uint32_t client, std::uint32_t lane = 0) {
    return req_overflow_ + cell(lane, trustee, client) * abi::kOverflowBytes;
  }
  std::byte* response_primary(std::uint32_t client, std::uint32_t trustee, std::uint32_t lane = 0) {
    return resp_primary_ + cell(lane, client, trustee) * abi::kPrimaryBytes;
  }
  std::byte* response_overflow(std::uint32_t client, std::uint32_t trustee, std::uint32_t lane = 0) {
    return resp_overflow_ + cell(lane, client, trustee) * abi::kOverflowBytes;
  }
  // Rack segments only.
  std::byte* segment() const { return segment_; }
  const abi::SegmentLayout& layout() const { return layout_; }

 private:
  std::size_t cell(std::uint32_t lane, std::uint32_t major, std::uint32_t minor) const {
    return abi::slot_cell(n_, lane, major, minor);
  }
  void place(std::byte* base);
  std::uint32_t n_;
  abi::SegmentLayout layout_{};
  std::size_t anon_bytes_ = 0;
  std::byte* anon_ = nullptr;
  std::byte* segment_ = nullptr;
  std::byte *req_primary_, *req_overflow_, *resp_primary_, *resp_overflow_;
};

}  // namespace gossamer::detail
