// The sluice binary: one CLI11 app, each subcommand registered from its own file.
#include <CLI/CLI.hpp>

#include "cli/config_command.h"
#include "cli/serve_command.h"
#include "cli/token_command.h"

int main(int argc, char** argv) {
  CLI::App app{"sluice: rate limiting and circuit breaking in front of an HTTP service", "sluice"};
  app.require_subcommand(1);
  sluice::cli::add_serve_command(app);
  sluice::cli::add_config_command(app);
  sluice::cli::add_token_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
