// Two whole dataplanes with dataplane.transport: verbs in one process, over
// the recording fake of the verbs calls (verbs_fake.hpp) instead of a device
// (issue 22): the smallest real unit above the verbs calls. What gossamerd
// does between them runs as gossamerd runs it: each dataplane's <socket>.verbs
// goes through a VerbsRelay (controlplane/src/verbs_relay.hpp), as a
// VerbsEndpoints body, into the other host's relay, which writes its
// <socket>.verbs-peers. Fake applications on both hosts then carry requests
// both ways over the queue pairs (no UDP frame is sent), and a queue pair put
// in the error state with records in flight fails the runs on both hosts
// (PeerLost; the records are in doubt, never sent again: at most once) and is
// created again, connected again and carries a new run.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "loopback_rack.hpp"
#include "loopback_traffic.hpp"
#include "verbs_fake.hpp"
#include "verbs_gossamerd.hpp"

namespace gossamer::dataplane::testing {
namespace {

namespace fk = verbs::fake;

// One host's fake, shared with the test thread and the wire under one lock
// (the fake is not thread-safe; rdma-core is).
class LockedVerbs final : public verbs::Verbs {
 public:
  LockedVerbs(fk::FakeVerbs& v, std::mutex& mu) : v_(v), mu_(mu) {}
  std::vector<std::string> list_devices() override { return lock(), v_.list_devices(); }
  std::string open(const std::string& d, std::uint8_t p, std::uint32_t g, verbs::PortInfo* out) override {
    auto l = lock();
    return v_.open(d, p, g, out);
  }
  std::string alloc_pd() override {
    auto l = lock();
    return v_.alloc_pd();
  }
  std::string reg_mr(void* a, std::size_t n, verbs::Mr* out) override {
    auto l = lock();
    return v_.reg_mr(a, n, out);
  }
  std::string create_cq(std::uint32_t d, verbs::Handle* cq) override {
    auto l = lock();
    return v_.create_cq(d, cq);
  }
  std::string create_qp(verbs::Handle s, verbs::Handle r, const verbs::QpConfig& c, verbs::Handle* qp,
                        std::uint32_t* qpn) override {
    auto l = lock();
    return v_.create_qp(s, r, c, qp, qpn);
  }
  std::string modify_qp(verbs::Handle qp, verbs::QpState to, const verbs::QpConfig& c, std::uint32_t psn,
                        const verbs::RemoteQp* remote) override {
    auto l = lock();
    return v_.modify_qp(qp, to, c, psn, remote);
  }
  void destroy_qp(verbs::Handle qp) override {
    auto l = lock();
    v_.destroy_qp(qp);
  }
  int post_send(verbs::Handle qp, const verbs::SendWr* w, std::size_t n, std::size_t* posted) override {
    auto l = lock();
    return v_.post_send(qp, w, n, posted);
  }
  int post_recv(verbs::Handle qp, const std::uint64_t* ids, std::size_t n) override {
    auto l = lock();
    return v_.post_recv(qp, ids, n);
  }
  int poll_cq(verbs::Handle cq, verbs::Completion* out, int max) override {
    auto l = lock();
    return v_.poll_cq(cq, out, max);
  }

 private:
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mu_); }
  fk::FakeVerbs& v_;
  std::mutex& mu_;
};

// The fabric (a thread carrying WRs, which can be held) and gossamerd's
// part (a thread relaying the endpoint files through VerbsRelay), for a
// LoopbackRack whose hosts run transport: verbs.
class VerbsFabric {
 public:
  VerbsFabric() {
    for (int h = 0; h < 2; ++h) hosts_[h] = std::make_unique<fk::FakeVerbs>(fabric_, std::vector<std::string>{"fake0"});
  }
  ~VerbsFabric() { stop(); }
  LoopbackRack::Options options(std::uint32_t conns) {
    LoopbackRack::Options o;
    o.conns = conns;
    o.verbs = true;
    o.prepare = [this](int h, Dataplane& dp) {
      dp.set_verbs([this, h] { return std::make_unique<LockedVerbs>(*hosts_[h], mu_); });
    };
    return o;
  }
  // Starts the wire, and gossamerd's relay between the dataplanes of `rack`.
  void run(const LoopbackRack& rack, std::uint32_t conns) {
    gossamerd_ = std::make_unique<GossamerdRelay>(rack.socket(0), rack.socket(1), conns);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        if (!hold_.load()) {
          std::lock_guard<std::mutex> g(mu_);
          fabric_.deliver_ready();
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (gossamerd_) gossamerd_->stop();
  }
  void hold(bool on) { hold_.store(on); }
  // Puts a QP of host h with sends outstanding in the error state; false if none has any.
  bool fail_busy_qp(int h) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [handle, q] : hosts_[h]->qps)
      if (!q.destroyed && q.state == verbs::QpState::kRts && !q.send_ids.empty()) {
        hosts_[h]->fail_qp(handle, "retry exceeded");
        return true;
      }
    return false;
  }
  std::size_t on_wire() {
    std::lock_guard<std::mutex> g(mu_);
    return fabric_.on_wire();
  }
  std::uint64_t relayed() const { return gossamerd_->relayed(); }
  std::uint64_t relay_errors() const { return gossamerd_->errors(); }

 private:
  std::mutex mu_;
  fk::FakeFabric fabric_;
  std::unique_ptr<fk::FakeVerbs> hosts_[2];
  std::unique_ptr<GossamerdRelay> gossamerd_;
  std::thread thread_;
  std::atomic<bool> stop_{false}, hold_{false};
};

constexpr std::uint32_t kConns = 2;

// The rack with its fabric and gossamerd's relay running, and one run's
// applications attached and started on both hosts.
struct VerbsRackRun {
  VerbsFabric f;
  LoopbackRack rack;
  std::string key = fresh_id();
  FakeApp a, b;
  VerbsRackRun()
      : rack(f.options(kConns)),
        a(rack.socket(0), 0, kHosts, kTotal, key),
        b(rack.socket(1), 1, kHosts, kTotal, key) {
    f.run(rack, kConns);
    attach_both(a, b);
  }
};

TEST(VerbsRack, RequestsBothWaysOverQueuePairs) {
  VerbsRackRun run;
  auto& [f, rack, key, a, b] = run;
  Traffic t(a, b, 300);
  ASSERT_TRUE(run_until(t, std::chrono::seconds(60)));
  // A bad .verbs-peers (as if gossamerd wrote garbage): its 4 lines are
  // counted and skipped, the QPs stay as they are, traffic goes on.
  const std::string garbage = "qp 1 2 3\nhello\n" + std::string(5000, 'x') + "\nqp 0 1 " + std::string(32, 'a') +
                              " 0 0 1 0 0 64 1 0\n";  // the last one names host a itself
  ASSERT_EQ(verbs::write_file_atomically(rack.socket(0) + verbs::kPeersSuffix, garbage), "");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  t.extend(400);
  ASSERT_TRUE(run_until(t, std::chrono::seconds(60)));
  a.send_detach();
  b.send_detach();
  ASSERT_TRUE(a.wait_message(abi::kMsgDetached, 10'000));
  ASSERT_TRUE(b.wait_message(abi::kMsgDetached, 10'000));
  rack.stop();
  f.stop();
  EXPECT_GE(f.relayed(), 2u);  // each host's endpoints went through the relays
  EXPECT_EQ(f.relay_errors(), 0u);
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(rack.stat(h, "tx_frames"), 0u) << "host " << h << ": a UDP frame";
    EXPECT_GT(rack.stat(h, "wrs_posted"), 0u) << "host " << h;
    EXPECT_GT(rack.stat(h, "wrs_signaled"), 0u) << "host " << h;
    EXPECT_LT(rack.stat(h, "wrs_signaled"), rack.stat(h, "wrs_posted")) << "host " << h << ": selective signaling";
    EXPECT_GT(rack.stat(h, "cq_polls"), 0u) << "host " << h;
    EXPECT_EQ(rack.stat(h, "qp_errors"), 0u) << "host " << h;
    EXPECT_EQ(rack.stat(h, "qps_active") + rack.stat(h, "qps_idle"), kConns) << "host " << h;
    // requests and responses: 2 x 2 threads x 400 rounds each way, plus the announces
    EXPECT_GE(rack.stat(h, "records_received"), 2u * 2 * 2 * 400) << "host " << h;
  }
  EXPECT_EQ(rack.stat(0, "records_rejected"), 4u);  // the bad file's lines
}

TEST(VerbsRack, FailedQueuePairFailsTheRunsAndComesBack) {
  VerbsRackRun run;
  auto& [f, rack, key, a, b] = run;
  Traffic t(a, b, 50);
  ASSERT_TRUE(run_until(t, std::chrono::seconds(60)));
  // Requests in flight: the wire holds them; one of host a's busy QPs fails.
  f.hold(true);
  t.extend(1000);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (f.on_wire() == 0) {
    ASSERT_TRUE(t.step());
    ASSERT_LT(std::chrono::steady_clock::now(), end) << "nothing reached the wire";
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_TRUE(f.fail_busy_qp(0));
  f.hold(false);
  // Both runs fail (fate sharing): the records are in doubt, not sent again.
  abi::DataplaneMessage m{};
  ASSERT_TRUE(a.wait_message(abi::kMsgPeerLost, 10'000, &m)) << "host a: no PeerLost";
  EXPECT_EQ(m.host, 1u);
  EXPECT_NE(std::string(m.text).find("not sent twice"), std::string::npos) << m.text;
  ASSERT_TRUE(b.wait_message(abi::kMsgPeerLost, 10'000, &m)) << "host b: no PeerLost";
  EXPECT_EQ(m.host, 0u);
  // Nothing of the old run is served twice: each trustee's slot holds at
  // most the one request after the last it served
  // in the next batch's lane.
  for (std::uint32_t tr = 0; tr < kTotal; ++tr)
    for (std::uint32_t c = 0; c < kTotal; ++c) {
      if ((tr < 2) == (c < 2)) continue;
      FakeApp& app = tr < 2 ? a : b;
      const std::uint32_t served = t.served(tr < 2 ? 0 : 1, tr, c);
      const std::uint32_t got = app.request_seq(tr - app.first(), c, served + 1);  // the next batch's lane
      EXPECT_TRUE(got == served + 1 || App::next_in_lane(got, served + 1))
          << tr << " <- " << c << ": " << got << " after " << served;
    }
  // The QP came back: a new run carries requests both ways.
  const std::string key2 = fresh_id();
  FakeApp a2(rack.socket(0), 0, kHosts, kTotal, key2), b2(rack.socket(1), 1, kHosts, kTotal, key2);
  attach_both(a2, b2);
  Traffic t2(a2, b2, 100);
  ASSERT_TRUE(run_until(t2, std::chrono::seconds(60)));
  rack.stop();
  f.stop();
  EXPECT_GE(rack.stat(0, "qp_errors"), 1u);
  EXPECT_GE(rack.stat(0, "qp_in_doubt_records"), 1u);
  EXPECT_GE(rack.stat(0, "qp_reconnects"), 1u);
  EXPECT_GE(rack.stat(1, "qp_reconnects"), 1u);  // the peer replaced its QP too
  for (int h = 0; h < 2; ++h) EXPECT_EQ(rack.stat(h, "tx_frames"), 0u) << "host " << h;
}

}  // namespace
}  // namespace gossamer::dataplane::testing
