// build/sluice serve as a child process: startup errors, SIGHUP and file-change reloads (counters
// carried over, an invalid file refused while the old configuration serves), SIGTERM drain.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "config/store.h"
#include "gateway/demo.h"
#include "gateway/gateway.h"
#include "http_client.h"

namespace sluice::gateway {
namespace {

using namespace std::chrono_literals;
using testing::Child;
using testing::HttpClient;

std::string config_yaml(std::uint16_t upstream, int limit, const std::string& description) {
  return "upstreams:\n"
         "  - {name: app, targets: [127.0.0.1:" + std::to_string(upstream) + "]}\n"
         "systems:\n"
         "  - key: crm\n"
         "    description: \"" + description + "\"\n"
         "    interfaces: [echo]\n"
         "    limits: [{algorithm: fixed_window, limit: " + std::to_string(limit) + ", period: 1h}]\n"
         "interfaces:\n"
         "  - {id: echo, path: /echo/*, upstream: app}\n";
}

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto up = DemoUpstream::start();
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(*up);
    dir_ = testing::temp_dir();
    config_path_ = dir_ + "/sluice.yaml";
    port_ = testing::free_port();
    admin_port_ = testing::free_port();
  }

  std::unique_ptr<Child> serve(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{SLUICE_BINARY, "serve", "--config", config_path_, "--listen",
                                  "127.0.0.1:" + std::to_string(port_), "--admin-listen",
                                  "127.0.0.1:" + std::to_string(admin_port_), "--access-log", "off"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Child>(argv, dir_);
  }

  bool serving() {
    return testing::eventually([&] { return HttpClient(port_).get("/_sluice/healthz").status == 200; });
  }

  // The generation of the configuration served, from the admin listener's metrics.
  int generation() {
    const std::string m = HttpClient(admin_port_).get("/metrics").body;
    const std::size_t at = m.find("\nsluice_config_generation ");
    return at == std::string::npos ? -1 : std::atoi(m.c_str() + at + 26);
  }

  std::unique_ptr<DemoUpstream> upstream_;
  std::string dir_;
  std::string config_path_;
  std::uint16_t port_ = 0;
  std::uint16_t admin_port_ = 0;
};

TEST_F(ProcessTest, ABadConfigurationIsRefusedWithPreciseMessagesAndAnError) {
  testing::write_file(config_path_, "systems:\n  - key: crm\n    enabled: maybe\n    colour: red\n");
  auto child = serve();
  EXPECT_EQ(child->wait_exit(10s), 1);
  const std::string err = child->stderr_text();
  EXPECT_NE(err.find(config_path_ + ":3:14: systems[0].enabled: must be true or false, got \"maybe\""),
            std::string::npos) << err;
  EXPECT_NE(err.find(config_path_ + ":4:5: systems[0].colour: unknown field \"colour\""), std::string::npos) << err;
  EXPECT_NE(err.find("2 problems"), std::string::npos);
}

TEST_F(ProcessTest, APortInUseIsSaid) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "a"));
  auto first = serve();
  ASSERT_TRUE(serving());
  auto second = serve();
  EXPECT_EQ(second->wait_exit(10s), 1);
  EXPECT_NE(second->stderr_text().find("already in use"), std::string::npos) << second->stderr_text();
}

// Both listeners on one address is said as such, not as another process listening there.
TEST_F(ProcessTest, OneAddressForBothListenersIsSaid) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "a"));
  const std::string both = "127.0.0.1:" + std::to_string(port_);
  Child child({SLUICE_BINARY, "serve", "--config", config_path_, "--listen", both, "--admin-listen", both}, dir_);
  EXPECT_EQ(child.wait_exit(10s), 1);
  EXPECT_NE(child.stderr_text().find("listen is the same address"), std::string::npos) << child.stderr_text();
  // Written another way, it is the same socket: said so, not as another process listening there.
  const std::string port = std::to_string(port_);
  for (const auto& [listen, admin] : {std::pair{both, "localhost:" + port}, std::pair{"0.0.0.0:" + port, both}}) {
    Child other({SLUICE_BINARY, "serve", "--config", config_path_, "--listen", listen, "--admin-listen", admin}, dir_);
    EXPECT_EQ(other.wait_exit(10s), 1);
    EXPECT_NE(other.stderr_text().find("(admin_listen): its port is listen's (" + listen + "), on an address that overlaps"),
              std::string::npos)
        << other.stderr_text();
  }
}

TEST_F(ProcessTest, HelpDescribesServe) {
  Child help({SLUICE_BINARY, "serve", "--help"}, dir_);
  EXPECT_EQ(help.wait_exit(10s), 0);
  EXPECT_NE(help.stdout_text().find("--config"), std::string::npos);
  EXPECT_NE(help.stdout_text().find("SIGHUP"), std::string::npos);
  EXPECT_NE(help.stdout_text().find("drain_delay"), std::string::npos);
}

TEST_F(ProcessTest, SighupReloadsKeepingCountersAndRefusesAnInvalidFile) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "first"));
  auto child = serve();
  ASSERT_TRUE(serving());
  HttpClient c(port_);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(generation(), 1);

  // The limit is unchanged (only the description is): its count of 3 carries over.
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "second"));
  child->signal(SIGHUP);
  ASSERT_TRUE(testing::eventually([&] { return generation() == 2; }));
  EXPECT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(c.get("/echo/x", "crm").status, 429);

  // An invalid file is refused; the old configuration keeps serving.
  testing::write_file(config_path_, "systems: [{key: crm, enabled: perhaps}]\n");
  child->signal(SIGHUP);
  ASSERT_TRUE(testing::eventually([&] {
    return HttpClient(admin_port_).get("/metrics").body.find("sluice_config_reloads_total{result=\"error\"} 1") !=
           std::string::npos;
  }));
  EXPECT_EQ(generation(), 2);
  EXPECT_EQ(c.get("/echo/x", "crm").status, 429);
  EXPECT_NE(child->stderr_text().find("enabled: must be true or false"), std::string::npos);
}

// A reload from a file that cannot be read says why, with the file; the configuration in use keeps
// serving.
TEST_F(ProcessTest, AReloadFromAFileThatCannotBeReadSaysWhy) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "first"));
  Child child(testing::held_to_file_modes({SLUICE_BINARY, "serve", "--config", config_path_, "--listen",
                                           "127.0.0.1:" + std::to_string(port_), "--admin-listen",
                                           "127.0.0.1:" + std::to_string(admin_port_), "--access-log", "off"}),
              dir_);
  ASSERT_TRUE(serving()) << child.stderr_text();
  auto refused = [&](int n) {
    return testing::eventually([&] {
      return HttpClient(admin_port_).get("/metrics").body.find("sluice_config_reloads_total{result=\"error\"} " +
                                                               std::to_string(n)) != std::string::npos;
    });
  };
  const std::string said = " sluice: reload refused: " + config_path_ + ": cannot read the file: Permission denied\n";
  ASSERT_EQ(::chmod(config_path_.c_str(), 0), 0);  // its inode changed: the watcher reads it again
  ASSERT_TRUE(refused(1)) << child.stderr_text();
  EXPECT_NE(child.stderr_text().find(said), std::string::npos) << child.stderr_text();
  child.signal(SIGHUP);
  ASSERT_TRUE(refused(2)) << child.stderr_text();
  const std::string err = child.stderr_text();
  EXPECT_NE(err.find(said, err.find(said) + 1), std::string::npos) << err;
  EXPECT_EQ(generation(), 1);
  EXPECT_EQ(HttpClient(port_).get("/echo/x", "crm").status, 200);
}

// A reload that changes settings taken at start only names each of them (and only them); the rest
// of the reload is served.
TEST_F(ProcessTest, AReloadNamesTheStartOnlySettingsItChanged) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "first"));
  auto child = serve();
  ASSERT_TRUE(serving());
  // (The file's watcher may reload it before the signal does: the next generation, or one past.)
  const auto reload = [&](const std::string& settings) {
    const int before = generation();
    testing::write_file(config_path_, settings + config_yaml(upstream_->port(), 5, "g" + std::to_string(before)));
    child->signal(SIGHUP);
    ASSERT_TRUE(testing::eventually([&] { return generation() > before; })) << child->stderr_text();
  };
  // The lines that say so, without their times.
  const auto said = [&] {
    std::vector<std::string> lines;
    std::istringstream in(child->stderr_text());
    for (std::string line; std::getline(in, line);) {
      if (line.find("at the next start") != std::string::npos || line.find("on the command line") != std::string::npos) {
        lines.push_back(line.substr(line.find(" sluice: ") + 9));
      }
    }
    return lines;
  };
  reload("store_timeout: 80ms\nfleet_size: 2\naccess_log: \"off\"\n");
  reload("store_timeout: 80ms\nfleet_size: 2\naccess_log: \"off\"\nlisten: 127.0.0.1:1\n");
  reload("store_timeout: 80ms\nfleet_size: 2\naccess_log: \"off\"\nlisten: 127.0.0.1:1\n");  // none changed
  reload("listen: 127.0.0.1:1\nadmin_listen: 127.0.0.1:2\nstore: redis://:s3cret@127.0.0.1:1\n");
  // (serve() gives --listen, --admin-listen and --access-log off; fleet_size and store_timeout go
  // back to what is in effect in the last.)
  EXPECT_EQ(said(), (std::vector<std::string>{
                        "fleet_size and store_timeout changed: they take effect at the next start only (/config "
                        "shows what is in effect)",
                        "listen changed, but it is given on the command line, which the file does not override",
                        "store changed: it takes effect at the next start only (/config shows what is in effect)",
                        "admin_listen and access_log changed, but they are given on the command line, which the "
                        "file does not override",
                    }));
  EXPECT_EQ(child->stderr_text().find("s3cret"), std::string::npos) << child->stderr_text();
  EXPECT_EQ(HttpClient(port_).get("/echo/x", "crm").status, 200);
}

// A configuration file that is removed is said once; the last configuration goes on serving, and
// the file is read again when it is back.
TEST_F(ProcessTest, ARemovedFileIsSaidOnceAndReadAgainWhenBack) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "first"));
  auto child = serve();
  ASSERT_TRUE(serving());
  ASSERT_EQ(std::remove(config_path_.c_str()), 0);
  const std::string gone = "configuration file " + config_path_ + " is gone";
  ASSERT_TRUE(testing::eventually([&] { return child->stderr_text().find(gone) != std::string::npos; }));
  EXPECT_EQ(HttpClient(port_).get("/echo/x", "crm").status, 200);
  testing::write_file(config_path_, config_yaml(upstream_->port(), 5, "back"));
  ASSERT_TRUE(testing::eventually([&] { return generation() == 2; }));
  const std::string err = child->stderr_text();
  EXPECT_EQ(err.find(gone), err.rfind(gone)) << "said more than once: " << err;
}

TEST_F(ProcessTest, AChangedFileIsReloadedWithoutASignal) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 1, "first"));
  auto child = serve();
  ASSERT_TRUE(serving());
  HttpClient c(port_);
  EXPECT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(c.get("/echo/x", "crm").status, 429);
  testing::write_file(config_path_, config_yaml(upstream_->port(), 3, "raised"));
  ASSERT_TRUE(testing::eventually([&] { return generation() == 2; }));
  EXPECT_EQ(c.get("/echo/x", "crm").status, 200);
}

// `cp -p`, `tar x` and tools that keep timestamps write a file and set its modification time back:
// a change of the same size is still seen (by the inode's change time, which no one can set).
TEST_F(ProcessTest, AChangeThatKeepsTheSizeAndModificationTimeIsReloadedToo) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 1, "first"));
  struct stat before {};
  ASSERT_EQ(::stat(config_path_.c_str(), &before), 0);
  auto child = serve();
  ASSERT_TRUE(serving());
  HttpClient c(port_);
  EXPECT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(c.get("/echo/x", "crm").status, 429);
  const std::string raised = config_yaml(upstream_->port(), 3, "other");
  ASSERT_EQ(raised.size(), static_cast<std::size_t>(before.st_size));
  {
    std::ofstream out(config_path_, std::ios::binary | std::ios::trunc);  // in place: the same inode
    out << raised;
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, config_path_.c_str(), times, 0), 0);
  ASSERT_TRUE(testing::eventually([&] { return generation() == 2; }));
  EXPECT_EQ(c.get("/echo/x", "crm").status, 200);
}

TEST_F(ProcessTest, SigtermDrainsRequestsInFlightAndExitsZero) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 100, "drain"));
  auto child = serve();
  ASSERT_TRUE(serving());
  std::atomic<int> status{0};
  std::thread slow([&] { status = HttpClient(port_).get("/echo/x?delay_ms=400", "crm").status; });
  ASSERT_TRUE(testing::eventually([&] { return upstream_->connections() == 1; }));
  child->signal(SIGTERM);
  slow.join();
  EXPECT_EQ(status.load(), 200);
  EXPECT_EQ(child->wait_exit(10s), 0);
  EXPECT_FALSE(testing::can_connect(port_));
}

// A second SIGTERM (or a SIGINT) during the drain does not cut it short, and is not ignored in
// silence: it is said, with what the drain waits for and how long until drain_timeout cuts it. The
// drain then ends as ever, with exit 0.
TEST_F(ProcessTest, AStopSignalDuringTheDrainSaysWhatTheDrainWaitsFor) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 100, "drain"));
  auto child = serve();
  ASSERT_TRUE(serving());
  // An upload half sent: in flight until the rest comes.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port_);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string head = "POST /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nContent-Length: 10\r\n\r\nhalf-";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  ASSERT_TRUE(testing::eventually([&] {
    return HttpClient(admin_port_).get("/metrics").body.find("\nsluice_in_flight_requests 1\n") != std::string::npos;
  }));
  child->signal(SIGTERM);
  ASSERT_TRUE(testing::eventually([&] { return child->stderr_text().find("sluice: draining: ") != std::string::npos; }));
  // The lines said for each signal that comes again, in order.
  const auto again = [&] {
    std::vector<std::string> lines;
    std::istringstream in(child->stderr_text());
    for (std::string line; std::getline(in, line);) {
      if (line.find(" again: ") != std::string::npos) lines.push_back(line);
    }
    return lines;
  };
  child->signal(SIGTERM);
  ASSERT_TRUE(testing::eventually([&] { return again().size() == 1; })) << child->stderr_text();
  child->signal(SIGINT);
  ASSERT_TRUE(testing::eventually([&] { return again().size() == 2; })) << child->stderr_text();
  const std::vector<std::string> said = again();
  for (std::size_t i = 0; i < said.size(); ++i) {
    const std::regex line("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z sluice: " +
                          std::string(i == 0 ? "SIGTERM" : "SIGINT") +
                          " again: already draining, waiting for 1 client connection and 0 admin requests; "
                          "drain_timeout cuts them in (\\d+)s, then the gateway stops");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(said[i], m, line)) << said[i];
    EXPECT_GE(std::stoi(m[1]), 1) << said[i];
    EXPECT_LE(std::stoi(m[1]), 30) << said[i];  // drain_timeout's default
  }
  // The drain goes on: the upload ends, is answered, and the gateway exits 0.
  const std::string rest = "rest!";
  ASSERT_EQ(::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL), static_cast<ssize_t>(rest.size()));
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 OK\r\n")) << answer;
  EXPECT_EQ(child->wait_exit(10s), 0) << child->stderr_text();
}

// With drain_delay, SIGTERM first makes healthz say draining (on both listeners, GET and HEAD) while
// the gateway goes on accepting and serving as usual, keeping connections alive; a second SIGTERM
// ends the delay: the listener closes, and the drain ends as ever, with exit 0. (The delay is long
// enough that the test never waits for it.)
TEST_F(ProcessTest, DuringTheDrainDelayHealthzSaysDrainingWhileRequestsAreStillServed) {
  testing::write_file(config_path_, "drain_delay: 60s\n" + config_yaml(upstream_->port(), 100, "delay"));
  auto child = serve();
  ASSERT_TRUE(serving()) << child->stderr_text();
  HttpClient kept(port_);
  ASSERT_EQ(kept.get("/echo/before", "crm").status, 200);  // a connection kept alive from before
  child->signal(SIGTERM);
  ASSERT_TRUE(testing::eventually([&] { return HttpClient(port_).get("/_sluice/healthz").status == 503; }))
      << child->stderr_text();
  EXPECT_EQ(HttpClient(port_).get("/_sluice/healthz").body, R"({"status":"draining"})");
  EXPECT_EQ(HttpClient(port_).request("HEAD", "/_sluice/healthz").status, 503);
  const testing::HttpResponse admin = HttpClient(admin_port_).get("/healthz");
  EXPECT_EQ(admin.status, 503);
  EXPECT_EQ(admin.body, R"({"status":"draining"})");
  // A new connection is accepted, and its request proxied and kept alive.
  HttpClient fresh(port_);
  const testing::HttpResponse r = fresh.get("/echo/during", "crm");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(fresh.get("/echo/during", "crm").status, 200);
  EXPECT_EQ(fresh.connections(), 1);
  // The connection from before is not closed either.
  EXPECT_EQ(kept.get("/echo/before", "crm").status, 200);
  EXPECT_EQ(kept.connections(), 1);
  EXPECT_TRUE(testing::can_connect(port_));
  const std::regex said(
      "\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z sluice: SIGTERM: healthz says draining; still accepting "
      "for 1m \\(drain_delay\\), then draining \\(drain_timeout 30s\\)\\n");
  EXPECT_TRUE(std::regex_search(child->stderr_text(), said)) << child->stderr_text();
  EXPECT_EQ(child->stderr_text().find("sluice: draining: "), std::string::npos) << child->stderr_text();

  child->signal(SIGTERM);
  EXPECT_TRUE(testing::eventually([&] { return !testing::can_connect(port_); })) << child->stderr_text();
  EXPECT_EQ(child->wait_exit(10s), 0) << child->stderr_text();
  const std::string err = child->stderr_text();
  const std::size_t ended = err.find(" sluice: SIGTERM again: drain_delay ended early; draining now\n");
  ASSERT_NE(ended, std::string::npos) << err;
  EXPECT_NE(err.find(" sluice: draining: no new connections; waiting for requests in flight\n", ended),
            std::string::npos)
      << err;
}

// At the end of drain_delay the drain begins by itself, and the gateway exits 0.
TEST_F(ProcessTest, AtTheEndOfTheDrainDelayTheDrainBegins) {
  testing::write_file(config_path_, "drain_delay: 200ms\n" + config_yaml(upstream_->port(), 100, "delay"));
  auto child = serve();
  ASSERT_TRUE(serving()) << child->stderr_text();
  child->signal(SIGTERM);
  EXPECT_EQ(child->wait_exit(10s), 0) << child->stderr_text();
  EXPECT_FALSE(testing::can_connect(port_));
  const std::string err = child->stderr_text();
  const std::size_t delay =
      err.find(" sluice: SIGTERM: healthz says draining; still accepting for 200ms (drain_delay), then draining "
               "(drain_timeout 30s)\n");
  ASSERT_NE(delay, std::string::npos) << err;
  EXPECT_NE(err.find(" sluice: draining: no new connections; waiting for requests in flight\n", delay),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find(" again: "), std::string::npos) << err;
}

// make run: the demo keeps its configuration in a database, serves the console with a token made for
// the run, and on a second run keeps the database, moves the demo upstream to the new echo server
// and replaces the token.
TEST_F(ProcessTest, TheDemoKeepsItsConfigurationInTheDatabaseWithATokenForTheConsole) {
  const std::string db = dir_ + "/demo.db";
  auto demo = [&](int port, int admin_port, const std::string& host = "127.0.0.1") {
    return std::make_unique<Child>(
        std::vector<std::string>{SLUICE_BINARY, "serve", "--demo", "--db", db, "--listen",
                                 host + ":" + std::to_string(port), "--admin-listen",
                                 host + ":" + std::to_string(admin_port), "--access-log", "off"},
        dir_);
  };
  // The word after `marker` in `text`; empty when the marker is not there (yet).
  auto word_after = [](const std::string& text, const std::string& marker) {
    const std::size_t at = text.find(marker);
    if (at == std::string::npos) return std::string{};
    const std::size_t from = at + marker.size();
    return text.substr(from, text.find(' ', from) - from);
  };
  auto token_of = [&](const std::string& out) { return word_after(out, "sign in with the admin token "); };
  const std::vector<std::pair<std::string, std::string>> crm{{"X-System-Key", "crm"}};

  auto first = demo(port_, admin_port_);
  ASSERT_TRUE(serving()) << first->stderr_text();
  // The lines to try are printed once it serves, with the ports it listens on.
  ASSERT_TRUE(testing::eventually([&] { return !token_of(first->stdout_text()).empty(); }))
      << first->stdout_text();
  const std::string token = token_of(first->stdout_text());
  // A second demo on the same database, on ports of its own, does not start: it would move the
  // demo upstream to its echo server and revoke the first's token.
  {
    const std::string beside_dir = dir_ + "/beside";  // its output apart from the first's
    std::filesystem::create_directory(beside_dir);
    Child beside({SLUICE_BINARY, "serve", "--demo", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen",
                  "127.0.0.1:0", "--access-log", "off"},
                 beside_dir);
    EXPECT_EQ(beside.wait_exit(10s), 1);
    EXPECT_NE(beside.stderr_text().find("another sluice serve --demo is serving this database"), std::string::npos)
        << beside.stderr_text();
    EXPECT_TRUE(std::filesystem::exists(db + ".demo-lock")) << "the refused run left the first's lock alone";
  }
  EXPECT_NE(first->stdout_text().find("http://127.0.0.1:" + std::to_string(port_) + "/api/orders/7"),
            std::string::npos)
      << first->stdout_text();
  EXPECT_EQ(HttpClient(port_).request("GET", "/api/orders/7", crm).status, 200);
  EXPECT_EQ(HttpClient(admin_port_).get("/").status, 200);
  EXPECT_EQ(HttpClient(admin_port_).request("GET", "/admin/v1/whoami", {{"Authorization", "Bearer " + token}}).status,
            200);
  first->signal(SIGTERM);
  ASSERT_EQ(first->wait_exit(10s), 0);
  // Its token went with it: not left to work on a database served for real later.
  {
    auto store = config::ConfigStore::open({.path = db, .access = config::StoreOptions::Access::kExisting});
    ASSERT_TRUE(store.ok()) << store.error().message;
    auto tokens = (*store)->tokens();
    ASSERT_TRUE(tokens.ok());
    EXPECT_TRUE(tokens->empty()) << tokens->size() << " tokens left, the first named " << tokens->front().name;
  }

  auto second = demo(port_, admin_port_);
  ASSERT_TRUE(serving()) << second->stderr_text();
  ASSERT_TRUE(testing::eventually([&] { return !token_of(second->stdout_text()).empty(); }));
  const std::string next = token_of(second->stdout_text());
  EXPECT_NE(next, token);
  EXPECT_EQ(HttpClient(port_).request("GET", "/api/orders/7", crm).status, 200);  // the new echo server
  EXPECT_EQ(HttpClient(admin_port_).request("GET", "/admin/v1/whoami", {{"Authorization", "Bearer " + token}}).status,
            401);
  EXPECT_EQ(HttpClient(admin_port_).request("GET", "/admin/v1/whoami", {{"Authorization", "Bearer " + next}}).status,
            200);
  second->signal(SIGTERM);
  ASSERT_EQ(second->wait_exit(10s), 0);

  // On ports the system picks (port 0), the lines to try name the ports it picked, on the host given.
  auto third = demo(0, 0, "[::1]");
  ASSERT_TRUE(testing::eventually([&] { return !word_after(third->stderr_text(), "serving on port ").empty(); }))
      << third->stderr_text();
  const std::string picked = word_after(third->stderr_text(), "serving on port ");
  ASSERT_NE(picked, "0");
  ASSERT_TRUE(testing::eventually([&] {
    return third->stdout_text().find("http://[::1]:" + picked + "/api/orders/7") != std::string::npos;
  })) << third->stdout_text();
  EXPECT_EQ(third->stdout_text().find(":0/"), std::string::npos);
  EXPECT_EQ(third->stdout_text().find("127.0.0.1"), std::string::npos);
  third->signal(SIGTERM);
  ASSERT_EQ(third->wait_exit(10s), 0);

  // With the admin listener off, it says so, and offers no line that needs it.
  Child fourth({SLUICE_BINARY, "serve", "--demo", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen", "off",
                "--access-log", "off"},
               dir_);
  ASSERT_TRUE(testing::eventually([&] { return !word_after(fourth.stderr_text(), "serving on port ").empty(); }))
      << fourth.stderr_text();
  EXPECT_NE(fourth.stderr_text().find("(admin listener off)"), std::string::npos) << fourth.stderr_text();
  ASSERT_TRUE(testing::eventually([&] { return fourth.stdout_text().find("/_sluice/v1/decide") != std::string::npos; }));
  EXPECT_EQ(fourth.stdout_text().find("web console"), std::string::npos) << fourth.stdout_text();
}

// --demo on a database that holds a configuration of its own (no demo upstream) serves it as it is,
// and says so, rather than print the demo's lines to try, which would not apply.
TEST_F(ProcessTest, TheDemoOnADatabaseOfItsOwnSaysItServesThatOne) {
  const std::string db = dir_ + "/own.db";
  {
    auto store = config::ConfigStore::open({.path = db});
    ASSERT_TRUE(store.ok()) << store.error().message;
    auto demo = gateway::demo_config(9);
    config::Config own = *demo;
    own.upstreams.front().name = "mine";
    for (auto& i : own.interfaces) i.upstream = "mine";
    ASSERT_TRUE((*store)->replace("test", "config.import", own).ok());
  }
  Child child({SLUICE_BINARY, "serve", "--demo", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen",
               "127.0.0.1:0", "--access-log", "off"},
              dir_);
  ASSERT_TRUE(testing::eventually(
      [&] { return child.stdout_text().find("holds a configuration of its own") != std::string::npos; }))
      << child.stdout_text() << child.stderr_text();
  EXPECT_EQ(child.stdout_text().find("Try:"), std::string::npos) << child.stdout_text();
  child.signal(SIGTERM);
  EXPECT_EQ(child.wait_exit(10s), 0);
}

// The access log on stdout, read through a pipe whose reader goes away (a log shipper restarted):
// the gateway goes on serving (no SIGPIPE), loses those lines, says so, and drains on SIGTERM.
TEST_F(ProcessTest, AReaderOfItsLogThatGoesAwayDoesNotStopIt) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 1000, "pipe"));
  const std::string fifo = dir_ + "/access.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // the child's is not one
  ASSERT_GE(reader, 0);
  Child child({"/bin/sh", "-c",
               std::string("exec ") + SLUICE_BINARY + " serve --config " + config_path_ + " --listen 127.0.0.1:" +
                   std::to_string(port_) + " --admin-listen 127.0.0.1:" + std::to_string(admin_port_) + " >" + fifo},
              dir_);
  ASSERT_TRUE(serving()) << child.stderr_text();
  ::close(reader);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(HttpClient(port_).request("GET", "/echo/" + std::to_string(i), {{"X-System-Key", "crm"}}).status, 200)
        << i << ": " << child.stderr_text();
  }
  EXPECT_TRUE(testing::eventually([&] { return child.stderr_text().find("access log: ") != std::string::npos; }))
      << child.stderr_text();
  EXPECT_NE(child.stderr_text().find("lines lost (Broken pipe)"), std::string::npos) << child.stderr_text();
  child.signal(SIGTERM);
  EXPECT_EQ(child.wait_exit(10s), 0) << child.stderr_text();
}

// What the gateway says goes one thing a line, each line stamped: a message of several (a refused
// configuration's problems) is as many lines, as a log shipper splits them.
TEST(LogToStderr, AMessageOfSeveralLinesIsAsManyStampedLines) {
  ::testing::internal::CaptureStderr();
  log_to_stderr("configuration refused:\n  upstreams[0].targets: needs at least one host:port\n  b");
  const std::string out = ::testing::internal::GetCapturedStderr();
  const std::string stamp = R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z sluice: )";
  EXPECT_TRUE(std::regex_match(out, std::regex(stamp + "configuration refused:\n" + stamp +
                                               "  upstreams\\[0\\]\\.targets: needs at least one host:port\n" +
                                               stamp + "  b\n")))
      << out;
}

// Started with stdin, stdout and stderr closed, the gateway has /dev/null on them: the descriptors it
// opens (an eventfd, its sockets) do not take their numbers, for stdout's writes to go into.
TEST_F(ProcessTest, StandardDescriptorsClosedAtStartAreDevNull) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 100, "closed"));
  const std::string log = dir_ + "/access.log";
  Child child({"/bin/sh", "-c",
               std::string("exec ") + SLUICE_BINARY + " serve --config " + config_path_ + " --listen 127.0.0.1:" +
                   std::to_string(port_) + " --admin-listen 127.0.0.1:" + std::to_string(admin_port_) +
                   " --access-log " + log + " <&- >&- 2>&-"},
              dir_);
  ASSERT_TRUE(serving());
  for (int fd = 0; fd <= 2; ++fd) {
    const std::string link = "/proc/" + std::to_string(child.pid()) + "/fd/" + std::to_string(fd);
    std::error_code ec;
    EXPECT_EQ(std::filesystem::read_symlink(link, ec).string(), "/dev/null") << link << ": " << ec.message();
  }
  ASSERT_EQ(HttpClient(port_).request("GET", "/echo/closed", {{"X-System-Key", "crm"}}).status, 200);
  child.signal(SIGTERM);
  EXPECT_EQ(child.wait_exit(10s), 0);
  std::ifstream in(log);
  std::stringstream logged;
  logged << in.rdbuf();
  EXPECT_NE(logged.str().find("\"path\":\"/echo/closed\""), std::string::npos) << logged.str();
}

// An access log to stdout, when stdout was closed at start, is refused (a start and a check), rather
// than written nowhere without a word.
TEST_F(ProcessTest, AnAccessLogToAStdoutThatWasClosedIsRefused) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 100, "closed"));
  for (const std::string flag : {"", " --check"}) {
    Child child({"/bin/sh", "-c",
                 std::string("exec ") + SLUICE_BINARY + " serve --config " + config_path_ + " --listen 127.0.0.1:" +
                     std::to_string(port_) + " --admin-listen 127.0.0.1:" + std::to_string(admin_port_) + flag +
                     " >&-"},
                dir_);
    EXPECT_EQ(child.wait_exit(10s), 1) << flag;
    EXPECT_EQ(child.stderr_text(),
              "sluice serve: the access log goes to stdout, which was closed when sluice started: start it with "
              "stdout open (>/dev/null to drop the log), or give --access-log FILE or off\n");
  }
  // Named as a file too.
  Child named({"/bin/sh", "-c",
               std::string("exec ") + SLUICE_BINARY + " serve --config " + config_path_ +
                   " --listen 127.0.0.1:0 --admin-listen off --access-log /dev/stdout >&-"},
              dir_);
  EXPECT_EQ(named.wait_exit(10s), 1);
  EXPECT_NE(named.stderr_text().find("which was closed when sluice started"), std::string::npos)
      << named.stderr_text();
  // From a database too, and the demo's: refused before the database is made (or the demo seeded).
  for (const std::string demo : {"", " --demo"}) {
    Child db({"/bin/sh", "-c",
              std::string("exec ") + SLUICE_BINARY + " serve" + demo + " --db " + dir_ +
                  "/sluice.db --listen 127.0.0.1:0 --admin-listen off >&-"},
             dir_);
    EXPECT_EQ(db.wait_exit(10s), 1) << demo;
    EXPECT_EQ(db.stderr_text(),
              "sluice serve: the access log goes to stdout, which was closed when sluice started: start it with "
              "stdout open (>/dev/null to drop the log), or give --access-log FILE or off\n")
        << demo;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/sluice.db")) << demo;
  }
  // A demo database that exists, its access log to stdout: refused before the demo is seeded (its
  // upstream moved to this run's echo server, a console token made).
  Child made({SLUICE_BINARY, "config", "import", "--db", dir_ + "/sluice.db", config_path_}, dir_);
  ASSERT_EQ(made.wait_exit(10s), 0) << made.stderr_text();
  const auto before = std::filesystem::last_write_time(dir_ + "/sluice.db");
  Child demo({"/bin/sh", "-c",
              std::string("exec ") + SLUICE_BINARY + " serve --demo --db " + dir_ +
                  "/sluice.db --listen 127.0.0.1:0 --admin-listen off >&-"},
             dir_);
  EXPECT_EQ(demo.wait_exit(10s), 1);
  EXPECT_NE(demo.stderr_text().find("which was closed when sluice started"), std::string::npos) << demo.stderr_text();
  EXPECT_EQ(std::filesystem::last_write_time(dir_ + "/sluice.db"), before);
}

// The other commands are run for what they write to stdout (a token shown once, an export, a bench
// report): with it closed they refuse to run, rather than write it to the /dev/null standing in for
// it, and exit 2, as for bad flags (bench's 1 is a failed assertion).
TEST_F(ProcessTest, ACommandOtherThanServeRefusesAClosedStdout) {
  testing::write_file(config_path_, config_yaml(upstream_->port(), 100, "closed"));
  const std::vector<std::string> commands{"token create --role admin --db " + dir_ + "/tokens.db",
                                          "config export --db " + dir_ + "/tokens.db", "config check " + config_path_,
                                          "bench --help", "bench -n 1 http://127.0.0.1:1/"};
  for (const std::string& command : commands) {
    Child child({"/bin/sh", "-c", std::string("exec ") + SLUICE_BINARY + " " + command + " >&-"}, dir_);
    EXPECT_EQ(child.wait_exit(10s), 2) << command;
    EXPECT_EQ(child.stderr_text(),
              "sluice: stdout is closed: start sluice with it open (>/dev/null to drop what it writes)\n")
        << command;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/tokens.db")) << "a token was made and shown to nobody";
}

// `make run` typed twice: the second run cannot listen, and says so before it touches the database,
// so the first keeps its echo upstream and its console token.
TEST_F(ProcessTest, ASecondDemoThatCannotListenLeavesTheFirstAsItWas) {
  const std::string db = dir_ + "/demo.db";
  const std::vector<std::string> argv{SLUICE_BINARY, "serve", "--demo", "--db", db, "--listen",
                                      "127.0.0.1:" + std::to_string(port_), "--admin-listen",
                                      "127.0.0.1:" + std::to_string(admin_port_), "--access-log", "off"};
  Child first(argv, dir_);
  ASSERT_TRUE(serving()) << first.stderr_text();
  std::string token;
  ASSERT_TRUE(testing::eventually([&] {
    const std::string out = first.stdout_text();
    const std::size_t at = out.find("sign in with the admin token ");
    if (at != std::string::npos) token = out.substr(at + 29, out.find(' ', at + 29) - at - 29);
    return !token.empty();
  }));
  auto revision = [&] {
    auto store = config::ConfigStore::open({.path = db, .access = config::StoreOptions::Access::kExisting});
    return store.ok() ? (*store)->revision().value() : -1;
  };
  const std::int64_t before = revision();
  const std::string second_dir = dir_ + "/second";
  std::filesystem::create_directories(second_dir);
  Child second(argv, second_dir);
  EXPECT_EQ(second.wait_exit(10s), 1);
  // Refused at once: the first holds the database (and its ports).
  EXPECT_NE(second.stderr_text().find("another sluice serve --demo is serving this database"), std::string::npos)
      << second.stderr_text();
  EXPECT_EQ(revision(), before);  // neither the demo upstream moved nor the token replaced
  // On a database of its own, on the first's ports: refused before it writes anything.
  std::vector<std::string> elsewhere = argv;
  elsewhere[4] = dir_ + "/other.db";
  const std::string third_dir = dir_ + "/third";
  std::filesystem::create_directories(third_dir);
  Child third(elsewhere, third_dir);
  EXPECT_EQ(third.wait_exit(10s), 1);
  EXPECT_NE(third.stderr_text().find("cannot listen on 127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << third.stderr_text();
  EXPECT_EQ(HttpClient(port_).request("GET", "/api/orders/7", {{"X-System-Key", "crm"}}).status, 200);
  EXPECT_EQ(HttpClient(admin_port_).request("GET", "/admin/v1/whoami", {{"Authorization", "Bearer " + token}}).status,
            200);
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait_exit(10s), 0);
}

}  // namespace
}  // namespace sluice::gateway
