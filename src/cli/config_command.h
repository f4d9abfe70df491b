// `sluice config import|export|check|apply`: registers the subcommands that move the configuration
// between YAML files, the database and a running primary. Not thread-safe (CLI set-up).
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::cli {

void add_config_command(CLI::App& app);

}  // namespace sluice::cli
