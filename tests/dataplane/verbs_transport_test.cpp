// The verbs transport as the dataplane's stages see it (transport.hpp), two
// hosts over the recording fake: one registration, endpoints exchanged,
// records across, batched CQ polls, a failed QP reported to the sink (fate
// sharing) and re-established, and a peer's restart.
#include <gtest/gtest.h>

#include <deque>
#include <memory>

#include "verbs_fake.hpp"
#include "verbs_transport.hpp"

namespace gossamer::dataplane::verbs {
namespace {

using fake::FakeFabric;
using fake::FakeVerbs;

struct TestSink final : DeliverySink {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> got;  // (peer, slot_seq)
  std::vector<std::pair<std::uint32_t, std::uint64_t>> failed, restarted;
  void deliver(std::uint32_t peer, const wire::RecordView& v) override { got.emplace_back(peer, v.rec.slot_seq); }
  void peer_restarted(std::uint32_t peer, std::uint64_t boot) override { restarted.emplace_back(peer, boot); }
  void link_failed(std::uint32_t peer, std::uint64_t records, const std::string&) override {
    failed.emplace_back(peer, records);
  }
};

struct Published {
  std::uint32_t from, peer, conn;
  Endpoint e;
};

struct Host {
  FakeVerbs v;
  std::unique_ptr<VerbsTransport> t;
  TestSink sink;
  std::uint64_t boot;
  Host(FakeFabric& f, std::uint32_t self, std::uint64_t b, std::deque<Published>& out) : v(f, {"rxe0"}), boot(b) {
    PortInfo pi;
    EXPECT_EQ(v.open("", 1, 0, &pi), "");
    EXPECT_EQ(v.alloc_pd(), "");
    TransportConfig c;
    c.self = self;
    c.hosts = 2;
    c.conns_per_host = 2;
    c.channel.ring_units = 64;
    c.channel.signal_interval = 4;
    c.channel.qp.max_send_wr = 16;
    t = std::make_unique<VerbsTransport>(v, c, [&out, self](std::uint32_t peer, std::uint32_t conn, const Endpoint& e) {
      out.push_back({self, peer, conn, e});
    });
    EXPECT_EQ(t->start(), "");
  }
};

struct Rack {
  FakeFabric fabric;
  std::deque<Published> exchange;  // what gossamerd would carry
  std::unique_ptr<Host> h[2];
  Rack() {
    h[0] = std::make_unique<Host>(fabric, 0, 100, exchange);
    h[1] = std::make_unique<Host>(fabric, 1, 200, exchange);
  }
  void carry() {
    while (!exchange.empty()) {
      const Published p = exchange.front();
      exchange.pop_front();
      Host& to = *h[p.peer];
      to.t->remote(p.from, h[p.from]->boot, h[p.from]->v.gid, 0, p.conn, p.e, to.sink);
    }
  }
  void run() {
    for (int i = 0; i < 1000; ++i) {
      carry();
      bool moved = h[0]->t->pump() | h[1]->t->pump();
      moved |= fabric.deliver() != 0;
      moved |= h[0]->t->poll(h[0]->sink) | h[1]->t->poll(h[1]->sink);
      if (!moved && exchange.empty()) return;
    }
    ADD_FAILURE() << "did not settle";
  }
};

wire::WireRecord rec(std::uint32_t seq) {
  wire::WireRecord r{};
  r.kind = wire::kRecRequest;
  r.count = 1;
  r.slot_seq = seq;
  r.primary_len = 16;
  return r;
}
const std::uint8_t kPayload[16] = {};

TEST(VerbsTransport, RegistersOnceAndCarriesRecordsBothWays) {
  Rack r;
  EXPECT_EQ(std::count_if(r.h[0]->v.calls.begin(), r.h[0]->v.calls.end(),
                          [](const std::string& c) { return c.rfind("reg_mr", 0) == 0; }),
            1);
  EXPECT_EQ(r.exchange.size(), 4u);  // two connections each way
  EXPECT_FALSE(r.h[0]->t->usable(1, 0));
  r.carry();
  EXPECT_TRUE(r.h[0]->t->usable(1, 0) && r.h[0]->t->usable(1, 1) && r.h[1]->t->usable(0, 1));
  EXPECT_FALSE(r.h[0]->t->usable(0, 0));  // no connection to itself
  for (std::uint32_t s = 1; s <= 10; ++s) r.h[0]->t->enqueue(1, s % 2, rec(s), kPayload);
  r.h[1]->t->enqueue(0, 0, rec(99), kPayload);
  r.run();
  EXPECT_EQ(r.h[1]->sink.got.size(), 10u);
  EXPECT_EQ(r.h[0]->sink.got, (std::vector<std::pair<std::uint32_t, std::uint32_t>>{{1, 99}}));
  // Still one registration; completions polled in batches, not one call each.
  EXPECT_EQ(std::count_if(r.h[0]->v.calls.begin(), r.h[0]->v.calls.end(),
                          [](const std::string& c) { return c.rfind("reg_mr", 0) == 0; }),
            1);
  const QpTotals t = r.h[0]->t->totals();
  EXPECT_EQ(t.qps, 2u);
  EXPECT_EQ(t.sum.wrs_posted, 2u);  // one coalesced message per connection
  EXPECT_GT(t.cq_polls, 0u);
  abi::ConnCounters c{};
  r.h[1]->t->counters(0, 1, &c);
  EXPECT_EQ(c.records_received, 5u);
  EXPECT_EQ(c.established, 1u);
  EXPECT_EQ(r.h[0]->t->next_deadline(), UINT64_MAX);
}

TEST(VerbsTransport, AFailedQpIsReportedReestablishedAndNeverResends) {
  Rack r;
  r.carry();
  r.h[0]->t->enqueue(1, 0, rec(1), kPayload);
  r.h[0]->t->pump();  // on the wire
  FakeVerbs& v0 = r.h[0]->v;
  const Handle qp = [&] {
    for (auto& [h, q] : v0.qps)
      if (q.qpn == r.h[0]->t->channel(1, 0)->local().qpn) return h;
    return Handle(0);
  }();
  v0.fail_qp(qp);
  r.h[0]->t->poll(r.h[0]->sink);
  ASSERT_EQ(r.h[0]->sink.failed.size(), 1u);
  EXPECT_EQ(r.h[0]->sink.failed[0], (std::pair<std::uint32_t, std::uint64_t>{1, 1}));  // one record lost
  EXPECT_EQ(r.h[0]->t->channel(1, 0)->state(), QpState::kInit);  // a new QP, published
  ASSERT_EQ(r.exchange.size(), 1u);
  EXPECT_EQ(r.exchange[0].e.generation, 1u);
  r.h[0]->t->enqueue(1, 0, rec(2), kPayload);
  r.run();  // host 1 learns the new QP: it replaces its own, and host 0 connects to that
  EXPECT_EQ(r.h[1]->sink.failed.size(), 1u);  // the peer's side of the same link failed too
  EXPECT_EQ(r.h[1]->sink.got, (std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 2}}));
  EXPECT_TRUE(r.h[0]->t->usable(1, 0) && r.h[1]->t->usable(0, 0));
  EXPECT_EQ(r.h[0]->t->totals().sum.reconnects, 1u);
}

TEST(VerbsTransport, APeersNewIncarnationStartsItsQueuePairsOver) {
  Rack r;
  r.run();
  // Host 1 restarts: a new transport, a new incarnation, generations from 0 again.
  r.h[1] = std::make_unique<Host>(r.fabric, 1, 300, r.exchange);
  r.h[1]->t->enqueue(0, 1, rec(7), kPayload);
  r.run();
  EXPECT_EQ(r.h[0]->sink.restarted, (std::vector<std::pair<std::uint32_t, std::uint64_t>>{{1, 300}}));
  EXPECT_EQ(r.h[0]->sink.got, (std::vector<std::pair<std::uint32_t, std::uint32_t>>{{1, 7}}));
  EXPECT_TRUE(r.h[0]->t->usable(1, 0) && r.h[0]->t->usable(1, 1));
  // An endpoint of the old incarnation arriving late is ignored.
  const std::uint32_t qpn = r.h[0]->t->channel(1, 0)->local().qpn;
  r.h[0]->t->remote(1, 200, r.h[1]->v.gid, 0, 0, Endpoint{0x777, 1, 4096, 1, 64, 9}, r.h[0]->sink);
  EXPECT_EQ(r.h[0]->t->channel(1, 0)->local().qpn, qpn);
  EXPECT_TRUE(r.h[0]->t->usable(1, 0));
}

}  // namespace
}  // namespace gossamer::dataplane::verbs
