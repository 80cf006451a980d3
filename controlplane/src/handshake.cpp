#include "handshake.hpp"

#include <utility>

namespace gossamer::cp {

Handshake Handshake::dialer(std::string key, std::uint64_t rack, std::uint32_t self, std::uint32_t peer,
                            std::string run) {
  Handshake h;
  h.key_ = std::move(key);
  h.rack_ = rack;
  h.self_ = self;
  h.peer_ = peer;
  h.dialer_ = true;
  h.bulk_ = !run.empty();
  h.run_ = std::move(run);
  h.mine_ = random_nonce();
  h.state_ = State::kChallenge;
  return h;
}

Handshake Handshake::acceptor(std::string key, std::uint64_t rack, std::uint32_t self) {
  Handshake h;
  h.key_ = std::move(key);
  h.rack_ = rack;
  h.self_ = self;
  h.mine_ = random_nonce();
  h.state_ = State::kHello;
  return h;
}

Handshake::Message Handshake::hello() const {
  if (bulk_) {
    BulkHello b;
    b.host = self_;
    b.rack = rack_;
    b.nonce = mine_;
    b.run = run_;
    return {Type::kBulkHello, encode(b)};
  }
  Hello h;
  h.host = self_;
  h.rack = rack_;
  h.nonce = mine_;
  return {Type::kHello, encode(h)};
}

bool Handshake::fail(std::string why) {
  state_ = State::kFailed;
  error_ = std::move(why);
  return false;
}

// The MAC of a side with the role given for each kind of connection.
Mac Handshake::mac(Role mesh_role, Role bulk_role, const Nonce& dialer_nonce, const Nonce& acceptor_nonce) const {
  const std::uint32_t d = dialer_ ? self_ : peer_, a = dialer_ ? peer_ : self_;
  return bulk_ ? bulk_mac(key_, bulk_role, dialer_nonce, acceptor_nonce, d, a, rack_, run_)
               : handshake_mac(key_, mesh_role, dialer_nonce, acceptor_nonce, d, a, rack_);
}

bool Handshake::on_message(Type t, std::string_view body, std::optional<Message>* reply) {
  reply->reset();
  switch (state_) {
    case State::kHello: {  // the acceptor
      Hello h;
      if (t == Type::kBulkHello) {
        BulkHello b;
        bulk_ = true;
        if (!decode(body, b)) return fail("malformed bulk hello");
        if (!valid_run_id(b.run)) return fail("bad run id in a bulk hello");
        h = Hello{b.version, b.host, b.rack, b.nonce};
        run_ = std::move(b.run);
      } else if (t != Type::kHello || !decode(body, h)) {
        return fail("expected a hello");
      }
      if (h.version != kVersion)
        return fail("protocol version " + std::to_string(h.version) + ", this daemon speaks " +
                    std::to_string(kVersion));
      if (h.host >= self_)
        return fail("host index " + std::to_string(h.host) + " may not dial host " + std::to_string(self_));
      if (h.rack != rack_) return fail("host " + std::to_string(h.host) + " has a different rack section");
      peer_ = h.host;
      theirs_ = h.nonce;
      Challenge c;
      c.host = self_;
      c.nonce = mine_;
      c.mac = mac(Role::kAcceptor, Role::kBulkAcceptor, theirs_, mine_);
      *reply = Message{Type::kChallenge, encode(c)};
      state_ = State::kProof;
      return true;
    }
    case State::kChallenge: {  // the dialer
      Challenge c;
      if (t != Type::kChallenge || !decode(body, c)) return fail("expected a challenge");
      if (c.host != peer_)
        return fail("the challenge comes from host " + std::to_string(c.host) + ", not host " +
                    std::to_string(peer_));
      theirs_ = c.nonce;
      if (!mac_equal(c.mac, mac(Role::kAcceptor, Role::kBulkAcceptor, mine_, theirs_)))
        return fail("wrong pre-shared key, or not a gossamerd");
      Proof p;
      p.mac = mac(Role::kDialer, Role::kBulkDialer, mine_, theirs_);
      *reply = Message{Type::kProof, encode(p)};
      state_ = State::kDone;
      return true;
    }
    case State::kProof: {  // the acceptor
      Proof p;
      if (t != Type::kProof || !decode(body, p)) return fail("expected a proof");
      if (!mac_equal(p.mac, mac(Role::kDialer, Role::kBulkDialer, theirs_, mine_)))
        return fail("wrong pre-shared key (claimed to be host " + std::to_string(peer_) + ")");
      state_ = State::kDone;
      return true;
    }
    case State::kDone:
    case State::kFailed:
      break;
  }
  return fail("the handshake is over");
}

abi::SessionKeys Handshake::keys(KeyUse use) const {
  const std::uint32_t d = dialer_ ? self_ : peer_, a = dialer_ ? peer_ : self_;
  const Nonce& nd = dialer_ ? mine_ : theirs_;
  const Nonce& na = dialer_ ? theirs_ : mine_;
  auto key = [&](char sender) {
    return session_key(key_, char(use), bulk_ ? 'b' : 'm', sender, nd, na, d, a, rack_, run_);
  };
  abi::SessionKeys k;
  k.send = key(dialer_ ? 'D' : 'A');
  k.receive = key(dialer_ ? 'A' : 'D');
  return k;
}

}  // namespace gossamer::cp
