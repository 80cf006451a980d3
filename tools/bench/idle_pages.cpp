// idle-pages: what touching memory costs after the program slept.
//
// Allocates --mib MiB, writes it all, then for each gap in --gaps: sleeps
// that long and reads one byte of every 4 KiB page, timed with the TSC,
// --rounds times; prints the TSC cycles per page touched and the page faults
// getrusage counted meanwhile (0: the cost is not the guest kernel's).
// --backing says what the memory is:
//   anon        private anonymous memory in 4 KiB pages (MADV_NOHUGEPAGE)
//   thp         the same, madvise(MADV_HUGEPAGE)d (--huge): 2 MiB pages where
//               transparent huge pages are `madvise` or `always`
//   memfd       a memfd (shmem), mapped shared, in 4 KiB pages
//   memfd-huge  a memfd put in 2 MiB pages as the shared segment is
//               (huge_pages.hpp: MADV_COLLAPSE), then read
//               through a second mapping of it, as the dataplane maps it
// It prints how much of the region the kernel maps with 2 MiB pages
// (/proc/self/smaps: AnonHugePages, ShmemPmdMapped, FilePmdMapped). On this
// project's VM a page touched after 1 s of sleep costs ~10 k cycles in 4 KiB
// pages and ~100 in 2 MiB ones: the first request after an idle period pays
// that for every page on its path (runtime/PERFORMANCE.md "The first request
// after an idle period").
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
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
#include "huge_pages.hpp"

namespace {
long faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}

// The smaps fields of the mapping that starts at `p`: Rss and the 2 MiB parts.
std::string smaps_of(const void* p) {
  char head[32];
  std::snprintf(head, sizeof head, "%lx-", (unsigned long)(std::uintptr_t)p);
  std::ifstream in("/proc/self/smaps");
  std::string out;
  bool mine = false;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && std::isxdigit((unsigned char)l[0]) && l.find('-') != std::string::npos && l.find(' ') > l.find('-')) {
      mine = l.rfind(head, 0) == 0;
      continue;
    }
    if (!mine) continue;
    for (const char* k : {"Rss:", "AnonHugePages:", "ShmemPmdMapped:", "FilePmdMapped:"})
      if (l.rfind(k, 0) == 0) {
        std::size_t v = l.find_first_not_of(' ', std::strlen(k));
        out += std::string(" ") + k + l.substr(v);
      }
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"idle-pages: TSC cycles per 4 KiB page touched after a sleep"};
  std::size_t mib = 8, rounds = 3;
  std::vector<double> gaps{0.001, 0.01, 0.05, 0.2, 1.0};
  bool huge = false;
  std::string backing = "anon";
  app.add_option("--mib", mib, "memory to touch")->check(CLI::Range(2, 1024));
  app.add_option("--gaps", gaps, "seconds of sleep before each touch")->check(CLI::Range(0.0, 10.0));
  app.add_option("--rounds", rounds, "touches per gap")->check(CLI::Range(1, 100));
  app.add_flag("--huge", huge, "the same as --backing thp");
  app.add_option("--backing", backing, "anon | thp | memfd | memfd-huge (see the source)")
      ->check(CLI::IsMember({"anon", "thp", "memfd", "memfd-huge"}));
  CLI11_PARSE(app, argc, argv);
  if (huge) backing = "thp";

  const std::size_t n = mib << 20, page = 4096;
  volatile char* p = nullptr;
  std::string note;
  if (backing == "anon" || backing == "thp") {
    void* m = gossamer::abi::map_huge_aligned(-1, n, PROT_READ | PROT_WRITE, MAP_PRIVATE);
    if (m != MAP_FAILED) ::madvise(m, n, backing == "thp" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    p = m == MAP_FAILED ? nullptr : static_cast<volatile char*>(m);
  } else {
    int fd = ::memfd_create("idle-pages", MFD_CLOEXEC);
    if (fd >= 0 && ::ftruncate(fd, off_t(n)) == 0) {
      void* m = gossamer::abi::map_huge_aligned(fd, n, PROT_READ | PROT_WRITE, MAP_SHARED);
      if (m != MAP_FAILED && backing == "memfd-huge") {
        std::string why = gossamer::abi::make_huge(m, n);
        note = why.empty() ? " (collapsed)" : " (make_huge: " + why + ")";
        // Read through a second mapping, as the dataplane reads the segment.
        void* v = gossamer::abi::map_huge_aligned(fd, n, PROT_READ | PROT_WRITE, MAP_SHARED);
        if (v != MAP_FAILED) ::madvise(v, n, MADV_HUGEPAGE);
        m = v;
      }
      p = m == MAP_FAILED ? nullptr : static_cast<volatile char*>(m);
    }
  }
  if (!p) {
    std::fprintf(stderr, "idle-pages: cannot map %zu MiB (%s): %s\n", mib, backing.c_str(), std::strerror(errno));
    return 1;
  }
  for (std::size_t i = 0; i < n; i += 64) p[i] = char(i);
  std::printf("idle-pages: %zu MiB, %s%s:%s\n", mib, backing.c_str(), note.c_str(), smaps_of(const_cast<char*>(p)).c_str());
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
  ::munmap(const_cast<char*>(p), n);
  return 0;
}
