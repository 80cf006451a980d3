// FLOCK's schedulers on the dataplane's connections (papers 002 §3.4;
// scheduler.hpp has the pure decisions).
#include <algorithm>

#include "dataplane.hpp"

namespace gossamer::dataplane {

namespace {
// Both schedulers weigh load over about this long (issue 17): the QP
// scheduler each sender's utilization (SmoothedUtilization), the thread
// scheduler each thread's bytes and slots. Long enough to hold many credit
// renewals and round trips, short enough to follow a change in load within
// a fraction of a second.
constexpr std::uint64_t kLoadWindowUs = 64'000;
}  // namespace

std::uint32_t Dataplane::load_window() const {
  return std::uint32_t(std::max<std::uint64_t>(2, kLoadWindowUs / cfg_.connections.scheduler_interval_us));
}

// One decision per host, whatever the number of cores (issue 17 item 6).
// Each core applies the decision to the connections it owns, so a decision
// that core 0 applied at once and the other cores at their next interval
// mixed two decisions on a host (more than max_active_qps active). Now a
// decision goes out in phases (next_activation_phase: revocations, then
// grants); core 0 starts a phase only once every core acknowledged the
// last one, so the cores never hold more than two consecutive phases, and
// such a mix stays within the limit. A core publishes its counters when it
// applies a phase, before acknowledging it, so that the stats and metrics
// files (the other cores' published counters, core 0's own) never show a
// mix beyond that either. The decision itself has hysteresis: utilization
// over kLoadWindowUs, and incumbents keep their connections against small
// differences (assign_active_connections).
void Dataplane::decide_active() {
  const std::uint32_t window = load_window();
  std::vector<SenderLoad> loads;
  std::vector<std::uint32_t> senders;
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    SenderLoad l;
    l.connections = conns_per_host_;
    // At least 1 for a sender that sent data but renewed no credit (short
    // intervals see few renewals), once per peer.
    std::uint64_t u = p.utilization.exchange(0, std::memory_order_relaxed);
    if (p.sent_data.exchange(false, std::memory_order_relaxed)) u = std::max<std::uint64_t>(u, 1);
    p.load.add(u, window);
    l.utilization = p.load.value();
    const bool heard = cores_[0]->transport->peer_boot(h) != 0;  // connection 0 is ours (core 0)
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
    auto goal = assign_active_connections(loads, cfg_.connections.max_active_qps, schedule_rotation_++, &granted);
    if (goal == granted) return;
    activation_goal_ = std::move(goal);
  }
  std::vector<std::uint32_t> next;
  if (next_activation_phase(granted, activation_goal_, &next)) activation_goal_.clear();
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
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) k.transport->set_inbound_active(h, j, j < active);
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
    bool data = false;
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      bool d = false;
      u += k.transport->take_utilization(h, j, &d);
      data |= d;
    }
    if (u) p.utilization.fetch_add(u, std::memory_order_relaxed);
    if (data) p.sent_data.store(true, std::memory_order_relaxed);
  }
  if (k.index == 0) decide_active();
  apply_activation(k);
  // Again every interval: a peer's restart resets its connections.
  for (std::uint32_t h = 0; h < hosts_ && !k.active_applied.empty(); ++h) {
    if (h == self_) continue;
    const std::uint32_t active = k.active_applied[h];
    if (active == UINT32_MAX) continue;  // no decision yet
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      k.transport->set_inbound_active(h, j, j < active);
      k.transport->remind_activation(h, j);
    }
  }

  const std::uint64_t window = load_window();
  // Sender side: this core's threads over this core's usable connections
  // to each peer (Algorithm 1), all applications together (they share the
  // connections). With none usable, connection 0 (core 0's) carries them.
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    std::vector<std::uint32_t> usable;
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      const bool u = k.transport->usable(h, j);
      if (u) usable.push_back(j);
      // For the other cores' routing (doorbells.cpp); UDP also at every pump.
      if (u != p.usable[j].load(std::memory_order_relaxed)) p.usable[j].store(u, std::memory_order_relaxed);
    }
    std::vector<ThreadLoad> threads;
    std::vector<App::Flow*> flows;
    std::vector<std::uint32_t> current;
    std::uint64_t bytes = 0;
    for (App* a : *k.apps)
      for (std::uint32_t i = k.index; i < a->local; i += ncores_) {
        App::Flow& f = a->flow(h, i);
        threads.push_back({f.size.median(), f.slots, f.bytes});
        flows.push_back(&f);
        current.push_back(f.get_conn());
        bytes += f.bytes;
      }
    if (bytes > 0 && cfg_.connections.thread_scheduler) {  // an idle interval changes nothing
      const auto to = assign_threads(threads, usable, &current);  // stays unless clearly worse
      for (std::size_t t = 0; t < flows.size(); ++t) {
        if (flows[t]->get_conn() != to[t]) ++k.stats.thread_moves;
        flows[t]->set_conn(std::uint8_t(to[t]));
      }
    }
    // Algorithm 1 looks at the interval since the last scheduling. Our
    // intervals are short (a thread sending 8 KiB round trips may send none
    // in one), so the counts decay instead of starting from zero: by
    // 1/window per interval, over about kLoadWindowUs (by half until issue
    // 17: too little history for assign_threads' hysteresis to compare),
    // and the median is over the thread's last slots, whenever they went.
    for (App::Flow* f : flows) {
      f->bytes -= (f->bytes + window - 1) / window;
      f->slots -= (f->slots + window - 1) / window;
    }
    // What waits on a connection the peer no longer takes from us moves to
    // connection 0, whole slots at a time (Connection::take_pending).
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      if (j == 0 || k.transport->usable(h, j) || !k.transport->has_pending(h, j)) continue;
      k.moved.clear();
      k.transport->take_pending(h, j, &k.moved);
      if (k.index == 0) {
        k.transport->enqueue_records(h, 0, k.moved.data(), k.moved.size());
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
