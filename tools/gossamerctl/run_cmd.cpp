// `gossamerctl run` and `gossamerctl status`: talk to this host's gossamerd
// on its unix socket (controlplane.socket of the configuration named by
// --config, else $GOSSAMER_CONFIG, else /etc/gossamer/gossamer.yaml).
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>  // before asio (Boost 1.74 awaitable.hpp)
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "link.hpp"

namespace gossamer::ctl {

namespace {

namespace asio = boost::asio;
using cp::Type;

// The socket of this host's gossamerd, or an exit with a message.
std::string daemon_socket(const Common& c) { return load_config(c, 2).controlplane_socket(); }

std::shared_ptr<cp::UnixLink> connect(asio::io_context& io, const std::string& socket) {
  asio::local::stream_protocol::socket s(io);
  boost::system::error_code ec;
  s.connect(asio::local::stream_protocol::endpoint(socket), ec);
  if (ec) {
    std::fprintf(stderr, "gossamerctl: cannot reach gossamerd at %s: %s (is it running on this host?)\n",
                 socket.c_str(), ec.message().c_str());
    throw CLI::RuntimeError(2);
  }
  return std::make_shared<cp::UnixLink>(std::move(s), cp::kMaxBody);
}

// A binary named without a slash is looked up in PATH, like a shell does.
std::string resolve_binary(const std::string& name) {
  std::string found = name;
  if (name.find('/') == std::string::npos) {
    found.clear();
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    for (std::size_t at = 0; at <= dirs.size();) {
      std::size_t end = dirs.find(':', at);
      if (end == std::string::npos) end = dirs.size();
      std::string cand = (end > at ? dirs.substr(at, end - at) : ".") + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) {
        found = cand;
        break;
      }
      at = end + 1;
    }
    if (found.empty()) {
      std::fprintf(stderr, "gossamerctl: %s: not found in PATH\n", name.c_str());
      throw CLI::RuntimeError(2);
    }
  }
  // Absolute, but symlinks kept: argv[0] stays what the user named, and
  // every host must have the binary at this same path.
  std::error_code ec;
  auto abs = std::filesystem::absolute(found, ec).lexically_normal();
  if (ec || ::access(abs.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "gossamerctl: %s: %s\n", name.c_str(), ec ? ec.message().c_str() : std::strerror(errno));
    throw CLI::RuntimeError(2);
  }
  return abs.string();
}

// Writes instance output line by line, each line prefixed by its host.
class Prefixer {
 public:
  void add(std::uint32_t host, std::uint8_t stream, const std::string& data) {
    std::string& pending = pending_[{host, stream}];
    pending += data;
    std::size_t start = 0;
    for (std::size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(host, stream, std::string_view(pending).substr(start, nl + 1 - start));
    pending.erase(0, start);
  }
  void flush() {
    for (auto& [key, pending] : pending_)
      if (!pending.empty()) emit(key.first, key.second, pending + "\n");
    pending_.clear();
  }

 private:
  static void emit(std::uint32_t host, std::uint8_t stream, std::string_view line) {
    FILE* f = stream == 2 ? stderr : stdout;
    std::fprintf(f, "[host %u] %.*s", host, int(line.size()), line.data());
    std::fflush(f);
  }
  std::map<std::pair<std::uint32_t, std::uint8_t>, std::string> pending_;
};

int run(const Common& c, std::uint32_t threads, const std::vector<std::string>& command) {
  if (command.empty()) {
    std::fprintf(stderr, "gossamerctl run: no binary; usage: gossamerctl run [--threads N] -- BINARY ARGS...\n");
    return 2;
  }
  const std::string socket = daemon_socket(c);
  cp::CtlRun req;
  req.path = resolve_binary(command[0]);
  req.args.assign(command.begin() + 1, command.end());
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd)) req.cwd = cwd;
  req.threads = threads;

  asio::io_context io;
  auto link = connect(io, socket);
  Prefixer out;
  int status = -1;
  std::string message;
  int interrupts = 0;
  asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](boost::system::error_code ec, int) {
      if (ec) return;
      if (++interrupts == 1) {
        std::fprintf(stderr, "gossamerctl: stopping the application on every host (again to leave at once)\n");
        link->send(Type::kCtlStop, cp::RunRef{});
        wait_signal();
      } else {
        link->close("interrupted", true);
      }
    });
  };
  wait_signal();
  link->start(
      [&](Type t, std::string_view body) {
        if (t == Type::kCtlOutput) {
          cp::CtlOutput o;
          if (cp::decode(body, o)) out.add(o.host, o.stream, o.data);
          return;
        }
        if (t == Type::kCtlDone) {
          cp::CtlDone d;
          if (cp::decode(body, d)) {
            status = d.status;
            message = d.message;
          }
          link->close("done", true);
        }
      },
      [&](const std::string& why) {
        signals.cancel();
        if (status < 0 && message.empty()) message = "lost the connection to gossamerd: " + why;
      });
  link->send(Type::kCtlRun, req);
  io.run();
  out.flush();
  if (status < 0) status = interrupts ? 130 : 1;
  if (!message.empty()) std::fprintf(stderr, "gossamerctl: %s\n", message.c_str());
  return status;
}

int status_cmd(const Common& c) {
  const std::string socket = daemon_socket(c);
  asio::io_context io;
  auto link = connect(io, socket);
  cp::StatusReply reply;
  bool got = false;
  std::string error;
  link->start(
      [&](Type t, std::string_view body) {
        if (t == Type::kCtlStatusReply && cp::decode(body, reply)) got = true;
        link->close("done", true);
      },
      [&](const std::string& why) { error = why; });
  link->send(Type::kCtlStatus, cp::RunRef{});
  io.run();
  if (!got) {
    std::fprintf(stderr, "gossamerctl: no status from gossamerd: %s\n", error.c_str());
    return 1;
  }
  std::printf("%-5s %-16s %-5s %-14s %-26s %s\n", "HOST", "NAME", "STATE", "HEARTBEAT", "DATAPLANE", "INSTANCES");
  for (const auto& h : reply.hosts) {
    std::string hb = h.state == "self" ? "-" : h.heartbeat_ms < 0 ? "never" : std::to_string(h.heartbeat_ms) + " ms ago";
    std::string dp = cp::to_string(cp::DataplaneState(h.dataplane));
    if (h.state == "down") dp = "unknown (host down)";
    else if (h.dataplane_restarts) dp += " (" + std::to_string(h.dataplane_restarts) + " restarts)";
    std::printf("%-5u %-16s %-5s %-14s %-26s %u\n", h.index, h.name.c_str(), h.state.c_str(), hb.c_str(), dp.c_str(),
                h.instances);
  }
  std::printf("\n");
  if (reply.runs.empty()) {
    std::printf("no applications running with an instance on this host\n");
  } else {
    std::printf("%-42s %-10s %-7s %-7s %-8s %-12s %s\n", "RUN", "STATE", "ORIGIN", "THREADS", "PID", "USER",
                "BINARY");
    for (const auto& r : reply.runs)
      std::printf("%-42s %-10s %-7u %-7s %-8s %-12s %s\n", r.run.c_str(), r.state.c_str(), r.origin,
                  r.threads ? std::to_string(r.threads).c_str() : "program",
                  r.pid ? std::to_string(r.pid).c_str() : "-", r.user.c_str(), r.path.c_str());
  }
  int down = 0;
  for (const auto& h : reply.hosts) down += h.state == "down";
  return down ? 3 : 0;
}

}  // namespace

void add_run_commands(CLI::App& app, std::shared_ptr<const Common> common) {
  auto* run_cmd = app.add_subcommand(
      "run", "Run a rack application on every host; prints each host's output with a [host N] prefix and exits "
             "with the application's status");
  auto threads = std::make_shared<std::uint32_t>(0);
  auto command = std::make_shared<std::vector<std::string>>();
  run_cmd->add_option("--threads", *threads, "rack-wide thread count (overrides what the program asks for)")
      ->check(CLI::Range(1, 4096));
  run_cmd->add_option("command", *command, "BINARY ARGS... (after --)")->required();
  run_cmd->callback([common, threads, command] {
    int s = run(*common, *threads, *command);
    if (s != 0) throw CLI::RuntimeError(s);
  });

  auto* status = app.add_subcommand(
      "status", "Show the rack as this host's gossamerd sees it: hosts up or down, last heartbeats, dataplanes, "
                "running applications (exit 3 if a host is down)");
  status->callback([common] {
    int s = status_cmd(*common);
    if (s != 0) throw CLI::RuntimeError(s);
  });
}

}  // namespace gossamer::ctl
