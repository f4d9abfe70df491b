// sluice: one binary, one subcommand per part (serve, config, token, bench), each registered from its
// own file. main() only parses and dispatches: a subcommand runs from its callback and reports a
// non-zero exit status by throwing CLI::RuntimeError(status).
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <string_view>

#include "cli/bench_command.h"
#include "cli/config_command.h"
#include "cli/serve_command.h"
#include "cli/standard_descriptors.h"
#include "cli/token_command.h"

namespace {

constexpr int kUsageError = 2;

}  // namespace

int main(int argc, char** argv) {
  sluice::cli::open_standard_descriptors();  // before anything opens a descriptor
  // A command run for its output (a token shown once, an export, a report) would write it to the
  // /dev/null that stands in for a closed stdout and succeed: refused instead. The gateway refuses
  // only an access log there (see access_log_ok()).
  if (sluice::cli::stdout_was_closed() && !(argc > 1 && std::string_view(argv[1]) == "serve")) {
    std::fprintf(stderr, "sluice: stdout is closed: start sluice with it open (>/dev/null to drop what it writes)\n");
    return kUsageError;  // as for bad flags: 1 says something of the command's own (bench: a failed assertion)
  }
  // A reader of stdout or stderr that goes away (a log shipper restarted, `| head`) fails the
  // writes to it, and costs what they carried; it does not kill the gateway, or a bench run.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"sluice: rate limiting and circuit breaking for HTTP APIs", "sluice"};
  app.set_version_flag("--version", "sluice " SLUICE_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'sluice COMMAND --help' for a command's flags and examples.");
  sluice::cli::add_serve_command(app);
  sluice::cli::add_config_command(app);
  sluice::cli::add_token_command(app);
  sluice::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_name() == "RequiredError" && argc > 1 && argv[1][0] != '-' && app.get_subcommands().empty()) {
      std::fprintf(stderr, "sluice: no command '%s': give serve, config, token or bench (sluice --help)\n", argv[1]);
      return kUsageError;
    }
    if (e.get_exit_code() == 0 || e.get_name() == "RuntimeError") return app.exit(e);  // help, version
    // What was wrong with the flags, said by the command it was given to, with where to look.
    std::string path = "sluice";
    const CLI::App* at = &app;
    while (!at->get_subcommands().empty()) {
      at = at->get_subcommands().front();
      path += " " + at->get_name();
    }
    std::string what = e.what();
    if (e.get_name() == "RequiredError" && what.starts_with("A subcommand is required")) {
      std::string names;
      for (const CLI::App* sc : at->get_subcommands([](const CLI::App*) { return true; })) {
        names += (names.empty() ? "" : ", ") + sc->get_name();
      }
      what = "give one of its commands: " + names;
    }
    std::fprintf(stderr, "%s: %s (%s --help)\n", path.c_str(), what.c_str(), path.c_str());
    return kUsageError;
  }
  return 0;
}
