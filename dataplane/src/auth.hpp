// Frame authentication (DESIGN.md §6). Every frame's UDP payload (header and
// records) is followed by a 24-byte trailer: an 8-byte nonce and a 16-byte
// tag, the GMAC of the payload (AES-256-GCM with the payload as associated
// data and nothing encrypted), checked in constant time before any field but
// the few needed to pick the key is trusted.
//
// Keys are per direction of a host pair and per sender incarnation, derived
// from the rack secret (controlplane.psk_file) with keyed BLAKE2b
// (rack_keys.hpp):
//   master        = BLAKE2b-256(key = secret, "gossamer frame keys v1")
//   key(s, d, b)  = BLAKE2b-256(key = master, s | d | b)   (little-endian u32, u32, u64)
// So a frame that claims a new incarnation of its sender (a restart) verifies
// only under that incarnation's key, which only holders of the secret can
// compute; a replayed frame carries an old incarnation or an old sequence
// number and meets the connection's stale and duplicate checks.
//
// GCM must never see one nonce twice under a key. The nonce is one
// little-endian u64: the sending core's index in the top 8 bits and how many
// frames that core has signed in the low 56 (GCM's 96-bit nonce is those 8
// bytes and 4 of zero). A key belongs to one incarnation of one sender (the
// incarnation only grows, incarnation.hpp), and each of its cores (at most
// 8, dataplane.cores) counts its own frames from 0, so no (key, nonce) pair
// repeats: 2^56 frames are 228 years at 10 M frames/s. A retransmission is a
// new frame with a new nonce. A dataplane whose memory is copied while it
// runs and then resumed twice (a VM snapshot restored, a CRIU checkpoint)
// would sign again with counts it has used: that is not supported
// (SECURITY.md).
//
// GMAC rather than the keyed SipHash-2-4 of wire version 6: with AES-NI and
// PCLMULQDQ it tags 4 KiB in ~1,900 cycles against SipHash's ~3,900, and
// below 100 bytes both take 105-160 (dataplane/README.md "Authentication"). libsodium's
// AES-GCM needs those instructions; without them (crypto_aead_aes256gcm_
// is_available() false) OpenSSL's EVP computes the same tags in software, so
// a rack may mix CPUs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sodium.h>

#include "wire.hpp"

namespace gossamer::dataplane {

using wire::kTagBytes;
inline constexpr std::size_t kNonceBytes = 8;  // on the wire
inline constexpr std::size_t kMacOffset = kNonceBytes;
inline constexpr std::size_t kMacBytes = 16;
static_assert(kTagBytes == kMacOffset + kMacBytes);

struct FrameKey {
  crypto_aead_aes256gcm_state gcm;  // the expanded key (libsodium), when available
  std::uint8_t bytes[32];           // the key itself (the portable path)
  // Which key it is, from public values only (src, dst, incarnation): the
  // portable path files its per-thread OpenSSL context under it, so the
  // entry a frame uses says nothing about the key's bytes.
  std::uint64_t id = 0;
};

class FrameAuth {
 public:
  // From the secret's bytes (at least 16). Returns "" or an error.
  std::string set_secret(const std::string& secret);
  // Frames from host `src` in incarnation `boot` to host `dst`.
  FrameKey key(std::uint32_t src, std::uint32_t dst, std::uint64_t boot) const;
  // Writes the trailer of `len` bytes at `trailer` (kTagBytes): the nonce
  // (core < 256, count < 2^56) and the tag. The caller never passes a (core, count)
  // twice for one key. False (nothing to send) if either is out of range or
  // the software path could not run (OpenSSL out of memory).
  [[nodiscard]] static bool sign(const FrameKey& k, std::uint32_t core, std::uint64_t count, const std::uint8_t* data,
                   std::size_t len, std::uint8_t* trailer);
  static bool verify(const FrameKey& k, const std::uint8_t* data, std::size_t len, const std::uint8_t* trailer);

  // Whether this CPU takes libsodium's AES-GCM (else OpenSSL's, in software).
  static bool accelerated();
  // Tests: force the portable path (true) or the detected one (false).
  static void force_portable(bool yes);

 private:
  std::uint8_t master_[32] = {};
};

}  // namespace gossamer::dataplane
