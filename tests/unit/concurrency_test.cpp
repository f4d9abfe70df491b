// Many threads against one LocalStore or one breaker: exact totals for a hot key, for many keys and
// for all-or-nothing acquisitions, the in-flight cap, and the half-open probe cap. These also run
// under ThreadSanitizer (make test-tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fast_clock_probe.h"
#include "sluice/circuit_breaker.h"
#include "sluice/local_store.h"
#include "test_time.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::kT0;

// Runs fn(thread_index) on `threads` threads released at the same instant.
void race(int threads, const std::function<void(int)>& fn) {
  std::barrier start(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      fn(t);
    });
  }
  for (auto& th : pool) th.join();
}

std::vector<Limit> every_algorithm(std::int64_t limit) {
  return {
      *Limit::token_bucket({.capacity = limit, .refill_tokens = 1, .refill_period = 1h}),
      *Limit::token_bucket({.capacity = limit, .refill_tokens = 1, .refill_period = 1h,
                            .refill = Refill::kInterval}),
      *Limit::gcra({.limit = 1, .period = 1h, .burst = limit}),
      *Limit::fixed_window({.limit = limit, .period = 1h}),
      *Limit::sliding_window({.limit = limit, .period = 1h}),
      *Limit::sliding_log({.limit = limit, .period = 1h}),
      *Limit::concurrency({.limit = limit, .lease_timeout = 1h}),
  };
}

class ThreadCount : public ::testing::TestWithParam<int> {};

TEST_P(ThreadCount, OneHotKeyAdmitsExactlyTheLimit) {
  ManualClock clock(kT0);  // frozen: nothing refills during the race
  LocalStore store(LocalStoreOptions{.clock = &clock});
  for (const Limit& limit : every_algorithm(500)) {
    SCOPED_TRACE(limit.to_string());
    std::atomic<int> admitted{0};
    race(GetParam(), [&](int) {
      for (int i = 0; i < 2000 / GetParam(); ++i) {
        if (store.acquire("hot:" + limit.to_string(), limit)->allowed) admitted.fetch_add(1);
      }
    });
    EXPECT_EQ(admitted.load(), 500);
  }
}

TEST_P(ThreadCount, ManyKeysEachAdmitExactlyTheLimit) {
  ManualClock clock(kT0);
  LocalStore store(LocalStoreOptions{.clock = &clock, .shards = 8});
  const Limit limit = *Limit::sliding_window({.limit = 7, .period = 1min});
  constexpr int kKeys = 1000;
  std::vector<std::atomic<int>> admitted(kKeys);
  race(GetParam(), [&](int t) {
    // Every thread walks every key, from a different starting point, ten times over.
    for (int round = 0; round < 10; ++round) {
      for (int i = 0; i < kKeys; ++i) {
        const int k = (i + t * 97) % kKeys;
        if (store.acquire("key" + std::to_string(k), limit)->allowed) admitted[k].fetch_add(1);
      }
    }
  });
  for (int k = 0; k < kKeys; ++k) ASSERT_EQ(admitted[k].load(), 7) << k;
  EXPECT_EQ(store.size(), static_cast<std::size_t>(kKeys));
}

TEST_P(ThreadCount, AcquireAllNeverConsumesForARejectedRequest) {
  ManualClock clock(kT0);
  LocalStore store(LocalStoreOptions{.clock = &clock});
  // A shared system limit of 300 and a per-thread limit of 100: with four threads or more, the
  // system limit binds; a request rejected by either limit must leave the other untouched.
  const Limit system = *Limit::fixed_window({.limit = 300, .period = 1h});
  const Limit per_thread = *Limit::token_bucket({.capacity = 100, .refill_tokens = 1, .refill_period = 1h});
  std::vector<int> admitted(static_cast<std::size_t>(GetParam()), 0);
  race(GetParam(), [&](int t) {
    const std::string own = "thread" + std::to_string(t);
    for (int i = 0; i < 400; ++i) {
      const LimitRequest both[] = {{"system", &system, 1}, {own, &per_thread, 1}};
      Decision d[2];
      ASSERT_TRUE(store.acquire_all(both, d).ok());
      if (d[0].allowed && d[1].allowed) ++admitted[static_cast<std::size_t>(t)];
    }
  });
  int total = 0;
  for (int t = 0; t < GetParam(); ++t) {
    const int a = admitted[static_cast<std::size_t>(t)];
    total += a;
    EXPECT_LE(a, 100);
    // What each thread's own bucket lost is exactly what it was admitted.
    EXPECT_EQ(store.peek("thread" + std::to_string(t), per_thread)->remaining, 100 - a);
  }
  EXPECT_EQ(total, std::min(300, 100 * GetParam()));
  EXPECT_EQ(store.peek("system", system)->remaining, 300 - total);
}

TEST_P(ThreadCount, NeverMoreInFlightThanTheConcurrencyLimit) {
  LocalStore store;
  const Limit limit = *Limit::concurrency({.limit = 3, .lease_timeout = 1h});
  std::atomic<int> in_flight{0};
  std::atomic<int> peak{0};
  std::atomic<int> admitted{0};
  race(GetParam(), [&](int) {
    for (int i = 0; i < 2000; ++i) {
      const Decision d = *store.acquire("db", limit);
      if (!d.allowed) continue;
      const int now = in_flight.fetch_add(1) + 1;
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      admitted.fetch_add(1);
      in_flight.fetch_sub(1);
      ASSERT_TRUE(store.release("db", limit, d.lease).ok());
    }
  });
  EXPECT_LE(peak.load(), 3);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(store.peek("db", limit)->remaining, 3);  // every permit came back
}

TEST_P(ThreadCount, HalfOpenAdmitsExactlyItsProbes) {
  ManualClock clock(kT0);
  CircuitBreakerOptions o;
  o.clock = &clock;
  o.consecutive_failures = 1;
  o.open_for = 1s;
  o.half_open_probes = 3;
  CircuitBreaker breaker(o);
  breaker.record(breaker.try_acquire(), true);
  ASSERT_EQ(breaker.state(), BreakerState::kOpen);
  clock.advance(1s);
  std::atomic<int> admitted{0};
  race(GetParam(), [&](int) {
    for (int i = 0; i < 1000; ++i) {
      if (breaker.try_acquire().admitted()) admitted.fetch_add(1);
    }
  });
  EXPECT_EQ(admitted.load(), 3);
  EXPECT_EQ(breaker.state(), BreakerState::kHalfOpen);
}

TEST_P(ThreadCount, ClosedBreakerCountsEveryOutcome) {
  CircuitBreakerOptions o;
  o.window_size = 100'000;
  o.minimum_calls = 100'000;
  CircuitBreaker breaker(o);
  race(GetParam(), [&](int t) {
    for (int i = 0; i < 5000; ++i) breaker.record(breaker.try_acquire(), (i + t) % 5 == 0);
  });
  const BreakerStats s = breaker.stats();
  EXPECT_EQ(s.calls, 5000 * GetParam());
  EXPECT_EQ(s.failures, 1000 * GetParam());
}

TEST_P(ThreadCount, FastClockReadersWhileItReanchors) {
  const FastClock clock;
  const SteadyClock& steady = SteadyClock::instance();
  const Nanos start = steady.now();
  std::atomic<std::int64_t> worst{0};
  // 250 ms of readers on every thread: calibration at 10 ms, re-anchors every 100 ms. (Readings
  // just after a step of the system clock are left out: see FastClockProbe.)
  race(GetParam(), [&](int) {
    std::int64_t local = 0;
    testing::FastClockProbe probe;
    while (steady.now() - start < 250ms) {
      if (const std::optional<Nanos> off = probe.off(clock)) local = std::max(local, off->count());
    }
    std::int64_t seen = worst.load();
    while (local > seen && !worst.compare_exchange_weak(seen, local)) {
    }
  });
  // Each reading is bracketed by two system-clock readings, so preemption cannot inflate this.
  EXPECT_LT(worst.load(), Nanos{100us}.count());
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadCount, ::testing::Values(2, 4, 8));

}  // namespace
}  // namespace sluice
