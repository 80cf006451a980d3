// One reliable, in-order connection between this dataplane and a peer
// (DESIGN.md §4 "Wire and reliability"; papers 002 §3.4.1 for credits).
// Pure protocol logic: frames go out through a callback and come in as
// parsed headers, so the same code runs over DPDK and in unit tests.
//
// Sender: records queue in `pending`; pump() packs as many as fit into each
// data frame (coalescing) while credits last (seq <= credit limit), keeps a
// copy of every unacknowledged frame, and retransmits them all (go-back-N)
// on timeout or on two duplicate acks. When fewer than half of the credits
// are left it sets kFlagRenew; the receiver grants C more when it delivers
// that frame, in the `credit` field of whatever it sends next. A sender with
// work but no credit probes with an ack-only kFlagRenew frame after a
// timeout, so a lost grant cannot stall it forever.
//
// Receiver: accepts exactly the next seq (anything else is a duplicate or
// out of order: dropped, answered with an ack), so every frame is delivered
// once and in order.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "wire.hpp"

namespace gossamer::dataplane {

struct ConnectionStats {
  std::uint64_t frames_sent = 0, frames_received = 0, acks_sent = 0;
  std::uint64_t records_sent = 0, records_received = 0;
  std::uint64_t requests_sent = 0, responses_sent = 0;  // slot records, for coalescing
  std::uint64_t retransmits = 0, timeouts = 0, fast_retransmits = 0;
  std::uint64_t duplicates = 0, out_of_order = 0, stale_boot = 0, resets = 0;
  std::uint64_t wrong_incarnation = 0;  // frames naming another incarnation of us
  std::uint64_t credit_stalls = 0, renewals_requested = 0, renewals_granted = 0;
  std::uint64_t credit_probes = 0;
};

class Connection {
 public:
  // payload = FrameHeader + records (the UDP payload); len <= kMaxUdpPayload.
  using Emit = std::function<void(const std::uint8_t* payload, std::size_t len)>;

  Connection(std::uint16_t self, std::uint16_t peer, std::uint8_t index, std::uint32_t credits,
             std::uint32_t boot, std::uint64_t tsc_hz);

  // Queues one record; `payload` is primary_len + overflow_len bytes.
  void enqueue(const wire::WireRecord& r, const void* payload);
  bool has_pending() const { return pending_bytes_ != 0; }
  std::size_t unacked() const { return unacked_.size(); }

  // Sends what credits allow. Returns frames sent.
  std::size_t pump(std::uint64_t now, const Emit& emit);

  enum class Accept { kDeliver, kDrop };
  // A frame for this connection arrived (already parsed and validated).
  Accept on_frame(const wire::FrameHeader& h, std::uint64_t now, const Emit& emit);

  // Retransmission timer, credit probes, and the ack owed after a burst.
  void timers(std::uint64_t now, const Emit& emit);
  void flush_ack(const Emit& emit);

  // The next time timers() has something to do, or UINT64_MAX.
  std::uint64_t next_deadline() const;

  const ConnectionStats& stats() const { return stats_; }
  std::uint32_t credits_left() const {
    return credit_limit_ >= next_seq_ ? credit_limit_ - next_seq_ + 1 : 0;
  }
  std::uint32_t peer_boot() const { return peer_boot_; }

 private:
  struct Sent {
    std::uint32_t seq;
    std::uint64_t sent_at;
    std::vector<std::uint8_t> bytes;
  };
  void fill_header(wire::FrameHeader* h, std::uint8_t type, std::uint32_t seq, std::uint8_t flags);
  void retransmit_all(std::uint64_t now, const Emit& emit);
  void send_ack(std::uint8_t flags, const Emit& emit);
  void reset(std::uint32_t new_boot);

  std::uint16_t self_, peer_;
  std::uint8_t index_;
  std::uint32_t credits_;
  std::uint32_t boot_;
  std::uint64_t rto_base_, rto_max_, rto_;

  // tx
  std::vector<std::uint8_t> pending_;     // records, back to back
  std::size_t pending_head_ = 0, pending_bytes_ = 0;
  std::size_t pending_records_ = 0;
  std::uint32_t next_seq_ = 1;
  std::uint32_t acked_ = 0;
  std::uint32_t credit_limit_;
  bool renew_asked_ = false;
  std::deque<Sent> unacked_;
  std::uint32_t dupacks_ = 0;
  std::uint64_t last_fast_retransmit_ = 0;
  std::uint64_t stalled_since_ = 0;

  // rx
  std::uint32_t peer_boot_ = 0;
  std::uint32_t expected_ = 1;
  std::uint32_t grant_;
  bool ack_owed_ = false;

  ConnectionStats stats_;
};

}  // namespace gossamer::dataplane
