#include "square.hpp"

#include <sys/mman.h>

#include <new>

namespace gossamer::detail {

Square::Square(std::uint32_t n) : n_(n), local_(n) {
  if (!abi::segment_layout(n, n, &layout_)) throw std::bad_alloc();
  anon_bytes_ = layout_.bytes;
  // Anonymous pages: zeroed and page-aligned (so every block is cache-line
  // aligned), laid out like a rack segment.
  void* p = ::mmap(nullptr, anon_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  anon_ = static_cast<std::byte*>(p);
  place(anon_);
  map_lanes();
}

Square::Square(std::byte* segment, const abi::SegmentLayout& layout, std::uint32_t total, std::uint32_t first,
               std::uint32_t local)
    : n_(total), first_(first), local_(local), layout_(layout), segment_(segment) {
  place(segment);
  map_lanes();
}

// Reserved, not committed: a lane's overflow blocks are touched only by
// batches larger than a primary block.
void Square::map_lanes() {
  lane_bytes_ = std::size_t(kLanes - 1) * local_ * local_ * kLaneBlock;
  if (!lane_bytes_) return;
  void* p = ::mmap(nullptr, lane_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    if (anon_) ::munmap(anon_, anon_bytes_);
    throw std::bad_alloc();
  }
  lane_ = static_cast<std::byte*>(p);
}

void Square::place(std::byte* base) {
  req_primary_ = base + layout_.request_primary;
  resp_primary_ = base + layout_.response_primary;
  req_overflow_ = base + layout_.request_overflow;
  resp_overflow_ = base + layout_.response_overflow;
}

Square::~Square() {
  if (anon_) ::munmap(anon_, anon_bytes_);
  if (lane_) ::munmap(lane_, lane_bytes_);
}

}  // namespace gossamer::detail
