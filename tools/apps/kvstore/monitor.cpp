// MONITOR, as Redis 7.0's replicationFeedMonitors: every command this
// host's connections run is sent to this host's monitoring connections as
//   +<seconds>.<microseconds> [0 <ip>:<port>] "name" "arg"...
// with sdscatrepr's escaping. The line is built by the loop that runs the
// command and handed to the mailbox (notify.hpp) of each loop of this host
// with a monitor, in the order commands run on this host. Other hosts'
// commands are not seen: each host monitors its own connections.
//
// What Redis leaves out is left out: commands refused before they run
// (unknown, wrong arity, NOAUTH, OOM, not allowed while subscribed or
// queued by MULTI), its admin commands (CONFIG GET/SET/RESETSTAT/REWRITE,
// CLIENT KILL/LIST/..., DEBUG, MONITOR, SHUTDOWN...), and it redacts AUTH's
// and HELLO ... AUTH's credentials as "(redacted)". A transaction shows
// MULTI, then at EXEC its commands, then EXEC (execute() feeds the commands
// as they run; transactions.cpp feeds MULTI, EXEC and the other control
// commands). With no monitor on the host, a command pays one relaxed load.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cctype>
#include <cstdio>

#include "server.hpp"

namespace hydra {

namespace {

// Redis's sdscatrepr.
void repr(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    switch (ch) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\a': out += "\\a"; break;
      case '\b': out += "\\b"; break;
      default:
        if (std::isprint(static_cast<unsigned char>(ch))) {
          out += ch;
        } else {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(ch));
          out += hex;
        }
    }
  }
  out += '"';
}

std::string peer(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (fd < 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?:0";
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// Redis 7.0's CMD_ADMIN commands and subcommands, of those Hydra knows.
bool admin(const std::string& name, const std::vector<std::string_view>& args) {
  if (name == "debug" || name == "monitor" || name == "shutdown" || name == "save" || name == "bgsave" ||
      name == "bgrewriteaof" || name == "replicaof" || name == "slaveof" || name == "sync" || name == "psync")
    return true;
  if (args.size() < 2) return false;
  const std::string sub = resp::lower(args[1]);
  if (name == "config") return sub != "help";
  if (name == "client")
    return sub == "kill" || sub == "list" || sub == "no-evict" || sub == "pause" || sub == "unblock" || sub == "unpause";
  return false;
}

}  // namespace

void Loop::monitor(std::uint32_t slot, Connection& c, Pending& p) {
  if (c.in_exec) {  // queued in MULTI: an EXEC's client expects one reply per command
    resp::error(p.reply, "ERR MONITOR isn't allowed for DENY BLOCKING client");
    return;
  }
  if (c.monitor) {  // Redis ignores a second MONITOR: no reply
    p.silent = true;
    return;
  }
  c.monitor = true;
  monitors_.emplace_back(slot, c.gen);
  g_mailboxes[own_shard_].monitors.fetch_add(1, std::memory_order_relaxed);
  g_monitors.fetch_add(1, std::memory_order_relaxed);
  resp::simple(p.reply, "OK");
}

// RESET: out of MONITOR at once (a MONITOR after it in the same read must
// not find the old entry still listed: each line would come twice).
void Loop::unmonitor(std::uint32_t slot, Connection& c) {
  if (!c.monitor) return;
  c.monitor = false;
  for (std::size_t i = 0; i < monitors_.size(); ++i) {
    if (monitors_[i].first != slot || monitors_[i].second != c.gen) continue;
    monitors_.erase(monitors_.begin() + std::ptrdiff_t(i));
    g_mailboxes[own_shard_].monitors.fetch_sub(1, std::memory_order_relaxed);
    g_monitors.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

namespace {

// The bytes repr() appends for s.
std::size_t repr_size(std::string_view s) {
  std::size_t n = 2;
  for (char ch : s) {
    switch (ch) {
      case '\\': case '"': case '\n': case '\r': case '\t': case '\a': case '\b': n += 2; break;
      default: n += std::isprint(static_cast<unsigned char>(ch)) ? 1 : 4;
    }
  }
  return n;
}

// Which arguments Redis shows as "(redacted)": AUTH's; HELLO's as its
// helloCommand reads them (a valid protocol version, then from the third
// argument AUTH user pass or SETNAME name, stopping at anything else).
std::vector<bool> redacted(const std::string& name, const std::vector<std::string_view>& args) {
  std::vector<bool> out(args.size(), false);
  if (name == "auth" && args.size() <= 3) {
    for (std::size_t i = 1; i < args.size(); ++i) out[i] = true;
  } else if (name == "hello" && args.size() >= 2) {
    long long ver;
    if (!resp::parse_int64(args[1], ver) || ver < 2 || ver > 3) return out;
    for (std::size_t i = 2; i < args.size(); ++i) {
      const std::size_t more = args.size() - 1 - i;
      const std::string opt = resp::lower(args[i]);
      if (opt == "auth" && more >= 2) {
        out[i + 1] = out[i + 2] = true;
        i += 2;
      } else if (opt == "setname" && more >= 1) {
        ++i;
      } else {
        break;
      }
    }
  }
  return out;
}

}  // namespace

void Loop::feed_monitors(const Connection& c, const std::vector<std::string_view>& args) const {
  if (args.empty()) return;
  const std::string name = resp::lower(args[0]);
  const CommandSpec* spec = find_command(name);
  if (!spec || !arity_ok(*spec, args.size()) || admin(name, args)) return;
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  char stamp[48];
  std::snprintf(stamp, sizeof stamp, "+%ld.%06ld [0 ", static_cast<long>(tv.tv_sec), static_cast<long>(tv.tv_usec));
  const std::string head = stamp + peer(c.fd) + ']';
  const std::vector<bool> hide = redacted(name, args);
  static constexpr std::string_view kRedacted = "\"(redacted)\"";
  // Its size first: a line over --pubsub-output-limit (a huge value) is
  // never built, its monitors are disconnected; else it is built once and
  // shared by every mailbox and monitor.
  std::size_t size = head.size() + 2;
  for (std::size_t i = 0; i < args.size(); ++i) size += 1 + (hide[i] ? kRedacted.size() : repr_size(args[i]));
  MonitorLine line;
  line.size = size;
  if (!g_config.pubsub_hard_limit || size <= g_config.pubsub_hard_limit) {
    auto text = std::make_shared<std::string>();
    text->reserve(size);
    *text += head;
    for (std::size_t i = 0; i < args.size(); ++i) {
      *text += ' ';
      if (hide[i]) *text += kRedacted;
      else repr(*text, args[i]);
    }
    *text += "\r\n";
    line.text = std::move(text);
  }
  for (std::uint32_t t = first_local_; t < first_local_ + local_count_ && t < kMailboxes; ++t) {
    Mailbox& m = g_mailboxes[t];
    if (m.monitors.load(std::memory_order_relaxed) == 0) continue;
    std::lock_guard lock(m.lock);
    m.monitor_lines.push_back(line);
    m.ready.store(true, std::memory_order_release);
  }
}

}  // namespace hydra
