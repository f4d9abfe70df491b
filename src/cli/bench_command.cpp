#include "cli/bench_command.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
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

std::string error_text(int error) {
  return std::error_code(error, std::system_category()).message();
}

// A report file (--json, --chart). It is checked before the run, so that a long run does not end
// in "cannot write", but not touched until there is a report: a run that fails leaves an older
// file as it was. "-" is stdout.
class ReportFile {
 public:
  ReportFile(std::string flag, std::string path) : flag_(std::move(flag)), path_(std::move(path)) {}

  bool to_stdout() const { return path_ == "-"; }

  // Whether the two name one file: by their paths made absolute (a file not there yet too), or (both
  // there) by device and inode.
  bool same_file(const ReportFile& other) const {
    if (to_stdout() || other.to_stdout()) return false;
    std::error_code ec1;
    std::error_code ec2;
    // Absolute first: a relative path of a file not there yet ("x") stays relative, where "./x"
    // would not.
    const auto a_path = std::filesystem::weakly_canonical(std::filesystem::absolute(path_, ec1), ec1);
    const auto b_path = std::filesystem::weakly_canonical(std::filesystem::absolute(other.path_, ec2), ec2);
    if (path_ == other.path_ || (!ec1 && !ec2 && a_path == b_path)) return true;
    struct stat a {};
    struct stat b {};
    return ::stat(path_.c_str(), &a) == 0 && ::stat(other.path_.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
  }
  const std::string& path() const { return path_; }

  // Whether the file could be written, without creating or truncating it: "" or what is wrong. A
  // file not there yet is tried by making (and removing) a temporary file beside it, as write()
  // will: a directory that access() says is writable may still refuse a new file (/proc, /sys, a
  // read-only mount, for root).
  std::string check() const {
    if (to_stdout()) return {};
    if (path_.empty()) return flag_ + ": give a file name, or - for stdout";
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return problem("it is a directory");
      if (::access(path_.c_str(), W_OK) != 0) return problem(error_text(errno));
      return {};  // written in place when no temporary file can be made beside it
    }
    if (errno != ENOENT) return problem(error_text(errno));
    std::string temp = temp_name();
    const int fd = ::mkstemp(temp.data());
    if (fd < 0) return problem(error_text(errno));
    ::close(fd);
    ::unlink(temp.c_str());
    return {};
  }

  // Writes the whole of `content`. A regular file (or a new one) is written to a temporary file in
  // the same directory and renamed into place once complete, so that a reader never sees half a
  // report. Anything else is written as it is: a device or a pipe, and a symbolic link, which may
  // name what the shell writes to too (/dev/stdout redirected to a file: a rename would put the
  // report in place of that file, and the shell's output in the one unlinked); so is a file in a
  // directory where no temporary file can be made. "" or what went wrong.
  std::string write(const std::string& content) const {
    if (to_stdout()) {
      std::cout << content << std::flush;
      return std::cout ? "" : problem("stdout could not be written");
    }
    struct stat st {};
    const bool exists = ::lstat(path_.c_str(), &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) return write_in_place(content);
    std::string temp = temp_name();
    const int fd = ::mkstemp(temp.data());
    if (fd < 0) return exists ? write_in_place(content) : problem(error_text(errno));
    // mkstemp makes the file 0600: give it the old file's mode, or what a new file would get.
    mode_t mode = 0;
    if (exists) {
      mode = st.st_mode & 07777;
    } else {
      const mode_t mask = ::umask(0);
      ::umask(mask);
      mode = 0666 & ~mask;
    }
    std::string failure;
    for (std::size_t done = 0; done < content.size() && failure.empty();) {
      const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
      if (n < 0 && errno != EINTR) failure = error_text(errno);
      if (n > 0) done += static_cast<std::size_t>(n);
    }
    if (failure.empty() && ::fchmod(fd, mode) != 0) failure = error_text(errno);
    if (::close(fd) != 0 && failure.empty()) failure = error_text(errno);
    if (failure.empty() && ::rename(temp.c_str(), path_.c_str()) != 0) failure = error_text(errno);
    if (!failure.empty()) {
      ::unlink(temp.c_str());
      return problem(failure);
    }
    return {};
  }

 private:
  std::string problem(const std::string& why) const {
    return flag_ + ": cannot write '" + path_ + "': " + why;
  }

  std::string write_in_place(const std::string& content) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << content;
    out.close();
    return out ? "" : problem("error while writing");
  }

  // The template of a temporary file beside the report, for mkstemp.
  std::string temp_name() const { return directory_of(path_) + "/." + base_name(path_) + ".XXXXXX"; }

  static std::string directory_of(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
  }
  static std::string base_name(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
  }

  std::string flag_;
  std::string path_;
};

// The CPUs this process may run on, which the default thread count goes by: under `taskset` or in
// a container's cpuset they are fewer than the machine has, and a thread more than there are CPUs
// only takes turns with another.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int run_bench(const bench::Options& options, const Output& output) {
  Result<bench::Plan> plan = bench::make_plan(options, usable_cpus());
  if (!plan) return cannot_run(plan.error().message);

  // Check the output files first: a long run should not end in "cannot write".
  std::optional<ReportFile> json_file;
  std::optional<ReportFile> chart_file;
  if (output.json) json_file.emplace("--json", *output.json);
  if (output.chart) chart_file.emplace("--chart", *output.chart);
  for (const std::optional<ReportFile>& file : {json_file, chart_file}) {
    if (!file) continue;
    if (const std::string problem = file->check(); !problem.empty()) return cannot_run(problem);
  }
  const bool json_to_stdout = json_file && json_file->to_stdout();
  const bool chart_to_stdout = chart_file && chart_file->to_stdout();
  if (json_to_stdout && chart_to_stdout) {
    return cannot_run("--json - and --chart -: only one of them can go to stdout");
  }
  if (json_file && chart_file && json_file->same_file(*chart_file)) {
    return cannot_run("--json and --chart name one file ('" + json_file->path() + "'): give each its own");
  }
  catch_interrupt();
  bench::RunHooks hooks;
  hooks.stop = &g_interrupted;
  hooks.on_stopping = [&] {
    // On stderr whether or not stdout is a terminal: the wait can last the whole --timeout.
    std::cerr << (isatty(STDOUT_FILENO) == 1 ? "\r\x1b[K" : "") << "sluice bench: stopping: waiting up to "
              << options.timeout << " for the requests in flight; Ctrl-C again to quit at once\n";
  };
  // The progress line, on a terminal, and only where the text report goes: not over JSON or SVG on
  // stdout (a terminal may still be read by a program: a pty in CI, `docker run -t`).
  const bool live = !output.quiet && isatty(STDOUT_FILENO) == 1 && !json_to_stdout && !chart_to_stdout;
  if (live) {
    hooks.on_progress = [](const bench::Progress& p) {
      std::cout << "\r" << bench::format_progress(p) << "\x1b[K" << std::flush;
    };
  }
  Result<bench::RunResult> result = bench::run(*plan, hooks);
  if (live) std::cout << "\r\x1b[K" << std::flush;
  if (!result) return cannot_run(result.error().message);

  const bench::Report report = bench::make_report(*plan, *result);
  // "-" puts the JSON or the chart on stdout in place of the text report.
  if (!output.quiet && !json_to_stdout && !chart_to_stdout) {
    std::cout << bench::format_report(report) << std::flush;
    if (!std::cout) std::cerr << "sluice bench: the report could not be written to stdout\n";
  }
  // A run that failed writes no file: an older one stays as it was. The JSON or the chart on stdout
  // is the report there, as the text is without them (the JSON says "passed": false).
  const bool nothing_sent = report.requests == 0;
  if (!report.stopped_early && (nothing_sent || (report.responses == 0 && report.errors > 0))) {
    if (json_to_stdout) (void)json_file->write(bench::to_json(report));
    if (chart_to_stdout) (void)chart_file->write(bench::to_svg(report));
    return cannot_run(nothing_sent ? "no request was sent: the run ended before its first (is --duration that short?)"
                                   : "no request got a response (" + report.most_common_error() + ")");
  }
  if (json_file) {
    if (const std::string e = json_file->write(bench::to_json(report)); !e.empty()) {
      return cannot_run(e);
    }
  }
  if (chart_file) {
    if (const std::string e = chart_file->write(bench::to_svg(report)); !e.empty()) {
      return cannot_run(e);
    }
  }
  // The report and the files are of what was seen, but an incomplete run has not passed; nor does a
  // script reading the status want 1 or 2, which speak of the target.
  if (report.stopped_early) {
    std::cerr << "sluice bench: interrupted; the report is of what was seen until then\n";
    return kInterrupted;
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
                  "Threads, each with its share of the connections (default: one per CPU it may "
                  "run on)")
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
  cmd->add_option("-m,--method", options->method, "HTTP method, sent in upper case (default GET)")
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
  cmd->add_option("--json", output->json,
                  "Also write the report as JSON (- for stdout, in place of the text report)")
      ->type_name("FILE")
      ->group(out);
  cmd->add_option("--chart", output->chart,
                  "Also draw admitted and rejected over time and the latency percentiles, as SVG "
                  "(- for stdout, in place of the text report)")
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
