// One RC queue pair of the verbs transport (verbs_channel.hpp).
#include "verbs_channel.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace gossamer::dataplane::verbs {

namespace {
// Receives beyond one per ring unit: credit returns alone, at most a few
// in flight (one per half ring freed, and the peer frees only what we wrote).
constexpr std::uint32_t kCreditSlack = 16;
}  // namespace

const char* to_string(QpState s) {
  switch (s) {
    case QpState::kReset: return "reset";
    case QpState::kInit: return "init";
    case QpState::kRtr: return "rtr";
    case QpState::kRts: return "rts";
    case QpState::kError: return "error";
  }
  return "?";
}

QpChannel::QpChannel(Verbs& v, Handle send_cq, Handle recv_cq, const Mr& mr, std::uint8_t* ring,
                     std::uint8_t* staging, const ChannelConfig& cfg, std::uint32_t id, std::uint32_t psn_seed)
    : v_(v), send_cq_(send_cq), recv_cq_(recv_cq), mr_(mr), ring_(ring), staging_(staging), cfg_(cfg), id_(id),
      psn_seed_(psn_seed) {
  cfg_.qp.max_recv_wr = cfg_.ring_units + kCreditSlack;
  cfg_.signal_interval = std::max<std::uint32_t>(1, cfg_.signal_interval);
  // A quarter of the ring at most, and credits go back alone once a quarter
  // is owed: a sender that cannot place its next message (at most half a
  // ring with the skip before it) has more than a quarter unreturned, so the
  // receiver always returns it (no deadlock).
  cfg_.max_message_bytes = std::min(cfg_.max_message_bytes, cfg_.ring_units / 4 * kUnitBytes);
}

QpChannel::~QpChannel() {
  if (qp_) v_.destroy_qp(qp_);
}

std::string QpChannel::create() {
  std::uint32_t qpn = 0;
  if (std::string e = v_.create_qp(send_cq_, recv_cq_, cfg_.qp, &qp_, &qpn); !e.empty()) return "create QP: " + e;
  if (std::string e = v_.modify_qp(qp_, QpState::kInit, cfg_.qp, 0, nullptr); !e.empty()) {
    fail("to INIT: " + e);
    return "QP " + std::to_string(qpn) + " to INIT: " + e;
  }
  state_ = QpState::kInit;
  out_active_ = announced_ = true;  // a new QP starts active on both sides
  local_.qpn = qpn;
  local_.psn = (psn_seed_ * 2654435761u + local_.generation * 40503u) & 0xffffff;  // 24 bits
  local_.ring_addr = reinterpret_cast<std::uint64_t>(ring_);
  local_.rkey = mr_.rkey;
  local_.ring_units = cfg_.ring_units;
  reader_ = RingReader(cfg_.ring_units);
  receives_owed_ = cfg_.qp.max_recv_wr;
  repost_receives();
  return state_ == QpState::kInit ? "" : failure_;
}

std::string QpChannel::recreate() {
  if (qp_) v_.destroy_qp(qp_);
  qp_ = 0;
  state_ = QpState::kReset;
  ++local_.generation;
  ++stats_.reconnects;
  // remote_ stays: the new QP connects only to a newer one of the peer's.
  sq_posted_ = sq_done_ = 0;
  in_flight_.clear();
  stalled_ = false;
  return create();
}

std::string QpChannel::connect(const Gid& gid, std::uint16_t lid, const Endpoint& remote) {
  if (have_remote_ && remote.generation <= remote_.generation) return "";  // old news
  if (state_ == QpState::kRtr || state_ == QpState::kRts) {
    fail("the peer replaced its QP " + std::to_string(remote_.qpn) + " by " + std::to_string(remote.qpn));
    return "reconnect";
  }
  if (state_ != QpState::kInit) return std::string("QP is ") + to_string(state_) + ", not init";
  if (remote.ring_units == 0 || remote.ring_units > kMaxUnits)
    return "the peer's ring has " + std::to_string(remote.ring_units) + " units (1.." + std::to_string(kMaxUnits) + ")";
  const RemoteQp r{remote.qpn, remote.psn, gid, lid};
  if (std::string e = v_.modify_qp(qp_, QpState::kRtr, cfg_.qp, local_.psn, &r); !e.empty()) {
    fail("to RTR: " + e);
    return "QP " + std::to_string(local_.qpn) + " to RTR: " + e;
  }
  state_ = QpState::kRtr;
  if (std::string e = v_.modify_qp(qp_, QpState::kRts, cfg_.qp, local_.psn, &r); !e.empty()) {
    fail("to RTS: " + e);
    return "QP " + std::to_string(local_.qpn) + " to RTS: " + e;
  }
  state_ = QpState::kRts;
  remote_ = remote;
  have_remote_ = true;
  writer_ = RingWriter(remote.ring_units);
  return "";
}

void QpChannel::fail(const std::string& why) {
  if (state_ == QpState::kError) return;
  state_ = QpState::kError;
  ++stats_.qp_errors;
  for (const InFlight& f : in_flight_) stats_.in_doubt_records += f.records;
  in_flight_.clear();
  failure_ = why;
}

std::string QpChannel::take_failure() { return std::exchange(failure_, std::string()); }

void QpChannel::enqueue(const wire::WireRecord& r, const void* payload) {
  const std::size_t body = wire::record_body(r);
  if (sizeof r + wire::pad8(body) > cfg_.max_message_bytes) {
    ++stats_.records_too_large;  // larger than a message can be: it would block the queue forever
    return;
  }
  const std::size_t at = pending_.size();
  pending_.resize(at + sizeof r + wire::pad8(body), 0);
  std::memcpy(pending_.data() + at, &r, sizeof r);
  if (body) std::memcpy(pending_.data() + at + sizeof r, payload, body);
  ++pending_records_;
}

void QpChannel::take_pending(std::vector<std::uint8_t>* out) {
  out->insert(out->end(), pending_.begin() + std::ptrdiff_t(pending_head_), pending_.end());
  pending_.clear();
  pending_head_ = 0;
  pending_records_ = 0;
}

void QpChannel::enqueue_records(const std::uint8_t* records, std::size_t len) {
  for (std::size_t p = 0; p + sizeof(wire::WireRecord) <= len;) {
    wire::WireRecord r;
    std::memcpy(&r, records + p, sizeof r);
    const std::size_t n = wire::record_body(r);
    if (p + sizeof r + n > len) break;  // cut short: not ours to guess
    enqueue(r, records + p + sizeof r);
    p += sizeof r + wire::pad8(n);
  }
}

// The next message from the queue, staged, into *wr (not yet numbered).
// False when nothing is queued or the credits do not cover it.
bool QpChannel::build_message(SendWr* wr, std::uint32_t* records) {
  std::size_t bytes = 0;
  std::uint32_t n = 0;
  const std::size_t limit = cfg_.coalescing ? kMaxRecords : 1;
  for (std::size_t at = pending_head_; at < pending_.size() && n < limit;) {
    wire::WireRecord r;
    std::memcpy(&r, pending_.data() + at, sizeof r);
    const std::size_t size = sizeof r + wire::pad8(wire::record_body(r));
    if (n && bytes + size > cfg_.max_message_bytes) break;
    bytes += size, at += size, ++n;
  }
  if (n == 0) return false;
  std::uint32_t pos = 0, skip = 0;
  if (bytes > cfg_.max_message_bytes || !writer_.place(units_of(std::uint32_t(bytes)), &pos, &skip)) {
    if (!stalled_) ++stats_.credit_stalls;
    stalled_ = true;
    return false;
  }
  stalled_ = false;
  std::memcpy(staging_ + std::size_t(pos) * kUnitBytes, pending_.data() + pending_head_, bytes);
  writer_.advance(skip, units_of(std::uint32_t(bytes)));
  pending_head_ += bytes;
  pending_records_ -= n;
  if (pending_head_ == pending_.size()) pending_.clear(), pending_head_ = 0;
  wr->local_addr = reinterpret_cast<std::uint64_t>(staging_) + std::uint64_t(pos) * kUnitBytes;
  wr->length = std::uint32_t(bytes);
  wr->lkey = mr_.lkey;
  wr->remote_addr = remote_.ring_addr + std::uint64_t(pos) * kUnitBytes;
  wr->rkey = remote_.rkey;
  wr->imm = encode_imm({pos, n, 0});  // the credit return is added when the WR is numbered
  *records = n;
  return true;
}

std::size_t QpChannel::pump() {
  if (state_ != QpState::kRts) return 0;
  SendWr wrs[64];
  std::uint32_t recs[64];
  const std::size_t batch = std::min<std::size_t>(cfg_.max_batch, 64);
  std::size_t n = 0;
  auto room = [&] { return sq_outstanding() + n < cfg_.qp.max_send_wr; };
  while (n < batch && room() && build_message(&wrs[n], &recs[n])) ++n;
  if (n < batch && has_pending() && !room()) ++stats_.sq_full;
  // Credits owed with nothing to carry them: alone, once a quarter of the
  // ring is owed (the peer may be waiting for them).
  if (n == 0 && room() && reader_.owed() >= std::max<std::uint32_t>(1, reader_.units() / 4)) {
    wrs[0] = SendWr{};
    wrs[0].remote_addr = remote_.ring_addr;
    wrs[0].rkey = remote_.rkey;
    recs[0] = 0;
    n = 1;
    ++stats_.credit_returns_alone;
  }
  // The QP scheduler changed its mind about the peer's sending: say so.
  if (in_active_ != announced_ && n < 64 && room()) {
    wrs[n] = SendWr{};
    wrs[n].remote_addr = remote_.ring_addr;
    wrs[n].rkey = remote_.rkey;
    wrs[n].imm = encode_imm({in_active_ ? kNoticeActive : kNoticeInactive, 0, 0});
    recs[n] = 0;
    ++n;
    announced_ = in_active_;
    ++stats_.activation_notices;
  }
  if (n == 0) return 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t seq = sq_posted_ + 1 + i;
    Imm m = decode_imm(wrs[i].imm);
    m.credits = reader_.take_return();
    wrs[i].imm = encode_imm(m);
    wrs[i].wr_id = wr_id(seq);
    wrs[i].signaled = seq % cfg_.signal_interval == 0;
  }
  std::size_t posted = 0;
  const int err = v_.post_send(qp_, wrs, n, &posted);
  ++stats_.doorbells;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t seq = sq_posted_ + 1 + i;
    in_flight_.push_back({seq, recs[i]});  // a failed post loses them too: we cannot tell which went
    if (i >= posted && err) continue;
    ++stats_.wrs_posted;
    stats_.wrs_signaled += wrs[i].signaled;
    stats_.messages_sent += recs[i] != 0;
    stats_.records_sent += recs[i];
    stats_.bytes_sent += wrs[i].length;
  }
  sq_posted_ += n;
  if (err) fail("post_send: error " + std::to_string(err));
  return err ? posted : n;
}

void QpChannel::retire_through(std::uint64_t seq) {
  while (!in_flight_.empty() && in_flight_.front().seq <= seq) in_flight_.pop_front();
  sq_done_ = std::max(sq_done_, seq);
}

void QpChannel::on_completion(const Completion& c, RecordSink& sink) {
  if (((c.wr_id >> 32) & 0xfff) != (local_.generation & 0xfff) || state_ == QpState::kReset) {
    ++stats_.stale_completions;  // of a QP this channel destroyed
    return;
  }
  if (!c.ok) {
    if (state_ != QpState::kError) {
      fail(std::string(c.kind == Completion::Kind::kSend ? "send" : "receive") + " completion: " +
           (c.status.empty() ? "error" : c.status) + " (vendor error " + std::to_string(c.vendor_err) + ")");
    }
    return;
  }
  if (c.kind == Completion::Kind::kSend) {
    // Sequence numbers are 32 bits in the wr_id; fewer than 2^32 are outstanding.
    const std::uint64_t seq = sq_done_ + std::uint32_t(std::uint32_t(c.wr_id) - std::uint32_t(sq_done_));
    if (seq <= sq_posted_) retire_through(seq);
    return;
  }
  if (c.kind != Completion::Kind::kRecvImm || state_ == QpState::kError) return;
  ++receives_owed_;
  const Imm m = decode_imm(c.imm);
  if (m.records == 0) {
    if (c.byte_len != 0) {
      ++stats_.protocol_errors;
      return fail("a credit return carried " + std::to_string(c.byte_len) + " bytes");
    }
    if (m.pos > kNoticeActive) {
      ++stats_.protocol_errors;
      return fail("a zero-length message with position " + std::to_string(m.pos));
    }
    if (m.pos) out_active_ = m.pos == kNoticeActive;
    writer_.grant(m.credits);
    return;
  }
  const std::uint64_t tail = reader_.tail();
  if (!reader_.accept(m.pos, c.byte_len)) {
    ++stats_.protocol_errors;
    return fail("a message at unit " + std::to_string(m.pos) + " of " + std::to_string(c.byte_len) +
                " bytes where unit " + std::to_string(tail % reader_.units()) + " was next, or beyond its credits");
  }
  const std::uint8_t* at = ring_ + std::size_t(m.pos) * kUnitBytes;
  if (wire::check_records(at, c.byte_len, m.records) != wire::Drop::kNone) {
    ++stats_.protocol_errors;
    return fail("a message whose " + std::to_string(m.records) + " records do not check");
  }
  ++stats_.messages_received;
  wire::RecordCursor cur(at, c.byte_len);
  wire::RecordView v;
  while (cur.next(&v)) {
    ++stats_.records_received;
    ++recv_since_take_;
    sink.record(v);
  }
  writer_.grant(m.credits);
}

void QpChannel::repost_receives() {
  if (!receives_owed_ || (state_ != QpState::kInit && state_ != QpState::kRtr && state_ != QpState::kRts)) return;
  std::uint64_t ids[64];
  while (receives_owed_) {
    const std::uint32_t n = std::min<std::uint32_t>(receives_owed_, 64);
    std::fill(ids, ids + n, wr_id(0));
    if (const int e = v_.post_recv(qp_, ids, n); e != 0) return fail("post_recv: error " + std::to_string(e));
    receives_owed_ -= n;
  }
}

}  // namespace gossamer::dataplane::verbs
