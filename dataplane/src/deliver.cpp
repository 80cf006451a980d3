// The deliver stage (dataplane.hpp): whole records a core's transport
// received -> application slots; peers' announces and restarts -> the
// control stage.
#include "dataplane.hpp"

#include <cstring>

#include "clock.hpp"
#include "shm_access.hpp"

namespace gossamer::dataplane {

// The peer restarted as `boot` (the transport of core k saw it): records
// posted to other cores before now were for the previous incarnation; the
// other cores reset their connections to it; core 0's control stage forgets
// its applications and announces ours again.
void Dataplane::peer_restarted(Core& k, std::uint32_t peer, std::uint64_t boot) {
  Peer& p = peers_[peer];
  std::uint64_t seen = p.boot_seen.load(std::memory_order_relaxed);
  bool first = false;  // the first core to see this incarnation
  while (boot > seen && !(first = p.boot_seen.compare_exchange_weak(seen, boot, std::memory_order_acq_rel))) {
  }
  // Its exchanges will never close: a new epoch, none open (once per
  // incarnation: another core that sees it later must not forget those
  // the new life opened meanwhile).
  std::uint64_t x = p.open.load(std::memory_order_relaxed);
  while (first && !p.open.compare_exchange_weak(x, ((x >> 32) + 1) << 32, std::memory_order_relaxed)) {
  }
  for (std::uint32_t o = 0; o < ncores_; ++o) {
    if (o == k.index) continue;
    auto* m = new CoreMsg{CoreMsg::Kind::kRestart};
    m->peer = peer;
    m->boot = boot;
    post(k, o, m);
  }
  if (k.index == 0) control_restart(peer, boot);
}

// Core 0: to the control stage, in arrival order with the announces.
void Dataplane::control_restart(std::uint32_t peer, std::uint64_t boot) {
  control_events_.push_back(ControlEvent{peer, boot, {}, {}});
  control_ready_ = true;
}

void Dataplane::CoreSink::deliver(std::uint32_t peer, const wire::RecordView& v) {
  const std::uint64_t start = tsc_now();
  dp.deliver(k, peer, v);
  k.stats.stage_deliver_cycles += tsc_now() - start;
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
  const std::uint32_t q = r.slot_seq;
  const std::uint32_t last = a.get(a.in_req, li, r.client, q);
  std::uint8_t* primary = a.request_primary(r.trustee, r.client, q);
  // The next batch of its lane (kLanes batches on; the first of each lane
  // is 1 to kLanes), and the trustee has answered the lane's previous one.
  // The other lanes' batches may come before or after it: the trustee serves
  // them in seq order.
  if (!App::next_in_lane(last, q) ||
      load_acquire<std::uint32_t>(a.response_primary(r.client, r.trustee, q)) != last) {
    ++k.stats.records_rejected;
    return;
  }
  abi::RequestSlotHeader h{};
  h.count = r.count;
  h.primary_len = r.primary_len;
  h.overflow_len = r.overflow_len;
  std::memcpy(primary + sizeof h.seq, reinterpret_cast<std::uint8_t*>(&h) + sizeof h.seq, sizeof h - sizeof h.seq);
  std::memcpy(primary + sizeof h, v.payload, r.primary_len);
  std::memcpy(a.request_overflow(r.trustee, r.client, q), v.payload + r.primary_len, r.overflow_len);
  a.set(a.in_req, li, r.client, q, q);
  if (a.batch_out(a.trustee_out, li, r.client))  // until we answer its last
    a.set(a.trustee_epoch, li, r.client, open_exchange(src));
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
  const std::uint32_t q = r.slot_seq;
  std::uint8_t* primary = a.response_primary(r.client, r.trustee, q);
  // Answers the request its lane shipped last, and only once (the lane's
  // slot holds the previous answer until then). Any lane's may come
  // first. The lane is free: the client took its previous answer before it
  // published the request this answers.
  if (!a.lane_shipped(li, r.trustee, q) || load_acquire<std::uint32_t>(primary) == q) {
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
  std::memcpy(a.response_overflow(r.client, r.trustee, q), v.payload + r.primary_len, r.overflow_len);
  // Every request slot gets one response slot: a held-back rest
  // (kResponseMore) comes with the answer to a later request of its own.
  // The epoch before the count: once the count is 0, the pair's next ship
  // may open (and store) a new one.
  const std::uint32_t epoch = a.get(a.client_epoch, li, r.trustee);
  if (a.batch_back(a.client_out, li, r.trustee)) close_exchange(src, epoch);
  store_release<std::uint32_t>(primary, r.slot_seq);
  a.wake_thread(li);
}

void Dataplane::close_exchange(std::uint32_t host, std::uint32_t epoch) {
  std::atomic<std::uint64_t>& n = peers_[host].open;
  std::uint64_t x = n.load(std::memory_order_relaxed);
  do {
    if (x >> 32 != epoch || std::uint32_t(x) == 0) return;  // the peer restarted since (peer_restarted)
  } while (!n.compare_exchange_weak(x, x - 1, std::memory_order_relaxed));
}

// Once no core serves `a` any more (free_retired): its pairs still in
// flight either way will never be answered.
void Dataplane::close_exchanges(App& a) {
  for (std::uint32_t li = 0; li < a.local; ++li)
    for (std::uint32_t g = 0; g < a.total; ++g) {
      if (a.is_local(g)) continue;
      if (a.get(a.client_out, li, g) > 0) close_exchange(host_of(a.total, g), a.get(a.client_epoch, li, g));
      if (a.get(a.trustee_out, li, g) > 0) close_exchange(host_of(a.total, g), a.get(a.trustee_epoch, li, g));
    }
}

}  // namespace gossamer::dataplane
