// Memory in 2 MiB pages, for tools/bench/idle-pages (runtime/PERFORMANCE.md
// "2 MiB pages for the memory a request crosses").
//
// On the VMs this project runs on, the first touch of a 4 KiB page after an
// idle second costs thousands of cycles (the translation has gone cold; a
// 2 MiB page needs one translation for 512 of them). The way to get 2 MiB
// pages from a fresh machine, whatever /sys/kernel/mm/transparent_hugepage
// says (short of `never` for anonymous memory or `deny` for shmem): map at a
// 2 MiB-aligned address, MADV_HUGEPAGE, fault every page in
// (MADV_POPULATE_WRITE) and MADV_COLLAPSE, which merges them into huge pages
// regardless of the sysfs policy (Linux >= 6.1; shmem too). Older kernels
// and full memory keep 4 KiB pages: make_huge says why.
//
// The branch `huge` (35e7b82) used the same recipe for the runtime's
// shared segment, fiber stacks and the dataplane's heap; it is not merged
// (no measurable change in the first request after an idle period).
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <gossamer/abi/attach.hpp>

namespace gossamer::abi {

inline constexpr std::size_t kHugePage = std::size_t(2) << 20;

constexpr std::uint64_t huge_round(std::uint64_t n) { return (n + kHugePage - 1) & ~std::uint64_t(kHugePage - 1); }

namespace huge_detail {
// Newer than some C libraries' headers (Linux 5.14 and 6.1).
#ifndef MADV_POPULATE_WRITE
inline constexpr int kPopulateWrite = 23;
#else
inline constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#endif
#ifndef MADV_COLLAPSE
inline constexpr int kCollapse = 25;
#else
inline constexpr int kCollapse = MADV_COLLAPSE;
#endif
}  // namespace huge_detail

// Maps `len` bytes (of `fd` from offset 0, or anonymous memory when fd < 0)
// at a 2 MiB-aligned address, so that the kernel may map them with 2 MiB
// pages; MAP_FAILED (errno set) on failure. Unmap with munmap(p, len).
inline void* map_huge_aligned(int fd, std::size_t len, int prot, int flags) {
  const std::size_t span = len + kHugePage;
  void* r = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return MAP_FAILED;
  const auto base = reinterpret_cast<std::uintptr_t>(r);
  const std::uintptr_t at = (base + kHugePage - 1) & ~std::uintptr_t(kHugePage - 1);
  void* p = ::mmap(reinterpret_cast<void*>(at), len, prot, flags | MAP_FIXED | (fd < 0 ? MAP_ANONYMOUS : 0), fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::munmap(r, span);
    errno = e;
    return MAP_FAILED;
  }
  // Give back the slack on either side.
  if (at > base) ::munmap(r, at - base);
  const std::uintptr_t end = at + len, rend = base + span;
  if (rend > end) ::munmap(reinterpret_cast<void*>(end), rend - end);
  return p;
}

// Puts [p, p + len) in 2 MiB pages: p 2 MiB-aligned, len a multiple of
// 2 MiB, mapped writable (anonymous or shared memory). Faults every page in.
// Returns "" when it worked, else why not (the memory stays usable, in
// 4 KiB pages).
inline std::string make_huge(void* p, std::size_t len) {
  if (reinterpret_cast<std::uintptr_t>(p) % kHugePage || len % kHugePage || len == 0)
    return "not a 2 MiB-aligned range";
  // Where transparent huge pages are `madvise` (and shmem_enabled
  // `advise`), this alone gets them at the first touch.
  ::madvise(p, len, MADV_HUGEPAGE);
  if (::madvise(p, len, huge_detail::kPopulateWrite) != 0) {
    // Before Linux 5.14: touch each page.
    auto* b = static_cast<volatile char*>(p);
    for (std::size_t i = 0; i < len; i += 4096) b[i] = b[i];
  }
  if (::madvise(p, len, huge_detail::kCollapse) != 0) {
    const int e = errno;
    return std::string("MADV_COLLAPSE: ") + std::strerror(e) +
           (e == EINVAL ? " (Linux < 6.1, or transparent huge pages disabled: "
                          "/sys/kernel/mm/transparent_hugepage/enabled, shmem_enabled)"
                        : "");
  }
  return "";
}

// The parts of a segment of layout `l` (mapped at `seg`, 2 MiB-aligned,
// `file_bytes` long) that every request crosses: the header and primary
// slots, the wake words, doorbells and counters, in 2 MiB pages. The
// overflow slots between them stay in 4 KiB pages, touched only by large
// requests (~256 MiB of them for 64 threads, both lanes). A part larger than 64 MiB
// (hundreds of threads) is only madvise(MADV_HUGEPAGE)d, not faulted in:
// 2 MiB pages as it is touched, where the THP settings allow. Returns "" or
// why not.
inline std::string segment_make_huge(std::byte* seg, const SegmentLayout& l, std::uint64_t file_bytes) {
  auto block = [&](std::uint64_t from, std::uint64_t to) -> std::string {
    from &= ~std::uint64_t(kHugePage - 1);
    to = huge_round(to) < file_bytes ? huge_round(to) : file_bytes;
    if (from >= to) return "";
    if (to - from > (std::uint64_t(64) << 20)) {
      ::madvise(seg + from, std::size_t(to - from), MADV_HUGEPAGE);
      return "";
    }
    return make_huge(seg + from, std::size_t(to - from));
  };
  std::string why = block(0, l.request_overflow);
  if (why.empty()) why = block(l.wake_words, l.bytes);
  return why;
}

}  // namespace gossamer::abi
