// Helpers for RedisStore tests: a server per test suite, stores connected to it, limits.
// Not thread-safe; for tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.h"
#include "sluice/redis/redis_store.h"

namespace sluice::testing {

// What a store's listener is told, a line each, from the store's thread. Copies share the lines, so
// that a listener can keep its own copy: the store may call it after the test is done with it.
class Told {
 public:
  void add(std::string line) const {
    const std::lock_guard lock(state_->mu);
    state_->lines.push_back(std::move(line));
  }
  std::vector<std::string> lines() const {
    const std::lock_guard lock(state_->mu);
    return state_->lines;
  }

 private:
  struct State {
    std::mutex mu;
    std::vector<std::string> lines;  // guarded by mu
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

inline Limit make(Result<Limit> r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return std::move(r).value();
}

// Timeouts of a test's store. The production defaults (50 ms a command) are for the tests of
// timing; the others give Redis room, since a loaded machine or a sanitizer build can take longer
// than that to compile the scripts just after connecting, or to run thousands of them at once.
enum class Timeouts { kRelaxed, kProduction };

// Opens a store on `address` and waits until it is connected.
inline std::unique_ptr<redis::RedisStore> open_store(const std::string& address,
                                                     redis::RedisStoreOptions options = {},
                                                     Timeouts timeouts = Timeouts::kRelaxed) {
  options.address = address;
  if (timeouts == Timeouts::kRelaxed) {
    options.command_timeout = std::max(options.command_timeout, std::chrono::milliseconds(2000));
    options.connect_timeout = std::max(options.connect_timeout, std::chrono::milliseconds(2000));
  }
  auto store = redis::RedisStore::open(std::move(options));
  EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.error().message);
  if (!store.ok()) return nullptr;
  const Status s = (*store)->connect();
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return std::move(*store);
}

// One redis-server for every test of the suite, emptied before each test.
class RedisTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = RedisServer::start();
    if (s.ok()) {
      server_ = std::move(*s);
    } else {
      start_error_ = s.error().message;
    }
  }
  static void TearDownTestSuite() { server_.reset(); }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    server_->cli({"FLUSHALL"});
    server_->cli({"CONFIG", "RESETSTAT"});
  }

  static std::unique_ptr<RedisServer> server_;
  static std::string start_error_;
};

inline std::unique_ptr<RedisServer> RedisTest::server_;
inline std::string RedisTest::start_error_;

// Opens a store on `address` and, at once, without connect(), makes 160 calls from 8 threads
// against a limit of 100: none fails (as "not connected"), exactly 100 are admitted, and the store's
// breaker stays closed.
inline void expect_calls_right_after_open_to_wait(const std::string& address) {
  auto opened = redis::RedisStore::open({.address = address,
                                         .connect_timeout = std::chrono::seconds(5),
                                         .command_timeout = std::chrono::seconds(5)});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  redis::RedisStore& store = **opened;
  const Limit limit = make(Limit::fixed_window({.limit = 100, .period = std::chrono::hours(1)}));
  std::atomic<int> admitted{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto d = store.acquire("right-after-open", limit);
        if (!d.ok()) {
          ++failed;
        } else if (d->allowed) {
          ++admitted;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(admitted.load(), 100);
  EXPECT_EQ(store.breaker().state(), BreakerState::kClosed);
}

}  // namespace sluice::testing
