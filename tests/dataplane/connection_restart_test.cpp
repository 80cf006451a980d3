// Peer restarts over the simulated link (connection_sim.hpp): a new boot
// resets the connection, and nothing from before the peer saw the restart
// (acks, credits, data) is taken for the new incarnation.
#include "connection_sim.hpp"

namespace {

// ---- peer restart ------------------------------------------------------------------

class ConnectionRestartMidStream : public ::testing::TestWithParam<bool> {};

TEST_P(ConnectionRestartMidStream, NewBootResetsAndOldBootIsStale) {
  const bool faults = GetParam();
  constexpr std::uint32_t kC = 16;
  Sim sim(kC, 9, faults ? kFaults : Faults{});
  // Traffic both ways before the restart, so both directions must reset.
  for (std::uint32_t s = 1; s <= 5'000; ++s) enqueue_record(*sim.a.conn, s);
  for (std::uint32_t s = 1; s <= 100; ++s) enqueue_record(*sim.b.conn, s);
  sim.run([&] { return sim.b.delivered.size() >= 1'000 && sim.a.delivered.size() >= 100; },
          100'000);
  ASSERT_GE(sim.b.delivered.size(), 1'000u);
  ASSERT_TRUE(sim.a.conn->has_pending() || sim.a.conn->unacked() > 0);
  expect_sequence(sim.b.delivered, iota(1, std::uint32_t(sim.b.delivered.size())));
  expect_sequence(sim.a.delivered, iota(1, 100));

  // B restarts with a larger boot value; frames in flight stay in flight.
  std::unique_ptr<Connection> old_b = std::move(sim.b.conn);
  sim.b.conn = std::make_unique<Connection>(1, 0, kIndex, kC, 201, kHz);
  sim.b.delivered.clear();
  sim.b.delivered_frames = 0;
  sim.a.delivered.clear();
  std::uint64_t steps = sim.run([&] { return sim.a.conn->stats().resets >= 1; }, 100'000);
  ASSERT_LT(steps, 100'000u);
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);
  EXPECT_EQ(sim.a.conn->peer_boot(), 201u);
  // What A had for the old incarnation is gone, and none of it reached the
  // new one.
  EXPECT_FALSE(sim.a.conn->has_pending());
  EXPECT_EQ(sim.a.conn->unacked(), 0u);
  EXPECT_EQ(sim.a.conn->credits_left(), kC);

  // A new stream both ways, from seq 1.
  for (std::uint32_t s = 1; s <= 2'000; ++s) enqueue_record(*sim.a.conn, 100'000 + s);
  for (std::uint32_t s = 1; s <= 500; ++s) enqueue_record(*sim.b.conn, 200'000 + s);
  steps = sim.run(
      [&] {
        return sim.b.delivered.size() >= 2'000 && sim.a.delivered.size() >= 500 && sim.quiet();
      },
      400'000);
  EXPECT_LT(steps, 400'000u);
  expect_sequence(sim.b.delivered, iota(100'001, 2'000));
  expect_sequence(sim.a.delivered, iota(200'001, 500));
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);
  EXPECT_EQ(sim.b.conn->stats().resets, 0u);
  EXPECT_EQ(sim.b.conn->peer_boot(), 100u);

  // The old incarnation speaks again: dropped as stale, nothing delivered,
  // no second reset.
  std::uint64_t stale = sim.a.conn->stats().stale_boot;
  std::vector<std::vector<std::uint8_t>> old_frames;
  Connection::Emit capture = [&](const std::uint8_t* p, std::size_t len) {
    old_frames.emplace_back(p, p + len);
  };
  enqueue_record(*old_b, 777);
  old_b->pump(sim.now, capture);
  old_b->timers(sim.now + 1'000'000, capture);  // retransmits what it had
  old_b->flush_ack(capture);
  ASSERT_FALSE(old_frames.empty());
  auto ea = sim.emit_a();
  sim.a.delivered.clear();
  for (const auto& f : old_frames)
    EXPECT_EQ(Sim::deliver(sim.a, f, sim.now, ea), Connection::Accept::kDrop);
  EXPECT_TRUE(sim.a.delivered.empty());
  EXPECT_EQ(sim.a.conn->stats().stale_boot, stale + old_frames.size());
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);
  EXPECT_EQ(sim.a.conn->peer_boot(), 201u);
}

INSTANTIATE_TEST_SUITE_P(Faults, ConnectionRestartMidStream, ::testing::Bool());

// Slot seqs from `first` on whose records are large enough (>= 800 bytes of
// payload) that each travels in a frame of its own.
std::vector<std::uint32_t> big_slots(std::uint32_t first, std::size_t n) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t s = first; out.size() < n; ++s)
    if (body_of(s) >= 800) out.push_back(s);
  return out;
}

TEST(ConnectionRestart, RestartedPeerSendsFirst) {
  // B restarts with records to send: its first frames to A are data frames
  // from seq 1, which reset A and are delivered.
  constexpr std::uint32_t kC = 16;
  Sim sim(kC, 3, {});
  for (std::uint32_t s = 1; s <= 200; ++s) enqueue_record(*sim.a.conn, s);
  for (std::uint32_t s = 1; s <= 200; ++s) enqueue_record(*sim.b.conn, s);
  sim.run([&] { return sim.a.delivered.size() >= 200 && sim.b.delivered.size() >= 200 && sim.quiet(); },
          100'000);
  ASSERT_TRUE(sim.quiet());
  sim.b.conn = std::make_unique<Connection>(1, 0, kIndex, kC, 201, kHz);
  sim.a.delivered.clear();
  sim.b.delivered.clear();
  for (std::uint32_t s = 1; s <= 300; ++s) enqueue_record(*sim.b.conn, 1'000 + s);
  std::uint64_t steps =
      sim.run([&] { return sim.a.delivered.size() >= 300 && sim.quiet(); }, 100'000);
  EXPECT_LT(steps, 100'000u);
  expect_sequence(sim.a.delivered, iota(1'001, 300));
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);
}

TEST(ConnectionRestart, AckFromBeforeThePeerSawTheRestartIsIgnored) {
  // A frame A sent before it learnt of B's restart carries an ack (and a
  // credit) for the old B's stream. The new B must not take it as an ack of
  // its own frames: here A acks 5 old frames; new B has sent 6, A misses
  // its seq 3. If new B believes 1..5 acknowledged it never resends 3, and
  // A waits for it forever.
  constexpr std::uint32_t kC = 16;
  Sim sim(kC, 4, {});
  auto ea = sim.emit_a();
  // The old B sends A five frames, all delivered and acked.
  for (std::uint32_t s : big_slots(1, 5)) enqueue_record(*sim.b.conn, s);
  sim.run([&] { return sim.a.delivered.size() >= 5 && sim.quiet() && sim.ab.empty() && sim.ba.empty(); },
          10'000);
  ASSERT_EQ(sim.b.conn->stats().frames_sent, 5u);
  ASSERT_EQ(sim.a.delivered.size(), 5u);

  // B restarts and sends six frames; A, not yet knowing, sends one more frame
  // (ack = 5, for the old stream). Nothing has been delivered yet.
  sim.b.conn = std::make_unique<Connection>(1, 0, kIndex, kC, 201, kHz);
  sim.a.delivered.clear();
  sim.b.delivered.clear();
  const auto fresh = big_slots(10'000, 6);
  for (std::uint32_t s : fresh) enqueue_record(*sim.b.conn, s);
  sim.now += kStep;
  ASSERT_EQ(sim.b.conn->pump(sim.now, sim.emit_b()), 6u);
  enqueue_record(*sim.a.conn, 1);
  ASSERT_EQ(sim.a.conn->pump(sim.now, ea), 1u);

  // The link delivers A's stale frame first, and loses new B's seq 3.
  sim.now += kStep;
  auto from_a = sim.ab.due(sim.now);
  auto from_b = sim.ba.due(sim.now);
  ASSERT_EQ(from_a.size(), 1u);
  ASSERT_EQ(from_b.size(), 6u);
  {
    FrameHeader h;
    std::memcpy(&h, from_a[0].data(), sizeof h);
    ASSERT_EQ(h.ack, 5u);
  }
  auto eb = sim.emit_b();
  Sim::deliver(sim.b, from_a[0], sim.now, eb);
  for (auto& f : from_b) {
    FrameHeader h;
    std::memcpy(&h, f.data(), sizeof h);
    if (h.seq != 3) Sim::deliver(sim.a, f, sim.now, ea);
  }
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);

  // From here on a perfect link: everything must arrive.
  std::uint64_t steps = sim.run([&] { return sim.a.delivered.size() >= 6 && sim.quiet(); }, 40'000);
  EXPECT_LT(steps, 40'000u);
  expect_sequence(sim.a.delivered, fresh);
}

TEST(ConnectionRestart, CreditFromBeforeThePeerSawTheRestartIsIgnored) {
  // The same stale frame also carries A's grant for the old B's stream,
  // far beyond the C that A grants the new B after its reset.
  constexpr std::uint32_t kC = 16;
  Sim sim(kC, 5, {});
  for (std::uint32_t s : big_slots(1, 100)) enqueue_record(*sim.b.conn, s);
  sim.run([&] { return sim.a.delivered.size() >= 100 && sim.quiet() && sim.ab.empty() && sim.ba.empty(); },
          100'000);
  ASSERT_EQ(sim.a.delivered.size(), 100u);
  ASSERT_GT(sim.ab.max_credit, 100u);  // A granted the old B beyond seq 100

  sim.b.conn = std::make_unique<Connection>(1, 0, kIndex, kC, 201, kHz);
  EXPECT_EQ(sim.b.conn->credits_left(), kC);
  auto ea = sim.emit_a();
  enqueue_record(*sim.a.conn, 1);
  ASSERT_EQ(sim.a.conn->pump(sim.now, ea), 1u);  // ack 100, credit > 100: the old stream's
  sim.now += kStep;
  auto from_a = sim.ab.due(sim.now);
  ASSERT_EQ(from_a.size(), 1u);
  auto eb = sim.emit_b();
  Sim::deliver(sim.b, from_a[0], sim.now, eb);
  // The frame was for the old B: its ack and grant are not the new B's.
  EXPECT_EQ(sim.b.conn->stats().wrong_incarnation, 1u);
  ASSERT_LE(sim.b.conn->credits_left(), kC);
  // Then the new B's stream works within C.
  for (std::uint32_t s : big_slots(10'000, 50)) enqueue_record(*sim.b.conn, s);
  sim.a.delivered.clear();
  std::uint64_t steps = 0;
  while (!(sim.a.delivered.size() >= 50 && sim.quiet()) && steps < 100'000) {
    sim.step();
    ++steps;
    ASSERT_LE(sim.ba.max_seq, sim.a.delivered_frames + kC);
  }
  EXPECT_EQ(sim.a.delivered, big_slots(10'000, 50));
}

TEST(ConnectionRestart, DataFromBeforeThePeerSawTheRestartDoesNotHideNewData) {
  // A has heard from the old B; its seq 1 is in flight when B restarts and
  // reaches the new B, which takes it for the start of A's stream. A then
  // resets (new boot) and starts again from seq 1: the new B must not drop
  // that as a duplicate and ack it, or A's first record after the reset is
  // lost without a trace.
  constexpr std::uint32_t kC = 16;
  Sim sim(kC, 6, {});
  auto ea = sim.emit_a();
  enqueue_record(*sim.b.conn, 1);
  sim.run([&] { return sim.a.delivered.size() >= 1; }, 100);
  ASSERT_EQ(sim.a.conn->peer_boot(), 200u);

  constexpr std::uint32_t kOld = 500, kNew = 600;
  enqueue_record(*sim.a.conn, kOld);
  ASSERT_EQ(sim.a.conn->pump(sim.now, ea), 1u);
  sim.b.conn = std::make_unique<Connection>(1, 0, kIndex, kC, 201, kHz);
  sim.b.delivered.clear();
  std::uint64_t steps = sim.run([&] { return sim.a.conn->stats().resets >= 1; }, 1'000);
  ASSERT_EQ(sim.a.conn->stats().resets, 1u);
  ASSERT_LT(steps, 1'000u);

  enqueue_record(*sim.a.conn, kNew);
  steps = sim.run([&] { return sim.quiet() && sim.ab.empty() && sim.ba.empty(); }, 10'000);
  ASSERT_LT(steps, 10'000u);
  const auto n_new = std::count(sim.b.delivered.begin(), sim.b.delivered.end(), kNew);
  EXPECT_EQ(n_new, 1);
  EXPECT_LE(std::count(sim.b.delivered.begin(), sim.b.delivered.end(), kOld), 1);
}

// Issue 18 finding 10: incarnations were ordered by time mod 2^32, so a
// restart 3 s later (in nanoseconds, 3e9 > 2^31) looked older than the
// incarnation before it and every frame of the restarted peer was dropped
// as stale; and one that really was older looked newer. Incarnations are
// 64-bit now and compared as plain numbers.
TEST(ConnectionRestart, IncarnationsAreOrderedAs64BitNumbers) {
  constexpr std::uint64_t kOld = 1'700'000'000'000'000'000ull;  // ns since the epoch, 2023
  constexpr std::uint64_t kNew = kOld + 3'000'000'000ull;       // a restart 3 s later
  constexpr std::uint64_t kOlder = kOld - 3'000'000'000ull;     // a life before kOld
  static_assert(std::int32_t(std::uint32_t(kNew) - std::uint32_t(kOld)) < 0, "older mod 2^32");
  static_assert(std::int32_t(std::uint32_t(kOlder) - std::uint32_t(kOld)) > 0, "newer mod 2^32");
  constexpr std::uint32_t kC = 16;
  Sim sim(kC, 12, {}, 100, kOld);
  for (std::uint32_t s = 1; s <= 20; ++s) enqueue_record(*sim.b.conn, s);
  sim.run([&] { return sim.a.delivered.size() >= 20 && sim.quiet(); }, 10'000);
  EXPECT_EQ(sim.a.conn->peer_boot(), kOld);

  // B restarts as kNew: A takes it as the restart it is and hears the new B.
  sim.b.conn = std::make_unique<Connection>(1, 0, kIndex, kC, kNew, kHz);
  sim.a.delivered.clear();
  for (std::uint32_t s = 1; s <= 20; ++s) enqueue_record(*sim.b.conn, 1'000 + s);
  const std::uint64_t steps = sim.run([&] { return sim.a.delivered.size() >= 20 && sim.quiet(); }, 10'000);
  EXPECT_LT(steps, 10'000u) << "the restarted peer was never heard";
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);
  EXPECT_EQ(sim.a.conn->stats().stale_boot, 0u);
  EXPECT_EQ(sim.a.conn->peer_boot(), kNew);
  expect_sequence(sim.a.delivered, iota(1'001, 20));

  // A frame of kOlder is from a previous life: dropped, no reset.
  Connection older(1, 0, kIndex, kC, kOlder, kHz);
  std::vector<std::vector<std::uint8_t>> frames;
  enqueue_record(older, 9);
  older.pump(sim.now, [&](const std::uint8_t* p, std::size_t len) { frames.emplace_back(p, p + len); });
  ASSERT_EQ(frames.size(), 1u);
  auto ea = sim.emit_a();
  EXPECT_EQ(Sim::deliver(sim.a, frames[0], sim.now, ea), Connection::Accept::kDrop);
  EXPECT_EQ(sim.a.conn->stats().stale_boot, 1u);
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);
  EXPECT_EQ(sim.a.conn->peer_boot(), kNew);

  // Told by another connection: the same order.
  sim.a.conn->peer_restarted(kOlder);
  EXPECT_EQ(sim.a.conn->stats().resets, 1u);
  sim.a.conn->peer_restarted(kNew + 3'000'000'000ull);
  EXPECT_EQ(sim.a.conn->stats().resets, 2u);
  EXPECT_EQ(sim.a.conn->peer_boot(), kNew + 3'000'000'000ull);
}

TEST(ConnectionRestart, PeerRestartedResetsWhatSentToTheOldPeer) {
  // Another connection saw the peer come back as boot 201. This one sent a
  // frame to the old peer and never heard back: its seq 1 is gone with it.
  Connection sent(0, 1, kIndex, 8, 100, kHz);
  enqueue_record(sent, 1);
  std::size_t frames = 0;
  ASSERT_EQ(sent.pump(0, [&](const std::uint8_t*, std::size_t) { ++frames; }), 1u);
  ASSERT_EQ(sent.peer_boot(), 0u);
  sent.peer_restarted(201);
  EXPECT_EQ(sent.stats().resets, 1u);
  EXPECT_EQ(sent.peer_boot(), 201u);
  EXPECT_EQ(sent.unacked(), 0u);
  // One that knows the new peer already, or never sent, is left alone.
  sent.peer_restarted(201);
  EXPECT_EQ(sent.stats().resets, 1u);
  Connection quiet(0, 1, kIndex, 8, 100, kHz);
  quiet.peer_restarted(201);
  EXPECT_EQ(quiet.stats().resets, 0u);
  EXPECT_EQ(quiet.peer_boot(), 0u);
}

}  // namespace
