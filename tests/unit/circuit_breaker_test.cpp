// CircuitBreaker on a manual clock: each way of tripping, the open period and its backoff, the
// half-open probes, manual control, the state-change callback and call().
#include "sluice/circuit_breaker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <vector>

namespace sluice {
namespace {

using namespace std::chrono_literals;

class BreakerTest : public ::testing::Test {
 protected:
  CircuitBreakerOptions options() {
    CircuitBreakerOptions o;
    o.clock = &clock_;
    o.on_state_change = [this](BreakerState from, BreakerState to) {
      changes_.push_back({from, to});
    };
    return o;
  }
  // Records n calls with the given outcome; each must be admitted.
  static void calls(CircuitBreaker& b, int n, bool failed, Nanos duration = 0ms) {
    for (int i = 0; i < n; ++i) {
      const BreakerPermit p = b.try_acquire();
      ASSERT_TRUE(p.admitted()) << i;
      b.record(p, failed, duration);
    }
  }

  ManualClock clock_{std::chrono::hours(1)};
  std::vector<std::pair<BreakerState, BreakerState>> changes_;
};

TEST_F(BreakerTest, FiveFailuresThenOpenForSixtySeconds) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 5;
  o.failure_rate = 0;
  o.open_for = 60s;
  ASSERT_TRUE(o.validate().ok());
  CircuitBreaker b(o);
  calls(b, 4, true);
  calls(b, 1, false);  // a success breaks the run
  calls(b, 4, true);
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  calls(b, 1, true);
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  const BreakerPermit rejected = b.try_acquire();
  EXPECT_FALSE(rejected.admitted());
  EXPECT_EQ(rejected.retry_after(), 60s);
  clock_.advance(59s);
  EXPECT_EQ(b.try_acquire().retry_after(), 1s);
  clock_.advance(1s);
  EXPECT_TRUE(b.try_acquire().admitted());
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
}

// stats() says the state a call would find: past the open period, half-open, though the breaker
// turns so only when that call comes (reading it changes nothing).
TEST_F(BreakerTest, StatsSayHalfOpenOnceTheOpenPeriodIsOver) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.failure_rate = 0;
  o.open_for = 60s;
  CircuitBreaker b(o);
  calls(b, 1, true);
  clock_.advance(59s);
  EXPECT_EQ(b.stats().state, BreakerState::kOpen);
  EXPECT_EQ(b.stats().open_remaining, 1s);
  clock_.advance(1s);
  EXPECT_EQ(b.stats().state, BreakerState::kHalfOpen);
  EXPECT_EQ(b.stats().open_remaining, 0s);
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_EQ(changes_.size(), 1u);
  EXPECT_TRUE(b.try_acquire().admitted());
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  EXPECT_EQ(changes_.back(), std::make_pair(BreakerState::kOpen, BreakerState::kHalfOpen));
}

TEST_F(BreakerTest, FailureRateJudgedOnlyAfterMinimumCalls) {
  CircuitBreakerOptions o = options();
  o.window_size = 10;
  o.minimum_calls = 6;
  o.failure_rate = 50;
  CircuitBreaker b(o);
  calls(b, 5, true);  // 100% failed, but only 5 calls
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  calls(b, 1, false);  // 5 of 6 failed
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

TEST_F(BreakerTest, CountWindowForgetsTheOldestCall) {
  CircuitBreakerOptions o = options();
  o.window_size = 4;
  o.minimum_calls = 4;
  o.failure_rate = 75;
  CircuitBreaker b(o);
  calls(b, 2, true);
  calls(b, 2, false);  // 2 of 4
  calls(b, 1, true);   // window: F S S F -> 2 of 4
  calls(b, 1, false);  // S S F S -> 1 of 4
  EXPECT_EQ(b.stats().failures, 1);
  EXPECT_EQ(b.stats().calls, 4);
  calls(b, 2, true);   // F S F F -> 3 of 4
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

TEST_F(BreakerTest, TimeWindowForgetsOldCalls) {
  CircuitBreakerOptions o = options();
  o.window = BreakerWindow::kTime;
  o.window_duration = 10s;
  o.minimum_calls = 4;
  o.failure_rate = 50;
  CircuitBreaker b(o);
  calls(b, 3, true);
  clock_.advance(11s);  // those three slid out
  calls(b, 3, false);
  EXPECT_EQ(b.stats().calls, 3);
  calls(b, 2, true);  // 2 of 5
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  calls(b, 1, true);  // 3 of 6
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

// What stats() reports of a time window is the window as of now: calls that slid out are gone
// from it even when no call has come since to drop them.
TEST_F(BreakerTest, TheStatsOfATimeWindowLeaveOutWhatSlidOutWithoutACall) {
  CircuitBreakerOptions o = options();
  o.window = BreakerWindow::kTime;
  o.window_duration = 10s;
  o.minimum_calls = 100;
  CircuitBreaker b(o);
  calls(b, 5, true);
  EXPECT_EQ(b.stats().calls, 5);
  EXPECT_EQ(b.stats().failures, 5);
  clock_.advance(5s);
  calls(b, 2, false);
  EXPECT_EQ(b.stats().calls, 7);
  clock_.advance(6s);  // the first five slid out, the last two not
  EXPECT_EQ(b.stats().calls, 2);
  EXPECT_EQ(b.stats().failures, 0);
  clock_.advance(10s);
  EXPECT_EQ(b.stats().calls, 0);
}

TEST_F(BreakerTest, SlowCallRateTrips) {
  CircuitBreakerOptions o = options();
  o.failure_rate = 0;
  o.slow_call_rate = 100;
  o.slow_call = 2s;
  o.window_size = 3;
  o.minimum_calls = 3;
  CircuitBreaker b(o);
  calls(b, 2, false, 3s);
  calls(b, 1, false, 1999ms);
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  calls(b, 2, false, 2s);  // the fast call is still in the window
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  calls(b, 1, false, 2s);
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

TEST_F(BreakerTest, HalfOpenAdmitsOnlyItsProbesAndClosesOnTheirSuccess) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.open_for = 10s;
  o.half_open_probes = 2;
  CircuitBreaker b(o);
  calls(b, 1, true);
  clock_.advance(10s);
  const BreakerPermit p1 = b.try_acquire();
  const BreakerPermit p2 = b.try_acquire();
  const BreakerPermit p3 = b.try_acquire();
  EXPECT_TRUE(p1.admitted());
  EXPECT_TRUE(p2.admitted());
  EXPECT_FALSE(p3.admitted());
  EXPECT_TRUE(b.record(p1, false));
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  const BreakerPermit p4 = b.try_acquire();  // p1's slot is free again
  EXPECT_TRUE(p4.admitted());
  EXPECT_TRUE(b.record(p2, false));
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_FALSE(b.record(p4, true));  // a probe of a finished half-open period no longer counts
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_FALSE(b.record(p3, true));  // not admitted
  const std::vector<std::pair<BreakerState, BreakerState>> expected = {
      {BreakerState::kClosed, BreakerState::kOpen},
      {BreakerState::kOpen, BreakerState::kHalfOpen},
      {BreakerState::kHalfOpen, BreakerState::kClosed}};
  EXPECT_EQ(changes_, expected);
}

TEST_F(BreakerTest, AFailedProbeReopensWithBackoff) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.open_for = 10s;
  o.backoff_multiplier = 2;
  o.max_open_for = 35s;
  CircuitBreaker b(o);
  calls(b, 1, true);
  for (Nanos expected : {20s, 35s, 35s}) {
    clock_.advance(b.try_acquire().retry_after());
    const BreakerPermit probe = b.try_acquire();
    ASSERT_TRUE(probe.admitted());
    b.record(probe, true);
    EXPECT_EQ(b.try_acquire().retry_after(), expected);
  }
  // A success closes it, and the next opening starts again from open_for.
  clock_.advance(35s);
  b.record(b.try_acquire(), false);
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  calls(b, 1, true);
  EXPECT_EQ(b.try_acquire().retry_after(), 10s);
}

TEST_F(BreakerTest, JitterOnlyShortensTheOpenPeriod) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.open_for = 100s;
  o.jitter_percent = 20;
  CircuitBreaker b(o);
  bool varied = false;
  Nanos first{0};
  for (int i = 0; i < 20; ++i) {
    b.reset();
    calls(b, 1, true);
    const Nanos d = b.try_acquire().retry_after();
    EXPECT_GE(d, 80s);
    EXPECT_LE(d, 100s);
    if (i == 0) first = d;
    varied = varied || d != first;
  }
  EXPECT_TRUE(varied);
}

TEST_F(BreakerTest, ALostProbeIsGivenUpAfterAnOpenPeriod) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.open_for = 10s;
  CircuitBreaker b(o);
  calls(b, 1, true);
  clock_.advance(10s);
  const BreakerPermit lost = b.try_acquire();  // never reported
  ASSERT_TRUE(lost.admitted());
  clock_.advance(9s);
  EXPECT_FALSE(b.try_acquire().admitted());
  clock_.advance(1s);
  const BreakerPermit next = b.try_acquire();
  EXPECT_TRUE(next.admitted());
  b.record(lost, true);  // too late: ignored
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  b.record(next, false);
  EXPECT_EQ(b.state(), BreakerState::kClosed);
}

TEST_F(BreakerTest, ReleaseFreesAProbeSlotWithoutJudging) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.open_for = 1s;
  CircuitBreaker b(o);
  calls(b, 1, true);
  clock_.advance(1s);
  const BreakerPermit p = b.try_acquire();
  ASSERT_TRUE(p.admitted());
  EXPECT_FALSE(b.try_acquire().admitted());
  b.release(p);
  EXPECT_TRUE(b.try_acquire().admitted());
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
}

TEST_F(BreakerTest, ManualControl) {
  CircuitBreaker b(options());
  b.force_open();
  EXPECT_FALSE(b.try_acquire().admitted());
  b.force_closed();
  calls(b, 50, true);  // nothing is judged
  EXPECT_EQ(b.state(), BreakerState::kForcedClosed);
  EXPECT_EQ(b.stats().calls, 0);
  b.disable();
  EXPECT_TRUE(b.try_acquire().admitted());
  EXPECT_EQ(b.state(), BreakerState::kDisabled);
  b.reset();
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  ASSERT_EQ(changes_.size(), 4u);
  EXPECT_EQ(changes_[0].second, BreakerState::kForcedOpen);
  EXPECT_EQ(changes_[3].second, BreakerState::kClosed);
}

TEST_F(BreakerTest, CallTimesRecordsAndRethrows) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 3;
  o.slow_call_rate = 100;
  o.slow_call = 1s;
  o.minimum_calls = 100;
  CircuitBreaker b(o);
  const Result<int> ok = b.call([&] {
    clock_.advance(2s);
    return 42;
  });
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 42);
  EXPECT_EQ(b.stats().slow_calls, 1);
  const Status failed = b.call([] { return Status(Error{ErrorCode::kTimeout, "upstream"}); });
  EXPECT_FALSE(failed.ok());
  EXPECT_THROW(b.call([]() -> void { throw std::runtime_error("boom"); }), std::runtime_error);
  const Result<int> bad = b.call([]() -> Result<int> { return Error{ErrorCode::kTimeout, "x"}; });
  EXPECT_EQ(bad.error().code, ErrorCode::kTimeout);
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  bool ran = false;
  const Status rejected = b.call([&] { ran = true; });
  EXPECT_FALSE(ran);
  EXPECT_EQ(rejected.error().code, ErrorCode::kCircuitOpen);
}

// A function that returns its Status or Result const, or a reference, is judged the same.
TEST_F(BreakerTest, CallJudgesConstResultsAndCopiesReferences) {
  CircuitBreaker b(options());
  const Status s = b.call([]() -> const Status { return Status(Error{ErrorCode::kTimeout, "x"}); });
  EXPECT_FALSE(s.ok());
  const Result<int> r = b.call([]() -> const Result<int> { return Error{ErrorCode::kTimeout, "y"}; });
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(b.stats().failures, 2);
  int kept = 7;
  const Result<int> copied = b.call([&]() -> int& { return kept; });
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(*copied, 7);
  EXPECT_EQ(b.stats().failures, 2);
  EXPECT_EQ(b.stats().calls, 3);
}

TEST(BreakerOptions, ValidationNamesTheField) {
  CircuitBreakerOptions o;
  o.failure_rate = 120;
  EXPECT_EQ(o.validate().error().message, "failure_rate must be a percentage from 0 to 100, got 120");
  o = {};
  o.half_open_probes = 0;
  EXPECT_EQ(o.validate().error().message, "half_open_probes must be at least 1, got 0");
  o = {};
  o.failure_rate = 0;
  EXPECT_FALSE(o.validate().ok());
  EXPECT_TRUE(CircuitBreakerOptions{}.validate().ok());
  o = CircuitBreakerOptions{};
  o.slow_call_rate = 50;
  o.slow_call = Nanos{0};  // every call slow: a healthy dependency would open the breaker
  EXPECT_EQ(o.validate().error().message, "slow_call must be more than 0, got 0s");
}

// An open period or window too long to add to a time (Nanos::max()) is refused by validate(), and a
// breaker given one anyway takes a year instead: it opens, and stays open, rather than overflow into
// the past and admit every call as a probe.
TEST_F(BreakerTest, AnOpenPeriodTooLongIsRefusedAndTakenAsAYear) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.open_for = Nanos::max();
  o.max_open_for = Nanos::max();
  ASSERT_FALSE(o.validate().ok());
  EXPECT_NE(o.validate().error().message.find("open_for must be at most 365d"), std::string::npos);
  CircuitBreaker b(o);
  calls(b, 1, true);
  ASSERT_EQ(b.state(), BreakerState::kOpen);
  const BreakerPermit p = b.try_acquire();
  EXPECT_FALSE(p.admitted());
  EXPECT_EQ(p.retry_after(), std::chrono::hours(24 * 365));
  clock_.advance(std::chrono::hours(24 * 364));
  EXPECT_FALSE(b.try_acquire().admitted());
}

// A call refused while the probes are out is told to come back within the open period when that is
// shorter than a second, and told the breaker is half-open.
TEST_F(BreakerTest, ACallRefusedWhileProbesAreOutRetriesWithinAShortOpenPeriod) {
  CircuitBreakerOptions o = options();
  o.consecutive_failures = 1;
  o.open_for = 10ms;
  o.half_open_probes = 1;
  CircuitBreaker b(o);
  calls(b, 1, true);
  clock_.advance(10ms);
  ASSERT_TRUE(b.try_acquire().admitted());
  const BreakerPermit refused = b.try_acquire();
  ASSERT_FALSE(refused.admitted());
  EXPECT_EQ(refused.retry_after(), 10ms);
  const Status s = b.call([] {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "circuit breaker is half-open, its probes in flight; retry in 10ms");
}

// A count window smaller than minimum_calls (window 5 with the default minimum of 10) judges its
// rates once it is full, rather than never.
TEST_F(BreakerTest, ACountWindowSmallerThanTheMinimumJudgesOnceFull) {
  CircuitBreakerOptions o = options();
  o.window_size = 5;
  o.minimum_calls = 10;
  o.failure_rate = 50;
  CircuitBreaker b(o);
  calls(b, 4, true);
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  calls(b, 1, true);
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

// A call whose result cannot be handed over (its conversion throws after the outcome was recorded)
// is recorded once, as what it was, not a second time as a failure.
TEST_F(BreakerTest, ACallIsRecordedOnceEvenWhenHandingItsResultOverThrows) {
  struct Fragile {
    Fragile() = default;
    Fragile(const Fragile&) = default;
    Fragile(Fragile&&) { throw std::runtime_error("cannot move"); }
  };
  CircuitBreakerOptions o = options();
  o.window_size = 2;
  o.minimum_calls = 2;
  o.failure_rate = 50;
  CircuitBreaker b(o);
  for (int i = 0; i < 2; ++i) {
    EXPECT_THROW((void)b.call([] { return Fragile{}; }), std::runtime_error);
  }
  const BreakerStats s = b.stats();
  EXPECT_EQ(s.calls, 2);
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(b.state(), BreakerState::kClosed);
}

}  // namespace
}  // namespace sluice
