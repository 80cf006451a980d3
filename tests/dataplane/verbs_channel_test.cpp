// The verbs transport's logic above the verbs calls (issue 22), against the
// recording fake (verbs_fake.hpp): immediates, ring positions, credits
// across wraparound, WR building and doorbell batching, selective
// signaling, the QP state machine, failure and reconnect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "verbs_channel.hpp"
#include "verbs_config.hpp"
#include "verbs_fake.hpp"

namespace gossamer::dataplane::verbs {
namespace {

using fake::FakeFabric;
using fake::FakeVerbs;

TEST(VerbsImm, RoundTripsAndKeepsItsFieldsApart) {
  const Imm m{kMaxUnits - 1, kMaxRecords, kMaxCreditReturn};
  EXPECT_EQ(decode_imm(encode_imm(m)), m);
  EXPECT_EQ(encode_imm({1, 0, 0}), 1u);
  EXPECT_EQ(encode_imm({0, 1, 0}), 1u << 14);
  EXPECT_EQ(encode_imm({0, 0, 1}), 1u << 20);
  EXPECT_EQ(decode_imm(encode_imm({5, 3, 7})), (Imm{5, 3, 7}));
  EXPECT_EQ(units_of(0), 0u);
  EXPECT_EQ(units_of(1), 1u);
  EXPECT_EQ(units_of(64), 1u);
  EXPECT_EQ(units_of(65), 2u);
}

TEST(VerbsRing, WriterSkipsTheTailAndCountsItAgainstCredits) {
  RingWriter w(10);
  std::uint32_t pos, skip;
  ASSERT_TRUE(w.place(7, &pos, &skip));
  EXPECT_EQ(pos, 0u);
  EXPECT_EQ(skip, 0u);
  w.advance(skip, 7);
  EXPECT_EQ(w.credits(), 3u);
  EXPECT_FALSE(w.place(4, &pos, &skip));  // 3 left
  w.grant(7);                             // the receiver freed the first message
  ASSERT_TRUE(w.place(4, &pos, &skip));   // 7 + 4 > 10: from unit 0, skipping 3
  EXPECT_EQ(pos, 0u);
  EXPECT_EQ(skip, 3u);
  w.advance(skip, 4);
  EXPECT_EQ(w.head(), 14u);
  EXPECT_EQ(w.credits(), 3u);
}

TEST(VerbsRing, ReaderChecksPositionsAndCredits) {
  RingReader r(10);
  EXPECT_FALSE(r.accept(3, 64));          // must start at 0
  EXPECT_TRUE(r.accept(0, 7 * 64));
  EXPECT_FALSE(r.accept(0, 64));          // fits at 7: a skip is not allowed
  EXPECT_FALSE(r.accept(7, 4 * 64));      // across the end
  EXPECT_TRUE(r.accept(7, 3 * 64));       // exactly to the end
  EXPECT_FALSE(r.accept(0, 64));          // nothing returned yet: beyond the sender's credits
  EXPECT_EQ(r.take_return(), 10u);
  EXPECT_TRUE(r.accept(0, 64));
  EXPECT_EQ(r.owed(), 1u);
}

TEST(VerbsRing, ReturnsAreCappedByTheImmediateField) {
  RingReader r(kMaxUnits);
  ASSERT_TRUE(r.accept(0, (kMaxUnits - 1) * kUnitBytes));
  std::uint64_t back = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.take_return(), kMaxCreditReturn);
    back += kMaxCreditReturn;
  }
  EXPECT_EQ(r.take_return(), kMaxUnits - 1 - back);
  EXPECT_EQ(r.take_return(), 0u);
}

// Two hosts on one fake fabric, one channel each, connected.
struct Sink final : RecordSink {
  std::vector<std::uint32_t> seqs;
  void record(const wire::RecordView& v) override { seqs.push_back(v.rec.slot_seq); }
};

struct Host {
  FakeVerbs v;
  std::vector<std::uint8_t> mem;
  Mr mr;
  Handle scq = 0, rcq = 0;
  std::unique_ptr<QpChannel> ch;
  Sink sink;
  Host(FakeFabric& f, const ChannelConfig& c, std::uint32_t id) : v(f, {"mlx5_0"}), mem(2 * c.ring_units * kUnitBytes) {
    PortInfo pi;
    EXPECT_EQ(v.open("mlx5_0", 1, 0, &pi), "");
    EXPECT_EQ(v.alloc_pd(), "");
    EXPECT_EQ(v.reg_mr(mem.data(), mem.size(), &mr), "");
    EXPECT_EQ(v.create_cq(1024, &scq), "");
    EXPECT_EQ(v.create_cq(1024, &rcq), "");
    ch = std::make_unique<QpChannel>(v, scq, rcq, mr, mem.data(), mem.data() + c.ring_units * kUnitBytes, c, id, id);
    EXPECT_EQ(ch->create(), "");
  }
  // Every completion of both CQs to the channel, then receives posted again.
  int poll() {
    Completion cs[16];
    int total = 0;
    for (Handle cq : {scq, rcq})
      for (int n; (n = v.poll_cq(cq, cs, 16)) > 0; total += n)
        for (int i = 0; i < n; ++i) ch->on_completion(cs[i], sink);
    ch->repost_receives();
    return total;
  }
};

struct Pair {
  FakeFabric fabric;
  Host a, b;
  explicit Pair(const ChannelConfig& c) : a(fabric, c, 1), b(fabric, c, 2) {
    EXPECT_EQ(a.ch->connect(b.v.gid, 0, b.ch->local()), "");
    EXPECT_EQ(b.ch->connect(a.v.gid, 0, a.ch->local()), "");
  }
  // Until nothing moves: pumps, the wire, completions.
  void run() {
    for (int i = 0; i < 10000; ++i) {
      std::size_t moved = a.ch->pump() + b.ch->pump() + fabric.deliver();
      moved += std::size_t(a.poll() + b.poll());
      if (!moved) return;
    }
    ADD_FAILURE() << "did not settle";
  }
};

void put(QpChannel& ch, std::uint32_t seq, std::size_t bytes = 8) {
  wire::WireRecord r{};
  r.kind = wire::kRecRequest;
  r.slot_seq = seq;
  r.count = 1;
  r.primary_len = std::uint16_t(bytes);
  std::vector<std::uint8_t> p(bytes, std::uint8_t(seq));
  ch.enqueue(r, p.data());
}

ChannelConfig small(std::uint32_t units = 64) {
  ChannelConfig c;
  c.ring_units = units;
  c.signal_interval = 4;
  c.qp.max_send_wr = 8;
  return c;
}

TEST(VerbsChannel, CoalescesRecordsIntoOneWriteWithImm) {
  Pair p(small());
  for (std::uint32_t s = 1; s <= 3; ++s) put(*p.a.ch, s, 24);
  EXPECT_EQ(p.a.ch->pump(), 1u);
  ASSERT_EQ(p.a.v.posts.size(), 1u);
  ASSERT_EQ(p.a.v.posts[0].wrs.size(), 1u);
  const SendWr& wr = p.a.v.posts[0].wrs[0];
  EXPECT_EQ(wr.length, 3 * (sizeof(wire::WireRecord) + 24));
  EXPECT_EQ(wr.remote_addr, p.b.ch->local().ring_addr);
  EXPECT_EQ(wr.rkey, p.b.ch->local().rkey);
  EXPECT_EQ(wr.lkey, p.a.mr.lkey);
  EXPECT_EQ(decode_imm(wr.imm), (Imm{0, 3, 0}));
  p.run();
  EXPECT_EQ(p.b.sink.seqs, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(p.b.ch->stats().records_received, 3u);
}

TEST(VerbsChannel, OneDoorbellPerBurstWithoutCoalescing) {
  ChannelConfig c = small();
  c.coalescing = false;
  c.qp.max_send_wr = 64;
  Pair p(c);
  for (std::uint32_t s = 1; s <= 5; ++s) put(*p.a.ch, s);
  EXPECT_EQ(p.a.ch->pump(), 5u);
  ASSERT_EQ(p.a.v.posts.size(), 1u);  // one post_send, a list of five
  ASSERT_EQ(p.a.v.posts[0].wrs.size(), 5u);
  // Each message one unit (40 bytes), back to back in the ring.
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_EQ(decode_imm(p.a.v.posts[0].wrs[i].imm).pos, i);
  p.run();
  EXPECT_EQ(p.b.sink.seqs.size(), 5u);
}

TEST(VerbsChannel, SignalsEveryNthWrAndNeverOverfillsTheSendQueue) {
  ChannelConfig c = small();
  c.coalescing = false;  // one WR per record
  Pair p(c);             // signal every 4, send queue of 8
  for (std::uint32_t s = 1; s <= 20; ++s) put(*p.a.ch, s);
  EXPECT_EQ(p.a.ch->pump(), 8u);  // the queue is full
  EXPECT_EQ(p.a.ch->pump(), 0u);
  EXPECT_EQ(p.a.ch->stats().sq_full, 2u);
  std::size_t signaled = 0;
  for (const SendWr& w : p.a.v.posts[0].wrs) signaled += w.signaled;
  EXPECT_EQ(signaled, 2u);
  EXPECT_TRUE(p.a.v.posts[0].wrs[3].signaled && p.a.v.posts[0].wrs[7].signaled);
  p.run();
  EXPECT_EQ(p.b.sink.seqs.size(), 20u);
  EXPECT_EQ(p.a.ch->stats().wrs_posted, 20u);
  EXPECT_EQ(p.a.ch->stats().wrs_signaled, 5u);
  EXPECT_EQ(p.a.ch->sq_outstanding(), 0u);
  EXPECT_GE(p.a.ch->stats().doorbells, 3u);
}

TEST(VerbsChannel, CreditsCarryAcrossManyWrapsInOrderAndExactlyOnce) {
  ChannelConfig c = small(16);  // 1 KiB of ring, messages of 4 units at most
  c.qp.max_send_wr = 64;
  c.signal_interval = 8;
  Pair p(c);
  std::vector<std::uint32_t> want;
  // Messages of 1..4 units, so that the tail is skipped now and then.
  for (std::uint32_t s = 1; s <= 400; ++s) {
    put(*p.a.ch, s, 8 + 56 * (s % 4));
    want.push_back(s);
    if (s % 7 == 0) p.run();
  }
  p.run();
  EXPECT_EQ(p.b.sink.seqs, want);
  EXPECT_GT(p.a.ch->stats().credit_stalls, 0u);
  EXPECT_GT(p.b.ch->stats().credit_returns_alone, 0u);  // b sends nothing else to carry them
  EXPECT_EQ(p.b.ch->stats().protocol_errors, 0u);
  // Every unit is either a's to write again or owed by b (less than a
  // quarter of the ring, which b keeps until it has something to send).
  EXPECT_EQ(p.a.ch->credits() + p.b.ch->owed(), 16u);
  EXPECT_LT(p.b.ch->owed(), 4u);
}

TEST(VerbsChannel, ARecordLargerThanAMessageIsCountedNotQueued) {
  Pair p(small(16));  // messages of 256 bytes at most
  put(*p.a.ch, 1, 512);
  EXPECT_FALSE(p.a.ch->has_pending());
  EXPECT_EQ(p.a.ch->stats().records_too_large, 1u);
}

TEST(VerbsChannel, CreditsRideOnTheOtherDirectionsMessages) {
  Pair p(small(16));
  for (std::uint32_t s = 1; s <= 4; ++s) put(*p.a.ch, s, 56);  // 4 units
  p.a.ch->pump();
  p.fabric.deliver();
  p.b.poll();
  put(*p.b.ch, 100);
  p.b.ch->pump();
  ASSERT_EQ(p.b.v.posts.size(), 1u);
  EXPECT_EQ(decode_imm(p.b.v.posts[0].wrs[0].imm).credits, units_of(4 * (32 + 56)));  // one message, 6 units
  EXPECT_EQ(p.b.ch->stats().credit_returns_alone, 0u);
}

TEST(VerbsChannel, WalksTheQpStatesWithTheConfiguredRetries) {
  FakeFabric f;
  Host h(f, small(), 1);
  EXPECT_EQ(h.ch->state(), QpState::kInit);
  EXPECT_FALSE(h.ch->usable());
  h.v.fail_next_modify = "Connection timed out";
  EXPECT_NE(h.ch->connect(h.v.gid, 0, Endpoint{0x999, 1, 0, 1, 8, 0}).find("to RTR: Connection timed out"),
            std::string::npos);
  EXPECT_EQ(h.ch->state(), QpState::kError);
  EXPECT_EQ(h.ch->stats().qp_errors, 1u);
  EXPECT_NE(h.ch->take_failure().find("to RTR"), std::string::npos);
  ASSERT_EQ(h.ch->recreate(), "");
  EXPECT_EQ(h.ch->local().generation, 1u);
  EXPECT_EQ(h.ch->connect(h.v.gid, 0, Endpoint{0x999, 1, 0, 1, 8, 1}), "");
  EXPECT_TRUE(h.ch->usable());
  const auto& q = h.v.qps.at(h.v.qps.rbegin()->first);
  EXPECT_EQ(q.transitions, (std::vector<QpState>{QpState::kInit, QpState::kRtr, QpState::kRts}));
  EXPECT_EQ(q.remote.qpn, 0x999u);
}

// dataplane.verbs reaches the QPs: queue depths at creation, path MTU at
// RTR, the ACK timeout and retry counts at RTS, the signaling interval and
// the ring size in the channel.
TEST(VerbsChannel, TakesItsSettingsFromTheYaml) {
  const auto r = config::load_string("dataplane:\n"
                                     "  transport: verbs\n"
                                     "  verbs: {ring_kib: 128, signal_interval: 3, max_send_wr: 6, path_mtu: 4096,\n"
                                     "          timeout: 18, retry_count: 5, rnr_retry: 2}\n",
                                     "t.yaml");
  ASSERT_TRUE(r.ok());
  ChannelConfig c = channel_config(r.config());
  EXPECT_EQ(c.ring_units, 2048u);
  c.coalescing = false;
  Pair p(c);
  const auto& q = p.a.v.qps.begin()->second;
  ASSERT_EQ(q.configs.size(), 3u);
  EXPECT_EQ(q.configs[1].path_mtu, 4096u);
  EXPECT_EQ(q.configs[2].timeout, 18u);
  EXPECT_EQ(q.configs[2].retry_count, 5u);
  EXPECT_EQ(q.configs[2].rnr_retry, 2u);
  EXPECT_EQ(q.configs[0].max_recv_wr, 2048u + 16);
  EXPECT_NE(std::find(p.a.v.calls.begin(), p.a.v.calls.end(), "create_qp 6/2064"), p.a.v.calls.end());
  for (std::uint32_t s = 1; s <= 6; ++s) put(*p.a.ch, s);
  EXPECT_EQ(p.a.ch->pump(), 6u);  // the send queue's 6
  EXPECT_EQ(p.a.ch->stats().wrs_signaled, 2u);  // every 3rd
}

TEST(VerbsChannel, RefusesARingItCannotAddress) {
  FakeFabric f;
  Host h(f, small(), 1);
  EXPECT_NE(h.ch->connect(h.v.gid, 0, Endpoint{1, 1, 0, 1, kMaxUnits + 1, 0}), "");
  EXPECT_EQ(h.ch->state(), QpState::kInit);
}

TEST(VerbsChannel, AFailedQpLosesItsInFlightRecordsAndReconnectsWithoutSendingThemAgain) {
  ChannelConfig c = small();
  c.coalescing = false;
  Pair p(c);
  for (std::uint32_t s = 1; s <= 3; ++s) put(*p.a.ch, s);
  p.run();  // 1..3 arrive
  for (std::uint32_t s = 4; s <= 6; ++s) put(*p.a.ch, s);
  p.a.ch->pump();  // 4..6 on the wire
  for (std::uint32_t s = 7; s <= 8; ++s) put(*p.a.ch, s);  // queued, not posted
  p.a.v.fail_qp(p.a.v.qps.rbegin()->first);
  p.a.poll();
  EXPECT_EQ(p.a.ch->state(), QpState::kError);
  EXPECT_EQ(p.a.ch->stats().qp_errors, 1u);
  // In doubt: every record no completion confirmed. 1..3 did arrive, but no
  // signaled WR (every 4th) covered them, so a cannot know.
  EXPECT_EQ(p.a.ch->stats().in_doubt_records, 6u);
  EXPECT_NE(p.a.ch->take_failure().find("retry exceeded"), std::string::npos);
  const std::uint32_t old_qpn = p.a.ch->local().qpn;
  ASSERT_EQ(p.a.ch->recreate(), "");
  EXPECT_NE(p.a.ch->local().qpn, old_qpn);
  // b learns a's new QP (the exchange): its own QP is replaced too.
  EXPECT_EQ(p.b.ch->connect(p.a.v.gid, 0, p.a.ch->local()), "reconnect");
  ASSERT_EQ(p.b.ch->recreate(), "");
  EXPECT_EQ(p.b.ch->connect(p.a.v.gid, 0, p.a.ch->local()), "");
  EXPECT_EQ(p.a.ch->connect(p.b.v.gid, 0, p.b.ch->local()), "");
  EXPECT_EQ(p.a.ch->connect(p.b.v.gid, 0, p.b.ch->local()), "");  // the same again: ignored
  p.run();
  EXPECT_EQ(p.b.sink.seqs, (std::vector<std::uint32_t>{1, 2, 3, 7, 8}));
  EXPECT_EQ(p.a.ch->stats().reconnects, 1u);
  EXPECT_EQ(p.b.ch->stats().reconnects, 1u);
}

TEST(VerbsChannel, AFailedPostFailsTheQp) {
  Pair p(small());
  put(*p.a.ch, 1);
  p.a.v.fail_next_post = 12;  // ENOMEM
  EXPECT_EQ(p.a.ch->pump(), 0u);
  EXPECT_EQ(p.a.ch->state(), QpState::kError);
  EXPECT_EQ(p.a.ch->stats().in_doubt_records, 1u);
}

TEST(VerbsChannel, AMessageOutOfPlaceIsAProtocolError) {
  Pair p(small());
  Completion c;
  c.qp = 0;
  c.wr_id = std::uint64_t(2) << 44;
  c.kind = Completion::Kind::kRecvImm;
  c.ok = true;
  c.imm = encode_imm({5, 1, 0});  // the ring's next message starts at 0
  c.byte_len = 40;
  p.b.ch->on_completion(c, p.b.sink);
  EXPECT_EQ(p.b.ch->stats().protocol_errors, 1u);
  EXPECT_EQ(p.b.ch->state(), QpState::kError);
  EXPECT_TRUE(p.b.sink.seqs.empty());
}

TEST(VerbsChannel, RecordsThatDoNotCheckAreAProtocolError) {
  Pair p(small());
  std::memset(p.b.mem.data(), 0x7f, 64);  // garbage where a's first message would be
  Completion c;
  c.wr_id = std::uint64_t(2) << 44;
  c.kind = Completion::Kind::kRecvImm;
  c.ok = true;
  c.imm = encode_imm({0, 1, 0});
  c.byte_len = 40;
  p.b.ch->on_completion(c, p.b.sink);
  EXPECT_EQ(p.b.ch->stats().protocol_errors, 1u);
  EXPECT_TRUE(p.b.sink.seqs.empty());
}

TEST(VerbsChannel, IgnoresCompletionsOfADestroyedQp) {
  Pair p(small());
  ASSERT_EQ(p.a.ch->recreate(), "");
  Completion c;
  c.wr_id = std::uint64_t(1) << 44;  // generation 0
  c.kind = Completion::Kind::kSend;
  c.ok = false;
  c.status = "flushed";
  p.a.ch->on_completion(c, p.a.sink);
  EXPECT_EQ(p.a.ch->stats().stale_completions, 1u);
  EXPECT_EQ(p.a.ch->state(), QpState::kInit);
}

}  // namespace
}  // namespace gossamer::dataplane::verbs

// ---- FLOCK's schedulers over a channel (flock.cpp through the Transport) ----

namespace gossamer::dataplane::verbs {
namespace {

TEST(VerbsChannel, TheReceiversGrantReachesTheSenderAsANotice) {
  Pair p(small());
  ASSERT_TRUE(p.a.ch->usable());
  p.b.ch->set_inbound_active(false);  // b's QP scheduler: a may not send on it
  EXPECT_EQ(p.b.ch->pump(), 1u);
  ASSERT_EQ(p.b.v.posts.size(), 1u);
  const SendWr& wr = p.b.v.posts[0].wrs[0];
  EXPECT_EQ(wr.length, 0u);
  EXPECT_EQ(decode_imm(wr.imm).pos, QpChannel::kNoticeInactive);
  EXPECT_EQ(decode_imm(wr.imm).records, 0u);
  p.run();
  EXPECT_FALSE(p.a.ch->usable());
  EXPECT_EQ(p.a.ch->state(), QpState::kRts);  // connected, only not granted
  p.b.ch->set_inbound_active(false);          // no change: nothing to say
  EXPECT_EQ(p.b.ch->pump(), 0u);
  p.b.ch->set_inbound_active(true);
  p.run();
  EXPECT_TRUE(p.a.ch->usable());
  EXPECT_EQ(p.b.ch->stats().activation_notices, 2u);
  EXPECT_EQ(p.a.ch->stats().protocol_errors, 0u);
}

TEST(VerbsChannel, AZeroLengthMessageWithAnUnknownPositionIsAProtocolError) {
  Pair p(small());
  Completion c;
  c.wr_id = std::uint64_t(2) << 44;
  c.kind = Completion::Kind::kRecvImm;
  c.ok = true;
  c.imm = encode_imm({QpChannel::kNoticeActive + 1, 0, 0});
  p.b.ch->on_completion(c, p.b.sink);
  EXPECT_EQ(p.b.ch->stats().protocol_errors, 1u);
  EXPECT_EQ(p.b.ch->state(), QpState::kError);
}

TEST(VerbsChannel, UtilizationIsTheRecordsThePeerWrote) {
  Pair p(small());
  for (std::uint32_t s = 1; s <= 5; ++s) put(*p.a.ch, s);
  p.run();
  bool data = false;
  EXPECT_EQ(p.b.ch->take_utilization(&data), 5u);
  EXPECT_TRUE(data);
  EXPECT_EQ(p.b.ch->take_utilization(&data), 0u);
  EXPECT_FALSE(data);
}

TEST(VerbsChannel, WaitingRecordsMoveWholeToAnotherChannel) {
  Pair p(small());
  for (std::uint32_t s = 1; s <= 3; ++s) put(*p.a.ch, s, 16);
  std::vector<std::uint8_t> moved;
  p.a.ch->take_pending(&moved);
  EXPECT_FALSE(p.a.ch->has_pending());
  EXPECT_EQ(moved.size(), 3 * (sizeof(wire::WireRecord) + 16));
  EXPECT_EQ(p.a.ch->pump(), 0u);  // nothing left to send here
  // Queued on the other direction's channel (as on connection 0); a cut
  // last record is dropped, not guessed at.
  p.b.ch->enqueue_records(moved.data(), moved.size() - 1);
  p.run();
  EXPECT_EQ(p.a.sink.seqs, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_TRUE(p.b.sink.seqs.empty());
}

}  // namespace
}  // namespace gossamer::dataplane::verbs
