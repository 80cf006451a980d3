// echo: small closures echoed between the two hosts of a rack. A rack
// application: start it on every host with the same GOSSAMER_RUN_ID (see
// tools/bench/echo-rack, which also runs the kernel-TCP baseline). On a rack
// of more hosts, host 0's fibers address the trustees of all the others
// (started by hand, e.g. over a memif mesh: one peer per port).
//
// Host 0's threads each run F fibers; every fiber repeatedly applies, with a
// blocking apply, a closure that captures a B-byte payload to a counter on
// one of the other hosts' trustees (round robin over them); the closure bumps the
// counter and returns the payload, which the fiber checks. Each request's
// latency is measured with steady_clock around the apply. After S seconds
// the fibers stop issuing (requests in flight still complete and count) and
// host 0 prints one line:
//   echo size=32 threads=4 fibers=32 seconds=3 requests=N rps=R p50_us=X p99_us=Y tcp_bytes=T
// (T: request bytes host 0 sent over the large-request path, TCP between
// the instances; 0 when every request went through the dataplane)
// With --after-idle K, host 0 then sends K more requests one at a time, each
// after --idle-gap G seconds in which the whole rack does nothing (long
// enough for the dataplanes and the runtime threads to go to sleep), and
// prints what the first request after an idle period costs:
//   echo_idle samples=K gap_s=G p50_us=X max_us=Y
// With --trace DIR (a tracefs instance, e.g. /sys/kernel/tracing/instances/
// NAME, set up by tools/bench/idle-trace), host 0 turns that instance's
// tracing on for the idle phase only and writes a marker before and after
// each of those requests, so the kernel's events (wake-ups, switches,
// system calls) of every hop can be laid out between the two.
// With --idle-hook CMD, host 0 runs `CMD before I` just before and
// `CMD after I` just after idle request I (posix_spawn, waited for; no fork
// of this process's pages): tools/bench/path-pages counts the pages each
// process of the rack touches for one request that way.
// B = 32 sends a std::array<char, 32> captured in the closure (the closure
// is 32 bytes); other sizes send a std::string as an apply_with argument.
#include <algorithm>
#include <cerrno>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <gossamer/gossamer.hpp>

#include "payload.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kFixed = 32;       // the captured-array payload size
constexpr std::size_t kMaxTargets = 64;  // trustees addressed (on hosts 1..)

struct Params {
  std::size_t threads = 4, fibers = 32, size = 32;
  double seconds = 3;
  std::size_t after_idle = 0;  // requests sent one at a time after an idle gap
  double idle_gap = 1.0;       // seconds of silence before each of them
  gossamer::Polling polling = gossamer::Polling::adaptive;
  std::string trace;           // a tracefs instance directory, or ""
  std::string idle_hook;       // a program run before and after each idle request, or ""
};

extern "C" char** environ;

// --idle-hook: runs `cmd what i` and waits for it.
void run_hook(const std::string& cmd, const char* what, std::size_t i) {
  if (cmd.empty()) return;
  std::string n = std::to_string(i);
  char* argv[] = {const_cast<char*>(cmd.c_str()), const_cast<char*>(what), n.data(), nullptr};
  pid_t pid = 0;
  if (int e = ::posix_spawn(&pid, cmd.c_str(), nullptr, nullptr, argv, environ); e != 0) {
    std::fprintf(stderr, "echo: --idle-hook %s: %s\n", cmd.c_str(), std::strerror(e));
    return;
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

// A tracefs instance (--trace): tracing on and off, and markers.
struct Tracer {
  int on = -1, marker = -1;
  explicit Tracer(const std::string& dir) {
    if (dir.empty()) return;
    on = ::open((dir + "/tracing_on").c_str(), O_WRONLY | O_CLOEXEC);
    marker = ::open((dir + "/trace_marker").c_str(), O_WRONLY | O_CLOEXEC);
    if (on < 0 || marker < 0) std::fprintf(stderr, "echo: --trace %s: cannot open tracing_on/trace_marker\n", dir.c_str());
  }
  ~Tracer() {
    if (on >= 0) ::close(on);
    if (marker >= 0) ::close(marker);
  }
  void enable(bool yes) {
    if (on >= 0) (void)!::write(on, yes ? "1" : "0", 1);
  }
  void mark(const char* what, std::size_t i) {
    if (marker < 0) return;
    char buf[64];
    int n = std::snprintf(buf, sizeof buf, "echo_idle %zu %s", i, what);
    (void)!::write(marker, buf, std::size_t(n));
  }
};

// Filled by one host-0 thread once its fibers are done; read by main.
struct ThreadResult {
  std::vector<std::uint32_t> lat_ns;
  std::uint64_t requests = 0, mismatches = 0;
  Clock::time_point last_done{};
};

// The payload of request `seq` of `id` (a fiber, a connection): payload.hpp.
using echo_payload::fill;

// The host-0 share of the rack's threads (abi::host_threads).
std::size_t host0_threads(std::size_t total, std::size_t hosts) {
  return total / hosts + (total % hosts ? 1 : 0);
}

int bench(const Params& p) {
  const std::size_t n = gossamer::thread_count();
  const std::size_t hosts = gossamer::host_count();
  if (hosts < 2) {
    std::fprintf(stderr, "echo: needs a rack of at least 2 hosts (this one has %zu); run it with tools/bench/echo-rack\n",
                 hosts);
    return 2;
  }
  const std::size_t c0 = host0_threads(n, hosts);  // threads [0, c0) are on host 0, [c0, n) on the others
  const std::size_t targets = std::min(n - c0, kMaxTargets);
  if (c0 == 0 || targets == 0) {
    std::fprintf(stderr, "echo: --threads %zu leaves a host without threads\n", n);
    return 2;
  }

  // One counter on each trustee of hosts 1...
  std::vector<gossamer::Trust<long>> counters;
  std::array<gossamer::TrustRef<long>, kMaxTargets> refs{};
  for (std::size_t i = 0; i < targets; ++i) {
    counters.push_back(gossamer::trustee(c0 + i).entrust(0L));
    refs[i] = counters.back().ref();
  }

  std::vector<ThreadResult> results(c0);
  ThreadResult* results_p = results.data();  // host 0 only: the fibers below run in this process
  const std::size_t fibers = p.fibers, size = p.size;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(p.seconds));

  std::vector<gossamer::FiberHandle> hs;
  for (std::size_t t = 0; t < c0; ++t) {
    hs.push_back(gossamer::spawn_on(t, [refs, targets, fibers, size, deadline, results_p, t] {
      struct FiberResult {
        std::vector<std::uint32_t> lat_ns;
        std::uint64_t mismatches = 0;
        Clock::time_point last_done{};
      };
      std::vector<FiberResult> fr(fibers);
      std::vector<gossamer::FiberHandle> fs;
      for (std::size_t f = 0; f < fibers; ++f) {
        fs.push_back(gossamer::spawn([&fr, refs, targets, fibers, size, deadline, t, f] {
          FiberResult& me = fr[f];
          me.lat_ns.reserve(1 << 14);
          const std::uint64_t id = t * fibers + f;
          std::size_t target = id % targets;
          std::string s(size, '\0');
          for (std::uint64_t seq = 0;; ++seq) {
            bool ok;
            auto start = Clock::now();
            if (size == kFixed) {
              std::array<char, kFixed> payload;
              fill(payload.data(), kFixed, id, seq);
              auto back = refs[target].apply([payload](long& c) {
                ++c;
                return payload;
              });
              ok = back == payload;
            } else {
              fill(s.data(), size, id, seq);
              std::string back = refs[target].apply_with(
                  [](long& c, std::string x) {
                    ++c;
                    return x;
                  },
                  s);
              ok = back == s;
            }
            auto now = Clock::now();
            me.lat_ns.push_back(std::uint32_t(std::min<std::int64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count(), UINT32_MAX)));
            if (!ok) ++me.mismatches;
            if (++target == targets) target = 0;
            if (now >= deadline) {
              me.last_done = now;
              break;
            }
          }
        }));
      }
      for (auto& h : fs) h.join();
      ThreadResult& out = results_p[t];
      for (auto& r : fr) {
        out.lat_ns.insert(out.lat_ns.end(), r.lat_ns.begin(), r.lat_ns.end());
        out.mismatches += r.mismatches;
        out.last_done = std::max(out.last_done, r.last_done);
      }
      out.requests = out.lat_ns.size();
    }));
  }
  for (auto& h : hs) h.join();

  // The first request after an idle period: the rack has been quiet for
  // idle_gap seconds (this thread sleeps in the kernel, as an idle program
  // would), so every poller on the path has gone to sleep and must be woken.
  std::vector<std::uint32_t> idle_lat;
  Tracer tracer(p.trace);
  if (p.after_idle) tracer.enable(true);
  for (std::size_t i = 0; i < p.after_idle; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(p.idle_gap));
    run_hook(p.idle_hook, "before", i);
    tracer.mark("start", i);
    auto start = Clock::now();
    long v = refs[i % targets].apply([](long& c) { return ++c; });
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    tracer.mark("end", i);
    run_hook(p.idle_hook, "after", i);
    idle_lat.push_back(std::uint32_t(std::min<std::int64_t>(ns, UINT32_MAX)));
    if (v <= 0) ++results[0].mismatches;
  }
  if (p.after_idle) tracer.enable(false);

  std::vector<std::uint32_t> lat;
  std::uint64_t requests = 0, mismatches = 0;
  Clock::time_point end = t0;
  for (auto& r : results) {
    lat.insert(lat.end(), r.lat_ns.begin(), r.lat_ns.end());
    requests += r.requests;
    mismatches += r.mismatches;
    end = std::max(end, r.last_done);
  }
  // Every closure bumped a counter once: the totals must match.
  long counted = 0;
  for (auto& c : counters) counted += c.apply([](long& v) { return v; });

  double secs = std::chrono::duration<double>(end - t0).count();
  auto pct = [&](double q) {
    if (lat.empty()) return 0.0;
    std::size_t k = std::min(lat.size() - 1, std::size_t(q * double(lat.size())));
    std::nth_element(lat.begin(), lat.begin() + std::ptrdiff_t(k), lat.end());
    return lat[k] / 1000.0;
  };
  double p50 = pct(0.50), p99 = pct(0.99);
  // Request bytes host 0's threads sent over the large-request path (TCP
  // between the instances) rather than through the dataplane: the path used.
  unsigned long long tcp_bytes = 0;
  for (std::size_t t = 0; t < c0; ++t) tcp_bytes += gossamer::trustee_stats(t).tcp_bytes_sent;
  std::printf("echo size=%zu threads=%zu fibers=%zu seconds=%g requests=%llu rps=%.0f p50_us=%.1f p99_us=%.1f"
              " tcp_bytes=%llu\n",
              size, n, fibers, p.seconds, (unsigned long long)requests, secs > 0 ? double(requests) / secs : 0.0,
              p50, p99, tcp_bytes);
  if (!idle_lat.empty()) {
    std::sort(idle_lat.begin(), idle_lat.end());
    std::printf("echo_idle samples=%zu gap_s=%g p50_us=%.1f max_us=%.1f\n", idle_lat.size(), p.idle_gap,
                idle_lat[idle_lat.size() / 2] / 1000.0, idle_lat.back() / 1000.0);
  }
  std::fflush(stdout);
  int rc = 0;
  if (mismatches) {
    std::fprintf(stderr, "echo: %llu responses did not echo their payload\n", (unsigned long long)mismatches);
    rc = 1;
  }
  if (std::uint64_t(counted) != requests + idle_lat.size()) {
    std::fprintf(stderr, "echo: the trustees counted %ld requests, the clients %llu\n", counted,
                 (unsigned long long)(requests + idle_lat.size()));
    rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"echo: closures echoed between the 2 hosts of a rack (run on every host, same GOSSAMER_RUN_ID)"};
  Params p;
  std::string polling = "adaptive";
  app.add_option("--threads", p.threads, "runtime threads in the whole rack (half on each host)")->check(CLI::Range(2, 4096));
  app.add_option("--fibers", p.fibers, "fibers per host-0 thread")->check(CLI::Range(1, 100000));
  app.add_option("--seconds", p.seconds, "how long the fibers keep issuing requests")->check(CLI::PositiveNumber);
  app.add_option("--size", p.size, "payload bytes (32: captured std::array; else an apply_with std::string)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--after-idle", p.after_idle, "then this many requests, each after an idle gap")
      ->check(CLI::Range(0, 1000));
  app.add_option("--idle-gap", p.idle_gap, "seconds of idle before each of them")->check(CLI::Range(0.01, 60.0));
  app.add_option("--trace", p.trace, "a tracefs instance: traced during the idle phase, with markers (idle-trace)");
  app.add_option("--idle-hook", p.idle_hook, "a program run as PROG before|after I around each idle request (path-pages)");
  app.add_option("--polling", polling, "busy | adaptive")->check(CLI::IsMember({"busy", "adaptive"}));
  CLI11_PARSE(app, argc, argv);
  p.polling = polling == "busy" ? gossamer::Polling::busy : gossamer::Polling::adaptive;

  gossamer::Options o;
  o.threads = p.threads;
  o.polling = p.polling;
  // main runs on host 0 only; host 1's instance serves until host 0's main
  // has returned and the rack is quiet, then run() returns 0 there.
  int r = gossamer::run(o, [p]() -> int { return bench(p); });
  return r;
}
