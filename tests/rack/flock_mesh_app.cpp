// Issue 17's workload (item 6): every thread of every host delegates to a
// trustee on each other host in turn for SECONDS (16 apply_then and one
// blocking apply per host per round), so every host pair carries the same
// load in both directions and every receiver's QP scheduler shares its
// limit among equally busy senders. Each (client thread, other host) pair
// has its own counter on that host; at the end the client stores what it
// sent next to what the trustee counted, and host 0 checks they are equal
// (exactly once). Exits non-zero on a mismatch. With QUIET_HOST FROM UNTIL
// PERIOD, that host is left out in the first half of every PERIOD seconds
// from FROM to UNTIL seconds into the run: its threads send nothing (they
// yield) and the others skip it, so the other hosts' schedulers see it go
// dormant and come back, again and again.
//   flock_mesh_app THREADS SECONDS [QUIET_HOST FROM UNTIL PERIOD]
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <gossamer/abi/attach.hpp>
#include <gossamer/gossamer.hpp>

namespace {
constexpr std::size_t kMaxThreads = 64, kMaxHosts = 8;

struct Counter {
  long got = 0;   // requests the trustee ran
  long sent = -1; // requests the client sent, stored by the client at the end
  template <class Ar>
  void serialize(Ar& ar) {
    ar(got, sent);
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 7) {
    std::fprintf(stderr, "usage: flock_mesh_app THREADS SECONDS [QUIET_HOST FROM UNTIL PERIOD]\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int threads = std::atoi(argv[1]);
  const double seconds = std::atof(argv[2]);
  const bool quiet_given = argc == 7;
  const long quiet_host = quiet_given ? std::atol(argv[3]) : -1;
  const double quiet_from = quiet_given ? std::atof(argv[4]) : 0, quiet_until = quiet_given ? std::atof(argv[5]) : 0;
  const double period = quiet_given ? std::atof(argv[6]) : 1;
  return gossamer::run(threads, [seconds, quiet_host, quiet_from, quiet_until, period]() -> int {
    const std::size_t n = gossamer::thread_count(), hosts = gossamer::host_count();
    if (n > kMaxThreads || hosts < 2 || hosts > kMaxHosts) return 100;
    // Host h holds threads [first(h), first(h) + size(h)) (abi::host_threads).
    auto first = [&](std::size_t h) {
      std::uint32_t f = 0, c = 0;
      gossamer::abi::host_threads(std::uint32_t(n), std::uint32_t(hosts), std::uint32_t(h), &f, &c);
      return std::size_t(f);
    };
    auto size = [&](std::size_t h) { return (h + 1 < hosts ? first(h + 1) : n) - first(h); };
    auto host_of = [&](std::size_t t) {
      std::size_t h = 0;
      while (h + 1 < hosts && first(h + 1) <= t) ++h;
      return h;
    };
    // Thread t's counter on host g: on g's thread with t's local index.
    std::vector<std::vector<gossamer::Trust<Counter>>> counters(n);
    std::vector<gossamer::FiberHandle> fibers;
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t h = host_of(t), local = t - first(h);
      std::array<gossamer::TrustRef<Counter>, kMaxHosts> refs{};
      std::size_t others = 0, skip = kMaxHosts;  // refs[skip]: the quiet host's
      for (std::size_t g = 0; g < hosts; ++g) {
        if (g == h) continue;
        if (long(g) == quiet_host) skip = others;
        counters[t].push_back(gossamer::trustee(first(g) + local % size(g)).entrust(Counter{}));
        refs[others++] = counters[t].back().ref();
      }
      const bool quiet = long(h) == quiet_host;
      fibers.push_back(gossamer::spawn_on(t, [refs, others, skip, seconds, quiet, quiet_from, quiet_until, period]() {
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
        std::array<long, kMaxHosts> sent{};
        for (double now = 0; now < seconds; now = elapsed()) {
          const bool hush = now >= quiet_from && now < quiet_until && std::fmod(now - quiet_from, period) < period / 2;
          if (hush && quiet) {
            gossamer::yield();
            continue;
          }
          for (std::size_t g = 0; g < others; ++g) {
            if (hush && g == skip) continue;
            for (int k = 0; k < 16; ++k) refs[g].apply_then([](Counter& c) { ++c.got; }, [] {});
            refs[g].apply([](Counter& c) { ++c.got; });
            sent[g] += 17;
          }
        }
        for (std::size_t g = 0; g < others; ++g) refs[g].apply([s = sent[g]](Counter& c) { c.sent = s; });
      }));
    }
    for (auto& f : fibers) f.join();
    long total = 0;
    int bad = 0;
    for (std::size_t t = 0; t < n; ++t)
      for (auto& c : counters[t]) {
        const Counter v = c.apply([](Counter& x) { return x; });
        total += v.sent;
        if (v.got != v.sent) {
          std::printf("MISMATCH thread %zu: trustee ran %ld, client sent %ld\n", t, v.got, v.sent);
          ++bad;
        }
      }
    std::printf("flock_mesh_app: %zu hosts, %zu threads, %ld requests, each counted once: %s rps=%.0f\n", hosts, n,
                total, bad ? "NO" : "yes", double(total) / seconds);
    return bad ? 1 : 0;
  });
}
