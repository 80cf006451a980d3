// A bounded multi-producer, single-consumer ring of pointers between polling
// cores: frames steered to the core that owns their connection, and messages
// (CoreMsg). Each cell carries a sequence number (Vyukov's bounded queue),
// so a producer claims a cell with one compare-and-swap on `tail_` and
// publishes it with a release store; the consumer owns `head_`. No EAL
// needed, so the stages run in unit tests too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace gossamer::dataplane {

class MpscRing {
 public:
  // `size`: a power of two.
  explicit MpscRing(std::size_t size) : mask_(size - 1), cells_(new Cell[size]) {
    for (std::size_t i = 0; i < size; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }
  // false when full.
  bool push(void* p) {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos & mask_];
      const std::size_t seq = c.seq.load(std::memory_order_acquire);
      const auto dif = std::ptrdiff_t(seq) - std::ptrdiff_t(pos);
      if (dif == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.value = p;
          c.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (dif < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }
  // Up to `n` pointers; the consumer's thread only.
  std::size_t pop_burst(void** out, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      Cell& c = cells_[head_ & mask_];
      if (c.seq.load(std::memory_order_acquire) != head_ + 1) break;
      out[got++] = c.value;
      c.seq.store(head_ + mask_ + 1, std::memory_order_release);
      ++head_;
    }
    return got;
  }
  bool empty() const {
    return cells_[head_ & mask_].seq.load(std::memory_order_acquire) != head_ + 1;
  }

 private:
  struct alignas(64) Cell {
    std::atomic<std::size_t> seq;
    void* value = nullptr;
  };
  const std::size_t mask_;
  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<std::size_t> tail_{0};
  alignas(64) std::size_t head_ = 0;
};

}  // namespace gossamer::dataplane
