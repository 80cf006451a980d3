// The dataplane's incarnation: the 64-bit number every frame it sends
// carries in `boot` (wire.hpp), which its peers compare, as plain unsigned
// 64-bit numbers, with the one they knew: larger is a restart, smaller a
// frame from a previous life (dropped). So an incarnation must be larger
// than every earlier incarnation of the same host, and never reused.
//
//   incarnation = max(CLOCK_REALTIME in ns, last + 1)
//
// where `last` is the previous incarnation of this host, kept in a state
// file the dataplane owns (dataplane.incarnation_file) and replaced before
// the new incarnation sends its first frame (write a temporary file, fsync
// it, rename it over the old one, fsync the directory: the file holds the
// old number or the new one, never a torn one).
//
// The clock going backwards (an NTP step, a wrong RTC at boot) cannot bring
// an incarnation back: last + 1 wins. Only a lost state file *and* a clock
// behind the lost number can: the peers then take the new incarnation for
// an old one and drop its frames (stale_boot) until they restart
// themselves. Keep the file on persistent storage.
//
// Two dataplanes for the same host sharing the file (a second one started
// by hand, a supervisor that did not wait): the first takes an exclusive
// lock on `<file>.lock` (flock, held until it exits; the kernel releases it
// with the process however it ends) and the second refuses to start, naming
// the file and the holder's pid. Two of them would share one address and
// one host index, and each would reset the peers' connections to the
// other. Two dataplanes for the same host on different machines do not
// share a file: nothing here can see that, and the peers follow whichever
// restarted last.
#pragma once

#include <cstdint>
#include <string>

namespace gossamer::dataplane {

class Incarnation {
 public:
  Incarnation() = default;
  Incarnation(const Incarnation&) = delete;
  Incarnation& operator=(const Incarnation&) = delete;
  ~Incarnation();  // releases the lock

  // Locks `path`.lock (creating the directory if needed), reads the last
  // incarnation from `path` (a missing file is a first start), and persists
  // the next one: max(now_ns, last + 1), at least 1. Returns "" and sets
  // value(), or an error naming the file (unreadable, corrupt, locked by
  // another dataplane, cannot be written).
  std::string next(const std::string& path, std::uint64_t now_ns);
  std::uint64_t value() const { return value_; }

  // CLOCK_REALTIME in nanoseconds since the epoch.
  static std::uint64_t realtime_ns();

 private:
  int lock_fd_ = -1;
  std::uint64_t value_ = 0;
};

}  // namespace gossamer::dataplane
