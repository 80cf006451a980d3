// A rack application for the integration tests: started on every host of a
// rack-in-a-box (same GOSSAMER_RUN_ID), it exercises remote delegation and
// checks its own results. Exits 0 when every check passed; prints what
// differed otherwise.
//   rack_app THREADS [OPS [SIZES]]
// SIZES (comma-separated bytes, e.g. 512,4096,65536,4194304): apply_with
// round trips of those argument and response sizes from host 0 to the last
// trustee (on the last host), checked byte for byte; then, concurrently from
// 16 fibers, the same sizes up to 1 MiB and sizes around the default
// large-request threshold, each counted once by the trustee.
#include <array>
#include <chrono>
#include <cstdint>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gossamer/gossamer.hpp>

#ifdef GOSSAMER_TEST_OTHER_BUILD
extern const char kOtherBuild[] = "another build";
#endif

namespace {
// Counts destructions of properties that were used (value > 0): copies
// that only carried the initial value do not count.
std::atomic<int> g_destroyed{0};
struct Tracked {
  long value = 0;
  Tracked() = default;
  Tracked(const Tracked&) = default;
  ~Tracked() {
    if (value > 0) g_destroyed.fetch_add(1);
  }
  template <class Ar>
  void serialize(Ar& ar) {
    ar(value);
  }
};
int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "CHECK FAILED: %s\n", what.c_str());
    ++failures;
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::size_t threads = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4;
  long ops = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 200;
  std::vector<std::size_t> sizes;
  if (argc > 3)
    for (const char* p = argv[3]; *p;) {
      char* end = nullptr;
      sizes.push_back(std::strtoul(p, &end, 10));
      p = *end == ',' ? end + 1 : end;
      if (end == p && *p) break;
    }
  int r = gossamer::run(threads, [ops, sizes]() -> int {
    std::size_t n = gossamer::thread_count();
    std::printf("host %zu of %zu, %zu threads in the rack\n", gossamer::host_index(),
                gossamer::host_count(), n);
    // One counter on every trustee of the rack.
    std::vector<gossamer::Trust<long>> counters;
    for (std::size_t t = 0; t < n; ++t) counters.push_back(gossamer::trustee(t).entrust(0L));
    // From every thread: sync and async increments to every counter.
    // Closures sent to trustees capture TrustRefs (trivially copyable).
    constexpr std::size_t kMax = 64;
    if (n > kMax) return 100;
    std::array<gossamer::TrustRef<long>, kMax> refs{};
    for (std::size_t t = 0; t < n; ++t) refs[t] = counters[t].ref();
    std::vector<gossamer::FiberHandle> fibers;
    for (std::size_t from = 0; from < n; ++from) {
      fibers.push_back(gossamer::spawn_on(from, [refs, n, ops]() {
        for (std::size_t t = 0; t < n; ++t) {
          for (long i = 0; i < ops; ++i) refs[t].apply_then([](long& v) { return ++v; }, [](long) {});
          for (long i = 0; i < ops / 10; ++i) refs[t].apply([](long& v) { ++v; });
        }
      }));
    }
    for (auto& f : fibers) f.join();
    std::printf("phase: increments joined\n");
    long expect = long(n) * (ops + ops / 10);
    for (std::size_t t = 0; t < n; ++t) {
      long v = counters[t].apply([](long& x) { return x; });
      check(v == expect, "counter on trustee " + std::to_string(t) + " is " + std::to_string(v) +
                             ", expected " + std::to_string(expect));
    }
    std::printf("phase: counters checked\n");
    // apply_with: 5 KB arguments and a 5 KB response across hosts.
    std::string big(5000, 'x');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = char('a' + i % 26);
    for (std::size_t t = 0; t < n; ++t) {
      std::string back = counters[t].apply_with(
          [](long& v, std::string s) {
            v += long(s.size());
            return s + "!";
          },
          big);
      check(back == big + "!", "5 KB round trip through trustee " + std::to_string(t));
      long v = counters[t].apply([](long& x) { return x; });
      check(v == expect + 5000, "apply_with result on trustee " + std::to_string(t));
    }
    std::printf("phase: 5 KB round trips done\n");
    // Large arguments and responses to the last trustee: the response is the
    // argument reversed, plus its size, so every byte and the length count.
    for (std::size_t size : sizes) {
      std::string arg(size, '\0');
      std::uint64_t x = 0x9E3779B97F4A7C15ull ^ size;
      for (auto& c : arg) c = char((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
      auto t0 = std::chrono::steady_clock::now();
      std::string back = counters[n - 1].apply_with(
          [](long&, std::string s) {
            std::string out(s.rbegin(), s.rend());
            out += std::to_string(s.size());
            return out;
          },
          arg);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::string want(arg.rbegin(), arg.rend());
      want += std::to_string(size);
      check(back == want, std::to_string(size) + "-byte apply_with round trip to trustee " + std::to_string(n - 1) +
                              " (got " + std::to_string(back.size()) + " bytes)");
      std::printf("phase: %zu-byte round trip to trustee %zu in %.1f ms\n", size, n - 1, ms);
    }
    // Many large requests at once from fibers of this thread to the last
    // trustee, so that several queue on one channel and ride in one batch
    // (over TCP, several references per batch), with sizes that straddle
    // large_request_threshold_bytes 4096 (rack_gossamerctl.sh brings its
    // rack up with it; the default is 262144): bodies and responses
    // just under, at and just over it. Each must run exactly once (the
    // trustee counts) and come back byte for byte.
    if (!sizes.empty()) {
      std::vector<std::size_t> many;
      for (std::size_t s = 4096 - 48; s <= 4096 + 48; s += 8) many.push_back(s);
      for (std::size_t s : sizes)
        if (s <= (std::size_t(1) << 20)) many.push_back(s);
      auto ran = gossamer::trustee(n - 1).entrust(0L);
      const std::uint64_t tcp0 = gossamer::trustee_stats(0).tcp_bytes_sent;
      constexpr int kFibers = 16;
      std::vector<gossamer::FiberHandle> senders;
      for (int f = 0; f < kFibers; ++f)
        senders.push_back(gossamer::spawn([&ran, &many, f] {
          for (std::size_t size : many) {
            std::string arg(size, '\0');
            std::uint64_t x = 0x9E3779B97F4A7C15ull ^ (size * 131 + std::uint64_t(f));
            for (auto& c : arg) c = char((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
            std::string back = ran.apply_with(
                [](long& v, std::string s) {
                  ++v;
                  return std::string(s.rbegin(), s.rend());
                },
                arg);
            check(back == std::string(arg.rbegin(), arg.rend()),
                  "concurrent " + std::to_string(size) + "-byte round trip (fiber " + std::to_string(f) + ")");
          }
        }));
      for (auto& f : senders) f.join();
      const long want = long(kFibers) * long(many.size());
      const long got = ran.apply([](long& v) { return v; });
      check(got == want, "concurrent large requests ran " + std::to_string(got) + " times, sent " +
                             std::to_string(want));
      std::printf("phase: %ld concurrent large requests (%zu sizes, %zu..%zu bytes) ran exactly once, "
                  "tcp_bytes_sent=%llu\n",
                  want, many.size(), many.front(), many.back(),
                  (unsigned long long)(gossamer::trustee_stats(0).tcp_bytes_sent - tcp0));
    }
    // Trusts copied to and dropped on other hosts: destroyed exactly once.
    std::size_t last = n - 1;
    {
      auto tr = gossamer::trustee(last).entrust(Tracked{});
      // Every trustee receives a copy (serialized), copies it again, uses
      // and drops it, in delegated context.
      for (std::size_t t = 0; t < n; ++t)
        counters[t].apply_with(
            [](long&, gossamer::Trust<Tracked> got) {
              auto copy = got;
              copy.apply_then([](Tracked& x) { return ++x.value; }, [](long) {});
            },
            tr);
      long v = 0;
      for (int spin = 0; spin < 100000 && v < long(n); ++spin) {
        v = tr.apply([](Tracked& x) { return x.value; });
        gossamer::yield();
      }
      check(v == long(n), "tracked value " + std::to_string(v));
    }
    return failures;
  });
  std::printf("run returned %d, destroyed_tracked=%d\n", r, g_destroyed.load());
  std::fflush(stdout);
  return r == 0 ? 0 : 1;
}
