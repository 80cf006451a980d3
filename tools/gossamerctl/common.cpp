// Shared gossamerctl options; see common.hpp.
#include "common.hpp"

#include <cstdlib>
#include <iostream>

namespace gossamer::ctl {

std::shared_ptr<Common> add_common_options(CLI::App& app) {
  auto common = std::make_shared<Common>();
  app.add_option("-c,--config", common->config,
                 "this host's configuration (default: $GOSSAMER_CONFIG, else /etc/gossamer/gossamer.yaml)");
  return common;
}

std::string config_path(const Common& c) {
  if (!c.config.empty()) return c.config;
  if (const char* e = std::getenv("GOSSAMER_CONFIG"); e && *e) return e;
  return "/etc/gossamer/gossamer.yaml";
}

config::Config load_config(const Common& c, int status_on_error) {
  auto r = config::load_file(config_path(c));
  if (!r) {
    config::write_errors(r, std::cerr);
    throw CLI::RuntimeError(status_on_error);
  }
  return std::move(r).config();
}

}  // namespace gossamer::ctl
