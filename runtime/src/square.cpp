#include "square.hpp"

#include <sys/mman.h>

#include <new>

namespace gossamer::detail {

Square::Square(std::uint32_t n) : n_(n) {
  std::size_t cells = std::size_t(n) * n;
  std::size_t primary = cells * abi::kPrimaryBytes, overflow = cells * abi::kOverflowBytes;
  bytes_ = 2 * (primary + overflow);
  // Anonymous pages: zeroed, page-aligned (so every block is cache-line
  // aligned), and later replaceable by a memfd the dataplane maps too.
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  base_ = static_cast<std::byte*>(p);
  req_primary_ = base_;
  resp_primary_ = req_primary_ + primary;
  req_overflow_ = resp_primary_ + primary;
  resp_overflow_ = req_overflow_ + overflow;
}

Square::~Square() { ::munmap(base_, bytes_); }

}  // namespace gossamer::detail
