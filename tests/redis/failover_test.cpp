// RedisStore while a Redis Cluster master dies: calls fail at once (never hang) until its replica
// is promoted, then decisions resume, within seconds.
#include <gtest/gtest.h>

#include "cluster_fixture.h"
#include "redis/resp.h"
#include "store_fixture.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_F(ClusterTest, DecisionsResumeAfterAMasterDiesAndItsReplicaTakesOver) {
  auto store = open_store(cluster_->address(), {}, Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 1'000'000, .period = 1h}));
  const std::string key = "failover";
  ASSERT_TRUE(store->acquire(key, limit).ok());
  RedisServer* master = cluster_->master_of(redis::detail::key_slot(key));
  ASSERT_NE(master, nullptr);

  master->kill();
  const auto killed = Clock::now();
  Nanos slowest{0};
  const bool resumed = eventually(
      [&] {
        const auto start = Clock::now();
        const Result<Decision> d = store->acquire(key, limit);
        slowest = std::max<Nanos>(slowest, Clock::now() - start);
        return d.ok();
      },
      20s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
  ASSERT_TRUE(resumed) << "no decision 20s after the master died";
  std::printf("decisions resumed %lld ms after the master died\n", static_cast<long long>(took.count()));
  EXPECT_LT(took, 10s);
  // Until then every call was answered at once or within the command timeout.
  EXPECT_LE(slowest, store->options().command_timeout + kLateness);
  EXPECT_TRUE(store->acquire(key, limit).ok());
}

}  // namespace
}  // namespace sluice::testing
