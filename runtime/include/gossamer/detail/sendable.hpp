// Closures as bytes: the compile-time check that a closure may be sent to a
// trustee, and copying it in and out of a request body.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include <gossamer/detail/core.hpp>

namespace gossamer {
template <class T> class Trust;
}

namespace gossamer::detail {

// Owning types users most often capture by mistake; listed so the error can
// name them. Anything else that is not trivially copyable is caught by the
// general rule below.
template <class F>
constexpr void check_closure() {
  static_assert(!std::is_reference_v<F> && !std::is_const_v<F>);
  static_assert(
      std::is_trivially_copyable_v<F>,
      "gossamer NoRef: a closure sent to a trustee (apply, apply_then, apply_with, launch, "
      "spawn_on) must be trivially copyable, because it may cross machines as bytes. This one "
      "captures something that is not: a std::string, std::vector, std::unique_ptr, "
      "std::shared_ptr or a Trust<T>? Pass values as apply_with(f, args...) arguments "
      "instead, and capture trust.ref() (a TrustRef<T>) instead of a Trust<T>. Captured raw "
      "pointers and references compile but are only valid on the same host: do not capture "
      "them.");
  static_assert(alignof(F) <= abi::kRecordAlign,
                "gossamer: over-aligned closures cannot be sent to a trustee");
}

template <class F>
constexpr std::uint32_t align_record_of() {
  return abi::align_record(std::uint32_t(sizeof(F)));
}

template <class F>
void append_closure(RecordWriter& w, const F& f) {
  w.append(&f, sizeof(F));
  w.pad_to_align();
}

// The body is 8-aligned and F is trivially copyable: copy it out into storage
// of its own (the trustee may not keep pointing into the slot).
template <class F>
F closure_from_bytes(const std::byte* p) {
  struct alignas(F) Raw { unsigned char b[sizeof(F)]; } raw;
  std::memcpy(raw.b, p, sizeof(F));
  return *std::launder(reinterpret_cast<F*>(raw.b));
}

}  // namespace gossamer::detail
