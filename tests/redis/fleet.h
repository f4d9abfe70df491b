// A fleet in one test: several RedisStores (each its own connection and thread, like instances of a
// service), each with many acquisitions of one key in flight at once. Not thread-safe; for tests.
#pragma once

#include <atomic>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "store_fixture.h"

namespace sluice::testing {

struct FleetOutcome {
  int admitted = 0;
  int rejected = 0;
  int errors = 0;
  std::string first_error;
};

// `instances` stores on `address`, started together, each firing `per_instance` acquisitions of
// `key` at once through the asynchronous API.
inline FleetOutcome run_fleet(const std::string& address, const Limit& limit, const std::string& key,
                              int instances = 4, int per_instance = 2000) {
  std::vector<std::unique_ptr<redis::RedisStore>> stores;
  for (int i = 0; i < instances; ++i) {
    // A generous timeout: thousands of scripts queue up behind each other on one Redis.
    stores.push_back(open_store(address, {.command_timeout = std::chrono::seconds(10)}));
    if (!stores.back()) return {0, 0, 1, "cannot open a store"};
  }
  std::atomic<int> admitted{0}, rejected{0}, errors{0};
  std::string first_error;
  std::atomic_flag error_noted;
  std::latch go(instances);
  std::latch done(instances * per_instance);
  std::vector<std::thread> threads;
  for (int i = 0; i < instances; ++i) {
    threads.emplace_back([&, i] {
      go.arrive_and_wait();
      for (int n = 0; n < per_instance; ++n) {
        stores[static_cast<std::size_t>(i)]->async_acquire(key, limit, 1, [&](Result<Decision> d) {
          if (!d.ok()) {
            if (!error_noted.test_and_set()) first_error = d.error().message;
            ++errors;
          } else if (d->allowed) {
            ++admitted;
          } else {
            ++rejected;
          }
          done.count_down();
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  done.wait();
  return {admitted.load(), rejected.load(), errors.load(), first_error};
}

// Every algorithm with a limit of 500 that nothing refills during a test.
inline std::vector<Limit> limits_of_500() {
  using namespace std::chrono_literals;
  const Nanos year = std::chrono::hours(24 * 365);
  const Nanos slow = year / 5;  // the buckets refill one token per 73 days: 100 years from empty
  return {
      make(Limit::token_bucket({.capacity = 500, .refill_tokens = 1, .refill_period = slow})),
      make(Limit::token_bucket({.capacity = 500, .refill_tokens = 1, .refill_period = slow, .refill = Refill::kInterval})),
      make(Limit::gcra({.limit = 1, .period = slow, .burst = 500})),
      make(Limit::fixed_window({.limit = 500, .period = year})),
      make(Limit::sliding_window({.limit = 500, .period = year})),
      make(Limit::sliding_log({.limit = 500, .period = year})),
      make(Limit::concurrency({.limit = 500, .lease_timeout = year})),
  };
}

// 4 instances with 2,000 acquisitions of one key in flight each admit exactly 500 of the 8,000,
// for every algorithm, without an error.
inline void expect_exactly_500_admitted(const std::string& address) {
  for (const Limit& limit : limits_of_500()) {
    const FleetOutcome o = run_fleet(address, limit, "shared:" + limit.to_string());
    EXPECT_EQ(o.errors, 0) << limit.to_string() << ": " << o.first_error;
    EXPECT_EQ(o.admitted, 500) << limit.to_string();
    EXPECT_EQ(o.rejected, 8000 - 500) << limit.to_string();
  }
}

}  // namespace sluice::testing
