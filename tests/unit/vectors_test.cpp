// The shared test vectors (tests/vectors/*.json, from an exact reference model) against the core's
// pure transitions and against LocalStore. The Redis store runs the same files.
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "sluice/algorithms.h"
#include "sluice/local_store.h"
#include "vectors.h"

namespace sluice {
namespace {

using testing::load_vectors;
using testing::VectorCase;

// One state of whichever kind the limit needs.
using AnyState = std::variant<GcraState, IntervalBucketState, FixedWindowState, SlidingWindowState,
                              SlidingLogState, ConcurrencyState>;

AnyState state_for(const Limit& limit) {
  switch (limit.algorithm()) {
    case Algorithm::kTokenBucket:
      if (limit.params().refill == Refill::kInterval) return IntervalBucketState{};
      return GcraState{};
    case Algorithm::kGcra: return GcraState{};
    case Algorithm::kFixedWindow: return FixedWindowState{};
    case Algorithm::kSlidingWindow: return SlidingWindowState{};
    case Algorithm::kSlidingLog: return SlidingLogState{};
    case Algorithm::kConcurrency: return ConcurrencyState{};
  }
  return GcraState{};
}

void expect_step(const testing::VectorStep& step, const Decision& d, std::int64_t quota) {
  EXPECT_EQ(d.allowed, step.allowed);
  EXPECT_EQ(d.cost_exceeds_limit, step.cost_exceeds_limit);
  EXPECT_EQ(d.limit, quota);
  EXPECT_EQ(d.remaining, step.remaining);
  EXPECT_EQ(d.retry_after, Micros{step.retry_after_us});
  EXPECT_EQ(d.reset_after, Micros{step.reset_after_us});
}

class Vectors : public ::testing::TestWithParam<std::string> {};

TEST_P(Vectors, PureTransitionsMatchTheReferenceModel) {
  const std::vector<VectorCase> cases = load_vectors(GetParam());
  ASSERT_GE(cases.size(), 5u);
  for (const VectorCase& c : cases) {
    SCOPED_TRACE(c.name);
    AnyState state = state_for(c.limit);
    for (std::size_t i = 0; i < c.steps.size(); ++i) {
      const testing::VectorStep& step = c.steps[i];
      SCOPED_TRACE("step " + std::to_string(i));
      const Nanos now = Micros{step.t_us};
      if (step.release_of >= 0) {
        EXPECT_EQ(release(std::get<ConcurrencyState>(state), static_cast<std::uint64_t>(step.release_of) + 1),
                  step.released);
        continue;
      }
      const Decision d = std::visit(
          [&](auto& s) {
            if constexpr (std::is_same_v<std::decay_t<decltype(s)>, ConcurrencyState>) {
              return decide(s, c.limit, now, step.cost, i + 1);
            } else {
              return decide(s, c.limit, now, step.cost);
            }
          },
          state);
      expect_step(step, d, c.limit.quota());
    }
  }
}

TEST_P(Vectors, LocalStoreMatchesTheReferenceModel) {
  ManualClock clock;
  LocalStore store(LocalStoreOptions{.clock = &clock});
  int n = 0;
  for (const VectorCase& c : load_vectors(GetParam())) {
    SCOPED_TRACE(c.name);
    const std::string key = "case" + std::to_string(n++);
    std::vector<std::uint64_t> leases(c.steps.size(), 0);
    for (std::size_t i = 0; i < c.steps.size(); ++i) {
      const testing::VectorStep& step = c.steps[i];
      SCOPED_TRACE("step " + std::to_string(i));
      clock.set(Micros{step.t_us});
      if (step.release_of >= 0) {
        // The store does not say whether the lease was still held; the following steps show it.
        EXPECT_TRUE(store.release(key, c.limit, leases[static_cast<std::size_t>(step.release_of)]).ok());
        continue;
      }
      const Result<Decision> r = step.cost == 0 ? store.peek(key, c.limit) : store.acquire(key, c.limit, step.cost);
      ASSERT_TRUE(r.ok()) << r.error().message;
      leases[i] = r->lease;
      expect_step(step, *r, c.limit.quota());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, Vectors,
                         ::testing::Values("token_bucket", "gcra", "fixed_window", "sliding_window",
                                           "sliding_log", "concurrency"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace sluice
