// A rack application for rack_delegation.sh (main runs on host 0, thread
// 0; started on every host with one GOSSAMER_RUN_ID): 64 fibers of it
// each make ROUNDS blocking applies to a counter on the last host's
// trustee, so that every pass of host 0's loop queues up to 64 requests
// for that one trustee. Checks the counter's total and prints
//   pipeline requests=N
// The test divides N by the slot records host 0's dataplane sent
// (kRemoteEagerBatch, runtime/src/worker.hpp: a thread sends an idle
// remote channel's queue when a fiber blocks with 32 records waiting, so
// the batches carry 32 requests on average, where the build before sent
// one batch of 64 per pass).
//   pipeline_app [ROUNDS]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <gossamer/gossamer.hpp>

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const long rounds = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 2000;
  constexpr long kFibers = 64;
  return gossamer::run(2, [rounds]() -> int {
    if (gossamer::host_count() < 2) {
      std::fprintf(stderr, "pipeline_app: needs a rack of 2 hosts or more\n");
      return 2;
    }
    const std::size_t last = gossamer::thread_count() - 1;
    gossamer::Trust<long> counter = gossamer::trustee(last).entrust(0L);
    gossamer::TrustRef<long> ref = counter.ref();
    std::vector<gossamer::FiberHandle> fibers;
    for (long f = 0; f < kFibers; ++f)
      fibers.push_back(gossamer::spawn([ref, rounds] {
        for (long i = 0; i < rounds; ++i) ref.apply([](long& v) { ++v; });
      }));
    for (auto& f : fibers) f.join();
    const long total = counter.apply([](long& v) { return v; });
    std::printf("pipeline requests=%ld\n", kFibers * rounds);
    if (total != kFibers * rounds) {
      std::fprintf(stderr, "CHECK FAILED: the counter is %ld, expected %ld\n", total, kFibers * rounds);
      return 1;
    }
    return 0;
  });
}
