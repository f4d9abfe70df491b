// A Redis Cluster (3 masters, 3 replicas) for every test of a suite, emptied before each test.
// Not thread-safe; for tests.
#pragma once

#include <gtest/gtest.h>

#include <sstream>

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

  static std::unique_ptr<RedisCluster> cluster_;
  static std::string start_error_;
};

inline std::unique_ptr<RedisCluster> ClusterTest::cluster_;
inline std::string ClusterTest::start_error_;

}  // namespace sluice::testing
