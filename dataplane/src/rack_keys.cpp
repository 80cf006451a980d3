// Keys from the rack secret and run tokens (rack_keys.hpp).
#include "rack_keys.hpp"

#include <cstring>

#include <sodium.h>

namespace gossamer::dataplane {

static_assert(crypto_generichash_BYTES == std::tuple_size_v<SecretKey>);
static_assert(crypto_generichash_BYTES == abi::kRunTokenBytes);

std::string derive_secret_key(const std::string& secret, std::string_view label, SecretKey* out) {
  if (sodium_init() < 0) return "libsodium cannot initialise";
  if (secret.size() < 16) return "the rack secret has " + std::to_string(secret.size()) + " bytes; at least 16 needed";
  // BLAKE2b takes keys of 16 to 64 bytes: a longer secret is hashed first.
  std::uint8_t k[crypto_generichash_KEYBYTES_MAX];
  std::size_t klen = secret.size();
  if (klen > sizeof k) {
    crypto_generichash(k, sizeof k, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), nullptr, 0);
    klen = sizeof k;
  } else {
    std::memcpy(k, secret.data(), klen);
  }
  crypto_generichash(out->data(), out->size(), reinterpret_cast<const unsigned char*>(label.data()), label.size(), k,
                     klen);
  sodium_memzero(k, sizeof k);
  return "";
}

std::string RunTokens::set_secret(const std::string& secret) {
  std::string err = derive_secret_key(secret, "gossamer run tokens v1", &key_);
  ready_ = err.empty();
  return err;
}

RunToken RunTokens::token(std::string_view run_id, std::uint32_t host) const {
  crypto_generichash_state st;
  crypto_generichash_init(&st, key_.data(), key_.size(), abi::kRunTokenBytes);
  std::uint8_t h[4];
  for (int i = 0; i < 4; ++i) h[i] = std::uint8_t(host >> (8 * i));
  crypto_generichash_update(&st, h, sizeof h);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(run_id.data()), run_id.size());
  RunToken t;
  crypto_generichash_final(&st, t.data(), t.size());
  return t;
}

bool RunTokens::verify(std::string_view run_id, std::uint32_t host, const RunToken& given) const {
  if (!ready_) return false;
  RunToken want = token(run_id, host);
  return sodium_memcmp(want.data(), given.data(), want.size()) == 0;
}

std::string RunTokens::to_hex(const RunToken& t) {
  char hex[2 * abi::kRunTokenBytes + 1];
  sodium_bin2hex(hex, sizeof hex, t.data(), t.size());
  return hex;
}

bool RunTokens::from_hex(std::string_view hex, RunToken* out) {
  if (hex.size() != 2 * abi::kRunTokenBytes) return false;
  std::size_t n = 0;
  const char* end = nullptr;
  return sodium_hex2bin(out->data(), out->size(), hex.data(), hex.size(), nullptr, &n, &end) == 0 &&
         n == out->size() && end == hex.data() + hex.size();
}

}  // namespace gossamer::dataplane
