// gossamerctl subcommand groups. Each group registers its subcommands on the
// top-level app; a subcommand's callback does the work and reports a non-zero
// exit status by throwing CLI::RuntimeError(status), which CLI::App::exit
// turns into that status without printing anything.
//
// To add a group (run, status, top): declare add_<group>_commands here,
// define it in <group>_cmd.cpp, list the file in meson.build and call it
// from main.cpp. Options shared by groups (-c/--config) are in common.hpp.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>

#include "common.hpp"

namespace gossamer::ctl {

// `gossamerctl config check FILE...`
void add_config_commands(CLI::App& app);
// `gossamerctl [-c FILE] run|status` (run_cmd.cpp)
void add_run_commands(CLI::App& app, std::shared_ptr<const Common> common);
// `gossamerctl [-c FILE] top` (top_cmd.cpp)
void add_top_commands(CLI::App& app, std::shared_ptr<const Common> common);

}  // namespace gossamer::ctl
