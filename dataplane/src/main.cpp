// gossamer-dataplane: the per-host process that will own the NIC (DPDK) and
// RDMA queue pairs. For now it validates its configuration and shows that
// both transports are linked; serving applications arrives with the
// dataplane issue.
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <gossamer/config.hpp>
#include <infiniband/verbs.h>
#include <rte_version.h>

int main(int argc, char** argv) {
  CLI::App app{"gossamer-dataplane: the per-host NIC and queue-pair owner", "gossamer-dataplane"};
  std::string config_path;
  bool version = false;
  app.add_option("-c,--config", config_path, "this host's YAML configuration");
  app.add_flag("--version", version, "print the linked transport versions and exit");
  CLI11_PARSE(app, argc, argv);

  if (version) {
    int n = 0;
    ibv_device** devs = ibv_get_device_list(&n);
    if (devs) ibv_free_device_list(devs);
    std::printf("gossamer-dataplane: %s, libibverbs (%d RDMA device%s)\n", rte_version(), n,
                n == 1 ? "" : "s");
    return 0;
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "gossamer-dataplane: --config FILE is required\n");
    return 2;
  }
  auto result = gossamer::config::load_file(config_path);
  if (!result) {
    gossamer::config::write_errors(result, std::cerr);
    return 1;
  }
  std::fprintf(stderr,
               "gossamer-dataplane: configuration ok, but the dataplane itself is not "
               "implemented yet (issue 4: shared-memory attach and the DPDK transport)\n");
  return 3;
}
