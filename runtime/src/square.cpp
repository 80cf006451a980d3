#include "square.hpp"

#include <sys/mman.h>

#include <new>

namespace gossamer::detail {

Square::Square(std::uint32_t n) : n_(n) {
  if (!abi::segment_layout(n, n, &layout_, 1)) throw std::bad_alloc();
  anon_bytes_ = layout_.bytes;
  // Anonymous pages: zeroed and page-aligned (so every block is cache-line
  // aligned), laid out like a rack segment of one lane (every pair is on
  // this host: lane 0 only).
  void* p = ::mmap(nullptr, anon_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  anon_ = static_cast<std::byte*>(p);
  place(anon_);
}

Square::Square(std::byte* segment, const abi::SegmentLayout& layout, std::uint32_t total)
    : n_(total), layout_(layout), segment_(segment) {
  place(segment);
}

void Square::place(std::byte* base) {
  req_primary_ = base + layout_.request_primary;
  resp_primary_ = base + layout_.response_primary;
  req_overflow_ = base + layout_.request_overflow;
  resp_overflow_ = base + layout_.response_overflow;
}

Square::~Square() {
  if (anon_) ::munmap(anon_, anon_bytes_);
}

}  // namespace gossamer::detail
