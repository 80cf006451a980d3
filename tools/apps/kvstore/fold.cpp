// Folding: the I/O loops of one host give cores back while other processes
// want them (README, How it works: Folding).
//
// A loop's fiber is always ready, so each of the host's threads stays
// runnable while it has anything to do, and a 2-thread Hydra with its
// clients on a 2-core machine is three busy tasks on two cores: the
// scheduler shares both cores among all three, and every command for the
// other thread's shard waits for that thread's turn on a core that the
// clients also need. Pinned by hand to one CPU, the two threads (which
// then take turns at each round's yield) left the other to redis-benchmark
// and served more in every row: pipelined GET on 16 keys 1.18-1.20 M/s
// against 0.96-1.07 M, 1 M keys SET 0.93-0.94 M against 0.81-0.84 M,
// unpipelined 91-97 k against 70-83 k (README, Performance: Folding).
//
// So the host's first loop measures, every 25 ms, how much CPU the rest of
// the machine used over the last 150 ms (/proc/stat's user, nice and
// system ticks less this process's own CPU time from getrusage), and leaves
// the others the CPUs they use: with C CPUs of which the loops have D,
// one CPU fewer for the loops when the others used at least half a CPU
// more than their C - D, one more when they used 0.7 of a CPU less; 100
// ms at least between two steps, at least one CPU, at most C (and steps
// that leave the loops at least one CPU each are taken at once). Each
// loop applies the set at its next round (sched_setaffinity on its own
// thread); spreading back to C restores the set each loop started with.
// The CPU kept first is the one the deciding loop runs on. (A count of
// runnable tasks, /proc/loadavg's, was tried first: sampled at an
// instant, it caught this process's own wake-ups and folded an idle
// Hydra.)
//
// Only on one host (on a rack, rack-in-a-box places each host's processes),
// with several loops, adaptive polling, and a process allowed on every
// online CPU (a process pinned by its user stays as it was put), of at
// most 64 CPUs. --no-fold turns it off.
#include "fold.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "server.hpp"

namespace hydra {

namespace {
// The others' use is measured over the last kWindow samples (150 ms):
// at USER_HZ 100 a 25 ms sample holds 2-3 ticks of each CPU, and a
// smoothed 25 ms sample moved an idle Hydra's loops twice whenever a
// process ran for 40-80 ms (`python3 -c pass`). Over 150 ms, a burst of
// 40 ms never moves them, one of 80 ms did in 2 of 3 tries, one of 150
// ms always (and they spread back about 0.1 s after it); redis-benchmark
// at a full CPU folds them 120-140 ms after it starts (200 ms: 226-320 ms,
// and no move for 80 ms bursts; 100 ms: 116-262 ms, a move for each).
// Ticks are USER_HZ, so the window also bounds the error of one tick.
constexpr std::uint32_t kSampleMs = 25, kWindow = 6, kHoldMs = 100;
constexpr float kFoldAbove = 0.5f, kSpreadBelow = 0.7f;
static_assert(kWindow < FoldState::kRing);

// The loops' CPU set: written by the host's first loop, then the epoch;
// each loop reads the epoch, then the set. kOriginal: the set each loop
// started with (all CPUs, hot-added ones included).
constexpr std::uint64_t kOriginal = ~std::uint64_t(0);
std::atomic<std::uint64_t> g_mask{kOriginal};
std::atomic<std::uint32_t> g_epoch{0};
std::atomic<std::uint32_t> g_cpus{0};      // INFO: hydra_fold_cpus
std::atomic<std::uint64_t> g_changes{0};   // INFO: hydra_fold_changes
}  // namespace

std::uint32_t fold_cpus() { return g_cpus.load(std::memory_order_relaxed); }
std::uint64_t fold_changes() { return g_changes.load(std::memory_order_relaxed); }

namespace {
// The calling thread's CPU set as the kernel keeps it (/proc/thread-self/
// status, Cpus_allowed_list), offline CPUs included, which
// sched_getaffinity leaves out: spreading back restores it exactly. Left
// as it is (sched_getaffinity's) when that cannot be read.
void original_from_status(cpu_set_t& set) {
  std::FILE* f = std::fopen("/proc/thread-self/status", "re");
  if (!f) return;
  char line[4096];
  cpu_set_t parsed;
  CPU_ZERO(&parsed);
  bool ok = false;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "Cpus_allowed_list:", 18) != 0) continue;
    ok = true;
    for (char* p = line + 18; ok && *p && *p != '\n';) {  // "0-3,8,10-11"
      while (*p == ' ' || *p == '\t' || *p == ',') ++p;
      if (*p == '\n' || !*p) break;
      char* end = nullptr;
      long lo = std::strtol(p, &end, 10), hi = lo;
      if (end == p) ok = false;
      else if (*end == '-') {
        p = end + 1;
        hi = std::strtol(p, &end, 10);
        if (end == p) ok = false;
      }
      if (!ok || lo < 0 || hi < lo || hi >= CPU_SETSIZE) ok = false;
      else for (long c = lo; c <= hi; ++c) CPU_SET(int(c), &parsed);
      p = end;
    }
    break;
  }
  std::fclose(f);
  if (ok && CPU_COUNT(&parsed) > 0) set = parsed;
}
}  // namespace

void Loop::setup_fold() {
  if (!g_config.fold || g_config.busy_polling || gossamer::host_count() != 1 || local_count_ < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return;
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  const int count = CPU_COUNT(&set);
  if (count < 2 || count != online || online > 64) return;
  std::uint64_t allowed = 0;
  for (int c = 0; c < CPU_SETSIZE && std::popcount(allowed) < count; ++c)
    if (CPU_ISSET(c, &set)) {
      if (c >= 64) return;
      allowed |= std::uint64_t(1) << c;
    }
  fold_.original = set;
  original_from_status(fold_.original);
  fold_.on = true;
  fold_.allowed = allowed;
  fold_.allowed_count = std::uint32_t(count);
  fold_.cpus = fold_.allowed_count;
  if (!leader_) return;
  fold_.leader = true;
  fold_.stat_fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  fold_.hz = ::sysconf(_SC_CLK_TCK);
  if (fold_.stat_fd < 0 || fold_.hz <= 0) {  // never decides: the loops keep every CPU
    if (fold_.stat_fd >= 0) ::close(fold_.stat_fd);
    fold_.stat_fd = -1;
    return;
  }
  g_cpus.store(fold_.cpus, std::memory_order_relaxed);
}

namespace {
// Busy ticks of the whole machine's tasks (/proc/stat's first line: user,
// nice and system), or -1. Not irq and softirq: a server's own traffic
// (clients elsewhere, their packets) costs those, often while no task of
// it runs, and must not fold it. Without IRQ_TIME_ACCOUNTING (this
// kernel) the softirq ticks that land in this process's threads count in
// its own ticks but not here, so the others read low by that much: it
// folds on more evidence, not less. Not idle, iowait or steal.
long long machine_busy_ticks(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  long long user = 0, nice = 0, system = 0;
  if (std::sscanf(buf, "cpu %lld %lld %lld", &user, &nice, &system) != 3) return -1;
  return user + nice + system;
}

// This process's user and system time, all threads, in µs, as INFO's
// used_cpu_* reads it (getrusage: the same accounting as /proc/self/stat's
// utime and stime, finer than its ticks), or -1.
long long own_us() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return (long long)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1'000'000 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}
}  // namespace

// The host's first loop, every round: every 25 ms, how much CPU the rest
// of the machine used over the last 150 ms (its busy ticks less this
// process's), and a step when that has moved far enough from the CPUs
// left to it.
void Loop::fold_sample() {
  const std::uint32_t now = tl_lru_clock;  // ms, coarse monotonic, this round's (io_loop.cpp)
  if (fold_.stat_fd < 0) return;
  if (fold_.samples > 0 && std::int32_t(now - fold_.next_sample_ms) < 0) return;
  const long long busy = machine_busy_ticks(fold_.stat_fd), own = own_us();
  if (busy < 0 || own < 0) return;
  fold_.next_sample_ms = now + kSampleMs;
  const std::uint32_t head = fold_.samples % FoldState::kRing;
  fold_.ring[head] = {busy, own, now};
  if (++fold_.samples <= kWindow) {
    fold_.hold_until_ms = now;  // no decision before a full window
    return;
  }
  const FoldState::Sample& old = fold_.ring[(fold_.samples - 1 - kWindow) % FoldState::kRing];
  const std::uint32_t elapsed = now - old.ms;
  if (elapsed == 0 || std::int32_t(now - fold_.hold_until_ms) < 0) return;
  // Ticks are 1/USER_HZ s of one CPU: CPUs used = seconds used / seconds.
  const float used_s = float(busy - old.busy) / float(fold_.hz) - float(own - old.own) * 1e-6f;
  const float others = std::max(0.0f, used_s * 1000.0f / float(elapsed));
  // With C CPUs and D of them for the loops, the others have C - D: one
  // fewer for the loops when the others used half a CPU more than that,
  // one more when they used 0.7 of a CPU less. The loops use at most one
  // CPU each, so D counts no more CPUs than loops: folding starts below
  // that, and spreading to it goes on to C at once.
  const std::uint32_t used = std::min(fold_.cpus, local_count_);
  const float left = float(fold_.allowed_count - used);
  std::uint32_t cpus = fold_.cpus;
  if (used > 1 && others >= left + kFoldAbove) cpus = used - 1;
  else if (cpus < fold_.allowed_count && others <= left - kSpreadBelow)
    cpus = used + 1 >= local_count_ ? fold_.allowed_count : used + 1;
  if (cpus == fold_.cpus) return;
  // The CPU this loop runs on first (the others' tasks have moved off it
  // least), then the lowest of the rest.
  std::uint64_t mask = cpus == fold_.allowed_count ? kOriginal : 0;
  const int here = mask == kOriginal ? -1 : ::sched_getcpu();
  if (here >= 0 && here < 64 && (fold_.allowed >> here & 1)) mask |= std::uint64_t(1) << here;
  for (std::uint64_t rest = mask == kOriginal ? 0 : fold_.allowed & ~mask;
       std::uint32_t(std::popcount(mask)) < cpus && rest; rest &= rest - 1)
    mask |= rest & -rest;
  fold_.cpus = cpus;
  fold_.hold_until_ms = now + kHoldMs;
  g_mask.store(mask, std::memory_order_relaxed);
  g_epoch.fetch_add(1, std::memory_order_release);
  g_cpus.store(cpus, std::memory_order_relaxed);
  g_changes.fetch_add(1, std::memory_order_relaxed);
}

void Loop::fold_round() {
  if (fold_.leader) fold_sample();
  const std::uint32_t epoch = g_epoch.load(std::memory_order_acquire);
  if (epoch == fold_.seen) return;
  fold_.seen = epoch;
  const std::uint64_t mask = g_mask.load(std::memory_order_relaxed);
  cpu_set_t set;
  if (mask == kOriginal) {
    set = fold_.original;
  } else {
    CPU_ZERO(&set);
    for (std::uint64_t m = mask; m; m &= m - 1) CPU_SET(std::countr_zero(m), &set);
  }
  // A cpuset or a CPU taken offline under us: this loop stays where it is
  // until the next move (said once).
  if (::sched_setaffinity(0, sizeof set, &set) != 0 && !fold_.warned) {
    fold_.warned = true;
    std::fprintf(stderr, "hydra: thread %zu: cannot move onto %d CPUs: %s; it stays where it is until the next move\n",
                 gossamer::thread_index(), CPU_COUNT(&set), std::strerror(errno));
  }
}

}  // namespace hydra
