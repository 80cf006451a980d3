// Frame authentication (DESIGN.md §6). Every frame's UDP payload (header and
// records) is followed by a 16-byte tag: keyed SipHash-2-4 with 128-bit output
// (libsodium's crypto_shorthash_siphashx24), checked in constant time before
// any field but the few needed to pick the key is trusted.
//
// Keys are per direction of a host pair and per sender incarnation, derived
// from the rack secret (controlplane.psk_file) with keyed BLAKE2b
// (rack_keys.hpp):
//   master        = BLAKE2b-256(key = secret, "gossamer frame keys v1")
//   key(s, d, b)  = BLAKE2b-128(key = master, s | d | b)   (little-endian u32, u32, u64)
// So a frame that claims a new incarnation of its sender (a restart) verifies
// only under that incarnation's key, which only holders of the secret can
// compute; a replayed frame carries an old incarnation or an old sequence
// number and meets the connection's stale and duplicate checks.
//
// libsodium rather than OpenSSL's EVP_MAC: one plain function call per frame,
// no context to allocate or reset, and sodium_memcmp for the comparison.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "wire.hpp"

namespace gossamer::dataplane {

using wire::kTagBytes;

struct FrameKey {
  std::uint8_t bytes[16];
};

class FrameAuth {
 public:
  // From the secret's bytes (at least 16). Returns "" or an error.
  std::string set_secret(const std::string& secret);
  // Frames from host `src` in incarnation `boot` to host `dst`.
  FrameKey key(std::uint32_t src, std::uint32_t dst, std::uint64_t boot) const;
  // The tag of `len` bytes, written to `tag`.
  static void sign(const FrameKey& k, const std::uint8_t* data, std::size_t len, std::uint8_t* tag);
  static bool verify(const FrameKey& k, const std::uint8_t* data, std::size_t len, const std::uint8_t* tag);

 private:
  std::uint8_t master_[32] = {};
};

}  // namespace gossamer::dataplane
