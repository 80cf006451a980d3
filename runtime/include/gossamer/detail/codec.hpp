// How arguments and results cross a slot. Trivially copyable values travel
// as raw bytes; anything else goes through cereal's binary archive (cereal is
// header-only in Debian, supports the standard containers, and users add a
// `serialize` member to their own types). The streams below read and write
// slot memory directly: no allocation per value.
#pragma once

#include <bit>
#include <cstring>
#include <stdexcept>
#include <istream>
#include <ostream>
#include <streambuf>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <cereal/archives/binary.hpp>
#include <cereal/types/array.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>

#include <gossamer/detail/core.hpp>

namespace gossamer::detail {

// Writes into a request record under construction.
class RecordStreamBuf final : public std::streambuf {
 public:
  explicit RecordStreamBuf(RecordWriter& w) : w_(w) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    w_.append(s, std::size_t(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      char ch = traits_type::to_char_type(c);
      w_.append(&ch, 1);
    }
    return traits_type::not_eof(c);
  }

 private:
  RecordWriter& w_;
};

// Writes into a growable byte vector (responses of unknown size).
class VectorStreamBuf final : public std::streambuf {
 public:
  explicit VectorStreamBuf(std::vector<std::byte>& v) : v_(v) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    auto* b = reinterpret_cast<const std::byte*>(s);
    v_.insert(v_.end(), b, b + n);
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) v_.push_back(std::byte(c));
    return traits_type::not_eof(c);
  }

 private:
  std::vector<std::byte>& v_;
};

// Reads from a byte range; reading past its end fails the stream, which
// cereal turns into an exception (a malformed body, never an overrun).
class SpanStreamBuf final : public std::streambuf {
 public:
  SpanStreamBuf(const std::byte* p, std::size_t n) {
    char* b = const_cast<char*>(reinterpret_cast<const char*>(p));
    setg(b, b, b + n);
  }
  std::size_t consumed() const { return std::size_t(gptr() - eback()); }
};

// Trivially copyable values travel as their bytes (a memcpy, whatever
// cereal could do with them); cereal only for the rest.
template <class A>
constexpr bool is_raw_type_v = std::is_trivially_copyable_v<A> && !std::is_pointer_v<A>;

template <class A>
constexpr bool is_cereal_type_v =
    !is_raw_type_v<A> &&
    cereal::traits::is_output_serializable<A, cereal::BinaryOutputArchive>::value &&
    cereal::traits::is_input_serializable<A, cereal::BinaryInputArchive>::value;

template <class A>
constexpr void check_sendable() {
  static_assert(!std::is_reference_v<A>, "gossamer: return values, not references");
  static_assert(is_raw_type_v<A> || is_cereal_type_v<A>,
                "gossamer: this argument or result type cannot be sent to a trustee: it is "
                "neither trivially copyable nor serializable. Give it a cereal "
                "`template <class Ar> void serialize(Ar&)` member.");
}

// Raw types first (fixed size, memcpy), then one cereal archive for the rest.
template <class... Args>
void encode_args(RecordWriter& w, Args&&... args) {
  constexpr bool any_cereal = (is_cereal_type_v<std::decay_t<Args>> || ...);
  if constexpr (!any_cereal) {
    (w.append(&args, sizeof(std::decay_t<Args>)), ...);
  } else {
    RecordStreamBuf buf(w);
    std::ostream os(&buf);
    cereal::BinaryOutputArchive ar(os);
    auto one = [&](auto&& a) {
      using A = std::decay_t<decltype(a)>;
      if constexpr (is_cereal_type_v<A>) ar(a);
      else ar(cereal::binary_data(&a, sizeof(A)));
    };
    (one(args), ...);
  }
}

template <class... Args>
std::tuple<Args...> decode_args(const std::byte* p, std::size_t n) {
  constexpr bool any_cereal = (is_cereal_type_v<Args> || ...);
  if constexpr (sizeof...(Args) == 0) {
    return {};
  } else if constexpr (!any_cereal) {
    constexpr std::size_t need = (sizeof(Args) + ... + 0);
    if (n != need) throw std::runtime_error("arguments have the wrong size");
    std::tuple<Args...> t;
    std::size_t off = 0;
    std::apply([&](auto&... a) { ((std::memcpy(&a, p + off, sizeof a), off += sizeof a), ...); }, t);
    return t;
  } else {
    SpanStreamBuf buf(p, n);
    std::istream is(&buf);
    is.exceptions(std::ios::failbit | std::ios::badbit | std::ios::eofbit);
    cereal::BinaryInputArchive ar(is);
    std::tuple<Args...> t;
    std::apply(
        [&](auto&... a) {
          auto one = [&](auto& x) {
            using A = std::decay_t<decltype(x)>;
            if constexpr (is_cereal_type_v<A>) ar(x);
            else ar(cereal::binary_data(&x, sizeof(A)));
          };
          (one(a), ...);
        },
        t);
    return t;
  }
}

// Encodes a result into `out` (trustee side).
template <class R>
void encode_result(ResponseWriter& out, R& r) {
  if constexpr (is_raw_type_v<R>) {
    std::memcpy(out.reserve(sizeof(R)), &r, sizeof(R));
  } else {
    thread_local std::vector<std::byte> scratch;
    scratch.clear();
    {
      VectorStreamBuf buf(scratch);
      std::ostream os(&buf);
      cereal::BinaryOutputArchive ar(os);
      ar(r);
    }
    std::byte* dst = out.reserve(std::uint32_t(scratch.size()));
    if (!scratch.empty()) std::memcpy(dst, scratch.data(), scratch.size());
  }
}

template <class R>
std::vector<std::byte> encode_result_bytes(R& r) {
  std::vector<std::byte> v;
  if constexpr (is_raw_type_v<R>) {
    v.resize(sizeof(R));
    std::memcpy(v.data(), &r, sizeof(R));
  } else {
    VectorStreamBuf buf(v);
    std::ostream os(&buf);
    cereal::BinaryOutputArchive ar(os);
    ar(r);
  }
  return v;
}

template <class R>
R decode_result(const std::byte* p, std::size_t n) {
  if constexpr (is_raw_type_v<R>) {
    if (n != sizeof(R)) throw std::runtime_error("gossamer: response has the wrong size");
    struct Raw { unsigned char b[sizeof(R)]; } raw;
    std::memcpy(raw.b, p, sizeof(R));
    return std::bit_cast<R>(raw);
  } else {
    return std::get<0>(decode_args<R>(p, n));
  }
}

}  // namespace gossamer::detail
