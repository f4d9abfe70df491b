// Properties every algorithm keeps, checked over many random specs and request sequences:
// retry_after is honest and the least such wait, remaining is exact, reset_after is when the state
// is full again, and each algorithm's admission bound holds (with the sliding window counter's
// documented worst case reached exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <random>
#include <variant>
#include <vector>

#include "sluice/algorithms.h"
#include "test_time.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::kT0;

using AnyState = std::variant<GcraState, IntervalBucketState, FixedWindowState, SlidingWindowState,
                              SlidingLogState, ConcurrencyState>;

struct Subject {
  Limit limit;
  AnyState state;
  std::uint64_t next_lease = 1;

  Decision decide_at(Nanos now, std::int64_t cost) {
    return std::visit(
        [&](auto& s) {
          if constexpr (std::is_same_v<std::decay_t<decltype(s)>, ConcurrencyState>) {
            return sluice::decide(s, limit, now, cost, next_lease++);
          } else {
            return sluice::decide(s, limit, now, cost);
          }
        },
        state);
  }
};

Subject random_subject(std::mt19937_64& rng) {
  const Nanos periods[] = {1ms, 7ms, 1s, 3s, 1min};
  const std::int64_t counts[] = {1, 2, 3, 7, 10, 64};
  auto pick = [&](const auto& options) { return options[rng() % std::size(options)]; };
  const Nanos period = pick(periods);
  const std::int64_t n = pick(counts);
  const std::int64_t m = pick(counts);
  switch (rng() % 7) {
    case 0: return {*Limit::token_bucket({.capacity = n, .refill_tokens = m, .refill_period = period}), GcraState{}};
    case 1:
      return {*Limit::token_bucket({.capacity = n, .refill_tokens = m, .refill_period = period,
                                    .refill = Refill::kInterval}),
              IntervalBucketState{}};
    case 2: return {*Limit::gcra({.limit = m, .period = period, .burst = n}), GcraState{}};
    case 3: return {*Limit::fixed_window({.limit = n, .period = period}), FixedWindowState{}};
    case 4: return {*Limit::sliding_window({.limit = n, .period = period}), SlidingWindowState{}};
    case 5: return {*Limit::sliding_log({.limit = n, .period = period}), SlidingLogState{}};
    default: return {*Limit::concurrency({.limit = n, .lease_timeout = period}), ConcurrencyState{}};
  }
}

TEST(Properties, RetryAfterIsHonestAndLeastRemainingExactResetAfterExact) {
  std::mt19937_64 rng(42);
  int rejections = 0;
  for (int round = 0; round < 400; ++round) {
    Subject subject = random_subject(rng);
    SCOPED_TRACE(subject.limit.to_string());
    const std::int64_t quota = subject.limit.quota();
    const std::int64_t period_us = subject.limit.params().period_us;
    Nanos now = kT0 + Micros{static_cast<std::int64_t>(rng() % 10'000'000)};
    for (int i = 0; i < 60; ++i) {
      const auto r = rng() % 10;
      if (r < 5) now += Micros{static_cast<std::int64_t>(rng() % (period_us / quota + 2))};
      else if (r == 9) now -= Micros{static_cast<std::int64_t>(rng() % period_us)};
      const std::int64_t cost = 1 + static_cast<std::int64_t>(rng() % std::min<std::int64_t>(quota, 3));
      const Decision d = subject.decide_at(now, cost);
      ASSERT_GE(d.remaining, 0);
      ASSERT_LE(d.remaining, quota);
      if (!d.allowed) {
        ++rejections;
        ASSERT_GE(d.retry_after, 1us);
        Subject later = subject;
        EXPECT_TRUE(later.decide_at(now + d.retry_after, cost).allowed) << "retry_after is not honest";
        Subject sooner = subject;
        EXPECT_FALSE(sooner.decide_at(now + d.retry_after - 1us, cost).allowed) << "retry_after is not the least wait";
      } else {
        // Exactly `remaining` more requests of cost 1 pass at this instant.
        Subject rest = subject;
        for (std::int64_t k = 0; k < d.remaining; ++k) ASSERT_TRUE(rest.decide_at(now, 1).allowed) << k;
        EXPECT_FALSE(rest.decide_at(now, 1).allowed);
      }
      // reset_after: full again then, and not a microsecond before.
      Subject full = subject;
      EXPECT_EQ(full.decide_at(now + d.reset_after, 0).remaining, quota);
      if (d.reset_after > 0ns) {
        Subject not_yet = subject;
        EXPECT_LT(not_yet.decide_at(now + d.reset_after - 1us, 0).remaining, quota);
      }
    }
  }
  EXPECT_GT(rejections, 1000);  // the sequences do exercise rejections
}

// Admissions (time in microseconds, cost) and the most admitted in any interval (t - span, t].
std::int64_t most_in_any(const std::vector<std::pair<std::int64_t, std::int64_t>>& admitted,
                         std::int64_t span) {
  std::int64_t best = 0;
  std::int64_t sum = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < admitted.size(); ++i) {
    sum += admitted[i].second;
    while (admitted[first].first <= admitted[i].first - span) sum -= admitted[first++].second;
    best = std::max(best, sum);
  }
  return best;
}

std::vector<std::pair<std::int64_t, std::int64_t>> random_traffic(std::mt19937_64& rng, Subject& s,
                                                                  std::int64_t mean_gap_us) {
  std::vector<std::pair<std::int64_t, std::int64_t>> admitted;
  std::int64_t t = kT0.count() / 1000;
  for (int i = 0; i < 20'000; ++i) {
    t += static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(2 * mean_gap_us + 1));
    if (s.decide_at(Micros{t}, 1).allowed) admitted.emplace_back(t, 1);
  }
  return admitted;
}

TEST(Properties, SlidingLogNeverExceedsTheLimitInAnyWindow) {
  std::mt19937_64 rng(7);
  Subject s{*Limit::sliding_log({.limit = 10, .period = 1s}), SlidingLogState{}};
  const auto admitted = random_traffic(rng, s, 50'000);
  EXPECT_EQ(most_in_any(admitted, 1'000'000), 10);
}

TEST(Properties, BucketsNeverExceedCapacityPlusRefill) {
  std::mt19937_64 rng(9);
  // 3 per second with a capacity of 5: in any span D, at most 5 + ceil(D * 3 / 1 s).
  Subject s{*Limit::gcra({.limit = 3, .period = 1s, .burst = 5}), GcraState{}};
  const auto admitted = random_traffic(rng, s, 100'000);
  for (std::int64_t span : {1, 333'334, 1'000'000, 10'000'000}) {
    EXPECT_LE(most_in_any(admitted, span), 5 + (span * 3 + 999'999) / 1'000'000) << span;
  }
}

TEST(Properties, SlidingWindowAdmitsAtMostTwiceTheLimitLessOneInAnyWindow) {
  std::mt19937_64 rng(11);
  Subject s{*Limit::sliding_window({.limit = 10, .period = 1s}), SlidingWindowState{}};
  const auto admitted = random_traffic(rng, s, 20'000);
  EXPECT_LE(most_in_any(admitted, 1'000'000), 19);
  // The worst case, reached: the limit at the very end of one window, then as much as the
  // estimate lets through at the very end of the next.
  Subject worst{*Limit::sliding_window({.limit = 10, .period = 1s}), SlidingWindowState{}};
  const std::int64_t start = kT0.count() / 1000;
  std::vector<std::pair<std::int64_t, std::int64_t>> log;
  for (std::int64_t t : {start + 999'999, start + 1'999'998}) {
    while (worst.decide_at(Micros{t}, 1).allowed) log.emplace_back(t, 1);
  }
  EXPECT_EQ(most_in_any(log, 1'000'000), 19);
}

TEST(Properties, FixedWindowAdmitsAtMostTwiceTheLimitInAnyWindow) {
  Subject s{*Limit::fixed_window({.limit = 10, .period = 1s}), FixedWindowState{}};
  const std::int64_t start = kT0.count() / 1000;
  std::vector<std::pair<std::int64_t, std::int64_t>> log;
  for (std::int64_t t : {start + 999'999, start + 1'000'000}) {
    while (s.decide_at(Micros{t}, 1).allowed) log.emplace_back(t, 1);
  }
  EXPECT_EQ(most_in_any(log, 1'000'000), 20);
}

}  // namespace
}  // namespace sluice
