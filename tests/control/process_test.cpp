// build/sluice as child processes: two gateways on one database (a change served by the other within
// a second, counters carried over), a follower that keeps serving when its primary is killed and
// catches up when it is back, kill -9 in the middle of writes, and the config and token commands.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "config/crypto.h"
#include "config/yaml.h"
#include "control_test.h"
#include "gateway/caller_auth.h"
#include "gateway/demo.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::Child;
using testing::HttpClient;
using testing::HttpResponse;

using Headers = std::vector<std::pair<std::string, std::string>>;

class ControlProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto up = gateway::DemoUpstream::start();
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(*up);
    dir_ = testing::temp_dir();
    db_ = dir_ + "/sluice.db";
    yaml_ = dir_ + "/sluice.yaml";
    // crm may make 3 requests an hour; erp may call orders only.
    std::string text = control_test::base_yaml(upstream_->port());
    text.replace(text.find("limit: 100, period: 1h"), 22, "limit: 3, period: 1h");
    testing::write_file(yaml_, text);
  }

  // Runs `sluice args...` to its end; its exit code, stdout in *out and stderr in *err.
  int sluice(const std::vector<std::string>& args, std::string* out = nullptr, std::string* err = nullptr) {
    std::vector<std::string> argv{SLUICE_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string where = testing::temp_dir();
    Child child(argv, where);
    const int code = child.wait_exit(30s);
    if (out != nullptr) *out = child.stdout_text();
    if (err != nullptr) *err = child.stderr_text();
    return code;
  }

  std::string token(const std::string& role) {
    std::string out;
    EXPECT_EQ(sluice({"token", "create", "--role", role, "--db", db_}, &out), 0);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  struct Server {
    std::unique_ptr<Child> child;
    std::uint16_t port = 0;
    std::uint16_t admin = 0;
  };

  // On ports the process picks itself (port 0, read back from the line it prints once serving: a
  // port chosen here and passed on could be taken by a test running alongside in between), or on
  // the ones given (a restart where the last one was).
  Server serve(const std::vector<std::string>& source, std::uint16_t port = 0, std::uint16_t admin_port = 0) {
    Server s;
    std::vector<std::string> argv{SLUICE_BINARY, "serve", "--listen", "127.0.0.1:" + std::to_string(port),
                                  "--admin-listen", "127.0.0.1:" + std::to_string(admin_port), "--access-log", "off"};
    argv.insert(argv.end(), source.begin(), source.end());
    s.child = std::make_unique<Child>(argv, testing::temp_dir());
    EXPECT_TRUE(testing::eventually([&] {
      unsigned listen = 0, admin = 0;
      const std::string err = s.child->stderr_text();
      const std::size_t at = err.find("serving on port ");
      if (at == std::string::npos ||
          std::sscanf(err.c_str() + at, "serving on port %u (admin on port %u)", &listen, &admin) != 2) {
        return false;
      }
      s.port = static_cast<std::uint16_t>(listen);
      s.admin = static_cast<std::uint16_t>(admin);
      return HttpClient(s.port).get("/_sluice/healthz").status == 200;
    })) << s.child->stderr_text();
    return s;
  }

  // A follower of primary's, following with token.
  Server follow(const Server& primary, const std::string& token) {
    return serve({"--config-from", admin_url(primary), "--token", token});
  }
  static std::string admin_url(const Server& s) { return "http://127.0.0.1:" + std::to_string(s.admin); }

  static HttpResponse admin(const Server& s, const std::string& token, const std::string& method,
                            const std::string& target, const std::string& body = "") {
    return HttpClient(s.admin).request(method, target, {{"Authorization", "Bearer " + token}}, body);
  }

  static int status(const Server& s, const std::string& target, const std::string& system) {
    return HttpClient(s.port).get(target, system).status;
  }

  std::unique_ptr<gateway::DemoUpstream> upstream_;
  std::string dir_;
  std::string db_;
  std::string yaml_;
};

TEST_F(ControlProcessTest, ASecondGatewayOnTheDatabaseServesAChangeWithinASecondAndKeepsItsCounters) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  Server a = serve({"--db", db_});
  Server b = serve({"--db", db_});
  EXPECT_EQ(status(b, "/users/1", "crm"), 200);
  EXPECT_EQ(status(b, "/users/2", "crm"), 200);  // 2 of crm's 3 this hour, counted by b
  HttpClient kept(b.port);                        // one keep-alive connection across the change
  EXPECT_EQ(kept.get("/users/1", "erp").status, 403);

  const HttpResponse put = admin(a, t, "PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders","users"]})");
  ASSERT_EQ(put.status, 200) << put.body;
  const auto committed = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::eventually([&] { return kept.get("/users/1", "erp").status == 200; }, 5s));
  const auto took = std::chrono::steady_clock::now() - committed;
  EXPECT_LT(took, 1s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  EXPECT_EQ(kept.connections(), 1);  // the swap dropped no connection

  EXPECT_EQ(status(b, "/users/3", "crm"), 200);  // crm's limit did not change: its count carried over
  EXPECT_EQ(status(b, "/users/4", "crm"), 429);
  b.child->signal(SIGTERM);
  EXPECT_EQ(b.child->wait_exit(10s), 0) << b.child->stderr_text();
}

// A restore from a backup moves another database over the one served: the gateway serves it (its
// tokens too) within a second or so, as any commit; deleted, the last configuration keeps serving.
TEST_F(ControlProcessTest, AGatewayServesTheDatabaseMovedOverItsOwnAndKeepsServingWhenItIsDeleted) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string old_token = token("admin");
  Server s = serve({"--db", db_});
  EXPECT_EQ(status(s, "/users/1", "erp"), 403);
  const std::string backup = dir_ + "/backup.db";
  std::string text = control_test::base_yaml(upstream_->port());
  text.replace(text.find("{key: erp, interfaces: [orders]}"), 32, "{key: erp, interfaces: [orders, users]}");
  testing::write_file(dir_ + "/restored.yaml", text);
  ASSERT_EQ(sluice({"config", "import", dir_ + "/restored.yaml", "--db", backup}), 0);
  std::string out;
  ASSERT_EQ(sluice({"token", "create", "--role", "admin", "--db", backup}, &out), 0);
  const std::string new_token = out.substr(0, out.find('\n'));
  std::filesystem::remove(db_ + "-wal");
  std::filesystem::remove(db_ + "-shm");
  std::filesystem::rename(backup, db_);
  const auto moved = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::eventually([&] { return status(s, "/users/1", "erp") == 200; }, 5s)) << s.child->stderr_text();
  EXPECT_LT(std::chrono::steady_clock::now() - moved, 2s);
  EXPECT_TRUE(testing::eventually([&] { return admin(s, new_token, "GET", "/admin/v1/whoami").status == 200; }, 5s));
  EXPECT_EQ(admin(s, old_token, "GET", "/admin/v1/whoami").status, 401);
  EXPECT_NE(s.child->stderr_text().find(db_ + " is another file now (replaced): reading it"), std::string::npos)
      << s.child->stderr_text();
  // A change through the admin API goes to the file now there.
  ASSERT_EQ(admin(s, new_token, "PUT", "/admin/v1/systems/erp", R"({"description":"after"})").status, 200);
  EXPECT_EQ(control_test::open_store(db_)->load()->config->systems.at(1).description, "after");

  std::filesystem::remove(db_);
  std::filesystem::remove(db_ + "-wal");
  std::filesystem::remove(db_ + "-shm");
  const std::string gone = db_ + " is gone (deleted or moved away): still serving revision";
  ASSERT_TRUE(testing::eventually([&] { return s.child->stderr_text().find(gone) != std::string::npos; }, 5s))
      << s.child->stderr_text();
  EXPECT_EQ(status(s, "/users/1", "erp"), 200);  // the last configuration, the restored one
  EXPECT_EQ(admin(s, new_token, "PUT", "/admin/v1/systems/erp", R"({"description":"lost"})").status, 503);
  const std::string err = s.child->stderr_text();
  EXPECT_EQ(err.find(gone), err.rfind(gone)) << "said once: " << err;
}

TEST_F(ControlProcessTest, OfWritersInTwoProcessesHoldingOneETagExactlyOneWinsAndTheRestGet412) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  Server a = serve({"--db", db_});
  Server b = serve({"--db", db_});
  const HttpResponse read = admin(a, t, "GET", "/admin/v1/systems/crm");
  const std::string etag = read.header("etag");
  ASSERT_FALSE(etag.empty()) << read.body;
  constexpr int kWriters = 8;
  std::atomic<int> ok{0};
  std::atomic<int> stale{0};
  std::atomic<int> other{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      const Server& to = i % 2 == 0 ? a : b;  // half through each process, so SQLite's locks decide
      const HttpResponse r = HttpClient(to.admin).request(
          "PUT", "/admin/v1/systems/crm", {{"Authorization", "Bearer " + t}, {"If-Match", etag}},
          R"({"interfaces":["orders","users"],"description":"writer )" + std::to_string(i) + "\"}");
      (r.status == 200 ? ok : r.status == 412 ? stale : other).fetch_add(1);
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(stale.load(), kWriters - 1);
  EXPECT_EQ(other.load(), 0);
  auto store = control_test::open_store(db_);
  EXPECT_EQ(*store->revision(), 4);  // import, token, and the one write
  EXPECT_TRUE(store->load()->config->systems.at(0).description.starts_with("writer "));
  auto audit = store->audit(10);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(std::count_if(audit->begin(), audit->end(), [](const config::AuditEntry& e) { return e.action == "system.update"; }),
            1);
}

// A follower waiting for its primary (away) stops on SIGTERM or SIGINT as a drain does: exit 0,
// said; not killed by the signal (which a service manager would record as a failure).
TEST_F(ControlProcessTest, AFollowerWaitingForItsPrimaryStopsOnASignal) {
  for (const int sig : {SIGTERM, SIGINT}) {
    Child follower({SLUICE_BINARY, "serve", "--config-from", "http://127.0.0.1:9", "--token", "t", "--listen",
                    "127.0.0.1:0", "--admin-listen", "off"},
                   testing::temp_dir());
    ASSERT_TRUE(testing::eventually(
        [&] { return follower.stderr_text().find("waiting for the primary") != std::string::npos; }))
        << follower.stderr_text();
    follower.signal(sig);
    EXPECT_EQ(follower.wait_exit(10s), 0) << sig << " " << follower.stderr_text();
    EXPECT_NE(follower.stderr_text().find("sluice: stopped"), std::string::npos) << follower.stderr_text();
  }
}

// A token another process makes while the gateway serves works at once (the gateway reads the
// tokens again for one it does not know), not only once its database watcher has seen it: a
// script's `T=$(sluice token create ...)` then `curl ... whoami` must not get 401.
TEST_F(ControlProcessTest, ATokenMadeWhileServingIsTakenAtOnce) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  Server server = serve({"--db", db_});
  for (int i = 0; i < 3; ++i) {
    const std::string t = token("read");
    const auto r = admin(server, t, "GET", "/admin/v1/whoami");
    EXPECT_EQ(r.status, 200) << i << " " << r.body;
  }
}

// A token revoked on the primary stops opening the follower's admin API too.
TEST_F(ControlProcessTest, ATokenRevokedOnThePrimaryIsRefusedByItsFollower) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  const std::string follower_token = token("read");
  Server primary = serve({"--db", db_});
  Server follower = follow(primary, follower_token);
  EXPECT_EQ(admin(follower, follower_token, "GET", "/admin/v1/stats").status, 200);
  const HttpResponse tokens = admin(primary, t, "GET", "/admin/v1/tokens");
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  std::string id;
  const boost::json::value listed = boost::json::parse(tokens.body);
  for (const auto& item : listed.at("items").as_array()) {
    if (item.at("role").as_string() == "read") id = std::string(item.at("id").as_string());
  }
  ASSERT_FALSE(id.empty()) << tokens.body;
  ASSERT_EQ(admin(primary, t, "DELETE", "/admin/v1/tokens/" + id).status, 204);
  EXPECT_TRUE(testing::eventually(
      [&] { return admin(follower, follower_token, "GET", "/admin/v1/stats").status == 401; }, 10s))
      << follower.child->stderr_text();
  EXPECT_NE(follower.child->stderr_text().find("no longer takes this follower's token (the primary answered 401: "
                                                "The token is not one of this admin API's (revoked"),
            std::string::npos)
      << follower.child->stderr_text();
  EXPECT_EQ(status(follower, "/users/1", "crm"), 200) << "it keeps serving what it has";
}

// A follower whose token has the read role is not given the limit store's password: it says so and
// stops, rather than failing at Redis with a made-up one.
TEST_F(ControlProcessTest, AFollowerWithAReadTokenIsToldThatTheStoresPasswordIsForAdminTokens) {
  testing::write_file(yaml_, "store: redis://:s3cret@127.0.0.1:1\n" + control_test::base_yaml(upstream_->port()));
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  Server primary = serve({"--db", db_});
  std::string err;
  EXPECT_NE(sluice({"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--config-from",
                    admin_url(primary), "--token", token("read")},
                   nullptr, &err),
            0);
  EXPECT_NE(err.find("gives the limit store's password to admin tokens only"), std::string::npos) << err;
  EXPECT_EQ(err.find("s3cret"), std::string::npos) << err;
}

// A file holds no stored password for the placeholder to keep: check and import refuse it, saying
// what it is; a database that holds it (written before it was refused) is not served with it, and
// is not said to be a follower's.
TEST_F(ControlProcessTest, ThePasswordPlaceholderIsNoPasswordInAFileOrADatabase) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string file = dir_ + "/read.yaml";
  testing::write_file(file, "store: redis://:REDACTED@127.0.0.1:1\n" + control_test::base_yaml(upstream_->port()));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "check", file}, {"config", "import", file, "--db", db_}}) {
    SCOPED_TRACE(args[1]);
    std::string out;
    std::string err;
    EXPECT_EQ(sluice(args, &out, &err), 1);
    EXPECT_EQ(out, "");
    EXPECT_NE(err.find(file + ": store: the password REDACTED is the placeholder"), std::string::npos) << err;
  }
  EXPECT_EQ(*control_test::open_store(db_)->revision(), 2);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, R"(INSERT OR REPLACE INTO settings (name, value) VALUES ('store', '"redis://:REDACTED@127.0.0.1:1"'))",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"serve", "--db", db_, "--check"},
        {"serve", "--db", db_, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}}) {
    std::string err;
    EXPECT_EQ(sluice(args, nullptr, &err), 1);
    EXPECT_NE(err.find(db_ + ": store: the password REDACTED is the placeholder"), std::string::npos) << err;
    EXPECT_EQ(err.find("follow"), std::string::npos) << err;
  }
}

// The follower's admin API knows its token as the primary does: whoami says its id and name there
// (it said {"id": "follower"}).
// ...and its expiry, so that it refuses the token from then on even with the primary away.
TEST_F(ControlProcessTest, AFollowerKnowsItsTokenByItsIdAndNameOnThePrimary) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  std::string out;
  ASSERT_EQ(sluice({"token", "create", "--role", "read", "--name", "edge-1", "--expires-in", "90d", "--db", db_}, &out),
            0);
  const std::string t = out.substr(0, out.find('\n'));
  Server primary = serve({"--db", db_});
  Server follower = follow(primary, t);
  const HttpResponse there = admin(primary, t, "GET", "/admin/v1/whoami");
  ASSERT_EQ(there.status, 200) << there.body;
  const HttpResponse here = admin(follower, t, "GET", "/admin/v1/whoami");
  ASSERT_EQ(here.status, 200) << here.body;
  EXPECT_EQ(boost::json::parse(here.body), boost::json::parse(there.body));
  EXPECT_EQ(boost::json::parse(here.body).at("name").as_string(), "edge-1");
  EXPECT_TRUE(boost::json::parse(here.body).at("expires").is_string()) << here.body;
}

// --pin-workers pins each worker to a CPU whatever the configuration comes from (it did so only
// for --config: a gateway serving its database ran its workers on every CPU, saying nothing).
TEST_F(ControlProcessTest, PinWorkersPinsTheWorkersOfAGatewayServingADatabase) {
  const std::vector<int> allowed = testing::allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const Server s = serve({"--db", db_, "--threads", "2", "--pin-workers"});
  std::map<std::string, std::string> threads;
  EXPECT_TRUE(testing::eventually([&] {
    threads = testing::cpus_of_threads(std::to_string(s.child->pid()));
    return threads["sluice-w0"] == std::to_string(allowed[0]) &&
           threads["sluice-w1"] == std::to_string(allowed[1 % allowed.size()]);
  })) << threads["sluice-w0"] << " " << threads["sluice-w1"];
}

// --print-config prints the configuration as it would be served: a follower whose read token is
// not given the store's password would not start, and the print refuses it as the check does (it
// printed REDACTED and exited 0).
TEST_F(ControlProcessTest, APrintOfWhatWouldNotBeServedIsRefusedAsACheckIs) {
  testing::write_file(yaml_, "store: redis://:s3cret@127.0.0.1:1\n" + control_test::base_yaml(upstream_->port()));
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  Server primary = serve({"--db", db_});
  const std::string read = token("read");
  for (const char* flag : {"--check", "--print-config"}) {
    SCOPED_TRACE(flag);
    std::string out;
    std::string err;
    EXPECT_EQ(sluice({"serve", "--config-from", admin_url(primary), "--token", read, flag}, &out, &err), 1);
    EXPECT_EQ(out, "");
    EXPECT_NE(err.find("gives the limit store's password to admin tokens only"), std::string::npos) << err;
  }
  // Named here, it would be served: both say so.
  std::string out;
  EXPECT_EQ(sluice({"serve", "--config-from", admin_url(primary), "--token", read, "--store", "local", "--print-config"},
                   &out),
            0);
  EXPECT_NE(out.find("store: local\n"), std::string::npos) << out;
}

// A token the primary refuses stays refused: the follower says so and stops at once rather than
// wait for the primary; and --check asks once, so that a check in a script cannot hang.
TEST_F(ControlProcessTest, AFollowerWhoseTokenIsRefusedOrWhosePrimaryIsAwayStopsAtOnce) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  Server primary = serve({"--db", db_});
  std::string err;
  EXPECT_EQ(sluice({"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--config-from",
                    admin_url(primary), "--token", "sluice_at_not_a_token"},
                   nullptr, &err),
            1);
  EXPECT_NE(err.find("the primary answered 401"), std::string::npos) << err;
  EXPECT_NE(err.find("is --token one of its tokens?"), std::string::npos) << err;
  EXPECT_EQ(sluice({"serve", "--check", "--config-from", admin_url(primary), "--token", "sluice_at_not_a_token"},
                   nullptr, &err),
            1);
  EXPECT_EQ(sluice({"serve", "--check", "--config-from", "http://127.0.0.1:1", "--token", token("read")}, nullptr,
                   &err),
            1);
  EXPECT_NE(err.find("http://127.0.0.1:1"), std::string::npos) << err;
}

TEST_F(ControlProcessTest, AFollowerPullsFromItsPrimaryAndKeepsServingWhenThePrimaryIsKilled) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  const std::string follower_token = token("read");
  const std::string backup = dir_ + "/backup.db";
  std::filesystem::copy_file(db_, backup);
  Server primary = serve({"--db", db_});
  Server follower = follow(primary, follower_token);
  EXPECT_EQ(status(follower, "/users/1", "erp"), 403);

  ASSERT_EQ(admin(primary, t, "PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders","users"]})").status, 200);
  EXPECT_TRUE(testing::eventually([&] { return status(follower, "/users/1", "erp") == 200; }, 5s))
      << follower.child->stderr_text();
  const HttpResponse read_only = admin(follower, follower_token, "PUT", "/admin/v1/systems/erp", "{}");
  EXPECT_EQ(read_only.status, 403);  // a read token; an admin one would get 409 read_only

  // A follower stops at once on SIGTERM, though its long poll would wait 30 s for news.
  Server second = follow(primary, follower_token);
  const auto asked = std::chrono::steady_clock::now();
  second.child->signal(SIGTERM);
  EXPECT_EQ(second.child->wait_exit(10s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s);

  primary.child->signal(SIGKILL);
  EXPECT_EQ(primary.child->wait_exit(5s), -1);  // killed by the signal
  for (int i = 0; i < 5; ++i) EXPECT_EQ(status(follower, "/users/" + std::to_string(i), "erp"), 200);
  EXPECT_TRUE(testing::eventually([&] {
    const HttpResponse stats = admin(follower, follower_token, "GET", "/admin/v1/stats");
    return stats.body.find("\"ok\":false") != std::string::npos;
  }, 5s));
  EXPECT_NE(follower.child->stderr_text().find("still serving revision"), std::string::npos)
      << follower.child->stderr_text();
  EXPECT_EQ(status(follower, "/users/9", "erp"), 200);

  // The primary back where it was, on its backup changed offline to the revision the follower holds
  // (other content, the same number): the follower says so before any change (its first poll after
  // a failure does not wait for news) and takes the primary's configuration whole, not "unchanged
  // since that revision"; then the next change.
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db_ + suffix);
  std::filesystem::copy_file(backup, db_);
  std::stringstream text;
  text << std::ifstream(yaml_).rdbuf();
  std::string changed = text.str();
  changed.replace(changed.find("{key: erp, "), 11, "{key: erp, enabled: false, ");
  testing::write_file(yaml_, changed);
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  Server back = serve({"--db", db_}, primary.port, primary.admin);
  EXPECT_TRUE(testing::eventually(
      [&] { return follower.child->stderr_text().find("reached it again") != std::string::npos; }, 10s))
      << follower.child->stderr_text();
  EXPECT_NE(admin(follower, follower_token, "GET", "/admin/v1/stats").body.find("\"ok\":true"), std::string::npos);
  EXPECT_TRUE(testing::eventually([&] { return status(follower, "/orders/1", "erp") == 403; }, 5s))
      << follower.child->stderr_text();
  ASSERT_EQ(admin(back, t, "PUT", "/admin/v1/systems/erp", R"({"enabled":true,"interfaces":["orders","users"]})").status, 200);
  EXPECT_TRUE(testing::eventually([&] { return status(follower, "/users/1", "erp") == 200; }, 5s))
      << follower.child->stderr_text();
}

// SLUICE_SECRET_KEY for the children started while it lives.
class SecretKeyEnv {
 public:
  explicit SecretKeyEnv(const std::string& value) { ::setenv("SLUICE_SECRET_KEY", value.c_str(), 1); }
  ~SecretKeyEnv() { ::unsetenv("SLUICE_SECRET_KEY"); }
  SecretKeyEnv(const SecretKeyEnv&) = delete;
  SecretKeyEnv& operator=(const SecretKeyEnv&) = delete;
};

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(ControlProcessTest, ASigningSecretIsSealedOnDiskAndOpensOnlyWhereSluiceSecretKeyIsTheSame) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  const std::string key = config::to_hex(config::random_bytes(32));
  std::string secret;
  {
    SecretKeyEnv env(key);
    Server a = serve({"--db", db_});
    const HttpResponse made = admin(a, t, "POST", "/admin/v1/systems/erp/credentials", R"({"kind":"hmac"})");
    ASSERT_EQ(made.status, 201) << made.body;
    secret = std::string(boost::json::parse(made.body).as_object().at("secret").as_string());
    ASSERT_EQ(admin(a, t, "PUT", "/admin/v1/systems/erp", R"({"auth":"hmac","interfaces":["orders"]})").status, 200);
    a.child->signal(SIGTERM);
    EXPECT_EQ(a.child->wait_exit(10s), 0);
  }
  // Neither the database nor its write-ahead log holds the secret as text.
  for (const std::string& file : {db_, db_ + "-wal"}) {
    EXPECT_EQ(file_bytes(file).find(secret), std::string::npos) << file;
  }

  auto signed_post = [&](const Server& s, const std::string& nonce, const std::string& with) {
    const std::string body = R"({"amount":1})";
    const std::string ts = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                              std::chrono::system_clock::now().time_since_epoch()).count());
    return HttpClient(s.port).request(
        "POST", "/orders/1",
        {{"X-System-Key", "erp"}, {"X-Sluice-Timestamp", ts}, {"X-Sluice-Nonce", nonce},
         {"X-Sluice-Signature", gateway::sign_request(with, "POST", "/orders/1", ts, nonce, body)}},
        body);
  };
  {
    SecretKeyEnv env(key);  // another process with the same key checks the signatures
    Server b = serve({"--db", db_});
    EXPECT_EQ(signed_post(b, "n-1", secret).status, 200);
    EXPECT_EQ(control_test::reason_of(signed_post(b, "n-1", secret)), "signature_replayed");
    EXPECT_EQ(control_test::reason_of(signed_post(b, "n-2", "sluice_hs_guess")), "signature_invalid");
    EXPECT_EQ(control_test::reason_of(HttpClient(b.port).request("POST", "/orders/1", {{"X-System-Key", "erp"}}, "{}")),
              "signature_invalid");
  }
  {
    SecretKeyEnv env(config::to_hex(config::random_bytes(32)));  // another key: the secret does not open
    Server c = serve({"--db", db_});
    EXPECT_EQ(control_test::reason_of(signed_post(c, "n-3", secret)), "signature_invalid");
    EXPECT_TRUE(testing::eventually(
        [&] { return c.child->stderr_text().find("caller authentication: system erp") != std::string::npos; }, 5s))
        << c.child->stderr_text();
  }
  {
    SecretKeyEnv env("not-a-key");
    std::string err;
    EXPECT_EQ(sluice({"serve", "--db", db_, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, nullptr, &err), 1);
    EXPECT_NE(err.find("SLUICE_SECRET_KEY"), std::string::npos) << err;
  }
}

// A check refuses what a start refuses: a SLUICE_SECRET_KEY that is not a key.
TEST_F(ControlProcessTest, ACheckRefusesASecretKeyThatAStartRefuses) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  SecretKeyEnv env("abc");
  for (const std::vector<std::string>& args : {std::vector<std::string>{"serve", "--db", db_, "--check"},
                                              {"serve", "--config", yaml_, "--check"},
                                              {"serve", "--demo", "--db", db_, "--check"}}) {
    SCOPED_TRACE(args[1] + " " + args[2]);
    std::string out;
    std::string err;
    EXPECT_EQ(sluice(args, &out, &err), 1);
    EXPECT_EQ(out, "");
    EXPECT_NE(err.find("SLUICE_SECRET_KEY must be 32 bytes"), std::string::npos) << err;
  }
}

// A check refuses an access log a start cannot open (its directory missing, a directory), for
// every source, and makes no file.
TEST_F(ControlProcessTest, ACheckRefusesAnAccessLogAStartCannotOpen) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  for (const std::string& log : {dir_ + "/missing/access.log", dir_}) {
    for (const std::vector<std::string>& args : {std::vector<std::string>{"serve", "--db", db_, "--check"},
                                                {"serve", "--config", yaml_, "--check"},
                                                {"serve", "--demo", "--db", db_, "--check"}}) {
      SCOPED_TRACE(args[1] + " " + args[2] + " " + log);
      std::vector<std::string> with_log = args;
      with_log.insert(with_log.end(), {"--access-log", log});
      std::string err;
      EXPECT_EQ(sluice(with_log, nullptr, &err), 1);
      EXPECT_NE(err.find("cannot open the access log " + log), std::string::npos) << err;
    }
  }
  std::string out;
  EXPECT_EQ(sluice({"serve", "--db", db_, "--check", "--access-log", dir_ + "/access.log"}, &out), 0);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/access.log"));
}

// A command or a flag's value that is not one is a usage error (exit 2) that says what it wants,
// whichever command it is given to.
TEST_F(ControlProcessTest, ACommandOrAFlagValueThatIsNotOneIsAUsageErrorSaidAsSuch) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"bogus"}, "no command 'bogus': give serve, config, token or bench"},
      {{"serve", "--threads", "abc"}, "--threads: must be a whole number from 1 to 256, got \"abc\""},
      {{"config", "export", "--format", "xml", "--db", db_}, "--format must be yaml or json"},
      {{"config", "apply", yaml_, "--admin", "notaurl", "--token", "t"},
       "--admin must be the primary's admin URL, http://host:port (no path), got \"notaurl\""},
      {{"config", "apply", yaml_, "--admin", "http://127.0.0.1:1/admin", "--token", "t"},
       "(no path), got \"http://127.0.0.1:1/admin\""},
      {{"serve", "--config-from", "http://127.0.0.1:1/admin", "--token", "t"},
       "--config-from must be the primary's admin listener, http://host:port (no path)"},
      {{"config", "apply", yaml_, "--admin", "http://127.0.0.1:1", "--token", "t", "--if-match", "x"},
       "--if-match must be a revision like 42"},
      {{"token", "revoke", "", "--db", db_}, "id: must not be empty"},
      {{"token", "create", "--role", "boss", "--db", db_}, "--role must be admin or read"},
  };
  for (const auto& [args, said] : cases) {
    SCOPED_TRACE(args[0] + " " + (args.size() > 1 ? args[1] : ""));
    std::string err;
    EXPECT_EQ(sluice(args, nullptr, &err), 2);
    EXPECT_NE(err.find(said), std::string::npos) << err;
  }
}

// An environment variable set (or unset: nullptr) for the children started while it lives.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvVar() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The audit's cli:<user> is $USER, else $LOGNAME, else the uid's name: with USER unset it said
// cli:unknown.
TEST_F(ControlProcessTest, TheCommandLinesAuditActorIsTheUserWhateverTheEnvironmentSays) {
  const passwd* me = ::getpwuid(::getuid());
  ASSERT_NE(me, nullptr);
  const std::string name = me->pw_name;
  auto actor_of_a_token = [&] {
    EXPECT_EQ(sluice({"token", "create", "--role", "read", "--db", db_}), 0);
    return control_test::open_store(db_)->audit(1)->at(0).actor;
  };
  EnvVar user("USER", nullptr);
  {
    EnvVar logname("LOGNAME", "alice");
    EXPECT_EQ(actor_of_a_token(), "cli:alice");
  }
  EnvVar logname("LOGNAME", nullptr);
  EXPECT_EQ(actor_of_a_token(), "cli:" + name);
  EnvVar bob("USER", "bob");
  EXPECT_EQ(actor_of_a_token(), "cli:bob");
}

TEST_F(ControlProcessTest, KillingAWriterMidCommitLeavesAValidDatabaseWithEveryCommit) {
  for (int lines : {3, 20, 60}) {
    SCOPED_TRACE(lines);
    const std::string where = testing::temp_dir();
    Child writer({SLUICE_STORE_WRITER, db_}, where);
    ASSERT_TRUE(testing::eventually([&] {
      std::istringstream out(writer.stdout_text());
      int n = 0;
      for (std::string line; std::getline(out, line);) n += line.rfind("committed ", 0) == 0 ? 1 : 0;
      return n >= lines;
    }, 30s)) << writer.stderr_text();
    writer.signal(SIGKILL);
    EXPECT_EQ(writer.wait_exit(5s), -1);
    // The last commit it reported in a whole line.
    const std::string text = writer.stdout_text();
    std::istringstream out(text.substr(0, text.rfind('\n') + 1));
    long long revision = 0;
    long n = 0;
    for (std::string line; std::getline(out, line);) std::sscanf(line.c_str(), "committed %lld %ld", &revision, &n);
    auto store = control_test::open_store(db_);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->check().ok());
    auto loaded = store->load();
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_GE(loaded->revision, revision);
    const std::string description = loaded->config->systems.at(0).description;
    // That commit, or the one it was making when killed (committed but not reported yet).
    EXPECT_TRUE(description == "commit " + std::to_string(n) || description == "commit " + std::to_string(n + 1))
        << description << " after reporting commit " << n;
  }
}

// What a write refuses (an invisible character in a key, a description over 4096 bytes), check and
// import refuse too, by line; import makes no database for it, and takes again what the database
// it writes over holds already.
TEST_F(ControlProcessTest, CheckAndImportHoldAFileToTheRulesOfAWrite) {
  const std::string bad = dir_ + "/hidden.yaml";
  testing::write_file(bad, "systems:\n  - key: \"cr\\u200bm\"\n    description: \"" + std::string(5000, 'd') + "\"\n");
  std::string out;
  std::string err;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "check", bad}, {"config", "import", bad, "--db", db_}}) {
    EXPECT_EQ(sluice(args, &out, &err), 1) << args[1];
    EXPECT_NE(err.find(bad + ":2:10: systems[0].key: must not hold invisible characters"), std::string::npos) << err;
    EXPECT_NE(err.find(bad + ":3:18: systems[0].description: must be at most 4096 bytes long, got 5000"),
              std::string::npos) << err;
  }
  EXPECT_FALSE(std::filesystem::exists(db_));
}

TEST_F(ControlProcessTest, ConfigCheckPrintsEveryProblemWithItsLineAndFails) {
  const std::string bad = dir_ + "/bad.yaml";
  testing::write_file(bad, "systems:\n  - key: crm\n    enabled: maybe\n    interfaces: [nothing]\n");
  std::string out;
  std::string err;
  EXPECT_EQ(sluice({"config", "check", bad}, &out, &err), 1);
  EXPECT_NE(err.find(bad + ":3:14: systems[0].enabled: must be true or false"), std::string::npos) << err;
  // A field that does not read does not hide a reference to nothing beside it.
  EXPECT_NE(err.find(bad + ":4:18: systems[0].interfaces[0]: names no interface"), std::string::npos) << err;
  EXPECT_NE(err.find("2 problems in"), std::string::npos) << err;
  EXPECT_EQ(sluice({"config", "check", yaml_}, &out), 0);
  EXPECT_EQ(out, yaml_ + ": ok\n");
  testing::write_file(bad, "systems:\n  - key: crm\n    interfaces: [nothing]\n");
  EXPECT_EQ(sluice({"config", "check", bad}, &out, &err), 1);
  EXPECT_NE(err.find(bad + ":3:18: systems[0].interfaces[0]: names no interface"), std::string::npos) << err;
}

TEST_F(ControlProcessTest, ImportThenExportKeepsTheFilesMeaningInYamlAndJson) {
  const std::string fixture = std::string(SLUICE_FIXTURES) + "/issue_example.yaml";
  std::string out;
  ASSERT_EQ(sluice({"config", "import", fixture, "--db", db_}, &out), 0);
  EXPECT_NE(out.find("(revision 2)"), std::string::npos) << out;
  const std::string expected = control_test::yaml_of(*control_test::parse([&] {
    std::ifstream in(fixture);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }()));
  ASSERT_EQ(sluice({"config", "export", "--db", db_}, &out), 0);
  EXPECT_EQ(control_test::yaml_of(*control_test::parse(out)), expected);
  ASSERT_EQ(sluice({"config", "export", "--format", "json", "--db", db_}, &out), 0);
  EXPECT_EQ(out.front(), '{');
  EXPECT_EQ(control_test::yaml_of(*control_test::parse(out)), expected);
}

// Bytes that are not UTF-8, put in by hand: the configuration does not read, and --as-stored still
// prints the rows (it used to abort), with the bytes as they are for the import to point at.
TEST_F(ControlProcessTest, AHandEditThatIsNotUtf8IsExportedAsStoredAndRefusedWhereItIs) {
  const std::string fixture = std::string(SLUICE_FIXTURES) + "/issue_example.yaml";
  ASSERT_EQ(sluice({"config", "import", fixture, "--db", db_}), 0);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE systems SET description = CAST(X'6F6BFF' AS TEXT) WHERE key = 'crm'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::string out;
  std::string err;
  EXPECT_EQ(sluice({"config", "export", "--db", db_}, &out, &err), 1);
  EXPECT_NE(err.find("is not valid UTF-8 text"), std::string::npos) << err;
  ASSERT_EQ(sluice({"config", "export", "--as-stored", "--db", db_}, &out, &err), 0) << err;
  EXPECT_NE(out.find("\"description\": \"ok\xff\""), std::string::npos) << out;
  const std::string file = dir_ + "/as-stored.json";
  testing::write_file(file, out);
  EXPECT_EQ(sluice({"config", "import", file, "--db", db_}, &out, &err), 1);
  EXPECT_NE(err.find("is not valid UTF-8 text"), std::string::npos) << err;
}

// A hand edit that does not validate cannot be exported as a configuration; --as-stored prints the
// rows as they are (a value that is not JSON as a string), to edit and import back.
TEST_F(ControlProcessTest, AnInvalidDatabaseIsRepairedByExportingItAsStoredAndImportingTheFix) {
  const std::string fixture = std::string(SLUICE_FIXTURES) + "/issue_example.yaml";
  ASSERT_EQ(sluice({"config", "import", fixture, "--db", db_}), 0);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "UPDATE interfaces SET upstream = 'gone' WHERE id = 'users'; "
                         "UPDATE settings SET value = 'en' WHERE name = 'language'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::string out;
  std::string err;
  EXPECT_EQ(sluice({"config", "export", "--db", db_}, &out, &err), 1);
  EXPECT_NE(err.find("interfaces[1].upstream"), std::string::npos) << err;
  EXPECT_NE(err.find("language: is not valid JSON"), std::string::npos) << err;
  EXPECT_NE(err.find("--as-stored"), std::string::npos) << err;
  ASSERT_EQ(sluice({"config", "export", "--as-stored", "--db", db_}, &out, &err), 0) << err;
  const boost::json::object stored = boost::json::parse(out).as_object();
  EXPECT_EQ(stored.at("language").as_string(), "en");
  EXPECT_EQ(stored.at("interfaces").as_array()[1].as_object().at("upstream").as_string(), "gone");
  const std::string fixed = dir_ + "/fixed.json";
  const std::size_t gone = out.find(R"("upstream": "gone")");
  ASSERT_NE(gone, std::string::npos) << out;
  testing::write_file(fixed, out.replace(gone, std::string_view(R"("upstream": "gone")").size(), R"("upstream": "app")"));
  ASSERT_EQ(sluice({"config", "import", fixed, "--db", db_}, &out, &err), 0) << err;
  ASSERT_EQ(sluice({"config", "export", "--db", db_}, &out), 0);
  EXPECT_EQ(control_test::yaml_of(*control_test::parse(out)), control_test::yaml_of(*control_test::parse([&] {
              std::ifstream in(fixture);
              std::stringstream s;
              s << in.rdbuf();
              return s.str();
            }())));
}

// --as-stored prints JSON: asked for YAML, it says so rather than print JSON anyway.
TEST_F(ControlProcessTest, AnExportAsStoredIsJsonAndRefusesToBeYaml) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  std::string out;
  std::string err;
  EXPECT_EQ(sluice({"config", "export", "--as-stored", "--format", "yaml", "--db", db_}, &out, &err), 2);
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "sluice config export: --as-stored prints JSON only: leave out --format yaml\n");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "export", "--as-stored", "--db", db_},
        {"config", "export", "--as-stored", "--format", "json", "--db", db_}}) {
    EXPECT_EQ(sluice(args, &out), 0);
    EXPECT_TRUE(boost::json::parse(out).is_object()) << out;
  }
  EXPECT_EQ(sluice({"config", "export", "--db", db_}, &out), 0);
  EXPECT_TRUE(out.starts_with("listen: ")) << out;
}

TEST_F(ControlProcessTest, ReadingOrRevokingFromAMissingDatabaseFailsAndCreatesNone) {
  const std::string missing = dir_ + "/typo.db";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "export", "--db", missing}, {"token", "list", "--db", missing},
        {"token", "revoke", "at_0", "--db", missing}}) {
    SCOPED_TRACE(args[0] + " " + args[1]);
    std::string err;
    EXPECT_EQ(sluice(args, nullptr, &err), 1);
    EXPECT_NE(err.find("there is no database at " + missing), std::string::npos) << err;
    EXPECT_FALSE(std::filesystem::exists(missing));
  }
  std::string out;
  EXPECT_EQ(sluice({"token", "create", "--role", "read", "--db", missing}, &out), 0);  // creating one may
  EXPECT_TRUE(std::filesystem::exists(missing));
}

// No command puts sluice's tables beside another application's, and those that only read write
// nothing: they used to make any SQLite file a sluice database and report its default configuration.
TEST_F(ControlProcessTest, NoCommandTouchesAnotherApplicationsDatabaseAndReadingWritesNothing) {
  const std::string other = dir_ + "/other.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE foo (x); INSERT INTO foo VALUES (1)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  const std::string before = file_bytes(other);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "export", "--db", other}, {"token", "list", "--db", other},
        {"token", "revoke", "at_0", "--db", other}, {"serve", "--db", other, "--check"},
        {"serve", "--db", other, "--print-config"}, {"config", "import", yaml_, "--db", other},
        {"token", "create", "--role", "admin", "--db", other},
        {"serve", "--db", other, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}}) {
    SCOPED_TRACE(args[0] + " " + args[1] + " " + args[2]);
    std::string out;
    std::string err;
    EXPECT_EQ(sluice(args, &out, &err), 1);
    EXPECT_EQ(out, "");
    EXPECT_NE(err.find(other + " is an SQLite database but not sluice's (it holds tables sluice does not make: foo)"),
              std::string::npos)
        << err;
    EXPECT_EQ(file_bytes(other), before);
  }
  // A sluice database is read without a write: its file is as it was.
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  token("admin");
  const std::string mine = file_bytes(db_);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "export", "--db", db_}, {"token", "list", "--db", db_},
        {"serve", "--db", db_, "--check"}, {"serve", "--db", db_, "--print-config"}}) {
    SCOPED_TRACE(args[0] + " " + args[1]);
    EXPECT_EQ(sluice(args), 0);
    EXPECT_EQ(file_bytes(db_), mine);
  }
}

// A write that waits longer than 5 s for another process's says what it could not do: an import
// used to say it could not lock the file to migrate it, which it had no need to.
TEST_F(ControlProcessTest, AWriteThatWaitsTooLongForAnotherSaysWhatItCouldNotDo) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);  // a shell left open
  std::string err;
  EXPECT_EQ(sluice({"config", "import", yaml_, "--db", db_}, nullptr, &err), 1);
  EXPECT_EQ(err, "sluice config import: cannot write " + db_ +
                     ": another process has held its write lock for longer than 5 s (a long write, or a transaction "
                     "left open in a sqlite3 shell)\n");
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

TEST_F(ControlProcessTest, AnImportThatDoesNotValidateChangesNothing) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string bad = dir_ + "/bad.yaml";
  testing::write_file(bad, "systems: [{key: a, interfaces: [nothing]}]\n");
  std::string err;
  EXPECT_EQ(sluice({"config", "import", bad, "--db", db_}, nullptr, &err), 1);
  EXPECT_NE(err.find("names no interface"), std::string::npos) << err;
  auto store = control_test::open_store(db_);
  EXPECT_EQ(*store->revision(), 2);
}

TEST_F(ControlProcessTest, ACreatedTokenOpensTheAdminApiUntilRevoked) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  std::string out;
  std::string err;
  ASSERT_EQ(sluice({"token", "create", "--role", "admin", "--name", "ops", "--db", db_}, &out, &err), 0);
  const std::string t = out.substr(0, out.find('\n'));
  EXPECT_TRUE(t.starts_with("sluice_at_"));
  EXPECT_NE(err.find("shown this once"), std::string::npos);
  Server s = serve({"--db", db_});
  EXPECT_EQ(admin(s, t, "GET", "/admin/v1/whoami").status, 200);
  EXPECT_EQ(admin(s, "sluice_at_wrong", "GET", "/admin/v1/whoami").status, 401);
  ASSERT_EQ(sluice({"token", "list", "--db", db_}, &out), 0);
  const std::string id = out.substr(0, out.find(' '));
  EXPECT_TRUE(id.starts_with("at_")) << out;
  EXPECT_EQ(out.find(t), std::string::npos);
  ASSERT_EQ(sluice({"token", "revoke", id, "--db", db_}), 0);
  EXPECT_TRUE(testing::eventually([&] { return admin(s, t, "GET", "/admin/v1/whoami").status == 401; }, 5s));
}

// The admin API of `sluice serve` reads and resets the counts its gateway keeps: a header limit's
// count of requests without the header (value= empty; a reset without value is refused, and resets
// nothing), and a client_ip limit's count of an address however it is spelt.
TEST_F(ControlProcessTest, TheAdminApiReadsAndResetsTheCountsItsGatewayKeeps) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  Server s = serve({"--db", db_});
  ASSERT_EQ(admin(s, t, "POST", "/admin/v1/systems", R"({"key":"s","interfaces":["*"]})").status, 201);
  for (const std::string by : {"header:X-User", "client_ip"}) {
    const std::string id = by == "client_ip" ? "ki" : "kq";
    const HttpResponse r = admin(s, t, "POST", "/admin/v1/interfaces",
                                 R"({"id":")" + id + R"(","path":"/)" + id + R"(","upstream":"app","limits":)"
                                 R"([{"algorithm":"fixed_window","limit":1,"period":"1h","key_by":")" + by + R"("}]})");
    ASSERT_EQ(r.status, 201) << r.body;
  }
  // Served once the gateway's snapshot, which the admin API reads its limits from, has them.
  ASSERT_TRUE(testing::eventually([&] { return admin(s, t, "GET", "/admin/v1/limits?key=interface:ki").status == 200; }));
  const auto remaining = [&](const std::string& query) -> std::int64_t {
    const HttpResponse r = admin(s, t, "GET", "/admin/v1/limits?" + query);
    EXPECT_EQ(r.status, 200) << query << ": " << r.body;
    boost::system::error_code ec;
    const auto v = boost::json::parse(r.body, ec);
    const auto* state = ec ? nullptr : v.at_pointer("/items/0/state").if_object();
    return state != nullptr ? state->at("remaining").as_int64() : -1;
  };

  EXPECT_EQ(status(s, "/kq", "s"), 200);
  EXPECT_EQ(status(s, "/kq", "s"), 429);
  EXPECT_EQ(remaining("key=interface:kq&value="), 0);
  const HttpResponse refused = admin(s, t, "POST", "/admin/v1/limits/reset?key=interface:kq");
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("header X-User"), std::string::npos) << refused.body;
  EXPECT_EQ(status(s, "/kq", "s"), 429);
  EXPECT_EQ(admin(s, t, "POST", "/admin/v1/limits/reset?key=interface:kq&value=").status, 200);
  EXPECT_EQ(status(s, "/kq", "s"), 200);

  EXPECT_EQ(status(s, "/ki", "s"), 200);  // from 127.0.0.1
  EXPECT_EQ(status(s, "/ki", "s"), 429);
  EXPECT_EQ(remaining("key=interface:ki&value=::ffff:127.0.0.1"), 0);
  EXPECT_EQ(admin(s, t, "POST", "/admin/v1/limits/reset?key=interface:ki&value=::FFFF:7F00:1").status, 200);
  EXPECT_EQ(status(s, "/ki", "s"), 200);
  const HttpResponse named = admin(s, t, "GET", "/admin/v1/limits?key=interface:ki&value=localhost");
  EXPECT_EQ(named.status, 400);
  EXPECT_NE(named.body.find(R"(\"localhost\" is not an IP address)"), std::string::npos) << named.body;
}

// The admin listener of `sluice serve` tells a client that waits for it to send its body to go on,
// and refuses one without a token from its head, without reading the body.
TEST_F(ControlProcessTest, TheAdminApiAnswersExpectContinueAndRefusesATokenlessWriteWithoutIt) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  Server s = serve({"--db", db_});
  const std::string body = R"({"interfaces":["*"]})";
  const std::string head = "PUT /admin/v1/systems/x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n";
  testing::RawConnection c(s.admin);
  ASSERT_TRUE(c.send(head + "Authorization: Bearer " + t + "\r\n\r\n"));
  EXPECT_EQ(c.read_until("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(c.send(body));
  const std::string created = c.read_until("\r\n\r\n");
  EXPECT_EQ(testing::raw_status(created), 201) << created;
  const std::string tokenless = testing::raw_exchange(s.admin, head + "\r\n");
  EXPECT_EQ(testing::raw_status(tokenless), 401) << tokenless;
  EXPECT_EQ(tokenless.find("100 Continue"), std::string::npos) << tokenless;
}

// `token create --expires-in` makes a token the list shows with its expiry; a lifetime that is not
// a duration from 1m to 3650d is misuse (2) and makes no token: not one that never expires for 0s,
// or for nothing given.
TEST_F(ControlProcessTest, ATokenCanBeMadeToExpire) {
  std::string out;
  std::string err;
  ASSERT_EQ(sluice({"token", "create", "--role", "read", "--name", "grafana", "--expires-in", "90d", "--db", db_},
                   &out, &err), 0) << err;
  EXPECT_NE(err.find("(role read, expires 20"), std::string::npos) << err;
  ASSERT_EQ(sluice({"token", "list", "--db", db_}, &out), 0);
  EXPECT_NE(out.find("grafana  (created by cli:"), std::string::npos) << out;
  EXPECT_NE(out.find(", expires 20"), std::string::npos) << out;
  for (const char* lifetime : {"soon", "10s", "0s", "", "3651d"}) {
    EXPECT_EQ(sluice({"token", "create", "--role", "read", "--expires-in", lifetime, "--db", db_}, &out, &err), 2)
        << lifetime;
    EXPECT_NE(err.find("--expires-in must be a duration from 1m to 3650d, like 90d or 12h, got \"" +
                       std::string(lifetime) + "\""),
              std::string::npos)
        << err;
  }
  ASSERT_EQ(sluice({"token", "list", "--db", db_}, &out), 0);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST_F(ControlProcessTest, ConfigApplyReplacesAPrimarysConfigurationOrShowsItsProblemsByLine) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string t = token("admin");
  Server s = serve({"--db", db_});
  const std::string url = admin_url(s);
  std::string text = control_test::base_yaml(upstream_->port());
  text.replace(text.find("{key: erp, interfaces: [orders]}"), 32, "{key: erp, interfaces: [orders, users]}");
  const std::string next = dir_ + "/next.yaml";
  testing::write_file(next, text);
  std::string out;
  std::string err;
  ASSERT_EQ(sluice({"config", "apply", next, "--admin", url, "--token", t}, &out, &err), 0) << err;
  EXPECT_NE(out.find("(revision 4)"), std::string::npos) << out;
  EXPECT_TRUE(testing::eventually([&] { return status(s, "/users/1", "erp") == 200; }, 5s));
  const std::string bad = dir_ + "/bad.yaml";
  testing::write_file(bad, "systems:\n  - {key: a, enabled: perhaps}\n");
  EXPECT_EQ(sluice({"config", "apply", bad, "--admin", url, "--token", t}, &out, &err), 1);
  EXPECT_NE(err.find(bad + ":2:23: systems[0].enabled"), std::string::npos) << err;
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url, "--token", t, "--if-match", "3"}, &out, &err), 1);
  EXPECT_NE(err.find("412: the configuration changed since revision 3"), std::string::npos) << err;
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url, "--token", t, "--if-match", "\"r3\""}, &out, &err), 1);
  EXPECT_NE(err.find("412: the configuration changed since revision 3"), std::string::npos) << err;
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url, "--token", t, "--if-match", "latest"}, &out, &err), 2);
  EXPECT_NE(err.find("--if-match must be a revision"), std::string::npos) << err;
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url, "--token", "sluice_at_wrong"}, &out, &err), 1);
  EXPECT_NE(err.find("401"), std::string::npos) << err;
  // The token from a file, kept out of the command line.
  const std::string file = dir_ + "/token";
  testing::write_file(file, "  " + t + "\n");
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url, "--token-file", file}, &out, &err), 0) << err;
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url}, &out, &err), 2);
  EXPECT_NE(err.find("give --token or --token-file"), std::string::npos) << err;
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url, "--token-file", file + ".missing"}, &out, &err), 2);
  EXPECT_NE(err.find("cannot read a token from"), std::string::npos) << err;
  EXPECT_EQ(sluice({"config", "apply", next, "--admin", url, "--token", t, "--token-file", file}, &out, &err), 2);
}

// A follower may read its token from a file: not in its command line (/proc/PID/cmdline) for as long
// as it runs.
TEST_F(ControlProcessTest, AFollowerTakesItsTokenFromAFile) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  Server primary = serve({"--db", db_});
  const std::string file = dir_ + "/read-token";
  const std::string read = token("read");
  testing::write_file(file, read + "\n");
  Server follower = serve({"--config-from", admin_url(primary), "--token-file", file});
  EXPECT_EQ(status(follower, "/orders/1", "crm"), 200);
  std::ifstream cmdline("/proc/" + std::to_string(follower.child->pid()) + "/cmdline");
  const std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  EXPECT_EQ(args.find(read), std::string::npos);
  std::string err;
  EXPECT_EQ(sluice({"serve", "--token-file", file}, nullptr, &err), 2);  // only with --config-from
}

// A check of a database that is not there fails and makes none: a mistyped --db must not pass as
// an empty configuration. The demo's check names what it checked.
TEST_F(ControlProcessTest, ACheckOfAMissingDatabaseFailsAndMakesNone) {
  const std::string missing = db_ + ".typo";
  std::string out;
  std::string err;
  EXPECT_EQ(sluice({"serve", "--db", missing, "--check"}, &out, &err), 1);
  EXPECT_NE(err.find("there is no database at " + missing), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(missing));
  EXPECT_EQ(sluice({"serve", "--db", missing, "--print-config"}, &out, &err), 1);
  EXPECT_FALSE(std::filesystem::exists(missing));
  EXPECT_EQ(sluice({"serve", "--demo", "--db", missing, "--check"}, &out, &err), 0) << err;
  EXPECT_EQ(out, "the demo configuration: ok\n");
}

// --print-config prints the configuration as it would be served: the flags over the file.
TEST_F(ControlProcessTest, PrintConfigShowsTheFlagsOverTheFile) {
  std::string out;
  ASSERT_EQ(sluice({"serve", "--config", yaml_, "--store", "redis://127.0.0.1:7001", "--fleet-size", "3",
                    "--listen", "127.0.0.1:18080", "--print-config"}, &out), 0);
  EXPECT_NE(out.find("store: redis://127.0.0.1:7001\n"), std::string::npos) << out;
  EXPECT_NE(out.find("fleet_size: 3"), std::string::npos) << out;
  EXPECT_NE(out.find("listen: \"127.0.0.1:18080\""), std::string::npos) << out;
}

// --check finds a listen flag that a start would refuse, from a file and from a database.
TEST_F(ControlProcessTest, ACheckRefusesAListenFlagAStartWouldRefuse) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  std::string err;
  EXPECT_EQ(sluice({"serve", "--config", yaml_, "--listen", "nonsense", "--check"}, nullptr, &err), 1);
  EXPECT_NE(err.find("--listen must be host:port with an IP address or localhost, got \"nonsense\""), std::string::npos) << err;
  EXPECT_EQ(sluice({"serve", "--db", db_, "--admin-listen", "1.2.3.4", "--check"}, nullptr, &err), 1);
  EXPECT_NE(err.find("--admin-listen must be host:port"), std::string::npos) << err;
  EXPECT_EQ(sluice({"serve", "--config", yaml_, "--admin-listen", "off", "--check"}), 0);
}

// A flag given empty (an unset variable in a script) or one that does nothing without another is
// misuse (2), not a silent fallback to the default.
TEST_F(ControlProcessTest, AnEmptyFlagOrATokenWithoutAPrimaryIsMisuse) {
  std::string err;
  for (const char* flag : {"--listen", "--admin-listen", "--store", "--access-log", "--db"}) {
    EXPECT_EQ(sluice({"serve", "--config", yaml_, flag, "", "--check"}, nullptr, &err), 2) << flag;
    EXPECT_NE(err.find("must not be empty"), std::string::npos) << flag << ": " << err;
  }
  EXPECT_EQ(sluice({"serve", "--db", db_, "--token", "abc", "--check"}, nullptr, &err), 2);
  EXPECT_NE(err.find("--token requires --config-from"), std::string::npos) << err;
  // The other commands' database too: SQLite would take "" for a throwaway one.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"config", "import", yaml_, "--db", ""},
                                              std::vector<std::string>{"config", "export", "--db", ""},
                                              std::vector<std::string>{"token", "create", "--role", "admin", "--db", ""},
                                              std::vector<std::string>{"token", "list", "--db", ""}}) {
    EXPECT_EQ(sluice(args, nullptr, &err), 2) << args[0] << " " << args[1];
    EXPECT_NE(err.find("must not be empty"), std::string::npos) << err;
  }
}

TEST_F(ControlProcessTest, AConfigurationThatIsADirectoryIsSaidToBeOne) {
  std::string err;
  EXPECT_EQ(sluice({"config", "check", dir_}, nullptr, &err), 1);
  EXPECT_NE(err.find("is a directory, not a file"), std::string::npos) << err;
}

// A configuration file that cannot be read is said with the system's reason, by every command that
// reads one; import makes no database of it.
TEST_F(ControlProcessTest, AConfigurationFileThatCannotBeReadIsSaidWithTheReason) {
  const std::string missing = dir_ + "/missing.yaml";
  const std::string locked = dir_ + "/locked.yaml";
  testing::write_file(locked, control_test::base_yaml(upstream_->port()));
  ASSERT_EQ(::chmod(locked.c_str(), 0), 0);
  const std::pair<std::string, std::string> files[] = {{missing, "No such file or directory"},
                                                       {locked, "Permission denied"}};
  for (const auto& [file, reason] : files) {
    const std::string said = file + ": cannot read the file: " + reason + "\n";
    const std::pair<std::vector<std::string>, std::string> commands[] = {
        {{"serve", "--config", file}, "sluice serve: 1 problem in " + file + "; not started\n"},
        {{"serve", "--config", file, "--check"}, "sluice serve: 1 problem in " + file + "; not started\n"},
        {{"config", "check", file}, "sluice config check: 1 problem in " + file + "\n"},
        {{"config", "import", file, "--db", db_}, "sluice config import: 1 problem in " + file + "\n"},
        {{"config", "apply", file, "--admin", "http://127.0.0.1:1", "--token", "t"},
         "sluice config apply: 1 problem in " + file + "\n"},
    };
    for (const auto& [args, last] : commands) {
      std::vector<std::string> argv{SLUICE_BINARY};
      argv.insert(argv.end(), args.begin(), args.end());
      Child child(testing::held_to_file_modes(argv), testing::temp_dir());
      EXPECT_EQ(child.wait_exit(30s), 1) << args[0] << " " << args[1] << " " << file;
      EXPECT_EQ(child.stderr_text(), said + last);
    }
  }
  EXPECT_FALSE(std::filesystem::exists(db_));
}

// The file's admin_listen takes off as the flag does.
TEST_F(ControlProcessTest, AFilesAdminListenMayBeOff) {
  const std::string file = dir_ + "/off.yaml";
  testing::write_file(file, "admin_listen: \"off\"\n" + control_test::base_yaml(upstream_->port()));
  std::string out;
  std::string err;
  EXPECT_EQ(sluice({"serve", "--config", file, "--check"}, &out, &err), 0) << err;
}

TEST_F(ControlProcessTest, TheAdminListenerStaysOnLoopbackUntilATokenExists) {
  ASSERT_EQ(sluice({"config", "import", yaml_, "--db", db_}), 0);
  const std::string open = "0.0.0.0:" + std::to_string(testing::free_port());
  std::string err;
  // A check refuses it as a start does, and says how to make a token in this database.
  for (const char* check : {"--check", "--listen=127.0.0.1:0"}) {
    EXPECT_EQ(sluice({"serve", "--db", db_, check, "--admin-listen", open}, nullptr, &err), 1);
    EXPECT_NE(err.find("no admin token exists"), std::string::npos) << err;
    EXPECT_NE(err.find("sluice token create --role admin --db " + db_), std::string::npos) << err;
  }
  for (const char* check : {"--check", "--listen=127.0.0.1:0"}) {
    EXPECT_EQ(sluice({"serve", "--config", yaml_, check, "--admin-listen", open}, nullptr, &err), 1);
    // A file has no tokens to make: it is told how to get them, not to make one.
    EXPECT_NE(err.find("a configuration served from a file has no admin tokens"), std::string::npos) << err;
    EXPECT_EQ(err.find("sluice token create"), std::string::npos) << err;
  }
  token("read");
  EXPECT_EQ(sluice({"serve", "--db", db_, "--admin-listen", open, "--check"}), 0);
  // The demo is served from a database with a token made for it: its check passes too.
  EXPECT_EQ(sluice({"serve", "--demo", "--db", dir_ + "/demo.db", "--admin-listen", open, "--check"}, nullptr, &err), 0)
      << err;
  const std::uint16_t port = testing::free_port();
  Child served({SLUICE_BINARY, "serve", "--db", db_, "--listen", "127.0.0.1:" + std::to_string(port), "--admin-listen",
                open, "--access-log", "off"},
               testing::temp_dir());
  EXPECT_TRUE(testing::eventually([&] { return HttpClient(port).get("/_sluice/healthz").status == 200; }))
      << served.stderr_text();
}

// An address to listen on is an IP address or localhost: a name a check let through, a start refused.
TEST_F(ControlProcessTest, AListenAddressThatNamesAHostIsRefusedByACheckToo) {
  const std::string file = dir_ + "/named.yaml";
  testing::write_file(file, "listen: \"example.invalid:0\"\n" + control_test::base_yaml(upstream_->port()));
  std::string err;
  EXPECT_EQ(sluice({"config", "check", file}, nullptr, &err), 1);
  EXPECT_NE(err.find("listen: must be host:port with an IP address or localhost, got \"example.invalid:0\""),
            std::string::npos)
      << err;
  EXPECT_EQ(sluice({"serve", "--config", file, "--check"}, nullptr, &err), 1);
  EXPECT_EQ(sluice({"serve", "--config", yaml_, "--admin-listen", "admin.invalid:0", "--check"}, nullptr, &err), 1);
  EXPECT_NE(err.find("--admin-listen must be host:port with an IP address or localhost"), std::string::npos) << err;
  EXPECT_EQ(sluice({"serve", "--config", yaml_, "--listen", "localhost:0", "--check"}, nullptr, &err), 0) << err;
}

TEST_F(ControlProcessTest, OnlyOneConfigurationSourceIsAccepted) {
  std::string err;
  EXPECT_EQ(sluice({"serve", "--db", db_, "--config", yaml_}, nullptr, &err), 2);
  EXPECT_NE(err.find("give one of"), std::string::npos) << err;
  EXPECT_EQ(sluice({"serve", "--config-from", "http://127.0.0.1:1"}, nullptr, &err), 2);
  EXPECT_NE(err.find("needs --token"), std::string::npos) << err;
}

}  // namespace
}  // namespace sluice
