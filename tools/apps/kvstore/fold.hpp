// Folding (fold.cpp): on one host, while other processes of the machine want
// its cores (the clients, most often), the I/O loops run on fewer CPUs and
// give the rest back; when they stop wanting them, the loops spread out
// again (README, How it works: Folding).
#pragma once

#include <sched.h>

#include <cstdint>

namespace hydra {

struct FoldState {
  bool on = false;                 // this host folds (Loop::setup_fold)
  bool warned = false;             // this thread could not move once (fold_round)
  std::uint32_t seen = 0;          // the fold epoch this loop's affinity follows
  cpu_set_t original{};            // this thread's CPUs at start, restored when spreading back
  // The host's first loop decides; these are its own.
  bool leader = false;
  std::uint64_t allowed = 0;       // the CPUs the process started with (bit i: CPU i)
  std::uint32_t allowed_count = 0;
  std::uint32_t cpus = 0;          // the loops' CPUs now
  std::uint32_t next_sample_ms = 0, hold_until_ms = 0;
  // The last samples: the machine's busy ticks, this process's CPU time
  // (µs), and when.
  struct Sample {
    long long busy = 0, own = 0;
    std::uint32_t ms = 0;
  };
  static constexpr std::uint32_t kRing = 16;
  Sample ring[kRing];
  std::uint64_t samples = 0;       // taken so far
  long hz = 0;                     // USER_HZ
  int stat_fd = -1;                // /proc/stat
};

// INFO's hydra_fold_cpus (0 when this host does not fold) and hydra_fold_changes.
std::uint32_t fold_cpus();
std::uint64_t fold_changes();

}  // namespace hydra
