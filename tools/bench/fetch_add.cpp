// fetch_add: the papers' first microbenchmark (001 §6.1). Threads increment
// counters chosen at random (uniform or Zipf α = 1) from a set of objects,
// with one `pause` in every critical section, using delegation (blocking
// apply from fibers, and apply_then) and locks (std::mutex, a TTAS spinlock,
// an MCS lock). Each variant runs side by side in the same process, one
// after another, and the table reports ratios, since absolute numbers on a
// shared machine wander. It also prints the limit: one core running the
// same critical sections alone, with no synchronization at all.
//
// Then the unwindowed loop (issue 20): one fiber on thread 0 issues N
// apply_then to a counter on thread 1 without counting what it has
// outstanding, then waits for the callbacks; printed next to the same loop
// with a window, with each one's peak resident memory.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <gossamer/gossamer.hpp>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kSeqLen = 1 << 16;  // per-thread index sequence, reused cyclically

inline void cs_pause() { __builtin_ia32_pause(); }

struct Point {
  std::size_t threads, objects;
  std::string dist;
  std::uint64_t ops_per_thread;
};

// The same pseudo-random object indices for every variant.
std::vector<std::vector<std::uint32_t>> make_sequences(const Point& p) {
  std::vector<double> cdf(p.objects);
  if (p.dist == "zipf") {
    double sum = 0;
    for (std::size_t i = 0; i < p.objects; ++i) sum += 1.0 / double(i + 1);
    double acc = 0;
    for (std::size_t i = 0; i < p.objects; ++i) cdf[i] = (acc += 1.0 / double(i + 1) / sum);
  }
  std::vector<std::vector<std::uint32_t>> seqs(p.threads, std::vector<std::uint32_t>(kSeqLen));
  for (std::size_t t = 0; t < p.threads; ++t) {
    std::mt19937_64 rng(1234 + t);
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& x : seqs[t]) {
      if (p.dist == "zipf")
        x = std::uint32_t(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
      else
        x = std::uint32_t(rng() % p.objects);
      x = std::min<std::uint32_t>(x, std::uint32_t(p.objects - 1));
    }
  }
  return seqs;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- locks ---------------------------------------------------------------

struct alignas(64) MutexObj {
  std::mutex m;
  long c = 0;
};

struct alignas(64) SpinObj {
  std::atomic<bool> locked{false};
  long c = 0;
  void lock() {
    for (;;) {
      while (locked.load(std::memory_order_relaxed)) cs_pause();
      if (!locked.exchange(true, std::memory_order_acquire)) return;
    }
  }
  void unlock() { locked.store(false, std::memory_order_release); }
};

struct alignas(64) McsNode {
  std::atomic<McsNode*> next{nullptr};
  std::atomic<bool> wait{false};
};
struct alignas(64) McsObj {
  std::atomic<McsNode*> tail{nullptr};
  long c = 0;
  void lock(McsNode& n) {
    n.next.store(nullptr, std::memory_order_relaxed);
    n.wait.store(true, std::memory_order_relaxed);
    McsNode* prev = tail.exchange(&n, std::memory_order_acq_rel);
    if (!prev) return;
    prev->next.store(&n, std::memory_order_release);
    while (n.wait.load(std::memory_order_acquire)) cs_pause();
  }
  void unlock(McsNode& n) {
    McsNode* succ = n.next.load(std::memory_order_acquire);
    if (!succ) {
      McsNode* expected = &n;
      if (tail.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return;
      while (!(succ = n.next.load(std::memory_order_acquire))) cs_pause();
    }
    succ->wait.store(false, std::memory_order_release);
  }
};

template <class Body>
double run_threads(const Point& p, Body body) {
  std::atomic<std::size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (std::size_t t = 0; t < p.threads; ++t)
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      body(t);
    });
  while (ready.load() < p.threads) std::this_thread::yield();
  auto t0 = Clock::now();
  go.store(true);
  for (auto& t : ts) t.join();
  return seconds_since(t0);
}

double bench_mutex(const Point& p, const std::vector<std::vector<std::uint32_t>>& seqs) {
  std::vector<MutexObj> objs(p.objects);
  double s = run_threads(p, [&](std::size_t t) {
    const auto& seq = seqs[t];
    for (std::uint64_t i = 0; i < p.ops_per_thread; ++i) {
      MutexObj& o = objs[seq[i % kSeqLen]];
      std::lock_guard<std::mutex> g(o.m);
      cs_pause();
      ++o.c;
    }
  });
  long sum = 0;
  for (auto& o : objs) sum += o.c;
  if (std::uint64_t(sum) != p.threads * p.ops_per_thread) std::fprintf(stderr, "mutex: lost updates\n");
  return s;
}

double bench_spin(const Point& p, const std::vector<std::vector<std::uint32_t>>& seqs) {
  std::vector<SpinObj> objs(p.objects);
  return run_threads(p, [&](std::size_t t) {
    const auto& seq = seqs[t];
    for (std::uint64_t i = 0; i < p.ops_per_thread; ++i) {
      SpinObj& o = objs[seq[i % kSeqLen]];
      o.lock();
      cs_pause();
      ++o.c;
      o.unlock();
    }
  });
}

double bench_mcs(const Point& p, const std::vector<std::vector<std::uint32_t>>& seqs) {
  std::vector<McsObj> objs(p.objects);
  return run_threads(p, [&](std::size_t t) {
    McsNode node;
    const auto& seq = seqs[t];
    for (std::uint64_t i = 0; i < p.ops_per_thread; ++i) {
      McsObj& o = objs[seq[i % kSeqLen]];
      o.lock(node);
      cs_pause();
      ++o.c;
      o.unlock(node);
    }
  });
}

// The limit: one core, the same critical sections, no synchronization.
double bench_one_core(const Point& p, const std::vector<std::vector<std::uint32_t>>& seqs) {
  std::vector<long> objs(p.objects);
  auto t0 = Clock::now();
  const std::uint64_t total = p.threads * p.ops_per_thread;
  const auto& seq = seqs[0];
  for (std::uint64_t i = 0; i < total; ++i) {
    long& c = objs[seq[i % kSeqLen]];
    cs_pause();
    ++c;
    asm volatile("" ::: "memory");
  }
  return seconds_since(t0);
}

// ---- delegation --------------------------------------------------------------

// Peak resident memory from here on: writing 5 to clear_refs resets VmHWM
// (Linux 4.0+); read back after the run.
void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}
// After a delegation run, on stderr: how many operations went through
// slots and how many ran inline on their own trustee, and the batching
// (tools/bench/breakdown divides by these).
void report_requests(const char* what, std::size_t threads) {
  std::uint64_t sent = 0, local = 0, slots = 0;
  for (std::size_t t = 0; t < threads; ++t) {
    auto s = gossamer::trustee_stats(t);
    sent += s.requests_sent;
    local += s.local_applies;
    slots += s.slots_served;
  }
  std::fprintf(stderr, "fetch_add: %s: %llu requests through slots in %llu batches, %llu applied inline\n", what,
               (unsigned long long)sent, (unsigned long long)slots, (unsigned long long)local);
  // Where each thread's loop spent its cycles (the whole run() with its
  // set-up): iterations that found work (of which serving batches) and
  // iterations that found none (spinning while it waits for the other).
  for (std::size_t t = 0; t < threads; ++t) {
    auto s = gossamer::trustee_stats(t);
    double all = double(s.busy_cycles + s.idle_cycles);
    if (all == 0) continue;
    std::fprintf(stderr, "fetch_add: %s: thread %zu: busy %.0f%% (serving %.0f%%), idle %.0f%%; sent %llu, served %llu in %llu batches\n",
                 what, t, 100 * double(s.busy_cycles) / all, 100 * double(s.serve_cycles) / all,
                 100 * double(s.idle_cycles) / all, (unsigned long long)s.requests_sent,
                 (unsigned long long)s.requests_served, (unsigned long long)s.slots_served);
  }
}

double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return double(std::stoull(line.substr(6))) / 1024.0;
  return 0;
}

struct DelegationConfig {
  std::size_t fibers = 32;   // per thread, for blocking apply
  std::size_t window = 512;  // outstanding apply_then per thread
  gossamer::Polling polling = gossamer::Polling::busy;
  std::size_t max_outstanding = gossamer::Options{}.max_outstanding;  // backpressure bound
  std::size_t preempt_ops = 64;  // gossamer::Options::preempt_ops (off by default there)
  // async: the window is the runtime's backpressure bound (max_outstanding
  // = window; the fiber is suspended until responses make room) instead of
  // the benchmark's own `while (outstanding >= window) yield()`.
  bool runtime_window = false;
};

double bench_trust(const Point& p, const std::vector<std::vector<std::uint32_t>>& seqs,
                   const DelegationConfig& dc, bool async) {
  gossamer::Options o;
  o.threads = p.threads;
  o.polling = dc.polling;
  o.max_outstanding = async && dc.runtime_window ? dc.window : dc.max_outstanding;
  o.preempt_ops = dc.preempt_ops;
  double secs = 0;
  long total = 0;
  gossamer::run(o, [&] {
    std::vector<gossamer::Trust<long>> objs;
    for (std::size_t i = 0; i < p.objects; ++i) objs.push_back(gossamer::trustee(i % p.threads).entrust(0L));
    std::vector<gossamer::TrustRef<long>> refs;
    for (auto& t : objs) refs.push_back(t.ref());
    const auto* refs_p = refs.data();
    const auto* seqs_p = seqs.data();
    std::uint64_t ops = p.ops_per_thread;
    std::size_t fibers = dc.fibers, window = dc.window;
    auto t0 = Clock::now();
    std::vector<gossamer::FiberHandle> hs;
    for (std::size_t t = 0; t < p.threads; ++t) {
      if (async && dc.runtime_window) window = SIZE_MAX;  // the runtime bounds it
      hs.push_back(gossamer::spawn_on(t, [refs_p, seqs_p, ops, fibers, window, async, t] {
        const auto& seq = seqs_p[t];
        if (async) {
          std::size_t outstanding = 0;
          std::size_t* out = &outstanding;
          for (std::uint64_t i = 0; i < ops; ++i) {
            while (outstanding >= window) gossamer::yield();
            ++outstanding;
            refs_p[seq[i % kSeqLen]].apply_then(
                [](long& c) {
                  cs_pause();
                  return ++c;
                },
                [out](long) { --*out; });
          }
          while (outstanding) gossamer::yield();
        } else {
          std::vector<gossamer::FiberHandle> fs;
          for (std::size_t f = 0; f < fibers; ++f)
            fs.push_back(gossamer::spawn([&seq, refs_p, ops, fibers, f] {
              for (std::uint64_t i = f; i < ops; i += fibers)
                refs_p[seq[i % kSeqLen]].apply([](long& c) {
                  cs_pause();
                  return ++c;
                });
            }));
          for (auto& h : fs) h.join();
        }
      }));
    }
    for (auto& h : hs) h.join();
    secs = seconds_since(t0);
    for (auto& t : objs) total += t.apply([](long& c) { return c; });
  });
  report_requests(async ? "async" : "trust", p.threads);
  if (std::uint64_t(total) != p.threads * p.ops_per_thread)
    std::fprintf(stderr, "trust: expected %llu increments, counted %ld\n",
                 (unsigned long long)(p.threads * p.ops_per_thread), total);
  return secs;
}

// One fiber on thread 0, one counter on thread 1, `ops` apply_then; window
// 0 = none (the loop a new user writes), then wait for every callback.
double bench_loop(std::uint64_t ops, std::size_t window, const DelegationConfig& dc) {
  gossamer::Options o;
  o.threads = 2;
  o.polling = dc.polling;
  o.max_outstanding = dc.max_outstanding;
  o.preempt_ops = dc.preempt_ops;
  double secs = 0;
  long total = 0;
  gossamer::run(o, [&] {
    auto counter = gossamer::trustee(1).entrust(0L);
    auto ref = counter.ref();
    std::uint64_t done = 0;
    std::uint64_t* d = &done;
    std::size_t outstanding = 0;
    std::size_t* out = &outstanding;
    auto t0 = Clock::now();
    for (std::uint64_t i = 0; i < ops; ++i) {
      while (window && outstanding >= window) gossamer::yield();
      ++outstanding;
      ref.apply_then([](long& c) { return ++c; }, [d, out](long) { ++*d, --*out; });
    }
    while (done < ops) gossamer::yield();
    secs = seconds_since(t0);
    total = counter.apply([](long& c) { return c; });
  });
  report_requests(window ? "loop" : "unwindowed", 2);
  if (std::uint64_t(total) != ops) std::fprintf(stderr, "loop: expected %llu, counted %ld\n", (unsigned long long)ops, total);
  return secs;
}

std::vector<std::size_t> parse_list(const std::string& s) {
  std::vector<std::size_t> v;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t e = s.find(',', pos);
    v.push_back(std::stoul(s.substr(pos, e - pos)));
    pos = e == std::string::npos ? s.size() : e + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fetch_add: delegation vs locks (papers 001 §6.1)"};
  std::string threads_s = "2", objects_s = "1,16,1024", dists_s = "uniform,zipf";
  std::uint64_t ops = 1'000'000;
  DelegationConfig dc;
  std::string polling = "busy";
  std::string variants = "trust,async,mutex,spin,mcs,1core,loop,unwindowed";
  std::uint64_t loop_ops = 10'000'000;
  app.add_option("--threads", threads_s, "comma-separated thread counts");
  app.add_option("--objects", objects_s, "comma-separated object counts");
  app.add_option("--dist", dists_s, "uniform,zipf");
  app.add_option("--ops", ops, "increments per thread");
  app.add_option("--fibers", dc.fibers, "fibers per thread for blocking apply");
  app.add_option("--window", dc.window, "outstanding apply_then per thread");
  app.add_option("--polling", polling, "busy | adaptive")->check(CLI::IsMember({"busy", "adaptive"}));
  app.add_option("--variants", variants, "comma-separated subset of trust,async,mutex,spin,mcs,1core (the table; others print -), "
                 "loop,unwindowed (the loop with and without a window)");
  app.add_option("--loop-ops", loop_ops, "apply_then of the loop");
  app.add_option("--max-outstanding", dc.max_outstanding, "gossamer::Options::max_outstanding (0: no bound)");
  app.add_option("--preempt-ops", dc.preempt_ops, "gossamer::Options::preempt_ops (0: off)");
  app.add_flag("--runtime-window", dc.runtime_window,
               "async: bound the window with Options::max_outstanding instead of yielding while it is full");
  CLI11_PARSE(app, argc, argv);
  auto want = [&](const char* v) { return ("," + variants + ",").find("," + std::string(v) + ",") != std::string::npos; };
  dc.polling = polling == "busy" ? gossamer::Polling::busy : gossamer::Polling::adaptive;

  const bool table = want("trust") || want("async") || want("mutex") || want("spin") || want("mcs") || want("1core");
  if (table) {
    std::printf("fetch_add: %llu ops/thread, pause in every critical section, %s polling, %zu fibers, window %zu, "
                "preempt_ops %zu\n",
                (unsigned long long)ops, polling.c_str(), dc.fibers, dc.window, dc.preempt_ops);
    std::printf("%-4s %-7s %-8s | %8s %8s | %8s %8s %8s | %8s | %10s %10s\n", "thr", "objects", "dist",
                "trust", "async", "mutex", "spin", "mcs", "1-core", "best/lock", "best/1core");
    std::printf("%s\n", std::string(112, '-').c_str());
    std::string dist;
    for (std::size_t threads : parse_list(threads_s))
      for (std::size_t objects : parse_list(objects_s)) {
        std::size_t pos = 0;
        while (pos < dists_s.size()) {
          std::size_t e = dists_s.find(',', pos);
          dist = dists_s.substr(pos, e - pos);
          pos = e == std::string::npos ? dists_s.size() : e + 1;
          Point p{threads, objects, dist, ops};
          auto seqs = make_sequences(p);
          double total = double(threads * ops) / 1e6;
          // A variant left out is 0 here and "-" in the table.
          auto rate = [&](const char* v, auto&& bench) { return want(v) ? total / bench() : 0.0; };
          double trust = rate("trust", [&] { return bench_trust(p, seqs, dc, false); });
          double async = rate("async", [&] { return bench_trust(p, seqs, dc, true); });
          double mutex = rate("mutex", [&] { return bench_mutex(p, seqs); });
          double spin = rate("spin", [&] { return bench_spin(p, seqs); });
          double mcs = rate("mcs", [&] { return bench_mcs(p, seqs); });
          double one = rate("1core", [&] { return bench_one_core(p, seqs); });
          double best_d = std::max(trust, async), best_l = std::max({mutex, spin, mcs});
          auto cell = [](double v) {
            char b[32];
            if (v > 0) std::snprintf(b, sizeof b, "%8.2f", v);
            else std::snprintf(b, sizeof b, "%8s", "-");
            return std::string(b);
          };
          char vs_lock[32] = "         -", vs_one[32] = "         -";
          if (best_d > 0 && best_l > 0) std::snprintf(vs_lock, sizeof vs_lock, "%9.2fx", best_d / best_l);
          if (best_d > 0 && one > 0) std::snprintf(vs_one, sizeof vs_one, "%9.0f%%", 100.0 * best_d / one);
          std::printf("%-4zu %-7zu %-8s | %s %s | %s %s %s | %s | %s %s\n", threads, objects, dist.c_str(),
                      cell(trust).c_str(), cell(async).c_str(), cell(mutex).c_str(), cell(spin).c_str(),
                      cell(mcs).c_str(), cell(one).c_str(), vs_lock, vs_one);
          std::fflush(stdout);
        }
      }
    std::printf("Mops/s per variant; best/lock = best delegation / best lock; best/1core = best delegation / one-core limit\n");
  }
  if (want("loop") || want("unwindowed")) {
    std::printf("%sloop: %llu apply_then from 1 fiber on thread 0 to 1 object on thread 1, then wait\n",
                table ? "\n" : "", (unsigned long long)loop_ops);
    double w = 0, u = 0;
    if (want("loop")) {
      reset_peak_rss();
      w = double(loop_ops) / 1e6 / bench_loop(loop_ops, dc.window, dc);
      std::printf("loop windowed   %8.2f Mops/s  peak RSS %8.1f MiB  (window %zu)\n", w, peak_rss_mib(), dc.window);
    }
    if (want("unwindowed")) {
      reset_peak_rss();
      u = double(loop_ops) / 1e6 / bench_loop(loop_ops, 0, dc);
      std::printf("loop unwindowed %8.2f Mops/s  peak RSS %8.1f MiB", u, peak_rss_mib());
      if (w > 0) std::printf("  unwindowed/windowed %.2fx", u / w);
      std::printf("\n");
    }
  }
  return 0;
}
