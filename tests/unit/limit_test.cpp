// Limit validation: every range named in limit.h is enforced with a message that names the field.
#include "sluice/limit.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice {
namespace {

using namespace std::chrono_literals;

std::string error_of(const Result<Limit>& r) { return r.ok() ? "" : r.error().message; }

TEST(Limit, AcceptsTheEdgesOfEveryRange) {
  EXPECT_TRUE(Limit::fixed_window({.limit = 1, .period = 1ms}).ok());
  EXPECT_TRUE(Limit::fixed_window({.limit = kMaxLimit, .period = kMaxPeriod}).ok());
  EXPECT_TRUE(Limit::sliding_log({.limit = kMaxLimit, .period = 1ms}).ok());
  EXPECT_TRUE(Limit::concurrency({.limit = kMaxLimit, .lease_timeout = kMaxPeriod}).ok());
  EXPECT_TRUE(Limit::gcra({.limit = 1, .period = kMaxPeriod, .burst = 100}).ok());
}

TEST(Limit, RefusesOutOfRangeCountsNamingTheField) {
  EXPECT_EQ(error_of(Limit::token_bucket({.capacity = 0, .refill_tokens = 1, .refill_period = 1s})),
            "capacity must be between 1 and 2^40 (1099511627776), got 0");
  EXPECT_EQ(error_of(Limit::gcra({.limit = 5, .period = 1s, .burst = kMaxLimit + 1})),
            "burst must be between 1 and 2^40 (1099511627776), got 1099511627777");
  EXPECT_EQ(error_of(Limit::fixed_window({.limit = -3, .period = 1s})),
            "limit must be between 1 and 2^40 (1099511627776), got -3");
}

TEST(Limit, RefusesARefillThatIsNeitherKind) {
  EXPECT_EQ(error_of(Limit::token_bucket({.capacity = 5, .refill_tokens = 1, .refill_period = 1s,
                                          .refill = static_cast<Refill>(7)})),
            "refill must be Refill::kContinuous or Refill::kInterval, got 7");
}

TEST(Limit, RefusesPeriodsOutsideOneMillisecondToOneYear) {
  EXPECT_EQ(error_of(Limit::sliding_window({.limit = 5, .period = 999us})),
            "period must be between 1ms and 365d, got 999us");
  EXPECT_EQ(error_of(Limit::sliding_window({.limit = 5, .period = kMaxPeriod + 1ms})),
            "period must be between 1ms and 365d, got 31536000001ms");
  EXPECT_EQ(error_of(Limit::fixed_window({.limit = 5, .period = 1000500ns})),
            "period must be a whole number of microseconds, got 1000500ns");
  EXPECT_FALSE(Limit::concurrency({.limit = 1, .lease_timeout = 0s}).ok());
}

TEST(Limit, RefusesBucketsThatWouldTakeCenturiesToRefill) {
  const auto r = Limit::gcra({.limit = 1, .period = kMaxPeriod, .burst = 101});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("100 years"), std::string::npos);
  EXPECT_FALSE(Limit::token_bucket({.capacity = kMaxLimit,
                                    .refill_tokens = 1,
                                    .refill_period = 1s,
                                    .refill = Refill::kInterval})
                   .ok());
}

TEST(Limit, DescribesItselfCanonically) {
  EXPECT_EQ(Limit::gcra({.limit = 5, .period = 60s, .burst = 5})->to_string(),
            "gcra(limit=5,period=1m,burst=5)");
  EXPECT_EQ(Limit::token_bucket({.capacity = 100, .refill_tokens = 10, .refill_period = 1s})
                ->to_string(),
            "token_bucket(capacity=100,rate=10,per=1s)");
  EXPECT_EQ(Limit::token_bucket({.capacity = 100,
                                 .refill_tokens = 10,
                                 .refill_period = 1500ms,
                                 .refill = Refill::kInterval})
                ->to_string(),
            "token_bucket(capacity=100,refill_tokens=10,refill_interval=1500ms)");
  EXPECT_EQ(Limit::sliding_log({.limit = 50, .period = 15s})->to_string(),
            "sliding_log(limit=50,period=15s)");
  EXPECT_EQ(Limit::concurrency({.limit = 100, .lease_timeout = 30s})->to_string(),
            "concurrency(limit=100,lease_timeout=30s)");
}

TEST(Limit, WindowIsThePeriodOrTheTimeToRefill) {
  EXPECT_EQ(Limit::fixed_window({.limit = 1000, .period = 1h})->window(), 1h);
  EXPECT_EQ(Limit::token_bucket({.capacity = 100, .refill_tokens = 10, .refill_period = 1s})->window(),
            10s);
  EXPECT_EQ(Limit::gcra({.limit = 3, .period = 1s, .burst = 1})->window(), 333334us);
}

TEST(Limit, EqualityFollowsParameters) {
  EXPECT_EQ(*Limit::fixed_window({.limit = 5, .period = 1s}),
            *Limit::fixed_window({.limit = 5, .period = 1000ms}));
  EXPECT_FALSE(*Limit::fixed_window({.limit = 5, .period = 1s}) ==
               *Limit::sliding_window({.limit = 5, .period = 1s}));
}

}  // namespace
}  // namespace sluice
