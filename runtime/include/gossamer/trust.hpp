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
#include <gossamer/errors.hpp>
#include <gossamer/fiber.hpp>
#include <gossamer/latch.hpp>

namespace gossamer {

template <class T>
class Trust;
template <class T>
class TrustRef;

namespace detail {

struct Unit {};
inline constexpr const char* kNonStdException = "the closure threw something that is not a std::exception";
template <class R>
using stored_t = std::conditional_t<std::is_void_v<R>, Unit, R>;

// A blocked fiber's view of its request; lives on that fiber's stack.
template <class R>
struct Waiter {
  Fiber* fiber = nullptr;
  bool done = false;
  std::uint32_t status = abi::kOk;
  std::optional<stored_t<R>> value;
  std::string error;
};

template <class R>
void complete_wait(Completion& c, std::uint32_t status, const std::byte* data, std::uint32_t len) {
  auto* w = c.context<Waiter<R>*>();
  w->status = status;
  if (status == abi::kOk) {
    try {
      if constexpr (std::is_void_v<R>) w->value.emplace();
      else w->value.emplace(decode_result<R>(data, len));
    } catch (const std::exception& e) {
      w->status = abi::kMalformed;
      w->error = std::string("the response could not be decoded: ") + e.what();
    } catch (...) {
      w->status = abi::kMalformed;
      w->error = "the response could not be decoded (something that is not a std::exception)";
    }
  } else {
    w->error.assign(reinterpret_cast<const char*>(data), len);
  }
  w->done = true;
  make_ready(w->fiber);
}

template <class R>
R wait_for(Waiter<R>& w, const char* op) {
  while (!w.done) suspend_current();
  if (w.status != abi::kOk)
    throw_status(w.status, reinterpret_cast<const std::byte*>(w.error.data()),
                 std::uint32_t(w.error.size()), op);
  if constexpr (!std::is_void_v<R>) return std::move(*w.value);
}

// Runs a then-callback. It has no caller to throw to: an exception from it
// ends the process with its message (then_callback_threw), never
// std::terminate from inside the runtime's loop.
template <class Fn>
void run_then(Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    then_callback_threw(e.what());
  } catch (...) {
    then_callback_threw(nullptr);
  }
}

// A response that does not decode, for apply_then/launch_then: ends the
// process as a failed closure does there (report_async_failure).
[[noreturn]] inline void fail_undecodable(const char* what) {
  std::string m = std::string("the response could not be decoded: ") +
                  (what ? what : "something that is not a std::exception");
  report_async_failure(abi::kMalformed, reinterpret_cast<const std::byte*>(m.data()), std::uint32_t(m.size()));
}

// A `then` callback kept until its response arrives: inline when it is
// trivially copyable and small, else on the heap.
template <class R, class Then>
void complete_then(Completion& c, std::uint32_t status, const std::byte* data, std::uint32_t len) {
  constexpr bool kInline = std::is_trivially_copyable_v<Then> && sizeof(Then) <= sizeof(c.storage);
  Then* t;
  if constexpr (kInline) t = std::launder(reinterpret_cast<Then*>(c.storage));
  else t = c.context<Then*>();
  struct Drop {
    Then* t;
    ~Drop() {
      if constexpr (!kInline) delete t;
    }
  } drop{t};
  if (status != abi::kOk) {
    report_async_failure(status, data, len);
    return;
  }
  if constexpr (std::is_void_v<R>) {
    run_then([t] { (*t)(); });
  } else {
    std::optional<R> r;
    try {
      r.emplace(decode_result<R>(data, len));
    } catch (const std::exception& e) {
      fail_undecodable(e.what());
    } catch (...) {
      fail_undecodable(nullptr);
    }
    run_then([t, &r] { (*t)(std::move(*r)); });
  }
}

template <class R, class Then>
Completion make_then(Then&& then) {
  using Th = std::decay_t<Then>;
  Completion c;
  c.fn = &complete_then<R, Th>;
  if constexpr (std::is_trivially_copyable_v<Th> && sizeof(Th) <= sizeof(c.storage)) {
    ::new (c.storage) Th(std::forward<Then>(then));
  } else {
    Th* h = new Th(std::forward<Then>(then));
    std::memcpy(c.storage, &h, sizeof h);
  }
  return c;
}

// Trustee side of apply / apply_with: closure bytes, then the arguments.
template <class T, class F, class... Args>
void apply_invoke(Invocation& inv) {
  constexpr std::uint32_t flen = align_record_of<F>();
  if (inv.length < flen) {
    inv.out->fail(abi::kMalformed, "request body shorter than its closure");
    return;
  }
  F f = closure_from_bytes<F>(inv.body);
  std::optional<std::tuple<Args...>> args;
  try {
    args.emplace(decode_args<Args...>(inv.body + flen, inv.length - flen));
  } catch (const std::exception& e) {
    inv.out->fail(abi::kMalformed, e.what());
    return;
  } catch (...) {
    inv.out->fail(abi::kMalformed, "the arguments could not be decoded (not a std::exception)");
    return;
  }
  T& prop = *static_cast<T*>(inv.property);
  using R = std::invoke_result_t<F&, T&, Args...>;
  try {
    if constexpr (std::is_void_v<R>) {
      std::apply([&](auto&... a) { f(prop, std::move(a)...); }, *args);
      inv.out->reserve(0);
    } else {
      R r = std::apply([&](auto&... a) { return f(prop, std::move(a)...); }, *args);
      encode_result(*inv.out, r);
    }
  } catch (const std::exception& e) {
    inv.out->fail(abi::kException, e.what());
  } catch (...) {
    inv.out->fail(abi::kException, kNonStdException);
  }
}

// Trustee side of launch: start a fiber on this thread that runs the closure
// on the latch (it may block), and answer the parked token when it ends.
template <class L, class F>
void launch_invoke(Invocation& inv) {
  constexpr std::uint32_t flen = align_record_of<F>();
  if (inv.length != flen + sizeof(std::uint64_t)) {
    inv.out->fail(abi::kMalformed, "launch body size");
    return;
  }
  F f = closure_from_bytes<F>(inv.body);
  std::uint64_t token;
  std::memcpy(&token, inv.body + flen, sizeof token);
  L* latch = static_cast<L*>(inv.property);
  PropertyHandle h = inv.handle;
  ThreadId client = inv.client;
  pin_property(h);  // the latch outlives the fiber, even if every Trust is dropped
  spawn_local(Task([f, latch, h, token, client]() mutable {
                using R = std::invoke_result_t<F&, L&>;
                try {
                  if constexpr (std::is_void_v<R>) {
                    f(*latch);
                    send_completion(client, token, abi::kOk, nullptr, 0);
                  } else {
                    R r = f(*latch);
                    auto bytes = encode_result_bytes(r);
                    send_completion(client, token, abi::kOk, bytes.data(),
                                    std::uint32_t(bytes.size()));
                  }
                } catch (const std::exception& e) {
                  std::string_view m = e.what();
                  send_completion(client, token, abi::kException, m.data(), std::uint32_t(m.size()));
                } catch (...) {
                  std::string_view m = kNonStdException;
                  send_completion(client, token, abi::kException, m.data(), std::uint32_t(m.size()));
                }
                unpin_property(h);
              }),
              nullptr);
  inv.out->reserve(0);
}

// Trustee side of entrust to another thread: adopt an object the client
// built (in-process only: the body is an address, so this invoker is never
// reachable from another host).
template <class T>
void entrust_invoke(Invocation& inv) {
  if (!is_local_thread(inv.client)) {  // the body is an address in another process
    inv.out->fail(abi::kNotAcrossHosts, "entrust by address from another host");
    return;
  }
  if (inv.length != 2 * sizeof(std::uint64_t)) {
    inv.out->fail(abi::kMalformed, "entrust body size");
    return;
  }
  std::uint64_t addr, id;
  std::memcpy(&addr, inv.body, sizeof addr);
  std::memcpy(&id, inv.body + 8, sizeof id);
  T* obj = reinterpret_cast<T*>(addr);
  PropertyHandle h = local_entrust(obj, [](void* p) { delete static_cast<T*>(p); }, type_key<T>(), id);
  std::memcpy(inv.out->reserve(sizeof h.raw), &h.raw, sizeof h.raw);
}

// Trustee side of entrust from another host: the value arrives serialized
// (trivially copyable types as bytes, others with cereal), then a trust id.
template <class T>
void entrust_remote_invoke(Invocation& inv) {
  if (inv.length < sizeof(std::uint64_t)) {
    inv.out->fail(abi::kMalformed, "entrust body size");
    return;
  }
  std::uint64_t id;
  std::memcpy(&id, inv.body, sizeof id);
  T* obj;
  try {
    obj = new T(std::move(std::get<0>(decode_args<T>(inv.body + 8, inv.length - 8))));
  } catch (const std::exception& e) {
    inv.out->fail(abi::kMalformed, e.what());
    return;
  }
  PropertyHandle h = local_entrust(obj, [](void* p) { delete static_cast<T*>(p); }, type_key<T>(), id);
  std::memcpy(inv.out->reserve(sizeof h.raw), &h.raw, sizeof h.raw);
}

// Runs a closure on a property of this thread's own trustee, right now: the
// same thread owns it, so no channel is needed (and order with this thread's
// other requests is kept, since they all run this way).
template <class T, class Fn>
decltype(auto) run_local(PropertyHandle h, Fn&& fn) {
  std::uint32_t status;
  void* p = local_property(h, type_key<T>(), &status);
  if (!p) throw_status(status, nullptr, 0, "apply");
  DelegatedScope scope;
  try {
    return fn(*static_cast<T*>(p));
  } catch (const remote_error&) {
    throw;
  } catch (const std::exception& e) {
    throw remote_error(e.what());  // the same error a remote trustee would report
  } catch (...) {
    throw remote_error(kNonStdException);
  }
}

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
    Waiter<R> w;
    w.fiber = current_fiber();
    send("apply()", f, [&w] { return Completion::make(&complete_wait<R>, &w); }, std::forward<Args>(args)...);
    return wait_for(w, "apply()");
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
    Waiter<R> w;
    w.fiber = current_fiber();
    send_launch(f, Completion::make(&complete_wait<R>, &w));
    return wait_for(w, "launch()");
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

}  // namespace detail

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
