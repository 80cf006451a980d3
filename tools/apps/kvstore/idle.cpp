// What an I/O loop does in a round that found nothing to do, and how the
// loops of one host wake each other (README, How it works: Idle threads).
//
// The runtime sleeps only when a thread has no ready fiber, and the loop's
// fiber is always ready (it yields every round), so the runtime's own
// backoff never starts: without help every thread would spin forever. The
// loop naps in epoll_wait instead, its only blocking call.
//
// On one host whose threads take every core (so that its clients share the
// cores with them), with --idle-kicks, or without it while other tasks
// outnumber the cores (sample_contention), a loop naps as
// soon as a few rounds found nothing, even with answers owed: whatever
// another loop of the host gives it goes through the runtime's slots
// (requests to its trustee, spawn_on, answers to its requests), and the
// loop that gave it kicks it awake (an eventfd in its epoll set). The
// handshake, as the runtime's own sleep (scheduler.cpp):
//   napper: announce (its flag, then the host's count, seq_cst), yield
//           once (the runtime serves and fetches what was published
//           before), then nap unless that pass brought activity;
//   kicker: after the pass that published its requests or answers, a
//           fence, then the flags: a loop that announced is kicked.
// Either the kicker sees the flag, or the napper's pass sees the work. A
// nap lasts at most --idle-nap-ms, so what comes otherwise (a signal's
// stop, a blocked command's timeout) waits no longer than before.
//
// Otherwise: with fewer threads than cores, or cores nobody else wants, a
// spinning loop takes a core nobody else wants and answers sooner; on a
// rack the dataplane writes the slots of requests from other hosts and
// wakes the runtime, not the loop. There a loop yields its core from its
// first idle round, and naps only after 20 ms of a quiet trustee, as
// before the kicks.
#include <sched.h>
#include <sys/eventfd.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "server.hpp"

namespace hydra {

namespace {
// Rounds with nothing to do before a loop announces a nap: an answer from
// the other thread's trustee usually comes within a few rounds, and a nap
// costs a kick (a write and a wake-up) then.
constexpr std::uint64_t kSpinRounds = 16;

struct alignas(64) Sleeper {
  std::atomic<std::uint32_t> asleep{0};  // announced, not kicked yet
  int fd = -1;                           // its loop's eventfd
};
std::array<Sleeper, kMaxThreads> g_sleepers;  // by thread index; this host's threads only
std::atomic<std::uint32_t> g_announced{0};   // loops of this host announced or napping
std::atomic<std::uint32_t> g_napping_loops{0};  // loops that nap at once (--idle-kicks, or contended now)

// What this thread did that another loop may be waiting for: requests
// sent (published in the pass after the round) and served (their answers),
// answers fetched (a channel's queued requests go out after them).
std::uint64_t given(const gossamer::TrusteeStats& s) {
  return s.requests_sent + s.requests_served + s.slots_served + s.responses_received;
}
}  // namespace

void Loop::setup_wake() {
  // Naps at once only when the host's threads take every core: with fewer
  // threads than cores a loop that spins takes a core nobody else wanted,
  // and answers sooner than one that must be woken. Even then a spinning
  // loop answered sooner on an otherwise idle 2-core machine (README, Naps
  // and kicks), so without --idle-kicks the loop naps at once only while
  // other tasks want the cores too (sample_contention); the kicks run
  // either way, since any loop may nap.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  idle_.kicks = gossamer::host_count() == 1 && local_count_ >= cores && !g_config.busy_polling &&
                g_config.idle_nap_ms > 0;
  if (!idle_.kicks || epoll_ < 0) return;  // epoll_: stopping already (Loop::Loop)
  if (!g_config.idle_kicks) {
    idle_.loadavg_fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (idle_.loadavg_fd < 0) return;  // never contended: spin, yield, nap when quiet
    idle_.adaptive = true;
  }
  // Never closed: another loop may be writing to it while this one stops
  // (the process ends after the loops).
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (fd < 0 || ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    if (fd >= 0) ::close(fd);
    return;  // naps as on a rack, but still kicks the others
  }
  idle_.naps = true;
  if (!idle_.adaptive) g_napping_loops.fetch_add(1, std::memory_order_relaxed);  // before the loops run
  idle_.wake_fd = fd;
  g_sleepers[gossamer::thread_index()].fd = fd;
}

// Whether the machine's other runnable tasks are more than its cores now:
// /proc/loadavg's running count (all CPUs, this instant) less this host's
// loops that are not napping. Then a spinning loop takes a core from them
// (the clients, or the loop that owes it answers), and a loop that naps at
// once gives it back; otherwise spinning costs nobody anything and answers
// sooner (README, Performance: Two threads on two cores). One sample every
// 5 ms of idle rounds; `contended` follows the recent samples' majority.
void Loop::sample_contention() {
  const std::uint32_t now = tl_lru_clock;  // ms, coarse monotonic, this round's (io_loop.cpp)
  // (The first sample at once: against a start of 0, the difference would
  // read negative for the half of every 49.7 days of uptime that the
  // millisecond clock spends at or above 2^31.)
  if (idle_.sampled && std::int32_t(now - idle_.next_sample_ms) < 0) return;
  idle_.sampled = true;
  idle_.next_sample_ms = now + 5;
  char buf[128];
  const ssize_t n = ::pread(idle_.loadavg_fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return;
  buf[n] = 0;
  // "0.50 0.40 0.30 RUNNING/TOTAL LASTPID"
  const char* p = buf;
  for (int field = 0; field < 3 && p; ++field) {
    p = std::strchr(p, ' ');
    if (p) ++p;
  }
  if (!p) return;
  const long running = std::strtol(p, nullptr, 10);
  const long own = long(local_count_) - long(g_announced.load(std::memory_order_relaxed));
  const long cores = long(std::max(1u, std::thread::hardware_concurrency()));
  // More tasks than cores besides the loops: with one other task per core
  // (the clients, a compiler) spinning still answered sooner without
  // pipelining (README, Naps when the cores are wanted).
  const bool wanted = running - std::max(own, 1L) > cores;
  idle_.contention = idle_.contention * 0.75f + (wanted ? 0.25f : 0.0f);
  if (idle_.contended ? idle_.contention < 0.3f : idle_.contention > 0.6f) {
    idle_.contended = !idle_.contended;
    if (idle_.contended) g_napping_loops.fetch_add(1, std::memory_order_seq_cst);
    else g_napping_loops.fetch_sub(1, std::memory_order_relaxed);
  }
}

void Loop::drain_wake() {
  std::uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(idle_.wake_fd, &v, sizeof v);
}

// At the top of every round: if the pass before it published this thread's
// requests or answers, wake the loops that announced a nap.
void Loop::kick_sleepers() {
  // No loop naps at once (an uncontended machine, sample_contention): no
  // counters to read. A loop that starts napping at once may miss the kick
  // of the round that read 0 here, and then naps --idle-nap-ms at most.
  if (!idle_.kicks || g_napping_loops.load(std::memory_order_relaxed) == 0) return;
  const std::uint64_t g = given(gossamer::trustee_stats(gossamer::thread_index()));
  if (g == idle_.kick_activity) return;
  idle_.kick_activity = g;
  // The slots published, then the flags read (Dekker with Loop::idle).
#if defined(__SANITIZE_THREAD__)
  if (g_announced.fetch_add(0, std::memory_order_seq_cst) == 0) return;  // TSan has no fences
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g_announced.load(std::memory_order_relaxed) == 0) return;
#endif
  const std::uint32_t me = gossamer::thread_index();
  for (std::uint32_t t = first_local_; t < first_local_ + local_count_; ++t) {
    Sleeper& s = g_sleepers[t];
    if (t == me || s.asleep.load(std::memory_order_relaxed) == 0) continue;
    if (s.asleep.exchange(0, std::memory_order_acq_rel) == 0) continue;  // kicked by another loop already
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(s.fd, &one, sizeof one);
  }
}

// This thread's trustee: what it served, sent and received, and what its
// own loop applied locally (not the sweeps: Loop::sweep).
std::uint64_t Loop::trustee_activity() {
  gossamer::TrusteeStats s = gossamer::trustee_stats(gossamer::thread_index());
  // slots_served too: the pieces of a request larger than a slot, and the
  // fetches of a large response, move nothing else.
  return s.requests_served + s.slots_served + s.requests_sent + s.responses_received + s.local_applies - sweeps_;
}

void Loop::withdraw() {
  if (!idle_.announced) return;
  idle_.announced = false;
  g_sleepers[gossamer::thread_index()].asleep.store(0, std::memory_order_relaxed);
  g_announced.fetch_sub(1, std::memory_order_relaxed);
}

// A round that found nothing to do. Returns true when it napped (the
// periodic checks of Loop::run then run every round: a nap may last
// --idle-nap-ms).
bool Loop::idle(std::uint64_t& idle_rounds) {
  if (g_config.busy_polling) return false;
  // Held commands (order.cpp) wait for other loops' frontiers, which wake
  // nobody when they move: a nap while some are held lasts 1 ms at most,
  // however long --idle-nap-ms (a nap past the order's 100 ms wait would
  // let them go unordered).
  const int nap_ms = order_.waiting.empty() ? g_config.idle_nap_ms : std::min(g_config.idle_nap_ms, 1);
  if (idle_.adaptive && (++idle_.sample_rounds & 63) == 0) sample_contention();
  if (idle_.naps && (!idle_.adaptive || idle_.contended)) {
    if (idle_rounds < kSpinRounds) return false;

    const std::uint64_t a = trustee_activity();
    if (!idle_.announced) {
      idle_.announced = true;
      idle_.announced_activity = a;
      g_sleepers[gossamer::thread_index()].asleep.store(1, std::memory_order_relaxed);
      g_announced.fetch_add(1, std::memory_order_seq_cst);  // then the pass reads the slots
      return false;
    }
    if (a != idle_.announced_activity) {  // the pass served or brought something: more may follow
      withdraw();
      idle_rounds = 0;
      return false;
    }
    if (poll_once(nap_ms)) idle_rounds = 0;  // a kick (kWakeTag) or a socket ended it
    withdraw();
    return true;
  }
  withdraw();  // announced while contended, the cores free since
  // From the first idle round: a spin of 64 rounds first (until
  // 2026-11-28) held the core from redis-benchmark and from the thread
  // owing the answers, for less throughput with 2 threads on 2 cores
  // (README, Performance: Yield from the first idle round).
  if (!idle_.quiet) {
    if (idle_rounds % 64 == 0 && trustee_quiet()) {
      idle_.quiet = true;
      idle_.quiet_since = std::chrono::steady_clock::now();
    }
    // Nothing for this loop, but the trustee is busy or answers are owed:
    // let another thread have the core, as the runtime does after its
    // spin phase (with more threads than cores, the thread that owes the
    // answers may be waiting for this one's time slice).
    ::sched_yield();
    return false;
  }
  // Quiet: checked every round, so that no nap follows work for the trustee.
  if (!trustee_quiet()) {
    idle_.quiet = false;
    return false;
  }
  if (g_config.idle_nap_ms > 0 &&
      std::chrono::steady_clock::now() - idle_.quiet_since >= std::chrono::milliseconds(20)) {
    if (poll_once(nap_ms)) idle_.quiet = false;  // a socket woke it: work again
    return true;
  }
  ::sched_yield();
  return true;
}

// A round that did something.
void Loop::busy() {
  idle_.quiet = false;
  withdraw();
}

// True when this thread's trustee has served, sent and received nothing
// since the last call, and no answer is owed to this loop.
bool Loop::trustee_quiet() {
  const std::uint64_t activity = trustee_activity();
  bool quiet = activity == idle_.last_activity && inflight_ == 0;
  idle_.last_activity = activity;
  return quiet;
}

}  // namespace hydra
