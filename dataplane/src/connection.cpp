#include "connection.hpp"

#include <algorithm>
#include <cstring>

namespace gossamer::dataplane {

using wire::FrameHeader;

Connection::Connection(std::uint16_t self, std::uint16_t peer, std::uint8_t index,
                       std::uint32_t credits, std::uint32_t boot, std::uint64_t tsc_hz)
    : self_(self),
      peer_(peer),
      index_(index),
      credits_(std::max<std::uint32_t>(credits, 2)),
      boot_(boot),
      rto_base_(tsc_hz / 200),   // 5 ms: a sleeping peer answers within ~2 ms
      rto_max_(tsc_hz / 5),      // 200 ms
      rto_(rto_base_),
      credit_limit_(credits_),
      grant_(credits_) {}

void Connection::enqueue(const wire::WireRecord& r, const void* payload) {
  std::size_t body = std::size_t(r.primary_len) + r.overflow_len;
  std::size_t size = sizeof r + wire::pad8(body);
  if (pending_head_ && pending_head_ == pending_.size()) {
    pending_.clear();
    pending_head_ = 0;
  }
  std::size_t at = pending_.size();
  pending_.resize(at + size);
  std::memcpy(pending_.data() + at, &r, sizeof r);
  if (body) std::memcpy(pending_.data() + at + sizeof r, payload, body);
  std::memset(pending_.data() + at + sizeof r + body, 0, size - sizeof r - body);
  pending_bytes_ += size;
  ++pending_records_;
}

void Connection::fill_header(FrameHeader* h, std::uint8_t type, std::uint32_t seq,
                             std::uint8_t flags) {
  std::memset(h, 0, sizeof *h);
  h->magic = wire::kMagic;
  h->version = wire::kVersion;
  h->type = type;
  h->conn = index_;
  h->flags = flags;
  h->src_host = self_;
  h->dst_host = peer_;
  h->boot = boot_;
  h->dst_boot = peer_boot_;
  h->seq = seq;
  h->ack = expected_ - 1;
  h->credit = grant_;
}

std::size_t Connection::pump(std::uint64_t now, const Emit& emit) {
  std::size_t frames = 0;
  while (pending_bytes_) {
    if (next_seq_ > credit_limit_) {
      if (!stalled_since_) {
        stalled_since_ = now;
        ++stats_.credit_stalls;
      }
      break;
    }
    stalled_since_ = 0;
    Sent s;
    s.seq = next_seq_++;
    s.sent_at = now;
    s.bytes.resize(sizeof(FrameHeader));
    std::uint16_t records = 0, requests = 0;
    // Whole records while they fit (a record always fits an empty frame).
    while (pending_bytes_) {
      wire::WireRecord r;
      std::memcpy(&r, pending_.data() + pending_head_, sizeof r);
      std::size_t size = sizeof r + wire::pad8(std::size_t(r.primary_len) + r.overflow_len);
      if (s.bytes.size() - sizeof(FrameHeader) + size > wire::kMaxRecordBytes) break;
      s.bytes.insert(s.bytes.end(), pending_.begin() + std::ptrdiff_t(pending_head_),
                     pending_.begin() + std::ptrdiff_t(pending_head_ + size));
      pending_head_ += size;
      pending_bytes_ -= size;
      --pending_records_;
      ++records;
      if (r.kind == wire::kRecRequest) ++requests, ++stats_.requests_sent;
      if (r.kind == wire::kRecResponse) ++stats_.responses_sent;
    }
    std::uint8_t flags = 0;
    if (!renew_asked_ && credit_limit_ - s.seq < credits_ / 2) {
      flags |= wire::kFlagRenew;
      renew_asked_ = true;
      ++stats_.renewals_requested;
    }
    FrameHeader h;
    fill_header(&h, wire::kData, s.seq, flags);
    h.records = records;
    h.length = std::uint16_t(s.bytes.size() - sizeof h);
    h.coalesced = requests;
    std::memcpy(s.bytes.data(), &h, sizeof h);
    emit(s.bytes.data(), s.bytes.size());
    ack_owed_ = false;
    ++stats_.frames_sent;
    stats_.records_sent += records;
    unacked_.push_back(std::move(s));
    ++frames;
  }
  if (pending_bytes_ == 0) {
    pending_.clear();
    pending_head_ = 0;
  }
  return frames;
}

void Connection::reset(std::uint32_t new_boot) {
  // The peer restarted: whatever we had for its previous incarnation is for
  // an application that no longer exists there.
  ++stats_.resets;
  peer_boot_ = new_boot;
  expected_ = 1;
  grant_ = credits_;
  next_seq_ = 1;
  acked_ = 0;
  credit_limit_ = credits_;
  renew_asked_ = false;
  unacked_.clear();
  pending_.clear();
  pending_head_ = pending_bytes_ = pending_records_ = 0;
  rto_ = rto_base_;
  stalled_since_ = 0;
}

Connection::Accept Connection::on_frame(const FrameHeader& h, std::uint64_t now,
                                        const Emit& emit) {
  if (peer_boot_ == 0) {
    peer_boot_ = h.boot;
  } else if (h.boot != peer_boot_) {
    if (std::int32_t(h.boot - peer_boot_) < 0) {
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
    ack_owed_ = true;
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
  ++stats_.frames_received;
  if (h.type == wire::kAckOnly) {
    if (h.flags & wire::kFlagRenew) {  // a credit probe: answer with the grant
      grant_ = std::max(grant_, expected_ - 1 + credits_);
      ack_owed_ = true;
    }
    return Accept::kDrop;
  }
  ack_owed_ = true;
  if (h.seq != expected_) {
    if (std::int32_t(h.seq - expected_) < 0) ++stats_.duplicates;
    else ++stats_.out_of_order;
    return Accept::kDrop;
  }
  ++expected_;
  stats_.records_received += h.records;
  if (h.flags & wire::kFlagRenew) {
    // Issue 7's QP scheduler decides here whether to grant; for now always.
    grant_ = expected_ - 1 + credits_;
    ++stats_.renewals_granted;
  }
  return Accept::kDeliver;
}

void Connection::retransmit_all(std::uint64_t now, const Emit& emit) {
  for (Sent& s : unacked_) {
    // Refresh the piggybacked ack and grant: they may have moved on.
    FrameHeader h;
    std::memcpy(&h, s.bytes.data(), sizeof h);
    h.ack = expected_ - 1;
    h.credit = grant_;
    h.dst_boot = peer_boot_;
    std::memcpy(s.bytes.data(), &h, sizeof h);
    emit(s.bytes.data(), s.bytes.size());
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

void Connection::flush_ack(const Emit& emit) {
  if (ack_owed_) send_ack(0, emit);
}

std::uint64_t Connection::next_deadline() const {
  std::uint64_t d = UINT64_MAX;
  if (!unacked_.empty()) d = unacked_.front().sent_at + rto_;
  if (stalled_since_ && unacked_.empty()) d = std::min(d, stalled_since_ + rto_);
  return d;
}

}  // namespace gossamer::dataplane
