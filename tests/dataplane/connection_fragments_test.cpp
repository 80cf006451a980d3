// Slots larger than a frame over the simulated link (connection_sim.hpp):
// fragments arrive whole and in order, take credits, and survive faults and
// peer restarts; and the receiver's reassembly of them, fragment by fragment.
#include "connection_sim.hpp"

// ---- slots larger than a frame: fragments -------------------------------------------

static_assert(kBigMax > 4 * gossamer::dataplane::wire::kMaxFragmentBytes,
              "large slots must need several fragments");

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
