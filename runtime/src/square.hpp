// The square (papers 001 §4.7, Fig. 21): every (client, trustee) pair of the
// process has one request slot and one response slot. Request slots are laid
// out trustee-major, so a trustee scans its clients' primary blocks in one
// contiguous run of 128 B blocks; response slots are client-major, so a
// client scans its responses contiguously. Overflow blocks live apart, so
// that scanning ready words stays dense (001 §5.3.1).
#pragma once

#include <cstddef>
#include <cstdint>

#include <gossamer/abi/slots.hpp>

namespace gossamer::detail {

class Square {
 public:
  explicit Square(std::uint32_t n);
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

 private:
  std::uint32_t n_;
  std::size_t bytes_;
  std::byte* base_;
  std::byte *req_primary_, *req_overflow_, *resp_primary_, *resp_overflow_;
};

}  // namespace gossamer::detail
