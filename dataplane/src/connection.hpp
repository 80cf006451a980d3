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
//
// Active connections (issue 7; papers 002 §3.4.1). Connection 0 of every
// host pair is always active. The others start inactive (no credit) and the
// receiver's QP scheduler activates or deactivates them
// (set_inbound_active): an active one is granted credit on renewals, an
// inactive one is declined. Every frame carries the state (kFlagActive), so
// the sender learns it at its next frame from us; a sender only puts new
// slots on usable() connections. Renewal requests carry the median
// coalescing degree since the previous one; the receiver sums them
// (take_utilization) for the scheduler.
//
// Slots larger than a frame: enqueue() cuts a slot record whose payload
// exceeds wire::max_fragment_bytes(mtu) (set_mtu, dataplane.mtu) into
// consecutive fragment records (wire.hpp), which take frames (and credits) like any other. The receiver passes every
// record of a delivered frame through reassemble(): a whole record comes
// back as is, fragments are gathered in the connection's one buffer until
// the last, and anything that breaks the rules is counted and dropped with
// the partial slot. A reset (peer restart) forgets the partial slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include <gossamer/abi/counters.hpp>

#include "scheduler.hpp"
#include "wire.hpp"

namespace gossamer::dataplane {

// What a connection counts itself: the connection rows of
// gossamer/abi/counters.hpp whose source is kCounted (the gauges come from
// its state when the metrics are written).
struct ConnectionStats {
#define GOSSAMER_CONNECTION_STAT(field, source, ...) GOSSAMER_IF_OWN(source, std::uint64_t field = 0;)
  GOSSAMER_CONN_COUNTERS(GOSSAMER_CONNECTION_STAT)
#undef GOSSAMER_CONNECTION_STAT
};

// Reassembles fragment records into slot records. Pure, for the tests too.
// `primary_cap`/`overflow_cap` bound the slot of each kind (its destination's
// blocks); nothing larger is ever buffered.
class Reassembly {
 public:
  Reassembly();
  enum class Result {
    kWhole,     // not a fragment: use the record as it is
    kHeld,      // a fragment, kept; the slot is not complete yet
    kComplete,  // the last fragment: *out is the whole slot record
    kDropped,   // a protocol error: counted in `stats`, the partial slot dropped
  };
  // *out's payload points into this object until the next call or reset().
  Result add(const wire::RecordView& in, wire::RecordView* out, ConnectionStats& stats);
  void reset() { active_ = false; have_ = 0; }
  // The blocks' capacities (default: the slot layout's, abi/slots.hpp).
  void set_limits(std::uint32_t request_primary, std::uint32_t response_primary, std::uint32_t overflow) {
    req_primary_ = request_primary, resp_primary_ = response_primary, overflow_ = overflow;
  }
  bool active() const { return active_; }

 private:
  std::uint32_t req_primary_, resp_primary_, overflow_;
  bool active_ = false;
  wire::WireRecord first_{};
  std::size_t have_ = 0;
  std::vector<std::uint8_t> buf_;
};

class Connection {
 public:
  // payload = FrameHeader + records (the UDP payload); len <= kMaxUdpPayload.
  using Emit = std::function<void(const std::uint8_t* payload, std::size_t len)>;

  // `first_seq`: the first data frame's number in each direction (both
  // ends must agree). 1 in the dataplane; tests start near 2^32 to cross
  // the wrap. Every comparison of sequence numbers and credit limits is
  // serial-number arithmetic (RFC 1982), and 0 is a data frame's number
  // like any other.
  // `boot`: our incarnation (incarnation.hpp); incarnations are compared as
  // plain 64-bit numbers, larger is newer.
  Connection(std::uint16_t self, std::uint16_t peer, std::uint8_t index, std::uint32_t credits,
             std::uint64_t boot, std::uint64_t tsc_hz, std::uint32_t first_seq = 1);

  // Queues one record; `payload` is primary_len + overflow_len bytes.
  void enqueue(const wire::WireRecord& r, const void* payload);
  bool has_pending() const { return pending_bytes_ != 0; }
  std::size_t unacked() const { return unacked_.size(); }

  // Sends what credits allow (and the hold below lets go). Returns frames sent.
  std::size_t pump(std::uint64_t now, const Emit& emit);
  // false: one record per frame (connections.coalescing, for comparisons).
  void set_coalescing(bool on) { coalescing_on_ = on; }
  // Coalescing under load (issue 19), both 0 (off) unless set; TSC cycles.
  // `hold`: while a data frame of ours is unacknowledged, records that do
  // not fill a frame wait up to `hold` for more (or for the ack), so that
  // slots becoming ready one after another share a frame (Nagle's rule,
  // bounded). A connection with nothing in flight sends at once: an
  // unloaded request never waits. `ack_delay`: the ack for an in-order
  // data frame waits up to `ack_delay` for a data frame of ours to carry
  // it (up to 5x that while more records are coming, set_more_coming: a
  // response we owe is on its way, and a lone ack frame in front of it,
  // a system call of tens of microseconds on a cold af_packet path, would
  // delay it); duplicates, gaps, renewals and activations are still
  // answered at once (fast retransmit and credit depend on those).
  void set_batching(std::uint64_t hold, std::uint64_t ack_delay) { hold_ = hold, ack_delay_ = ack_delay; }
  // Whether more records are coming soon (the dataplane: exchanges with the
  // peer are open beyond the requests queued). Only then does a short frame
  // wait: a lone request or response goes at once.
  void set_more_coming(bool more) { more_coming_ = more; }
  // Request slots queued, not yet sent (a fragmented one counts once).
  std::size_t pending_requests() const { return pending_requests_; }
  // Frames of at most `mtu` IP bytes (dataplane.mtu; default wire::kMtu).
  // Before the first enqueue.
  void set_mtu(std::size_t mtu) {
    max_record_ = wire::max_record_bytes(mtu);
    max_fragment_ = wire::max_fragment_bytes(mtu);
  }

  enum class Accept { kDeliver, kDrop };
  // A frame for this connection arrived (already parsed and validated).
  Accept on_frame(const wire::FrameHeader& h, std::uint64_t now, const Emit& emit);

  // Retransmission timer, credit probes, and the ack owed after a burst.
  void timers(std::uint64_t now, const Emit& emit);
  // The owed ack, if it is due at `now` (ack_delay); without `now`, any owed ack.
  void flush_ack(std::uint64_t now, const Emit& emit);
  void flush_ack(const Emit& emit) { flush_ack(UINT64_MAX, emit); }

  // The next time timers() has something to do, or UINT64_MAX.
  std::uint64_t next_deadline() const;

  // Every record of a delivered frame goes through here, in order.
  Reassembly::Result reassemble(const wire::RecordView& in, wire::RecordView* out) {
    return reassembly_.add(in, out, stats_);
  }
  bool reassembling() const { return reassembly_.active(); }
  Reassembly& reassembly() { return reassembly_; }

  const ConnectionStats& stats() const { return stats_; }
  // A whole slot record of this kind (wire::kRecRequest/kRecResponse) was
  // delivered from this connection.
  void count_delivered(std::uint8_t kind) {
    if (kind == wire::kRecRequest) ++stats_.requests_received;
    if (kind == wire::kRecResponse) ++stats_.responses_received;
  }
  std::uint32_t credits_left() const {
    return std::int32_t(credit_limit_ - next_seq_) >= 0 ? credit_limit_ - next_seq_ + 1 : 0;
  }
  std::uint64_t peer_boot() const { return peer_boot_; }

  // Sender side: new slots may go on this connection (the peer grants it).
  bool usable() const { return out_active_; }
  // Receiver side: the QP scheduler's decision for the peer's sending on
  // this connection. Activating grants C credits at once (in an ack);
  // deactivating stops grants (renewals are declined). Connection 0 stays
  // active whatever is asked.
  void set_inbound_active(bool active);
  bool inbound_active() const { return in_active_; }
  // Activated but not used since: the ack saying so may have been lost;
  // say it again (the scheduler calls this every interval).
  void remind_activation() {
    if (in_active_ && activation_pending_ && reminders_left_) --reminders_left_, owe_ack();
  }
  // Sum of the coalescing degrees the peer reported with its renewals
  // since the last call; at least 1 if it sent data at all. (FLOCK counts
  // renewals only; with intervals shorter than C/2 frames of a moderate
  // sender, that would call a busy sender dormant every other interval.)
  std::uint64_t take_utilization() {
    bool data = false;
    const std::uint64_t u = take_utilization(&data);
    return u ? u : data;
  }
  // The same in two parts: the reported sum, and whether data came at all,
  // so that the "at least 1" can be applied once per peer (issue 17: once
  // per connection, a sender with more active connections looked busier).
  std::uint64_t take_utilization(bool* sent_data) {
    const std::uint64_t u = reported_u_;
    *sent_data = data_since_take_;
    reported_u_ = 0;
    data_since_take_ = false;
    return u;
  }
  // Queued records that have not started to go out, whole slots only (the
  // rest of a slot whose fragments started stays here): appended to `out`
  // as they were queued, removed from this connection. For moving them to
  // a usable connection.
  void take_pending(std::vector<std::uint8_t>* out);
  // Queues records as take_pending() returned them.
  void enqueue_records(const std::uint8_t* records, std::size_t len);
  // Another connection to the same peer saw it restart as `boot`: start over
  // with that incarnation too, unless this one knows it (or a newer one).
  // Whatever this connection held was for the previous incarnation.
  // A connection that never heard from the peer but sent to it resets too:
  // its sequence numbers went to the previous incarnation.
  void peer_restarted(std::uint64_t boot) {
    if (peer_boot_ == 0 ? next_seq_ != first_seq_ : boot > peer_boot_) reset(boot);
  }

 private:
  // An unacknowledged data frame. Its bytes live in the ring's buffer at
  // the same position (no allocation per frame).
  struct Sent {
    std::uint32_t seq;
    std::uint32_t len;
    std::uint64_t sent_at;
  };
  // The unacknowledged frames, oldest first: a ring of entries, each with a
  // frame buffer of `frame_cap` bytes, sized for the credits (never more in
  // flight) when the first frame goes out; it doubles if that ever fills.
  class SentRing {
   public:
    bool empty() const { return head_ == tail_; }
    std::size_t size() const { return tail_ - head_; }
    Sent& front() { return at(head_); }
    const Sent& front() const { return at(head_); }
    void pop_front() { ++head_; }
    void clear() { head_ = tail_ = 0; }
    // The next entry and its buffer; valid until the next push_back.
    Sent& push_back(std::size_t frame_cap, std::size_t want, std::uint8_t** buf);
    std::uint8_t* bytes(std::size_t i) { return buf_.data() + ((head_ + i) & mask_) * cap_; }
    Sent& operator[](std::size_t i) { return at(head_ + i); }

   private:
    Sent& at(std::size_t i) { return ents_[i & mask_]; }
    const Sent& at(std::size_t i) const { return ents_[i & mask_]; }
    std::vector<Sent> ents_;
    std::vector<std::uint8_t> buf_;
    std::size_t head_ = 0, tail_ = 0, mask_ = 0, cap_ = 0;
  };
  void fill_header(wire::FrameHeader* h, std::uint8_t type, std::uint32_t seq, std::uint8_t flags);
  void retransmit_all(std::uint64_t now, const Emit& emit);
  void send_ack(std::uint8_t flags, const Emit& emit);
  // An ack is owed: at once, or (an in-order data frame) by now + ack_delay_.
  void owe_ack() { ack_owed_ = true, ack_due_ = 0; }
  void owe_ack_by(std::uint64_t now) {
    if (!ack_owed_) ack_owed_ = true, ack_due_ = now + ack_delay_;
  }
  // When the owed ack goes alone (set_batching).
  // (Extended while a response is expected, at most to a quarter of the
  // peer's first retransmit timeout, whatever ack_delay_us says.)
  std::uint64_t ack_deadline() const {
    return ack_due_ && more_coming_ ? ack_due_ + std::min(4 * ack_delay_, rto_base_ / 4) : ack_due_;
  }
  void reset(std::uint64_t new_boot);
  void put_record(const wire::WireRecord& w, const std::uint8_t* payload, std::size_t n);
  void renewal_asked(std::uint16_t coalescing, bool probe);

  std::uint16_t self_, peer_;
  std::uint8_t index_;
  std::uint32_t credits_;
  std::uint64_t boot_;
  std::uint64_t rto_base_, rto_max_, rto_;
  std::uint32_t first_seq_;

  // tx
  std::vector<std::uint8_t> pending_;     // records, back to back
  std::size_t pending_head_ = 0, pending_bytes_ = 0;
  std::size_t pending_records_ = 0;
  std::uint32_t next_seq_;
  std::uint32_t acked_;
  std::uint32_t credit_limit_;
  bool renew_asked_ = false;
  SentRing unacked_;
  std::uint64_t hold_ = 0, held_since_ = 0;  // held_since_: 0 when nothing is held
  bool more_coming_ = false;
  std::size_t pending_requests_ = 0;
  std::uint32_t dupacks_ = 0;
  std::uint64_t last_fast_retransmit_ = 0;
  std::uint64_t stalled_since_ = 0;
  bool out_active_;
  bool coalescing_on_ = true;
  std::size_t max_record_ = wire::kMaxRecordBytes, max_fragment_ = wire::kMaxFragmentBytes;
  RunningMedian coalescing_;         // slots per data frame since the last renewal

  // rx
  std::uint64_t peer_boot_ = 0;
  std::uint32_t expected_;
  std::uint32_t grant_;
  bool ack_owed_ = false;
  std::uint64_t ack_due_ = 0, ack_delay_ = 0;
  bool in_active_;
  bool activation_pending_ = false;  // activated, nothing received since
  std::uint32_t reminders_left_ = 0;  // a few, not forever (an idle sender never answers)
  std::uint64_t reported_u_ = 0;
  bool data_since_take_ = false;
  Reassembly reassembly_;

  ConnectionStats stats_;
};

}  // namespace gossamer::dataplane
