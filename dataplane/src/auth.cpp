// Frame keys and tags (auth.hpp).
#include "auth.hpp"

#include <cstring>

#include <sodium.h>

namespace gossamer::dataplane {

static_assert(crypto_shorthash_siphashx24_BYTES == kTagBytes);
static_assert(crypto_shorthash_siphashx24_KEYBYTES == sizeof(FrameKey));

std::string FrameAuth::set_secret(const std::string& secret) {
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
  static constexpr char kLabel[] = "gossamer frame keys v1";
  crypto_generichash(master_, sizeof master_, reinterpret_cast<const unsigned char*>(kLabel), sizeof kLabel - 1, k,
                     klen);
  sodium_memzero(k, sizeof k);
  return "";
}

FrameKey FrameAuth::key(std::uint32_t src, std::uint32_t dst, std::uint64_t boot) const {
  std::uint8_t in[16];
  std::memcpy(in, &src, 4);
  std::memcpy(in + 4, &dst, 4);
  std::memcpy(in + 8, &boot, 8);
  FrameKey out;
  crypto_generichash(out.bytes, sizeof out.bytes, in, sizeof in, master_, sizeof master_);
  return out;
}

void FrameAuth::sign(const FrameKey& k, const std::uint8_t* data, std::size_t len, std::uint8_t* tag) {
  crypto_shorthash_siphashx24(tag, data, len, k.bytes);
}

bool FrameAuth::verify(const FrameKey& k, const std::uint8_t* data, std::size_t len, const std::uint8_t* tag) {
  std::uint8_t want[kTagBytes];
  crypto_shorthash_siphashx24(want, data, len, k.bytes);
  return sodium_memcmp(want, tag, kTagBytes) == 0;
}

}  // namespace gossamer::dataplane
