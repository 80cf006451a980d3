#include "stack_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace gossamer::detail {

namespace {
// A fiber's frames leave ASan poison on its stack; clear it before the pages
// go back to the kernel, or a later mapping at that address inherits it.
void unmap(void* base, std::size_t len) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(base, len);
#endif
  ::munmap(base, len);
}

std::size_t page_size() {
  static const std::size_t p = std::size_t(::sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

StackPool::StackPool(std::size_t usable_bytes) { set_size(usable_bytes); }

void StackPool::set_size(std::size_t usable_bytes) {
  std::size_t pg = page_size();
  size_ = (usable_bytes + pg - 1) / pg * pg;
}

StackPool::~StackPool() {
  for (Stack& s : free_) {
    auto* top = static_cast<char*>(s.sp);
    unmap(top - s.size, s.size);
  }
}

StackPool::Stack StackPool::get() {
  if (!free_.empty()) {
    Stack s = free_.back();
    free_.pop_back();
    return s;
  }
  std::size_t total = size_ + page_size();
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                   -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::mprotect(p, page_size(), PROT_NONE);  // guard page at the bottom
  Stack s;
  s.size = total;
  s.sp = static_cast<char*>(p) + total;  // stacks grow down from sp
  return s;
}

void StackPool::put(Stack s) {
  // Stacks of another size (after set_size) are not reused.
  if (s.size != size_ + page_size()) {
    unmap(static_cast<char*>(s.sp) - s.size, s.size);
    return;
  }
  free_.push_back(s);
}

}  // namespace gossamer::detail
