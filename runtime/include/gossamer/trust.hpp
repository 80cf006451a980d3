// Trust<T>: the only way to reach a property (papers 001 ch. 3).
//
// A closure sent to a trustee must be trivially copyable: it may cross
// machines as bytes, and the code must not change when a trustee moves to
// another host. The compiler rejects closures that capture owning types
// (std::string, std::vector, smart pointers, Trust). It cannot reject
// captured raw pointers or references: they compile, but they point into the
// client's memory and are wrong once the trustee is on another host. Capture
// values, `trust.ref()` (TrustRef), or pass apply_with arguments.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <gossamer/detail/codec.hpp>
#include <gossamer/detail/core.hpp>
#include <gossamer/detail/sendable.hpp>
#include <gossamer/detail/target.hpp>
#include <gossamer/errors.hpp>
#include <gossamer/fiber.hpp>
#include <gossamer/latch.hpp>

namespace gossamer {

template <class T>
class Trust;
template <class T>
class TrustRef;

// A trivially copyable, non-owning handle to a property: capture it in
// closures instead of a Trust. Using it after every Trust of its property is
// gone throws gossamer::stale_trust (apply) or aborts with that message
// (apply_then): the trustee's generation check, never a use-after-free.
template <class T>
class TrustRef {
 public:
  TrustRef() = default;

  template <class F>
  auto apply(F f) const {
    detail::check_closure<F>();
    return t_.apply_with(std::move(f));
  }
  template <class F, class Then>
  void apply_then(F f, Then&& then) const {
    detail::check_closure<F>();
    t_.apply_with_then(std::move(f), std::forward<Then>(then));
  }
  template <class F, class... Args>
  auto apply_with(F f, Args&&... args) const {
    detail::check_closure<F>();
    return t_.apply_with(std::move(f), std::forward<Args>(args)...);
  }
  template <class F, class Then, class... Args>
  void apply_with_then(F f, Then&& then, Args&&... args) const {
    detail::check_closure<F>();
    t_.apply_with_then(std::move(f), std::forward<Then>(then), std::forward<Args>(args)...);
  }
  template <class F>
  auto launch(F f) const {
    detail::check_closure<F>();
    return t_.launch(std::move(f));
  }
  template <class F, class Then>
  void launch_then(F f, Then&& then) const {
    detail::check_closure<F>();
    t_.launch_then(std::move(f), std::forward<Then>(then));
  }

  std::size_t trustee_index() const { return t_.trustee; }

 private:
  friend class Trust<T>;
  explicit TrustRef(detail::Target<T> t) : t_(t) {}
  detail::Target<T> t_;
};

// A reference-counted, copyable handle that owns a property. Copies and drops
// are counted by symmetric difference of trust ids on the trustee (001 §5.4),
// asynchronously, so they are allowed in delegated context too.
template <class T>
class Trust {
 public:
  Trust() = default;
  Trust(const Trust& o) : t_(o.t_), id_(o.id_ ? detail::new_trust_id() : 0) {
    if (id_) detail::toggle_ref(t_.trustee, t_.handle, id_);
  }
  Trust(Trust&& o) noexcept : t_(o.t_), id_(std::exchange(o.id_, 0)) {}
  Trust& operator=(Trust o) noexcept {
    std::swap(t_, o.t_);
    std::swap(id_, o.id_);
    return *this;
  }
  ~Trust() { release(); }

  explicit operator bool() const { return id_ != 0; }
  TrustRef<T> ref() const { return TrustRef<T>(t_); }
  std::size_t trustee_index() const { return t_.trustee; }

  // Runs f(property) on its trustee; blocks the calling fiber, not the thread.
  // On this thread's own trustee it runs at once, inline; with
  // Options::preempt_ops set, a fiber doing so in a loop yields every that
  // many calls when its thread has other threads' requests to serve or
  // responses to fetch (before the closure runs, never inside it), so it
  // does not starve them.
  template <class F>
  auto apply(F f) const {
    detail::check_closure<F>();
    return t_.apply_with(std::move(f));
  }
  // Sends f without waiting for its result; then(result) runs on this
  // thread later. If f throws on another thread's trustee, its response does
  // not decode, or then() throws, the process ends with that message: nobody
  // is left to throw to (errors.hpp).
  // Backpressure: called from a fiber while this thread already has
  // Options::max_outstanding requests awaiting responses (default 1024, any
  // operation to another thread's trustee counts), it first waits, the
  // fiber suspended, until responses bring the count below the bound, so a
  // loop of apply_then keeps memory bounded. From delegated context or a
  // then-callback it never waits (and may pass the bound). The same holds
  // for apply_with_then, launch_then and, one request per fiber, apply.
  // With Options::preempt_ops set, called from a fiber, it also yields
  // every that many calls (sooner once a batch of its responses is ready)
  // if its thread has requests to serve, responses to fetch or a batch to
  // send: callbacks of earlier calls may then run before it returns. A
  // then-callback or delegated context never yields (nor waits for room;
  // see above).
  template <class F, class Then>
  void apply_then(F f, Then&& then) const {
    detail::check_closure<F>();
    t_.apply_with_then(std::move(f), std::forward<Then>(then));
  }
  // Like apply, with arguments serialized into the slot: f(property, args...).
  template <class F, class... Args>
  auto apply_with(F f, Args&&... args) const {
    detail::check_closure<F>();
    return t_.apply_with(std::move(f), std::forward<Args>(args)...);
  }
  template <class F, class Then, class... Args>
  void apply_with_then(F f, Then&& then, Args&&... args) const {
    detail::check_closure<F>();
    t_.apply_with_then(std::move(f), std::forward<Then>(then), std::forward<Args>(args)...);
  }
  // Trust<Latch<U>> only: runs f(latch) in a fiber on the trustee's thread,
  // where it may block; blocks the caller until it returns.
  template <class F>
  auto launch(F f) const {
    detail::check_closure<F>();
    return t_.launch(std::move(f));
  }
  template <class F, class Then>
  void launch_then(F f, Then&& then) const {
    detail::check_closure<F>();
    t_.launch_then(std::move(f), std::forward<Then>(then));
  }

  // A Trust passed as an apply_with argument keeps its property alive, as a
  // copy would: saving makes a copy whose id travels in the bytes.
  template <class Ar>
  void save(Ar& ar) const {
    Trust copy(*this);
    ar(copy.t_.trustee, copy.t_.handle.raw, copy.id_);
    copy.id_ = 0;  // ownership now belongs to the bytes
  }
  template <class Ar>
  void load(Ar& ar) {
    release();
    ar(t_.trustee, t_.handle.raw, id_);
  }

 private:
  friend class TrusteeRef;
  Trust(detail::ThreadId trustee, detail::PropertyHandle h, std::uint64_t id) : t_{trustee, h}, id_(id) {}
  void release() {
    if (id_ && detail::runtime_active()) detail::toggle_ref(t_.trustee, t_.handle, id_);
    id_ = 0;
  }
  detail::Target<T> t_;
  std::uint64_t id_ = 0;
};

// Names a trustee; entrust places a property on it.
class TrusteeRef {
 public:
  explicit TrusteeRef(std::size_t index) : index_(detail::ThreadId(index)) {}
  std::size_t index() const { return index_; }

  // Moves `value` onto this trustee. On this thread's own trustee it never
  // blocks; on another thread's it waits for the trustee to adopt it.
  template <class T>
  Trust<std::decay_t<T>> entrust(T&& value) const {
    using V = std::decay_t<T>;
    detail::require_runtime("entrust()");
    if (index_ >= detail::thread_count_()) detail::fatal("entrust(): no such trustee");
    std::uint64_t id = detail::new_trust_id();
    V* obj = new V(std::forward<T>(value));
    if (index_ == detail::current_thread()) {
      auto h = detail::local_entrust(obj, [](void* p) { delete static_cast<V*>(p); },
                                     detail::type_key<V>(), id);
      return Trust<V>(index_, h, id);
    }
    detail::require_blocking("entrust() on another thread's trustee");
    if (!detail::is_local_thread(index_)) {
      // Another host: the value travels serialized, built there.
      if constexpr (detail::is_raw_type_v<V> || detail::is_cereal_type_v<V>) {
        std::unique_ptr<V> own(obj);
        using Inv = detail::Invoker<&detail::entrust_remote_invoke<V>, void>;
        detail::Waiter<std::uint64_t> w;
        w.fiber = detail::current_fiber();
        detail::RecordWriter rw(index_, Inv::id(), {});
        try {
          rw.append(&id, sizeof id);
          detail::encode_args(rw, *own);
        } catch (...) {
          rw.abandon();
          detail::throw_send_failure("entrust()");
        }
        rw.close(detail::Completion::make(&detail::complete_wait<std::uint64_t>, &w));
        std::uint64_t raw = detail::wait_for(w, "entrust()");
        return Trust<V>(index_, detail::PropertyHandle{raw}, id);
      } else {
        delete obj;
        detail::fatal("entrust() on a trustee of another host needs a type that is trivially "
                      "copyable or has a cereal serialize() member");
      }
    }
    using Inv = detail::Invoker<&detail::entrust_invoke<V>, void>;
    detail::Waiter<std::uint64_t> w;
    w.fiber = detail::current_fiber();
    detail::RecordWriter rw(index_, Inv::id(), {});
    std::uint64_t addr = reinterpret_cast<std::uint64_t>(obj);
    rw.append(&addr, sizeof addr);
    rw.append(&id, sizeof id);
    rw.close(detail::Completion::make(&detail::complete_wait<std::uint64_t>, &w));
    std::uint64_t raw = detail::wait_for(w, "entrust()");
    return Trust<V>(index_, detail::PropertyHandle{raw}, id);
  }

 private:
  detail::ThreadId index_;
};

inline TrusteeRef local_trustee() {
  detail::require_runtime("local_trustee()");
  return TrusteeRef(detail::current_thread());
}
inline TrusteeRef trustee(std::size_t i) {
  detail::require_runtime("trustee()");
  if (i >= detail::thread_count_()) detail::fatal("trustee(i): no such trustee");
  return TrusteeRef(i);
}
// Entrusts to a trustee the runtime picks (round robin).
template <class T>
Trust<std::decay_t<T>> entrust(T&& value) {
  detail::require_runtime("entrust()");
  return TrusteeRef(detail::next_entrust_target()).entrust(std::forward<T>(value));
}

}  // namespace gossamer
