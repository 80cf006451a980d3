// One RC queue pair between this dataplane and a peer, for one (peer,
// connection) of the verbs transport (issue 22; transport.hpp says where it
// fits). All the logic above the verbs calls (verbs.hpp) is here, so that it
// runs against the recording fake in the unit tests:
//
// - Memory. The transport registers one region per core, once, at start;
//   each channel gets its receive ring (`units` units, verbs_ring.hpp) and a
//   send staging area of the same size out of it. Nothing is registered on
//   the per-request path. A message is staged at the same offset it takes
//   in the peer's ring, so the ring's credits cover the staging area too: a
//   unit is written again only after the peer freed it, which it does after
//   the message arrived, so after our NIC read it.
// - Sending (pump). Queued records are coalesced into messages (at most
//   kMaxRecords records and `max_message_bytes`), each one RDMA
//   WRITE_WITH_IMM into the peer's ring at the position the credits allow
//   (RingWriter), the immediate carrying position, record count and our own
//   credit return. All WRs of a pump go to the NIC as one list: one
//   ibv_post_send, one doorbell. Every `signal_interval`-th WR is signaled
//   (papers 002 §3.3); its completion retires it and every WR before it.
//   The send queue never holds more than max_send_wr WRs, and max_send_wr >=
//   2 * signal_interval, so a full queue always has a signaled WR in it.
//   Without data to carry it, the credit return goes alone (a zero-length
//   WRITE_WITH_IMM) once a quarter of the ring is owed; a message is at
//   most a quarter of the ring, so a stalled sender is always owed that much.
// - Receiving (on_completion). A receive completion names the message by
//   its immediate and length; RingReader checks it starts where it must and
//   stays within the credits, wire::check_records checks the records, and
//   each goes to the sink. Anything else is a protocol error: counted, and
//   the QP fails (the stream can no longer be trusted).
// - States. kReset -> create() -> kInit (receives posted; our endpoint is
//   what the peer needs) -> connect(remote) -> kRtr -> kRts. An error
//   completion, a failed post or a protocol error -> kError: counted,
//   reported once (take_failure() says why), and the owner calls
//   recreate(): a new QP (new QPN and generation) in kInit whose endpoint
//   goes to the peer again.
// - What a failure means (fate sharing). Verbs delivers each message at most
//   once: a WR whose signaled completion (or a later one's) came back is in
//   the peer's ring; of the WRs after it we cannot know (some may have
//   arrived and run). They are never sent again (that could run a request
//   twice): their records are counted as in doubt (in_doubt_records), and
//   the transport fails the runs that share the
//   peer, as when a peer dies. Records still queued, never posted, wait for
//   the new QP and go exactly once.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "verbs.hpp"
#include "verbs_ring.hpp"
#include "wire.hpp"

namespace gossamer::dataplane::verbs {

struct ChannelConfig {
  std::uint32_t ring_units = 4096;          // per direction (256 KiB)
  std::uint32_t signal_interval = 16;       // one signaled WR every n
  std::uint32_t max_message_bytes = 32768;  // coalescing bound per WR; at most a quarter of the ring
  std::uint32_t max_batch = 32;             // WRs per post_send (doorbell)
  bool coalescing = true;                   // false: one record per message
  QpConfig qp;
};

// What the peer needs to write into this channel's ring (the exchange,
// verbs_exchange.hpp, carries one per connection).
struct Endpoint {
  std::uint32_t qpn = 0, psn = 0;
  std::uint64_t ring_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t ring_units = 0;
  std::uint32_t generation = 0;  // a new QP of the same channel: larger
  bool operator==(const Endpoint&) const = default;
};

struct ChannelStats {
  std::uint64_t wrs_posted = 0, wrs_signaled = 0, doorbells = 0, messages_sent = 0, records_sent = 0,
                bytes_sent = 0, credit_returns_alone = 0, credit_stalls = 0, sq_full = 0,
                messages_received = 0, records_received = 0, protocol_errors = 0, qp_errors = 0,
                in_doubt_records = 0, reconnects = 0, stale_completions = 0, records_too_large = 0,
                activation_notices = 0;
};

class RecordSink {
 public:
  virtual void record(const wire::RecordView& v) = 0;

 protected:
  ~RecordSink() = default;
};

class QpChannel {
 public:
  // `ring` and `staging`: ring_units * kUnitBytes each, inside `mr`.
  // `id`: this channel's number in its CQs' wr_ids (< 2^20).
  QpChannel(Verbs& v, Handle send_cq, Handle recv_cq, const Mr& mr, std::uint8_t* ring, std::uint8_t* staging,
            const ChannelConfig& cfg, std::uint32_t id, std::uint32_t psn_seed);
  ~QpChannel();
  QpChannel(const QpChannel&) = delete;
  QpChannel& operator=(const QpChannel&) = delete;

  // kReset -> kInit: a QP, its receives posted. "" or why not.
  std::string create();
  // The peer's endpoint: kInit -> kRtr -> kRts. A newer generation while
  // connected means the peer lost its QP: this one fails (its unconfirmed
  // records are in doubt) and the caller recreates it and connects again.
  // "" or why not; an older or equal generation is ignored ("").
  std::string connect(const Gid& gid, std::uint16_t lid, const Endpoint& remote);
  // After a failure: a new QP (next generation) in kInit.
  std::string recreate();
  // The peer restarted: its next endpoint is the one, whatever its generation.
  void forget_remote() { have_remote_ = false; }

  void enqueue(const wire::WireRecord& r, const void* payload);
  // Posts what credits and the send queue allow, one doorbell. WRs posted.
  std::size_t pump();
  // A completion whose wr_id names this channel (owner_of).
  void on_completion(const Completion& c, RecordSink& sink);
  // Receives consumed since the last call are posted again (one call).
  void repost_receives();

  QpState state() const { return state_; }
  // New records may go on: the QP is in RTS and the peer's QP scheduler
  // lets us send on it (its last activation notice; a new QP starts active).
  bool usable() const { return state_ == QpState::kRts && out_active_; }
  bool has_pending() const { return pending_records_ != 0; }
  // FLOCK's QP scheduler, receiver side (flock.cpp through the Transport):
  // whether the peer may put new records on this QP. A change goes to the
  // peer as an activation notice, a zero-length WRITE_WITH_IMM whose
  // position field says it (kNoticeInactive, kNoticeActive; 0 is a credit
  // return), at the next pump, and again on every new QP.
  void set_inbound_active(bool active) { in_active_ = active; }
  bool inbound_active() const { return in_active_; }
  // The records the peer wrote to us since the last call (the scheduler's
  // utilization of this QP); *data: whether any came.
  std::uint64_t take_utilization(bool* data) {
    *data = recv_since_take_ != 0;
    return std::exchange(recv_since_take_, 0);
  }
  // What waits, never posted, as records back to back (moved to another
  // QP by the scheduler), and records in that form queued here.
  void take_pending(std::vector<std::uint8_t>* out);
  void enqueue_records(const std::uint8_t* records, std::size_t len);
  const Endpoint& local() const { return local_; }
  const ChannelStats& stats() const { return stats_; }
  std::uint64_t credits() const { return writer_.credits(); }     // units we may write
  std::uint64_t owed() const { return reader_.owed(); }           // units freed, not yet returned
  // The failure not yet taken: its reason ("" if none); clears it.
  std::string take_failure();
  std::uint64_t sq_outstanding() const { return sq_posted_ - sq_done_; }

  // wr_id: [channel id : 20][generation : 12][sequence : 32].
  static std::uint32_t owner_of(std::uint64_t wr_id) { return std::uint32_t(wr_id >> 44); }
  // The position field of a zero-length message (activation notices).
  inline static constexpr std::uint32_t kNoticeInactive = 1, kNoticeActive = 2;

 private:
  struct InFlight {
    std::uint64_t seq;
    std::uint32_t records;
  };
  std::uint64_t wr_id(std::uint64_t seq) const {
    return std::uint64_t(id_) << 44 | std::uint64_t(local_.generation & 0xfff) << 32 | (seq & 0xffffffffu);
  }
  void fail(const std::string& why);
  bool build_message(SendWr* wr, std::uint32_t* records);
  void retire_through(std::uint64_t seq);

  Verbs& v_;
  Handle send_cq_, recv_cq_;
  Mr mr_;
  std::uint8_t* ring_;
  std::uint8_t* staging_;
  ChannelConfig cfg_;
  std::uint32_t id_;
  std::uint32_t psn_seed_;

  QpState state_ = QpState::kReset;
  Handle qp_ = 0;
  Endpoint local_{}, remote_{};
  bool have_remote_ = false;
  RingWriter writer_;
  RingReader reader_;
  std::string failure_;
  bool out_active_ = true;   // the peer lets us send (its last notice on this QP)
  bool in_active_ = true;    // we let the peer send (the QP scheduler)
  bool announced_ = true;    // what the peer last heard from us on this QP
  std::uint64_t recv_since_take_ = 0;

  // Send queue: WRs posted (sequence numbers from 1) and retired by
  // signaled completions; the records of each unretired one.
  std::uint64_t sq_posted_ = 0, sq_done_ = 0;
  std::deque<InFlight> in_flight_;
  bool stalled_ = false;
  std::uint32_t receives_owed_ = 0;

  std::vector<std::uint8_t> pending_;  // records back to back, from pending_head_
  std::size_t pending_head_ = 0;
  std::size_t pending_records_ = 0;

  ChannelStats stats_;
};

}  // namespace gossamer::dataplane::verbs
