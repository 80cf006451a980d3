// Fibers: spawn on this thread, spawn_on another, join.
#pragma once

#include <cstring>
#include <type_traits>
#include <utility>

#include <gossamer/detail/core.hpp>
#include <gossamer/detail/sendable.hpp>

namespace gossamer {

// Joins a fiber started by spawn or spawn_on. Dropping it without join()
// detaches the fiber: it runs to completion and run() still waits for it.
class FiberHandle {
 public:
  FiberHandle() = default;
  explicit FiberHandle(detail::JoinState* s) : state_(s) {}
  FiberHandle(FiberHandle&& o) noexcept : state_(std::exchange(o.state_, nullptr)) {}
  FiberHandle& operator=(FiberHandle&& o) noexcept {
    if (this != &o) {
      drop();
      state_ = std::exchange(o.state_, nullptr);
    }
    return *this;
  }
  FiberHandle(const FiberHandle&) = delete;
  FiberHandle& operator=(const FiberHandle&) = delete;
  ~FiberHandle() { drop(); }

  bool joinable() const { return state_ != nullptr; }
  // Blocks the calling fiber (not the thread) until the fiber has finished.
  void join() {
    detail::require_blocking("join()");
    if (!state_) detail::fatal("join() on a FiberHandle that is empty or already joined");
    while (!state_->done) {
      state_->waiter = detail::current_fiber();
      detail::suspend_current();
    }
    drop();
  }

 private:
  void drop() {
    if (state_) std::exchange(state_, nullptr)->release();
  }
  detail::JoinState* state_ = nullptr;
};

// Starts `f` as a fiber on the calling thread. It never leaves this thread,
// so it may capture anything.
template <class F>
FiberHandle spawn(F&& f) {
  detail::require_runtime("spawn()");
  auto* s = new detail::JoinState;
  s->refs = 2;  // handle + fiber
  detail::spawn_local(detail::Task(std::forward<F>(f)), s);
  return FiberHandle(s);
}

namespace detail {

inline void complete_join(Completion& c, std::uint32_t, const std::byte*, std::uint32_t) {
  auto* s = c.context<JoinState*>();
  s->done = true;
  if (Fiber* w = std::exchange(s->waiter, nullptr)) make_ready(w);
  s->release();
}

// Trustee side of spawn_on: start the closure as a fiber on this thread,
// answer the client with a completion when it ends.
template <class F>
void spawn_on_invoke(Invocation& inv) {
  if (inv.length != align_record_of<F>() + sizeof(std::uint64_t)) {
    inv.out->fail(abi::kMalformed, "spawn_on body size");
    return;
  }
  F f = closure_from_bytes<F>(inv.body);
  std::uint64_t token;
  std::memcpy(&token, inv.body + align_record_of<F>(), sizeof token);
  ThreadId client = inv.client;
  spawn_local(Task([f, token, client]() mutable {
                f();
                send_completion(client, token, abi::kOk, nullptr, 0);
              }),
              nullptr);
  inv.out->reserve(0);
}

}  // namespace detail

// Starts `f` as a fiber on runtime thread `thread`. `f` is sent as bytes, so
// it must be trivially copyable (see trust.hpp for what that excludes).
template <class F>
FiberHandle spawn_on(std::size_t thread, F f) {
  detail::require_runtime("spawn_on()");
  detail::check_closure<F>();
  if (thread >= detail::thread_count_()) detail::fatal("spawn_on(): no such thread");
  auto* s = new detail::JoinState;
  s->refs = 2;
  if (thread == detail::current_thread()) {
    detail::spawn_local(detail::Task(std::move(f)), s);
    return FiberHandle(s);
  }
  std::uint64_t token = detail::park_completion(detail::Completion::make(&detail::complete_join, s));
  using Inv = detail::Invoker<&detail::spawn_on_invoke<F>, void>;
  detail::RecordWriter w(detail::ThreadId(thread), Inv::id(), {});
  detail::append_closure(w, f);
  w.append(&token, sizeof token);
  w.close({});
  return FiberHandle(s);
}

}  // namespace gossamer
