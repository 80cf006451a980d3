// `gossamerctl top`'s input side (top_cmd.cpp is the view): where each
// host's metrics are (endpoints), stopping on a signal or the `q` key, and
// scraping every host at once over plain HTTP/1.0 with short timeouts.
#pragma once

#include <poll.h>
#include <signal.h>
#include <termios.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gossamer/config.hpp"

namespace gossamer::ctl::scrape {

using Clock = std::chrono::steady_clock;

// Label values and HTTP status lines come from the network and are printed
// on a terminal: anything but printable ASCII (escape sequences!) becomes '?'.
std::string printable(std::string_view s, std::size_t max = 64);

struct Endpoint {
  std::string ip;  // an IP literal
  std::uint16_t port = 0;
  bool ipv6 = false;
  std::string to_string() const { return (ipv6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port); }
};

// "10.0.0.1:9464" or "[fd00::1]:9464". IP literals only, like the
// configuration: a refresh never waits on DNS.
std::optional<Endpoint> parse_endpoint(std::string_view s);
// Host `host`'s metrics endpoint (top_cmd.cpp says how it is found).
Endpoint default_endpoint(const config::Config& cfg, std::size_t host);

// SIGINT, SIGTERM and SIGHUP stop top. They stay blocked except inside
// ppoll(wait_mask()), so a signal can never slip in between checking for
// it and going to sleep. Everything is restored on destruction.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  const sigset_t* wait_mask() const { return &wait_mask_; }
  static bool arrived();  // one of them came since construction

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_actions_{};
  sigset_t old_mask_{}, wait_mask_{};
};

// When top draws on a terminal and stdin is that terminal, with us in the
// foreground, a single key press is readable at once (no line buffering, no
// echo), so `q` quits. Ctrl-C still sends SIGINT (ISIG stays on). Restored
// on destruction. With stdout piped (`top | less`), the terminal is left to
// whoever reads it.
class Keys {
 public:
  explicit Keys(bool interactive);
  ~Keys();
  Keys(const Keys&) = delete;
  Keys& operator=(const Keys&) = delete;

  // -1 when keys are not read.
  int fd() const;
  // After poll found fd() ready: whether `q` was pressed.
  bool quit(short revents);

 private:
  termios saved_{};
  bool active_ = false;
  bool broken_ = false;
};

struct Stop {
  const StopSignals& signals;
  Keys& keys;
  bool requested = false;  // 'q' pressed or a signal arrived
  bool check() { return requested = requested || StopSignals::arrived(); }
};

// ppoll on `fds` plus the keyboard, until `until`, a signal or `q`.
// Returns the number of ready entries of `fds` (0 on timeout or stop).
int wait_for(std::vector<pollfd>& fds, Clock::time_point until, Stop& stop);

struct ScrapeResult {
  bool ok = false;
  std::string body;   // when ok
  std::string error;  // when not
  Clock::time_point at;
};

// Scrapes every endpoint at once; one result per endpoint, in order.
// Unfinished exchanges fail at their deadline or when stop is requested.
std::vector<ScrapeResult> scrape_all(const std::vector<Endpoint>& endpoints, Stop& stop);

}  // namespace gossamer::ctl::scrape
