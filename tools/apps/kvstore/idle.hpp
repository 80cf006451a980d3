// The I/O loop's idle state (idle.cpp): how long it has had nothing to do,
// and whether it is about to nap, so that the other loops of its host wake
// it when they give its trustee work or answer it.
#pragma once

#include <chrono>
#include <cstdint>

namespace hydra {

// The epoll tag of a loop's wake-up eventfd (io_loop.cpp's listener is ~0).
constexpr std::uint64_t kWakeTag = ~std::uint64_t(0) - 1;

struct IdleState {
  // One host (no dataplane), as many threads as cores: the loops kick
  // each other (kicks), so a loop with nothing to do naps at once, answers
  // owed or not (naps: it has its eventfd; Loop::idle).
  bool kicks = false, naps = false;
  bool announced = false;               // this loop said it is about to nap (Loop::announce)
  std::uint64_t announced_activity = 0; // its trustee's activity then
  std::uint64_t kick_activity = 0;      // what this thread sent and served, at the last kick check
  int wake_fd = -1;                     // eventfd in the epoll set, written by the kicks
  // Without --idle-kicks the naps of `naps` happen only while the machine's
  // other runnable tasks could take every core (Loop::sample_contention).
  bool adaptive = false, contended = false;
  int loadavg_fd = -1;                  // /proc/loadavg, read every 5 ms of idle rounds
  float contention = 0;                 // the share of recent samples that found the cores wanted
  std::uint32_t sample_rounds = 0;
  std::uint32_t next_sample_ms = 0;
  bool sampled = false;                 // next_sample_ms is set
  // A rack: nap only after 20 ms of a quiet trustee (Loop::idle).
  bool quiet = false;
  std::uint64_t last_activity = 0;
  std::chrono::steady_clock::time_point quiet_since{};
};

}  // namespace hydra
