// The dataplane's loop, run by every polling core over what it owns
// (dataplane.hpp): application doorbells -> connections -> the port, and the
// port -> connections -> application slots. Adaptive (spin, then sleep on
// the applications' eventfds with a timeout that keeps the NIC and the
// retransmission timers served). NIC frames do not wake a sleep (the vdevs
// we run on have no rx interrupts), so the timeout grows with the time since
// the last work: tens of microseconds right after traffic, when a reply is
// likely, up to a millisecond on an idle host.
#include "dataplane.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_ring.h>
#include <spdlog/spdlog.h>

namespace gossamer::dataplane {

namespace {
// Short: on a machine with fewer cores than pollers (our 2-core test hosts run
// two dataplanes and two applications), spinning delays the very processes
// that would produce the work. Measured with tools/bench/echo-rack: spin 2000
// and yield 200 gave 2.0 k requests/s with one outstanding and 105 k with 64;
// 20 and 20 give 15 k and 480 k.
constexpr std::uint32_t kSpin = 20, kYield = 20;
constexpr std::uint64_t kMinSleepNs = 20'000, kMaxSleepNs = 1'000'000;
// Sleep for this fraction of the time since the last work: a quiet host backs
// off to kMaxSleepNs within ~8 ms; a busy one wakes often enough that a frame
// waits for at most about 1/8 of the gap it arrived after.
constexpr std::uint64_t kSleepShift = 3;


}  // namespace

void Dataplane::read_faults(Core& k) {
  std::ifstream in(socket_path_ + ".faults");
  std::string text;
  if (in) std::getline(in, text);
  if (text == k.faults_text) return;
  k.faults_text = text;
  Faults f;
  std::istringstream words(text);
  std::string key, value;
  while (words >> key) {
    double* slot = key == "loss" ? &f.loss : key == "duplicate" ? &f.duplicate : key == "reorder" ? &f.reorder : nullptr;
    if (!slot || !(words >> value) || value.empty() || value.back() != '%') {
      if (k.index == 0)
        spdlog::warn("faults file: cannot use '{}' (supported: loss N%, duplicate N%, reorder N%)", text);
      f = Faults{};
      break;
    }
    *slot = std::strtod(value.c_str(), nullptr) / 100.0;
  }
  k.faults = f;
  if (k.index == 0)
    spdlog::info("fault injection on received frames: loss {}%, duplicate {}%, reorder {}%", f.loss * 100,
                 f.duplicate * 100, f.reorder * 100);
}

void Dataplane::sleep_until_work(Core& k, std::uint64_t now) {
  // Applications see a non-zero word while any core sleeps, and kick
  // (their eventfd wakes every core).
  const std::uint32_t bit = 1u << (k.index % 32);
  for (App* a : *k.apps) std::atomic_ref<std::uint32_t>(*a->sleeping()).fetch_or(bit, std::memory_order_seq_cst);
  k.sleeping.store(true, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // Dekker with dispatch() and post()
  std::uint64_t deadline = UINT64_MAX;
  for (std::uint32_t h = 0; h < hosts_; ++h)
    for (std::uint32_t j = k.index; h != self_ && j < conns_per_host_; j += ncores_)
      deadline = std::min(deadline, peers_[h].conns[j]->next_deadline());
  std::uint64_t since_work = now - k.last_work;
  std::uint64_t timeout_ns =
      since_work >= tsc_hz_ ? kMaxSleepNs
                            : std::clamp<std::uint64_t>((since_work * 1'000'000'000ull / tsc_hz_) >> kSleepShift, kMinSleepNs,
                                         kMaxSleepNs);
  if (deadline <= now) {
    timeout_ns = 0;
  } else if (deadline != UINT64_MAX) {
    timeout_ns = std::min<std::uint64_t>(timeout_ns, (deadline - now) * 1'000'000'000ull / tsc_hz_ + 1);
  }
  if (timeout_ns && !any_doorbell(k) && rte_ring_empty(k.frames) && rte_ring_empty(k.msgs)) {
    epoll_event evs[16];
    timespec ts{time_t(timeout_ns / 1'000'000'000ull), long(timeout_ns % 1'000'000'000ull)};
    ::epoll_pwait2(k.epoll_fd, evs, 16, &ts, nullptr);
  }
  k.sleeping.store(false, std::memory_order_relaxed);
  std::uint64_t buf;
  (void)!::read(k.wake_fd, &buf, sizeof buf);
  for (App* a : *k.apps) std::atomic_ref<std::uint32_t>(*a->sleeping()).fetch_and(~bit, std::memory_order_relaxed);
}

void Dataplane::run(const std::atomic<bool>& stop) {
  for (std::size_t i = 1; i < cores_.size(); ++i) {
    Core& k = *cores_[i];
    k.thread = std::thread([this, &k, &stop] {
      if (rte_thread_register() != 0)
        spdlog::warn("core {}: rte_thread_register: {} (mbufs without a per-core cache)", k.index,
                     rte_strerror(rte_errno));
      core_loop(k, stop);
      rte_thread_unregister();
    });
  }
  core_loop(*cores_[0], stop);
  for (std::size_t i = 1; i < cores_.size(); ++i) cores_[i]->thread.join();
  write_stats();
  write_metrics();
}

// One polling core. Core 0 also serves the sockets, frees what no core
// uses any more, and writes the stats and metrics files.
void Dataplane::core_loop(Core& k, const std::atomic<bool>& stop) {
  // The default 50 us timer slack would swallow the short sleeps.
  ::prctl(PR_SET_TIMERSLACK, 5'000UL);
  const bool control = k.index == 0;
  std::uint32_t idle = 0;
  std::uint64_t last = rte_rdtsc();
  std::uint32_t iter = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    refresh_apps(k);                  // the application list (generation)
    bool worked = poll_rx(k);         // our NIC queue: process, or steer to the owner
    worked |= poll_steered(k);        // frames other queues received for our connections
    worked |= poll_msgs(k);           // records and control from other cores
    worked |= poll_doorbells(k);      // our threads' rings -> connections
    worked |= pump(k);                // our connections -> our tx queue
    if (k.backlogged) flush_backlog(k);
    if (control && ((++iter & 63) == 0 || idle >= kSpin)) {
      // Sockets: new applications, detaches, deaths.
      accept_apps();
      for (std::size_t i = 0; i < apps_.size(); ++i) app_message(*apps_[i]);
      sweep_apps();
      free_retired(false);
    }
    std::uint64_t now = rte_rdtsc();
    (worked ? k.stats.busy_cycles : k.stats.idle_cycles) += now - last;
    last = now;
    if (now - k.last_schedule > tsc_hz_ / 1'000'000 * cfg_.connections.scheduler_interval_us) {
      schedule(k);
      k.last_schedule = now;
    }
    if (now - k.last_publish > tsc_hz_ / 1000 * abi::kMetricsPeriodMs) {
      publish(k);
      k.last_publish = now;
    }
    if (now - k.last_faults > tsc_hz_) {
      read_faults(k);
      k.last_faults = now;
    }
    if (control && now - last_metrics_write_ > tsc_hz_ / 1000 * abi::kMetricsPeriodMs) {
      write_metrics();
      last_metrics_write_ = now;
    }
    if (control && now - last_stats_write_ > tsc_hz_) {
      write_stats();
      last_stats_write_ = now;
    }
    if (worked) {
      idle = 0;
      k.last_work = now;
      continue;
    }
    ++idle;
    if (cfg_.dataplane.polling == config::Polling::busy || idle < kSpin) {
      rte_pause();
    } else if (idle < kSpin + kYield) {
      ::sched_yield();
    } else {
      sleep_until_work(k, now);
      idle = kSpin;  // after a sleep: check sockets, then sleep again soon
    }
    std::uint64_t after = rte_rdtsc();
    k.stats.idle_cycles += after - last;
    last = after;
  }
  flush_tx(k);
  publish(k);
}

}  // namespace gossamer::dataplane
