// Issue 17's workload (item 6): every thread of every host delegates to a
// trustee on each other host in turn for SECONDS (16 apply_then and one
// blocking apply per host per round), so every host pair carries the same
// load in both directions and every receiver's QP scheduler shares its
// limit among equally busy senders. Each (client thread, other host) pair
// has its own counter on that host; at the end the client stores what it
// sent next to what the trustee counted, and host 0 checks they are equal
// (exactly once). Exits non-zero on a mismatch.
//   flock_mesh_app THREADS SECONDS
#include <array>
#include <chrono>
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
  if (argc != 3) {
    std::fprintf(stderr, "usage: flock_mesh_app THREADS SECONDS\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int threads = std::atoi(argv[1]);
  const double seconds = std::atof(argv[2]);
  return gossamer::run(threads, [seconds]() -> int {
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
      std::size_t others = 0;
      for (std::size_t g = 0; g < hosts; ++g) {
        if (g == h) continue;
        counters[t].push_back(gossamer::trustee(first(g) + local % size(g)).entrust(Counter{}));
        refs[others++] = counters[t].back().ref();
      }
      fibers.push_back(gossamer::spawn_on(t, [refs, others, seconds]() {
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        std::array<long, kMaxHosts> sent{};
        while (std::chrono::steady_clock::now() < end) {
          for (std::size_t g = 0; g < others; ++g) {
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
