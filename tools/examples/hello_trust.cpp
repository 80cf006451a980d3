// The single-host example of the runtime issue, with its results printed and
// checked: exits non-zero if delegation misbehaves.
#include <cstdio>
#include <string>
#include <vector>

#include <gossamer/gossamer.hpp>

int main(int argc, char** argv) {
  std::size_t threads = argc > 1 ? std::stoul(argv[1]) : 4;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%-60s %s\n", what, ok ? "ok" : "FAILED");
    failures += !ok;
  };
  int rc = gossamer::run(threads, [&] {
    gossamer::Trust<int> ct = gossamer::local_trustee().entrust(17);
    auto ct2 = ct;  // copy = new reference, not a new property
    auto f = gossamer::spawn([ct2] { ct2.apply([](int& c) { c += 1; }); });
    ct.apply([](int& c) { c += 1; });
    f.join();
    int v = ct.apply([](int& c) { return c; });
    expect(v == 19, "apply from two fibers: counter is 19");

    int seen = 0;
    ct.apply_then([](int& c) { return ++c; }, [&seen](int r) { seen = r; });
    int n = ct.apply_with([](int& c, std::string s) { return c + int(s.size()); },
                          std::string(5000, 'x'));
    expect(n == 5020, "apply_with a 5000-byte string argument");
    expect(seen == 20, "apply_then callback ran with the new value");

    auto lt = gossamer::trustee(threads > 1 ? 1 : 0).entrust(gossamer::Latch<std::vector<int>>{});
    auto r = ct.ref();  // TrustRef<int>: trivially copyable, may be captured
    lt.launch([r](gossamer::Latch<std::vector<int>>& l) {
      int x = r.apply([](int& c) { return c; });  // nested blocking delegation
      l.lock()->push_back(x);
    });
    auto size = lt.launch([](gossamer::Latch<std::vector<int>>& l) {
      auto g = l.lock();
      return g->empty() ? -1 : (*g)[0];
    });
    expect(size == 20, "launch on a Latch ran nested blocking delegation");

    // Remote trustee: a counter on every thread, incremented by every thread.
    std::vector<gossamer::Trust<long>> counters;
    for (std::size_t t = 0; t < gossamer::thread_count(); ++t)
      counters.push_back(gossamer::trustee(t).entrust(0L));
    std::vector<gossamer::FiberHandle> workers;
    for (std::size_t t = 0; t < gossamer::thread_count(); ++t) {
      gossamer::TrustRef<long> refs[64];
      for (std::size_t i = 0; i < counters.size() && i < 64; ++i) refs[i] = counters[i].ref();
      std::size_t k = counters.size();
      workers.push_back(gossamer::spawn_on(t, [refs, k] {
        for (int rep = 0; rep < 1000; ++rep)
          for (std::size_t i = 0; i < k; ++i) refs[i].apply([](long& c) { ++c; });
      }));
    }
    for (auto& w : workers) w.join();
    bool all = true;
    for (auto& c : counters) all &= c.apply([](long& x) { return x; }) == long(1000 * threads);
    expect(all, "every thread incremented every trustee's counter 1000 times");
  });
  std::printf("%zu threads; per-trustee requests served:", threads);
  for (std::size_t t = 0; t < threads; ++t)
    std::printf(" %llu", (unsigned long long)gossamer::trustee_stats(t).requests_served);
  std::printf("\n%s\n", failures ? "hello-trust: FAILED" : "hello-trust: all ok");
  return rc != 0 ? rc : failures != 0;
}
