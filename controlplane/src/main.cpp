// gossamerd: the per-host control-plane daemon (see daemon.hpp).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <gossamer/config.hpp>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <spdlog/async.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon.hpp"

namespace {

// gossamer-dataplane next to this binary (installed) or in the build tree.
std::string find_dataplane() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (auto candidate : {self.parent_path() / "gossamer-dataplane",
                         self.parent_path().parent_path() / "dataplane" / "gossamer-dataplane"})
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossamerd: the per-host control-plane daemon", "gossamerd"};
  std::string config_path, dataplane;
  bool version = false, no_dataplane = false;
  app.add_option("-c,--config", config_path, "this host's YAML configuration");
  app.add_option("--dataplane", dataplane,
                 "the gossamer-dataplane binary to supervise (default: next to gossamerd, or the build tree's)");
  app.add_flag("--no-dataplane", no_dataplane, "do not start a dataplane (it is managed elsewhere)");
  app.add_flag("--version", version, "print what is linked and exit");
  CLI11_PARSE(app, argc, argv);

  if (version) {
    prometheus::Registry registry;
    auto& family = prometheus::BuildCounter().Name("gossamer_build_info").Help("build").Register(registry);
    family.Add({}).Increment();
    std::size_t families = registry.Collect().size();
    std::printf("gossamerd: prometheus-cpp registry with %zu metric famil%s\n", families,
                families == 1 ? "y" : "ies");
    return 0;
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "gossamerd: --config FILE is required\n");
    return 2;
  }
  auto result = gossamer::config::load_file(config_path);
  if (!result) {
    gossamer::config::write_errors(result, std::cerr);
    return 1;
  }
  gossamer::config::Config cfg = std::move(result).config();
  // Log lines are written by a thread of their own: a slow stderr (a pipe
  // nobody drains, a busy journal, a log file on a disk that throttles its
  // writers) must not hold the io thread, which sends and judges heartbeats
  // (README.md, "Heartbeats"). When 8192 lines wait, the oldest are dropped;
  // heartbeat_tick says how many.
  spdlog::init_thread_pool(8192, 1);
  spdlog::set_default_logger(std::make_shared<spdlog::async_logger>(
      "gossamerd", std::make_shared<spdlog::sinks::stderr_color_sink_mt>(), spdlog::thread_pool(),
      spdlog::async_overflow_policy::overrun_oldest));
  struct FlushLogs {
    ~FlushLogs() { spdlog::shutdown(); }  // writes what waits, on every return below
  } flush_logs;
  spdlog::set_pattern("[%H:%M:%S.%e] gossamerd[%P] " + cfg.self().name + " %l: %v");

  std::string key, error;
  if (!gossamer::config::load_rack_secret(cfg.controlplane.psk_file, &key, &error)) {
    spdlog::error("{}", error);
    return 1;
  }
  gossamer::cp::DaemonOptions opt;
  opt.config_path = std::filesystem::absolute(config_path).string();
  if (!no_dataplane) {
    opt.dataplane_path = dataplane.empty() ? find_dataplane() : dataplane;
    if (opt.dataplane_path.empty() || ::access(opt.dataplane_path.c_str(), X_OK) != 0) {
      spdlog::error("no gossamer-dataplane binary at '{}'; pass --dataplane PATH, or --no-dataplane",
                    opt.dataplane_path.empty() ? std::string("(not found next to gossamerd)") : opt.dataplane_path);
      return 1;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);

  // An exception out of the daemon would end the process in
  // std::terminate, before ~FlushLogs wrote the lines queued for the log
  // thread (the ones that tell what happened): it is logged and returned.
  try {
    boost::asio::io_context io;
    gossamer::cp::Daemon daemon(io, std::move(cfg), opt, std::move(key));
    boost::asio::signal_set signals(io, SIGTERM, SIGINT);
    signals.async_wait([&](boost::system::error_code ec, int sig) {
      if (!ec) daemon.shutdown(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    });
    if (!daemon.start()) return 1;
    io.run();
  } catch (const std::exception& e) {
    spdlog::critical("stopping: {}", e.what());
    return 1;
  }
  return 0;
}
