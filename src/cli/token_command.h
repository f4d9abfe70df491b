// `sluice token create|list|revoke`: registers the subcommands that manage the admin API's bearer
// tokens in the database. Not thread-safe (CLI set-up).
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::cli {

void add_token_command(CLI::App& app);

}  // namespace sluice::cli
