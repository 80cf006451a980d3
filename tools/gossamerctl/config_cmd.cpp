// `gossamerctl config ...`: working with configuration files.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "gossamer/config.hpp"

namespace gossamer::ctl {

namespace {

// Validates every file (not stopping at the first bad one), so one run shows
// everything to fix. Errors go to stderr in the compiler-style
// FILE:LINE:COLUMN form editors can jump to; "FILE: ok" goes to stdout.
int check(const std::vector<std::string>& files) {
  int status = 0;
  for (const auto& file : files) {
    const auto result = config::load_file(file);
    if (result.ok()) {
      std::cout << file << ": ok\n";
      continue;
    }
    gossamer::config::write_errors(result, std::cerr);
    status = 1;
  }
  std::cout.flush();
  return status;
}

}  // namespace

void add_config_commands(CLI::App& app) {
  auto* config = app.add_subcommand("config", "Work with configuration files");
  config->require_subcommand(1);

  auto* check_cmd = config->add_subcommand(
      "check", "Validate configuration files; print every error as FILE:LINE:COLUMN: key: message");
  // Shared with the callback, which runs after the app parsed into it.
  auto files = std::make_shared<std::vector<std::string>>();
  check_cmd->add_option("FILE", *files, "YAML configuration file(s)")->required();
  check_cmd->callback([files] {
    if (const int status = check(*files); status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace gossamer::ctl
