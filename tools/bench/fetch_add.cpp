// fetch_add: the papers' first microbenchmark (001 §6.1). Threads increment
// counters chosen at random (uniform or Zipf α = 1) from a set of objects,
// with one `pause` in every critical section, using delegation (blocking
// apply from fibers, and apply_then) and locks (std::mutex, a TTAS spinlock,
// an MCS lock). Each variant runs side by side in the same process, one
// after another, and the table reports ratios, since absolute numbers on a
// shared machine wander. It also prints the limit: one core running the
// same critical sections alone, with no synchronization at all.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
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

struct DelegationConfig {
  std::size_t fibers = 32;   // per thread, for blocking apply
  std::size_t window = 512;  // outstanding apply_then per thread
  gossamer::Polling polling = gossamer::Polling::busy;
};

double bench_trust(const Point& p, const std::vector<std::vector<std::uint32_t>>& seqs,
                   const DelegationConfig& dc, bool async) {
  gossamer::Options o;
  o.threads = p.threads;
  o.polling = dc.polling;
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
  if (std::uint64_t(total) != p.threads * p.ops_per_thread)
    std::fprintf(stderr, "trust: expected %llu increments, counted %ld\n",
                 (unsigned long long)(p.threads * p.ops_per_thread), total);
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
  app.add_option("--threads", threads_s, "comma-separated thread counts");
  app.add_option("--objects", objects_s, "comma-separated object counts");
  app.add_option("--dist", dists_s, "uniform,zipf");
  app.add_option("--ops", ops, "increments per thread");
  app.add_option("--fibers", dc.fibers, "fibers per thread for blocking apply");
  app.add_option("--window", dc.window, "outstanding apply_then per thread");
  app.add_option("--polling", polling, "busy | adaptive")->check(CLI::IsMember({"busy", "adaptive"}));
  CLI11_PARSE(app, argc, argv);
  dc.polling = polling == "busy" ? gossamer::Polling::busy : gossamer::Polling::adaptive;

  std::printf("fetch_add: %llu ops/thread, pause in every critical section, %s polling, %zu fibers, window %zu\n",
              (unsigned long long)ops, polling.c_str(), dc.fibers, dc.window);
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
        double trust = total / bench_trust(p, seqs, dc, false);
        double async = total / bench_trust(p, seqs, dc, true);
        double mutex = total / bench_mutex(p, seqs);
        double spin = total / bench_spin(p, seqs);
        double mcs = total / bench_mcs(p, seqs);
        double one = total / bench_one_core(p, seqs);
        double best_d = std::max(trust, async), best_l = std::max({mutex, spin, mcs});
        std::printf("%-4zu %-7zu %-8s | %8.2f %8.2f | %8.2f %8.2f %8.2f | %8.2f | %9.2fx %9.0f%%\n", threads,
                    objects, dist.c_str(), trust, async, mutex, spin, mcs, one, best_d / best_l,
                    100.0 * best_d / one);
        std::fflush(stdout);
      }
    }
  std::printf("Mops/s per variant; best/lock = best delegation / best lock; best/1core = best delegation / one-core limit\n");
  return 0;
}
