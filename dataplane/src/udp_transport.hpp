// The UDP transport (transport.hpp): this core's Connections to every peer
// over its Port queue. Frames that land on another core's queue are steered
// to their connection's core (dataplane/README.md "Polling cores").
#pragma once

#include <vector>

#include "auth.hpp"
#include "dataplane.hpp"
#include "transport.hpp"

namespace gossamer::dataplane {

class UdpTransport final : public Transport {
 public:
  UdpTransport(Dataplane& dp, Dataplane::Core& k);
  void enqueue(std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& r, const void* payload) override;
  bool poll(DeliverySink& sink) override;
  bool pump() override;
  bool usable(std::uint32_t peer, std::uint32_t conn) const override;
  std::uint64_t next_deadline() const override;
  void peer_restarted(std::uint32_t peer, std::uint64_t boot) override;
  void counters(std::uint32_t peer, std::uint32_t conn, abi::ConnCounters* out) const override;
  std::uint64_t take_utilization(std::uint32_t peer, std::uint32_t conn, bool* data) override {
    return conn_(peer, conn).take_utilization(data);
  }
  void set_inbound_active(std::uint32_t peer, std::uint32_t conn, bool active) override {
    conn_(peer, conn).set_inbound_active(active);
  }
  void remind_activation(std::uint32_t peer, std::uint32_t conn) override { conn_(peer, conn).remind_activation(); }
  bool has_pending(std::uint32_t peer, std::uint32_t conn) const override { return conn_(peer, conn).has_pending(); }
  void take_pending(std::uint32_t peer, std::uint32_t conn, std::vector<std::uint8_t>* out) override {
    conn_(peer, conn).take_pending(out);
  }
  void enqueue_records(std::uint32_t peer, std::uint32_t conn, const std::uint8_t* records,
                       std::size_t len) override {
    conn_(peer, conn).enqueue_records(records, len);
  }
  std::uint64_t peer_boot(std::uint32_t peer) const override { return conn_(peer, 0).peer_boot(); }

 private:
  bool poll_rx(DeliverySink& sink);
  bool poll_steered(DeliverySink& sink);
  void dispatch(const Frame& f, std::uint64_t now, DeliverySink& sink);
  void process_frame(const std::uint8_t* data, std::size_t len, std::uint64_t now, DeliverySink& sink);
  void transmit(std::uint32_t peer, const std::uint8_t* payload, std::size_t len);
  void flush_tx();
  Connection& conn_(std::uint32_t peer, std::uint32_t conn) const { return *dp_.peers_[peer].conns[conn]; }

  // Checks received frames' tags with the key of their sender's
  // incarnation (derived once per incarnation that sent a valid frame).
  struct Verifier final : wire::FrameVerifier {
    const FrameAuth* auth = nullptr;
    std::uint32_t self = 0;
    struct Cached {
      bool valid = false;
      std::uint64_t boot = 0;
      FrameKey key{};
    };
    std::vector<Cached> keys;  // per source host
    bool verify(const wire::FrameHeader& h, const std::uint8_t* payload, std::size_t len,
                const std::uint8_t* tag) override;
  };

  Dataplane& dp_;
  Dataplane::Core& k_;
  Verifier verifier_;
  std::vector<FrameKey> send_keys_;  // per peer: our incarnation's key to it
  // Frames this core has signed: with the core's index, the nonce of the
  // next (auth.hpp). One transport per core for the process's lifetime, so
  // the count never restarts under a key.
  std::uint64_t signed_ = 0;
};

}  // namespace gossamer::dataplane
