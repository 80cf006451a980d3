// The verbs transport (transport.hpp; issue 22): one polling core's RC queue
// pairs, one QpChannel (verbs_channel.hpp) per (peer, connection) the core
// owns (connection c on core c % cores, as for UDP). Above the channels:
//
// - start(): the core's memory (every channel's receive ring and send
//   staging area) allocated and registered once, one send and one receive
//   CQ for all of the core's QPs, every QP created (kInit) and its endpoint
//   published (the exchange, verbs_exchange.hpp).
// - remote(): a peer's endpoint for one connection arrived: the channel
//   connects (kRtr, kRts). A newer incarnation of the peer (`boot`) starts
//   its channels over and tells the sink, as a UDP restart does.
// - poll(): both CQs in batches of kPollBatch, each completion to the
//   channel its wr_id names, records to the sink; then the receives are
//   posted again (one post_recv per channel) and failures handled.
// - pump(): every channel posts what its credits allow, one doorbell each.
// - Failures: a channel in the error state is counted, reported to the
//   sink with the records it lost (link_failed: the runs that share the
//   peer fail, they are never sent again), its QP destroyed and created
//   again, and the new endpoint published; it connects when the peer's new
//   one arrives.
// - usable(): the QP is in RTS. next_deadline(): nothing to retransmit.
//
// - FLOCK's schedulers (flock.cpp) drive the QPs through the Transport
//   calls as they drive UDP connections: the receiver's grant goes to the
//   sender as an activation notice (QpChannel::set_inbound_active), the
//   utilization is the records the peer wrote, and records waiting on a QP
//   the peer deactivated move to connection 0.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport.hpp"
#include "verbs_channel.hpp"

namespace gossamer::dataplane::verbs {

struct TransportConfig {
  std::uint32_t self = 0, hosts = 1, conns_per_host = 1, cores = 1, core = 0;
  ChannelConfig channel;
  std::uint32_t seed = 1;  // first PSNs
};

// Totals over the core's QPs, for the metrics and `gossamerctl top`.
struct QpTotals {
  std::uint64_t qps = 0, active = 0, idle = 0, errored = 0, cq_polls = 0, completions = 0;
  ChannelStats sum;
};

class VerbsTransport final : public Transport {
 public:
  inline static constexpr int kPollBatch = 32;
  // Where this core's endpoints go (the exchange): (peer, conn, endpoint).
  using Publish = std::function<void(std::uint32_t, std::uint32_t, const Endpoint&)>;

  // `v` is open, with its protection domain (the dataplane's start-up step).
  VerbsTransport(Verbs& v, const TransportConfig& c, Publish publish);
  ~VerbsTransport() override;
  std::string start();
  // The peer's endpoint of (peer, conn), from its incarnation `boot`.
  void remote(std::uint32_t peer, std::uint64_t boot, const Gid& gid, std::uint16_t lid, std::uint32_t conn,
              const Endpoint& e, DeliverySink& sink);

  void enqueue(std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& r, const void* payload) override;
  bool poll(DeliverySink& sink) override;
  bool pump() override;
  bool usable(std::uint32_t peer, std::uint32_t conn) const override;
  std::uint64_t next_deadline() const override { return UINT64_MAX; }
  void peer_restarted(std::uint32_t peer, std::uint64_t boot) override;
  void counters(std::uint32_t peer, std::uint32_t conn, abi::ConnCounters* out) const override;
  std::uint64_t take_utilization(std::uint32_t peer, std::uint32_t conn, bool* data) override;
  void set_inbound_active(std::uint32_t peer, std::uint32_t conn, bool active) override;
  void remind_activation(std::uint32_t, std::uint32_t) override {}  // a new QP starts over: pump() says it again
  bool has_pending(std::uint32_t peer, std::uint32_t conn) const override;
  void take_pending(std::uint32_t peer, std::uint32_t conn, std::vector<std::uint8_t>* out) override;
  void enqueue_records(std::uint32_t peer, std::uint32_t conn, const std::uint8_t* records,
                       std::size_t len) override;
  std::uint64_t peer_boot(std::uint32_t peer) const override { return peer < peers_.size() ? peers_[peer].boot : 0; }

  const QpChannel* channel(std::uint32_t peer, std::uint32_t conn) const;
  QpChannel* channel(std::uint32_t peer, std::uint32_t conn);
  QpTotals totals() const;

 private:
  struct Slot {
    std::uint32_t peer, conn;
    std::unique_ptr<QpChannel> ch;
    bool touched = false;           // a receive completed since the last repost
    std::uint64_t lost_reported = 0;
  };
  struct PeerState {
    std::uint64_t boot = 0;         // the incarnation whose endpoints we use
    Gid gid{};
    std::uint16_t lid = 0;
  };
  Slot* slot(std::uint32_t peer, std::uint32_t conn);
  void handle_failures(DeliverySink& sink);
  void restart_peer(std::uint32_t peer);

  Verbs& v_;
  TransportConfig cfg_;
  Publish publish_;
  std::uint8_t* mem_ = nullptr;
  std::size_t mem_bytes_ = 0;
  Mr mr_{};
  Handle send_cq_ = 0, recv_cq_ = 0;
  std::vector<Slot> slots_;               // this core's (peer, conn), in order
  std::vector<std::int32_t> index_;       // [peer * conns + conn] -> slots_, or -1
  std::vector<PeerState> peers_;
  std::uint64_t cq_polls_ = 0, completions_ = 0;
};

}  // namespace gossamer::dataplane::verbs
