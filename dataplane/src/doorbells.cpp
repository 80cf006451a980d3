// The doorbell stage (dataplane.hpp): each core serves its threads' doorbell
// rings, copies and validates the slots they name, and queues them on a
// connection to the destination host (or hands them to the core that owns it).
#include "dataplane.hpp"

#include <cstring>

#include "shm_access.hpp"

namespace gossamer::dataplane {

bool Dataplane::any_doorbell(const Core& k) {
  for (App* a : *k.apps)
    for (std::uint32_t i = k.index; i < a->local; i += ncores_)
      if (load_acquire<std::uint32_t>(&a->ring(i)->head) != a->tail[i]) return true;
  return false;
}

// The rings of this core's threads (local thread i: core i % cores).
bool Dataplane::poll_doorbells(Core& k) {
  bool worked = false;
  for (App* a : *k.apps)
    if (!a->bad) worked |= drain_doorbells(k, *a);
  return worked;
}

bool Dataplane::drain_doorbells(Core& k, App& a) {
  bool worked = false;
  for (std::uint32_t i = k.index; i < a.local && !a.bad; i += ncores_) {
    abi::DoorbellRing* r = a.ring(i);
    std::uint32_t head = load_acquire<std::uint32_t>(&r->head);
    std::uint32_t tail = a.tail[i];
    if (head == tail) continue;
    if (head - tail > a.layout.doorbell_entries) {
      ++k.stats.records_rejected;
      a.fail("doorbell ring head out of range");
      break;
    }
    const std::uint32_t* entries = reinterpret_cast<const std::uint32_t*>(r + 1);
    for (; tail != head; ++tail)
      doorbell(k, a, i, load_acquire<std::uint32_t>(&entries[tail & (a.layout.doorbell_entries - 1)]));
    a.tail[i] = tail;
    store_release<std::uint32_t>(&r->tail, tail);
    worked = true;
  }
  return worked;
}

// One doorbell entry: copy the slot it names, validate the copy, queue it.
void Dataplane::doorbell(Core& k, App& a, std::uint32_t li, std::uint32_t entry) {
  ++k.stats.doorbells;
  std::uint32_t self_g = a.first + li;
  std::uint32_t peer = entry & abi::kDoorbellPeerMask;
  bool response = entry & abi::kDoorbellResponse;
  auto bad = [&](const char*) { ++k.stats.records_rejected; };
  if ((entry & ~(abi::kDoorbellResponse | abi::kDoorbellPeerMask)) || peer >= a.total || a.is_local(peer))
    return bad("doorbell names a local or unknown thread");
  std::uint32_t host = host_of(a.total, peer);
  wire::WireRecord w{};
  w.app = a.key;
  std::vector<std::uint8_t>& scratch = k.scratch;
  scratch.resize(abi::kPrimaryBytes + abi::kOverflowBytes);
  if (!response) {
    // Batches are rung in seq order: the next one, in its lane.
    const std::uint32_t seq = a.last_shipped(li, peer) + 1;
    const std::uint8_t* primary = a.request_primary(peer, self_g, seq);
    if (load_acquire<std::uint32_t>(primary) != seq) return bad("request slot seq is not the next one");
    // Its lane is free: the answer to the lane's last ship came (the
    // lane's response slot holds it; both 0 before the first). Else the
    // pair would count more batches in flight than lanes, and the answer
    // still due would find its lane taken (deliver_response) and leave
    // the exchange open for good.
    if (load_acquire<std::uint32_t>(a.response_primary(self_g, peer, seq)) != a.get(a.out_req, li, peer, seq))
      return bad("request rung before its lane's answer came");
    abi::RequestSlotHeader h;
    std::memcpy(&h, primary, sizeof h);
    if (h.primary_len > abi::kRequestPrimaryData || h.overflow_len > abi::kOverflowBytes)
      return bad("request slot lengths out of range");
    std::memcpy(scratch.data(), primary + sizeof h, h.primary_len);
    std::memcpy(scratch.data() + h.primary_len, a.request_overflow(peer, self_g, seq), h.overflow_len);
    // Counted in flight before it is named shipped: its answer, delivered
    // on any core once the lane names it, finds it counted (deliver.cpp).
    if (a.batch_out(a.client_out, li, peer)) a.set(a.client_epoch, li, peer, open_exchange(host));
    a.set(a.out_req, li, peer, seq, seq, std::memory_order_release);
    w.kind = wire::kRecRequest;
    w.count = h.count;
    w.client = std::uint16_t(self_g);
    w.trustee = std::uint16_t(peer);
    w.slot_seq = seq;
    w.primary_len = h.primary_len;
    w.overflow_len = h.overflow_len;
  } else {
    // Answers come in seq order too: the next one, for a request we wrote.
    const std::uint32_t seq = a.get(a.out_resp, li, peer) + 1;
    const std::uint8_t* primary = a.response_primary(peer, self_g, seq);
    if (load_acquire<std::uint32_t>(primary) != seq || a.get(a.in_req, li, peer, seq) != seq)
      return bad("response slot seq unexpected");
    abi::ResponseSlotHeader h;
    std::memcpy(&h, primary, sizeof h);
    if (h.primary_len > abi::kResponsePrimaryData || h.overflow_len > abi::kOverflowBytes)
      return bad("response slot lengths out of range");
    std::memcpy(scratch.data(), primary + sizeof h, h.primary_len);
    std::memcpy(scratch.data() + h.primary_len, a.response_overflow(peer, self_g, seq), h.overflow_len);
    a.set(a.out_resp, li, peer, seq);
    const std::uint32_t epoch = a.get(a.trustee_epoch, li, peer);  // before the count (deliver_response)
    if (a.batch_back(a.trustee_out, li, peer)) close_exchange(host, epoch);
    w.kind = wire::kRecResponse;
    w.count = h.count;
    w.client = std::uint16_t(peer);
    w.trustee = std::uint16_t(self_g);
    w.slot_seq = seq;
    w.primary_len = h.primary_len;
    w.overflow_len = h.overflow_len;
    w.slot_flags = h.flags & abi::kResponseMore;
  }
  // Any usable connection will do: a pair has at most one batch in flight
  // per lane, and the receiver takes a pair's lanes in any order
  // (deliver.cpp).
  App::Flow& f = a.flow(host, li);
  const std::size_t body = std::size_t(w.primary_len) + w.overflow_len;
  f.size.add(std::uint32_t(body));
  f.bytes += body;
  ++f.slots;
  enqueue(k, host, route(a, host, li), w, scratch.data());
}

std::uint32_t Dataplane::route(App& a, std::uint32_t host, std::uint32_t li) {
  const std::uint32_t c = a.flow(host, li).get_conn();
  if (c >= conns_per_host_) return 0;  // 0 is always usable
  // Our own connection's state is current; another core's, as of its last
  // pump (UDP) or scheduler interval. On this per-record path UDP reads its
  // Connection directly, as before the Transport seam; verbs asks its QP.
  const bool own = conn_owner(c) == li % ncores_;
  const bool usable = !own         ? peers_[host].usable[c].load(std::memory_order_relaxed)
                      : verbs_mode_ ? cores_[li % ncores_]->transport->usable(host, c)
                                    : peers_[host].conns[c]->usable();
  return usable ? c : 0;
}

// On the connection, or to its core when another core owns it.
void Dataplane::enqueue(Core& k, std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& w,
                        const std::uint8_t* payload) {
  if (owns_conn(k, conn)) return k.transport->enqueue(peer, conn, w, payload);
  ++k.stats.handoffs;
  auto* m = new CoreMsg{CoreMsg::Kind::kRecord};
  m->peer = peer;
  m->conn = conn;
  m->rec = w;
  m->bytes.assign(payload, payload + std::size_t(w.primary_len) + w.overflow_len);
  hand_over(k, m);
}

}  // namespace gossamer::dataplane
