// libFuzzer target for the control plane's message codec (DESIGN.md §5:
// fuzzers on every parser): controlplane/src/proto.hpp's Reader/Writer and
// proto.cpp's frame/parse_header. Bodies come from peers (the handshake
// messages before any authentication) and from gossamerctl, so any bytes
// must either decode exactly or be refused, and:
//   - a body that decodes is canonical: re-encoding it gives the same bytes
//     (every field has one encoding; a bool is only 0 or 1), and decoding
//     those bytes gives the same message again;
//   - the encoding is prefix-free: the body less its last byte, or with one
//     more byte, does not decode;
//   - decoding allocates at most kAllocFactor times the body's size (plus a
//     little for one-time statics), accepted or not: a hostile length or
//     count must not buy a big allocation (proto.hpp's promise);
//   - parse_header reads the first 8 bytes as documented, and frame() of a
//     body parses back to its length and type;
//   - the handshake (handshake.hpp), either side, fed the body as any of its
//     messages, never counts as done without the key: an acceptor needs a
//     proof over its own fresh nonce, a dialer a challenge MAC over its own;
//   - the message tags (gossamer/abi/session.hpp) of the body framed with
//     the selector's type verify, and no longer do once any one bit of the
//     header or body is flipped (the tags cover every byte) or the message
//     number differs (a replay).
// Input format: tests/fuzz/fuzz_cp_inputs.hpp (a selector byte, then the
// body).
#include <sanitizer/allocator_interface.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <gossamer/abi/session.hpp>

#include "fuzz_cp_inputs.hpp"
#include "handshake.hpp"
#include "proto.hpp"

namespace {

using namespace gossamer;
using namespace gossamer::fuzz;

void require(bool ok) {
  if (!ok) std::abort();
}

// ---- allocation accounting ---------------------------------------------------
// The sanitizer's malloc hook sees every allocation (operator new included);
// it counts the requested bytes while this thread decodes.
thread_local bool t_counting = false;
thread_local std::size_t t_allocated = 0;

void on_malloc(const volatile void*, std::size_t size) {
  if (t_counting) t_allocated += size;
}
void on_free(const volatile void*) {}

// The densest legitimate decoded form is a list of empty strings: 4 input
// bytes each, sizeof(std::string) == 32 bytes of vector. A lying list count
// then a long string can reach about 9x; 16x leaves room and still catches a
// count trusted at one byte per item (32x and more).
constexpr std::size_t kAllocFactor = 16;
constexpr std::size_t kAllocSlack = 256;  // statics built on a first decode

template <class M>
bool counted_decode(std::string_view body, M& m) {
  t_allocated = 0;
  t_counting = true;
  const bool ok = cp::decode(body, m);
  t_counting = false;
  if (t_allocated > kAllocFactor * body.size() + kAllocSlack) {
    std::fprintf(stderr, "fuzz_cp: decoding a %zu-byte %s body allocated %zu bytes (limit %zux + %zu)\n",
                 body.size(), kCpMessageNames[cp_selector<M>()], t_allocated, kAllocFactor, kAllocSlack);
    std::abort();
  }
  return ok;
}

// ---- a structural dump, independent of the Writer ------------------------------
// Two messages are the same when their dumps are.
struct Dump {
  std::string s;
  void operator()(const std::uint8_t& v) { s += "u8 " + std::to_string(v) + "\n"; }
  void operator()(const bool& v) {
    unsigned char rep;
    std::memcpy(&rep, &v, 1);
    require(rep <= 1);  // the object representation, not just the value
    s += v ? "bool 1\n" : "bool 0\n";
  }
  void operator()(const std::uint32_t& v) { s += "u32 " + std::to_string(v) + "\n"; }
  void operator()(const std::int32_t& v) { s += "i32 " + std::to_string(v) + "\n"; }
  void operator()(const std::uint64_t& v) { s += "u64 " + std::to_string(v) + "\n"; }
  void operator()(const std::string& v) {
    s += "str " + std::to_string(v.size()) + " ";
    s += v;
    s += "\n";
  }
  template <std::size_t N>
  void operator()(const std::array<std::uint8_t, N>& a) {
    s += "arr " + std::to_string(N) + " ";
    s.append(reinterpret_cast<const char*>(a.data()), N);
    s += "\n";
  }
  template <class T>
  void operator()(std::vector<T>& v) {
    s += "list " + std::to_string(v.size()) + "\n";
    for (T& x : v) (*this)(x);
  }
  template <class T>
    requires requires(T& t, Dump& d) { t.io(d); }
  void operator()(T& t) {
    s += "{\n";
    t.io(*this);
    s += "}\n";
  }
};

template <class M>
std::string dump(M& m) {
  Dump d;
  d(m);
  return std::move(d.s);
}

// Message-specific helpers a daemon calls on decoded fields.
template <class M>
void use(const M&) {}
void use(const cp::BulkHello& b) {
  // What the acceptor checks on the run id before anything else.
  require(!cp::valid_run_id(b.run) || (!b.run.empty() && b.run.size() <= cp::kMaxRunId));
}
void use(const cp::Heartbeat& hb) {
  const char* s = cp::to_string(cp::DataplaneState(hb.dataplane));
  require(s != nullptr && *s != '\0');
}

template <class M>
void check_message(std::string_view body) {
  M m;
  if (!counted_decode(body, m)) {
    // Refused again: a decode depends on the bytes alone.
    M again;
    require(!counted_decode(body, again));
    return;
  }
  use(m);
  // Canonical: the same bytes back.
  const std::string enc = cp::encode(m);
  if (enc.size() != body.size() || std::memcmp(enc.data(), body.data(), enc.size()) != 0) {
    std::fprintf(stderr, "fuzz_cp: re-encoding a %zu-byte %s body gave %zu different bytes\n", body.size(),
                 kCpMessageNames[cp_selector<M>()], enc.size());
    std::abort();
  }
  // The same message again, decoded from the re-encoding (an exactly sized
  // heap copy: ASan sees a read past its end).
  auto copy = std::make_unique<char[]>(enc.empty() ? 1 : enc.size());
  std::memcpy(copy.get(), enc.data(), enc.size());
  M m2;
  require(counted_decode(std::string_view(copy.get(), enc.size()), m2));
  const std::string d1 = dump(m);
  require(dump(m2) == d1);
  // Prefix-free: one byte less or one more does not decode.
  if (!body.empty()) {
    M shorter;
    require(!counted_decode(body.substr(0, body.size() - 1), shorter));
  }
  std::string longer(body);
  longer.push_back('\0');
  M extra;
  require(!counted_decode(longer, extra));
}

void check_header(const std::uint8_t* h, std::string_view body) {
  std::uint32_t length = 0;
  cp::Type type{};
  const bool ok = cp::parse_header(h, &length, &type);
  require(length == (std::uint32_t(h[0]) | std::uint32_t(h[1]) << 8 | std::uint32_t(h[2]) << 16 |
                     std::uint32_t(h[3]) << 24));
  require(std::uint16_t(type) == std::uint16_t(h[4] | h[5] << 8));
  require(ok == (h[6] == 0 && h[7] == 0));
  // frame() of this body with that type parses back.
  const std::string f = cp::frame(type, std::string(body));
  require(f.size() == cp::kHeaderBytes + body.size());
  require(f.compare(cp::kHeaderBytes, std::string::npos, body) == 0);
  std::uint32_t length2 = 0;
  cp::Type type2{};
  require(cp::parse_header(reinterpret_cast<const std::uint8_t*>(f.data()), &length2, &type2));
  require(length2 == body.size() && type2 == type);
}

const std::string kKey(32, 'k');
constexpr std::uint64_t kRack = 0x5eed;

// The handshake messages a peer may send before the proof.
constexpr cp::Type kHandshakeTypes[] = {cp::Type::kHello, cp::Type::kBulkHello, cp::Type::kChallenge,
                                        cp::Type::kProof};

void check_handshake(std::uint8_t selector, std::string_view body) {
  const cp::Type t = kHandshakeTypes[selector % 4];
  std::optional<cp::Handshake::Message> reply;
  // An acceptor: a hello may be answered with a challenge; nothing is done.
  auto a = cp::Handshake::acceptor(kKey, kRack, 3);
  const bool ok = a.on_message(t, body, &reply);
  require(!a.done());
  require(ok == (reply.has_value() && reply->type == cp::Type::kChallenge));
  require(ok || !a.error().empty());
  if (ok) {
    require(a.hello_read() && a.peer() < 3);
    // The same bytes as the proof: refused (the MAC covers a fresh nonce).
    require(!a.on_message(cp::Type::kProof, body.substr(0, 32), &reply) && !a.done());
  }
  // A dialer: any bytes as the challenge are refused.
  auto d = cp::Handshake::dialer(kKey, kRack, 0, 1, selector & 1 ? "5eed0123456789ab" : "");
  require(!d.on_message(t, body, &reply) && !d.done() && !reply.has_value());
}

void check_tags(std::uint8_t selector, std::string_view body) {
  abi::SessionKey key{};
  key[0] = selector;
  abi::SessionDirection dir(key);
  const std::string f = cp::frame(cp::Type(selector), std::string(body));
  std::string header = f.substr(0, cp::kHeaderBytes);
  std::string payload = f.substr(cp::kHeaderBytes);
  const abi::SessionTag ht = dir.header_tag(header), bt = dir.body_tag(header, payload);
  auto verifies = [&](const abi::SessionDirection& v) {
    return abi::SessionDirection::equal(v.header_tag(header), ht.data()) &&
           abi::SessionDirection::equal(v.body_tag(header, payload), bt.data());
  };
  require(verifies(dir));
  // A replay: the next message number does not take it.
  abi::SessionDirection later = dir;
  later.advance();
  require(!abi::SessionDirection::equal(later.header_tag(header), ht.data()));
  require(!abi::SessionDirection::equal(later.body_tag(header, payload), bt.data()));
  // One bit flipped anywhere, chosen by the body: refused.
  const std::size_t total = header.size() + payload.size();
  std::size_t at = 0;
  for (char c : body) at = at * 131 + std::uint8_t(c);
  at %= total;
  std::string& where = at < header.size() ? header : payload;
  where[at < header.size() ? at : at - header.size()] ^= char(1u << (selector % 8));
  require(!verifies(dir));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // An exactly sized heap copy of the body, so that ASan sees a read one
  // byte past its end.
  const std::size_t n = size - 1;
  auto buf = std::make_unique<char[]>(n ? n : 1);
  if (n) std::memcpy(buf.get(), data + 1, n);
  const std::string_view body(buf.get(), n);
  with_cp_message(data[0], [&]<class M>(const M&) { check_message<M>(body); });
  if (size >= cp::kHeaderBytes) check_header(data, body);
  check_handshake(data[0], body);
  check_tags(data[0], body);
  return 0;
}
