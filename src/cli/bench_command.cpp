#include "cli/bench_command.h"

#include <unistd.h>

#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "bench/plan.h"
#include "bench/report.h"
#include "bench/runner.h"

namespace sluice::cli {
namespace {

constexpr int kFailed = 1;         // an --expect-* assertion did not hold
constexpr int kCannotRun = 2;      // bad flags, or the target could not be reached
constexpr int kInterrupted = 130;  // Ctrl-C: 128 + SIGINT, as a shell reports a process it ended

constexpr const char* kFooter = R"(Examples:
  # 1000 requests at one instant against a limit of 50: exactly 50 may pass, the rest get 429
  sluice bench --burst 1000 --expect-admitted 50 --expect-status 200,429 \
               http://127.0.0.1:8080/api/orders

  # 200 requests a second for 30 s, spread over three callers, with a chart
  sluice bench --rate 200 --duration 30s --vary-header 'X-System-Key=crm,erp,oa' \
               --chart limit.svg http://127.0.0.1:8080/api/orders

  # from 10 to 500 requests a second over a minute, to see where the limit starts rejecting
  sluice bench --ramp 10:500 --duration 1m http://127.0.0.1:8080/api/orders

  # as fast as the server answers: 64 connections for 10 s, the report also as JSON
  sluice bench -c 64 -d 10s --json result.json http://127.0.0.1:8080/

Exit status: 0 when the run completed and every --expect-* held, 1 when one did not (the reason
on stderr), 2 for bad flags or a target that cannot be reached, 130 when Ctrl-C stopped the run.
See docs/bench.md.)";

struct Output {
  std::optional<std::string> json;
  std::optional<std::string> chart;
  bool quiet = false;
};

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) { g_interrupted.store(true); }

// The first Ctrl-C ends the run early, still prints the report and exits 130; a second one kills as
// usual.
void catch_interrupt() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

int cannot_run(const std::string& message) {
  std::cerr << "sluice bench: " << message << "\n";
  return kCannotRun;
}

int run_bench(const bench::Options& options, const Output& output) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Result<bench::Plan> plan = bench::make_plan(options, cores);
  if (!plan) return cannot_run(plan.error().message);

  // Open the output files first: a long run should not end in "cannot write".
  std::ofstream json_file;
  std::ofstream chart_file;
  if (output.json) {
    json_file.open(*output.json);
    if (!json_file) return cannot_run("--json: cannot write '" + *output.json + "'");
  }
  if (output.chart) {
    chart_file.open(*output.chart);
    if (!chart_file) return cannot_run("--chart: cannot write '" + *output.chart + "'");
  }

  catch_interrupt();
  bench::RunHooks hooks;
  hooks.stop = &g_interrupted;
  const bool live = !output.quiet && isatty(STDOUT_FILENO) == 1;
  if (live) {
    hooks.on_progress = [](const bench::Progress& p) {
      std::cout << "\r" << bench::format_progress(p) << "\x1b[K" << std::flush;
    };
  }
  Result<bench::RunResult> result = bench::run(*plan, hooks);
  if (live) std::cout << "\r\x1b[K" << std::flush;
  if (!result) return cannot_run(result.error().message);

  const bench::Report report = bench::make_report(*plan, *result);
  if (!output.quiet) std::cout << bench::format_report(report) << std::flush;
  if (json_file.is_open()) {
    json_file << bench::to_json(report);
    json_file.close();
    if (!json_file) return cannot_run("--json: error while writing '" + *output.json + "'");
  }
  if (chart_file.is_open()) {
    chart_file << bench::to_svg(report);
    chart_file.close();
    if (!chart_file) return cannot_run("--chart: error while writing '" + *output.chart + "'");
  }
  // The report and the files are of what was seen, but an incomplete run has not passed; nor does a
  // script reading the status want 1 or 2, which speak of the target.
  if (report.stopped_early) {
    std::cerr << "sluice bench: interrupted; the report is of what was seen until then\n";
    return kInterrupted;
  }
  if (report.responses == 0 && report.errors > 0) {
    return cannot_run("no request got a response (" + report.most_common_error() + ")");
  }
  for (const bench::ExpectationResult& e : report.expectations) {
    if (!e.passed) std::cerr << "sluice bench: FAILED " << e.check << ": " << e.detail << "\n";
  }
  return report.passed() ? 0 : kFailed;
}

// Counts are unsigned, and CLI11 would read "-5" as a huge one: only digits pass. Nor may a count
// be too large for 64 bits, which CLI11 would read as the largest there is.
CLI::Validator whole_number(int at_least) {
  return CLI::Validator(
      [at_least](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
          return "'" + text + "' is not a whole number";
        }
        std::uint64_t value = 0;
        if (std::from_chars(text.data(), text.data() + text.size(), value).ec ==
            std::errc::result_out_of_range) {
          return "'" + text + "' is too large (at most " +
                 std::to_string(std::numeric_limits<std::uint64_t>::max()) + ")";
        }
        if (at_least > 0 && text.find_first_not_of('0') == std::string::npos) {
          return "must be at least " + std::to_string(at_least);
        }
        return {};
      },
      "");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<bench::Options>();
  auto output = std::make_shared<Output>();
  CLI::App* cmd =
      app.add_subcommand("bench", "Load an HTTP endpoint and check that its rate limit holds");
  cmd->footer(kFooter);

  cmd->add_option("url", options->url, "The endpoint, e.g. http://127.0.0.1:8080/api/orders")
      ->required()
      ->type_name("URL");
  cmd->add_option("-c,--connections", options->connections,
                  "Connections kept open (default 10; a burst opens one per request)")
      ->type_name("N");
  cmd->add_option("-t,--threads", options->threads,
                  "Threads, each with its share of the connections (default: one per core)")
      ->type_name("N");

  const CLI::Validator positive = whole_number(1);
  const CLI::Validator non_negative = whole_number(0);

  const char* load = "Load (choose one; the default is --duration 10s)";
  cmd->add_option("--burst", options->burst,
                  "Open N connections, then write N requests at one instant")
      ->check(positive)
      ->type_name("N")
      ->group(load);
  cmd->add_option("-n,--requests", options->requests,
                  "Send N requests, each connection the next when the last is answered; with "
                  "--rate, N requests at that rate")
      ->check(positive)
      ->type_name("N")
      ->group(load);
  cmd->add_option("-d,--duration", options->duration,
                  "Run for this long, e.g. 30s, 2m (closed loop, or with --rate / --ramp)")
      ->type_name("TIME")
      ->group(load);
  cmd->add_option("-r,--rate", options->rate,
                  "Open loop: R requests a second on a fixed schedule, whatever the server does; "
                  "latency counts from each request's scheduled time")
      ->type_name("R")
      ->group(load);
  cmd->add_option("--ramp", options->ramp,
                  "Open loop from FROM to TO requests a second over --duration, e.g. 10:500")
      ->type_name("FROM:TO")
      ->group(load);

  const char* request = "Requests";
  cmd->add_option("-m,--method", options->method, "HTTP method (default GET)")
      ->type_name("METHOD")
      ->group(request);
  cmd->add_option("-H,--header", options->headers, "A header to send; repeat for more")
      ->type_name("'NAME: VALUE'")
      ->group(request);
  cmd->add_option("--body", options->body, "The request body")->type_name("TEXT")->group(request);
  cmd->add_option("--body-file", options->body_file, "Read the request body from a file")
      ->type_name("FILE")
      ->group(request);
  cmd->add_option("--vary-header", options->vary_header,
                  "Each request carries the next value in turn, to load several callers at once; "
                  "the report counts each separately")
      ->type_name("'NAME=V1,V2,...'")
      ->group(request);
  cmd->add_option("--timeout", options->timeout,
                  "Give up on a connection or a response after this long (default 10s)")
      ->type_name("TIME")
      ->group(request);

  const char* expect = "Assertions (exit status 1 when one fails)";
  cmd->add_option("--expect-status", options->expect_status,
                  "Every request must get one of these statuses, e.g. 200,429")
      ->type_name("LIST")
      ->group(expect);
  cmd->add_option("--expect-admitted", options->expect_admitted,
                  "Exactly N requests must be admitted (2xx)")
      ->check(non_negative)
      ->type_name("N")
      ->group(expect);
  cmd->add_option("--expect-admitted-max", options->expect_admitted_max,
                  "At most N requests may be admitted (2xx)")
      ->check(non_negative)
      ->type_name("N")
      ->group(expect);

  const char* out = "Output";
  cmd->add_option("--json", output->json, "Also write the report as JSON")
      ->type_name("FILE")
      ->group(out);
  cmd->add_option("--chart", output->chart,
                  "Also draw admitted and rejected over time and the latency percentiles, as SVG")
      ->type_name("FILE")
      ->group(out);
  cmd->add_flag("-q,--quiet", output->quiet,
                "Print no report and no progress line, only errors and failed assertions")
      ->group(out);

  cmd->callback([options, output] {
    const int code = run_bench(*options, *output);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace sluice::cli
