// Authenticated messages on the control plane's TCP connections, after the
// pre-shared-key handshake (controlplane/README.md, "Authentication"): between
// gossamerds (controlplane/src/link.hpp) and between a run's instances on the
// bulk connections gossamerd hands them (runtime/src/bulk.cpp). One rule,
// here, that both call:
//
//   message n of one direction (n = 0, 1, ...: counted by both ends, never sent)
//     = header | header tag | body | body tag
//   header tag = HMAC-SHA256(key, 'h' | n | header)[0, 16)
//   body tag   = HMAC-SHA256(key, 'b' | n | header | body)[0, 16)
//   (n as 8 bytes little-endian; key: 32 bytes, one per direction)
//
// The header tag lets the receiver trust the header (its length above all)
// before it allocates or reads the body. Both tags bind n, so a message that
// is injected, replayed, reordered, dropped or cut short fails at the first
// tag after it, and the receiver closes the connection: nothing resynchronizes.
// The keys come from the handshake (controlplane/src/handshake.hpp); a bulk
// connection's instance keys reach the instance in GOSSAMER_BULK.
//
// HMAC-SHA256 from OpenSSL's libcrypto: the handshake's MAC already, with
// SHA-NI in hardware on current x86; tags compared with CRYPTO_memcmp.
#pragma once

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

namespace gossamer::abi {

inline constexpr std::size_t kSessionKeyBytes = 32;
inline constexpr std::size_t kSessionTagBytes = 16;
using SessionKey = std::array<std::uint8_t, kSessionKeyBytes>;
using SessionTag = std::array<std::uint8_t, kSessionTagBytes>;

// A connection's two keys, seen from one end.
struct SessionKeys {
  SessionKey send{};
  SessionKey receive{};
};

// One direction of a connection: its key and the number of the next message.
//
// The key is set into an OpenSSL HMAC context once, when the object is made
// (the key's inner and outer pads hashed, the digest fetched); each tag then
// re-initialises that keyed context (EVP_MAC_init without a key: back to the
// state right after keying) instead of building and keying a new one, which
// cost a context allocation, a digest fetch and two SHA-256 blocks per tag.
// A copy duplicates the keyed context (EVP_MAC_CTX_dup), so copies tag
// independently. One object is used by one thread at a time (its number
// changes too); tag() is const but uses the context.
class SessionDirection {
 public:
  SessionDirection() = default;
  explicit SessionDirection(const SessionKey& key) : key_(key), ctx_(keyed(key)) {}
  SessionDirection(const SessionDirection& o) : key_(o.key_), n_(o.n_), ctx_(o.ctx_ ? dup(o.ctx_) : nullptr) {}
  SessionDirection(SessionDirection&& o) noexcept : key_(o.key_), n_(o.n_), ctx_(o.ctx_) { o.ctx_ = nullptr; }
  SessionDirection& operator=(SessionDirection o) noexcept {
    key_ = o.key_;
    n_ = o.n_;
    std::swap(ctx_, o.ctx_);
    return *this;
  }
  ~SessionDirection() { EVP_MAC_CTX_free(ctx_); }

  std::uint64_t next() const { return n_; }
  SessionTag header_tag(std::string_view header) const { return tag('h', header, {}); }
  SessionTag body_tag(std::string_view header, std::string_view body) const { return tag('b', header, body); }
  static bool equal(const SessionTag& a, const std::uint8_t* b) {
    return CRYPTO_memcmp(a.data(), b, a.size()) == 0;
  }
  // After each message, sent or received.
  void advance() { ++n_; }

 private:
  [[noreturn]] static void fail() {
    // No HMAC in libcrypto is not something to work around.
    std::fprintf(stderr, "gossamer: OpenSSL HMAC-SHA256 failed\n");
    std::abort();
  }
  static EVP_MAC_CTX* keyed(const SessionKey& key) {
    // The HMAC algorithm is looked up once (thread-safe static).
    static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    EVP_MAC_CTX* ctx = hmac ? EVP_MAC_CTX_new(hmac) : nullptr;
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_construct_end()};
    if (!ctx || EVP_MAC_init(ctx, key.data(), key.size(), params) != 1) fail();
    return ctx;
  }
  static EVP_MAC_CTX* dup(const EVP_MAC_CTX* ctx) {
    EVP_MAC_CTX* c = EVP_MAC_CTX_dup(ctx);
    if (!c) fail();
    return c;
  }

  SessionTag tag(char part, std::string_view header, std::string_view body) const {
    if (!ctx_) ctx_ = keyed(key_);  // default-constructed: the zero key
    std::uint8_t prefix[9];
    prefix[0] = std::uint8_t(part);
    for (int i = 0; i < 8; ++i) prefix[1 + i] = std::uint8_t(n_ >> (8 * i));
    std::uint8_t out[32];
    std::size_t len = 0;
    const bool ok = EVP_MAC_init(ctx_, nullptr, 0, nullptr) == 1 && EVP_MAC_update(ctx_, prefix, sizeof prefix) == 1 &&
                    EVP_MAC_update(ctx_, reinterpret_cast<const unsigned char*>(header.data()), header.size()) == 1 &&
                    (body.empty() ||
                     EVP_MAC_update(ctx_, reinterpret_cast<const unsigned char*>(body.data()), body.size()) == 1) &&
                    EVP_MAC_final(ctx_, out, &len, sizeof out) == 1 && len == sizeof out;
    if (!ok) fail();
    SessionTag t;
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = out[i];
    return t;
  }

  SessionKey key_{};
  std::uint64_t n_ = 0;
  mutable EVP_MAC_CTX* ctx_ = nullptr;  // keyed with key_; null until needed
};

// Hex for GOSSAMER_BULK (64 digits); false if `hex` is not exactly a key.
inline std::string session_key_hex(const SessionKey& k) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::uint8_t b : k) s += digits[b >> 4], s += digits[b & 15];
  return s;
}
inline bool parse_session_key(std::string_view hex, SessionKey* k) {
  if (hex.size() != 2 * kSessionKeyBytes) return false;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < kSessionKeyBytes; ++i) {
    const int hi = nib(hex[2 * i]), lo = nib(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*k)[i] = std::uint8_t(hi << 4 | lo);
  }
  return true;
}

}  // namespace gossamer::abi
