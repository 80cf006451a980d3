// What gossamerd's source files share (daemon.hpp has the class): the
// timeouts and limits, a run's state, and small helpers.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "daemon.hpp"

namespace gossamer::cp {

inline constexpr auto kHandshakeTimeout = std::chrono::seconds(2);
inline constexpr auto kRedialDelay = std::chrono::milliseconds(250);
inline constexpr auto kPrepareTimeout = std::chrono::seconds(10);
inline constexpr auto kKillDelay = std::chrono::seconds(1);       // SIGTERM, then SIGKILL
inline constexpr auto kDrainLimit = std::chrono::milliseconds(500);  // output after the exit
inline constexpr auto kMaxDataplaneBackoff = std::chrono::milliseconds(10'000);
inline constexpr auto kDataplaneStable = std::chrono::seconds(10);
inline constexpr std::size_t kOutputBacklog = 8u << 20;  // pause an instance's pipes above this
inline constexpr std::size_t kCtlBacklogLimit = 64u << 20;  // gossamerctl not reading: fail the run
inline constexpr std::size_t kHashChunk = 4u << 20;         // bytes hashed between other work
inline constexpr auto kSlowSpawn = std::chrono::milliseconds(100);  // logged: spawn() held the loop
inline constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
// A host that is not the origin gives up on its bulk connections this long
// after the Prepare, and says which one is missing: before the origin's
// kPrepareTimeout, which could only say that the host did not answer.
inline constexpr auto kBulkTimeout = std::chrono::seconds(8);
// Authenticated bulk connections for runs this host does not know yet (the
// Prepare may come after the peer's dial), per peer host.
inline constexpr std::size_t kMaxPendingBulk = 64;
inline constexpr std::size_t kRememberEnded = 256;  // run ids, see forget_run()

// A run's id: abi::kIssuedRunPrefix ("gossamerd-") and 32 random hex digits.
std::string random_id();
// "exited with status 3", "killed by signal 9 (SIGKILL)".
std::string describe_exit(int code, int sig);
// fork + exec with stdin from /dev/null and the given stdout/stderr; the child
// gets its own process group (so a stop reaches whatever it forked) and dies
// with this daemon. Of the other descriptors it keeps `keep` (>= 3) only.
// With `as`, the child takes that user's groups, gid and uid (run_as.hpp
// become) before anything else it does. Returns the pid, or -1 with *error.
// It waits, on the io thread, until the child has called exec (or failed);
// a wait of kSlowSpawn or more is logged. (children.cpp)
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
            int out_fd, int err_fd, bool own_group, const std::vector<int>& keep, const RunAs* as,
            std::string* error);

// One application run. On the origin host it also holds the gossamerctl
// link and what every host reported; on the others only the local instance.
struct Daemon::Run {
  Run() = default;
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  ~Run() { close_bulk(); }
  void close_bulk() {
    for (BulkSocket& b : bulk)
      if (b.fd >= 0) ::close(b.fd), b.fd = -1;
  }

  Prepare spec;
  bool is_origin = false;
  bool checked = false;  // the binary check passed on this host
  bool ready = false;    // checked, and every bulk connection held (not origin: Prepared ok sent)
  bool started = false;
  // Bulk connections, per host: the socket for the instance (-1: not yet;
  // always -1 for this host), given to it at the start, closed whenever the
  // run goes away before (this destructor).
  std::vector<BulkSocket> bulk;
  std::vector<bool> bulk_dialing;       // per higher host: an attempt is under way
  std::vector<std::string> bulk_error;  // per host: why the last attempt failed
  std::unique_ptr<asio::steady_timer> bulk_timer;  // not origin: kBulkTimeout
  // the local instance
  pid_t pid = 0;
  int pgid = 0;
  bool reaped = false;
  int code = -1, sig = 0;
  bool stopping = false;
  bool group_killed = false;
  bool dead_before_stop = false;  // had exited (unreaped) when we stopped it
  bool sigkill_sent = false;      // our escalation after SIGTERM
  bool exited_sent = false;
  std::string exec_error;
  std::unique_ptr<asio::posix::stream_descriptor> streams[2];
  std::array<char, kOutputChunk> buf[2];
  std::unique_ptr<asio::steady_timer> drain_timer;
  // origin only
  std::shared_ptr<UnixLink> ctl;
  std::vector<int> prepared;   // per host: 0 waiting, 1 ok, -1 failed
  std::vector<bool> finished;  // per host: exited or lost
  std::unique_ptr<asio::steady_timer> prepare_timer;
  bool failed = false, stop_sent = false, done = false;
  int cause_rank = -1;  // higher wins; ties: first
  int cause_status = 0;
  std::string cause;
};

}  // namespace gossamer::cp
