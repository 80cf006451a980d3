// idle-pages: what touching memory costs after the program slept.
//
// Allocates --mib MiB, writes it all, then for each gap in --gaps: sleeps
// that long and reads one byte of every 4 KiB page, timed with the TSC,
// --rounds times; prints the TSC cycles per page touched and the page faults
// getrusage counted meanwhile (0: the cost is not the guest kernel's). With
// --huge the memory is madvise(MADV_HUGEPAGE)d first (2 MiB pages where
// transparent huge pages allow it; AnonHugePages says how much). On this
// project's VM a page touched after 1 s of sleep costs ~10 k cycles in 4 KiB
// pages and ~100 in 2 MiB ones: the first request after an idle period pays
// that for every page on its path (runtime/PERFORMANCE.md "The first request
// after an idle period").
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

namespace {
long faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"idle-pages: TSC cycles per 4 KiB page touched after a sleep"};
  std::size_t mib = 8, rounds = 3;
  std::vector<double> gaps{0.001, 0.01, 0.05, 0.2, 1.0};
  bool huge = false;
  app.add_option("--mib", mib, "memory to touch")->check(CLI::Range(2, 1024));
  app.add_option("--gaps", gaps, "seconds of sleep before each touch")->check(CLI::Range(0.0, 10.0));
  app.add_option("--rounds", rounds, "touches per gap")->check(CLI::Range(1, 100));
  app.add_flag("--huge", huge, "madvise(MADV_HUGEPAGE) the memory first");
  CLI11_PARSE(app, argc, argv);

  const std::size_t n = mib << 20, page = 4096, align = 2u << 20;
  auto* p = static_cast<volatile char*>(std::aligned_alloc(align, n));
  if (!p) {
    std::fprintf(stderr, "idle-pages: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  if (huge && ::madvise(const_cast<char*>(p), n, MADV_HUGEPAGE) != 0) std::perror("idle-pages: madvise");
  for (std::size_t i = 0; i < n; i += 64) p[i] = char(i);
  std::string thp = "?";
  {
    std::ifstream in("/proc/self/smaps_rollup");
    for (std::string l; std::getline(in, l);)
      if (l.rfind("AnonHugePages:", 0) == 0) thp = l.substr(14);
  }
  std::printf("idle-pages: %zu MiB, %s, AnonHugePages%s\n", mib, huge ? "MADV_HUGEPAGE" : "4 KiB pages", thp.c_str());
  for (double g : gaps)
    for (std::size_t r = 0; r < rounds; ++r) {
      std::this_thread::sleep_for(std::chrono::duration<double>(g));
      const long f0 = faults();
      const std::uint64_t t0 = __builtin_ia32_rdtsc();
      for (std::size_t i = 0; i < n; i += page) (void)p[i];  // volatile: every load happens
      const std::uint64_t t1 = __builtin_ia32_rdtsc();
      const long f1 = faults();
      std::printf("gap %.3f s: %llu cycles per page touched (%zu pages), %ld page faults\n", g,
                  (unsigned long long)((t1 - t0) / (n / page)), n / page, f1 - f0);
    }
  std::free(const_cast<char*>(p));
  return 0;
}
