// Client side of Trust's requests: the completions that wake a blocked
// fiber (Waiter) or run a `then` callback when a response arrives. Private
// to trust.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <gossamer/detail/codec.hpp>
#include <gossamer/detail/core.hpp>
#include <gossamer/errors.hpp>

namespace gossamer::detail {

struct Unit {};
inline constexpr const char* kNonStdException = "the closure threw something that is not a std::exception";
template <class R>
using stored_t = std::conditional_t<std::is_void_v<R>, Unit, R>;

// A blocked fiber's view of its request; lives on that fiber's stack. The
// error message is allocated only when there is one: a std::string member
// cost every blocking call its construction and destruction.
template <class R>
struct Waiter {
  Fiber* fiber = nullptr;
  bool done = false;
  std::uint32_t status = abi::kOk;
  std::optional<stored_t<R>> value;
  std::unique_ptr<std::string> error;
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
      w->error = std::make_unique<std::string>(std::string("the response could not be decoded: ") + e.what());
    } catch (...) {
      w->status = abi::kMalformed;
      w->error = std::make_unique<std::string>(
          "the response could not be decoded (something that is not a std::exception)");
    }
  } else {
    w->error = std::make_unique<std::string>(reinterpret_cast<const char*>(data), len);
  }
  w->done = true;
  make_ready(w->fiber);
}

template <class R>
R wait_for(Waiter<R>& w, const char* op) {
  while (!w.done) suspend_current();
  if (w.status != abi::kOk) [[unlikely]]
    throw_status(w.status, reinterpret_cast<const std::byte*>(w.error->data()),
                 std::uint32_t(w.error->size()), op);
  if constexpr (!std::is_void_v<R>) return std::move(*w.value);
}

// Results a blocking call receives through a WaitSlot (core.hpp): void, or
// raw bytes that fit it. Others (cereal types, larger values) decode in
// their completion, complete_wait.
template <class R>
constexpr bool slot_wait() {
  if constexpr (std::is_void_v<R>) return true;
  else return is_raw_type_v<R> && sizeof(R) <= kWaitBytes;
}
template <class R>
inline constexpr bool kSlotWait = slot_wait<R>();

template <class R>
R wait_slot(WaitSlot& w, const char* op) {
  while (!w.done) suspend_current();
  if (w.status != abi::kOk) [[unlikely]] wait_failed(w, op);
  if constexpr (!std::is_void_v<R>) {
    if (w.len != sizeof(R)) [[unlikely]] wait_wrong_size(op);
    return decode_result<R>(w.bytes, sizeof(R));
  }
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
}  // namespace gossamer::detail
