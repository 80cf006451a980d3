// The peer handshake of proto.hpp, for both sides (dialer and acceptor) and
// both kinds of connection (mesh and bulk), as one state machine without
// sockets: the caller sends what it returns and feeds it what it reads,
// until done() or a failure. gossamerd's mesh and bulk code both run it
// (mesh.cpp, bulk.cpp); tests/controlplane/handshake_test.cpp plays the two
// sides against each other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <gossamer/abi/session.hpp>

#include "proto.hpp"

namespace gossamer::cp {

class Handshake {
 public:
  struct Message {
    Type type;
    std::string body;
  };

  // `key`: the handshake key (proto.hpp's handshake_key(), not the secret).
  // The dialer's side: host `self` dials host `peer` (a higher index). A
  // non-empty `run` makes it a bulk connection of that run.
  static Handshake dialer(std::string key, std::uint64_t rack, std::uint32_t self, std::uint32_t peer,
                          std::string run = "");
  // The acceptor's side: who dials, and for what, comes with the hello.
  static Handshake acceptor(std::string key, std::uint64_t rack, std::uint32_t self);

  // The dialer's first message: a Hello, or a BulkHello.
  Message hello() const;
  // Takes one message read from the connection. False on a failure (error()
  // says why, for a log line; the caller closes the connection); else
  // *reply is what to send, if anything.
  bool on_message(Type t, std::string_view body, std::optional<Message>* reply);

  bool dialing() const { return dialer_; }
  // The other side proved that it knows the key (the acceptor: the proof
  // verified; the dialer: the challenge verified and the proof is sent).
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }
  // What the acceptor knows once it read the hello (the dialer from the start).
  bool bulk() const { return bulk_; }
  bool hello_read() const { return peer_ != kNoHost; }
  std::uint32_t peer() const { return peer_; }  // kNoHost before the hello
  const std::string& run() const { return run_; }
  const std::string& error() const { return error_; }

  // Once done(): this end's keys for the messages after the proof
  // (gossamer/abi/session.hpp), bound to this handshake (both nonces, both
  // hosts, the rack, the kind and the run). kLink: the daemons' link; on a
  // bulk connection kInstance: the instances', after the hand-over.
  enum class KeyUse : char { kLink = 'L', kInstance = 'I' };
  abi::SessionKeys keys(KeyUse use) const;

  static constexpr std::uint32_t kNoHost = UINT32_MAX;

 private:
  enum class State { kHello, kChallenge, kProof, kDone, kFailed };
  Handshake() = default;
  bool fail(std::string why);
  Mac mac(Role mesh_role, Role bulk_role, const Nonce& dialer_nonce, const Nonce& acceptor_nonce) const;

  std::string key_;
  std::uint64_t rack_ = 0;
  std::uint32_t self_ = 0;
  std::uint32_t peer_ = kNoHost;
  bool dialer_ = false;
  bool bulk_ = false;
  std::string run_;
  Nonce mine_{}, theirs_{};
  State state_ = State::kHello;
  std::string error_;
};

}  // namespace gossamer::cp
