// The UDP transport (udp_transport.hpp): frames from this core's port queue
// (or steered to it) -> connections -> the delivery sink, and connections
// -> frames on its queue.
#include "udp_transport.hpp"

#include <cstring>

#include "clock.hpp"

namespace gossamer::dataplane {

namespace {
// The connection a frame names, if it is long enough to name one (the
// owner validates it all).
std::uint32_t frame_conn(const std::uint8_t* data, std::size_t len) {
  if (len < wire::kL2L4Bytes + sizeof(wire::FrameHeader)) return 0;
  wire::FrameHeader h;
  std::memcpy(&h, data + wire::kL2L4Bytes, sizeof h);
  return h.conn;
}
}  // namespace

UdpTransport::UdpTransport(Dataplane& dp, Dataplane::Core& k) : dp_(dp), k_(k) {
  verifier_.auth = &dp_.auth_;
  verifier_.self = dp_.self_;
  verifier_.keys.resize(dp_.hosts_);
  send_keys_.resize(dp_.hosts_);
  if (dp_.cfg_.dataplane.authenticate)
    for (std::uint32_t h = 0; h < dp_.hosts_; ++h) send_keys_[h] = dp_.auth_.key(dp_.self_, h, dp_.boot_);
}

bool UdpTransport::Verifier::verify(const wire::FrameHeader& h, const std::uint8_t* payload, std::size_t len,
                                    const std::uint8_t* tag) {
  Cached& c = keys[h.src_host];
  if (c.valid && c.boot == h.boot) [[likely]] return FrameAuth::verify(c.key, payload, len, tag);
  // A new incarnation, or a forgery claiming one: derive its key, and keep
  // it only if the frame verifies (forged frames must not evict the real
  // incarnation's key and make every real frame derive it again) and names
  // a later incarnation (nor may replayed frames of an earlier one, which
  // the connections drop as stale anyway).
  const FrameKey k = auth->key(h.src_host, self, h.boot);
  if (!FrameAuth::verify(k, payload, len, tag)) return false;
  if (!c.valid || h.boot > c.boot) c = Cached{true, h.boot, k};
  return true;
}

void UdpTransport::enqueue(std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& r, const void* payload) {
  dp_.peers_[peer].conns[conn]->enqueue(r, payload);
}

bool UdpTransport::usable(std::uint32_t peer, std::uint32_t conn) const { return dp_.peers_[peer].conns[conn]->usable(); }

std::uint64_t UdpTransport::next_deadline() const {
  std::uint64_t deadline = UINT64_MAX;
  for (std::uint32_t h = 0; h < dp_.hosts_; ++h)
    for (std::uint32_t j = k_.index; h != dp_.self_ && j < dp_.conns_per_host_; j += dp_.ncores_)
      deadline = std::min(deadline, dp_.peers_[h].conns[j]->next_deadline());
  return deadline;
}

void UdpTransport::counters(std::uint32_t peer, std::uint32_t conn, abi::ConnCounters* out) const {
  fill_conn(*out, *dp_.peers_[peer].conns[conn]);
}

void UdpTransport::peer_restarted(std::uint32_t peer, std::uint64_t boot) {
  Dataplane::Peer& p = dp_.peers_[peer];
  for (std::uint32_t j = k_.index; j < dp_.conns_per_host_; j += dp_.ncores_) {
    p.conns[j]->peer_restarted(boot);
    k_.resets_seen[peer][j] = p.conns[j]->stats().resets;
  }
}

bool UdpTransport::poll(DeliverySink& sink) {
  bool worked = poll_rx(sink);   // our port queue: process, or steer to the owner
  worked |= poll_steered(sink);  // frames other queues received for our connections
  return worked;
}

// Frames from this core's port queue (the port injects faults first, when
// asked: port_faults.hpp).
bool UdpTransport::poll_rx(DeliverySink& sink) {
  Frame frames[kBurst];
  const std::uint16_t n = dp_.port_->rx_burst(std::uint16_t(k_.index), frames, kBurst);
  if (!n) return false;
  const std::uint64_t now = tsc_now();
  k_.stats.rx_frames += n;
  for (std::uint16_t i = 0; i < n; ++i) dispatch(frames[i], now, sink);
  return true;
}

// A frame from our queue: ours to process, or its connection's core's.
void UdpTransport::dispatch(const Frame& f, std::uint64_t now, DeliverySink& sink) {
  if (dp_.ncores_ > 1) {
    if (const std::uint32_t owner = dp_.conn_owner(frame_conn(f.data, f.len)); owner != k_.index) {
      if (dp_.cores_[owner]->frames->push(f.handle)) {
        ++k_.stats.steered;
        Dataplane::wake(*dp_.cores_[owner]);
      } else {
        ++k_.stats.steer_dropped;  // the sender retransmits it
        dp_.port_->release(f);
      }
      return;
    }
  }
  process_frame(f.data, f.len, now, sink);
  dp_.port_->release(f);
}

// Frames other cores' queues received for our connections.
bool UdpTransport::poll_steered(DeliverySink& sink) {
  void* handles[kBurst];
  const std::size_t n = k_.frames->pop_burst(handles, kBurst);
  if (!n) return false;
  const std::uint64_t now = tsc_now();
  for (std::size_t i = 0; i < n; ++i) {
    const Frame f = dp_.port_->frame(handles[i]);
    process_frame(f.data, f.len, now, sink);
    dp_.port_->release(f);
  }
  return true;
}

void UdpTransport::process_frame(const std::uint8_t* data, std::size_t len, std::uint64_t now, DeliverySink& sink) {
  wire::ParsedFrame pf;
  // Longer than our MTU: a peer with a larger dataplane.mtu (or a port that
  // could not give the frame in one buffer, len 0).
  const wire::Drop d = len == 0 || len > wire::kEthBytes + dp_.cfg_.dataplane.mtu
                           ? wire::Drop::kTooLong
                           : wire::parse_frame(data, len, dp_.self_ep_, dp_.endpoints_.data(),
                                               dp_.endpoints_.size(), dp_.self_, dp_.conns_per_host_,
                                               dp_.cfg_.dataplane.authenticate ? &verifier_ : nullptr, &pf);
  if (d != wire::Drop::kNone) {
    ++k_.stats.drops[std::size_t(d)];
    return;
  }
  ++k_.stats.frames_processed;
  const std::uint32_t src = pf.hdr.src_host;
  if (!k_.mac_known[src]) [[unlikely]] {
    std::memcpy(k_.macs[src].data(), pf.src_mac, 6);
    k_.mac_known[src] = true;
    std::uint64_t l = 1ull << 63;
    for (int b = 0; b < 6; ++b) l |= std::uint64_t(pf.src_mac[b]) << (8 * b);
    dp_.peers_[src].learned_mac.store(l, std::memory_order_relaxed);
  }
  Connection& c = *dp_.peers_[src].conns[pf.hdr.conn];
  auto emit = [this, src](const std::uint8_t* b, std::size_t n) { transmit(src, b, n); };
  const bool accepted = c.on_frame(pf.hdr, now, emit) == Connection::Accept::kDeliver;
  if (c.stats().resets != k_.resets_seen[src][pf.hdr.conn]) {
    // The peer restarted. Every connection to it starts over with the new
    // incarnation at once: one that had not heard from it yet would still
    // carry the old sequence numbers, and would throw away what the new run
    // sends on it when it finally resets. The sink learns it before this
    // frame's records: the new peer's first frame may carry its announce.
    peer_restarted(src, c.peer_boot());
    sink.peer_restarted(src, c.peer_boot());
  }
  if (!accepted) return;
  wire::RecordCursor cur(pf.records, pf.hdr.length);
  wire::RecordView v, whole;
  while (cur.next(&v)) {
    switch (c.reassemble(v, &whole)) {
      case Reassembly::Result::kWhole:
        c.count_delivered(v.rec.kind);
        sink.deliver(src, v);
        break;
      case Reassembly::Result::kComplete:
        c.count_delivered(whole.rec.kind);
        sink.deliver(src, whole);
        break;
      case Reassembly::Result::kHeld: break;
      case Reassembly::Result::kDropped: ++k_.stats.records_rejected; break;
    }
  }
}

void UdpTransport::transmit(std::uint32_t peer, const std::uint8_t* payload, std::size_t len) {
  const bool sign = dp_.cfg_.dataplane.authenticate;
  const std::size_t udp_payload = len + (sign ? wire::kTagBytes : 0);
  Frame fr;
  if (!dp_.port_->alloc(std::uint32_t(wire::kL2L4Bytes + udp_payload), &fr)) {
    ++k_.stats.tx_failed;  // the retransmission timer covers it
    return;
  }
  fr.peer = peer;
  std::memcpy(fr.data + wire::kL2L4Bytes, payload, len);
  if (sign && !FrameAuth::sign(send_keys_[peer], k_.index, signed_++, payload, len, fr.data + wire::kL2L4Bytes + len))
      [[unlikely]] {
    dp_.port_->release(fr);
    ++k_.stats.tx_failed;  // as an allocation failure: the retransmission timer covers it
    return;
  }
  if (!k_.mac_known[peer]) [[unlikely]] {
    if (const std::uint64_t l = dp_.peers_[peer].learned_mac.load(std::memory_order_relaxed); l >> 63) {
      for (int b = 0; b < 6; ++b) k_.macs[peer][std::size_t(b)] = std::uint8_t(l >> (8 * b));
      k_.mac_known[peer] = true;
    }
  }
  wire::write_l2l4(fr.data, dp_.mac_.data(), k_.macs[peer].data(), dp_.self_ep_, dp_.peers_[peer].ep, udp_payload,
                    /*udp_checksum=*/!sign);
  k_.tx_batch.push_back(fr);
  if (k_.tx_batch.size() >= kBurst) flush_tx();
}

void UdpTransport::flush_tx() {
  std::size_t off = 0;
  int tries = 0;
  while (off < k_.tx_batch.size() && tries++ < 8)
    off += dp_.port_->tx_burst(std::uint16_t(k_.index), k_.tx_batch.data() + off,
                               std::uint16_t(k_.tx_batch.size() - off));
  k_.stats.tx_frames += off;
  for (std::size_t i = off; i < k_.tx_batch.size(); ++i) {
    dp_.port_->release(k_.tx_batch[i]);
    ++k_.stats.tx_failed;
  }
  k_.tx_batch.clear();
}

// This core's connections: send what credits allow, timers, owed acks.
bool UdpTransport::pump() {
  bool worked = false;
  const std::uint64_t now = tsc_now();
  for (std::uint32_t h = 0; h < dp_.hosts_; ++h) {
    if (h == dp_.self_) continue;
    Dataplane::Peer& p = dp_.peers_[h];
    auto emit = [this, h](const std::uint8_t* b, std::size_t n) { transmit(h, b, n); };
    // Exchanges with the peer open beyond the requests we still queue:
    // more slots will come, and a short frame may wait for them.
    std::int64_t queued = 0;
    for (std::uint32_t j = k_.index; j < dp_.conns_per_host_; j += dp_.ncores_)
      queued += std::int64_t(p.conns[j]->pending_requests());
    const bool more = p.exchanges() > queued;
    for (std::uint32_t j = k_.index; j < dp_.conns_per_host_; j += dp_.ncores_) {
      Connection& c = *p.conns[j];
      c.set_more_coming(more);
      worked |= c.pump(now, emit) != 0;
      c.timers(now, emit);
      c.flush_ack(now, emit);
      if (const bool u = c.usable(); u != p.usable[j].load(std::memory_order_relaxed))
        p.usable[j].store(u, std::memory_order_relaxed);
    }
  }
  // Frames leave in this burst anyway (one sendto on af_packet): the acks
  // still delayed go with them rather than alone in a later burst.
  if (!k_.tx_batch.empty())
    for (std::uint32_t h = 0; h < dp_.hosts_; ++h) {
      if (h == dp_.self_) continue;
      auto emit = [this, h](const std::uint8_t* b, std::size_t n) { transmit(h, b, n); };
      for (std::uint32_t j = k_.index; j < dp_.conns_per_host_; j += dp_.ncores_)
        dp_.peers_[h].conns[j]->flush_ack(emit);
    }
  flush_tx();
  return worked;
}

}  // namespace gossamer::dataplane
