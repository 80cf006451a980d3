// The connection protocol (dataplane/src/connection.hpp) over a simulated
// link with loss, duplication and reordering (connection_sim.hpp): every
// record arrives exactly once and in order, frames coalesce under load,
// credits bound what is in flight, lost grants do not wedge it, sequence
// numbers wrap, and connections activate. Peer restarts and slots larger
// than a frame: connection_restart_test.cpp, connection_fragments_test.cpp.
#include "connection_sim.hpp"

namespace {

TEST(Connection, NoFaultsExactlyOnceInOrderAndCoalesced) {
  constexpr std::uint32_t kN = 10'000;
  Sim sim(64, 1, {});
  for (std::uint32_t s = 1; s <= kN; ++s) enqueue_record(*sim.a.conn, s);
  EXPECT_TRUE(sim.a.conn->has_pending());
  std::uint64_t steps =
      sim.run([&] { return sim.b.delivered.size() >= kN && sim.quiet() && sim.ab.empty(); },
              200'000);
  EXPECT_LT(steps, 200'000u);
  expect_sequence(sim.b.delivered, iota(1, kN));
  EXPECT_EQ(sim.b.payload_errors, 0u);
  EXPECT_TRUE(sim.a.delivered.empty());

  const auto& sa = sim.a.conn->stats();
  const auto& sb = sim.b.conn->stats();
  EXPECT_EQ(sa.records_sent, kN);
  EXPECT_EQ(sb.records_received, kN);
  EXPECT_LT(sa.frames_sent, kN) << "no coalescing";
  EXPECT_EQ(sa.frames_sent, sim.b.delivered_frames);
  EXPECT_EQ(sa.requests_sent + sa.responses_sent, kN);
  EXPECT_EQ(sa.retransmits, 0u);
  EXPECT_EQ(sa.timeouts, 0u);
  EXPECT_EQ(sb.duplicates, 0u);
  EXPECT_EQ(sb.out_of_order, 0u);
  EXPECT_EQ(sa.resets + sb.resets, 0u);
  EXPECT_EQ(sim.b.conn->peer_boot(), 100u);
  EXPECT_EQ(sim.a.conn->peer_boot(), 200u);
  EXPECT_EQ(sim.a.conn->next_deadline(), UINT64_MAX);
}

TEST(Connection, TrickleIsDeliveredPromptly) {
  // One record now and then: each goes out at once, alone.
  Sim sim(8, 1, {});
  for (std::uint32_t s = 1; s <= 50; ++s) {
    enqueue_record(*sim.a.conn, s);
    sim.run([] { return false; }, 4);
    ASSERT_EQ(sim.b.delivered.size(), s) << "record " << s << " not delivered within 200 us";
  }
  expect_sequence(sim.b.delivered, iota(1, 50));
  EXPECT_EQ(sim.a.conn->stats().frames_sent, 50u);
}

// ---- coalescing under load (set_batching, issue 19) -------------------------------

// Slots that become ready one loop iteration after another (one per step,
// as a busy client's do) while more are coming: with a hold they share
// frames; without one (today's dataplane before issue 19) each took a frame.
TEST(ConnectionBatching, SlotsReadyOneAfterAnotherShareFrames) {
  constexpr std::uint32_t kN = 64;
  std::uint64_t frames[2], acks[2];
  for (int on = 0; on < 2; ++on) {
    Sim sim(32, 1, {});
    if (on) {
      sim.a.conn->set_batching(4 * kStep, 4 * kStep);
      sim.b.conn->set_batching(4 * kStep, 4 * kStep);
    }
    sim.a.conn->set_more_coming(true);
    for (std::uint32_t s = 1; s <= kN; ++s) {
      enqueue_record(*sim.a.conn, s);
      sim.step();
    }
    sim.a.conn->set_more_coming(false);  // the last one: nothing else is coming
    sim.run([&] { return sim.b.delivered.size() >= kN && sim.quiet() && sim.ab.empty(); }, 1000);
    expect_sequence(sim.b.delivered, iota(1, kN));
    const auto& sa = sim.a.conn->stats();
    EXPECT_EQ(sa.requests_sent + sa.responses_sent, kN);
    frames[on] = sa.frames_sent;
    acks[on] = sim.b.conn->stats().acks_sent;
  }
  EXPECT_EQ(frames[0], kN) << "without a hold, one frame per step";
  // Four steps of hold: up to five slots a frame, as many as fit (the test
  // records are up to 1000 bytes: often two to a 1500-byte frame).
  EXPECT_LE(frames[1], kN * 6 / 10) << "slots ready one after another did not share frames";
  // b sends no data, so its acks go alone: one per frame at once, but at
  // most one per delay when delayed.
  EXPECT_EQ(acks[0], frames[0]);
  EXPECT_LT(acks[1], frames[1]);
}

// Nothing else coming (one request outstanding): no hold, whatever is set.
TEST(ConnectionBatching, LoneSlotGoesAtOnce) {
  Sim sim(8, 1, {});
  sim.a.conn->set_batching(1'000'000, 0);
  for (std::uint32_t s = 1; s <= 20; ++s) {
    enqueue_record(*sim.a.conn, s);
    sim.run([] { return false; }, 2);
    ASSERT_EQ(sim.b.delivered.size(), s) << "record " << s << " waited";
  }
  EXPECT_EQ(sim.a.conn->stats().frames_sent, 20u);
}

// More coming, but nothing of ours in flight: nothing to wait for (Nagle's
// rule), the record goes at once; the hold only starts behind a frame that
// is not acknowledged yet.
TEST(ConnectionBatching, NothingInFlightGoesAtOnce) {
  Sim sim(8, 1, {});
  sim.a.conn->set_batching(1'000'000, 0);
  sim.a.conn->set_more_coming(true);
  for (std::uint32_t s = 1; s <= 20; ++s) {
    enqueue_record(*sim.a.conn, s);
    sim.run([] { return false; }, 2);
    ASSERT_EQ(sim.b.delivered.size(), s) << "record " << s << " waited with nothing in flight";
    sim.run([&] { return sim.a.conn->unacked() == 0; }, 100);
  }
  EXPECT_EQ(sim.a.conn->stats().frames_sent, 20u);
}

// A held frame or a delayed ack is a deadline: a sleeping loop wakes for it.
TEST(ConnectionBatching, HoldAndAckDelayAreDeadlines) {
  Sim sim(8, 1, {});
  sim.a.conn->set_batching(500, 300);
  sim.b.conn->set_batching(500, 300);
  enqueue_record(*sim.a.conn, 1);
  sim.step();  // nothing in flight and nothing more coming: goes
  sim.a.conn->set_more_coming(true);
  enqueue_record(*sim.a.conn, 2);
  const std::uint64_t t = sim.now + kStep;
  sim.step();
  EXPECT_TRUE(sim.a.conn->has_pending());
  EXPECT_LE(sim.a.conn->next_deadline(), t + 500);
  EXPECT_EQ(sim.b.delivered.size(), 1u);
  EXPECT_LE(sim.b.conn->next_deadline(), sim.now + 300);  // the ack it owes for frame 1
  sim.run([&] { return sim.b.delivered.size() >= 2 && sim.quiet(); }, 40);
  expect_sequence(sim.b.delivered, iota(1, 2));
}

// What ends a hold (Nagle's rule, bounded): the ack of the frame in
// flight, at once; with no ack ever coming, the hold's deadline, though
// the frame in flight is retransmitted meanwhile (timeouts never empty
// what is in flight: a held frame always has its ack or its deadline).
TEST(ConnectionBatching, HoldEndsAtTheAckOrAtItsDeadline) {
  {
    Sim sim(8, 1, {});
    sim.a.conn->set_batching(1'000'000, 0);  // 1 s: only the ack ends it here
    sim.a.conn->set_more_coming(true);
    enqueue_record(*sim.a.conn, 1);
    sim.step();  // nothing in flight: goes
    enqueue_record(*sim.a.conn, 2);
    sim.step();
    ASSERT_TRUE(sim.a.conn->has_pending()) << "not held behind frame 1";
    sim.run([&] { return sim.b.delivered.size() >= 2; }, 10);
    expect_sequence(sim.b.delivered, iota(1, 2));
  }
  {
    Sim sim(8, 1, {});
    sim.ba.filter = [](const FrameHeader&) { return true; };  // b's acks never come
    constexpr std::uint64_t kHold = 40'000;  // 40 ms: frame 1 times out (5 ms, 10 ms, 20 ms) meanwhile
    sim.a.conn->set_batching(kHold, 0);
    sim.a.conn->set_more_coming(true);
    enqueue_record(*sim.a.conn, 1);
    sim.step();
    enqueue_record(*sim.a.conn, 2);
    sim.step();
    const std::uint64_t held = sim.now;
    ASSERT_TRUE(sim.a.conn->has_pending());
    EXPECT_LE(sim.a.conn->next_deadline(), held + kHold);
    sim.run([&] { return sim.b.delivered.size() >= 2; }, kHold / kStep + 2);
    expect_sequence(sim.b.delivered, iota(1, 2));
    EXPECT_LE(sim.now, held + kHold + kStep + kLatency + kStep);
    EXPECT_GE(sim.a.conn->stats().timeouts, 2u);
    EXPECT_GT(sim.a.conn->unacked(), 0u);
  }
}

// Exactness with both on, under loss, duplication and reordering.
TEST(ConnectionBatching, ExactlyOnceInOrderUnderFaults) {
  constexpr std::uint32_t kN = 5'000;
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    Sim sim(32, seed, Faults{0.05, 0.05, 0.20});
    sim.a.conn->set_batching(3 * kStep, 2 * kStep);
    sim.b.conn->set_batching(3 * kStep, 2 * kStep);
    std::uint32_t next = 1;
    std::mt19937 load(seed * 7919u);
    std::uint64_t steps = sim.run(
        [&] {
          sim.a.conn->set_more_coming(next <= kN);
          if (next <= kN && load() % 2 == 0) enqueue_record(*sim.a.conn, next++);
          return next > kN && sim.b.delivered.size() >= kN && sim.quiet();
        },
        400'000);
    EXPECT_LT(steps, 400'000u) << "seed " << seed << " did not finish";
    expect_sequence(sim.b.delivered, iota(1, kN));
    EXPECT_EQ(sim.b.payload_errors, 0u);
    EXPECT_LT(sim.a.conn->stats().frames_sent, kN) << "seed " << seed;
  }
}

// ---- faults ----------------------------------------------------------------------

class ConnectionFaults : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(ConnectionFaults, ExactlyOnceInOrder) {
  constexpr std::uint32_t kN = 10'000;
  constexpr std::uint64_t kMaxSteps = 400'000;  // 20 s of simulated time
  Sim sim(32, GetParam(), kFaults);
  // Bursts of up to 50 records every few steps, so that both coalescing and
  // credit stalls happen while frames are lost.
  std::uint32_t next = 1;
  std::mt19937 load(GetParam() * 7919u);
  std::uint64_t steps = sim.run(
      [&] {
        if (next <= kN && load() % 4 == 0)
          for (std::uint32_t k = 1 + load() % 50; k && next <= kN; --k)
            enqueue_record(*sim.a.conn, next++);
        return next > kN && sim.b.delivered.size() >= kN && sim.quiet();
      },
      kMaxSteps);
  EXPECT_LT(steps, kMaxSteps) << "did not finish";
  expect_sequence(sim.b.delivered, iota(1, kN));
  EXPECT_EQ(sim.b.payload_errors, 0u);
  const auto& sa = sim.a.conn->stats();
  const auto& sb = sim.b.conn->stats();
  EXPECT_GT(sa.retransmits, 0u);
  EXPECT_GT(sb.duplicates, 0u);
  EXPECT_GT(sim.ab.lost, 0u);
  EXPECT_EQ(sb.records_received, kN);
  EXPECT_EQ(sa.resets + sb.resets + sa.stale_boot + sb.stale_boot, 0u);
}

TEST_P(ConnectionFaults, BothDirections) {
  constexpr std::uint32_t kN = 5'000;
  constexpr std::uint64_t kMaxSteps = 400'000;
  Sim sim(16, GetParam() + 100, kFaults);
  std::uint32_t next_a = 1, next_b = 1;
  std::mt19937 load(GetParam());
  std::uint64_t steps = sim.run(
      [&] {
        for (std::uint32_t k = load() % 6; k && next_a <= kN; --k) enqueue_record(*sim.a.conn, next_a++);
        for (std::uint32_t k = load() % 6; k && next_b <= kN; --k) enqueue_record(*sim.b.conn, next_b++);
        return next_a > kN && next_b > kN && sim.a.delivered.size() >= kN &&
               sim.b.delivered.size() >= kN && sim.quiet();
      },
      kMaxSteps);
  EXPECT_LT(steps, kMaxSteps) << "did not finish";
  expect_sequence(sim.b.delivered, iota(1, kN));
  expect_sequence(sim.a.delivered, iota(1, kN));
  EXPECT_EQ(sim.a.payload_errors + sim.b.payload_errors, 0u);
  EXPECT_GT(sim.a.conn->stats().retransmits, 0u);
  EXPECT_GT(sim.b.conn->stats().retransmits, 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, ConnectionFaults, ::testing::Values(1u, 2u, 3u, 4u, 5u));

// ---- credits ---------------------------------------------------------------------

// Runs `n` records A -> B, checking at every step that A never sent a seq
// beyond what B granted, nor more than C frames beyond what B delivered.
void run_with_credit_checks(Sim& sim, std::uint32_t n, std::uint64_t max_steps) {
  const std::uint32_t c = std::max<std::uint32_t>(sim.credits, 2);
  for (std::uint32_t s = 1; s <= n; ++s) enqueue_record(*sim.a.conn, s);
  std::uint64_t steps = 0;
  while (!(sim.b.delivered.size() >= n && sim.quiet()) && steps < max_steps) {
    sim.step();
    ++steps;
    std::uint32_t granted = std::max(c, sim.ba.max_credit);
    ASSERT_LE(sim.ab.max_seq, granted) << "at step " << steps;
    ASSERT_LE(sim.ab.max_seq, sim.b.delivered_frames + c) << "at step " << steps;
  }
  EXPECT_LT(steps, max_steps) << "did not finish";
  expect_sequence(sim.b.delivered, iota(1, n));
}

TEST(ConnectionCredits, SmallWindowStallsAndRenews) {
  Sim sim(4, 11, {});
  run_with_credit_checks(sim, 3'000, 200'000);
  const auto& sa = sim.a.conn->stats();
  const auto& sb = sim.b.conn->stats();
  EXPECT_GT(sa.credit_stalls, 0u);
  EXPECT_GT(sa.renewals_requested, 0u);
  EXPECT_GT(sb.renewals_granted, 0u);
  EXPECT_LE(sb.renewals_granted, sa.renewals_requested);
}

class ConnectionCreditFaults : public ::testing::TestWithParam<std::tuple<std::uint32_t, std::uint32_t>> {};

TEST_P(ConnectionCreditFaults, NeverBeyondGrant) {
  auto [credits, seed] = GetParam();
  Sim sim(credits, seed, kFaults);
  run_with_credit_checks(sim, 3'000, 400'000);
  EXPECT_GT(sim.a.conn->stats().credit_stalls, 0u);
  EXPECT_GT(sim.a.conn->stats().renewals_requested, 0u);
}

INSTANTIATE_TEST_SUITE_P(CreditsSeeds, ConnectionCreditFaults,
                         ::testing::Combine(::testing::Values(1u, 2u, 4u, 16u),
                                            ::testing::Values(1u, 2u, 3u)));

TEST(ConnectionCredits, AtLeastTwo) {
  // credits 0 and 1 act as 2: two frames before any grant.
  for (std::uint32_t credits : {0u, 1u, 2u}) {
    SCOPED_TRACE(credits);
    Sim sim(credits, 1, {});
    for (std::uint32_t s = 1; s <= 20; ++s) enqueue_record(*sim.a.conn, s);
    EXPECT_EQ(sim.a.conn->credits_left(), 2u);
    EXPECT_EQ(sim.a.conn->pump(sim.now, sim.emit_a()), 2u);
    EXPECT_EQ(sim.a.conn->credits_left(), 0u);
    EXPECT_EQ(sim.a.conn->pump(sim.now, sim.emit_a()), 0u);
    EXPECT_EQ(sim.a.conn->stats().credit_stalls, 1u);
    EXPECT_TRUE(sim.a.conn->has_pending());
  }
}

// ---- lost acks and grants ----------------------------------------------------------

TEST(ConnectionCredits, LostAcksDoNotDeadlock) {
  // Every ack-only frame from B is lost for 30 ms: A times out and
  // retransmits (backing off) until acks get through again.
  Sim sim(4, 5, {});
  const std::uint64_t from = sim.now + 2'000, until = from + 30'000;
  sim.ba.filter = [&](const FrameHeader& h) {
    return h.type == kAckOnly && sim.now >= from && sim.now < until;
  };
  run_with_credit_checks(sim, 2'000, 400'000);
  EXPECT_GT(sim.ba.filtered, 0u);
  EXPECT_GT(sim.a.conn->stats().timeouts, 0u);
  EXPECT_GT(sim.a.conn->stats().retransmits, 0u);
  EXPECT_GT(sim.now, until);
}

TEST(ConnectionCredits, WithheldGrantRecoveredByProbe) {
  // For 30 ms every frame from B carries no new credit (the grant is lost,
  // acks still arrive): A drains its window, has nothing in flight, and
  // must probe with an ack-only kFlagRenew frame until a grant arrives.
  constexpr std::uint32_t kC = 4;
  Sim sim(kC, 6, {});
  const std::uint64_t until = sim.now + 30'000;
  sim.ba.rewrite = [&](FrameHeader& h) {
    if (sim.now < until) h.credit = std::min(h.credit, kC);
  };
  std::uint64_t probes_seen = 0;
  std::uint32_t max_seq_withheld = 0;
  sim.ab.filter = [&](const FrameHeader& h) {
    if (h.type == kAckOnly && (h.flags & gossamer::dataplane::wire::kFlagRenew)) ++probes_seen;
    if (h.type == kData && sim.now < until) max_seq_withheld = std::max(max_seq_withheld, h.seq);
    return false;
  };
  for (std::uint32_t s = 1; s <= 500; ++s) enqueue_record(*sim.a.conn, s);
  std::uint64_t steps = sim.run([&] { return sim.b.delivered.size() >= 500 && sim.quiet(); }, 400'000);
  EXPECT_LT(steps, 400'000u);
  expect_sequence(sim.b.delivered, iota(1, 500));
  const auto& sa = sim.a.conn->stats();
  EXPECT_GT(sa.credit_probes, 0u);
  EXPECT_EQ(probes_seen, sa.credit_probes);
  EXPECT_GT(sa.credit_stalls, 0u);
  EXPECT_GT(sim.now, until);
  // Only the first C frames went out while the grant was withheld, and A
  // kept probing (every RTO, 5 ms) meanwhile.
  EXPECT_EQ(max_seq_withheld, kC);
  EXPECT_GE(sa.credit_probes, 30'000u / 5'000u - 1);
}

TEST(ConnectionCredits, LostGrantFramesDoNotDeadlock) {
  // Lossy link, and for 20 ms every frame from B that would raise A's
  // credit is dropped entirely.
  constexpr std::uint32_t kC = 4;
  Sim sim(kC, 8, {0.02, 0.0, 0.1});
  const std::uint64_t until = sim.now + 20'000;
  sim.ba.filter = [&](const FrameHeader& h) { return sim.now < until && h.credit > kC; };
  run_with_credit_checks(sim, 1'000, 400'000);
  EXPECT_GT(sim.ba.filtered, 0u);
}

// ---- sequence numbers across 2^32 (issue 18 finding 4) -----------------------------

// Started 300 frames below the wrap, both directions cross 2^32 (frame 0
// included) under loss, duplication and reordering, with windows small
// enough that credit limits wrap too: everything arrives exactly once and
// in order, and neither side stalls. Before, the sender stopped at the wrap
// (an unsigned `next_seq > credit_limit` and a std::max on the grant) and
// the receiver dropped data frame 0 as bad_type.
TEST(ConnectionWrap, CrossesTwoToThe32UnderFaults) {
  for (const std::uint32_t credits : {4u, 32u}) {
    SCOPED_TRACE("credits " + std::to_string(credits));
    constexpr std::uint32_t kN = 3'000;
    Sim sim(credits, 31, kFaults, 100, 200, kIndex, 0xFFFF'FFFFu - 300);
    for (std::uint32_t s = 1; s <= kN; ++s) enqueue_record(*sim.a.conn, s);
    for (std::uint32_t s = 1; s <= kN / 3; ++s) enqueue_record(*sim.b.conn, s);
    const std::uint64_t steps = sim.run(
        [&] { return sim.b.delivered.size() >= kN && sim.a.delivered.size() >= kN / 3 && sim.quiet(); },
        2'000'000);
    EXPECT_LT(steps, 2'000'000u) << "stalled at the wrap";
    expect_sequence(sim.b.delivered, iota(1, kN));
    expect_sequence(sim.a.delivered, iota(1, kN / 3));
    EXPECT_EQ(sim.b.payload_errors + sim.a.payload_errors, 0u);
    // It did cross: more than 300 frames went each way.
    EXPECT_GT(sim.a.conn->stats().frames_sent, 300u);
    EXPECT_GT(sim.b.conn->stats().frames_received, 300u);
    EXPECT_GT(sim.a.conn->credits_left(), 0u);
  }
}

TEST(Connection, FirstFrameSetsPeerBoot) {
  Sim sim(8, 1, {});
  EXPECT_EQ(sim.b.conn->peer_boot(), 0u);
  enqueue_record(*sim.a.conn, 1);
  sim.run([&] { return !sim.b.delivered.empty(); }, 10);
  EXPECT_EQ(sim.b.conn->peer_boot(), 100u);
  EXPECT_EQ(sim.b.conn->stats().resets, 0u);
}

// ---- active connections (issue 7) ----------------------------------------------------

TEST(ConnectionActivation, OthersThanZeroWaitForTheReceiversScheduler) {
  Sim sim(16, 5, {}, 100, 200, 2);
  EXPECT_FALSE(sim.a.conn->usable());
  EXPECT_FALSE(sim.b.conn->inbound_active());
  for (std::uint32_t s = 1; s <= 50; ++s) enqueue_record(*sim.a.conn, s);
  sim.run([] { return false; }, 2000);  // 100 ms: probes, nothing granted
  EXPECT_TRUE(sim.b.delivered.empty()) << "an inactive connection carried data";
  EXPECT_GT(sim.a.conn->stats().credit_probes, 0u);
  EXPECT_EQ(sim.ab.max_seq, 0u);
  sim.b.conn->set_inbound_active(true);
  sim.run([&] { return sim.b.delivered.size() >= 50 && sim.quiet(); }, 20'000);
  expect_sequence(sim.b.delivered, iota(1, 50));
  EXPECT_TRUE(sim.a.conn->usable());
  // Connection 0 cannot be deactivated.
  Sim zero(16, 5, {});
  zero.b.conn->set_inbound_active(false);
  EXPECT_TRUE(zero.b.conn->inbound_active());
}

TEST(ConnectionActivation, DeactivatedUnderFaultsLosesAndDuplicatesNothing) {
  // Deactivated while frames are in flight, under loss, duplication and
  // reordering: what was sent is retransmitted until acked and delivered
  // once; what had not started moves (here: back, once reactivated, as the
  // dataplane moves it to another connection) and is delivered once; the
  // order of the records is kept.
  constexpr std::uint32_t kN = 3000;
  Sim sim(32, 9, kFaults, 100, 200, 1);
  sim.b.conn->set_inbound_active(true);
  for (std::uint32_t s = 1; s <= kN; ++s) enqueue_record(*sim.a.conn, s);
  sim.run([&] { return sim.b.delivered.size() >= kN / 4; }, 200'000);
  ASSERT_GE(sim.b.delivered.size(), kN / 4);
  sim.b.conn->set_inbound_active(false);
  // The sender finishes what its credit allows, learns it is inactive, and
  // is left with work it cannot send.
  sim.run([&] { return !sim.a.conn->usable() && sim.a.conn->unacked() == 0 && sim.ab.empty(); }, 200'000);
  ASSERT_FALSE(sim.a.conn->usable());
  const std::size_t before = sim.b.delivered.size();
  sim.run([] { return false; }, 2000);
  EXPECT_EQ(sim.b.delivered.size(), before) << "data went through after the sender knew it was inactive";
  EXPECT_LT(before, kN);
  EXPECT_GT(sim.b.conn->stats().renewals_declined + sim.a.conn->stats().credit_probes, 0u);
  std::vector<std::uint8_t> moved;
  sim.a.conn->take_pending(&moved);
  EXPECT_FALSE(sim.a.conn->has_pending());
  EXPECT_FALSE(moved.empty());
  sim.b.conn->set_inbound_active(true);
  sim.a.conn->enqueue_records(moved.data(), moved.size());
  sim.run([&] { return sim.b.delivered.size() >= kN && sim.quiet() && sim.ab.empty(); }, 400'000);
  expect_sequence(sim.b.delivered, iota(1, kN));
  EXPECT_EQ(sim.b.payload_errors, 0u);
}

TEST(ConnectionActivation, AStartedSlotFinishesOnADeactivatedConnection) {
  // The sender starts a fragmented slot with too few credits for all of
  // it; the receiver deactivates the connection before the renewal. The
  // rest of the slot can only come on this connection: the receiver grants
  // while it holds part of a slot, so the slot arrives (no hang).
  std::uint32_t s = kBigFirst;
  while (body_of(s) <= 4 * kMaxFragmentBytes) ++s;
  Sim sim(4, 11, {}, 100, 200, 1);
  sim.b.conn->set_inbound_active(true);
  sim.run([&] { return sim.a.conn->usable(); }, 100);
  ASSERT_TRUE(sim.a.conn->usable());
  enqueue_record(*sim.a.conn, s);
  auto ea = sim.emit_a();
  sim.a.conn->pump(sim.now, ea);  // 4 fragments out, the renewal asked on the way
  sim.b.conn->set_inbound_active(false);
  sim.run([&] { return !sim.b.delivered.empty() && sim.quiet(); }, 20'000);
  ASSERT_EQ(sim.b.delivered.size(), 1u) << "the started slot never completed";
  EXPECT_EQ(sim.b.delivered[0], s);
  EXPECT_EQ(sim.b.payload_errors, 0u);
  EXPECT_FALSE(sim.a.conn->usable());
}

TEST(ConnectionActivation, TakePendingLeavesAStartedSlotsFragments) {
  // A slot too large for a frame, then small ones; with 2 credits, the
  // slot's first fragments go out and the rest must stay on this connection.
  Sim sim(2, 3, {});
  WireRecord big{};
  big.kind = kRecRequest;
  big.count = 1;
  big.slot_seq = 1;
  big.primary_len = 96;
  big.overflow_len = std::uint16_t(4 * kMaxFragmentBytes);
  std::vector<std::uint8_t> payload(big.primary_len + big.overflow_len, 7);
  Sim::big_limits(*sim.b.conn);
  sim.a.conn->enqueue(big, payload.data());
  for (std::uint32_t s = 2; s <= 4; ++s) enqueue_record(*sim.a.conn, s);
  auto ea = sim.emit_a();
  sim.a.conn->pump(sim.now, ea);  // 2 frames: 2 fragments of the big slot
  std::vector<std::uint8_t> moved;
  sim.a.conn->take_pending(&moved);
  ASSERT_GE(moved.size(), sizeof(WireRecord));
  WireRecord first;
  std::memcpy(&first, moved.data(), sizeof first);
  EXPECT_EQ(first.slot_seq, 2u) << "the moved records start with a whole slot";
  EXPECT_EQ(first.frag, 0);
  EXPECT_TRUE(sim.a.conn->has_pending()) << "the big slot's last fragments stay";
}

TEST(ConnectionActivation, RenewalsReportCoalescing) {
  Sim sim(8, 4, {});
  for (std::uint32_t s = 1; s <= 400; ++s) enqueue_record(*sim.a.conn, s);
  sim.run([&] { return sim.b.delivered.size() >= 400 && sim.quiet(); }, 50'000);
  EXPECT_GT(sim.a.conn->stats().renewals_requested, 0u);
  std::uint64_t u = sim.b.conn->take_utilization();
  EXPECT_GE(u, sim.b.conn->stats().renewals_granted) << "each renewal reports at least 1";
  EXPECT_EQ(sim.b.conn->take_utilization(), 0u);
}

}  // namespace
