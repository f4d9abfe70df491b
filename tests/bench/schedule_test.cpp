// Schedule: a constant rate's times and counts, a ramp's counts, ends and monotony.
#include "bench/schedule.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice::bench {
namespace {

using namespace std::chrono_literals;

TEST(Schedule, ConstantRateSpacesRequestsEvenly) {
  const Schedule s = Schedule::constant(1000, 5);
  EXPECT_EQ(s.count(), 5u);
  EXPECT_EQ(s.at(0), 0ms);
  EXPECT_EQ(s.at(1), 1ms);
  EXPECT_EQ(s.at(4), 4ms);
}

TEST(Schedule, ConstantRateForADurationSendsRateTimesDuration) {
  EXPECT_EQ(Schedule::constant_for(1000, 1s).count(), 1000u);
  EXPECT_EQ(Schedule::constant_for(3, 1s).count(), 3u);
  EXPECT_EQ(Schedule::constant_for(0.5, 3s).count(), 2u);  // at 0 s and 2 s
  EXPECT_EQ(Schedule::constant_for(1000, 1s).at(999), 999ms);
}

TEST(Schedule, RampSendsTheAreaUnderTheRate) {
  const Schedule up = Schedule::ramp(100, 300, 10s);  // (100 + 300) / 2 * 10
  EXPECT_EQ(up.count(), 2000u);
  const Schedule down = Schedule::ramp(300, 100, 10s);
  EXPECT_EQ(down.count(), 2000u);
  EXPECT_LT(up.at(up.count() - 1), 10s);
  EXPECT_LT(down.at(down.count() - 1), 10s);
}

TEST(Schedule, RampStartsAndEndsAtTheRatesAsked) {
  const Schedule s = Schedule::ramp(100, 300, 10s);
  // Near the start, requests are 1/100 s apart; near the end 1/300 s.
  EXPECT_NEAR(static_cast<double>((s.at(1) - s.at(0)).count()), 1e9 / 100, 1e9 / 100 * 0.01);
  const std::uint64_t last = s.count() - 1;
  EXPECT_NEAR(static_cast<double>((s.at(last) - s.at(last - 1)).count()), 1e9 / 300,
              1e9 / 300 * 0.01);
}

TEST(Schedule, RampFromZeroStillMovesForward) {
  const Schedule s = Schedule::ramp(0, 100, 10s);
  EXPECT_EQ(s.count(), 500u);
  for (std::uint64_t i = 1; i < s.count(); ++i) ASSERT_GT(s.at(i), s.at(i - 1)) << i;
}

}  // namespace
}  // namespace sluice::bench
