// A Redis Cluster (3 masters, 3 replicas) for every test of a suite, emptied before each test.
// Not thread-safe; for tests.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "redis_server.h"

namespace sluice::testing {

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = RedisCluster::start();
    if (c.ok()) {
      cluster_ = std::move(*c);
    } else {
      start_error_ = c.error().message;
    }
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr) << start_error_;
    for (std::size_t i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->node(i).running()) continue;
      cluster_->node(i).cli({"FLUSHALL"});  // replicas refuse; their masters' flush reaches them
      cluster_->node(i).cli({"CONFIG", "RESETSTAT"});
    }
  }

  // How many times the cluster's nodes ran `command` (INFO commandstats, summed).
  static long long calls(const std::string& command) {
    long long n = 0;
    for (std::size_t i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->node(i).running()) continue;
      std::istringstream lines(cluster_->node(i).cli({"INFO", "commandstats"}));
      const std::string prefix = "cmdstat_" + command + ":calls=";
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind(prefix, 0) == 0) n += std::stoll(line.substr(prefix.size()));
      }
    }
    return n;
  }

  // How many errors starting with `prefix` (NOPERM, MOVED) the cluster's nodes answered (INFO
  // errorstats, summed).
  static long long errors(const std::string& prefix) {
    long long n = 0;
    for (std::size_t i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->node(i).running()) continue;
      const std::string stats = cluster_->node(i).cli({"INFO", "errorstats"});
      const std::string field = "errorstat_" + prefix + ":count=";
      const auto at = stats.find(field);
      if (at != std::string::npos) n += std::stoll(stats.substr(at + field.size()));
    }
    return n;
  }

  static std::unique_ptr<RedisCluster> cluster_;
  static std::string start_error_;
};

inline std::unique_ptr<RedisCluster> ClusterTest::cluster_;
inline std::string ClusterTest::start_error_;

// An ACL user on every running node of a cluster (nodes do not share their ACL), with the password
// "pw" and the given command rules on every key and channel; deleted from every node with this.
class ClusterUser {
 public:
  ClusterUser(RedisCluster& cluster, std::string name, std::initializer_list<std::string> commands = {"+@all"})
      : cluster_(cluster), name_(std::move(name)), commands_(commands) {
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      if (cluster_.node(i).running()) {
        EXPECT_EQ(add_to(cluster_.node(i)), "OK");
      }
    }
  }
  ~ClusterUser() {
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      if (cluster_.node(i).running()) cluster_.node(i).cli({"ACL", "DELUSER", name_});
    }
  }
  ClusterUser(const ClusterUser&) = delete;
  ClusterUser& operator=(const ClusterUser&) = delete;

  // Adds the user to one node (again, after an ACL DELUSER there); redis-cli's answer.
  std::string add_to(RedisServer& node) const {
    std::vector<std::string> args = {"ACL", "SETUSER", name_, "on", ">pw", "~*", "&*"};
    args.insert(args.end(), commands_.begin(), commands_.end());
    return node.cli(args);
  }
  // The cluster's address with this user's credentials.
  std::string address() const {
    constexpr std::string_view kScheme = "redis-cluster://";
    return std::string(kScheme) + name_ + ":pw@" + cluster_.address().substr(kScheme.size());
  }

 private:
  RedisCluster& cluster_;
  std::string name_;
  std::vector<std::string> commands_;
};

// The master that serves a slot, another to move it to, and their ids; none when the cluster has
// no two masters up.
struct SlotMove {
  RedisServer* from = nullptr;
  RedisServer* to = nullptr;
  std::string from_id;
  std::string to_id;
};

inline std::optional<SlotMove> slot_move(RedisCluster& cluster, int slot) {
  SlotMove m;
  m.from = cluster.master_of(slot);
  m.to = cluster.master_of((slot + 8192) % 16384);
  if (m.to == m.from) m.to = cluster.master_of((slot + 12000) % 16384);
  if (m.from == nullptr || m.to == nullptr || m.from == m.to) return std::nullopt;
  m.from_id = m.from->cli({"CLUSTER", "MYID"});
  m.to_id = m.to->cli({"CLUSTER", "MYID"});
  return m;
}

// How many times `node` answered MOVED (INFO errorstats).
inline long long moved_answers(RedisServer& node) {
  const std::string stats = node.cli({"INFO", "errorstats"});
  const auto at = stats.find("errorstat_MOVED:count=");
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + 22));
}

}  // namespace sluice::testing
