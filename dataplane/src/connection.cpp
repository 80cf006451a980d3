#include "connection.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include <gossamer/abi/slots.hpp>

namespace gossamer::dataplane {

using wire::FrameHeader;

namespace {
// RFC 1982: a is after b (sequence numbers and credit limits wrap at 2^32).
bool after(std::uint32_t a, std::uint32_t b) { return std::int32_t(a - b) > 0; }
std::uint32_t later(std::uint32_t a, std::uint32_t b) { return after(a, b) ? a : b; }
// A request slot's record, or its first fragment.
std::size_t starts_request(const wire::WireRecord& r) {
  return r.kind == wire::kRecRequest && (!(r.frag & wire::kFragment) || r.frag_offset == 0);
}
}  // namespace

Connection::Connection(std::uint16_t self, std::uint16_t peer, std::uint8_t index,
                       std::uint32_t credits, std::uint64_t boot, std::uint64_t tsc_hz, std::uint32_t first_seq)
    : self_(self),
      peer_(peer),
      index_(index),
      credits_(std::max<std::uint32_t>(credits, 2)),
      boot_(boot),
      rto_base_(tsc_hz / 200),   // 5 ms: a sleeping peer answers within ~2 ms
      rto_max_(tsc_hz / 5),      // 200 ms
      rto_(rto_base_),
      first_seq_(first_seq),
      next_seq_(first_seq),
      acked_(first_seq - 1),
      credit_limit_(first_seq - 1 + (index == 0 ? credits_ : 0)),
      out_active_(index == 0),
      expected_(first_seq),
      grant_(first_seq - 1 + (index == 0 ? credits_ : 0)),
      in_active_(index == 0) {}

void Connection::put_record(const wire::WireRecord& w, const std::uint8_t* p, std::size_t n) {
  std::size_t size = sizeof w + wire::pad8(n);
  std::size_t at = pending_.size();
  pending_.resize(at + size);
  std::memcpy(pending_.data() + at, &w, sizeof w);
  if (n) std::memcpy(pending_.data() + at + sizeof w, p, n);
  std::memset(pending_.data() + at + sizeof w + n, 0, size - sizeof w - n);
  pending_bytes_ += size;
  ++pending_records_;
  pending_requests_ += starts_request(w);
}

void Connection::take_pending(std::vector<std::uint8_t>* out) {
  std::size_t at = pending_head_, end = pending_head_ + pending_bytes_;
  // The rest of a slot whose first fragments went out stays: its fragments
  // must follow each other on one connection.
  while (at < end) {
    wire::WireRecord r;
    std::memcpy(&r, pending_.data() + at, sizeof r);
    if (!(r.frag & wire::kFragment) || r.frag_offset == 0) break;
    at += sizeof r + wire::pad8(wire::record_body(r));
  }
  std::size_t moved = 0;
  for (std::size_t p = at; p < end;) {
    wire::WireRecord r;
    std::memcpy(&r, pending_.data() + p, sizeof r);
    p += sizeof r + wire::pad8(wire::record_body(r));
    ++moved;
    pending_requests_ -= starts_request(r);
  }
  out->insert(out->end(), pending_.begin() + std::ptrdiff_t(at), pending_.begin() + std::ptrdiff_t(end));
  pending_.resize(at);
  pending_bytes_ = at - pending_head_;
  pending_records_ -= moved;
}

void Connection::enqueue_records(const std::uint8_t* records, std::size_t len) {
  for (std::size_t p = 0; p + sizeof(wire::WireRecord) <= len;) {
    wire::WireRecord r;
    std::memcpy(&r, records + p, sizeof r);
    std::size_t n = wire::record_body(r);
    put_record(r, records + p + sizeof r, n);
    p += sizeof r + wire::pad8(n);
  }
}

void Connection::set_inbound_active(bool active) {
  if (index_ == 0) active = true;
  if (active == in_active_) return;
  in_active_ = active;
  owe_ack();  // tell the peer now, not at its next renewal
  if (active) {
    grant_ = later(grant_, expected_ - 1 + credits_);
    activation_pending_ = true;
    reminders_left_ = 8;
  }
}

// A renewal request (on a data frame or an ack-only probe) arrived: grant on
// an active connection, decline on an inactive one, except while a slot's
// fragments are half here: the rest must come on this connection, so an
// inactive one still gets the credit to finish it (else the slot, and its
// client-trustee pair, would wait forever).
// (Probes are counted by their sender, as credit_probes, not here.)
void Connection::renewal_asked(std::uint16_t coalescing, bool probe) {
  if (!probe) reported_u_ += std::max<std::uint16_t>(coalescing, 1);
  owe_ack();
  if (in_active_ || reassembly_.active()) {
    grant_ = later(grant_, expected_ - 1 + credits_);
    if (!probe) ++stats_.renewals_granted;
  } else if (!probe) {
    ++stats_.renewals_declined;
  }
}

void Connection::enqueue(const wire::WireRecord& r, const void* payload) {
  std::size_t body = std::size_t(r.primary_len) + r.overflow_len;
  if (pending_head_ && pending_head_ == pending_.size()) {
    pending_.clear();
    pending_head_ = 0;
  } else if (pending_head_ > 65536 && pending_head_ > pending_.size() / 2) {
    // Busy for long (never empty): drop the sent prefix, so the buffer
    // does not grow without bound.
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(pending_head_));
    pending_head_ = 0;
  }
  const auto* bytes = static_cast<const std::uint8_t*>(payload);
  bool slot = r.kind == wire::kRecRequest || r.kind == wire::kRecResponse;
  if (!slot || body <= max_fragment_) {
    wire::WireRecord w = r;
    w.frag = 0;
    w.frag_len = 0;
    w.frag_offset = 0;
    put_record(w, bytes, body);
    return;
  }
  // Larger than a frame: consecutive fragments, each filling a frame.
  for (std::size_t off = 0; off < body; off += max_fragment_) {
    std::size_t n = std::min(body - off, max_fragment_);
    wire::WireRecord w = r;
    w.frag = wire::kFragment | (off + n < body ? wire::kFragMore : 0);
    w.frag_len = std::uint16_t(n);
    w.frag_offset = std::uint32_t(off);
    put_record(w, bytes + off, n);
    ++stats_.fragments_sent;
  }
}

Reassembly::Reassembly()
    : req_primary_(abi::kRequestPrimaryData),
      resp_primary_(abi::kResponsePrimaryData),
      overflow_(abi::kOverflowBytes) {}

Reassembly::Result Reassembly::add(const wire::RecordView& in, wire::RecordView* out,
                                   ConnectionStats& stats) {
  const wire::WireRecord& r = in.rec;
  if (!(r.frag & wire::kFragment)) {
    if (!active_) return Result::kWhole;
    // The sender enqueues a slot's fragments back to back: a whole record in
    // between means the stream is not what we think it is.
    ++stats.frag_interrupted;
    reset();
    return Result::kDropped;
  }
  ++stats.fragments_received;
  std::size_t total = std::size_t(r.primary_len) + r.overflow_len;
  std::size_t end = std::size_t(r.frag_offset) + r.frag_len;
  // parse_frame checked these already; check again, this buffer is ours.
  if (r.frag_len == 0 || end > total || ((r.frag & wire::kFragMore) ? end >= total : end != total) ||
      (r.kind != wire::kRecRequest && r.kind != wire::kRecResponse)) {
    ++stats.frag_mismatch;
    reset();
    return Result::kDropped;
  }
  if (!active_) {
    if (r.frag_offset != 0) {
      ++stats.frag_bad_offset;
      return Result::kDropped;
    }
    std::uint32_t primary_cap = r.kind == wire::kRecRequest ? req_primary_ : resp_primary_;
    if (r.primary_len > primary_cap || r.overflow_len > overflow_) {
      ++stats.frag_oversize;
      return Result::kDropped;
    }
    if (buf_.size() < std::size_t(primary_cap) + overflow_) buf_.resize(std::size_t(primary_cap) + overflow_);
    first_ = r;
    have_ = 0;
    active_ = true;
  } else {
    if (r.kind != first_.kind || r.count != first_.count || r.client != first_.client ||
        r.trustee != first_.trustee || r.slot_seq != first_.slot_seq ||
        r.primary_len != first_.primary_len || r.overflow_len != first_.overflow_len ||
        r.slot_flags != first_.slot_flags || r.app != first_.app) {
      ++stats.frag_mismatch;
      reset();
      return Result::kDropped;
    }
    if (r.frag_offset != have_) {
      ++stats.frag_bad_offset;
      reset();
      return Result::kDropped;
    }
  }
  // have_ == frag_offset and end <= total <= buf_.size().
  std::memcpy(buf_.data() + have_, in.payload, r.frag_len);
  have_ = end;
  if (r.frag & wire::kFragMore) return Result::kHeld;
  out->rec = first_;
  out->rec.frag = 0;
  out->rec.frag_len = 0;
  out->rec.frag_offset = 0;
  out->payload = buf_.data();
  active_ = false;
  have_ = 0;
  ++stats.slots_reassembled;
  return Result::kComplete;
}

void Connection::fill_header(FrameHeader* h, std::uint8_t type, std::uint32_t seq,
                             std::uint8_t flags) {
  std::memset(h, 0, sizeof *h);
  h->magic = wire::kMagic;
  h->version = wire::kVersion;
  h->type = type;
  h->conn = index_;
  h->flags = flags;
  h->flags |= in_active_ ? wire::kFlagActive : 0;
  h->src_host = self_;
  h->dst_host = peer_;
  h->boot = boot_;
  h->dst_boot = peer_boot_;
  h->seq = seq;
  h->ack = expected_ - 1;
  h->credit = grant_;
}

Connection::Sent& Connection::SentRing::push_back(std::size_t frame_cap, std::size_t want, std::uint8_t** buf) {
  if (cap_ < frame_cap || size() == ents_.size()) {
    // First use, or more in flight than the credits (never, by the credit
    // rules; kept correct anyway): a larger ring, the frames copied over.
    std::size_t n = std::bit_ceil(std::max({want, ents_.size() * 2, std::size_t(2)}));
    std::size_t cap = std::max(cap_, frame_cap);
    std::vector<Sent> ents(n);
    std::vector<std::uint8_t> frames(n * cap);
    for (std::size_t i = 0; i < size(); ++i) {
      ents[i] = at(head_ + i);
      std::memcpy(frames.data() + i * cap, bytes(i), ents[i].len);
    }
    tail_ = size();
    head_ = 0;
    ents_.swap(ents);
    buf_.swap(frames);
    mask_ = n - 1;
    cap_ = cap;
  }
  *buf = buf_.data() + (tail_ & mask_) * cap_;
  return at(tail_++);
}

std::size_t Connection::pump(std::uint64_t now, const Emit& emit) {
  std::size_t frames = 0;
  const std::size_t frame_cap = sizeof(FrameHeader) + max_record_;
  while (pending_bytes_) {
    if (after(next_seq_, credit_limit_)) {
      if (!stalled_since_) {
        stalled_since_ = now;
        ++stats_.credit_stalls;
      }
      break;
    }
    stalled_since_ = 0;
    // Less than a frame while more records are coming and a frame of ours
    // is in flight: wait a little for them, or for its ack (set_batching,
    // set_more_coming).
    if (hold_ && coalescing_on_ && more_coming_ && !unacked_.empty() && pending_bytes_ <= max_record_) {
      if (!held_since_) held_since_ = now;
      if (now - held_since_ < hold_) break;
    }
    held_since_ = 0;
    std::uint8_t* out;
    Sent& s = unacked_.push_back(frame_cap, credits_, &out);
    s.seq = next_seq_++;
    s.sent_at = now;
    std::size_t len = sizeof(FrameHeader);
    std::uint16_t records = 0, requests = 0, slots = 0;
    // Whole records while they fit (a record always fits an empty frame).
    while (pending_bytes_) {
      wire::WireRecord r;
      std::memcpy(&r, pending_.data() + pending_head_, sizeof r);
      std::size_t size = sizeof r + wire::pad8(wire::record_body(r));
      if (len - sizeof(FrameHeader) + size > max_record_) break;
      if (!coalescing_on_ && records > 0) break;
      std::memcpy(out + len, pending_.data() + pending_head_, size);
      len += size;
      pending_head_ += size;
      pending_bytes_ -= size;
      --pending_records_;
      ++records;
      // Slots, not fragments: a fragmented slot counts once, at its start.
      bool starts_slot = !(r.frag & wire::kFragment) || r.frag_offset == 0;
      if (r.kind == wire::kRecRequest && starts_slot) ++requests, ++slots, ++stats_.requests_sent, --pending_requests_;
      if (r.kind == wire::kRecResponse && starts_slot) ++slots, ++stats_.responses_sent;
    }
    s.len = std::uint32_t(len);
    coalescing_.add(slots);
    std::uint8_t flags = 0;
    std::uint16_t coalescing = 0;
    if (!renew_asked_ && credit_limit_ - s.seq < credits_ / 2) {
      flags |= wire::kFlagRenew;
      renew_asked_ = true;
      ++stats_.renewals_requested;
      coalescing = std::uint16_t(std::min<std::uint32_t>(coalescing_.median(), 0xffff));
      coalescing_.clear();
    }
    FrameHeader h;
    fill_header(&h, wire::kData, s.seq, flags);
    h.coalescing = coalescing;
    h.records = records;
    h.length = std::uint16_t(len - sizeof h);
    h.coalesced = requests;
    std::memcpy(out, &h, sizeof h);
    emit(out, len);
    ack_owed_ = false;
    ++stats_.frames_sent;
    stats_.records_sent += records;
    ++frames;
  }
  if (pending_bytes_ == 0) {
    pending_.clear();
    pending_head_ = 0;
    held_since_ = 0;
  }
  return frames;
}

void Connection::reset(std::uint64_t new_boot) {
  // The peer restarted: whatever we had for its previous incarnation is for
  // an application that no longer exists there.
  ++stats_.resets;
  peer_boot_ = new_boot;
  expected_ = first_seq_;
  next_seq_ = first_seq_;
  acked_ = first_seq_ - 1;
  // Back to the start: connection 0 active, the others until the peer's
  // scheduler (and ours) activate them.
  grant_ = credit_limit_ = first_seq_ - 1 + (index_ == 0 ? credits_ : 0);
  in_active_ = out_active_ = index_ == 0;
  activation_pending_ = false;
  reported_u_ = 0;
  data_since_take_ = false;
  coalescing_.clear();
  renew_asked_ = false;
  unacked_.clear();
  held_since_ = 0;
  ack_owed_ = false;
  pending_.clear();
  pending_head_ = pending_bytes_ = pending_records_ = pending_requests_ = 0;
  rto_ = rto_base_;
  stalled_since_ = 0;
  reassembly_.reset();  // the rest of a partial slot will never come
}

Connection::Accept Connection::on_frame(const FrameHeader& h, std::uint64_t now,
                                        const Emit& emit) {
  if (peer_boot_ == 0) {
    peer_boot_ = h.boot;
  } else if (h.boot != peer_boot_) {
    if (h.boot < peer_boot_) {
      ++stats_.stale_boot;  // a frame from the peer's previous life
      return Accept::kDrop;
    }
    reset(h.boot);
  }
  if (h.dst_boot != 0 && h.dst_boot != boot_) {
    // Sent to our previous incarnation (or a forged one): its ack, credit and
    // seq describe a conversation we no longer have. Our next frame tells the
    // peer who we are now, and it resets.
    ++stats_.wrong_incarnation;
    owe_ack();
    return Accept::kDrop;
  }
  // The reverse direction: acks and credit.
  if (std::int32_t(h.ack - acked_) > 0 && std::int32_t(h.ack - next_seq_) < 0) {
    acked_ = h.ack;
    while (!unacked_.empty() && std::int32_t(unacked_.front().seq - acked_) <= 0) unacked_.pop_front();
    rto_ = rto_base_;
    dupacks_ = 0;
  } else if (h.type == wire::kAckOnly && !unacked_.empty() && h.ack == acked_ &&
             !(h.flags & wire::kFlagRenew)) {
    // Two duplicate acks: the receiver is missing the first unacked frame.
    if (++dupacks_ >= 2 && now - last_fast_retransmit_ > rto_base_ / 8) {
      ++stats_.fast_retransmits;
      retransmit_all(now, emit);
      last_fast_retransmit_ = now;
      dupacks_ = 0;
    }
  }
  if (std::int32_t(h.credit - credit_limit_) > 0) {
    credit_limit_ = h.credit;
    renew_asked_ = false;
  }
  // Whether the peer takes new slots from us here (its scheduler's word).
  out_active_ = (h.flags & wire::kFlagActive) != 0;
  ++stats_.frames_received;
  if (h.type == wire::kAckOnly) {
    if (h.flags & wire::kFlagRenew) renewal_asked(h.coalescing, true);  // a credit probe
    return Accept::kDrop;
  }
  if (h.seq != expected_) {
    owe_ack();  // at once: the sender counts duplicate acks to retransmit
    if (std::int32_t(h.seq - expected_) < 0) ++stats_.duplicates;
    else ++stats_.out_of_order;
    return Accept::kDrop;
  }
  owe_ack_by(now);  // our next data frame carries it, or an ack-only one at ack_delay
  ++expected_;
  activation_pending_ = false;
  data_since_take_ = true;
  stats_.records_received += h.records;
  if (h.flags & wire::kFlagRenew) renewal_asked(h.coalescing, false);
  return Accept::kDeliver;
}

void Connection::retransmit_all(std::uint64_t now, const Emit& emit) {
  for (std::size_t i = 0; i < unacked_.size(); ++i) {
    Sent& s = unacked_[i];
    std::uint8_t* bytes = unacked_.bytes(i);
    // Refresh the piggybacked ack and grant: they may have moved on.
    FrameHeader h;
    std::memcpy(&h, bytes, sizeof h);
    h.ack = expected_ - 1;
    h.credit = grant_;
    h.dst_boot = peer_boot_;
    h.flags = std::uint8_t((h.flags & ~wire::kFlagActive) | (in_active_ ? wire::kFlagActive : 0));
    std::memcpy(bytes, &h, sizeof h);
    emit(bytes, s.len);
    s.sent_at = now;
    ++stats_.retransmits;
  }
  ack_owed_ = false;
}

void Connection::send_ack(std::uint8_t flags, const Emit& emit) {
  FrameHeader h;
  fill_header(&h, wire::kAckOnly, 0, flags);
  emit(reinterpret_cast<const std::uint8_t*>(&h), sizeof h);
  ++stats_.acks_sent;
  ack_owed_ = false;
}

void Connection::timers(std::uint64_t now, const Emit& emit) {
  if (!unacked_.empty() && now - unacked_.front().sent_at >= rto_) {
    ++stats_.timeouts;
    retransmit_all(now, emit);
    rto_ = std::min(rto_ * 2, rto_max_);
  }
  if (stalled_since_ && unacked_.empty() && now - stalled_since_ >= rto_) {
    // Out of credit with nothing in flight: the grant may have been lost.
    ++stats_.credit_probes;
    send_ack(wire::kFlagRenew, emit);
    stalled_since_ = now;
  }
}

void Connection::flush_ack(std::uint64_t now, const Emit& emit) {
  if (ack_owed_ && ack_deadline() <= now) send_ack(0, emit);
}

std::uint64_t Connection::next_deadline() const {
  std::uint64_t d = UINT64_MAX;
  if (!unacked_.empty()) d = unacked_.front().sent_at + rto_;
  if (stalled_since_ && unacked_.empty()) d = std::min(d, stalled_since_ + rto_);
  if (ack_owed_) d = std::min(d, ack_deadline());
  if (held_since_ && pending_bytes_) d = std::min(d, held_since_ + hold_);
  return d;
}

}  // namespace gossamer::dataplane
