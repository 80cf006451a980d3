// Small helpers the dataplane's stage files share: fences, and
// acquire/release access to words in an application's shared memory.
#pragma once

#include <atomic>

namespace gossamer::dataplane {

// A memory fence. ThreadSanitizer does not model fences (GCC refuses them
// under -fsanitize=thread): there, a read-modify-write of one shared word
// with the same order stands in, which orders at least as strongly.
inline void fence(std::memory_order order) {
#if defined(__SANITIZE_THREAD__)
  static std::atomic<unsigned> word{0};
  word.fetch_add(0, order);
#else
  std::atomic_thread_fence(order);
#endif
}

template <class T>
T load_acquire(const void* p) {
  return std::atomic_ref<T>(*static_cast<T*>(const_cast<void*>(p))).load(std::memory_order_acquire);
}
template <class T>
void store_release(void* p, T v) {
  std::atomic_ref<T>(*static_cast<T*>(p)).store(v, std::memory_order_release);
}

}  // namespace gossamer::dataplane
