// FLOCK's schedulers on the dataplane's connections (papers 002 §3.4;
// scheduler.hpp has the pure decisions).
#include <algorithm>

#include "dataplane.hpp"

namespace gossamer::dataplane {

// One decision per host, whatever the number of cores (issue 17 item 6).
// Each core applies the decision to the connections it owns, at its own
// interval, so a decision that core 0 applied at once and the other cores
// later mixed two decisions on the host: more than max_active_qps active.
// Now a decision goes out in phases, each applied by every core before the
// next one starts: first the revocations (each peer keeps the smaller of
// its old and new count), then the grants (the new counts). A peer's active
// connections are a prefix (0..count-1), so whatever mix of two consecutive
// phases the cores hold, each peer has the larger of the two counts, which
// are both those of the phase with the larger sum (one phase is below the
// other for every peer): never over the limit. A core publishes its
// counters when it applies a phase, before acknowledging it, so that the
// stats and metrics files (the published counters of the other cores,
// core 0's own at the time) never show a mix either.
void Dataplane::decide_active() {
  std::vector<SenderLoad> loads;
  std::vector<std::uint32_t> senders;
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    SenderLoad l;
    l.connections = conns_per_host_;
    l.utilization = p.utilization.exchange(0, std::memory_order_relaxed);
    const bool heard = p.conns[0]->peer_boot() != 0;  // connection 0 is ours (core 0)
    // Not heard from yet: dormant (its connection 0); heard for the first
    // interval: a newcomer.
    l.known = !heard || p.intervals_heard > 0;
    if (heard) ++p.intervals_heard;
    loads.push_back(l);
    senders.push_back(h);
  }
  // The last phase has not reached every core yet: wait for it.
  const std::uint64_t epoch = activation_epoch_.load(std::memory_order_relaxed);
  for (const auto& k : cores_)
    if (k->activation_seen.load(std::memory_order_acquire) != epoch) return;
  // In force on every core: before any decision, connection 0 only.
  std::vector<std::uint32_t> granted(senders.size());
  for (std::size_t i = 0; i < senders.size(); ++i) {
    const std::uint32_t a = peers_[senders[i]].active.load(std::memory_order_relaxed);
    granted[i] = a == UINT32_MAX ? 1 : a;
  }
  if (activation_goal_.empty()) {
    auto goal = assign_active_connections(loads, cfg_.connections.max_active_qps, schedule_rotation_++);
    if (goal == granted) return;
    activation_goal_ = std::move(goal);
  }
  std::vector<std::uint32_t> next(senders.size());
  for (std::size_t i = 0; i < senders.size(); ++i) next[i] = std::min(granted[i], activation_goal_[i]);
  if (next == granted) {  // nothing (more) to revoke: grant
    next = std::move(activation_goal_);
    activation_goal_.clear();
  }
  for (std::size_t i = 0; i < senders.size(); ++i)
    peers_[senders[i]].active.store(next[i], std::memory_order_relaxed);
  activation_epoch_.store(epoch + 1, std::memory_order_release);
}

void Dataplane::apply_activation(Core& k) {
  const std::uint64_t epoch = activation_epoch_.load(std::memory_order_acquire);
  if (epoch == k.activation_seen.load(std::memory_order_relaxed)) return;
  if (k.active_applied.empty()) k.active_applied.assign(hosts_, UINT32_MAX);
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    const std::uint32_t active = peers_[h].active.load(std::memory_order_relaxed);
    k.active_applied[h] = active;
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) peers_[h].conns[j]->set_inbound_active(j < active);
  }
  publish(k);
  k.activation_seen.store(epoch, std::memory_order_release);
}

void Dataplane::schedule(Core& k) {
  // Receiver side: our peers' connections to us that this core owns.
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    std::uint64_t u = 0;
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) u += p.conns[j]->take_utilization();
    p.utilization.fetch_add(u, std::memory_order_relaxed);
  }
  if (k.index == 0) decide_active();
  apply_activation(k);
  // Again every interval: a peer's restart resets its connections.
  for (std::uint32_t h = 0; h < hosts_ && !k.active_applied.empty(); ++h) {
    if (h == self_) continue;
    const std::uint32_t active = k.active_applied[h];
    if (active == UINT32_MAX) continue;  // no decision yet
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      Connection& c = *peers_[h].conns[j];
      c.set_inbound_active(j < active);
      c.remind_activation();
    }
  }

  // Sender side: this core's threads over this core's usable connections
  // to each peer (Algorithm 1), all applications together (they share the
  // connections). With none usable, connection 0 (core 0's) carries them.
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    std::vector<std::uint32_t> usable;
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_)
      if (p.conns[j]->usable()) usable.push_back(j);
    std::vector<ThreadLoad> threads;
    std::vector<App::Flow*> flows;
    std::uint64_t bytes = 0;
    for (App* a : *k.apps)
      for (std::uint32_t i = k.index; i < a->local; i += ncores_) {
        App::Flow& f = a->flow(h, i);
        threads.push_back({f.size.median(), f.slots, f.bytes});
        flows.push_back(&f);
        bytes += f.bytes;
      }
    if (bytes > 0 && cfg_.connections.thread_scheduler) {  // an idle interval changes nothing
      const auto to = assign_threads(threads, usable);
      for (std::size_t t = 0; t < flows.size(); ++t) {
        if (flows[t]->get_conn() != to[t]) ++k.stats.thread_moves;
        flows[t]->set_conn(std::uint8_t(to[t]));
      }
    }
    // Algorithm 1 looks at the interval since the last scheduling. Our
    // intervals are short (a thread sending 8 KiB round trips may send none
    // in one), so the counts decay by half instead of starting from zero,
    // and the median is over the thread's last slots, whenever they went.
    for (App::Flow* f : flows) f->bytes /= 2, f->slots /= 2;
    // What waits on a connection the peer no longer takes from us moves to
    // connection 0, whole slots at a time (Connection::take_pending).
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      Connection& c = *p.conns[j];
      if (j == 0 || c.usable() || !c.has_pending()) continue;
      k.moved.clear();
      c.take_pending(&k.moved);
      if (k.index == 0) {
        p.conns[0]->enqueue_records(k.moved.data(), k.moved.size());
      } else {
        auto* m = new CoreMsg{CoreMsg::Kind::kRecords};  // conn 0
        m->peer = h;
        m->bytes = k.moved;
        hand_over(k, m);
      }
    }
  }
}

}  // namespace gossamer::dataplane
