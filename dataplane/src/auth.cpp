// Frame keys and tags (auth.hpp).
#include "auth.hpp"

#include <cstring>

#include <sodium.h>

#include "rack_keys.hpp"

namespace gossamer::dataplane {

static_assert(crypto_shorthash_siphashx24_BYTES == kTagBytes);
static_assert(crypto_shorthash_siphashx24_KEYBYTES == sizeof(FrameKey));

std::string FrameAuth::set_secret(const std::string& secret) {
  SecretKey master{};
  if (std::string err = derive_secret_key(secret, "gossamer frame keys v1", &master); !err.empty()) return err;
  static_assert(sizeof master_ == sizeof master);
  std::memcpy(master_, master.data(), sizeof master_);
  sodium_memzero(master.data(), master.size());
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
