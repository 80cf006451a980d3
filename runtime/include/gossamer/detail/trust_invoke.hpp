// Trustee side of Trust's requests: the invokers that run a closure on a
// property, start a launch fiber, or adopt an entrusted object, and
// run_local for a property of the calling thread. Private to trust.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <gossamer/detail/codec.hpp>
#include <gossamer/detail/core.hpp>
#include <gossamer/detail/sendable.hpp>
#include <gossamer/detail/trust_complete.hpp>
#include <gossamer/errors.hpp>

namespace gossamer::detail {

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
// Inlined into its caller: a loop applying to its own trustee's property
// pays no call for it (issue 20).
template <class T, class Fn>
[[gnu::always_inline]] inline decltype(auto) run_local(PropertyHandle h, Fn&& fn) {
  // lp_type is 0 while nothing is cached, which no type's key is.
  static_assert(type_key<T>() != 0);
  ThreadState& s = tl_state;
  void* p;
  if (h.raw == s.lp_handle && s.lp_type == type_key<T>() && *s.table_changes == s.lp_changes) [[likely]] {
    ++s.local_applies;
    p = s.lp_obj;
  } else {
    std::uint32_t status;
    p = local_property(h, type_key<T>(), &status);  // counts it; remembers it when found
    if (!p) throw_status(status, nullptr, 0, "apply");
  }
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
}  // namespace gossamer::detail
