// The dataplane's loop, run by every polling core over what it owns
// (dataplane.hpp; "How a frame flows" in dataplane/README.md). Adaptive:
// spin a few rounds, then sleep on the core's epoll set (the applications'
// eventfds, the core's own eventfd, on core 0 the sockets, and the port's
// wake descriptor when it has one) with a timeout that keeps the
// retransmission timers served. Where frames can wake a sleep (af_packet:
// a wake socket, rx_wake.hpp; af_xdp: the XDP program, xdp_wake.hpp), the
// core arms that before every sleep and looks at its queue once more, so
// the peer's next frame ends the sleep at once. The timeout grows with the
// time since the last work: tens of microseconds right after traffic up to
// a millisecond (a core with nothing to do may be waiting for another
// core's periodic job, the QP scheduler, which no frame announces); once
// the whole host has been quiet for 100 ms, only the timers and the
// periodic jobs bound an armed sleep (at most 50 ms). An iteration that
// finds no work makes no system call but the sleep (and draining the wake
// socket before it).
#include "dataplane.hpp"
#include "shm_access.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <spdlog/spdlog.h>

#include "clock.hpp"

namespace gossamer::dataplane {

namespace {
// Idle passes before an adaptive core yields (or sleeps): one. On a machine
// with fewer cores than pollers (our 2-core test hosts run two dataplanes
// and two applications) spinning delays the very processes that would
// produce the work; 40 passes of `pause` (1-2 us) held the CPU from the
// application whose doorbell or answer was next. With the yield at the
// first idle pass a 2-host memif echo rack ran at 1.00-1.56 M requests/s
// against 0.77-1.28 M spinning 40, one request at a time at a p50 of
// 12.6-14.3 us against 17.9-27.1 (dataplane/POLLING.md, "The dataplane's
// spin"). A core with a CPU of its own should poll (`polling: busy`).
constexpr std::uint32_t kSpin = 1;
constexpr std::uint64_t kMinSleepNs = 20'000, kMaxSleepNs = 1'000'000;
// When frames wake a sleep (the port's wake descriptor is armed) and the
// whole host found no work for kQuietUs, only the timers bound it, and the
// periodic jobs (metrics, stats) at this. While traffic is recent, a core
// with nothing to do may be waiting for another core's periodic job (the QP
// scheduler), and keeps the short timeouts even when armed.
constexpr std::uint64_t kMaxWakeableSleepNs = 50'000'000, kQuietUs = 100'000;
// Sleep for this fraction of the time since the last work: a quiet host backs
// off to kMaxSleepNs within ~8 ms; a busy one wakes often enough that a frame
// waits for at most about 1/8 of the gap it arrived after.
constexpr std::uint64_t kSleepShift = 3;
// For dataplane.yield_us (default 2000) after its last traffic (frames of
// ours, records, doorbells: not gossamerd's frames on a shared port) a core
// that finds nothing yields the CPU instead of sleeping. Under load the gaps
// between requests are far shorter, so a loaded core never sleeps: no
// timer, no wake-up IPI, and the applications need not write its eventfd
// for every doorbell. On a machine with fewer cores than pollers a sleep
// costs a round trip its wake-up: a 2-host Hydra rack (redis-benchmark
// -P 16, 2 x 25 clients, 2 CPUs) ran at 232-242 k SET/s sleeping against
// 551-576 k before sleeps came in (build 0d3f75c), and 501-563 k yielding
// 2 ms (same run, quiet). A trickle of traffic keeps a core yielding for
// that long after each request, then it sleeps as before: the idle cost
// (rack-idle) does not change. Yielding has a price where bursts come
// further apart than the window (SSSP's rounds, every ~1.4 ms): the
// yielding cores take CPU from the processes that would produce the next
// burst. 50 us kept Hydra's cores awake and gave SSSP most of what
// sleeping at once gained it (dataplane/POLLING.md).
// After a sleep, the periodic jobs (the QP scheduler, counters, metrics and
// stats files, the control job) wait up to this long while an exchange is
// open, i.e. while a request that woke a core, or its response, is on its
// way: all of them fell due during a long sleep, and run in one go of up to
// ~100 us on a cold core (the QP scheduler's activations also sent an ack
// frame per connection at once), in front of the response (idle-trace, in
// dataplane/README.md "Sleeping"). They run as soon as the exchange closes.
constexpr std::uint64_t kJobsWaitUs = 1'000;
}  // namespace

void Dataplane::run(const std::atomic<bool>& stop) {
  // Before core 0 is placed: the writer inherits the main thread's CPUs,
  // the whole mask unless dataplane.eal_args pinned the main thread (-l,
  // -c, --lcores: then it shares core 0's CPU), and at nice 10 yields to
  // the polling cores where they share a CPU.
  files_.start([] {
    ::pthread_setname_np(::pthread_self(), "gsm-files");
    ::setpriority(PRIO_PROCESS, ::gettid(), 10);
  });
  for (std::size_t i = 1; i < cores_.size(); ++i) {
    Core& k = *cores_[i];
    k.thread = std::thread([this, &k, &stop] {
      place(k);
      port_->thread_started(k.index);
      core_loop(k, stop);
      port_->thread_stopped(k.index);
    });
  }
  place(*cores_[0]);
  core_loop(*cores_[0], stop);
  for (std::size_t i = 1; i < cores_.size(); ++i) cores_[i]->thread.join();
  files_.stop();  // the last stats below are written here, before run() returns
  sweep_apps();  // detaches confirmed since the last control job count in the last stats
  write_stats();
  write_metrics();
}

// Moves the calling thread to core k's CPUs (dataplane.cpus, else the whole
// affinity mask the process started with: the EAL pinned the main thread to
// one CPU, and threads inherit that).
void Dataplane::place(Core& k) {
  if (std::string err = cpu_plan_.apply(k.index); !err.empty()) spdlog::warn("{}", err);
  else spdlog::info("polling core {} runs on {}", k.index, cpu_plan_.describe(k.index));
  k.stats.cpu = std::uint64_t(::sched_getcpu());
}

// One polling core. Core 0 also runs the control stage and writes the
// stats and metrics files.
void Dataplane::core_loop(Core& k, const std::atomic<bool>& stop) {
  ::prctl(PR_SET_TIMERSLACK, 5'000UL);  // the default 50 us would swallow the short sleeps
  const std::uint64_t ms = tsc_hz_ / 1000;
  k.periodic = {{"schedule", tsc_hz_ / 1'000'000 * cfg_.connections.scheduler_interval_us, 0, &Dataplane::schedule},
                {"publish", ms * abi::kMetricsPeriodMs, 0, &Dataplane::publish}};
  if (k.index == 0)
    k.periodic.insert(k.periodic.end(), {{"control", ms, 0, &Dataplane::job_control},
                                         {"faults", 1000 * ms, 0, &Dataplane::job_faults},
                                         {"port", 1000 * ms, 0, &Dataplane::job_port},
                                         {"metrics", ms * abi::kMetricsPeriodMs, 0, &Dataplane::job_metrics},
                                         {"stats", 1000 * ms, 0, &Dataplane::job_stats}});
  if (k.index == 0 && verbs_mode_) k.periodic.push_back({"verbs", 20 * ms, 0, &Dataplane::job_verbs});
  std::uint32_t idle = 0;
  std::uint64_t last = tsc_now();
  while (!stop.load(std::memory_order_relaxed)) {
    refresh_apps(k);                          // the application list core 0 published
    // Each stage's cycles count while it finds work (stage costs: the
    // deliver stage, timed by the sink, is taken out of rx).
    const std::uint64_t t_rx = tsc_now(), delivering = k.stats.stage_deliver_cycles;
    const std::uint64_t processed = k.stats.frames_processed;
    bool worked = k.transport->poll(*k.sink); // frames -> connections -> deliver (slots, announces)
    const std::uint64_t t_msgs = tsc_now();
    if (worked) k.stats.stage_rx_cycles += t_msgs - t_rx - (k.stats.stage_deliver_cycles - delivering);
    const bool posted = poll_msgs(k);         // records and control from other cores
    worked |= posted;
    const std::uint64_t t_doorbells = tsc_now();
    const bool rang = poll_doorbells(k);      // our threads' rings -> connections
    const std::uint64_t t_tx = tsc_now();
    if (rang) k.stats.stage_doorbells_cycles += t_tx - t_doorbells;
    const bool sent = k.transport->pump();    // our connections -> frames: data, timers, acks
    std::uint64_t now = tsc_now();
    if (sent) k.stats.stage_tx_cycles += now - t_tx;
    worked |= rang | sent;
    if (k.backlogged || (k.index == 0 && control_ready_)) {
      if (k.backlogged) flush_backlog(k);     // messages that found another core's ring full
      if (k.index == 0 && control_ready_) worked |= poll_control(k);  // core 0: sockets epoll reported
      now = tsc_now();
    }
    (worked ? k.stats.busy_cycles : k.stats.idle_cycles) += now - last;
    last = now;
    if (now >= k.jobs_wait_until || !exchange_open()) {
      run_periodic(k, now);                   // schedulers, publish, control, faults, metrics, stats
      k.jobs_looked = true;
    }
    if (worked) {
      idle = 0;
      // The host is not quiet while frames of ours, records or doorbells
      // move (other frames the port shows us, such as gossamerd's TCP on a
      // shared interface, do not count). Stored once a millisecond at most.
      if (k.stats.frames_processed != processed || posted || rang || sent) {
        k.last_traffic = now;
        if (now - k.any_stored > tsc_hz_ / 1000) {
          last_work_any_.store(now, std::memory_order_relaxed);
          k.any_stored = now;
        }
      }
      k.last_work = now;
      k.rx_armed = false;  // work came in the look after arming: arm again before the next sleep
      continue;
    }
    if (++idle < kSpin || cfg_.dataplane.polling == config::Polling::busy) {
      cpu_relax();                            // spin a little: work often comes right back
    } else {
      sleep_until_work(k, now);               // until a kick, a post, a socket or a timer
      idle = kSpin - 1;                       // after a sleep: look once more (the next pass), then sleep again
    }
    now = tsc_now();
    k.stats.idle_cycles += now - last;
    last = now;
  }
  publish(k);
}

bool Dataplane::exchange_open() const {
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_ && peers_[h].exchanges() > 0) return true;
  return false;
}

void Dataplane::run_periodic(Core& k, std::uint64_t now) {
  for (Periodic& p : k.periodic)
    if (now - p.last > p.period) {
      (this->*p.fn)(k);
      p.last = now;
    }
}

// Core 0, every millisecond: while it does not sleep (its sleep watches the
// sockets), look at them anyway; then the applications that went bad, and
// memory no core uses any more.
void Dataplane::job_control(Core&) {
  if (!slept_) control_ready_ = true;
  slept_ = false;
  expire_attaches(tsc_now());
  sweep_apps();
  free_retired(false);
}

// Fault injection for kernels without netem (rack in a box): a file next
// to the socket with a netem-style spec, e.g. "loss 2% reorder 10%
// duplicate 2%", applied to received frames by the port (port_faults.hpp).
void Dataplane::job_faults(Core&) {
  std::ifstream in(socket_path_ + ".faults");
  std::string text;
  if (in) std::getline(in, text);
  if (text == faults_text_) return;
  faults_text_ = text;
  FaultSpec f;
  if (std::string err = parse_faults(text, &f); !err.empty()) spdlog::warn("faults file: {}", err);
  for (FaultPort* fp : faults_) fp->set(f);
  spdlog::info("fault injection on received frames: loss {}%, duplicate {}%, reorder {}%", f.loss * 100,
               f.duplicate * 100, f.reorder * 100);
}

void Dataplane::job_port(Core&) { port_->maintain(); }
void Dataplane::job_metrics(Core&) { write_metrics(); }
void Dataplane::job_stats(Core&) { write_stats(); }

void Dataplane::sleep_until_work(Core& k, std::uint64_t now) {
  if (now - k.last_traffic < tsc_hz_ / 1'000'000 * cfg_.dataplane.yield_us) {
    ::sched_yield();
    return;
  }
  const std::uint16_t q = std::uint16_t(k.index);
  // Another core may have stored a time later than our `now`: not quiet.
  const std::uint64_t any = last_work_any_.load(std::memory_order_relaxed);
  const bool quiet = now > any && now - any > tsc_hz_ / 1'000'000 * kQuietUs;
  if (k.rx_wakeable && !k.rx_armed && port_->rx_wake_arm(q, quiet)) {
    // Armed: the loop looks at the queue once more before the sleep. A
    // frame that came before arming is found there, one after wakes us.
    k.rx_armed = true;
    return;
  }
  // Applications see a non-zero word while any core sleeps, and kick
  // (their eventfd wakes every core).
  const std::uint32_t bit = 1u << (k.index % 32);
  for (App* a : *k.apps) std::atomic_ref<std::uint32_t>(*a->sleeping()).fetch_or(bit, std::memory_order_seq_cst);
  k.sleeping.store(true, std::memory_order_seq_cst);
  fence(std::memory_order_seq_cst);  // Dekker with wake()
  const std::uint64_t deadline = std::min(k.transport->next_deadline(), port_->rx_due(q));
  const std::uint64_t since_work = now - k.last_work;
  // Long only when frames wake us and the host is quiet; else it grows with
  // the time since our last work, up to a millisecond.
  std::uint64_t timeout_ns =
      k.rx_armed && quiet ? kMaxWakeableSleepNs
      : since_work >= tsc_hz_
          ? kMaxSleepNs
          : std::clamp<std::uint64_t>((since_work * 1'000'000'000ull / tsc_hz_) >> kSleepShift, kMinSleepNs,
                                      kMaxSleepNs);
  if (deadline <= now) {
    timeout_ns = 0;
  } else if (deadline != UINT64_MAX) {
    timeout_ns = std::min<std::uint64_t>(timeout_ns, (deadline - now) * 1'000'000'000ull / tsc_hz_ + 1);
  }
  if (timeout_ns && !any_doorbell(k) && k.frames->empty() && k.msgs->empty()) {
    epoll_event evs[16];
    timespec ts{time_t(timeout_ns / 1'000'000'000ull), long(timeout_ns % 1'000'000'000ull)};
    const int n = ::epoll_pwait2(k.epoll_fd, evs, 16, &ts, nullptr);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == kTagWake) {
        std::uint64_t buf;
        (void)!::read(k.wake_fd, &buf, sizeof buf);
      } else if (evs[i].data.u64 == kTagControl) {
        control_ready_ = true;  // core 0's set only
      }
    }
    if (n >= 0 && k.index == 0) slept_ = true;  // else it did not wait: the control job looks
    // Woken, not timed out: the jobs wait, unless they have not been looked
    // at since the last wait began (wake-ups that bring no traffic of ours,
    // such as frames of gossamerd's on a shared port, must not put them
    // off for ever while an exchange stays open).
    if (n > 0 && k.jobs_looked) {
      k.jobs_wait_until = tsc_now() + tsc_hz_ / 1'000'000 * kJobsWaitUs;
      k.jobs_looked = false;
    }
    if (n >= 0) k.stats.cpu = std::uint64_t(::sched_getcpu());  // a vDSO read; the scheduler may have moved it
  }
  k.rx_armed = false;  // the next sleep arms it again (what woke us is drained then)
  k.sleeping.store(false, std::memory_order_relaxed);
  for (App* a : *k.apps) std::atomic_ref<std::uint32_t>(*a->sleeping()).fetch_and(~bit, std::memory_order_relaxed);
}

}  // namespace gossamer::dataplane
