// The real `sluice bench` binary: exit status 0 / 1 / 2 / 130 for passing assertions, each failing
// one, bad flags or a target that cannot be reached, and Ctrl-C, with a clear message and never a
// hang; its JSON (never a truncated file), chart, --quiet and --help.
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <stdlib.h>
#include <termios.h>
#include <netinet/in.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_server.h"

namespace sluice::bench {
namespace {

using testing::TestServer;
using testing::TestServerOptions;

struct Outcome {
  int status = -1;  // the exit status; -1 when it did not exit by itself
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string out_path() { return ::testing::TempDir() + "sluice_cli_out.txt"; }
std::string err_path() { return ::testing::TempDir() + "sluice_cli_err.txt"; }

// The binary's argv for `args`, as execv takes it.
struct Argv {
  explicit Argv(const std::vector<std::string>& args) : strings{SLUICE_BINARY} {
    strings.insert(strings.end(), args.begin(), args.end());
    for (std::string& a : strings) pointers.push_back(a.data());
    pointers.push_back(nullptr);
  }
  std::vector<std::string> strings;
  std::vector<char*> pointers;
};

// Starts the binary with stdout and stderr in files, and on the CPUs `cpus` if given (its affinity,
// as `taskset` sets it). An alarm kills it if it hangs past 20 s.
pid_t start(const std::vector<std::string>& args, const cpu_set_t* cpus = nullptr) {
  const std::string out = out_path();
  const std::string err = err_path();
  Argv argv(args);
  const pid_t pid = fork();
  if (pid == 0) {
    if (cpus != nullptr && sched_setaffinity(0, sizeof *cpus, cpus) != 0) _exit(126);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, STDOUT_FILENO);
    dup2(e, STDERR_FILENO);
    alarm(20);
    execv(argv.pointers[0], argv.pointers.data());
    _exit(127);
  }
  return pid;
}

// Waits for the binary started by start() to end.
Outcome finish(pid_t pid) {
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  Outcome result;
  result.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  result.out = slurp(out_path());
  result.err = slurp(err_path());
  return result;
}

Outcome sluice(const std::vector<std::string>& args) { return finish(start(args)); }

// Runs the binary with its stdout on a terminal (a pseudo-terminal whose output is read here as it
// comes, its newlines kept as they are written): what it printed there, and its exit status.
std::pair<int, std::string> sluice_on_a_terminal(const std::vector<std::string>& args) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return {-1, "no pseudo-terminal"};
  const std::string slave_name = ptsname(master);
  Argv argv(args);
  const pid_t pid = fork();
  if (pid == 0) {
    const int slave = open(slave_name.c_str(), O_RDWR | O_NOCTTY);
    termios raw{};
    tcgetattr(slave, &raw);
    raw.c_oflag &= ~static_cast<tcflag_t>(OPOST);  // "\n" stays "\n"
    tcsetattr(slave, TCSANOW, &raw);
    dup2(slave, STDOUT_FILENO);
    const int e = open(err_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(e, STDERR_FILENO);
    alarm(20);
    execv(argv.pointers[0], argv.pointers.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));  // EIO once it exits
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  close(master);
  return {WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, out};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int count_lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

TEST(Cli, HelpExitsZeroAndShowsExamples) {
  const Outcome o = sluice({"bench", "--help"});
  EXPECT_EQ(o.status, 0);
  EXPECT_TRUE(contains(o.out, "--burst N")) << o.out;
  EXPECT_TRUE(contains(o.out, "Examples:")) << o.out;
  EXPECT_TRUE(contains(o.out, "--burst 1000 --expect-admitted 50 --expect-status 200,429"))
      << o.out;
}

TEST(Cli, PassingAssertionsExitZeroAndWriteJsonAndChart) {
  TestServer server;
  const std::string json = ::testing::TempDir() + "sluice_cli.json";
  const std::string chart = ::testing::TempDir() + "sluice_cli.svg";
  const Outcome o =
      sluice({"bench", "--burst", "100", "--expect-admitted", "50", "--expect-admitted-max", "50",
              "--expect-status", "200,429", "--json", json, "--chart", chart, server.url()});
  EXPECT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_TRUE(contains(o.out, "Admitted     50 (2xx)")) << o.out;
  EXPECT_FALSE(contains(o.out, "\r")) << "no progress line when stdout is not a terminal";
  const auto report = boost::json::parse(slurp(json)).as_object();
  EXPECT_EQ(report.at("requests").to_number<int>(), 100);
  EXPECT_EQ(report.at("admitted").to_number<int>(), 50);
  EXPECT_EQ(report.at("rejected").to_number<int>(), 50);
  EXPECT_TRUE(report.at("passed").as_bool());
  EXPECT_EQ(slurp(chart).rfind("<svg", 0), 0u);
}

TEST(Cli, EachFailingAssertionExitsOneWithItsReasonOnOneLine) {
  struct Case {
    std::vector<std::string> flags;
    std::string err;
  };
  const std::vector<Case> cases{
      {{"--burst", "100", "--expect-admitted", "49"},
       "sluice bench: FAILED --expect-admitted 49: 50 admitted (2xx), expected exactly 49\n"},
      {{"--burst", "100", "--expect-admitted-max", "40"},
       "sluice bench: FAILED --expect-admitted-max 40: 50 admitted (2xx), more than the 40 "
       "allowed\n"},
      {{"-n", "60", "--expect-status", "200"},
       "sluice bench: FAILED --expect-status 200: 10 responses had another status: 10 × 429\n"},
  };
  for (const Case& c : cases) {
    TestServer server;
    std::vector<std::string> args{"bench"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    args.push_back(server.url());
    const Outcome o = sluice(args);
    EXPECT_EQ(o.status, 1) << c.flags[2];
    EXPECT_EQ(o.err, c.err);
  }
}

TEST(Cli, OnlyBadStatusesMeanNoResponseAndExitTwo) {
  // A 600 vanished from the counts and --expect-status passed "all 0 responses", exit 0.
  TestServer server(
      TestServerOptions{.raw_response = "HTTP/1.1 600 X\r\nContent-Length: 0\r\n\r\n"});
  const Outcome o = sluice({"bench", "-n", "4", "-c", "1", "--expect-status", "200", server.url()});
  EXPECT_EQ(o.status, 2);
  EXPECT_TRUE(contains(o.out, "Requests     4 in")) << o.out;
  EXPECT_TRUE(contains(o.out, "4 × bad response: status 600, not from 100 to 599")) << o.out;
  EXPECT_EQ(o.err,
            "sluice bench: no request got a response (bad response: status 600, not from 100 to "
            "599)\n");
}

TEST(Cli, EveryFailedAssertionGetsItsOwnLine) {
  TestServer server;
  const Outcome o = sluice({"bench", "--burst", "60", "--expect-status", "200", "--expect-admitted",
                            "60", server.url()});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(count_lines(o.err), 2) << o.err;
}

TEST(Cli, BadFlagsExitTwoWithAMessage) {
  const std::vector<std::vector<std::string>> cases{
      {"bench"},
      {"frobnicate"},
      {"bench", "--bogus", "http://127.0.0.1:1/"},
      {"bench", "--burst", "10", "--rate", "5", "http://127.0.0.1:1/"},
      {"bench", "--rate", "abc", "http://127.0.0.1:1/"},
      {"bench", "--burst", "-5", "http://127.0.0.1:1/"},
      {"bench", "--duration", "10", "http://127.0.0.1:1/"},
      {"bench", "--ramp", "10:100", "http://127.0.0.1:1/"},
      {"bench", "https://127.0.0.1:1/"},
      {"bench", "--header", "broken", "http://127.0.0.1:1/"},
      {"bench", "--expect-status", "2xx", "http://127.0.0.1:1/"},
      {"bench", "--body-file", "/", "http://127.0.0.1:1/"},  // a directory: it was an abort
  };
  for (const auto& args : cases) {
    const Outcome o = sluice(args);
    EXPECT_EQ(o.status, 2) << args.back();
    EXPECT_FALSE(o.err.empty()) << args.back();
  }
}

TEST(Cli, ACountTooLargeFor64BitsIsRefused) {
  // CLI11 read it as 2^64 - 1, and the run went on (here to a refused connection).
  for (const char* flag : {"--requests", "--expect-admitted", "--expect-admitted-max"}) {
    const Outcome o = sluice({"bench", flag, "99999999999999999999", "http://127.0.0.1:1/"});
    EXPECT_EQ(o.status, 2) << flag;
    EXPECT_TRUE(contains(o.err, std::string(flag) + ": '99999999999999999999' is too large"))
        << o.err;
  }
}

// A TCP socket bound to 127.0.0.1 on a free port, and its address.
std::pair<int, sockaddr_in> bound_socket() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  return {s, addr};
}

TEST(Cli, ARefusedConnectionExitsTwoWithAClearMessage) {
  const auto [s, addr] = bound_socket();
  ASSERT_NE(addr.sin_port, 0);
  close(s);  // bound, never listened: connecting is refused
  const std::string port = std::to_string(ntohs(addr.sin_port));
  const Outcome o = sluice({"bench", "-n", "5", "http://127.0.0.1:" + port + "/"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "sluice bench: cannot connect to 127.0.0.1:" + port + ": Connection refused\n");
  // An IPv6 address is written in brackets, as the URL has it.
  const Outcome v6 = sluice({"bench", "-n", "5", "http://[::1]:" + port + "/"});
  EXPECT_EQ(v6.status, 2);
  EXPECT_EQ(v6.err.substr(0, 40 + port.size()), "sluice bench: cannot connect to [::1]:" + port + ": ") << v6.err;
}

TEST(Cli, AHostThatNeverAnswersExitsTwoAfterTheTimeout) {
  // A listener that never accepts, its queue filled: connections to it are not answered.
  const auto [s, addr] = bound_socket();
  ASSERT_EQ(listen(s, 0), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int f = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(f, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    fillers.push_back(f);
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/";
  const auto started = std::chrono::steady_clock::now();
  const Outcome o = sluice({"bench", "-n", "3", "-c", "3", "--timeout", "300ms", url});
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(o.status, 2);
  EXPECT_TRUE(contains(o.err, "within 300ms")) << o.err;
  EXPECT_LT(took, std::chrono::seconds(3));
  for (int f : fillers) close(f);
  close(s);
}

TEST(Cli, AnInterruptedRunExits130AfterItsReportAndJson) {
  // It exited 0, and its assertions passed on what an incomplete run had seen.
  TestServer server;
  const std::string json = ::testing::TempDir() + "sluice_cli_interrupted.json";
  const pid_t pid = start({"bench", "--rate", "10", "-d", "60s", "--expect-status", "200",
                           "--json", json, server.url()});
  ASSERT_TRUE(server.wait_for_arrivals(1));  // the load is under way: Ctrl-C is caught
  kill(pid, SIGINT);
  const Outcome o = finish(pid);
  EXPECT_EQ(o.status, 130);
  EXPECT_TRUE(contains(o.out, "stopped early (interrupted)")) << o.out;
  EXPECT_TRUE(contains(o.out, "ok    --expect-status 200")) << o.out;
  EXPECT_EQ(o.err,
            "sluice bench: stopping: waiting up to 10s for the requests in flight; Ctrl-C again to quit at once\n"
            "sluice bench: interrupted; the report is of what was seen until then\n");
  const auto report = boost::json::parse(slurp(json)).as_object();
  EXPECT_TRUE(report.at("stopped_early").as_bool());
  EXPECT_FALSE(report.at("passed").as_bool());
}

TEST(Cli, AFailedRunLeavesTheJsonFileAsItWas) {
  // The file was opened, and so truncated, before the run; a run that failed left it empty.
  const auto [s, addr] = bound_socket();
  close(s);  // nothing listens there: the run fails before the load
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/";
  const std::string old_json = ::testing::TempDir() + "sluice_cli_old.json";
  std::ofstream(old_json) << "{\"old\": true}\n";
  const std::string new_json = ::testing::TempDir() + "sluice_cli_new.json";
  std::remove(new_json.c_str());
  EXPECT_EQ(sluice({"bench", "-n", "1", "--json", old_json, url}).status, 2);
  EXPECT_EQ(slurp(old_json), "{\"old\": true}\n");
  EXPECT_EQ(sluice({"bench", "-n", "1", "--json", new_json, url}).status, 2);
  EXPECT_NE(access(new_json.c_str(), F_OK), 0) << "no file without a report";
  // A target that takes connections and answers none: the run fails, and says so in no file (it
  // said "passed": true where its assertions held of nothing).
  const auto [silent, silent_addr] = bound_socket();
  ASSERT_EQ(listen(silent, 16), 0);  // connections queue, never accepted: requests are not answered
  const std::string silent_url = "http://127.0.0.1:" + std::to_string(ntohs(silent_addr.sin_port)) + "/";
  const Outcome unanswered = sluice({"bench", "-q", "-n", "2", "-c", "2", "--timeout", "200ms",
                                     "--expect-admitted-max", "10", "--json", old_json, silent_url});
  EXPECT_EQ(unanswered.status, 2);
  EXPECT_TRUE(contains(unanswered.err, "no request got a response")) << unanswered.err;
  EXPECT_EQ(slurp(old_json), "{\"old\": true}\n");
  // On stdout the JSON is the report, as the text is without it: it says the run did not pass.
  const Outcome to_stdout = sluice({"bench", "-n", "1", "--timeout", "200ms", "--expect-admitted-max", "10",
                                    "--json", "-", silent_url});
  EXPECT_EQ(to_stdout.status, 2);
  EXPECT_FALSE(boost::json::parse(to_stdout.out).at("passed").as_bool()) << to_stdout.out;
  const Outcome chart = sluice({"bench", "-n", "1", "--timeout", "200ms", "--chart", "-", silent_url});
  close(silent);
  EXPECT_EQ(chart.status, 2);
  EXPECT_TRUE(chart.out.starts_with("<svg")) << chart.out.substr(0, 80);
  // A file that cannot be written is still found out before the run.
  const Outcome o = sluice({"bench", "-n", "1", "--json", "/nonexistent/out.json", url});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "sluice bench: --json: cannot write '/nonexistent/out.json': No such file or "
            "directory\n");
}

// --json /dev/stdout > out.json names, through a symbolic link, the file the shell writes the text
// report to: replaced by a rename, the report took its place and the text went to the file unlinked.
// A link is written through, in place: the file it names stays the same file.
TEST(Cli, JsonThroughASymbolicLinkIsWrittenInPlace) {
  TestServer server;
  const std::string target = ::testing::TempDir() + "sluice_cli_target.json";
  const std::string link = ::testing::TempDir() + "sluice_cli_link.json";
  std::ofstream(target) << "old\n";
  std::remove(link.c_str());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  struct stat before {};
  ASSERT_EQ(stat(target.c_str(), &before), 0);
  EXPECT_EQ(sluice({"bench", "-q", "-n", "3", "--json", link, server.url()}).status, 0);
  struct stat after {};
  ASSERT_EQ(stat(target.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the file was replaced, not written";
  struct stat l {};
  ASSERT_EQ(lstat(link.c_str(), &l), 0);
  EXPECT_TRUE(S_ISLNK(l.st_mode));
  EXPECT_EQ(boost::json::parse(slurp(target)).at("requests").to_number<int>(), 3);
}

TEST(Cli, JsonToADashGoesToStdoutInPlaceOfTheReport) {
  // It wrote a file named "-".
  TestServer server;
  const Outcome o = sluice({"bench", "-n", "5", "--json", "-", server.url()});
  EXPECT_EQ(o.status, 0) << o.err;
  boost::system::error_code ec;
  const boost::json::value report = boost::json::parse(o.out, ec);
  ASSERT_FALSE(ec) << o.out;
  EXPECT_EQ(report.at("requests").to_number<int>(), 5);
  EXPECT_EQ(sluice({"bench", "-n", "5", "--json", "-", "--chart", "-", server.url()}).status, 2);
}

// The default thread count is the number of CPUs the process may run on (under `taskset`, or a
// container's cpuset), not every CPU of the machine; never more than the connections.
TEST(Cli, TheDefaultThreadCountIsTheCpusItMayRunOn) {
  TestServer server;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  const auto threads_run = [&](const cpu_set_t* cpus) {
    const Outcome o =
        finish(start({"bench", "-n", "40", "-c", "8", "--json", "-", server.url()}, cpus));
    EXPECT_EQ(o.status, 0) << o.err;
    boost::system::error_code ec;
    const boost::json::value report = boost::json::parse(o.out, ec);
    return ec ? -1 : report.at("threads").to_number<int>();
  };
  EXPECT_EQ(threads_run(nullptr), std::min(CPU_COUNT(&allowed), 8));

  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  EXPECT_EQ(threads_run(&one), 1);
}

// On a terminal, the progress line is drawn where the text report goes, but not over the JSON that
// takes its place (a pty in CI, `docker run -t`): the terminal gets the JSON alone.
TEST(Cli, JsonToADashOnATerminalHasNoProgressLine) {
  TestServer server;
  const auto [status, out] = sluice_on_a_terminal({"bench", "-n", "5", "--json", "-", server.url()});
  EXPECT_EQ(status, 0) << out << slurp(err_path());
  EXPECT_FALSE(contains(out, "\r")) << out;
  boost::system::error_code ec;
  const boost::json::value report = boost::json::parse(out, ec);
  ASSERT_FALSE(ec) << out;
  EXPECT_EQ(report.at("requests").to_number<int>(), 5);
  const auto [text_status, text] = sluice_on_a_terminal({"bench", "-n", "5", server.url()});
  EXPECT_EQ(text_status, 0);
  EXPECT_TRUE(contains(text, "\r\x1b[K")) << "the text report has its progress line cleared: " << text;
}

// A report file that cannot be made is refused before the run, which sends nothing: an empty name,
// and a file in a directory that access() says root may write but that refuses new files (/proc).
TEST(Cli, AReportFileThatCannotBeMadeIsRefusedBeforeTheRun) {
  TestServer server;
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--json", ""}, {"--chart", ""},
                                               {"--json", "/proc/sluice-bench-test.json"}}) {
    const Outcome o = sluice({"bench", "-n", "3", flags[0], flags[1], server.url()});
    EXPECT_EQ(o.status, 2) << flags[1] << ": " << o.out << o.err;
    EXPECT_TRUE(contains(o.err, flags[0] + ": ")) << o.err;
    EXPECT_FALSE(contains(o.out, "Requests")) << "no run: " << o.out;
  }
  EXPECT_EQ(server.arrivals().size(), 0u);
}

TEST(Cli, QuietPrintsNothingWhenAllIsWell) {
  TestServer server;
  const Outcome o = sluice({"bench", "-q", "-n", "10", "--expect-admitted", "10", server.url()});
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "");
}

// A run over before its first request passed every assertion on nothing and exited 0.
TEST(Cli, ARunThatSendsNothingExitsTwo) {
  TestServer server;
  const Outcome o = sluice({"bench", "-d", "1us", "--expect-status", "200", "--expect-admitted", "0", server.url()});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "sluice bench: no request was sent: the run ended before its first (is --duration that short?)\n");
}

// A reader of stdout that went away (`| true`) killed the run with SIGPIPE: no JSON, no FAILED line.
TEST(Cli, AClosedStdoutCostsTheTextReportOnly) {
  TestServer server;  // admits 50: --expect-admitted 5 fails
  const std::string json = ::testing::TempDir() + "sluice_cli_pipe.json";
  std::remove(json.c_str());
  const std::string err = err_path();
  // Made before the fork: the child of a threaded process calls nothing that may allocate.
  std::vector<std::string> args{SLUICE_BINARY, "bench", "-n", "20", "-c", "2", "--expect-admitted", "5",
                                "--json", json, server.url()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int p[2];
    if (pipe(p) != 0) _exit(126);
    close(p[0]);
    dup2(p[1], STDOUT_FILENO);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(e, STDERR_FILENO);
    alarm(20);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "killed by signal " << WTERMSIG(wstatus);
  EXPECT_EQ(WEXITSTATUS(wstatus), 1);
  EXPECT_EQ(boost::json::parse(slurp(json)).at("requests").to_number<int>(), 20);
  const std::string said = slurp(err);
  EXPECT_TRUE(contains(said, "the report could not be written to stdout")) << said;
  EXPECT_TRUE(contains(said, "FAILED --expect-admitted")) << said;
}

// --json and --chart naming one file: the chart silently took the JSON's place.
TEST(Cli, JsonAndChartToOneFileAreRefused) {
  TestServer server;
  const std::string both = ::testing::TempDir() + "sluice_cli_both.out";
  std::remove(both.c_str());  // not there yet, and named two ways
  const std::string dir = both.substr(0, both.rfind('/'));
  const std::string other = dir + "/./" + both.substr(both.rfind('/') + 1);
  const Outcome o = sluice({"bench", "-n", "2", "--json", both, "--chart", other, server.url()});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "sluice bench: --json and --chart name one file ('" + both + "'): give each its own\n");
  // A relative path and the same with "./" (here, in the working directory).
  const Outcome relative = sluice({"bench", "-n", "2", "--json", "sluice_cli_rel.out", "--chart",
                                   "./sluice_cli_rel.out", server.url()});
  EXPECT_EQ(relative.status, 2);
  EXPECT_TRUE(contains(relative.err, "name one file")) << relative.err;
  EXPECT_EQ(server.arrivals().size(), 0u) << "refused before the run";
}

}  // namespace
}  // namespace sluice::bench
