// `sluice serve`: registers the subcommand that runs the gateway. Not thread-safe (CLI set-up).
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::cli {

void add_serve_command(CLI::App& app);

}  // namespace sluice::cli
