// Between the polling cores (dataplane.hpp): rings of messages, the
// application list every core reads, and the counters each core publishes
// for core 0's stats and metrics files.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "dataplane.hpp"
#include "shm_access.hpp"
#include "udp_transport.hpp"

namespace gossamer::dataplane {

namespace {

constexpr unsigned kRingSize = 4096;  // frames or messages in flight to one core
constexpr unsigned kMsgBurst = 32;

// Whole-word copies, each an atomic access: one side of a sequence lock.
void store_words(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<std::uint64_t*>(dst);
  const auto* s = static_cast<const std::uint64_t*>(src);
  for (std::size_t i = 0; i < bytes / 8; ++i) __atomic_store_n(d + i, s[i], __ATOMIC_RELAXED);
}
void load_words(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<std::uint64_t*>(dst);
  const auto* s = static_cast<const std::uint64_t*>(const_cast<void*>(src));
  for (std::size_t i = 0; i < bytes / 8; ++i) d[i] = __atomic_load_n(s + i, __ATOMIC_RELAXED);
}

}  // namespace

void Dataplane::wake(Core& k) {
  fence(std::memory_order_seq_cst);  // Dekker with sleep_until_work
  if (k.sleeping.load(std::memory_order_relaxed)) {
    std::uint64_t one = 1;
    (void)!::write(k.wake_fd, &one, sizeof one);
  }
}

std::string Dataplane::make_cores() {
  if (ncores_ > abi::kMetricsCores)
    return "dataplane.cores is " + std::to_string(ncores_) + "; this build polls with at most " +
           std::to_string(abi::kMetricsCores) + " cores";
  for (std::uint32_t i = 0; i < ncores_; ++i) {
    auto k = std::make_unique<Core>();
    k->index = i;
    k->frames = std::make_unique<MpscRing>(kRingSize);
    k->msgs = std::make_unique<MpscRing>(kRingSize);
    k->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    k->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (k->epoll_fd < 0 || k->wake_fd < 0) {
      cores_.push_back(std::move(k));
      return "cannot create the epoll and eventfd of core " + std::to_string(i) + ": " + std::strerror(errno);
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kTagWake;
    ::epoll_ctl(k->epoll_fd, EPOLL_CTL_ADD, k->wake_fd, &ev);
    // Frames on any port wake the core's sleep: each port's descriptor
    // (none if a port has none: then the core wakes on timers to look).
    // Edge-triggered: a frame queued on one wakes a sleep; a full buffer
    // (it is read only when armed) does not keep every sleep short.
    const std::vector<int> fds = port_->rx_wake_fds(std::uint16_t(i));
    k->rx_wakeable = !fds.empty();
    for (int fd : fds) {
      ev.events = EPOLLIN | EPOLLET;
      ev.data.u64 = kTagRxWake;
      if (::epoll_ctl(k->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) k->rx_wakeable = false;
    }
    k->backlog.resize(ncores_);
    for (const Peer& p : peers_) {
      k->macs.push_back(p.mac);
      k->mac_known.push_back(p.mac_known);
    }
    k->resets_seen.assign(hosts_, std::vector<std::uint64_t>(conns_per_host_, 0));
    k->pub_conns.resize(std::size_t(hosts_) * conns_per_host_);
    if (verbs_mode_) {
      if (std::string e = make_verbs_transport(*k); !e.empty()) {
        cores_.push_back(std::move(k));
        return e;
      }
    } else {
      k->transport = std::make_unique<UdpTransport>(*this, *k);
    }
    k->sink = std::make_unique<CoreSink>(*this, *k);
    cores_.push_back(std::move(k));
  }
  auto* list = new AppList;
  app_list_.store(list);
  for (auto& k : cores_) k->apps = list;
  return "";
}

// ---- messages ------------------------------------------------------------------

// In order per pair of cores: a message waits behind earlier ones that
// found the ring full.
void Dataplane::post(Core& from, std::uint32_t to, CoreMsg* m) {
  Core& dst = *cores_[to];
  if (!from.backlog[to].empty() || !dst.msgs->push(m)) {
    from.backlog[to].push_back(m);
    from.backlogged = true;
    return;
  }
  wake(dst);
}

void Dataplane::hand_over(Core& from, CoreMsg* m) {
  m->boot = peers_[m->peer].boot_seen.load(std::memory_order_acquire);
  post(from, conn_owner(m->conn), m);
}

void Dataplane::flush_backlog(Core& from) {
  bool left = false;
  for (std::uint32_t to = 0; to < ncores_; ++to) {
    auto& q = from.backlog[to];
    bool sent = false;
    while (!q.empty() && cores_[to]->msgs->push(q.front())) {
      q.pop_front();
      sent = true;
    }
    if (sent) wake(*cores_[to]);
    left |= !q.empty();
  }
  from.backlogged = left;
}

bool Dataplane::poll_msgs(Core& k) {
  void* msgs[kMsgBurst];
  const std::size_t n = k.msgs->pop_burst(msgs, kMsgBurst);
  for (std::size_t i = 0; i < n; ++i) {
    auto* m = static_cast<CoreMsg*>(msgs[i]);
    handle(k, *m);
    delete m;
  }
  return n != 0;
}

void Dataplane::handle(Core& k, CoreMsg& m) {
  switch (m.kind) {
    case CoreMsg::Kind::kRecord:
    case CoreMsg::Kind::kRecords:
      if (m.boot != peers_[m.peer].boot_seen.load(std::memory_order_acquire)) {
        ++k.stats.records_rejected;  // for the peer's previous incarnation
      } else if (m.kind == CoreMsg::Kind::kRecord) {
        k.transport->enqueue(m.peer, m.conn, m.rec, m.bytes.data());
      } else {
        k.transport->enqueue_records(m.peer, 0, m.bytes.data(), m.bytes.size());
      }
      break;
    case CoreMsg::Kind::kRestart:
      k.transport->peer_restarted(m.peer, m.boot);
      if (k.index == 0) control_restart(m.peer, m.boot);
      break;
    case CoreMsg::Kind::kDrain: {
      // The records go before the answer: to core 0 on the same ring, to
      // the other cores ahead of any later doorbell.
      drain_doorbells(k, *m.app);
      auto* done = new CoreMsg{CoreMsg::Kind::kDrained};
      done->app = m.app;
      post(k, 0, done);
      break;
    }
    case CoreMsg::Kind::kVerbsRemote:
      verbs_remote(k, m);
      break;
    case CoreMsg::Kind::kLinkFailed:
      link_failed(k, m.peer, m.boot, std::string(m.bytes.begin(), m.bytes.end()));
      break;
    case CoreMsg::Kind::kDrained:
      // Still in apps_: sweep_apps() keeps an application while drains run.
      if (m.app->drains_pending && --m.app->drains_pending == 0 && !m.app->bad) detached(*m.app);
      control_ready_ = true;  // core 0: sweep it out at once
      break;
  }
}

// ---- the application list ----------------------------------------------------------
//
// Core 0 publishes a new list on every attach and detach, with a new
// generation; a core that starts an iteration with generation g holds no
// older list nor any application missing from g's. What a list change
// retired is freed once every core has moved past its generation.

void Dataplane::refresh_apps(Core& k) {
  const std::uint64_t g = app_gen_.load(std::memory_order_acquire);
  k.apps = app_list_.load(std::memory_order_acquire);
  k.seen_gen.store(g, std::memory_order_release);
}

void Dataplane::publish_apps() {
  auto* list = new AppList;
  for (auto& a : apps_) list->push_back(a.get());
  const AppList* old = app_list_.exchange(list, std::memory_order_acq_rel);
  const std::uint64_t g = app_gen_.load(std::memory_order_relaxed) + 1;
  app_gen_.store(g, std::memory_order_release);
  retired_.push_back(Retired{g, nullptr, std::unique_ptr<const AppList>(old)});
  Core& k0 = *cores_[0];  // core 0 (here) uses the new list at once
  k0.apps = list;
  k0.seen_gen.store(g, std::memory_order_release);
  // A core asleep on the old list set its bit only in the old list's
  // applications: a new one's threads would not kick it.
  for (std::size_t i = 1; i < cores_.size(); ++i) wake(*cores_[i]);
}

void Dataplane::free_retired(bool all) {
  std::uint64_t oldest = UINT64_MAX;
  for (auto& k : cores_) oldest = std::min(oldest, k->seen_gen.load(std::memory_order_acquire));
  std::size_t kept = 0;
  for (auto& r : retired_) {
    if (all || r.gen <= oldest) {
      if (r.app) release(*r.app);
      continue;
    }
    retired_[kept++] = std::move(r);
  }
  retired_.resize(kept);
}

// ---- counters ------------------------------------------------------------------------

void Dataplane::publish(Core& k) {
  k.stats.injected_loss = k.stats.injected_duplicates = k.stats.injected_reorders = 0;
  for (const FaultPort* fp : faults_) {
    const FaultPort::Counters& f = fp->counters(std::uint16_t(k.index));
    k.stats.injected_loss += f.loss;
    k.stats.injected_duplicates += f.duplicates;
    k.stats.injected_reorders += f.reorders;
  }
  publish_verbs_totals(k);
  std::uint64_t s0 = k.pub_seq.load(std::memory_order_relaxed);
  k.pub_seq.store(s0 + 1, std::memory_order_relaxed);
  fence(std::memory_order_release);
  store_words(&k.pub_stats, &k.stats, sizeof(Stats));
  abi::ConnCounters c;
  for (std::uint32_t h = 0; h < hosts_; ++h)
    for (std::uint32_t j = k.index; h != self_ && j < conns_per_host_; j += ncores_) {
      c = abi::ConnCounters{};
      k.transport->counters(h, j, &c);
      store_words(&k.pub_conns[std::size_t(h) * conns_per_host_ + j], &c, sizeof c);
    }
  k.pub_seq.store(s0 + 2, std::memory_order_release);
}

bool Dataplane::read_published(const Core& k, Stats* stats, std::vector<abi::ConnCounters>* conns) {
  for (int tries = 0; tries < 1000; ++tries) {
    const std::uint64_t s0 = k.pub_seq.load(std::memory_order_acquire);
    if (s0 & 1) {
      if (tries > 100) ::sched_yield();  // its writer may have lost the CPU
      continue;
    }
    load_words(stats, &k.pub_stats, sizeof(Stats));
    for (std::uint32_t h = 0; h < hosts_; ++h)
      for (std::uint32_t j = k.index; h != self_ && j < conns_per_host_; j += ncores_) {
        const std::size_t at = std::size_t(h) * conns_per_host_ + j;
        load_words(&(*conns)[at], &k.pub_conns[at], sizeof(abi::ConnCounters));
      }
    fence(std::memory_order_acquire);
    if (k.pub_seq.load(std::memory_order_relaxed) == s0) return true;
  }
  return false;
}

void Dataplane::collect(Stats* total, std::vector<Stats>* per_core, std::vector<abi::ConnCounters>* conns) {
  publish(*cores_[0]);  // we are core 0
  *total = Stats{};
  per_core->assign(ncores_, Stats{});
  conns->assign(std::size_t(hosts_) * conns_per_host_, abi::ConnCounters{});
  for (std::uint32_t i = 0; i < ncores_; ++i) {
    if (!read_published(*cores_[i], &(*per_core)[i], conns))
      spdlog::warn("core {}: its counters kept changing while read; this sample may mix two", i);
    auto* t = reinterpret_cast<std::uint64_t*>(total);
    const auto* s = reinterpret_cast<const std::uint64_t*>(&(*per_core)[i]);
    for (std::size_t w = 0; w < sizeof(Stats) / 8; ++w) t[w] += s[w];
  }
}

}  // namespace gossamer::dataplane
