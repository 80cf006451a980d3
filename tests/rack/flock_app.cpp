// Issue 7's workload: every thread of host 0 delegates to a trustee on the
// last host for SECONDS; one thread in ten sends 8 KiB arguments
// (apply_with), the others 32-byte closures. Every request is counted on
// both sides; exits non-zero if a trustee saw more or fewer than were sent
// (exactly once), printing what differed. Prints "large thread G" for each
// thread that sent large requests, so the test can find them in the
// dataplane's thread placement. The last line also gives the rates and the
// latency of the small threads' blocking applies (tools/bench/flock).
//   flock_app THREADS SECONDS
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gossamer/gossamer.hpp>

namespace {
constexpr std::size_t kMax = 64;
constexpr std::size_t kLarge = 8192;

struct Counts {
  long small = 0, large = 0, bytes = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(small, large, bytes);
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: flock_app THREADS SECONDS\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const double seconds = std::atof(argv[2]);
  return gossamer::run(threads, [seconds]() -> int {
    const std::size_t n = gossamer::thread_count(), hosts = gossamer::host_count();
    if (n > kMax || hosts < 2) return 100;
    // The threads of host 0 and of the last host (rack-wide ids, spread evenly).
    std::vector<std::size_t> mine, theirs;
    for (std::size_t t = 0; t < n; ++t) {
      if (t * hosts / n == 0) mine.push_back(t);
      if (t * hosts / n == hosts - 1) theirs.push_back(t);
    }
    // Where the runtime puts thread t: the evenly spread share per host.
    // (host_threads in abi/attach.hpp: host h holds a contiguous range.)
    std::vector<gossamer::Trust<Counts>> counts;
    std::array<gossamer::TrustRef<Counts>, kMax> refs{};
    for (std::size_t i = 0; i < mine.size(); ++i) {
      counts.push_back(gossamer::trustee(theirs[i % theirs.size()]).entrust(Counts{}));
      refs[i] = counts.back().ref();
    }
    std::array<long, kMax> sent_small{}, sent_large{};
    std::array<std::vector<float>, kMax> latency_us{};  // the small threads' blocking applies
    std::vector<gossamer::FiberHandle> fibers;
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const bool large = i % 10 == 0;
      if (large) std::printf("large thread %zu\n", mine[i]);
      long* ss = &sent_small[i];
      long* sl = &sent_large[i];
      std::vector<float>* lat = &latency_us[i];
      // Host 0's threads: the pointers stay on host 0 (spawn_on to a local thread).
      fibers.push_back(gossamer::spawn_on(mine[i], [r = refs[i], large, end, ss, sl, lat]() {
        std::vector<unsigned char> payload(kLarge, 0x5a);
        while (std::chrono::steady_clock::now() < end) {
          if (large) {
            long got = r.apply_with(
                [](Counts& c, std::vector<unsigned char> v) {
                  ++c.large;
                  c.bytes += long(v.size());
                  return long(v.size());
                },
                payload);
            if (got != long(kLarge)) std::abort();
            ++*sl;
          } else {
            for (int k = 0; k < 16; ++k) r.apply_then([](Counts& c) { ++c.small; }, [] {});
            const auto t0 = std::chrono::steady_clock::now();
            r.apply([](Counts& c) { ++c.small; });
            lat->push_back(std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - t0).count());
            *ss += 17;
          }
        }
      }));
    }
    for (auto& f : fibers) f.join();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int bad = 0;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      Counts c = counts[i].apply([](Counts& x) { return x; });
      if (c.small != sent_small[i] || c.large != sent_large[i] || c.bytes != sent_large[i] * long(kLarge)) {
        std::printf("MISMATCH thread %zu: trustee saw %ld small, %ld large (%ld bytes); sent %ld small, %ld large\n",
                    mine[i], c.small, c.large, c.bytes, sent_small[i], sent_large[i]);
        ++bad;
      }
    }
    long total_small = 0, total_large = 0;
    for (std::size_t i = 0; i < mine.size(); ++i) total_small += sent_small[i], total_large += sent_large[i];
    std::vector<float> all;
    for (const auto& v : latency_us) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    auto pct = [&](double q) { return all.empty() ? 0.0 : double(all[std::size_t(q * double(all.size() - 1))]); };
    std::printf("flock_app: %ld small and %ld large requests, each counted once: %s small_rps=%.0f large_rps=%.0f "
                "p50_us=%.1f p99_us=%.1f\n",
                total_small, total_large, bad ? "NO" : "yes", double(total_small) / took, double(total_large) / took,
                pct(0.5), pct(0.99));
    return bad ? 1 : 0;
  });
}
