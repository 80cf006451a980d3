// Latch<T>: mutual exclusion among the fibers of one thread. Entrust a Latch
// to a trustee and `launch` closures on it: they run as fibers on the
// trustee's thread, may block (apply, join, lock), and take turns on the
// value through lock(). No atomic instructions: only one OS thread ever
// touches a latch.
#pragma once

#include <deque>
#include <type_traits>
#include <utility>

#include <gossamer/detail/core.hpp>

namespace gossamer {

template <class T>
class Latch {
 public:
  using value_type = T;

  class Guard {
   public:
    explicit Guard(Latch* l) : l_(l) {}
    Guard(Guard&& o) noexcept : l_(std::exchange(o.l_, nullptr)) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() {
      if (l_) l_->unlock();
    }
    T* operator->() const { return &l_->value_; }
    T& operator*() const { return l_->value_; }

   private:
    Latch* l_;
  };

  Latch() = default;
  explicit Latch(T value) : value_(std::move(value)) {}
  Latch(Latch&& o) noexcept(std::is_nothrow_move_constructible_v<T>)
      : value_(std::move(o.value_)) {
    if (o.locked_) detail::fatal("a locked Latch cannot be moved");
  }
  Latch(const Latch&) = delete;
  Latch& operator=(const Latch&) = delete;

  // Waits (blocking the fiber, not the thread) until no other fiber of this
  // thread holds the latch.
  Guard lock() {
    if (locked_) {
      detail::require_blocking("Latch::lock()");
      waiters_.push_back(detail::current_fiber());
      // unlock() hands the latch straight to us: locked_ stays true.
      detail::suspend_current();
    } else {
      locked_ = true;
    }
    return Guard(this);
  }
  bool locked() const { return locked_; }

 private:
  void unlock() {
    if (waiters_.empty()) {
      locked_ = false;
      return;
    }
    detail::Fiber* next = waiters_.front();
    waiters_.pop_front();
    detail::make_ready(next);
  }

  T value_{};
  bool locked_ = false;
  std::deque<detail::Fiber*> waiters_;
};

template <class T>
struct is_latch : std::false_type {};
template <class T>
struct is_latch<Latch<T>> : std::true_type {};

}  // namespace gossamer
