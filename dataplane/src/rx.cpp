// The rx stage (dataplane.hpp): frames from a core's NIC queue (or steered
// to it by another core) -> connections -> application slots.
#include "dataplane.hpp"

#include <cstring>

#include "clock.hpp"
#include "shm_access.hpp"

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

// Frames from this core's port queue (the port injects faults first, when
// asked: port_faults.hpp).
bool Dataplane::poll_rx(Core& k) {
  Frame frames[kBurst];
  const std::uint16_t n = port_->rx_burst(std::uint16_t(k.index), frames, kBurst);
  if (!n) return false;
  const std::uint64_t now = tsc_now();
  k.stats.rx_frames += n;
  for (std::uint16_t i = 0; i < n; ++i) dispatch(k, frames[i], now);
  return true;
}

// A frame from our queue: ours to process, or its connection's core's.
void Dataplane::dispatch(Core& k, const Frame& f, std::uint64_t now) {
  if (ncores_ > 1) {
    if (const std::uint32_t owner = conn_owner(frame_conn(f.data, f.len)); owner != k.index) {
      if (cores_[owner]->frames->push(f.handle)) {
        ++k.stats.steered;
        wake(*cores_[owner]);
      } else {
        ++k.stats.steer_dropped;  // the sender retransmits it
        port_->release(f);
      }
      return;
    }
  }
  process_frame(k, f.data, f.len, now);
  port_->release(f);
}

// Frames other cores' queues received for our connections.
bool Dataplane::poll_steered(Core& k) {
  void* handles[kBurst];
  const std::size_t n = k.frames->pop_burst(handles, kBurst);
  if (!n) return false;
  const std::uint64_t now = tsc_now();
  for (std::size_t i = 0; i < n; ++i) {
    const Frame f = port_->frame(handles[i]);
    process_frame(k, f.data, f.len, now);
    port_->release(f);
  }
  return true;
}

void Dataplane::process_frame(Core& k, const std::uint8_t* data, std::size_t len, std::uint64_t now) {
  wire::ParsedFrame pf;
  wire::Drop d = wire::parse_frame(data, len, self_ep_, endpoints_.data(), endpoints_.size(), self_,
                                   conns_per_host_, &pf);
  if (d != wire::Drop::kNone) {
    ++k.stats.drops[std::size_t(d)];
    return;
  }
  ++k.stats.frames_processed;
  const std::uint32_t src = pf.hdr.src_host;
  if (!k.mac_known[src]) [[unlikely]] {
    std::memcpy(k.macs[src].data(), pf.src_mac, 6);
    k.mac_known[src] = true;
    std::uint64_t l = 1ull << 63;
    for (int b = 0; b < 6; ++b) l |= std::uint64_t(pf.src_mac[b]) << (8 * b);
    peers_[src].learned_mac.store(l, std::memory_order_relaxed);
  }
  Peer& p = peers_[src];
  Connection& c = *p.conns[pf.hdr.conn];
  auto emit = [this, &k, src](const std::uint8_t* b, std::size_t n) { transmit(k, src, b, n); };
  const bool accepted = c.on_frame(pf.hdr, now, emit) == Connection::Accept::kDeliver;
  if (c.stats().resets != k.resets_seen[src][pf.hdr.conn]) {
    // The peer restarted. Every connection to it starts over with the new
    // incarnation at once: one that had not heard from it yet would still
    // carry the old sequence numbers, and would throw away what the new run
    // sends on it when it finally resets. Then (core 0) forget the peer's
    // old applications and announce ours again (on connection 0, now
    // fresh), before delivering this frame's records: the new peer's first
    // frame may carry its own announce.
    // Records posted to other cores before now were for the previous one.
    std::uint32_t seen = p.boot_seen.load(std::memory_order_relaxed);
    while (std::int32_t(c.peer_boot() - seen) > 0 &&
           !p.boot_seen.compare_exchange_weak(seen, c.peer_boot(), std::memory_order_acq_rel)) {
    }
    peer_restarted(k, src, c.peer_boot());
    for (std::uint32_t o = 0; o < ncores_; ++o) {
      if (o == k.index) continue;
      auto* m = new CoreMsg{CoreMsg::Kind::kRestart};
      m->peer = src;
      m->boot = c.peer_boot();
      post(k, o, m);
    }
  }
  if (accepted) {
    wire::RecordCursor cur(pf.records, pf.hdr.length);
    wire::RecordView v, whole;
    while (cur.next(&v)) {
      switch (c.reassemble(v, &whole)) {
        case Reassembly::Result::kWhole:
          c.count_delivered(v.rec.kind);
          deliver(k, src, v);
          break;
        case Reassembly::Result::kComplete:
          c.count_delivered(whole.rec.kind);
          deliver(k, src, whole);
          break;
        case Reassembly::Result::kHeld: break;
        case Reassembly::Result::kDropped: ++k.stats.records_rejected; break;
      }
    }
  }
}

// The peer restarted as `boot` (seen by this core, or posted by the core
// that saw it): our connections to it start over.
void Dataplane::peer_restarted(Core& k, std::uint32_t peer, std::uint32_t boot) {
  Peer& p = peers_[peer];
  for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
    p.conns[j]->peer_restarted(boot);
    k.resets_seen[peer][j] = p.conns[j]->stats().resets;
  }
  if (k.index == 0) {  // to the control stage: forget its applications, announce ours again
    control_events_.push_back(ControlEvent{peer, boot, {}, {}});
    control_ready_ = true;
  }
}


void Dataplane::deliver(Core& k, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.kind == wire::kRecAttach || r.kind == wire::kRecDetach) {
    if (k.index != 0) {  // announces travel on connection 0 (core 0's)
      ++k.stats.records_rejected;
      return;
    }
    ControlEvent e{src, 0, r, {}};
    std::memcpy(&e.an, v.payload, sizeof e.an);
    control_events_.push_back(e);  // to the control stage, in arrival order
    control_ready_ = true;
    return;
  }
  App* a = app_by_key(k, r.app);
  if (!a) {
    ++k.stats.records_no_app;
    return;
  }
  if (r.kind == wire::kRecRequest) deliver_request(k, *a, src, v);
  else deliver_response(k, *a, src, v);
}

void Dataplane::deliver_request(Core& k, App& a, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.client >= a.total || r.trustee >= a.total || !a.is_local(r.trustee) ||
      host_of(a.total, r.client) != src || r.primary_len > abi::kRequestPrimaryData ||
      r.overflow_len > abi::kOverflowBytes) {
    ++k.stats.records_rejected;
    return;
  }
  std::uint32_t li = r.trustee - a.first;
  const std::uint32_t last = a.get(a.in_req, li, r.client);
  std::uint8_t* primary = a.request_primary(r.trustee, r.client);
  // The next batch, and the trustee has answered the previous one.
  if (r.slot_seq != last + 1 ||
      load_acquire<std::uint32_t>(a.response_primary(r.client, r.trustee)) != last) {
    ++k.stats.records_rejected;
    return;
  }
  abi::RequestSlotHeader h{};
  h.count = r.count;
  h.primary_len = r.primary_len;
  h.overflow_len = r.overflow_len;
  std::memcpy(primary + sizeof h.seq, reinterpret_cast<std::uint8_t*>(&h) + sizeof h.seq, sizeof h - sizeof h.seq);
  std::memcpy(primary + sizeof h, v.payload, r.primary_len);
  std::memcpy(a.request_overflow(r.trustee, r.client), v.payload + r.primary_len, r.overflow_len);
  a.set(a.in_req, li, r.client, r.slot_seq);
  store_release<std::uint32_t>(primary, r.slot_seq);
  a.wake_thread(li);
}

void Dataplane::deliver_response(Core& k, App& a, std::uint32_t src, const wire::RecordView& v) {
  const wire::WireRecord& r = v.rec;
  if (r.client >= a.total || r.trustee >= a.total || !a.is_local(r.client) ||
      host_of(a.total, r.trustee) != src || r.primary_len > abi::kResponsePrimaryData ||
      r.overflow_len > abi::kOverflowBytes) {
    ++k.stats.records_rejected;
    return;
  }
  std::uint32_t li = r.client - a.first;
  std::uint8_t* primary = a.response_primary(r.client, r.trustee);
  // Answers the request we shipped last, and only once.
  if (r.slot_seq != a.get(a.out_req, li, r.trustee) || load_acquire<std::uint32_t>(primary) == r.slot_seq) {
    ++k.stats.records_rejected;
    return;
  }
  abi::ResponseSlotHeader h{};
  h.count = r.count;
  h.primary_len = r.primary_len;
  h.overflow_len = r.overflow_len;
  h.flags = r.slot_flags & abi::kResponseMore;
  std::memcpy(primary + sizeof h.seq, reinterpret_cast<std::uint8_t*>(&h) + sizeof h.seq, sizeof h - sizeof h.seq);
  std::memcpy(primary + sizeof h, v.payload, r.primary_len);
  std::memcpy(a.response_overflow(r.client, r.trustee), v.payload + r.primary_len, r.overflow_len);
  store_release<std::uint32_t>(primary, r.slot_seq);
  a.wake_thread(li);
}

}  // namespace gossamer::dataplane
