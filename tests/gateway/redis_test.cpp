// The gateway with its limits in Redis, against real redis-server processes (a single node, and a
// 3-master, 3-replica cluster): a fleet of gateways admits a limit once in total, a bad address is
// refused, Redis dying under load is answered per on_store_failure and decisions come back to it,
// in-flight leases are given back, counters carry over a reload, and /metrics tells the store's
// health. Nothing is skipped: a test that cannot start its server fails.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/json.hpp>
#include <cstdio>
#include <latch>
#include <mutex>
#include <thread>

#include "cluster_fixture.h"
#include "gateway/demo.h"
#include "gateway/gateway.h"
#include "gateway/redis_limiter.h"
#include "http_client.h"
#include "load_config.h"
#include "redis_server.h"

namespace sluice::gateway {
namespace {

using namespace std::chrono_literals;
using testing::Child;
using testing::HttpClient;
using testing::HttpResponse;
using Steady = std::chrono::steady_clock;

std::string reason_of(const HttpResponse& r) {
  boost::system::error_code ec;
  auto v = boost::json::parse(r.body, ec);
  if (ec || !v.is_object()) return "";
  auto it = v.as_object().find("reason");
  return it != v.as_object().end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
}

// The value of an unlabelled metric (or one with its labels written out), -1 when absent.
double metric(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + name.size() + 2);
}

// A fleet of `sluice serve` processes on one store, each with 2 worker threads.
class Fleet {
 public:
  // Each instance listens on ports the kernel picks (port 0), and says which on its stderr: ports
  // chosen beforehand could be taken, in between, by another process's connection.
  Fleet(const std::string& store, const std::string& config, int size) : dir_(testing::temp_dir()) {
    testing::write_file(dir_ + "/sluice.yaml", config);
    for (int i = 0; i < size; ++i) {
      children_.push_back(std::make_unique<Child>(
          std::vector<std::string>{SLUICE_BINARY, "serve", "--config", dir_ + "/sluice.yaml", "--store", store,
                                   "--threads", "2", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                                   "--access-log", "off"},
          testing::temp_dir()));
    }
  }

  // Whether every instance has said its ports and answers its health check (their stderr in the
  // message when not).
  ::testing::AssertionResult serving() {
    ports_.clear();
    admin_ports_.clear();
    for (std::size_t i = 0; i < children_.size(); ++i) {
      unsigned port = 0, admin = 0;
      const bool said = testing::eventually([&] {
        const std::string err = children_[i]->stderr_text();
        const auto at = err.find("serving on port ");
        return at != std::string::npos &&
               std::sscanf(err.c_str() + at, "serving on port %u (admin on port %u)", &port, &admin) == 2;
      });
      if (!said || !testing::eventually([&] {
            return HttpClient(static_cast<std::uint16_t>(port)).get("/_sluice/healthz").status == 200;
          })) {
        return ::testing::AssertionFailure() << "instance " << i << " is not serving: " << children_[i]->stderr_text();
      }
      ports_.push_back(static_cast<std::uint16_t>(port));
      admin_ports_.push_back(static_cast<std::uint16_t>(admin));
    }
    return ::testing::AssertionSuccess();
  }

  std::uint16_t port(std::size_t i) const { return ports_[i]; }
  std::size_t size() const { return children_.size(); }
  std::string metrics(std::size_t i) const { return HttpClient(admin_ports_[i]).get("/metrics").body; }
  std::string stderr_text(std::size_t i) const { return children_[i]->stderr_text(); }

 private:
  std::string dir_;
  std::vector<std::uint16_t> ports_;
  std::vector<std::uint16_t> admin_ports_;
  std::vector<std::unique_ptr<Child>> children_;
};

// Deny when Redis cannot decide, so that no admission is made up; time for a burst to queue in Redis.
std::string fleet_config(std::uint16_t upstream) {
  return "store_timeout: 5s\n"
         "upstreams: [{name: app, targets: [127.0.0.1:" + std::to_string(upstream) + "]}]\n"
         "systems:\n"
         "  - key: crm\n"
         "    interfaces: [echo]\n"
         "    limits: [{algorithm: sliding_log, limit: 50, period: 1h, on_store_failure: deny}]\n"
         "interfaces:\n"
         "  - {id: echo, path: /echo/*, upstream: app}\n";
}

// Three gateway processes on `store`, a burst of 1,000 requests from 30 clients (10 per instance)
// released together: exactly 50 pass, every other one is refused by the system limit, and no
// decision was made without the store.
void expect_fleet_admits_exactly_50(const std::string& store, const std::function<std::size_t()>& keys_in_store) {
  auto up = DemoUpstream::start();
  ASSERT_TRUE(up.ok());
  Fleet fleet(store, fleet_config((*up)->port()), 3);
  ASSERT_TRUE(fleet.serving());
  constexpr int kClients = 30;
  constexpr int kRequests = 1000;
  std::atomic<int> admitted{0}, limited{0}, other{0};
  std::string other_example;
  std::mutex mu;
  std::latch go(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(fleet.port(static_cast<std::size_t>(c) % fleet.size()));
      const int n = kRequests / kClients + (c < kRequests % kClients ? 1 : 0);
      go.arrive_and_wait();
      for (int i = 0; i < n; ++i) {
        const HttpResponse r = client.get("/echo/x", "crm");
        if (r.status == 200) {
          ++admitted;
        } else if (r.status == 429 && reason_of(r) == "system_rate_limited") {
          ++limited;
        } else {
          ++other;
          std::lock_guard lock(mu);
          other_example = std::to_string(r.status) + " " + r.body;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(admitted.load(), 50);
  EXPECT_EQ(limited.load(), kRequests - 50);
  EXPECT_EQ(other.load(), 0) << other_example;
  EXPECT_EQ((*up)->requests(), 50) << "only admitted requests reach the upstream";
  for (std::size_t i = 0; i < fleet.size(); ++i) {
    const std::string m = fleet.metrics(i);
    EXPECT_EQ(metric(m, "sluice_store_errors_total"), 0) << "instance " << i;
    EXPECT_EQ(metric(m, "sluice_store_up"), 1) << "instance " << i;
  }
  EXPECT_GE(keys_in_store(), 1u) << "the limit was counted in Redis";
}

std::size_t count_keys(testing::RedisServer& server) {
  const std::string out = server.cli({"DBSIZE"});
  return out.empty() ? 0 : std::stoul(out);
}

TEST(RedisFleetTest, ThreeGatewaysSharingOneRedisAdmitExactlyTheLimit) {
  auto server = testing::RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  expect_fleet_admits_exactly_50((*server)->address(), [&] { return count_keys(**server); });
}

class RedisClusterFleetTest : public testing::ClusterTest {};

// A gateway of two workers before a demo upstream, its limits in the store `options` open, its log
// kept: the system crm may call /api, whose limit is per X-User (on_store_failure: allow).
class LoggedGateway {
 public:
  explicit LoggedGateway(redis::RedisStoreOptions options) {
    auto up = DemoUpstream::start();
    auto factory = redis_limiters(std::move(options));
    if (!up.ok() || !factory.ok()) {
      error_ = !up.ok() ? up.error().message : factory.error().message;
      return;
    }
    up_ = std::move(*up);
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "off";
    o.threads = 2;
    o.access_log = "off";
    o.log = [this](std::string_view line) {
      const std::lock_guard lock(mu_);
      log_.emplace_back(line);
    };
    o.make_limiter = std::move(*factory);
    auto g = Gateway::start(o, testing::load_config(
                                   "upstreams:\n"
                                   "  - {name: app, targets: [127.0.0.1:" + std::to_string(up_->port()) + "]}\n"
                                   "systems:\n"
                                   "  - {key: crm, interfaces: [api]}\n"
                                   "interfaces:\n"
                                   "  - {id: api, path: /api, upstream: app, limits: [{algorithm: fixed_window, "
                                   "limit: 1000000, period: 1h, key_by: \"header:X-User\", "
                                   "on_store_failure: allow}]}\n"));
    if (!g.ok()) {
      error_ = g.error().message;
      return;
    }
    gw_ = std::move(*g);
  }
  // Why it did not start, or "".
  const std::string& error() const { return error_; }
  std::uint16_t port() const { return gw_->port(); }
  // How many lines of its log start with `prefix`.
  long logged(const std::string& prefix) const {
    const std::lock_guard lock(mu_);
    return std::count_if(log_.begin(), log_.end(), [&](const std::string& l) { return l.starts_with(prefix); });
  }

 private:
  std::string error_;
  std::unique_ptr<DemoUpstream> up_;
  mutable std::mutex mu_;
  std::vector<std::string> log_;  // guarded by mu_
  std::unique_ptr<Gateway> gw_;   // last: stopped before what its log and upstream use
};

TEST_F(RedisClusterFleetTest, ThreeGatewaysSharingOneClusterAdmitExactlyTheLimit) {
  expect_fleet_admits_exactly_50(cluster_->address(), [] {
    std::size_t n = 0;
    for (std::size_t i = 0; i < cluster_->size(); ++i) n += count_keys(cluster_->node(i));
    return n;
  });
}

// A master that hangs (paused for less than the cluster's node timeout: no failover) is said in the
// log once for the gateway, however many workers' stores find it, with the failure that opened its
// node breaker; and so is its return. The other masters' keys are decided on Redis throughout.
TEST_F(RedisClusterFleetTest, AHungMasterAndItsReturnAreSaidOnceInTheLog) {
  LoggedGateway gw({.address = cluster_->address(), .command_timeout = 20ms});
  ASSERT_EQ(gw.error(), "");
  const auto logged = [&](const std::string& prefix) { return gw.logged(prefix); };
  // Requests for 30 users, whose counters spread over the three masters, on two connections (the
  // workers take connections in turn), until `until`.
  HttpClient a(gw.port()), b(gw.port());
  int next_user = 0;
  const auto request_round = [&](Steady::time_point until) {
    for (int i = 0; i < 30 && Steady::now() < until; ++i) {
      HttpClient& c = i % 2 == 0 ? a : b;
      const std::string user = "u" + std::to_string(next_user++ % 30);
      const HttpResponse r = c.request("GET", "/api", {{"X-System-Key", "crm"}, {"X-User", user}});
      EXPECT_EQ(r.status, 200) << r.body;
    }
  };
  request_round(Steady::time_point::max());  // every master called once: connected, answering

  testing::RedisServer* master = cluster_->master_of(0);
  ASSERT_NE(master, nullptr);
  const std::string said = "redis cluster node 127.0.0.1:" + std::to_string(master->port());
  master->pause();
  struct Resume {
    testing::RedisServer* server;
    ~Resume() { server->resume(); }
  } resume{master};
  // Each worker's calls to it time out until 5 in a row open its node breaker: rounds of requests
  // until that is said, for at most 600 ms (no failover: that takes a second).
  const auto rounds_until = [&](const std::string& line, std::chrono::milliseconds limit) {
    for (const auto until = Steady::now() + limit; Steady::now() < until;) {
      request_round(until);
      if (logged(line) > 0) return true;
    }
    return false;
  };
  const bool opened = rounds_until(said + " not answering (", 600ms);
  master->resume();
  ASSERT_TRUE(opened);
  EXPECT_TRUE(rounds_until(said + " answering again: limits whose keys it serves are decided on it again", 5s));
  EXPECT_EQ(logged(said + " not answering (redis " + said.substr(said.rfind(' ') + 1)), 1);
  EXPECT_EQ(logged(said + " answering again"), 1);
  EXPECT_EQ(logged("redis cluster node"), 2) << "another master was said not to answer";
  EXPECT_EQ(logged("limit store"), 0) << "the store's breaker opened";
}

// A cluster of its own: its one seed leaves it.
class RedisClusterSeedGoneTest : public testing::ClusterTest {};

// The one address the gateway's store was opened with is a replica's, which leaves the cluster:
// each worker's store finds it at its next read of the slot map, and the gateway says it once.
TEST_F(RedisClusterSeedGoneTest, ASeedThatLeftTheClusterIsSaidOnceInTheLog) {
  testing::RedisServer* replica = nullptr;
  for (std::size_t i = 0; i < cluster_->size() && replica == nullptr; ++i) {
    if (cluster_->node(i).cli({"INFO", "replication"}).find("role:slave") != std::string::npos) {
      replica = &cluster_->node(i);
    }
  }
  ASSERT_NE(replica, nullptr);
  const std::string seed = "127.0.0.1:" + std::to_string(replica->port());
  LoggedGateway gw({.address = "redis-cluster://" + seed, .cluster_map_refresh = 100ms});
  ASSERT_EQ(gw.error(), "");
  HttpClient client(gw.port());
  EXPECT_EQ(client.request("GET", "/api", {{"X-System-Key", "crm"}, {"X-User", "u"}}).status, 200);

  const std::string id = replica->cli({"CLUSTER", "MYID"});
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    if (&cluster_->node(i) == replica) continue;
    ASSERT_EQ(cluster_->node(i).cli({"CLUSTER", "FORGET", id}), "OK");
  }
  const std::string said = "redis cluster: none of the addresses the store was opened with (" + seed + ")";
  ASSERT_TRUE(testing::eventually([&] { return gw.logged(said) > 0; }));
  // By then the other worker has read the map too, or does within a few more reads.
  const long long reads = calls("cluster|nodes");
  ASSERT_TRUE(testing::eventually([&] { return calls("cluster|nodes") >= reads + 8; }));
  EXPECT_EQ(gw.logged(said), 1);
  EXPECT_EQ(client.request("GET", "/api", {{"X-System-Key", "crm"}, {"X-User", "u"}}).status, 200);
}

// Runs build/sluice to its end: its exit code, and its stdout.
int run_sluice(const std::vector<std::string>& args, std::string* out = nullptr) {
  std::vector<std::string> argv{SLUICE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  Child child(argv, testing::temp_dir());
  const int code = child.wait_exit(30s);
  if (out != nullptr) *out = child.stdout_text();
  return code;
}

// Three gateway processes on one redis-server, an in-flight limit of 5 in front of an upstream that
// holds each request 1.5 s: a burst of 30 requests (10 per instance) gets exactly 5 through, and
// once they have answered every lease is back (no key is left) and the next burst gets 5 again.
// Under such a burst the leases are taken and given back in batches of many.lua.
TEST(RedisFleetTest, ThreeGatewaysSharingOneRedisHoldAnInFlightLimitExactly) {
  auto server = testing::RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto up = DemoUpstream::start();
  ASSERT_TRUE(up.ok());
  const std::string config =
      "store_timeout: 5s\n"
      "upstreams: [{name: app, targets: [127.0.0.1:" + std::to_string((*up)->port()) + "], timeout: 10s}]\n"
      "systems: [{key: crm, interfaces: [slow]}]\n"
      "interfaces:\n"
      "  - {id: slow, path: /slow, upstream: app, concurrency: 5}\n";
  Fleet fleet((*server)->address(), config, 3);
  ASSERT_TRUE(fleet.serving());
  for (int round = 0; round < 2; ++round) {
    constexpr int kClients = 30;
    std::atomic<int> admitted{0}, limited{0}, other{0};
    std::latch go(kClients);
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        HttpClient client(fleet.port(static_cast<std::size_t>(c) % fleet.size()));
        go.arrive_and_wait();
        const HttpResponse r = client.get("/slow?delay_ms=1500", "crm");
        if (r.status == 200) ++admitted;
        else if (r.status == 429 && reason_of(r) == "interface_concurrency_limited") ++limited;
        else ++other;
      });
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(admitted.load(), 5) << "round " << round;
    EXPECT_EQ(limited.load(), kClients - 5) << "round " << round;
    EXPECT_EQ(other.load(), 0) << "round " << round;
    EXPECT_TRUE(testing::eventually([&] { return count_keys(**server) == 0; }))
        << "round " << round << ": a lease was not given back";
  }
  EXPECT_EQ((*up)->requests(), 10) << "only admitted requests reach the upstream";
  for (std::size_t i = 0; i < fleet.size(); ++i) {
    EXPECT_EQ(metric(fleet.metrics(i), "sluice_store_errors_total"), 0) << "instance " << i;
  }
}

TEST(RedisFleetTest, EveryConfigurationSourceCountsInRedis) {
  auto server = testing::RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto up = DemoUpstream::start();
  ASSERT_TRUE(up.ok());
  // A database with store: redis://..., a primary serving it, a follower of that primary, and a
  // gateway on the same configuration as a file: one limit of 5 for the three.
  const std::string dir = testing::temp_dir();
  std::string yaml = "store: \"" + (*server)->address() + "\"\n" + fleet_config((*up)->port());
  yaml.replace(yaml.find("limit: 50"), 9, "limit: 5");
  testing::write_file(dir + "/sluice.yaml", yaml);
  ASSERT_EQ(run_sluice({"config", "import", dir + "/sluice.yaml", "--db", dir + "/sluice.db"}), 0);
  std::string token;
  ASSERT_EQ(run_sluice({"token", "create", "--role", "read", "--db", dir + "/sluice.db"}, &token), 0);
  while (!token.empty() && token.back() == '\n') token.pop_back();

  struct Instance {
    std::uint16_t port = testing::free_port();
    std::uint16_t admin = testing::free_port();
    std::unique_ptr<Child> child;
  };
  std::vector<Instance> instances(3);
  auto serve = [&](Instance& i, std::vector<std::string> source) {
    std::vector<std::string> argv{SLUICE_BINARY, "serve", "--listen", "127.0.0.1:" + std::to_string(i.port),
                                  "--admin-listen", "127.0.0.1:" + std::to_string(i.admin), "--access-log", "off"};
    argv.insert(argv.end(), source.begin(), source.end());
    i.child = std::make_unique<Child>(argv, testing::temp_dir());
    // The line that says where limits are counted comes once the gateway answers.
    return testing::eventually([&] { return i.child->stderr_text().find("serving on port ") != std::string::npos; }) &&
           HttpClient(i.port).get("/_sluice/healthz").status == 200;
  };
  ASSERT_TRUE(serve(instances[0], {"--db", dir + "/sluice.db"})) << instances[0].child->stderr_text();
  ASSERT_TRUE(serve(instances[1], {"--config-from", "http://127.0.0.1:" + std::to_string(instances[0].admin),
                                   "--token", token}))
      << instances[1].child->stderr_text();
  ASSERT_TRUE(serve(instances[2], {"--config", dir + "/sluice.yaml"})) << instances[2].child->stderr_text();
  for (const Instance& i : instances) {
    EXPECT_NE(i.child->stderr_text().find("limits in " + (*server)->address()), std::string::npos)
        << i.child->stderr_text();
  }
  int admitted = 0;
  for (int n = 0; n < 12; ++n) {
    const HttpResponse r = HttpClient(instances[static_cast<std::size_t>(n) % 3].port).get("/echo/x", "crm");
    if (r.status == 200) {
      ++admitted;
    } else {
      EXPECT_EQ(reason_of(r), "system_rate_limited") << r.status << " " << r.body;
    }
  }
  EXPECT_EQ(admitted, 5);
  EXPECT_GE(count_keys(**server), 1u) << "counted in Redis";
  // The admin API's stats say where limits are counted, and that the store is up.
  const HttpResponse stats =
      HttpClient(instances[0].admin).request("GET", "/admin/v1/stats", {{"Authorization", "Bearer " + token}});
  ASSERT_EQ(stats.status, 200) << stats.body;
  const auto store = boost::json::parse(stats.body).as_object().at("store").as_object();
  EXPECT_EQ(store.at("kind").as_string(), "redis");
  EXPECT_EQ(store.at("up").as_bool(), true);
  EXPECT_EQ(store.at("breakers").as_array().size(), 1u) << "one worker thread, one store";
  // The admin API's live limit state is the fleet's, read from Redis: all 5 used.
  const HttpResponse limits = HttpClient(instances[0].admin)
                                  .request("GET", "/admin/v1/limits?key=system:crm",
                                           {{"Authorization", "Bearer " + token}});
  ASSERT_EQ(limits.status, 200) << limits.body;
  const auto state =
      boost::json::parse(limits.body).as_object().at("items").as_array().at(0).as_object().at("state").as_object();
  EXPECT_EQ(state.at("limit").as_int64(), 5);
  EXPECT_EQ(state.at("remaining").as_int64(), 0);
}

TEST(RedisAddressTest, ABadAddressIsRefusedWithAClearMessage) {
  const std::string dir = testing::temp_dir();
  const std::string path = dir + "/sluice.yaml";
  struct Case {
    std::string store;
    std::string message;
  };
  const Case cases[] = {
      {"redis://127.0.0.1:notaport", "bad port 'notaport'"},
      {"redis://127.0.0.1:6379,127.0.0.1:6380", "several hosts need redis-cluster://"},
      {"redis-cluster://127.0.0.1:7000/2", "a cluster has no database number"},
  };
  for (const Case& c : cases) {
    testing::write_file(path, "store: \"" + c.store + "\"\n" + fleet_config(1));
    Child file({SLUICE_BINARY, "serve", "--config", path, "--check"}, testing::temp_dir());
    EXPECT_EQ(file.wait_exit(10s), 1) << c.store;
    // With its place in the file, as every problem of the configuration is reported.
    EXPECT_NE(file.stderr_text().find(path + ":1:8: store: redis address: " + c.message), std::string::npos)
        << file.stderr_text();
    EXPECT_EQ(file.stdout_text(), "") << "not reported ok";
  }
  testing::write_file(path, fleet_config(1));
  Child flag({SLUICE_BINARY, "serve", "--config", path, "--store", "redis://:secret@", "--check"}, testing::temp_dir());
  EXPECT_EQ(flag.wait_exit(10s), 1);
  EXPECT_NE(flag.stderr_text().find("--store: redis address: no host"), std::string::npos) << flag.stderr_text();
}

TEST(RedisAddressTest, AnUnreachableRedisIsSaidAtStartAndLimitsFollowTheirPolicy) {
  // Not a reason to refuse to start: Redis may come up after the gateway.
  auto up = DemoUpstream::start();
  ASSERT_TRUE(up.ok());
  Fleet fleet("redis://127.0.0.1:" + std::to_string(testing::free_port()), fleet_config((*up)->port()), 1);
  ASSERT_TRUE(fleet.serving());
  // Down before any request: the failed attempts to connect count as failed calls.
  EXPECT_TRUE(testing::eventually([&] { return metric(fleet.metrics(0), "sluice_store_up") == 0; }));
  const HttpResponse r = HttpClient(fleet.port(0)).get("/echo/x", "crm");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(reason_of(r), "store_unavailable");
  const std::string m = fleet.metrics(0);
  EXPECT_EQ(metric(m, "sluice_store_fallbacks_total{policy=\"deny\"}"), 1);
  EXPECT_NE(fleet.stderr_text(0).find("limit store not reachable yet (redis 127.0.0.1:"), std::string::npos)
      << fleet.stderr_text(0);
}

// With Redis down, a `deny` limit's refusal leaves a `local` limit of the same request only looked
// at, not taken: the RateLimit fields say what it has left, not that plus the refused request. Once
// its share is spent, the local limit refuses too, as a rate limit (429, the check order's), not
// only the store's absence (503).
TEST(RedisAddressTest, WithRedisDownALocalLimitBesideADenyRefusalReportsWhatItHasLeft) {
  auto up = DemoUpstream::start();
  ASSERT_TRUE(up.ok());
  const std::string config =
      "upstreams: [{name: app, targets: [127.0.0.1:" + std::to_string((*up)->port()) + "]}]\n"
      "systems:\n"
      "  - key: crm\n"
      "    interfaces: [\"*\"]\n"
      "    limits: [{name: shared, algorithm: fixed_window, limit: 10, period: 1h, on_store_failure: local}]\n"
      "interfaces:\n"
      "  - {id: free, path: /free, upstream: app}\n"
      "  - {id: guarded, path: /guarded, upstream: app,\n"
      "     limits: [{algorithm: fixed_window, limit: 100, period: 1h, on_store_failure: deny}]}\n";
  Fleet fleet("redis://127.0.0.1:" + std::to_string(testing::free_port()), config, 1);
  ASSERT_TRUE(fleet.serving());
  HttpClient client(fleet.port(0));
  // The fields' r= (the window's t= depends on the wall clock).
  const auto left = [](const HttpResponse& r) {
    const std::string f = r.header("ratelimit");
    return f.starts_with("\"shared\";r=") ? f.substr(0, f.find(';', 12)) : "none: " + f;
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(client.get("/free", "crm").status, 200);
  EXPECT_EQ(left(client.get("/free", "crm")), "\"shared\";r=6");
  const HttpResponse refused = client.get("/guarded", "crm");
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(reason_of(refused), "store_unavailable");
  EXPECT_EQ(left(refused), "\"shared\";r=6");
  EXPECT_EQ(left(client.get("/free", "crm")), "\"shared\";r=5") << "the refusal took nothing";
  for (int i = 0; i < 5; ++i) ASSERT_EQ(client.get("/free", "crm").status, 200);
  ASSERT_EQ(client.get("/free", "crm").status, 429);
  const HttpResponse spent = client.get("/guarded", "crm");
  EXPECT_EQ(spent.status, 429) << spent.body;
  EXPECT_EQ(reason_of(spent), "system_rate_limited");
  EXPECT_FALSE(spent.header("retry-after").empty());
}

// A Redis and an upstream of the test's own.
class RedisAndUpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::RedisServer::start();
    ASSERT_TRUE(server.ok()) << server.error().message;
    redis_ = std::move(*server);
    auto up = DemoUpstream::start();
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(*up);
  }

  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<DemoUpstream> upstream_;
};

// One in-process gateway on a Redis of the test's own; the limits' clock is Redis's.
class RedisGatewayTest : public RedisAndUpstreamTest {
 protected:
  void SetUp() override {
    RedisAndUpstreamTest::SetUp();
    if (HasFatalFailure()) return;
    start(config_text());
  }

  std::string config_text(const std::string& limited = "limit: 2, period: 1m") const {
    return "fleet_size: 2\n"
           "store_timeout: 200ms\n"
           "upstreams:\n"
           "  - {name: app, targets: [127.0.0.1:" + std::to_string(upstream_->port()) + "], timeout: 10s}\n"
           "systems:\n"
           "  - {key: crm, interfaces: [\"*\"]}\n"
           "interfaces:\n"
           "  - {id: open, path: /open, upstream: app, limits: [{algorithm: fixed_window, limit: 1000000, "
           "period: 1h, on_store_failure: allow}]}\n"
           "  - {id: closed, path: /closed, upstream: app, limits: [{algorithm: gcra, limit: 1000000, "
           "period: 1h, burst: 1000000, on_store_failure: deny}]}\n"
           "  - {id: shared, path: /shared, upstream: app, limits: [{algorithm: sliding_window, limit: 10, "
           "period: 1h, on_store_failure: local}]}\n"
           "  - {id: limited, path: /limited, upstream: app, limits: [{algorithm: fixed_window, " + limited + "}]}\n"
           "  - {id: other, path: /other, upstream: app, limits: [{algorithm: token_bucket, capacity: 5, rate: 1, "
           "per: 1h}]}\n"
           "  - {id: slow, path: /slow, upstream: app, concurrency: 1}\n";
  }

  void start(const std::string& text) {
    auto factory = redis_limiters({.address = redis_->address(), .command_timeout = 200ms, .fleet_size = 2});
    ASSERT_TRUE(factory.ok()) << factory.error().message;
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "127.0.0.1:0";
    o.threads = 2;
    o.access_log = "off";
    o.log = [this](std::string_view line) {
      std::lock_guard lock(log_mu_);
      log_.emplace_back(line);
    };
    o.make_limiter = std::move(*factory);
    auto g = Gateway::start(o, testing::load_config(text));
    ASSERT_TRUE(g.ok()) << g.error().message;
    gw_ = std::move(*g);
  }

  HttpResponse get(const std::string& target) { return HttpClient(gw_->port()).get(target, "crm"); }
  std::string metrics() { return HttpClient(gw_->admin_port()).get("/metrics").body; }

  // How many of n requests to target, one after another, are admitted; the others must be refused
  // with `refusal`.
  int admitted_of(int n, const std::string& target, const std::string& refusal = "interface_rate_limited") {
    HttpClient c(gw_->port());
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      const HttpResponse r = c.get(target, "crm");
      if (r.status == 200) {
        ++ok;
      } else {
        EXPECT_EQ(reason_of(r), refusal) << target << ": " << r.status << " " << r.body;
      }
    }
    return ok;
  }

  // How many lines the gateway logged that start with `prefix`.
  int logged(std::string_view prefix) {
    std::lock_guard lock(log_mu_);
    return static_cast<int>(std::count_if(log_.begin(), log_.end(),
                                          [&](const std::string& l) { return l.starts_with(prefix); }));
  }

  std::mutex log_mu_;
  std::vector<std::string> log_;  // guarded by log_mu_
  std::unique_ptr<Gateway> gw_;
};

TEST_F(RedisGatewayTest, RateLimitFieldsComeFromRedisDecisions) {
  HttpClient c(gw_->port());
  HttpResponse r = c.get("/other", "crm");
  EXPECT_EQ(r.status, 200);
  // 5 tokens, one back per hour: 5 hours from empty to full, an hour until the one taken is back.
  EXPECT_EQ(r.header("ratelimit-policy"), "\"other\";q=5;w=18000");
  EXPECT_EQ(r.header("ratelimit"), "\"other\";r=4;t=3600");
  for (int i = 0; i < 4; ++i) ASSERT_EQ(c.get("/other", "crm").status, 200);
  r = c.get("/other", "crm");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(reason_of(r), "interface_rate_limited");
  EXPECT_EQ(r.header("ratelimit"), "\"other\";r=0;t=3600");
  EXPECT_EQ(r.header("retry-after"), "3600");
  EXPECT_EQ(count_keys(*redis_), 1u) << "the bucket lives in Redis";
}

// A limit's key holding what sluice did not write (WRONGTYPE) fails that limit to its
// on_store_failure while Redis is up: said in the log, with the call's keys, not only counted.
TEST_F(RedisGatewayTest, AKeyHoldingSomethingElseIsSaidInTheLogWithTheKey) {
  HttpClient c(gw_->port());
  ASSERT_EQ(c.get("/other", "crm").status, 200);
  const std::string key = redis_->cli({"KEYS", "*"});
  ASSERT_FALSE(key.empty());
  ASSERT_EQ(key.find('\n'), std::string::npos) << key;
  ASSERT_EQ(redis_->cli({"DEL", key}), "1");
  ASSERT_EQ(redis_->cli({"HSET", key, "a", "b"}), "1");
  EXPECT_EQ(c.get("/other", "crm").status, 200);  // on_store_failure: allow
  EXPECT_TRUE(testing::eventually([&] { return logged("limit store refused a call (") == 1; }));
  std::lock_guard lock(log_mu_);
  const auto line = std::find_if(log_.begin(), log_.end(),
                                 [](const std::string& l) { return l.starts_with("limit store refused a call ("); });
  ASSERT_NE(line, log_.end());
  EXPECT_NE(line->find("WRONGTYPE"), std::string::npos) << *line;
  EXPECT_NE(line->find("(keys " + key + ")"), std::string::npos) << *line;
}

TEST_F(RedisGatewayTest, TheInFlightLeaseIsGivenBackWhenTheUpstreamHasAnswered) {
  std::atomic<int> slow_status{0};
  std::thread slow([&] { slow_status = get("/slow?delay_ms=1000").status; });
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  const HttpResponse refused = get("/slow");
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(reason_of(refused), "interface_concurrency_limited");
  slow.join();
  EXPECT_EQ(slow_status.load(), 200);
  // The lease goes back just after the response is written, over the slow request's worker's own
  // Redis connection: a state with no lease left is deleted.
  ASSERT_TRUE(testing::eventually([&] { return count_keys(*redis_) == 0; }));
  // Each lease goes back once its response is written: 20 requests in a row each find it free.
  EXPECT_EQ(admitted_of(20, "/slow"), 20);
  EXPECT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 0; }));
  EXPECT_EQ(metric(metrics(), "sluice_store_errors_total"), 0);
}

TEST_F(RedisGatewayTest, CountersInRedisCarryOverAReload) {
  EXPECT_EQ(admitted_of(2, "/limited"), 2);
  // Another limit changes; this one does not, and its count stays.
  std::string text = config_text();
  text.replace(text.find("capacity: 5"), 11, "capacity: 6");
  ASSERT_TRUE(gw_->reload(testing::load_config(text)).ok());
  EXPECT_EQ(admitted_of(1, "/limited"), 0);
  // A changed limit starts afresh.
  ASSERT_TRUE(gw_->reload(testing::load_config(config_text("limit: 3, period: 1m"))).ok());
  EXPECT_EQ(admitted_of(4, "/limited"), 3);
}

TEST_F(RedisGatewayTest, RedisKilledUnderLoadEachLimitFollowsItsPolicyAndDecisionsComeBack) {
  // Before: /shared is counted in Redis, limit 10.
  EXPECT_EQ(admitted_of(3, "/shared"), 3);
  EXPECT_EQ(metric(metrics(), "sluice_store_up"), 1);

  // Load on the allow and deny limits from 4 clients while Redis is killed.
  struct Outcome {
    Steady::time_point sent;
    Nanos took;
    int status;
    std::string reason;
    bool closed;
  };
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<Outcome> outcomes;  // guarded by mu
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      HttpClient c(gw_->port());
      const bool closed = t % 2 == 1;
      while (!stop) {
        const auto sent = Steady::now();
        const HttpResponse r = c.get(closed ? "/closed" : "/open", "crm");
        const Outcome o{sent, Steady::now() - sent, r.status, reason_of(r), closed};
        std::lock_guard lock(mu);
        outcomes.push_back(o);
      }
    });
  }
  ASSERT_TRUE(testing::eventually([&] {
    std::lock_guard lock(mu);
    return outcomes.size() >= 40;
  }));
  const auto killing = Steady::now();
  redis_->kill();
  const auto killed = Steady::now();
  ASSERT_TRUE(testing::eventually([&] {
    std::lock_guard lock(mu);
    return std::count_if(outcomes.begin(), outcomes.end(), [&](const Outcome& o) { return o.sent > killed; }) >= 200;
  }));
  stop = true;
  for (auto& t : clients) t.join();

  // Every request was answered, in time, per its limit's policy: allow admits, deny refuses with 503.
  int after = 0;
  int open_after = 0;
  Nanos slowest{0};
  for (const Outcome& o : outcomes) {
    if (o.sent + o.took < killing) {
      EXPECT_EQ(o.status, 200);
    }
    if (o.sent <= killed) continue;  // in flight while Redis was dying: either answer is right
    ++after;
    if (!o.closed) ++open_after;
    slowest = std::max(slowest, o.took);
    if (o.closed) {
      EXPECT_EQ(o.status, 503);
      EXPECT_EQ(o.reason, "store_unavailable");
    } else {
      EXPECT_EQ(o.status, 200);
    }
  }
  EXPECT_GE(after, 200);
  // The store timeout (200 ms) and a margin for HTTP on a shared machine.
  EXPECT_LT(slowest, 200ms + 200ms);

  // local: this gateway's share of the limit (10 / fleet_size 2), counted in this process.
  EXPECT_EQ(admitted_of(8, "/shared"), 5);
  std::string m = metrics();
  EXPECT_EQ(metric(m, "sluice_store_up"), 0);
  EXPECT_GE(metric(m, "sluice_store_fallbacks_total{policy=\"allow\"}"), open_after);
  EXPECT_GE(metric(m, "sluice_store_fallbacks_total{policy=\"deny\"}"), after - open_after);
  EXPECT_EQ(metric(m, "sluice_store_fallbacks_total{policy=\"local\"}"), 8);

  // Redis back (empty: it keeps nothing on disk): decisions return to it within a second, on every
  // worker's store.
  ASSERT_TRUE(redis_->restart().ok());
  const auto restarted = Steady::now();
  // With no request at all: each worker's store probes Redis itself.
  ASSERT_TRUE(testing::eventually([&] { return metric(metrics(), "sluice_store_up") == 1; }));
  ASSERT_TRUE(testing::eventually([&] {
    HttpClient a(gw_->port()), b(gw_->port());  // two connections: one per worker
    return a.get("/closed", "crm").status == 200 && b.get("/closed", "crm").status == 200;
  }));
  EXPECT_LT(Steady::now() - restarted, 1s + 500ms);
  // Said once for the gateway, not once per worker.
  EXPECT_EQ(logged("limit store not answering (redis 127.0.0.1:"), 1);
  EXPECT_EQ(logged("limit store answering again"), 1);
  // The local count (5 used) is left behind: Redis's fresh window admits the whole limit.
  EXPECT_EQ(admitted_of(12, "/shared"), 10);
  m = metrics();
  EXPECT_EQ(metric(m, "sluice_store_fallbacks_total{policy=\"local\"}"), 8);
  EXPECT_GE(count_keys(*redis_), 1u);
}

// One in-process gateway of a fleet of 3 on a Redis of the test's own, which the test kills: its
// limits then follow their on_store_failure, `local` ones counted in this process on a clock the
// test holds still.
class RedisDownTest : public RedisAndUpstreamTest {
 protected:
  void SetUp() override {
    RedisAndUpstreamTest::SetUp();
    if (HasFatalFailure()) return;
    auto factory = redis_limiters({.address = redis_->address(),
                                   .command_timeout = 200ms,
                                   .fleet_size = 3,
                                   .local_store = std::make_shared<LocalStore>(LocalStoreOptions{.clock = &clock_})});
    ASSERT_TRUE(factory.ok()) << factory.error().message;
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "127.0.0.1:0";
    o.access_log = "off";
    o.log = [](std::string_view) {};
    o.make_limiter = std::move(*factory);
    auto g = Gateway::start(o, testing::load_config(config_text()));
    ASSERT_TRUE(g.ok()) << g.error().message;
    gw_ = std::move(*g);
  }

  std::string config_text() const {
    return "fleet_size: 3\n"
           "store_timeout: 200ms\n"
           "upstreams: [{name: app, targets: [127.0.0.1:" + std::to_string(upstream_->port()) + "]}]\n"
           "systems: [{key: crm, interfaces: [\"*\"]}]\n"
           "interfaces:\n"
           "  - {id: bucket, path: /bucket, upstream: app, limits: [{algorithm: token_bucket, capacity: 10, rate: 1, "
           "per: 3s, on_store_failure: local}]}\n"
           "  - {id: gcra, path: /gcra, upstream: app, limits: [{algorithm: gcra, limit: 5, period: 1m, burst: 5, "
           "on_store_failure: local}]}\n"
           "  - {id: shadowed, path: /shadowed, upstream: app, limits: [{algorithm: fixed_window, limit: 1000, "
           "period: 1h, on_store_failure: allow}, {name: preview, algorithm: fixed_window, limit: 1000, period: 1h, "
           "on_store_failure: allow, shadow: true}]}\n"
           "  - {id: previewed, path: /previewed, upstream: app, limits: [{algorithm: fixed_window, limit: 1000, "
           "period: 1h, on_store_failure: allow},\n"
           "     {name: would-allow, algorithm: fixed_window, limit: 1, period: 1h, on_store_failure: allow, "
           "shadow: true},\n"
           "     {name: would-deny, algorithm: fixed_window, limit: 1000, period: 1h, on_store_failure: deny, "
           "shadow: true},\n"
           "     {name: would-share, algorithm: fixed_window, limit: 6, period: 1h, on_store_failure: local, "
           "shadow: true}]}\n";
  }

  // Kills Redis and waits until the gateway's store says it is down.
  void kill_redis() {
    redis_->kill();
    ASSERT_TRUE(testing::eventually([&] { return metric(metrics(), "sluice_store_up") == 0; }));
  }

  HttpResponse get(const std::string& target) { return HttpClient(gw_->port()).get(target, "crm"); }
  std::string metrics() { return HttpClient(gw_->admin_port()).get("/metrics").body; }

  ManualClock clock_{std::chrono::hours(1)};
  std::unique_ptr<Gateway> gw_;
};

// With Redis down, a token bucket's or GCRA's local share is described as it is counted: its own
// quota over its own window (the rate is divided by spreading it over a period 3 times longer).
TEST_F(RedisDownTest, ALocalShareIsDescribedWithTheWindowItIsCountedOver) {
  // Redis decides: 10 tokens, one back every 3 s, 30 s from empty to full.
  HttpResponse r = get("/bucket");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("ratelimit-policy"), "\"bucket\";q=10;w=30");
  kill_redis();
  // This gateway's share: 3 tokens, one back every 9 s, 27 s from empty to full.
  r = get("/bucket");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("ratelimit-policy"), "\"bucket\";q=3;w=27");
  EXPECT_EQ(r.header("ratelimit"), "\"bucket\";r=2;t=9");
  // 5 a minute, 5 at once (60 s from empty to full); the share: 5 every 3 minutes, 1 at once, so
  // 36 s from empty to full.
  r = get("/gcra");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("ratelimit-policy"), "\"gcra\";q=1;w=36");
  EXPECT_EQ(r.header("ratelimit"), "\"gcra\";r=0;t=36");
  r = get("/gcra");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.header("ratelimit-policy"), "\"gcra\";q=1;w=36");
  EXPECT_EQ(r.header("retry-after"), "36");
}

// A request whose limits and shadow limits Redis could not decide is one request the store failed,
// not one for each call that failed for it.
TEST_F(RedisDownTest, AStoreFailureIsCountedOncePerRequestShadowLimitsIncluded) {
  ASSERT_EQ(get("/shadowed").status, 200);
  EXPECT_EQ(metric(metrics(), "sluice_store_errors_total"), 0);
  kill_redis();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(get("/shadowed").status, 200) << i;
  EXPECT_EQ(metric(metrics(), "sluice_store_errors_total"), 3);
}

// With Redis down, a shadow limit follows its own on_store_failure as an enforced one would, and
// reports what that would have done, refusing nothing: deny would have refused every request,
// local refuses past this gateway's share (6 / 3), allow admits.
TEST_F(RedisDownTest, AShadowLimitFollowsItsOwnOnStoreFailureAndOnlyReports) {
  kill_redis();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(get("/previewed").status, 200) << i;
  const std::string m = metrics();
  const std::string shadow = "sluice_shadow_rejections_total{scope=\"interface\",owner=\"previewed\",limit=";
  EXPECT_EQ(metric(m, shadow + "\"would-deny\"}"), 3) << m;
  EXPECT_EQ(metric(m, shadow + "\"would-share\"}"), 1) << m;
  EXPECT_EQ(m.find(shadow + "\"would-allow\"}"), std::string::npos) << m;
  // Every decision made by a policy, the shadow limits' too: 3 requests, each with an enforced
  // allow limit and one shadow limit of each policy.
  EXPECT_EQ(metric(m, "sluice_store_fallbacks_total{policy=\"allow\"}"), 6);
  EXPECT_EQ(metric(m, "sluice_store_fallbacks_total{policy=\"deny\"}"), 3);
  EXPECT_EQ(metric(m, "sluice_store_fallbacks_total{policy=\"local\"}"), 3);
  EXPECT_EQ(metric(m, "sluice_store_errors_total"), 3);
}

}  // namespace
}  // namespace sluice::gateway
