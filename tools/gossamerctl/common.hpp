// What several gossamerctl subcommand groups share: the top-level
// -c/--config option and loading the configuration it names.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "gossamer/config.hpp"

namespace gossamer::ctl {

// Options given before the subcommand (`gossamerctl -c FILE run ...`).
struct Common {
  std::string config;  // empty: $GOSSAMER_CONFIG, else /etc/gossamer/gossamer.yaml
};

// Adds -c/--config to the top-level app. Subcommand callbacks run after the
// whole command line is parsed, so they see the value through the pointer.
std::shared_ptr<Common> add_common_options(CLI::App& app);

// --config, else $GOSSAMER_CONFIG, else /etc/gossamer/gossamer.yaml.
std::string config_path(const Common& c);

// The configuration named by config_path(c); on errors, prints them
// (FILE:LINE:COLUMN: ...) and ends the subcommand with `status_on_error`.
config::Config load_config(const Common& c, int status_on_error);

}  // namespace gossamer::ctl
