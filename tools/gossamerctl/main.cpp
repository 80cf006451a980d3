// gossamerctl: the operator's command-line tool (DESIGN.md §4).
#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"gossamerctl: inspect and control a Gossamer rack", "gossamerctl"};
  app.require_subcommand(1);
  const auto common = gossamer::ctl::add_common_options(app);
  gossamer::ctl::add_config_commands(app);
  gossamer::ctl::add_run_commands(app, common);
  gossamer::ctl::add_top_commands(app, common);
  // Subcommand callbacks run inside parse; they signal failure through
  // CLI::RuntimeError, and usage errors get CLI11's usual exit codes.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
