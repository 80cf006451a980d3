// gossamer-dataplane: the per-host process that owns the NIC (DPDK) and
// carries delegated closures between hosts (DESIGN.md §2). Runs in the
// foreground until SIGTERM or SIGINT.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <gossamer/config.hpp>
#include <infiniband/verbs.h>
#include <rte_version.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "gossamer/abi/slots.hpp"

#include "dataplane.hpp"
#include "port_dpdk.hpp"
#include "port_null.hpp"
#include "verbs.hpp"

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }
}  // namespace

namespace {
// --check: one line per transport, whether it can run here and why not.
int check_transports(const gossamer::config::Config& cfg) {
  std::printf("udp: can run: %s; the port is opened at start (dataplane.eal_args, dataplane.port)\n", rte_version());
  bool verbs_ok = false;
  auto v = gossamer::dataplane::verbs::make_ibv();
  const auto& vc = cfg.dataplane.verbs;
  std::printf("%s\n", gossamer::dataplane::verbs::check_verbs(v.get(), vc.device, vc.port, vc.gid_index, &verbs_ok)
                          .c_str());
  const bool want_verbs = cfg.dataplane.transport == gossamer::config::Transport::verbs;
  std::printf("configured: transport %s\n", want_verbs ? "verbs" : "udp");
  return want_verbs && !verbs_ok ? 1 : 0;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossamer-dataplane: the per-host NIC and queue-pair owner", "gossamer-dataplane"};
  std::string config_path;
  bool version = false, check = false;
  app.add_option("-c,--config", config_path, "this host's YAML configuration");
  app.add_flag("--version", version, "print the linked transport versions and exit");
  app.add_flag("--check", check,
               "say which transports can run on this host and why not (with --config: its dataplane.verbs "
               "settings), then exit: 0 if the configured one can");
  CLI11_PARSE(app, argc, argv);

  if (version) {
    int n = 0;
    ibv_device** devs = ibv_get_device_list(&n);
    if (devs) ibv_free_device_list(devs);
    std::printf("gossamer-dataplane: %s, libibverbs (%d RDMA device%s)\n", rte_version(), n,
                n == 1 ? "" : "s");
    return 0;
  }
  if (config_path.empty() && !check) {
    std::fprintf(stderr, "gossamer-dataplane: --config FILE is required\n");
    return 2;
  }
  auto result = config_path.empty() ? gossamer::config::load_string("", "(defaults)")
                                     : gossamer::config::load_file(config_path);
  if (!result) {
    gossamer::config::write_errors(result, std::cerr);
    return 1;
  }
  const gossamer::config::Config& cfg = result.config();
  if (check) return check_transports(cfg);
  spdlog::set_default_logger(spdlog::stderr_color_mt("gossamer-dataplane"));
  spdlog::set_pattern("[%H:%M:%S.%e] gossamer-dataplane[%P] %l: %v");
  if (cfg.slots.primary_bytes != gossamer::abi::kPrimaryBytes ||
      cfg.slots.overflow_bytes != gossamer::abi::kOverflowBytes) {
    spdlog::error("slots.primary_bytes {} and slots.overflow_bytes {} differ from this build's {} and {}",
                  cfg.slots.primary_bytes, cfg.slots.overflow_bytes, gossamer::abi::kPrimaryBytes,
                  gossamer::abi::kOverflowBytes);
    return 1;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  gossamer::dataplane::Dataplane dp(cfg);
  const bool verbs = cfg.dataplane.transport == gossamer::config::Transport::verbs;
  // transport: verbs opens its device at start (a missing one is an error
  // that lists the host's devices) and needs no DPDK port.
  dp.set_verbs([] { return gossamer::dataplane::verbs::make_ibv(); });
  auto open_port = [&](std::uint16_t queues, std::vector<std::unique_ptr<gossamer::dataplane::Port>>* out) {
    if (verbs) {
      out->push_back(std::make_unique<gossamer::dataplane::NullPort>(queues, "transport: verbs"));
      return std::string();
    }
    // dataplane.ports: each port's vdev goes to the EAL; the ports are
    // found by name, in the config's order.
    std::vector<std::string> eal_args = cfg.dataplane.eal_args, names;
    for (const auto& p : cfg.dataplane.ports) {
      if (!p.vdev.empty()) eal_args.push_back("--vdev=" + p.vdev);
      names.push_back(p.device_name());
    }
    for (std::string& a : dp.cpu_plan().extra_eal_args()) eal_args.push_back(std::move(a));
    return gossamer::dataplane::DpdkPort::open(argv[0], eal_args, names, cfg.dataplane.port, queues,
                                               cfg.dataplane.mtu, cfg.self().data.port, out);
  };
  if (std::string err = dp.start(open_port); !err.empty()) {
    spdlog::error("{}", err);
    return 1;
  }
  dp.run(g_stop);
  if (gossamer::dataplane::DpdkPort::restart_wanted()) {
    spdlog::info("stopping, to be started again (exit 75)");
    return 75;  // EX_TEMPFAIL: gossamerd restarts a dataplane whatever its status
  }
  spdlog::info("stopping");
  return 0;
}
