// Keys derived from the rack secret (controlplane.psk_file), one function
// for every use, each under its own label:
//   key(label) = BLAKE2b-256(key = secret, label)
// (a secret longer than BLAKE2b's 64-byte key is hashed to 64 bytes first).
// "gossamer frame keys v1" is the master of the frame keys (auth.hpp);
// "gossamer run tokens v1" keys the run tokens below.
//
// Run tokens (SECURITY.md "Runs and users"): gossamerd gives the instance it
// starts on host h for run `id` the token
//   token(id, h) = BLAKE2b-256(key = key("gossamer run tokens v1"), u32 h | id)
// (GOSSAMER_RUN_TOKEN, gossamer/abi/attach.hpp), and the dataplane of host h
// admits an instance to a run id gossamerd issued only with that token,
// compared in constant time. Only holders of the secret can compute one, a
// token is good for one run on one host, and the dataplane needs no channel
// to gossamerd to check it.
//
// Linked by the dataplane and by gossamerd; libsodium, as for the frame tags.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <gossamer/abi/attach.hpp>

namespace gossamer::dataplane {

using SecretKey = std::array<std::uint8_t, 32>;
using RunToken = std::array<std::uint8_t, abi::kRunTokenBytes>;

// key(label) above; "" or an error (a secret under 16 bytes, no libsodium).
std::string derive_secret_key(const std::string& secret, std::string_view label, SecretKey* out);

class RunTokens {
 public:
  // From the secret's bytes. Returns "" or an error.
  std::string set_secret(const std::string& secret);
  bool has_secret() const { return ready_; }
  RunToken token(std::string_view run_id, std::uint32_t host) const;
  // Constant time; false without a secret.
  bool verify(std::string_view run_id, std::uint32_t host, const RunToken& given) const;

  static std::string to_hex(const RunToken& t);
  // False unless `hex` is exactly 2 * kRunTokenBytes hex digits.
  static bool from_hex(std::string_view hex, RunToken* out);

 private:
  SecretKey key_{};
  bool ready_ = false;
};

}  // namespace gossamer::dataplane
