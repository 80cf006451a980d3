// fiber-switch: native nanoseconds per fiber switch, on one runtime thread
// (one core, so a loaded machine disturbs it less than the two-thread
// delegation benchmarks). `--fibers` fibers each call gossamer::yield()
// from `--depth` frames deep, as a blocking apply suspends from a few
// frames below the fiber's loop: each yield is make_ready, the suspend, one
// context switch and the returns the resumed fiber makes up its stack
// (runtime/PERFORMANCE.md, "What a fiber switch costs").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include <gossamer/gossamer.hpp>

namespace {
volatile long sink;

[[gnu::noinline]] void descend(int depth) {
  sink = sink + 1;
  if (depth > 1) descend(depth - 1);
  else gossamer::yield();
  sink = sink + 1;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fiber-switch: ns per fiber switch (gossamer::yield) on one runtime thread"};
  std::size_t fibers = 32, rounds = 5;
  long yields = 100000;
  int depth = 3;
  app.add_option("--fibers", fibers, "fibers on the thread");
  app.add_option("--yields", yields, "yields per fiber per round");
  app.add_option("--depth", depth, "frames between a fiber's loop and its yield")->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "rounds (the best is reported)");
  CLI11_PARSE(app, argc, argv);
  gossamer::Options o;
  o.threads = 1;
  o.polling = gossamer::Polling::busy;
  double best = 1e18;
  std::printf("fiber-switch: %zu fibers, %ld yields each, depth %d; ns per yield:", fibers, yields, depth);
  for (std::size_t r = 0; r < rounds; ++r) {
    double ns = 0;
    gossamer::run(o, [&] {
      std::vector<gossamer::FiberHandle> fs;
      auto t0 = std::chrono::steady_clock::now();
      for (std::size_t f = 0; f < fibers; ++f)
        fs.push_back(gossamer::spawn([yields, depth] {
          for (long i = 0; i < yields; ++i) descend(depth);
        }));
      for (auto& h : fs) h.join();
      ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           (double(fibers) * double(yields));
    });
    best = std::min(best, ns);
    std::printf(" %.2f", ns);
  }
  std::printf("; best %.2f\n", best);
}
