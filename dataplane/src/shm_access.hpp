// Small helpers the dataplane's stage files share: acquire/release access
// to words in an application's shared memory.
#pragma once

#include <atomic>

namespace gossamer::dataplane {

template <class T>
T load_acquire(const void* p) {
  return std::atomic_ref<T>(*static_cast<T*>(const_cast<void*>(p))).load(std::memory_order_acquire);
}
template <class T>
void store_release(void* p, T v) {
  std::atomic_ref<T>(*static_cast<T*>(p)).store(v, std::memory_order_release);
}

}  // namespace gossamer::dataplane
