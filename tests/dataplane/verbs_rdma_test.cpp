// The verbs transport over a real RDMA device (issue 22): two hosts'
// transports (two VerbsTransports, each with its own device context,
// protection domain, registration and CQs, as two dataplanes have) in one
// process, their QPs connected through the device (loopback through the
// HCA, or rxe's through the kernel), endpoints exchanged in process as
// gossamerd would carry them. Records both ways, then a check that nothing
// was lost or duplicated. Then the whole path: two dataplanes with
// transport: verbs on the device (LoopbackRack; their UDP ports stay idle),
// their endpoints relayed as gossamerd relays them (verbs_gossamerd.hpp:
// the files, VerbsRelay, the VerbsEndpoints codec), fake applications
// carrying requests both ways over the queue pairs. Without a device it
// skips (exit 77) and says why: this project's CI machine has none, and its
// kernel has no rxe or siw.
//
//   GOSSAMER_VERBS_DEVICE   the device (default: the first)
//   GOSSAMER_VERBS_GID      the GID index (default 0; RoCE v2 often 1 or 3)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "loopback_rack.hpp"
#include "loopback_traffic.hpp"
#include "verbs.hpp"
#include "verbs_gossamerd.hpp"
#include "verbs_transport.hpp"

using namespace gossamer::dataplane;
using namespace gossamer::dataplane::verbs;

namespace {

struct Sink final : DeliverySink {
  std::uint64_t got = 0, sum = 0, failed = 0;
  void deliver(std::uint32_t, const wire::RecordView& v) override { ++got, sum += v.rec.slot_seq; }
  void peer_restarted(std::uint32_t, std::uint64_t) override {}
  void link_failed(std::uint32_t, std::uint64_t, const std::string& why) override {
    ++failed;
    std::fprintf(stderr, "link failed: %s\n", why.c_str());
  }
};

struct Published {
  std::uint32_t from, peer, conn;
  Endpoint e;
};

std::string g_device;
std::uint32_t g_gid = 0;

// Two dataplanes on the device, the endpoints through gossamerd's relay.
TEST(VerbsRdma, TwoDataplanesThroughGossamerdsRelay) {
  using namespace gossamer::dataplane::testing;
  LoopbackRack::Options o;
  o.conns = 2;
  o.verbs = true;
  o.verbs_device = g_device;
  o.verbs_gid = g_gid;
  o.prepare = [](int, Dataplane& dp) { dp.set_verbs([] { return make_ibv(); }); };
  LoopbackRack rack(o);
  GossamerdRelay gossamerd(rack.socket(0), rack.socket(1), o.conns);
  const std::string key = fresh_id();
  FakeApp a(rack.socket(0), 0, kHosts, kTotal, key), b(rack.socket(1), 1, kHosts, kTotal, key);
  attach_both(a, b);
  Traffic t(a, b, 2000);
  ASSERT_TRUE(run_until(t, std::chrono::seconds(60)));
  a.send_detach();
  b.send_detach();
  ASSERT_TRUE(a.wait_message(gossamer::abi::kMsgDetached, 10'000));
  ASSERT_TRUE(b.wait_message(gossamer::abi::kMsgDetached, 10'000));
  rack.stop();
  gossamerd.stop();
  EXPECT_EQ(gossamerd.errors(), 0u);
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(rack.stat(h, "tx_frames"), 0u) << "host " << h;
    EXPECT_GT(rack.stat(h, "wrs_posted"), 0u) << "host " << h;
    EXPECT_EQ(rack.stat(h, "qp_errors"), 0u) << "host " << h;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* dev_env = std::getenv("GOSSAMER_VERBS_DEVICE");
  const char* gid_env = std::getenv("GOSSAMER_VERBS_GID");
  const std::string device = g_device = dev_env ? dev_env : "";
  const std::uint32_t gid_index = g_gid = gid_env ? std::uint32_t(std::atoi(gid_env)) : 0;
  std::unique_ptr<Verbs> v[2] = {make_ibv(), make_ibv()};
  bool ok = false;
  const std::string why = check_verbs(make_ibv().get(), device, 1, gid_index, &ok);
  if (!ok) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  std::printf("%s\n", why.c_str());
  std::deque<Published> exchange;
  PortInfo pi[2];
  std::unique_ptr<VerbsTransport> t[2];
  Sink sink[2];
  for (std::uint32_t h = 0; h < 2; ++h) {
    std::string err = v[h]->open(device, 1, gid_index, &pi[h]);
    if (err.empty()) err = v[h]->alloc_pd();
    if (!err.empty()) return std::printf("FAIL: host %u: %s\n", h, err.c_str()), 1;
    TransportConfig c;
    c.self = h;
    c.hosts = 2;
    c.conns_per_host = 2;
    c.seed = h + 1;
    c.channel.qp.path_mtu = std::min<std::uint32_t>(pi[h].active_mtu, 4096);
    t[h] = std::make_unique<VerbsTransport>(*v[h], c, [&exchange, h](std::uint32_t peer, std::uint32_t conn,
                                                                     const Endpoint& e) {
      exchange.push_back({h, peer, conn, e});
    });
    if (err = t[h]->start(); !err.empty()) return std::printf("FAIL: start: %s\n", err.c_str()), 1;
  }
  constexpr std::uint32_t kRecords = 20000;
  std::uint64_t want = 0;
  const std::uint8_t payload[64] = {};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::uint32_t sent = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    while (!exchange.empty()) {
      const Published p = exchange.front();
      exchange.pop_front();
      t[p.peer]->remote(p.from, p.from + 1, pi[p.from].gid, pi[p.from].lid, p.conn, p.e, sink[p.peer]);
    }
    for (int burst = 0; burst < 32 && sent < kRecords && t[0]->usable(1, sent % 2); ++burst) {
      wire::WireRecord r{};
      r.kind = wire::kRecRequest;
      r.count = 1;
      r.slot_seq = ++sent;
      r.primary_len = 64;
      t[0]->enqueue(1, sent % 2, r, payload);
      r.kind = wire::kRecResponse;
      t[1]->enqueue(0, sent % 2, r, payload);
      want += sent;
    }
    for (int h = 0; h < 2; ++h) t[h]->pump(), t[h]->poll(sink[h]);
    if (sink[0].got == kRecords && sink[1].got == kRecords) break;
  }
  const QpTotals q = t[0]->totals();
  std::printf("host 0: %llu records in, %llu WRs posted (%llu signaled), %llu doorbells, %llu CQ polls\n",
              (unsigned long long)sink[0].got, (unsigned long long)q.sum.wrs_posted,
              (unsigned long long)q.sum.wrs_signaled, (unsigned long long)q.sum.doorbells,
              (unsigned long long)q.cq_polls);
  for (int h = 0; h < 2; ++h)
    if (sink[h].got != kRecords || sink[h].sum != want || sink[h].failed) {
      std::printf("FAIL: host %d received %llu of %u records (sum %llu, want %llu), %llu link failures\n", h,
                  (unsigned long long)sink[h].got, kRecords, (unsigned long long)sink[h].sum,
                  (unsigned long long)want, (unsigned long long)sink[h].failed);
      return 1;
    }
  std::printf("PASS: the transports alone; now two dataplanes\n");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
