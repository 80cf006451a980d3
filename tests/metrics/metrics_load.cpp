// Workload for the metrics integration test (tests/metrics/prometheus_rack.sh):
// started on every host of a rack with `gossamerctl run`, it keeps every
// thread delegating to every trustee of the rack (so to trustees on both
// hosts) for a given number of seconds, so that every series of the catalog
// (monitoring/README.md) moves: sync `apply`, async `apply_then`, and every
// few rounds a 3 KiB or 320 KiB std::vector argument with `apply_with` /
// `apply_with_then` (3 KiB: two frames' worth, in fragments; 320 KiB, over
// the default threshold of 256 KiB: over the TCP connections gossamerd
// brokers), some answered with a response as large. It checks every result
// and exits non-zero on a mismatch.
//   metrics_load SECONDS [THREADS]
// Output (host 0): "thread T host H" for every thread, once at the start
// (the test builds the expected thread list of `gossamerctl top` from it),
// then per host a summary line "host H: ... checks passed" or CHECK FAILED
// lines.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gossamer/gossamer.hpp>

namespace {
constexpr std::size_t kMaxThreads = 64;
constexpr int kAsyncPerRound = 16;    // apply_then per trustee per round
constexpr long kLargeEvery = 8;       // rounds between large requests
constexpr std::size_t kLargeBytes = 320 * 1024;  // over the default threshold (256 KiB): over TCP
constexpr std::size_t kMediumBytes = 3 * 1024;   // under it, over a frame (MTU 1500): in fragments

// A counter with the number of increments its clients say they sent.
struct Cell {
  long count = 0;
  long expected = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(count, expected);
  }
};

// Per process (host): only this host's threads touch them.
std::atomic<long> g_failures{0};
std::atomic<long> g_async_sent{0}, g_async_done{0};
std::atomic<long> g_sync{0}, g_large{0};

std::atomic<long> g_host{-1};

void fail(const std::string& what) {
  if (g_failures.fetch_add(1) < 20) std::fprintf(stderr, "CHECK FAILED: %s\n", what.c_str());
}

std::uint64_t digest(const std::vector<std::uint8_t>& v) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ v.size();
  for (std::uint8_t b : v) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

void fill(std::vector<std::uint8_t>& v, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) b = std::uint8_t((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
}
}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    std::fprintf(stderr, "usage: metrics_load SECONDS [THREADS]\n");
    return 2;
  }
  const double seconds = std::strtod(argv[1], nullptr);
  const std::size_t threads = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4;
  if (!(seconds > 0) || threads == 0) {
    std::fprintf(stderr, "metrics_load: bad arguments\n");
    return 2;
  }
  int r = gossamer::run(threads, [seconds]() -> int {
    const std::size_t n = gossamer::thread_count();
    if (n > kMaxThreads) {
      std::fprintf(stderr, "metrics_load: at most %zu threads\n", kMaxThreads);
      return 2;
    }
    std::vector<gossamer::Trust<Cell>> cells;
    for (std::size_t t = 0; t < n; ++t) cells.push_back(gossamer::trustee(t).entrust(Cell{}));
    std::array<gossamer::TrustRef<Cell>, kMaxThreads> refs{};
    for (std::size_t t = 0; t < n; ++t) refs[t] = cells[t].ref();
    // Where every thread runs, asked of the thread itself.
    std::size_t hosts_seen = 0, last_host = ~std::size_t(0);
    for (std::size_t t = 0; t < n; ++t) {
      std::size_t h = cells[t].apply([](Cell&) { return gossamer::host_index(); });
      if (h != last_host) ++hosts_seen, last_host = h;
      std::printf("thread %zu host %zu\n", t, h);
    }
    std::printf("%zu threads on %zu hosts, %.0f s of load\n", n, gossamer::host_count(), seconds);
    if (gossamer::host_count() >= 2 && hosts_seen < 2) fail("threads on fewer than 2 hosts");

    std::vector<gossamer::FiberHandle> fibers;
    for (std::size_t from = 0; from < n; ++from) {
      fibers.push_back(gossamer::spawn_on(from, [refs, n, seconds, from]() {
        using clock = std::chrono::steady_clock;
        g_host.store(long(gossamer::host_index()));
        const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                                 std::chrono::duration<double>(seconds));
        std::array<long, kMaxThreads> sent{};
        std::vector<std::uint8_t> big(kLargeBytes);
        for (long round = 0; clock::now() < deadline; ++round) {
          for (std::size_t t = 0; t < n; ++t) {
            for (int i = 0; i < kAsyncPerRound; ++i) {
              g_async_sent.fetch_add(1, std::memory_order_relaxed);
              refs[t].apply_then([](Cell& c) { return ++c.count; },
                                 [t](long v) {
                                   if (v <= 0) fail("apply_then on trustee " + std::to_string(t) + " returned " +
                                                    std::to_string(v));
                                   g_async_done.fetch_add(1, std::memory_order_relaxed);
                                 });
            }
            long v = refs[t].apply([](Cell& c) { return ++c.count; });
            if (v <= 0) fail("apply on trustee " + std::to_string(t) + " returned " + std::to_string(v));
            sent[t] += kAsyncPerRound + 1;
            g_sync.fetch_add(1, std::memory_order_relaxed);
          }
          if (round % kLargeEvery != 0) continue;
          // A large body to every trustee in turn (most of them on the other host).
          const long k = round / kLargeEvery;
          const std::size_t t = (from + 1 + std::size_t(k)) % n;
          big.resize(k % 2 ? kLargeBytes : kMediumBytes);
          fill(big, (std::uint64_t(from) << 32) ^ std::uint64_t(k));
          const std::uint64_t want = digest(big);
          switch (k % 3) {
            case 0: {  // large request, small response
              std::uint64_t got = refs[t].apply_with(
                  [](Cell& c, std::vector<std::uint8_t> v) {
                    ++c.count;
                    return digest(v);
                  },
                  big);
              if (got != want) fail("large apply_with digest from trustee " + std::to_string(t));
              break;
            }
            case 1: {  // large request and large response: the bytes reversed
              std::vector<std::uint8_t> back = refs[t].apply_with(
                  [](Cell& c, std::vector<std::uint8_t> v) {
                    ++c.count;
                    return std::vector<std::uint8_t>(v.rbegin(), v.rend());
                  },
                  big);
              if (back.size() != big.size() || !std::equal(back.rbegin(), back.rend(), big.begin()))
                fail("large apply_with round trip through trustee " + std::to_string(t) + " (got " +
                     std::to_string(back.size()) + " bytes)");
              break;
            }
            default: {  // async large request
              g_async_sent.fetch_add(1, std::memory_order_relaxed);
              refs[t].apply_with_then(
                  [](Cell& c, std::vector<std::uint8_t> v) {
                    ++c.count;
                    return digest(v);
                  },
                  [want, t](std::uint64_t got) {
                    if (got != want) fail("large apply_with_then digest from trustee " + std::to_string(t));
                    g_async_done.fetch_add(1, std::memory_order_relaxed);
                  },
                  big);
            }
          }
          sent[t] += 1;
          g_large.fetch_add(1, std::memory_order_relaxed);
        }
        // Tell every trustee how many increments this fiber sent it.
        for (std::size_t t = 0; t < n; ++t) {
          long k = sent[t];
          refs[t].apply([k](Cell& c) { c.expected += k; });
        }
      }));
    }
    for (auto& f : fibers) f.join();
    // Every fiber has finished; the last of its async requests may still be
    // on their way (they are answered before run() returns): wait for the
    // counts to reach what was sent, never beyond.
    long total = 0;
    for (std::size_t t = 0; t < n; ++t) {
      Cell c{};
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (;;) {
        c = cells[t].apply([](Cell& x) { return x; });
        if (c.count >= c.expected || std::chrono::steady_clock::now() > until) break;
        gossamer::yield();
      }
      if (c.count != c.expected || c.expected <= 0)
        fail("trustee " + std::to_string(t) + " counted " + std::to_string(c.count) + " increments, clients sent " +
             std::to_string(c.expected));
      total += c.count;
    }
    std::printf("%ld increments on %zu trustees\n", total, n);
    return 0;
  });
  // run() has returned: every request of this host's threads was answered.
  long sent = g_async_sent.load(), done = g_async_done.load();
  if (sent != done) fail("async requests sent " + std::to_string(sent) + ", answered " + std::to_string(done));
  long failures = g_failures.load();
  std::printf("host %ld: run returned %d; %ld async, %ld sync, %ld large requests; %s\n", g_host.load(), r,
              sent, g_sync.load(), g_large.load(), failures == 0 ? "checks passed" : "CHECKS FAILED");
  std::fflush(stdout);
  return r == 0 && failures == 0 ? 0 : 1;
}
