// How arguments and results cross a slot. Trivially copyable values travel
// as raw bytes; anything else goes through cereal's binary format (cereal is
// header-only in Debian, supports the standard containers, and users add a
// `serialize` member to their own types), read back by BoundedInputArchive,
// which checks every claimed size against the bytes present. The streams
// and the archive read and write slot memory directly: no allocation per
// value. Each thread builds its output streams once (SinkStream): a
// std::ostream's construction looks up its locale's facets (dynamic_casts,
// ~600 instructions), which per request was most of the encoding cost.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <ostream>
#include <streambuf>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
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

// Writes into a request record under construction, or into a growable
// byte vector (responses of unknown size): whichever it is pointed at.
class SinkStreamBuf final : public std::streambuf {
 public:
  void point(RecordWriter* w, std::vector<std::byte>* v) {
    w_ = w;
    v_ = v;
  }

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (w_) {
      w_->append(s, std::size_t(n));
    } else {
      auto* b = reinterpret_cast<const std::byte*>(s);
      v_->insert(v_->end(), b, b + n);
    }
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      char ch = traits_type::to_char_type(c);
      xsputn(&ch, 1);
    }
    return traits_type::not_eof(c);
  }

 private:
  RecordWriter* w_ = nullptr;
  std::vector<std::byte>* v_ = nullptr;
};

// An output stream over a SinkStreamBuf, built once per thread and lent to
// one encoding at a time; an encoding that starts while the thread's stream
// is lent (a serialize() that encodes: not a request, which cannot nest, but
// a result, say) builds a stream of its own.
class SinkStream {
 public:
  SinkStream(RecordWriter* w, std::vector<std::byte>* v) {
    Shared& sh = shared();
    if (!sh.lent) {
      sh.lent = true;
      mine_ = &sh;
    } else {
      own_ = std::make_unique<Shared>();
      mine_ = own_.get();
    }
    mine_->buf.point(w, v);
    mine_->os.clear();
  }
  ~SinkStream() {
    mine_->buf.point(nullptr, nullptr);
    if (!own_) mine_->lent = false;
  }
  SinkStream(const SinkStream&) = delete;
  SinkStream& operator=(const SinkStream&) = delete;
  std::ostream& stream() { return mine_->os; }

 private:
  struct Shared {
    SinkStreamBuf buf;
    std::ostream os{&buf};
    bool lent = false;
  };
  static Shared& shared() {
    thread_local Shared s;
    return s;
  }
  Shared* mine_;
  std::unique_ptr<Shared> own_;
};

// Reads arguments and results from a byte range that may come from another
// host: every read is checked against the bytes left (a malformed body is an
// exception, never an overrun), and so is every element count cereal reads
// before it sizes a container (its `SizeTag`): cereal's binary archive
// resizes first and reads after, so a 24-byte body claiming a 2 GiB string
// would allocate 2 GiB before failing. Here a count must fit what is left:
// `count * the least bytes one element takes` (min_encoded_size below; one
// byte for any type it does not know, so a container of a type that
// serializes to nothing holds at most as many elements as bytes follow it).
//
// BoundedBytes holds the range and its checks, for this archive and for
// DirectReader (below), which reads strings and vectors without one.
class BoundedBytes {
 public:
  BoundedBytes(const std::byte* p, std::size_t n) : p_(p), left_(n) {}

  void take(void* data, std::size_t size) {
    if (size > left_)
      throw cereal::Exception("gossamer: the body ends " + std::to_string(left_) + " bytes into a " +
                              std::to_string(size) + "-byte field");
    if (size) std::memcpy(data, p_, size);
    p_ += size;
    left_ -= size;
  }
  // Reads a count, refused when that many elements of at least `min_bytes`
  // each cannot fit the bytes left.
  std::size_t take_count(std::size_t min_bytes) {
    cereal::size_type count;
    take(&count, sizeof count);
    check(count, min_bytes, left_);
    return std::size_t(count);
  }
  // Refuses `count` elements of at least `min_bytes` each when `left` bytes remain.
  static void check(std::uint64_t count, std::size_t min_bytes, std::size_t left) {
    min_bytes = std::max<std::size_t>(min_bytes, 1);
    if (count > left / min_bytes)
      throw cereal::Exception("gossamer: the body claims " + std::to_string(count) + " elements where only " +
                              std::to_string(left) + " bytes remain (each takes at least " +
                              std::to_string(min_bytes) + ")");
  }
  const std::byte* data() const { return p_; }
  std::size_t left() const { return left_; }

 private:
  const std::byte* p_;
  std::size_t left_;
};

class BoundedInputArchive final
    : public cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision> {
 public:
  BoundedInputArchive(const std::byte* p, std::size_t n) : InputArchive(this), in_(p, n) {}

  void loadBinary(void* data, std::size_t size) { in_.take(data, size); }

  // Refuses `count` elements of at least `min_bytes` each when fewer bytes remain.
  void check_count(std::uint64_t count, std::size_t min_bytes) const {
    BoundedBytes::check(count, min_bytes, in_.left());
  }
  // The same for the size tag about to be read (a container's load reads it
  // first), with the element type the container knows.
  void check_next_count(std::size_t min_bytes) const {
    cereal::size_type count;
    if (in_.left() < sizeof count) return;  // reading the tag fails
    std::memcpy(&count, in_.data(), sizeof count);
    BoundedBytes::check(count, min_bytes, in_.left() - sizeof count);
  }

 private:
  BoundedBytes in_;
};

// The least bytes a value of T takes in a BoundedInputArchive's input.
template <class T>
struct min_encoded_size : std::integral_constant<std::size_t, 1> {};
template <class T>
  requires std::is_arithmetic_v<T> || std::is_enum_v<T>
struct min_encoded_size<T> : std::integral_constant<std::size_t, sizeof(T)> {};
template <class C, class Tr, class A>  // its size tag
struct min_encoded_size<std::basic_string<C, Tr, A>> : std::integral_constant<std::size_t, sizeof(cereal::size_type)> {};
template <class T, class A>
struct min_encoded_size<std::vector<T, A>> : std::integral_constant<std::size_t, sizeof(cereal::size_type)> {};
template <template <class...> class Map, class... Args>
  requires requires { typename Map<Args...>::mapped_type; }
struct min_encoded_size<Map<Args...>> : std::integral_constant<std::size_t, sizeof(cereal::size_type)> {};
template <class A, class B>
struct min_encoded_size<std::pair<A, B>>
    : std::integral_constant<std::size_t, min_encoded_size<A>::value + min_encoded_size<B>::value> {};
template <class... Ts>
struct min_encoded_size<std::tuple<Ts...>>
    : std::integral_constant<std::size_t, (std::size_t(0) + ... + min_encoded_size<Ts>::value)> {};
template <class T, std::size_t N>
struct min_encoded_size<std::array<T, N>> : std::integral_constant<std::size_t, N * min_encoded_size<T>::value> {};

// What cereal's BinaryInputArchive has, for this archive.
template <class T>
  requires std::is_arithmetic_v<T>
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, T& t) {
  ar.loadBinary(std::addressof(t), sizeof t);
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::BinaryData<T>& bd) {
  ar.loadBinary(bd.data, std::size_t(bd.size));
}
template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(BoundedInputArchive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}
// Every count: at least a byte per element (any container, also those
// whose headers codec.hpp does not include).
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::SizeTag<T>& t) {
  ar(t.size);
  ar.check_count(t.size, 1);
}
// The containers cereal sizes from their count before reading the elements
// (vector, string) and the maps: the exact least size of an element first.
// (vector<bool> is cereal's own: a bool is one byte, the check above.)
template <class T, class A>
  requires(!std::is_same_v<T, bool>)
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, std::vector<T, A>& v) {
  ar.check_next_count(min_encoded_size<T>::value);
  cereal::CEREAL_LOAD_FUNCTION_NAME(ar, v);
}
template <class C, class Tr, class A>
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, std::basic_string<C, Tr, A>& s) {
  ar.check_next_count(sizeof(C));
  cereal::CEREAL_LOAD_FUNCTION_NAME(ar, s);
}
template <template <class...> class Map, class... Args, class = typename Map<Args...>::mapped_type>
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, Map<Args...>& m) {
  using M = Map<Args...>;
  ar.check_next_count(min_encoded_size<typename M::key_type>::value + min_encoded_size<typename M::mapped_type>::value);
  cereal::CEREAL_LOAD_FUNCTION_NAME(ar, m);
}

// Trivially copyable values travel as their bytes (a memcpy, whatever
// cereal could do with them); cereal only for the rest.
template <class A>
constexpr bool is_raw_type_v = std::is_trivially_copyable_v<A> && !std::is_pointer_v<A>;

template <class A>
constexpr bool is_cereal_type_v =
    !is_raw_type_v<A> &&
    cereal::traits::is_output_serializable<A, cereal::BinaryOutputArchive>::value &&
    cereal::traits::is_input_serializable<A, BoundedInputArchive>::value;

template <class A>
constexpr void check_sendable() {
  static_assert(!std::is_reference_v<A>, "gossamer: return values, not references");
  static_assert(is_raw_type_v<A> || is_cereal_type_v<A>,
                "gossamer: this argument or result type cannot be sent to a trustee: it is "
                "neither trivially copyable nor serializable. Give it a cereal "
                "`template <class Ar> void serialize(Ar&)` member.");
}

// Types with a direct encoding: the bytes cereal's binary archive writes
// for them (a 64-bit count, then the elements), written and read without an
// archive (its construction and hash maps, its per-field calls): strings,
// vectors of numbers (not of bool, which cereal writes bit by bit) and
// vectors of strings, what most requests carry besides raw values.
template <class A>
struct is_direct_t : std::false_type {};
template <>
struct is_direct_t<std::string> : std::true_type {};
template <class T, class Al>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
struct is_direct_t<std::vector<T, Al>> : std::true_type {};
template <class Al>
struct is_direct_t<std::vector<std::string, Al>> : std::true_type {};
template <class A>
constexpr bool is_direct_v = is_direct_t<A>::value;
template <class A>
constexpr bool is_plain_v = is_raw_type_v<A> || is_direct_v<A>;

template <class A>
std::size_t direct_size(const A& a) {
  if constexpr (is_raw_type_v<A>) {
    return sizeof(A);
  } else if constexpr (std::is_same_v<A, std::string>) {
    return sizeof(cereal::size_type) + a.size();
  } else if constexpr (std::is_same_v<typename A::value_type, std::string>) {
    std::size_t n = sizeof(cereal::size_type);
    for (const std::string& e : a) n += sizeof(cereal::size_type) + e.size();
    return n;
  } else {
    return sizeof(cereal::size_type) + a.size() * sizeof(typename A::value_type);
  }
}

// Hands `a`'s encoding to put(const void*, std::size_t), in order.
template <class A, class Put>
void put_direct(const A& a, Put& put) {
  if constexpr (is_raw_type_v<A>) {
    put(&a, sizeof(A));
  } else {
    const cereal::size_type n = a.size();
    put(&n, sizeof n);
    if constexpr (std::is_same_v<A, std::string>) put(a.data(), a.size());
    else if constexpr (std::is_same_v<typename A::value_type, std::string>) for (const std::string& e : a) put_direct(e, put);
    else put(a.data(), a.size() * sizeof(typename A::value_type));
  }
}

// Reads what put_direct wrote, each length checked against the bytes left
// before anything is sized (BoundedBytes, as BoundedInputArchive does).
class DirectReader {
 public:
  DirectReader(const std::byte* p, std::size_t n) : in_(p, n) {}
  template <class A>
  void get(A& a) {
    if constexpr (is_raw_type_v<A>) {
      in_.take(&a, sizeof(A));
    } else if constexpr (std::is_same_v<A, std::string>) {
      a.resize(in_.take_count(1));
      in_.take(a.data(), a.size());
    } else if constexpr (std::is_same_v<typename A::value_type, std::string>) {
      a.resize(in_.take_count(sizeof(cereal::size_type)));
      for (std::string& e : a) get(e);
    } else {
      using T = typename A::value_type;
      a.resize(in_.take_count(sizeof(T)));
      in_.take(a.data(), a.size() * sizeof(T));
    }
  }

 private:
  BoundedBytes in_;
};

// Raw types first (fixed size, memcpy); raw and direct types written in
// place; one cereal archive for the rest.
template <class... Args>
void encode_args(RecordWriter& w, Args&&... args) {
  constexpr bool any_cereal = (is_cereal_type_v<std::decay_t<Args>> || ...);
  if constexpr (!any_cereal) {
    (w.append(&args, sizeof(std::decay_t<Args>)), ...);
  } else if constexpr ((is_plain_v<std::decay_t<Args>> && ...)) {
    auto put = [&w](const void* d, std::size_t n) { w.append(d, n); };
    (put_direct(args, put), ...);
  } else {
    SinkStream os(&w, nullptr);
    cereal::BinaryOutputArchive ar(os.stream());
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
  } else if constexpr ((is_plain_v<Args> && ...)) {
    DirectReader r(p, n);
    std::tuple<Args...> t;
    std::apply([&](auto&... a) { (r.get(a), ...); }, t);
    return t;
  } else {
    BoundedInputArchive ar(p, n);
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

// A result's bytes travel with a 32-bit length (abi::ResponseHeader), which
// the response writers round up and add a header to: larger results are
// refused with an exception (the caller answers kException), never cut.
inline constexpr std::size_t kMaxResultBytes = UINT32_MAX - 65535;
inline void check_result_size(std::size_t n) {
  if (n > kMaxResultBytes)
    throw std::length_error("gossamer: the result is " + std::to_string(n) + " bytes, over the 4 GiB a response holds");
}

// Encodes a result into `out` (trustee side).
template <class R>
void encode_result(ResponseWriter& out, R& r) {
  if constexpr (is_raw_type_v<R>) {
    std::memcpy(out.reserve(sizeof(R)), &r, sizeof(R));
  } else if constexpr (is_direct_v<R>) {
    const std::size_t size = direct_size(r);
    check_result_size(size);
    std::byte* at = out.reserve(std::uint32_t(size));
    auto put = [&at](const void* d, std::size_t n) {
      if (n) std::memcpy(at, d, n);
      at += n;
    };
    put_direct(r, put);
  } else {
    thread_local std::vector<std::byte> scratch;
    scratch.clear();
    {
      SinkStream os(nullptr, &scratch);
      cereal::BinaryOutputArchive ar(os.stream());
      ar(r);
    }
    check_result_size(scratch.size());
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
  } else if constexpr (is_direct_v<R>) {
    check_result_size(direct_size(r));
    v.resize(direct_size(r));
    std::byte* at = v.data();
    auto put = [&at](const void* d, std::size_t n) {
      if (n) std::memcpy(at, d, n);
      at += n;
    };
    put_direct(r, put);
  } else {
    SinkStream os(nullptr, &v);
    cereal::BinaryOutputArchive ar(os.stream());
    ar(r);
  }
  check_result_size(v.size());
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

CEREAL_REGISTER_ARCHIVE(gossamer::detail::BoundedInputArchive)
// Loads with this archive, saves with cereal's binary output archive (the
// other direction stays BinaryInputArchive's).
namespace cereal::traits::detail {
template <>
struct get_output_from_input<gossamer::detail::BoundedInputArchive> {
  using type = cereal::BinaryOutputArchive;
};
}  // namespace cereal::traits::detail
