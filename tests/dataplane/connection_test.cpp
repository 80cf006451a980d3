// The connection protocol (dataplane/src/connection.hpp) over a simulated
// link with loss, duplication and reordering: every record arrives exactly
// once and in order, credits bound what is in flight, lost grants and peer
// restarts do not wedge it. Time is in microseconds (tsc_hz = 1'000'000).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/abi/slots.hpp>

#include "connection.hpp"
#include "wire.hpp"

namespace {

using gossamer::dataplane::Connection;
using gossamer::dataplane::ConnectionStats;
using gossamer::dataplane::Reassembly;
using gossamer::dataplane::wire::FrameHeader;
using gossamer::dataplane::wire::kAckOnly;
using gossamer::dataplane::wire::kData;
using gossamer::dataplane::wire::kMaxUdpPayload;
using gossamer::dataplane::wire::kRecRequest;
using gossamer::dataplane::wire::kRecResponse;
using gossamer::dataplane::wire::RecordCursor;
using gossamer::dataplane::wire::RecordView;
using gossamer::dataplane::wire::WireRecord;

constexpr std::uint64_t kHz = 1'000'000;
constexpr std::uint64_t kStep = 50;       // µs per loop step
constexpr std::uint64_t kLatency = 20;    // µs one way
// Connection 0: always active (the others start inactive; see the
// ConnectionActivation tests).
constexpr std::uint8_t kIndex = 0;

struct Faults {
  double loss = 0, dup = 0, reorder = 0;
};

// Slot seqs from kBigFirst on are large slots (fragmented on the wire).
constexpr std::uint32_t kBigFirst = 1'000'000;
// Large slots need a large overflow block; 16 KiB of payload otherwise (the
// Reassembly tests that check the blocks' bounds use their own sizes).
constexpr std::size_t kBigMax = 96 + std::max<std::size_t>(gossamer::abi::kOverflowBytes, 16384);

// Payload of the record with slot seq `s`: 0..1000 bytes (large slots: up
// to a whole slot), byte i = s * 13 + i.
std::size_t body_of(std::uint32_t s) {
  if (s >= kBigFirst) return 1 + (std::size_t(s) * 7919u) % kBigMax;
  return (std::size_t(s) * 7919u) % 1001u;
}
std::uint8_t byte_of(std::uint32_t s, std::size_t i) { return std::uint8_t(s * 13u + i); }

WireRecord record_for(std::uint32_t slot_seq) {
  std::size_t body = body_of(slot_seq);
  WireRecord r{};
  r.kind = slot_seq % 3 ? kRecRequest : kRecResponse;
  r.count = 1;
  r.client = 1;
  r.trustee = 2;
  r.slot_seq = slot_seq;
  r.primary_len = std::uint16_t(std::min<std::size_t>(body, 96));
  r.overflow_len = std::uint16_t(body - r.primary_len);
  r.app = 0x5eed;
  return r;
}

std::vector<std::uint8_t> payload_for(std::uint32_t slot_seq) {
  std::vector<std::uint8_t> payload(body_of(slot_seq));
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = byte_of(slot_seq, i);
  return payload;
}

void enqueue_record(Connection& c, std::uint32_t slot_seq) {
  c.enqueue(record_for(slot_seq), payload_for(slot_seq).data());
}

// One direction of the wire. Frames are copied when emitted and handed to
// the receiver at their delivery time; reordered ones are held longer.
class Link {
 public:
  Link(std::mt19937* rng, Faults f) : rng_(rng), faults_(f) {}

  // Returns true to drop an emitted frame (before loss is applied).
  std::function<bool(const FrameHeader&)> filter;
  // May edit an emitted frame's header.
  std::function<void(FrameHeader&)> rewrite;

  void push(const std::uint8_t* p, std::size_t len, std::uint64_t now) {
    EXPECT_GE(len, sizeof(FrameHeader));
    EXPECT_LE(len, kMaxUdpPayload);
    FrameHeader h;
    std::memcpy(&h, p, sizeof h);
    EXPECT_EQ(h.length, len - sizeof h);
    ++emitted;
    if (h.type == kData) {
      max_seq = std::max(max_seq, h.seq);
      ++data_emitted;
    } else {
      ++acks_emitted;
    }
    max_credit = std::max(max_credit, h.credit);
    if (filter && filter(h)) {
      ++filtered;
      return;
    }
    if (chance(faults_.loss)) {
      ++lost;
      return;
    }
    int copies = chance(faults_.dup) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      Packet pk;
      pk.bytes.assign(p, p + len);
      if (rewrite) {
        FrameHeader e;
        std::memcpy(&e, pk.bytes.data(), sizeof e);
        rewrite(e);
        std::memcpy(pk.bytes.data(), &e, sizeof e);
      }
      pk.at = now + kLatency;
      if (chance(faults_.reorder)) pk.at += 25 + (*rng_)() % 400;
      pk.id = next_id_++;
      q_.push_back(std::move(pk));
    }
  }

  // Frames due by `now`, in delivery order; removed from the link.
  std::vector<std::vector<std::uint8_t>> due(std::uint64_t now) {
    std::vector<Packet> ready;
    std::vector<Packet> rest;
    for (auto& pk : q_) (pk.at <= now ? ready : rest).push_back(std::move(pk));
    q_ = std::move(rest);
    std::sort(ready.begin(), ready.end(), [](const Packet& a, const Packet& b) {
      return a.at != b.at ? a.at < b.at : a.id < b.id;
    });
    std::vector<std::vector<std::uint8_t>> out;
    for (auto& pk : ready) out.push_back(std::move(pk.bytes));
    return out;
  }
  bool empty() const { return q_.empty(); }

  std::uint64_t emitted = 0, data_emitted = 0, acks_emitted = 0, filtered = 0, lost = 0;
  std::uint32_t max_seq = 0;     // highest data seq emitted
  std::uint32_t max_credit = 0;  // highest credit field emitted

 private:
  struct Packet {
    std::vector<std::uint8_t> bytes;
    std::uint64_t at;
    std::uint64_t id;
  };
  bool chance(double p) {
    return p > 0 && std::uniform_real_distribution<double>(0, 1)(*rng_) < p;
  }
  std::mt19937* rng_;
  Faults faults_;
  std::vector<Packet> q_;
  std::uint64_t next_id_ = 0;
};

struct Side {
  std::unique_ptr<Connection> conn;
  std::vector<std::uint32_t> delivered;  // slot seqs of records delivered here
  std::uint64_t delivered_frames = 0;
  std::uint64_t payload_errors = 0;
};

struct Sim {
  Sim(std::uint32_t credits, std::uint32_t seed, Faults f, std::uint64_t boot_a = 100,
      std::uint64_t boot_b = 200, std::uint8_t index = kIndex, std::uint32_t first_seq = 1)
      : rng(seed), ab(&rng, f), ba(&rng, f), credits(credits) {
    a.conn = std::make_unique<Connection>(0, 1, index, credits, boot_a, kHz, first_seq);
    b.conn = std::make_unique<Connection>(1, 0, index, credits, boot_b, kHz, first_seq);
    big_limits(*a.conn);
    big_limits(*b.conn);
  }
  // Blocks for the large test slots, whatever the built slot layout.
  static void big_limits(Connection& c) { c.reassembly().set_limits(112, 104, kBigMax - 96); }

  Connection::Emit emit_a() {
    return [this](const std::uint8_t* p, std::size_t len) { ab.push(p, len, now); };
  }
  Connection::Emit emit_b() {
    return [this](const std::uint8_t* p, std::size_t len) { ba.push(p, len, now); };
  }

  // Hands a frame to `to`; records of a delivered frame go to its list.
  static Connection::Accept deliver(Side& to, const std::vector<std::uint8_t>& bytes,
                                    std::uint64_t now, const Connection::Emit& emit) {
    FrameHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    Connection::Accept acc = to.conn->on_frame(h, now, emit);
    if (acc == Connection::Accept::kDeliver) {
      EXPECT_EQ(h.type, kData);
      ++to.delivered_frames;
      RecordCursor cur(bytes.data() + sizeof h, h.length);
      RecordView v;
      std::size_t n = 0;
      RecordView whole;
      while (cur.next(&v)) {
        ++n;
        switch (to.conn->reassemble(v, &whole)) {
          case Reassembly::Result::kWhole: break;
          case Reassembly::Result::kComplete: v = whole; break;
          case Reassembly::Result::kHeld: continue;
          case Reassembly::Result::kDropped: ++to.payload_errors; continue;
        }
        to.delivered.push_back(v.rec.slot_seq);
        std::size_t body = std::size_t(v.rec.primary_len) + v.rec.overflow_len;
        if (body != body_of(v.rec.slot_seq)) ++to.payload_errors;
        for (std::size_t i = 0; i < body; ++i)
          if (v.payload[i] != byte_of(v.rec.slot_seq, i)) {
            ++to.payload_errors;
            break;
          }
      }
      EXPECT_EQ(n, h.records);
    }
    return acc;
  }

  void step() {
    now += kStep;
    auto ea = emit_a(), eb = emit_b();
    for (auto& f : ab.due(now)) deliver(b, f, now, eb);
    for (auto& f : ba.due(now)) deliver(a, f, now, ea);
    a.conn->pump(now, ea);
    b.conn->pump(now, eb);
    a.conn->timers(now, ea);
    b.conn->timers(now, eb);
    a.conn->flush_ack(now, ea);
    b.conn->flush_ack(now, eb);
  }

  bool quiet() const {
    return !a.conn->has_pending() && !b.conn->has_pending() && a.conn->unacked() == 0 &&
           b.conn->unacked() == 0;
  }

  // Steps until `done` or `max_steps`; returns the steps taken.
  template <class Done>
  std::uint64_t run(Done done, std::uint64_t max_steps) {
    std::uint64_t steps = 0;
    while (!done() && steps < max_steps) {
      step();
      ++steps;
    }
    return steps;
  }

  std::uint64_t now = 1000;
  std::mt19937 rng;
  Link ab, ba;
  Side a, b;
  std::uint32_t credits;
};

std::vector<std::uint32_t> iota(std::uint32_t first, std::uint32_t n) {
  std::vector<std::uint32_t> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

// Exactly once and in order, with the first difference in the message.
void expect_sequence(const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& want) {
  if (got == want) return;
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  ADD_FAILURE() << "delivered " << got.size() << " records, expected " << want.size()
                << "; first difference at index " << i << ": got "
                << (i < got.size() ? std::to_string(got[i]) : "nothing") << ", expected "
                << (i < want.size() ? std::to_string(want[i]) : "nothing");
}

// ---- no faults -------------------------------------------------------------------

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

constexpr Faults kFaults{0.05, 0.05, 0.20};

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

TEST(Connection, FirstFrameSetsPeerBoot) {
  Sim sim(8, 1, {});
  EXPECT_EQ(sim.b.conn->peer_boot(), 0u);
  enqueue_record(*sim.a.conn, 1);
  sim.run([&] { return !sim.b.delivered.empty(); }, 10);
  EXPECT_EQ(sim.b.conn->peer_boot(), 100u);
  EXPECT_EQ(sim.b.conn->stats().resets, 0u);
}

}  // namespace

// ---- slots larger than a frame: fragments -------------------------------------------

static_assert(kBigMax > 4 * gossamer::dataplane::wire::kMaxFragmentBytes,
              "large slots must need several fragments");

using gossamer::dataplane::wire::kFragment;
using gossamer::dataplane::wire::kFragMore;
using gossamer::dataplane::wire::kMaxFragmentBytes;
using gossamer::dataplane::wire::kMaxRecordBytes;

// Slot seqs: small and large slots interleaved, in order.
std::vector<std::uint32_t> mixed_slots(std::uint32_t n) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t i = 1; i <= n; ++i) v.push_back(i % 3 ? kBigFirst + i : i);
  return v;
}

std::size_t fragmented(const std::vector<std::uint32_t>& seqs) {
  return std::size_t(std::count_if(seqs.begin(), seqs.end(),
                                   [](std::uint32_t s) { return body_of(s) > kMaxFragmentBytes; }));
}

TEST(ConnectionFragments, LargeSlotsArriveWholeAndInOrder) {
  auto seqs = mixed_slots(600);
  Sim sim(32, 21, {});
  std::size_t fragments = 0, bytes = 0;
  for (std::uint32_t s : seqs) {
    enqueue_record(*sim.a.conn, s);
    std::size_t b = body_of(s);
    bytes += b;
    if (b > kMaxFragmentBytes) fragments += (b + kMaxFragmentBytes - 1) / kMaxFragmentBytes;
  }
  std::uint64_t steps = sim.run(
      [&] { return sim.b.delivered.size() >= seqs.size() && sim.quiet() && sim.ab.empty(); }, 200'000);
  EXPECT_LT(steps, 200'000u);
  expect_sequence(sim.b.delivered, seqs);
  EXPECT_EQ(sim.b.payload_errors, 0u);
  const auto& sa = sim.a.conn->stats();
  const auto& sb = sim.b.conn->stats();
  EXPECT_GT(fragmented(seqs), 300u);
  EXPECT_EQ(sa.fragments_sent, fragments);
  EXPECT_EQ(sb.fragments_received, fragments);
  EXPECT_EQ(sb.slots_reassembled, fragmented(seqs));
  EXPECT_EQ(sa.requests_sent + sa.responses_sent, seqs.size()) << "a fragmented slot counts once";
  // Fragments fill frames: not many more frames than the bytes need.
  EXPECT_LE(sa.frames_sent, bytes / (kMaxRecordBytes - 64) + seqs.size() / 3 + 2);
  EXPECT_EQ(sb.frag_bad_offset + sb.frag_oversize + sb.frag_mismatch + sb.frag_interrupted, 0u);
  EXPECT_FALSE(sim.b.conn->reassembling());
}

TEST(ConnectionFragments, OneSlotFillsFramesExactly) {
  Sim sim(32, 22, {});
  std::uint32_t s = kBigFirst;
  while (body_of(s) < 5 * kMaxFragmentBytes) ++s;
  enqueue_record(*sim.a.conn, s);
  sim.run([&] { return sim.b.delivered.size() >= 1 && sim.quiet(); }, 10'000);
  ASSERT_EQ(sim.b.delivered.size(), 1u);
  EXPECT_EQ(sim.b.payload_errors, 0u);
  std::size_t want = (body_of(s) + kMaxFragmentBytes - 1) / kMaxFragmentBytes;
  EXPECT_EQ(sim.a.conn->stats().frames_sent, want);
  EXPECT_EQ(sim.a.conn->stats().fragments_sent, want);
}

class ConnectionFragmentFaults : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(ConnectionFragmentFaults, ExactlyOnceInOrderBothWays) {
  auto seqs = mixed_slots(1'500);
  constexpr std::uint64_t kMaxSteps = 800'000;
  Sim sim(32, GetParam() + 300, kFaults);
  std::size_t next_a = 0, next_b = 0;
  std::mt19937 load(GetParam() * 31u);
  std::uint64_t steps = sim.run(
      [&] {
        for (std::uint32_t k = load() % 4; k && next_a < seqs.size(); --k) enqueue_record(*sim.a.conn, seqs[next_a++]);
        for (std::uint32_t k = load() % 3; k && next_b < seqs.size(); --k) enqueue_record(*sim.b.conn, seqs[next_b++]);
        return next_a == seqs.size() && next_b == seqs.size() && sim.a.delivered.size() >= seqs.size() &&
               sim.b.delivered.size() >= seqs.size() && sim.quiet();
      },
      kMaxSteps);
  EXPECT_LT(steps, kMaxSteps) << "did not finish";
  expect_sequence(sim.b.delivered, seqs);
  expect_sequence(sim.a.delivered, seqs);
  EXPECT_EQ(sim.a.payload_errors + sim.b.payload_errors, 0u);
  EXPECT_GT(sim.a.conn->stats().retransmits, 0u);
  EXPECT_GT(sim.b.conn->stats().duplicates, 0u);
  EXPECT_EQ(sim.b.conn->stats().slots_reassembled, fragmented(seqs));
  EXPECT_EQ(sim.a.conn->stats().slots_reassembled, fragmented(seqs));
}

INSTANTIATE_TEST_SUITE_P(Seeds, ConnectionFragmentFaults, ::testing::Values(1u, 2u, 3u));

TEST(ConnectionFragments, FragmentsTakeCredits) {
  // A window of 4 frames and slots of many fragments: never beyond the grant.
  constexpr std::uint32_t kC = 4;
  Sim sim(kC, 23, {});
  std::vector<std::uint32_t> seqs;
  for (std::uint32_t s = kBigFirst; seqs.size() < 40; ++s)
    if (body_of(s) > 6 * kMaxFragmentBytes) seqs.push_back(s);
  for (std::uint32_t s : seqs) enqueue_record(*sim.a.conn, s);
  std::uint64_t steps = 0;
  while (!(sim.b.delivered.size() >= seqs.size() && sim.quiet()) && steps < 200'000) {
    sim.step();
    ++steps;
    ASSERT_LE(sim.ab.max_seq, std::max(kC, sim.ba.max_credit)) << "at step " << steps;
    ASSERT_LE(sim.ab.max_seq, sim.b.delivered_frames + kC) << "at step " << steps;
  }
  EXPECT_LT(steps, 200'000u);
  expect_sequence(sim.b.delivered, seqs);
  EXPECT_EQ(sim.b.payload_errors, 0u);
  EXPECT_GT(sim.a.conn->stats().credit_stalls, 0u);
}

TEST(ConnectionFragments, PeerRestartMidSlotForgetsThePartialSlot) {
  constexpr std::uint32_t kC = 16;
  Sim sim(kC, 24, {});
  std::uint32_t s = kBigFirst;
  while (body_of(s) < 6 * kMaxFragmentBytes) ++s;
  // Only the first two frames of A's slot get through: B holds a partial slot.
  std::uint32_t passed = 0;
  sim.ab.filter = [&](const FrameHeader& h) { return h.type == kData && ++passed > 2; };
  enqueue_record(*sim.a.conn, s);
  sim.run([] { return false; }, 20);
  EXPECT_TRUE(sim.b.conn->reassembling());
  EXPECT_TRUE(sim.b.delivered.empty());
  sim.ab.filter = nullptr;

  // A restarts; its new incarnation sends a different large slot from seq 1.
  sim.a.conn = std::make_unique<Connection>(0, 1, kIndex, kC, 101, kHz);
  Sim::big_limits(*sim.a.conn);
  std::uint32_t s2 = s + 1;
  while (body_of(s2) < 3 * kMaxFragmentBytes) ++s2;
  enqueue_record(*sim.a.conn, s2);
  enqueue_record(*sim.a.conn, 5);
  std::uint64_t steps = sim.run([&] { return sim.b.delivered.size() >= 2 && sim.quiet(); }, 100'000);
  EXPECT_LT(steps, 100'000u);
  EXPECT_EQ(sim.b.conn->stats().resets, 1u);
  expect_sequence(sim.b.delivered, {s2, 5});
  EXPECT_EQ(sim.b.payload_errors, 0u);
  const auto& sb = sim.b.conn->stats();
  EXPECT_EQ(sb.frag_bad_offset + sb.frag_oversize + sb.frag_mismatch + sb.frag_interrupted, 0u);
  EXPECT_FALSE(sim.b.conn->reassembling());
}

// ---- Reassembly alone: malformed fragment streams ------------------------------

Reassembly big_reassembly() {
  Reassembly r;
  r.set_limits(112, 104, kBigMax - 96);
  return r;
}

struct Frag {
  WireRecord rec;
  std::vector<std::uint8_t> payload;
  RecordView view() const { return RecordView{rec, payload.data()}; }
};

// The fragments the sender makes of slot `s`.
std::vector<Frag> fragments_of(std::uint32_t s) {
  Connection c(0, 1, 0, 1000, 1, kHz);
  c.enqueue(record_for(s), payload_for(s).data());
  std::vector<Frag> out;
  c.pump(1, [&](const std::uint8_t* p, std::size_t len) {
    FrameHeader h;
    std::memcpy(&h, p, sizeof h);
    RecordCursor cur(p + sizeof h, len - sizeof h);
    RecordView v;
    while (cur.next(&v))
      out.push_back({v.rec, std::vector<std::uint8_t>(v.payload, v.payload + v.rec.frag_len)});
  });
  return out;
}

std::uint32_t big_slot(std::size_t min_fragments) {
  std::uint32_t s = kBigFirst;
  while (body_of(s) <= min_fragments * kMaxFragmentBytes) ++s;
  return s;
}

Reassembly::Result feed(Reassembly& r, const std::vector<Frag>& fs, ConnectionStats& st, RecordView* out) {
  Reassembly::Result res = Reassembly::Result::kWhole;
  for (const Frag& f : fs) res = r.add(f.view(), out, st);
  return res;
}

TEST(Reassembly, WholeSlotFromItsFragments) {
  std::uint32_t s = big_slot(4);
  auto fs = fragments_of(s);
  ASSERT_GE(fs.size(), 5u);
  EXPECT_EQ(fs.front().rec.frag, kFragment | kFragMore);
  EXPECT_EQ(fs.back().rec.frag, kFragment);
  Reassembly r = big_reassembly();
  ConnectionStats st;
  RecordView out;
  for (std::size_t i = 0; i + 1 < fs.size(); ++i)
    EXPECT_EQ(r.add(fs[i].view(), &out, st), Reassembly::Result::kHeld);
  ASSERT_EQ(r.add(fs.back().view(), &out, st), Reassembly::Result::kComplete);
  WireRecord want = record_for(s);
  EXPECT_EQ(std::memcmp(&out.rec, &want, sizeof want), 0) << "the slot record, fragment fields cleared";
  auto p = payload_for(s);
  EXPECT_EQ(std::memcmp(out.payload, p.data(), p.size()), 0);
  EXPECT_EQ(st.slots_reassembled, 1u);
  EXPECT_FALSE(r.active());
  // A whole record after it passes through.
  Frag small{record_for(7), payload_for(7)};
  EXPECT_EQ(r.add(small.view(), &out, st), Reassembly::Result::kWhole);
}

TEST(Reassembly, WrongOffsetDropsTheSlot) {
  auto fs = fragments_of(big_slot(4));
  ConnectionStats st;
  RecordView out;
  {
    Reassembly r = big_reassembly();  // a fragment lost (skipped)
    std::vector<Frag> g = fs;
    g.erase(g.begin() + 2);
    EXPECT_EQ(feed(r, {g[0], g[1], g[2]}, st, &out), Reassembly::Result::kDropped);
    EXPECT_EQ(st.frag_bad_offset, 1u);
    EXPECT_FALSE(r.active());
    // The rest of the broken slot: orphans, each dropped.
    for (std::size_t i = 3; i < g.size(); ++i) EXPECT_EQ(r.add(g[i].view(), &out, st), Reassembly::Result::kDropped);
    EXPECT_EQ(st.frag_bad_offset, 1u + (g.size() - 3));
    EXPECT_EQ(st.slots_reassembled, 0u);
  }
  {
    Reassembly r = big_reassembly();  // a fragment repeated
    ConnectionStats st2;
    EXPECT_EQ(feed(r, {fs[0], fs[1], fs[1]}, st2, &out), Reassembly::Result::kDropped);
    EXPECT_EQ(st2.frag_bad_offset, 1u);
  }
  {
    Reassembly r = big_reassembly();  // a slot that starts in the middle
    ConnectionStats st2;
    EXPECT_EQ(r.add(fs[1].view(), &out, st2), Reassembly::Result::kDropped);
    EXPECT_EQ(st2.frag_bad_offset, 1u);
    EXPECT_FALSE(r.active());
    // A good slot afterwards is reassembled.
    EXPECT_EQ(feed(r, fs, st2, &out), Reassembly::Result::kComplete);
    EXPECT_EQ(st2.slots_reassembled, 1u);
  }
  {
    Reassembly r = big_reassembly();  // a new slot begins before the last one ended
    ConnectionStats st2;
    EXPECT_EQ(feed(r, {fs[0], fs[1], fs[0]}, st2, &out), Reassembly::Result::kDropped);
    EXPECT_EQ(st2.frag_bad_offset, 1u);
  }
}

TEST(Reassembly, OversizeSlotIsRefusedBeforeBuffering) {
  auto fs = fragments_of(big_slot(2));
  ConnectionStats st;
  RecordView out;
  Reassembly r = big_reassembly();
  Frag f = fs[0];
  f.rec.overflow_len = std::uint16_t(kBigMax - 96 + 8);
  EXPECT_EQ(r.add(f.view(), &out, st), Reassembly::Result::kDropped);
  EXPECT_EQ(st.frag_oversize, 1u);
  EXPECT_FALSE(r.active());
  f = fs[0];
  f.rec.primary_len = std::uint16_t(112 + 8);  // beyond either kind
  EXPECT_EQ(r.add(f.view(), &out, st), Reassembly::Result::kDropped);
  EXPECT_EQ(st.frag_oversize, 2u);
  // A fragment that claims bytes beyond its slot's total.
  f = fs[0];
  f.rec.frag_offset = std::uint32_t(f.rec.primary_len) + f.rec.overflow_len;
  EXPECT_EQ(r.add(f.view(), &out, st), Reassembly::Result::kDropped);
  f = fs.back();
  f.rec.frag = kFragment | kFragMore;  // "more" after the end
  EXPECT_EQ(feed(r, {fs.begin(), fs.end() - 1}, st, &out), Reassembly::Result::kHeld);
  EXPECT_EQ(r.add(f.view(), &out, st), Reassembly::Result::kDropped);
  EXPECT_FALSE(r.active());
  EXPECT_EQ(st.slots_reassembled, 0u);
}

TEST(Reassembly, MismatchedFieldsDropTheSlot) {
  std::uint32_t s = big_slot(3);
  auto fs = fragments_of(s);
  std::vector<std::function<void(WireRecord&)>> edits = {
      [](WireRecord& r) { r.kind = r.kind == kRecRequest ? kRecResponse : kRecRequest; },
      [](WireRecord& r) { ++r.client; },
      [](WireRecord& r) { ++r.trustee; },
      [](WireRecord& r) { ++r.slot_seq; },
      [](WireRecord& r) { ++r.count; },
      [](WireRecord& r) { r.app ^= 1; },
      [](WireRecord& r) { r.slot_flags ^= 1; },
      [](WireRecord& r) { r.primary_len -= 8, r.overflow_len += 8; },
  };
  for (std::size_t e = 0; e < edits.size(); ++e) {
    Reassembly r = big_reassembly();
    ConnectionStats st;
    RecordView out;
    Frag f = fs[1];
    edits[e](f.rec);
    EXPECT_EQ(feed(r, {fs[0], f}, st, &out), Reassembly::Result::kDropped) << "edit " << e;
    EXPECT_EQ(st.frag_mismatch, 1u) << "edit " << e;
    EXPECT_FALSE(r.active());
    // The rest of the slot is orphaned, and the next slot goes through.
    EXPECT_EQ(feed(r, {fs.begin() + 2, fs.end()}, st, &out), Reassembly::Result::kDropped);
    EXPECT_EQ(feed(r, fs, st, &out), Reassembly::Result::kComplete);
  }
}

TEST(Reassembly, WholeRecordMidSlotIsAProtocolError) {
  auto fs = fragments_of(big_slot(3));
  Reassembly r = big_reassembly();
  ConnectionStats st;
  RecordView out;
  Frag small{record_for(7), payload_for(7)};
  EXPECT_EQ(feed(r, {fs[0], fs[1], small}, st, &out), Reassembly::Result::kDropped);
  EXPECT_EQ(st.frag_interrupted, 1u);
  EXPECT_FALSE(r.active());
  EXPECT_EQ(r.add(small.view(), &out, st), Reassembly::Result::kWhole);
}

TEST(Reassembly, ResetForgetsThePartialSlot) {
  auto fs = fragments_of(big_slot(3));
  Reassembly r = big_reassembly();
  ConnectionStats st;
  RecordView out;
  EXPECT_EQ(feed(r, {fs[0], fs[1]}, st, &out), Reassembly::Result::kHeld);
  r.reset();
  EXPECT_FALSE(r.active());
  EXPECT_EQ(feed(r, fs, st, &out), Reassembly::Result::kComplete);
  EXPECT_EQ(st.slots_reassembled, 1u);
  EXPECT_EQ(st.frag_bad_offset + st.frag_mismatch + st.frag_interrupted + st.frag_oversize, 0u);
}

namespace {

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
