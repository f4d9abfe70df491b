// The algorithms as pure transitions, on passed-in time: admissions at window edges, honest
// retry_after, costs above 1, time going backwards and extreme values.
#include "sluice/algorithms.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

#include "test_time.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::at_ms;
using testing::at_us;
using testing::kT0;

Limit make(Result<Limit> r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return std::move(r).value();
}

// ---------------------------------------------------------------------------------------------
// Token bucket, continuous refill (and so GCRA, which shares the meter).

TEST(TokenBucket, StartsFullAndAdmitsExactlyItsCapacityAtOnce) {
  const Limit limit = make(Limit::token_bucket({.capacity = 100, .refill_tokens = 10, .refill_period = 1s}));
  GcraState s;
  for (int i = 0; i < 100; ++i) {
    const Decision d = decide(s, limit, at_ms(0), 1);
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.remaining, 99 - i);
    EXPECT_EQ(d.limit, 100);
  }
  const Decision d = decide(s, limit, at_ms(0), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.cost_exceeds_limit);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after, 100ms);
  EXPECT_EQ(d.reset_after, 10s);
}

TEST(TokenBucket, RefillsSmoothlyOneTokenPerInterval) {
  const Limit limit = make(Limit::token_bucket({.capacity = 2, .refill_tokens = 10, .refill_period = 1s}));
  GcraState s;
  ASSERT_TRUE(decide(s, limit, at_ms(0), 2).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(99), 1).allowed);
  const Decision d = decide(s, limit, at_ms(100), 1);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.reset_after, 200ms);
  EXPECT_FALSE(decide(s, limit, at_ms(150), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(200), 1).allowed);
}

TEST(TokenBucket, RationalRateNeverAdmitsEarly) {
  // 3 per second: a token every 333333.33 us; the fourth request passes at 333334 us, not 333333.
  const Limit limit = make(Limit::token_bucket({.capacity = 3, .refill_tokens = 3, .refill_period = 1s}));
  GcraState s;
  ASSERT_TRUE(decide(s, limit, at_us(0), 3).allowed);
  const Decision rejected = decide(s, limit, at_us(0), 1);
  EXPECT_EQ(rejected.retry_after, 333334us);
  EXPECT_FALSE(decide(s, limit, at_us(333333), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_us(333334), 1).allowed);
  // Three tokens take exactly one second: no rounding drift accumulates.
  GcraState t;
  ASSERT_TRUE(decide(t, limit, at_us(0), 3).allowed);
  EXPECT_FALSE(decide(t, limit, at_us(999999), 3).allowed);
  EXPECT_TRUE(decide(t, limit, at_us(1000000), 3).allowed);
}

TEST(TokenBucket, CostAboveOneWaitsForAllItsTokens) {
  const Limit limit = make(Limit::token_bucket({.capacity = 10, .refill_tokens = 1, .refill_period = 1s}));
  GcraState s;
  ASSERT_TRUE(decide(s, limit, at_ms(0), 8).allowed);
  const Decision d = decide(s, limit, at_ms(0), 5);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 2);
  EXPECT_EQ(d.retry_after, 3s);
  EXPECT_FALSE(decide(s, limit, at_ms(2999), 5).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(3000), 5).allowed);
}

TEST(TokenBucket, CostAboveCapacityIsRejectedDistinctlyAndNeverAdmitted) {
  const Limit limit = make(Limit::token_bucket({.capacity = 10, .refill_tokens = 1, .refill_period = 1s}));
  GcraState s;
  const Decision d = decide(s, limit, at_ms(0), 11);
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.cost_exceeds_limit);
  EXPECT_EQ(d.retry_after, 0s);
  EXPECT_EQ(d.remaining, 10);
  EXPECT_FALSE(decide(s, limit, at_ms(0) + 1000h, 11).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(0), 10).allowed);  // nothing was consumed
}

TEST(TokenBucket, EarlierTimeGrantsNothing) {
  const Limit limit = make(Limit::token_bucket({.capacity = 5, .refill_tokens = 1, .refill_period = 1s}));
  GcraState s;
  ASSERT_TRUE(decide(s, limit, at_ms(10'000), 5).allowed);
  // A thread with an older timestamp, or a clock stepped back an hour.
  EXPECT_FALSE(decide(s, limit, at_ms(9'000), 1).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(10'000) - 1h, 1).allowed);
  const Decision d = decide(s, limit, at_ms(10'999), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1ms);
  EXPECT_TRUE(decide(s, limit, at_ms(11'000), 1).allowed);
}

// A fast meter seen from a clock stepped back hours: its tokens over that time overflow 64 bits, and
// must still read as none remaining, not as more than the capacity.
TEST(TokenBucket, AFastMeterFromAClockSteppedBackHoursHasNoneRemaining) {
  const Limit limit = make(Limit::token_bucket({.capacity = kMaxLimit, .refill_tokens = kMaxLimit, .refill_period = 1ms}));
  GcraState s;
  ASSERT_TRUE(decide(s, limit, at_ms(10 * 3'600'000), kMaxLimit).allowed);
  ASSERT_TRUE(decide(s, limit, at_ms(10 * 3'600'000) + 1ms, kMaxLimit).allowed);
  const Decision d = decide(s, limit, at_ms(10 * 3'600'000) - 3h, 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_GE(d.reset_after, 3h);
}

TEST(TokenBucket, PeekConsumesNothing) {
  const Limit limit = make(Limit::token_bucket({.capacity = 5, .refill_tokens = 1, .refill_period = 1s}));
  GcraState s;
  ASSERT_TRUE(decide(s, limit, at_ms(0), 2).allowed);
  const Decision peek = decide(s, limit, at_ms(0), 0);
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.remaining, 3);
  EXPECT_EQ(peek.reset_after, 2s);
  EXPECT_EQ(decide(s, limit, at_ms(0), 0).remaining, 3);
}

TEST(TokenBucket, ExtremeValuesDoNotOverflow) {
  // 2^40 tokens refilled 2^40 per millisecond, at the far end of time.
  const Limit fast = make(Limit::token_bucket(
      {.capacity = kMaxLimit, .refill_tokens = kMaxLimit, .refill_period = 1ms}));
  GcraState s;
  const Nanos late = Nanos{INT64_MAX} - 1h;
  Decision d = decide(s, fast, late, kMaxLimit);
  ASSERT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.reset_after, 1ms);
  d = decide(s, fast, late, 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1us);
  // 2^40 tokens refilled 2^40 per year, 100 years apart.
  const Limit slow = make(Limit::token_bucket(
      {.capacity = kMaxLimit, .refill_tokens = kMaxLimit, .refill_period = kMaxPeriod}));
  GcraState t;
  ASSERT_TRUE(decide(t, slow, kT0, kMaxLimit).allowed);
  d = decide(t, slow, kT0, kMaxLimit);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, kMaxPeriod);
  EXPECT_EQ(d.reset_after, kMaxPeriod);
  EXPECT_TRUE(decide(t, slow, kT0 + kMaxPeriod, kMaxLimit).allowed);
  EXPECT_TRUE(decide(t, slow, kT0 + 100 * kMaxPeriod, kMaxLimit).allowed);
}

TEST(Gcra, AdmitsBurstThenOnePerEmissionInterval) {
  // 5 per minute, burst 5: five at once, then one every 12 s.
  const Limit limit = make(Limit::gcra({.limit = 5, .period = 1min, .burst = 5}));
  GcraState s;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(decide(s, limit, at_ms(0), 1).allowed) << i;
  Decision d = decide(s, limit, at_ms(0), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 12s);
  EXPECT_EQ(d.reset_after, 60s);
  EXPECT_TRUE(decide(s, limit, at_ms(12'000), 1).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(23'999), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(24'000), 1).allowed);
}

TEST(Gcra, BurstOfOneSpacesRequestsEvenly) {
  const Limit limit = make(Limit::gcra({.limit = 10, .period = 1s, .burst = 1}));
  GcraState s;
  EXPECT_TRUE(decide(s, limit, at_ms(0), 1).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(50), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(100), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(250), 1).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(300), 1).allowed);
}

// ---------------------------------------------------------------------------------------------
// Token bucket, interval refill.

TEST(IntervalBucket, TopsUpAtEveryTickNotBetween) {
  // Capacity 100, 10 tokens every second at whole seconds: the users' timer-refilled bucket.
  const Limit limit = make(Limit::token_bucket({.capacity = 100,
                                                .refill_tokens = 10,
                                                .refill_period = 1s,
                                                .refill = Refill::kInterval}));
  IntervalBucketState s;
  ASSERT_TRUE(decide(s, limit, at_ms(300), 100).allowed);
  Decision d = decide(s, limit, at_ms(300), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 700ms);  // the next tick is at 1 s
  EXPECT_EQ(d.reset_after, 9700ms);
  EXPECT_FALSE(decide(s, limit, at_ms(999), 1).allowed);
  d = decide(s, limit, at_ms(1000), 10);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  // Twenty-five tokens need three ticks.
  d = decide(s, limit, at_ms(1500), 25);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 2500ms);
  EXPECT_FALSE(decide(s, limit, at_ms(3999), 25).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(4000), 25).allowed);
}

TEST(IntervalBucket, NeverHoldsMoreThanCapacity) {
  const Limit limit = make(Limit::token_bucket({.capacity = 15,
                                                .refill_tokens = 10,
                                                .refill_period = 1s,
                                                .refill = Refill::kInterval}));
  IntervalBucketState s;
  ASSERT_TRUE(decide(s, limit, at_ms(0), 15).allowed);
  const Decision d = decide(s, limit, at_ms(0) + 10h, 0);
  EXPECT_EQ(d.remaining, 15);
  EXPECT_EQ(d.reset_after, 0s);
  EXPECT_TRUE(decide(s, limit, at_ms(0) + 10h, 15).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(0) + 10h, 1).allowed);
}

TEST(IntervalBucket, EarlierTimeGrantsNothing) {
  const Limit limit = make(Limit::token_bucket({.capacity = 10,
                                                .refill_tokens = 10,
                                                .refill_period = 1s,
                                                .refill = Refill::kInterval}));
  IntervalBucketState s;
  ASSERT_TRUE(decide(s, limit, at_ms(5'500), 10).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(4'000), 1).allowed);
  EXPECT_FALSE(decide(s, limit, at_ms(5'999), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(6'000), 10).allowed);
}

// ---------------------------------------------------------------------------------------------
// Fixed window.

TEST(FixedWindow, ResetsAtTheWindowBoundary) {
  const Limit limit = make(Limit::fixed_window({.limit = 3, .period = 1s}));
  FixedWindowState s;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(decide(s, limit, at_ms(999), 1).allowed);
  Decision d = decide(s, limit, at_ms(999), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1ms);
  EXPECT_EQ(d.reset_after, 1ms);
  // The known weakness: twice the limit across a boundary.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(decide(s, limit, at_ms(1000), 1).allowed);
  d = decide(s, limit, at_ms(1000), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1s);
}

TEST(FixedWindow, EarlierTimeStaysInTheLatestWindow) {
  const Limit limit = make(Limit::fixed_window({.limit = 2, .period = 1s}));
  FixedWindowState s;
  ASSERT_TRUE(decide(s, limit, at_ms(2'100), 2).allowed);
  const Decision d = decide(s, limit, at_ms(1'100), 1);  // clock stepped back into an older window
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1900ms);
  EXPECT_TRUE(decide(s, limit, at_ms(3'000), 2).allowed);
}

// ---------------------------------------------------------------------------------------------
// Sliding window counter.

TEST(SlidingWindow, WeighsThePreviousWindowByItsOverlap) {
  const Limit limit = make(Limit::sliding_window({.limit = 10, .period = 1s}));
  SlidingWindowState s;
  ASSERT_TRUE(decide(s, limit, at_ms(500), 10).allowed);
  // At 1.25 s the previous window weighs ceil(10 * 0.75) = 8: two more fit.
  Decision d = decide(s, limit, at_ms(1250), 2);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  d = decide(s, limit, at_ms(1250), 1);
  EXPECT_FALSE(d.allowed);
  // One more fits once the weight is ceil(10 * (1 - e)) <= 7, i.e. at e = 300 ms.
  EXPECT_EQ(d.retry_after, 50ms);
  EXPECT_FALSE(decide(s, limit, at_ms(1299), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(1300), 1).allowed);
}

TEST(SlidingWindow, RetryFallsInTheNextWindowWhenThisOneIsFull) {
  const Limit limit = make(Limit::sliding_window({.limit = 4, .period = 1s}));
  SlidingWindowState s;
  ASSERT_TRUE(decide(s, limit, at_ms(100), 4).allowed);
  Decision d = decide(s, limit, at_ms(100), 1);
  EXPECT_FALSE(d.allowed);
  // In the next window the 4 weigh ceil(4 * (1 - e)) <= 3 from e = 250 ms.
  EXPECT_EQ(d.retry_after, 1150ms);
  EXPECT_EQ(d.reset_after, 1900ms);
  EXPECT_FALSE(decide(s, limit, at_ms(1249), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(1250), 1).allowed);
  // A cost equal to the limit waits until nothing weighs: two windows on.
  SlidingWindowState t;
  ASSERT_TRUE(decide(t, limit, at_ms(100), 1).allowed);
  d = decide(t, limit, at_ms(100), 4);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1900ms);
  EXPECT_FALSE(decide(t, limit, at_ms(1999), 4).allowed);
  EXPECT_TRUE(decide(t, limit, at_ms(2000), 4).allowed);
}

TEST(SlidingWindow, ForgetsWindowsOlderThanThePreviousOne) {
  const Limit limit = make(Limit::sliding_window({.limit = 5, .period = 1s}));
  SlidingWindowState s;
  ASSERT_TRUE(decide(s, limit, at_ms(900), 5).allowed);
  const Decision d = decide(s, limit, at_ms(2000), 5);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.reset_after, 2s);
}

TEST(SlidingWindow, EarlierTimeWeighsThePreviousWindowFully) {
  const Limit limit = make(Limit::sliding_window({.limit = 10, .period = 1s}));
  SlidingWindowState s;
  ASSERT_TRUE(decide(s, limit, at_ms(500), 10).allowed);
  ASSERT_TRUE(decide(s, limit, at_ms(1900), 1).allowed);  // weight ceil(10 * 0.1) = 1
  // Back in the previous window: treated as the start of the current one, where the previous
  // window weighs all 10.
  const Decision d = decide(s, limit, at_ms(800), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
}

// A peek consumes nothing and moves nothing, as in Redis: a later call with an earlier time (a
// clock gone back) is judged in the window the last acquire was in, not the peek's.
TEST(SlidingWindow, APeekLeavesTheStateInItsWindow) {
  const Limit limit = make(Limit::sliding_window({.limit = 10, .period = 10s}));
  SlidingWindowState s;
  ASSERT_TRUE(decide(s, limit, at_ms(9000), 8).allowed);
  EXPECT_EQ(decide(s, limit, at_ms(12000), 0).remaining, 3);  // 8 weighted by 8 s of 10: 7 (rounded up)
  const Decision d = decide(s, limit, at_ms(9500), 2);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.reset_after, 10500ms);  // full again 20 s after its window (0 s) began
}

TEST(SlidingWindow, PacksLargeCountsAndLateWindows) {
  const Limit limit = make(Limit::sliding_window({.limit = kMaxLimit, .period = 1ms}));
  SlidingWindowState s;
  const Nanos late = Nanos{INT64_MAX} - 1s;
  ASSERT_TRUE(decide(s, limit, late, kMaxLimit - 1).allowed);
  EXPECT_EQ(s.current(), kMaxLimit - 1);
  EXPECT_EQ(s.previous(), 0);
  ASSERT_TRUE(decide(s, limit, late + 1ms, 7).allowed);
  EXPECT_EQ(s.previous(), kMaxLimit - 1);
  EXPECT_EQ(s.current(), 7);
  EXPECT_EQ(s.window(), (late + 1ms).count() / 1'000'000);
}

// ---------------------------------------------------------------------------------------------
// Sliding log.

TEST(SlidingLog, NeverMoreThanTheLimitInAnyWindow) {
  const Limit limit = make(Limit::sliding_log({.limit = 3, .period = 1s}));
  SlidingLogState s;
  ASSERT_TRUE(decide(s, limit, at_ms(0), 1).allowed);
  ASSERT_TRUE(decide(s, limit, at_ms(400), 1).allowed);
  ASSERT_TRUE(decide(s, limit, at_ms(800), 1).allowed);
  Decision d = decide(s, limit, at_ms(999), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1ms);  // the entry at 0 leaves the window (t - 1s, t] at t = 1 s
  EXPECT_EQ(d.reset_after, 801ms);
  EXPECT_TRUE(decide(s, limit, at_ms(1000), 1).allowed);
  d = decide(s, limit, at_ms(1000), 2);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 800ms);  // 2 must leave: the entries at 400 and 800
  EXPECT_FALSE(decide(s, limit, at_ms(1799), 2).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(1800), 2).allowed);
}

TEST(SlidingLog, MergesSameInstantIntoOneEntry) {
  const Limit limit = make(Limit::sliding_log({.limit = 1000, .period = 1min}));
  SlidingLogState s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(decide(s, limit, at_ms(5), 1).allowed);
  EXPECT_EQ(s.entries.size(), 1u);
  EXPECT_EQ(s.total, 1000);
  undo(s, 10);
  EXPECT_EQ(s.total, 990);
  EXPECT_EQ(decide(s, limit, at_ms(5), 0).remaining, 10);
}

TEST(SlidingLog, EarlierTimeIsRecordedAtTheLatestTime) {
  const Limit limit = make(Limit::sliding_log({.limit = 2, .period = 1s}));
  SlidingLogState s;
  ASSERT_TRUE(decide(s, limit, at_ms(1000), 1).allowed);
  ASSERT_TRUE(decide(s, limit, at_ms(500), 1).allowed);  // recorded at 1000, not 500
  EXPECT_FALSE(decide(s, limit, at_ms(1999), 1).allowed);
  EXPECT_TRUE(decide(s, limit, at_ms(2000), 2).allowed);
}

// ---------------------------------------------------------------------------------------------
// Concurrency.

TEST(Concurrency, AtMostLimitInFlightAndReleaseGivesBack) {
  const Limit limit = make(Limit::concurrency({.limit = 2, .lease_timeout = 30s}));
  ConcurrencyState s;
  const Decision a = decide(s, limit, at_ms(0), 1, 11);
  const Decision b = decide(s, limit, at_ms(10), 1, 12);
  ASSERT_TRUE(a.allowed);
  ASSERT_TRUE(b.allowed);
  EXPECT_EQ(a.lease, 11u);
  EXPECT_EQ(b.remaining, 0);
  const Decision c = decide(s, limit, at_ms(20), 1, 13);
  EXPECT_FALSE(c.allowed);
  EXPECT_EQ(c.lease, 0u);
  EXPECT_EQ(c.retry_after, 29980ms);  // when the first lease times out
  EXPECT_TRUE(release(s, 11));
  EXPECT_FALSE(release(s, 11));
  EXPECT_TRUE(decide(s, limit, at_ms(30), 1, 14).allowed);
}

TEST(Concurrency, ExpiredLeasesAreReclaimed) {
  const Limit limit = make(Limit::concurrency({.limit = 3, .lease_timeout = 10s}));
  ConcurrencyState s;
  ASSERT_TRUE(decide(s, limit, at_ms(0), 3, 1).allowed);  // a caller that crashed
  EXPECT_FALSE(decide(s, limit, at_ms(9'999), 1, 2).allowed);
  const Decision d = decide(s, limit, at_ms(10'000), 3, 3);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(s.in_flight, 3);
  EXPECT_FALSE(release(s, 1));  // too late: it was reclaimed
  EXPECT_EQ(s.in_flight, 3);
}

TEST(Concurrency, CostAboveLimitIsDistinct) {
  const Limit limit = make(Limit::concurrency({.limit = 3, .lease_timeout = 10s}));
  ConcurrencyState s;
  const Decision d = decide(s, limit, at_ms(0), 4, 1);
  EXPECT_TRUE(d.cost_exceeds_limit);
  EXPECT_EQ(d.retry_after, 0s);
  EXPECT_EQ(s.in_flight, 0);
}

}  // namespace
}  // namespace sluice
