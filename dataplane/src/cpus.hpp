// Where the polling cores run (dataplane.cpus). DPDK's EAL, given no core
// list, pins its main thread to the first CPU of the affinity mask, and
// threads started later inherit that: every polling core of every dataplane
// on a machine ended up on CPU 0. The plan is made from the mask the process
// started with, before the EAL changes it.
#pragma once

#include <sched.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gossamer::dataplane {

class CpuPlan {
 public:
  // Reads the calling thread's affinity mask: call before the EAL starts.
  // `cpus`: dataplane.cpus, one per polling core, or empty; `eal_args`:
  // dataplane.eal_args, which may choose cores themselves (-l, -c,
  // --lcores): then, without `cpus`, the threads stay where the EAL put them.
  CpuPlan(std::vector<std::uint32_t> cpus, const std::vector<std::string>& eal_args);

  // "" or why the configured CPUs cannot be used (one outside the mask).
  std::string check() const;
  // The EAL arguments to add that keep its threads on the whole mask
  // ("--lcores=0@(..)"), or none when dataplane.eal_args choose cores.
  std::vector<std::string> extra_eal_args() const;
  // Moves the calling thread to polling core `core`'s CPU (dataplane.cpus)
  // or back onto the whole mask (unless the EAL arguments chose cores).
  // Returns "" or the error.
  std::string apply(std::uint32_t core) const;
  // "CPU 2" or "CPUs 0-1": where core `core` may run, for the log.
  std::string describe(std::uint32_t core) const;

 private:
  cpu_set_t allowed_;
  std::vector<std::uint32_t> cpus_;
  std::vector<std::uint32_t> allowed_list_;
  bool eal_chooses_ = false;
};

}  // namespace gossamer::dataplane
