// The peer handshake's state machine (controlplane/src/handshake.hpp), both
// sides played against each other without sockets: an honest pair, and every
// way one side may lie (wrong key, wrong host, wrong rack, another run);
// the session keys both sides derive from it.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

#include "handshake.hpp"

namespace gossamer::cp {
namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef";
constexpr std::uint64_t kRack = 0x1234'5678'9abc'def0ull;

using Msg = std::optional<Handshake::Message>;

// Delivers `m` to `to`; returns its reply (nullopt for none) or fails the test.
Msg deliver(Handshake& to, const Handshake::Message& m) {
  Msg reply;
  EXPECT_TRUE(to.on_message(m.type, m.body, &reply)) << to.error();
  return reply;
}

struct Outcome {
  bool acceptor_done = false, dialer_done = false;
  std::string acceptor_error, dialer_error;
};

// Runs the whole exchange D -> A hello, A -> D challenge, D -> A proof, with
// the messages as they are: the first refusal ends it.
Outcome play(Handshake d, Handshake a) {
  Outcome o;
  Msg reply;
  auto hello = d.hello();
  if (a.on_message(hello.type, hello.body, &reply)) {
    EXPECT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, Type::kChallenge);
    Msg proof;
    if (d.on_message(reply->type, reply->body, &proof)) {
      EXPECT_TRUE(proof.has_value());
      EXPECT_EQ(proof->type, Type::kProof);
      Msg none;
      a.on_message(proof->type, proof->body, &none);
      EXPECT_FALSE(none.has_value());
    }
  }
  o.acceptor_done = a.done();
  o.dialer_done = d.done();
  o.acceptor_error = a.error();
  o.dialer_error = d.error();
  return o;
}

TEST(Handshake, MeshBothSidesAgree) {
  auto d = Handshake::dialer(kKey, kRack, 0, 2);
  auto a = Handshake::acceptor(kKey, kRack, 2);
  EXPECT_EQ(d.hello().type, Type::kHello);
  Msg challenge = deliver(a, d.hello());
  ASSERT_TRUE(challenge);
  EXPECT_TRUE(a.hello_read());
  EXPECT_EQ(a.peer(), 0u);
  EXPECT_FALSE(a.bulk());
  EXPECT_FALSE(a.done());
  Msg proof = deliver(d, *challenge);
  ASSERT_TRUE(proof);
  EXPECT_TRUE(d.done());
  EXPECT_FALSE(deliver(a, *proof));
  EXPECT_TRUE(a.done());
  // Nothing more is a handshake message.
  Msg none;
  EXPECT_FALSE(a.on_message(Type::kProof, proof->body, &none));
}

TEST(Handshake, BulkBothSidesAgreeOnTheRun) {
  auto d = Handshake::dialer(kKey, kRack, 1, 2, "00112233aabbccdd");
  auto a = Handshake::acceptor(kKey, kRack, 2);
  EXPECT_EQ(d.hello().type, Type::kBulkHello);
  auto o = play(d, a);
  EXPECT_TRUE(o.dialer_done) << o.dialer_error;
  EXPECT_TRUE(o.acceptor_done) << o.acceptor_error;
  auto a2 = Handshake::acceptor(kKey, kRack, 2);
  deliver(a2, d.hello());
  EXPECT_TRUE(a2.bulk());
  EXPECT_EQ(a2.run(), "00112233aabbccdd");
  EXPECT_EQ(a2.peer(), 1u);
}

TEST(Handshake, BothSidesDeriveTheSameSessionKeysBoundToTheHandshake) {
  using Use = Handshake::KeyUse;
  auto run = [](std::string bulk_run) {
    auto d = Handshake::dialer(kKey, kRack, 0, 2, bulk_run);
    auto a = Handshake::acceptor(kKey, kRack, 2);
    Msg challenge = deliver(a, d.hello());
    deliver(a, *deliver(d, *challenge));
    EXPECT_TRUE(d.done() && a.done());
    return std::pair{d, a};
  };
  auto [d, a] = run("");
  for (Use use : {Use::kLink, Use::kInstance}) {
    EXPECT_EQ(d.keys(use).send, a.keys(use).receive);
    EXPECT_EQ(d.keys(use).receive, a.keys(use).send);
    EXPECT_NE(d.keys(use).send, d.keys(use).receive);  // one key per direction
  }
  EXPECT_NE(d.keys(Use::kLink).send, d.keys(Use::kInstance).send);
  // Another handshake (other nonces), or a bulk one: other keys.
  auto [d2, a2] = run("");
  EXPECT_NE(d.keys(Use::kLink).send, d2.keys(Use::kLink).send);
  auto [db, ab] = run("00112233aabbccdd");
  EXPECT_EQ(db.keys(Use::kInstance).send, ab.keys(Use::kInstance).receive);
  EXPECT_NE(db.keys(Use::kLink).send, d.keys(Use::kLink).send);
}

TEST(Handshake, WrongKeyIsRefusedByBothSides) {
  // The acceptor has another key: the dialer refuses its challenge.
  auto o = play(Handshake::dialer(kKey, kRack, 0, 1), Handshake::acceptor(kKey + "x", kRack, 1));
  EXPECT_FALSE(o.dialer_done);
  EXPECT_FALSE(o.acceptor_done);
  EXPECT_NE(o.dialer_error.find("wrong pre-shared key"), std::string::npos) << o.dialer_error;

  // The dialer has another key, and proves it anyway (a dialer that skips
  // checking the challenge): the acceptor refuses the proof.
  auto d = Handshake::dialer(kKey + "x", kRack, 0, 1);
  auto a = Handshake::acceptor(kKey, kRack, 1);
  Msg challenge = deliver(a, d.hello());
  ASSERT_TRUE(challenge);
  Challenge c;
  ASSERT_TRUE(decode(challenge->body, c));
  Hello h;
  ASSERT_TRUE(decode(d.hello().body, h));
  Proof p;
  p.mac = handshake_mac(kKey + "x", Role::kDialer, h.nonce, c.nonce, 0, 1, kRack);
  Msg none;
  EXPECT_FALSE(a.on_message(Type::kProof, encode(p), &none));
  EXPECT_FALSE(a.done());
  EXPECT_NE(a.error().find("wrong pre-shared key (claimed to be host 0)"), std::string::npos) << a.error();
}

TEST(Handshake, WrongHostIsRefused) {
  // A dialer may only dial a higher index.
  auto o = play(Handshake::dialer(kKey, kRack, 2, 1), Handshake::acceptor(kKey, kRack, 1));
  EXPECT_FALSE(o.acceptor_done);
  EXPECT_NE(o.acceptor_error.find("may not dial"), std::string::npos) << o.acceptor_error;
  // A challenge from another host than the one dialed (host 2 answering for
  // host 1, with the right key): the dialer refuses it.
  o = play(Handshake::dialer(kKey, kRack, 0, 1), Handshake::acceptor(kKey, kRack, 2));
  EXPECT_FALSE(o.dialer_done);
  EXPECT_NE(o.dialer_error.find("from host 2, not host 1"), std::string::npos) << o.dialer_error;
  // A proof replayed into a handshake with another claimed host: the MACs
  // bind both host indexes.
  auto d = Handshake::dialer(kKey, kRack, 0, 2);
  auto a = Handshake::acceptor(kKey, kRack, 2);
  Msg challenge = deliver(a, d.hello());
  Msg proof = deliver(d, *challenge);
  auto d1 = Handshake::dialer(kKey, kRack, 1, 2);
  auto a1 = Handshake::acceptor(kKey, kRack, 2);
  deliver(a1, d1.hello());
  Msg none;
  EXPECT_FALSE(a1.on_message(proof->type, proof->body, &none));
}

TEST(Handshake, WrongRackIsRefused) {
  auto o = play(Handshake::dialer(kKey, kRack + 1, 0, 1), Handshake::acceptor(kKey, kRack, 1));
  EXPECT_FALSE(o.acceptor_done);
  EXPECT_NE(o.acceptor_error.find("different rack section"), std::string::npos) << o.acceptor_error;
}

TEST(Handshake, BulkRunMismatchIsRefused) {
  // An on-path rewrite of the run id in the BulkHello: the acceptor's MACs
  // are for the other run, so the dialer refuses the challenge.
  auto d = Handshake::dialer(kKey, kRack, 0, 1, "runA");
  auto a = Handshake::acceptor(kKey, kRack, 1);
  BulkHello b;
  ASSERT_TRUE(decode(d.hello().body, b));
  b.run = "runB";
  Msg challenge;
  ASSERT_TRUE(a.on_message(Type::kBulkHello, encode(b), &challenge));
  Msg proof;
  EXPECT_FALSE(d.on_message(challenge->type, challenge->body, &proof));
  EXPECT_FALSE(d.done());
  // A mesh dialer's challenge does not verify for a bulk dialer either.
  auto dm = Handshake::dialer(kKey, kRack, 0, 1);
  auto am = Handshake::acceptor(kKey, kRack, 1);
  // (the nonces differ anyway; the labels differ too: see proto.hpp)
  Msg cm = deliver(am, dm.hello());
  auto db = Handshake::dialer(kKey, kRack, 0, 1, "runA");
  EXPECT_FALSE(db.on_message(cm->type, cm->body, &proof));
}

TEST(Handshake, MalformedOrOutOfOrderIsRefused) {
  Msg r;
  auto a = Handshake::acceptor(kKey, kRack, 1);
  EXPECT_FALSE(a.on_message(Type::kProof, std::string(32, '\0'), &r));
  EXPECT_TRUE(a.failed());
  auto a2 = Handshake::acceptor(kKey, kRack, 1);
  EXPECT_FALSE(a2.on_message(Type::kHello, "short", &r));
  auto a3 = Handshake::acceptor(kKey, kRack, 1);
  BulkHello b;
  b.run = "not a run id!";
  EXPECT_FALSE(a3.on_message(Type::kBulkHello, encode(b), &r));
  EXPECT_TRUE(a3.bulk());
  auto d = Handshake::dialer(kKey, kRack, 0, 1);
  EXPECT_FALSE(d.on_message(Type::kHello, encode(Hello{}), &r));
  // Failed stays failed.
  EXPECT_FALSE(d.on_message(Type::kChallenge, encode(Challenge{}), &r));
  Hello h;
  h.version = kVersion + 1;
  auto a4 = Handshake::acceptor(kKey, kRack, 1);
  EXPECT_FALSE(a4.on_message(Type::kHello, encode(h), &r));
  EXPECT_NE(a4.error().find("protocol version"), std::string::npos);
}

}  // namespace
}  // namespace gossamer::cp
