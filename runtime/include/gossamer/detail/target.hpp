// Target<T>: every operation of Trust and TrustRef, given where the
// property lives (trustee thread and handle). Private to trust.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <gossamer/detail/codec.hpp>
#include <gossamer/detail/core.hpp>
#include <gossamer/detail/sendable.hpp>
#include <gossamer/detail/trust_complete.hpp>
#include <gossamer/detail/trust_invoke.hpp>
#include <gossamer/errors.hpp>
#include <gossamer/latch.hpp>

namespace gossamer::detail {

// Every operation of Trust and TrustRef, given where the property lives.
template <class T>
struct Target {
  ThreadId trustee = 0;
  PropertyHandle handle{};

  template <class F, class... Args>
  static constexpr void check() {
    check_closure<F>();
    static_assert(std::is_invocable_v<F&, T&, Args...>,
                  "gossamer: the closure must be callable as f(T&, args...)");
    using R = std::invoke_result_t<F&, T&, Args...>;
    static_assert(!std::is_reference_v<R>,
                  "gossamer: a closure sent to a trustee must return a value, not a reference "
                  "to trustee-owned data");
    if constexpr (!std::is_void_v<R>) check_sendable<R>();
    (check_sendable<Args>(), ...);
  }

  // Encodes the request; `make_done()` gives its completion. If anything
  // throws meanwhile (an argument's save(), say), the record is dropped and
  // the caller gets remote_error: nothing is sent and nothing stays open.
  template <class F, class MakeDone, class... Args>
  void send(const char* op, const F& f, MakeDone&& make_done, Args&&... args) const {
    using Inv = Invoker<&apply_invoke<T, F, std::decay_t<Args>...>, T>;
    wait_for_room();  // before the record opens: no yield while it is open
    if constexpr (sizeof...(Args) == 0 && sizeof(F) <= kSmallBody) {
      // The body is the closure's bytes: one call writes and closes the
      // record (the same bytes as below).
      Completion done;
      try {
        done = make_done();
      } catch (...) {
        throw_send_failure(op);
      }
      struct alignas(8) Padded {
        std::byte b[(sizeof(F) + abi::kRecordAlign - 1) / abi::kRecordAlign * abi::kRecordAlign];
      } body{};
      static_assert(sizeof(body.b) % abi::kRecordAlign == 0 && sizeof(body.b) <= kSmallBody,
                    "send_record takes whole words, at most kSmallBody bytes");
      std::memcpy(body.b, &f, sizeof(F));
      send_record(trustee, Inv::id(), handle, body.b, std::uint32_t(sizeof body.b), done);
      return;
    }
    RecordWriter w(trustee, Inv::id(), handle);
    Completion done;
    try {
      append_closure(w, f);
      encode_args(w, std::forward<Args>(args)...);
      done = make_done();
    } catch (...) {
      w.abandon();
      throw_send_failure(op);
    }
    w.close(done);
  }

  template <class F, class... Args>
  auto apply_with(F f, Args&&... args) const {
    check<F, std::decay_t<Args>...>();
    using R = std::invoke_result_t<F&, T&, std::decay_t<Args>...>;
    require_blocking("apply()");
    if (trustee == current_thread()) {
      preempt_point();  // a fiber applying locally in a loop lets its thread serve
      return run_local<T>(handle, [&](T& p) -> R { return f(p, std::forward<Args>(args)...); });
    }
    if constexpr (kSlotWait<R>) {
      WaitSlot w;
      w.fiber = current_fiber();
      send("apply()", f, [&w] { return Completion::make(wait_slot_fn(), &w); }, std::forward<Args>(args)...);
      return wait_slot<R>(w, "apply()");
    } else {
      Waiter<R> w;
      w.fiber = current_fiber();
      send("apply()", f, [&w] { return Completion::make(&complete_wait<R>, &w); }, std::forward<Args>(args)...);
      return wait_for(w, "apply()");
    }
  }

  template <class F, class Then, class... Args>
  void apply_with_then(F f, Then&& then, Args&&... args) const {
    check<F, std::decay_t<Args>...>();
    using R = std::invoke_result_t<F&, T&, std::decay_t<Args>...>;
    require_runtime("apply_then()");
    preempt_point();  // may yield (a fiber only): Options::preempt_ops
    if (trustee == current_thread()) {
      if constexpr (std::is_void_v<R>) {
        run_local<T>(handle, [&](T& p) { f(p, std::forward<Args>(args)...); });
        DelegatedScope scope;
        run_then([&then] { then(); });
      } else {
        R r = run_local<T>(handle, [&](T& p) -> R { return f(p, std::forward<Args>(args)...); });
        DelegatedScope scope;
        run_then([&then, &r] { then(std::move(r)); });
      }
      return;
    }
    send("apply_then()", f, [&then] { return make_then<R>(std::forward<Then>(then)); },
         std::forward<Args>(args)...);
  }

  template <class F>
  auto launch(F f) const {
    static_assert(is_latch<T>::value, "launch() needs a Trust<Latch<T>>");
    check_closure<F>();
    using R = std::invoke_result_t<F&, T&>;
    require_blocking("launch()");
    if constexpr (kSlotWait<R>) {
      WaitSlot w;
      w.fiber = current_fiber();
      send_launch(f, Completion::make(wait_slot_fn(), &w));
      return wait_slot<R>(w, "launch()");
    } else {
      Waiter<R> w;
      w.fiber = current_fiber();
      send_launch(f, Completion::make(&complete_wait<R>, &w));
      return wait_for(w, "launch()");
    }
  }

  template <class F, class Then>
  void launch_then(F f, Then&& then) const {
    static_assert(is_latch<T>::value, "launch_then() needs a Trust<Latch<T>>");
    check_closure<F>();
    using R = std::invoke_result_t<F&, T&>;
    require_runtime("launch_then()");
    send_launch(f, make_then<R>(std::forward<Then>(then)));
  }

  template <class F>
  void send_launch(const F& f, Completion done) const {
    using R = std::invoke_result_t<F&, T&>;
    if constexpr (!std::is_void_v<R>) check_sendable<R>();
    wait_for_room();
    std::uint64_t token = park_completion(done);
    using Inv = Invoker<&launch_invoke<T, F>, T>;
    // Always through the channel, even to this thread: the closure needs a
    // fiber of its own on the trustee, which the trustee side starts.
    RecordWriter w(trustee, Inv::id(), handle);
    append_closure(w, f);
    w.append(&token, sizeof token);
    w.close(Completion::make(&parked_ack, token));
  }
};

}  // namespace gossamer::detail
