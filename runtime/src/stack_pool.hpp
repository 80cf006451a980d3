// Fiber stacks: mmap'd with a PROT_NONE guard page at the bottom (a stack
// overflow faults instead of corrupting memory), and reused through a
// per-thread pool so spawning a fiber after warm-up does not call mmap.
#pragma once

#include <cstddef>
#include <vector>

#include <boost/context/stack_context.hpp>

namespace gossamer::detail {

class StackPool {
 public:
  using Stack = boost::context::stack_context;
  explicit StackPool(std::size_t usable_bytes = 64 * 1024);
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  void set_size(std::size_t usable_bytes);
  Stack get();
  void put(Stack s);

 private:
  std::size_t size_;  // usable bytes, page multiple
  std::vector<Stack> free_;
};

// Boost.Context StackAllocator that borrows from a StackPool.
class PooledStackAllocator {
 public:
  explicit PooledStackAllocator(StackPool& p) : pool_(&p) {}
  boost::context::stack_context allocate() { return pool_->get(); }
  void deallocate(boost::context::stack_context& s) noexcept { pool_->put(s); }

 private:
  StackPool* pool_;
};

}  // namespace gossamer::detail
