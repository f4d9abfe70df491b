// `sluice bench`: registers the load tester's subcommand, its flags and what it runs.
// Called once from main() before parsing; not for concurrent use.
#pragma once

namespace CLI {
class App;
}

namespace sluice::cli {

void add_bench_command(CLI::App& app);

}  // namespace sluice::cli
