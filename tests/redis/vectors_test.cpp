// The shared test vectors (tests/vectors/*.json, from an exact reference model) against RedisStore
// on a real redis-server, with the scripts' time pinned to each step's.
#include <gtest/gtest.h>

#include <future>

#include "store_fixture.h"
#include "vectors.h"

namespace sluice::testing {
namespace {

class RedisVectors : public RedisTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(RedisVectors, RedisStoreMatchesTheReferenceModel) {
  ManualClock clock;
  auto store = open_store(server_->address(), {.pinned_clock = &clock});
  ASSERT_NE(store, nullptr);
  const std::vector<VectorCase> cases = load_vectors(GetParam());
  ASSERT_GE(cases.size(), 5u);
  int n = 0;
  for (const VectorCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string key = "case" + std::to_string(n++);
    std::vector<std::uint64_t> leases(c.steps.size(), 0);
    for (std::size_t i = 0; i < c.steps.size(); ++i) {
      const VectorStep& step = c.steps[i];
      SCOPED_TRACE("step " + std::to_string(i));
      clock.set(Micros{step.t_us});
      if (step.release_of >= 0) {
        std::promise<Result<bool>> released;
        store->async_release(key, c.limit, leases[static_cast<std::size_t>(step.release_of)],
                             [&](Result<bool> r) { released.set_value(std::move(r)); });
        const Result<bool> r = released.get_future().get();
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(*r, step.released);
        continue;
      }
      const Result<Decision> r =
          step.cost == 0 ? store->peek(key, c.limit) : store->acquire(key, c.limit, step.cost);
      ASSERT_TRUE(r.ok()) << r.error().message;
      leases[i] = r->lease;
      EXPECT_EQ(r->allowed, step.allowed);
      EXPECT_EQ(r->cost_exceeds_limit, step.cost_exceeds_limit);
      EXPECT_EQ(r->limit, c.limit.quota());
      EXPECT_EQ(r->remaining, step.remaining);
      EXPECT_EQ(r->retry_after, Micros{step.retry_after_us});
      EXPECT_EQ(r->reset_after, Micros{step.reset_after_us});
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, RedisVectors,
                         ::testing::Values("token_bucket", "gcra", "fixed_window", "sliding_window",
                                           "sliding_log", "concurrency"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace sluice::testing
