// gossamerd: the per-host control-plane daemon. For now it validates its
// configuration and shows that the metrics exporter (prometheus-cpp) is
// linked; membership, launch and metrics arrive with the control-plane and
// metrics issues.
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <gossamer/config.hpp>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

int main(int argc, char** argv) {
  CLI::App app{"gossamerd: the per-host control-plane daemon", "gossamerd"};
  std::string config_path;
  bool version = false;
  app.add_option("-c,--config", config_path, "this host's YAML configuration");
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
  std::fprintf(stderr,
               "gossamerd: configuration ok, but the daemon itself is not implemented yet "
               "(issue 5: membership, launch, fate sharing, large requests)\n");
  return 3;
}
