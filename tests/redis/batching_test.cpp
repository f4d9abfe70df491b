// RedisStore's batching: acquires started during one turn of the store's loop, and those that come
// while a call is in flight, queue and go together as one call of many.lua. Queued calls are decided one by one, each all or nothing, in the order asked,
// exactly as LocalStore decides the same calls in that order. A call to Redis that fails (a
// timeout) fails every acquire in it, each once; an error in one acquire's decisions fails that
// acquire alone.
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "sluice/local_store.h"
#include "store_fixture.h"

namespace sluice::testing {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

constexpr std::int64_t kT0us = 1'699'995'600'000'000;

// How many script calls (EVALSHA, or FCALL of the function library) the server has run since its
// stats were reset.
long script_calls(const RedisServer& server) {
  const std::string stats = server.cli({"INFO", "commandstats"});
  long n = 0;
  for (const std::string_view field : {"cmdstat_evalsha:calls=", "cmdstat_fcall:calls="}) {
    const std::size_t at = stats.find(field);
    if (at != std::string::npos) n += std::stol(stats.substr(at + field.size()));
  }
  return n;
}

// A store on an io_context of the test's own, run by a thread, so that a test can start many
// calls inside one handler: they go together when it returns (max_batch at a time). A call started
// in one handler is in flight once the next handler runs: what that one starts queues behind it.
class Loop {
 public:
  Loop() : thread_([this] { io_.run(); }) {}
  ~Loop() {
    work_.reset();
    thread_.join();
  }
  asio::any_io_executor executor() { return io_.get_executor(); }
  // Runs f on the loop's thread and waits for it.
  template <class F>
  void run(F f) {
    std::promise<void> ran;
    asio::post(io_, [&] {
      f();
      ran.set_value();
    });
    ran.get_future().get();
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::thread thread_;
};

// A store on the loop, connected to the server, with these options (address and connect timeout
// filled in); null, having failed the test, when it cannot be.
std::unique_ptr<redis::RedisStore> connected(const RedisServer& server, Loop& loop,
                                             redis::RedisStoreOptions options) {
  options.address = server.address();
  options.connect_timeout = 2000ms;
  auto store = redis::RedisStore::open(loop.executor(), std::move(options));
  EXPECT_TRUE(store.ok()) << store.error().message;
  if (!store.ok()) return nullptr;
  EXPECT_TRUE((*store)->connect().ok());
  return std::move(*store);
}

// Collects the answers of n calls.
struct Answers {
  explicit Answers(std::size_t n) : results(n, Error{ErrorCode::kNotFound, "not answered"}), left(n) {}
  void set(std::size_t i, Result<std::vector<Decision>> r) {
    std::lock_guard lock(mutex);
    results[i] = std::move(r);
    ++times_answered;
    if (--left == 0) all.set_value();
  }
  void wait() { all.get_future().get(); }

  std::mutex mutex;
  std::vector<Result<std::vector<Decision>>> results;
  std::size_t left;
  std::size_t times_answered = 0;
  std::promise<void> all;
};

class BatchingTest : public RedisTest, public ::testing::WithParamInterface<int> {
 protected:
  struct Call {
    std::int64_t at_us;
    std::vector<LimitRequest> requests;
    // A release instead: gives back the lease that the prelude's call `release` took (see run()),
    // and answers one decision, allowed when the lease was held.
    std::optional<std::size_t> release = std::nullopt;
  };
  // What a key holds, as far as two runs can compare it (lease ids are random: a lease set counts
  // by its size and its hash by the permits in flight).
  struct State {
    std::string value;
    long ttl_ms = 0;
  };

  struct Outcome {
    std::vector<Result<std::vector<Decision>>> answers;  // the calls'
    std::map<std::string, State> after_calls;            // what Redis held then, looked at when
    std::chrono::steady_clock::time_point looked;
    // Then every lease the calls took given back, in the order taken: whether each was held.
    std::vector<Result<std::vector<Decision>>> given_back;
  };

  // Makes the prelude's calls one at a time, keeping the lease of each one's first decision; then
  // starts every call at once on a store with this max_batch (they go max_batch at a time),
  // each at its time, and once all have answered, each exactly once, gives back every lease they
  // took, again all at once, at the last call's time. A release answers one decision, allowed
  // when the lease was held.
  Outcome run(const std::vector<Call>& calls, int max_batch, const std::vector<Call>& prelude = {}) {
    ManualClock clock{Nanos{kT0us * 1000}};
    // First: they outlive the loop and the store, whatever answers late.
    Answers answers(calls.size());
    std::vector<std::pair<const LimitRequest*, std::uint64_t>> taken;
    std::optional<Answers> given_back;
    Loop loop;
    auto release = [&](redis::RedisStore& store, const LimitRequest& took, std::uint64_t lease, Answers& to,
                       std::size_t i) {
      store.async_release(took.key, *took.limit, lease, [&to, i](Result<bool> r) {
        to.set(i, r ? Result<std::vector<Decision>>(std::vector<Decision>{{.allowed = *r}})
                    : Result<std::vector<Decision>>(r.error()));
      });
    };
    auto store = redis::RedisStore::open(
        loop.executor(), {.address = server_->address(),
                          .connect_timeout = 2000ms,
                          .command_timeout = 2000ms,
                          .max_batch = max_batch,
                          .pinned_clock = &clock});
    EXPECT_TRUE(store.ok()) << store.error().message;
    if (!store.ok()) return {};
    EXPECT_TRUE((*store)->connect().ok());
    std::vector<std::uint64_t> held;
    for (const Call& call : prelude) {
      clock.set(Nanos{call.at_us * 1000});
      std::vector<Decision> decisions(call.requests.size());
      EXPECT_TRUE((*store)->acquire_all(call.requests, decisions).ok());
      held.push_back(decisions.front().lease);
    }
    loop.run([&] {
      for (std::size_t i = 0; i < calls.size(); ++i) {
        const Call& call = calls[i];
        clock.set(Nanos{call.at_us * 1000});
        if (call.release) {
          release(**store, prelude[*call.release].requests.front(), held[*call.release], answers, i);
          continue;
        }
        (*store)->async_acquire_all(call.requests, [&answers, i](Result<std::vector<Decision>> r) {
          answers.set(i, std::move(r));
        });
      }
    });
    answers.wait();
    EXPECT_EQ(answers.times_answered, calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].release || !answers.results[i].ok()) continue;
      for (std::size_t j = 0; j < calls[i].requests.size(); ++j) {
        const std::uint64_t lease = (*answers.results[i])[j].lease;
        if (lease != 0) taken.push_back({&calls[i].requests[j], lease});
      }
    }
    Outcome out{.answers = std::move(answers.results), .after_calls = states(),
                .looked = std::chrono::steady_clock::now(), .given_back = {}};
    given_back.emplace(taken.size());
    if (!taken.empty()) {
      loop.run([&] {
        clock.set(Nanos{calls.back().at_us * 1000});
        for (std::size_t i = 0; i < taken.size(); ++i) release(**store, *taken[i].first, taken[i].second, *given_back, i);
      });
      given_back->wait();
    }
    out.given_back = std::move(given_back->results);
    return out;
  }

  // Runs the calls one call each (pipelined, the behaviour before batching), for the states they
  // leave; then batched, and checks that each answer is LocalStore's (a release's, the one in
  // sequence), that the leases taken are given back as in sequence, that Redis holds the same keys,
  // values and TTLs, and that the calls went max_batch at a time, and so did the releases after
  // them. The prelude goes first in both runs (see run()).
  void expect_batched_as_in_sequence(const std::vector<Call>& calls, int max_batch,
                                     const std::vector<Call>& prelude = {}) {
    server_->cli({"FLUSHALL"});
    Outcome in_sequence;
    ASSERT_NO_FATAL_FAILURE(in_sequence = run(calls, 1, prelude));
    const std::map<std::string, State> sequential = states();
    const auto last_look = std::chrono::steady_clock::now();
    server_->cli({"FLUSHALL"});
    server_->cli({"CONFIG", "RESETSTAT"});
    Outcome batched_run;
    ASSERT_NO_FATAL_FAILURE(batched_run = run(calls, max_batch, prelude));
    const auto& answers = batched_run.answers;
    ASSERT_EQ(batched_run.given_back.size(), in_sequence.given_back.size());
    for (std::size_t i = 0; i < batched_run.given_back.size(); ++i) {
      ASSERT_TRUE(batched_run.given_back[i].ok() && in_sequence.given_back[i].ok()) << "lease " << i;
      EXPECT_EQ(batched_run.given_back[i]->front().allowed, in_sequence.given_back[i]->front().allowed)
          << "lease " << i;
    }

    ManualClock clock{Nanos{kT0us * 1000}};
    LocalStore local({.clock = &clock});
    std::vector<std::uint64_t> held;
    for (const Call& call : prelude) {
      std::vector<Decision> decisions(call.requests.size());
      ASSERT_TRUE(local.acquire_all_at(Nanos{call.at_us * 1000}, call.requests, decisions).ok());
      held.push_back(decisions.front().lease);
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto& got = answers[i];
      ASSERT_TRUE(got.ok()) << "call " << i << ": " << got.error().message;
      if (calls[i].release) {
        const LimitRequest& took = prelude[*calls[i].release].requests.front();
        clock.set(Nanos{calls[i].at_us * 1000});
        ASSERT_TRUE(local.release(took.key, *took.limit, held[*calls[i].release]).ok());
        ASSERT_TRUE(in_sequence.answers[i].ok());
        EXPECT_EQ(got->front().allowed, in_sequence.answers[i]->front().allowed) << "release " << i;
        continue;
      }
      std::vector<Decision> expected(calls[i].requests.size());
      ASSERT_TRUE(local.acquire_all_at(Nanos{calls[i].at_us * 1000}, calls[i].requests, expected).ok());
      ASSERT_EQ(got->size(), expected.size());
      for (std::size_t j = 0; j < expected.size(); ++j) {
        Decision x = expected[j];
        Decision y = (*got)[j];
        EXPECT_EQ(x.lease != 0, y.lease != 0) << "call " << i << " limit " << j;
        x.lease = y.lease = 0;
        ASSERT_EQ(x, y) << "call " << i << " limit " << j << " (" << calls[i].requests[j].limit->to_string()
                        << ", key " << calls[i].requests[j].key << ", cost " << calls[i].requests[j].cost << ")";
      }
    }
    // A batch's writes leave what the calls in sequence left, and so do the releases after them.
    EXPECT_FALSE(batched_run.after_calls.empty());
    expect_same_states(batched_run.after_calls, in_sequence.after_calls, in_sequence.looked, "after the calls");
    expect_same_states(states(), sequential, last_look, "after the releases");
    // The prelude's calls go one by one; then the calls, max_batch at a time; then the releases,
    // the same way.
    auto calls_for = [max_batch](std::size_t n) -> long {
      return (static_cast<long>(n) + max_batch - 1) / max_batch;
    };
    EXPECT_EQ(script_calls(*server_), static_cast<long>(prelude.size()) + calls_for(calls.size()) +
                                           calls_for(batched_run.given_back.size()));
  }

  // The same keys, values and TTLs (to within the time between the two looks, the earlier at
  // `looked`), and no key without a TTL.
  static void expect_same_states(const std::map<std::string, State>& batched,
                                 const std::map<std::string, State>& sequential,
                                 std::chrono::steady_clock::time_point looked, const char* when) {
    // Plus what a busy machine adds between a run's last write and its look (up to 400 ms seen in
    // CI with two test processes on two CPUs): a wrong TTL is off by a period or a minute.
    const double drift_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - looked).count() + 500;
    for (const auto& [name, state] : batched) {
      EXPECT_GT(state.ttl_ms, 0) << name << " has no TTL " << when;
      const auto it = sequential.find(name);
      if (it == sequential.end()) {
        ADD_FAILURE() << name << " is left by the batched calls only, " << when;
        continue;
      }
      EXPECT_EQ(state.value, it->second.value) << name << " " << when;
      EXPECT_NEAR(static_cast<double>(state.ttl_ms), static_cast<double>(it->second.ttl_ms), drift_ms)
          << name << " " << when;
    }
    EXPECT_EQ(batched.size(), sequential.size()) << when;
  }

  std::map<std::string, State> states() {
    std::map<std::string, State> out;
    std::istringstream names(server_->cli({"KEYS", "*"}));
    for (std::string name; std::getline(names, name);) {
      State& s = out[name];
      const std::string type = server_->cli({"TYPE", name});
      if (type == "string") s.value = server_->cli({"GET", name});
      else if (type == "list") s.value = server_->cli({"LRANGE", name, "0", "-1"});
      else if (type == "zset") s.value = "zset of " + server_->cli({"ZCARD", name});
      else if (type == "hash") s.value = server_->cli({"HMGET", name, "n", "t", "e"});
      else s.value = type;
      s.ttl_ms = std::stol(server_->cli({"PTTL", name}));
    }
    return out;
  }
};

// Seeded random acquire_all calls of one to three limits (every algorithm, two keys, costs up to
// beyond a limit), at times that move forward, stand still and go back; every call started at
// once, so that all but the first queue.
TEST_P(BatchingTest, QueuedCallsDecideAsLocalStoreInTheirOrder) {
  const int max_batch = GetParam();
  const std::vector<Limit> limits = {
      make(Limit::token_bucket({.capacity = 5, .refill_tokens = 2, .refill_period = 1s})),
      make(Limit::token_bucket({.capacity = 4, .refill_tokens = 3, .refill_period = 1s, .refill = Refill::kInterval})),
      make(Limit::gcra({.limit = 3, .period = 1s, .burst = 3})),
      make(Limit::fixed_window({.limit = 4, .period = 1s})),
      make(Limit::sliding_window({.limit = 4, .period = 1s})),
      make(Limit::sliding_log({.limit = 4, .period = 1s})),
      make(Limit::concurrency({.limit = 3, .lease_timeout = 2s})),
  };
  // Two keys per limit: limits of one kind on one key would share a state (a continuous token
  // bucket and GCRA do too), which no caller means.
  std::vector<std::string> keys;
  for (std::size_t l = 0; l < limits.size(); ++l) {
    for (const char* k : {"a", "b"}) keys.push_back(k + std::to_string(l));
  }
  std::mt19937_64 rng(42);
  std::vector<Call> calls(300);
  std::int64_t now = kT0us;
  for (Call& call : calls) {
    const auto r = rng() % 10;
    if (r < 5) now += static_cast<std::int64_t>(rng() % 200'000);
    else if (r < 6) now -= static_cast<std::int64_t>(rng() % 50'000);
    call.at_us = now;
    const std::size_t n = 1 + rng() % 3;
    while (call.requests.size() < n) {
      const std::size_t l = rng() % limits.size();
      const std::string& key = keys[2 * l + rng() % 2];
      const std::int64_t cost = rng() % 8 == 0 ? 6 : 1 + static_cast<std::int64_t>(rng() % 2);
      // A call names each state once (as the gateway's system, interface and grant limits do).
      const bool named = std::any_of(call.requests.begin(), call.requests.end(),
                                     [&](const LimitRequest& other) { return other.key == key; });
      if (!named) call.requests.push_back({key, &limits[l], cost, OnStoreFailure::kError});
    }
  }

  expect_batched_as_in_sequence(calls, max_batch);
}

// Calls as the gateway makes them under load: mostly the same limit on the same key at one time,
// which a batch sends as runs of like calls, broken by calls of two limits, by calls with a
// concurrency limit (a run of their own, each call with its own lease id), and by time moving on.
// The runs must decide call by call, as LocalStore does: the limit runs out in the middle of a run.
TEST_P(BatchingTest, RunsOfLikeCallsDecideAsLocalStoreInTheirOrder) {
  const int max_batch = GetParam();
  const Limit fixed = make(Limit::fixed_window({.limit = 50, .period = 1s}));
  const Limit sliding = make(Limit::sliding_window({.limit = 30, .period = 1s}));
  const Limit leases = make(Limit::concurrency({.limit = 5, .lease_timeout = 2s}));
  std::vector<Call> calls(240);
  std::int64_t now = kT0us;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (i % 60 == 30) now += 700'000;  // inside a run of like calls: the time ends it
    Call& call = calls[i];
    call.at_us = now;
    call.requests.push_back({"hot", &fixed, 1, OnStoreFailure::kError});
    if (i % 25 == 24) call.requests.push_back({"other", &sliding, 2, OnStoreFailure::kError});
    // Two like calls in a row with a lease each: one run, with a lease id each.
    if (i % 40 >= 38) call.requests.push_back({"pool", &leases, 1, OnStoreFailure::kError});
  }
  expect_batched_as_in_sequence(calls, max_batch);
}

// Leases taken and given back in one batch, which many.lua keeps in a record of the state and
// writes at its end: two lease timeouts on one key (the newest lease is not always the last to
// expire, and a lease given back may have been), two keys in one call (each with its own lease id:
// the second key's leases, which do not time out here, are all given back at the end), costs
// beyond the quota, leases given back twice, and times that move on past a timeout (leases taken
// in the batch expire in it), stand still and go back.
TEST_P(BatchingTest, LeasesInABatchDecideAsLocalStoreInTheirOrder) {
  const int max_batch = GetParam();
  const Limit shorter = make(Limit::concurrency({.limit = 8, .lease_timeout = 1s}));
  const Limit longer = make(Limit::concurrency({.limit = 8, .lease_timeout = 3s}));
  const Limit spare = make(Limit::concurrency({.limit = 1000, .lease_timeout = 1h}));
  std::mt19937_64 rng(7);
  std::int64_t now = kT0us;
  std::vector<Call> prelude;
  for (int i = 0; i < 8; ++i) {
    now += 100'000;
    if (i < 6) prelude.push_back({now, {{"pool", i % 2 == 0 ? &shorter : &longer, 1, OnStoreFailure::kError}}});
    else prelude.push_back({now, {{"spare", &spare, 1, OnStoreFailure::kError}}});
  }
  std::vector<Call> calls(200);
  for (Call& call : calls) {
    const auto r = rng() % 12;
    if (r < 5) now += static_cast<std::int64_t>(rng() % 300'000);
    else if (r < 6) now -= static_cast<std::int64_t>(rng() % 50'000);
    else if (r < 7) now += 1'200'000;
    call.at_us = now;
    if (rng() % 10 < 3) {
      call.release = rng() % prelude.size();
      continue;
    }
    const std::int64_t cost = rng() % 10 == 0 ? 9 : 1 + static_cast<std::int64_t>(rng() % 2);
    call.requests.push_back({"pool", rng() % 2 == 0 ? &shorter : &longer, cost, OnStoreFailure::kError});
    if (rng() % 5 == 0) call.requests.push_back({"spare", &spare, 1, OnStoreFailure::kError});
  }
  expect_batched_as_in_sequence(calls, max_batch, prelude);
}

// Releases queue as acquires do and go in their batch: each gives its lease back at its place in
// the order asked, so that the acquires after it (and only those) find the permit free; a lease
// given back twice is held only the first time, even once every lease was given back.
TEST_P(BatchingTest, ReleasesGoInBatchesInTheirOrder) {
  const int max_batch = GetParam();
  const Limit leases = make(Limit::concurrency({.limit = 2, .lease_timeout = 10s}));
  ManualClock clock{Nanos{kT0us * 1000}};
  Loop loop;
  const auto store =
      connected(*server_, loop, {.command_timeout = 2000ms, .max_batch = max_batch, .pinned_clock = &clock});
  ASSERT_NE(store, nullptr);
  server_->cli({"FLUSHALL"});
  const std::vector<LimitRequest> acquire = {{"pool", &leases, 1, OnStoreFailure::kError}};
  std::vector<std::uint64_t> held;
  for (int i = 0; i < 2; ++i) {
    auto d = store->acquire(acquire.front());
    ASSERT_TRUE(d.ok() && d->allowed && d->lease != 0);
    held.push_back(d->lease);
  }
  server_->cli({"CONFIG", "RESETSTAT"});

  // In the order started: 'a' an acquire, 'r' a release of held[i] (its expected answer after it).
  struct Step {
    char kind;
    std::size_t lease;
    bool expected;
  };
  const std::vector<Step> steps = {
      {'a', 0, false},  // full
      {'r', 0, true},
      {'r', 0, false},  // given back already
      {'r', 1, true},   // the pool is empty: its state is forgotten
      {'r', 1, false}, {'r', 0, false},  // given back before it was
      {'a', 0, true},  {'a', 0, true},  {'a', 0, false}, {'r', 1, false},
  };
  std::mutex mutex;
  std::vector<std::optional<Result<bool>>> answers(steps.size());
  std::promise<void> all;
  std::size_t left = steps.size();
  auto answered = [&](std::size_t i, Result<bool> r) {
    std::lock_guard lock(mutex);
    answers[i] = std::move(r);
    if (--left == 0) all.set_value();
  };
  loop.run([&] {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].kind == 'r') {
        store->async_release("pool", leases, held[steps[i].lease],
                             [&answered, i](Result<bool> r) { answered(i, std::move(r)); });
      } else {
        store->async_acquire_all(acquire, [&answered, i](Result<std::vector<Decision>> r) {
          answered(i, r ? Result<bool>(r->front().allowed) : Result<bool>(r.error()));
        });
      }
    }
  });
  all.get_future().get();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(answers[i]->ok()) << "step " << i << ": " << answers[i]->error().message;
    EXPECT_EQ(**answers[i], steps[i].expected) << "step " << i << " (" << steps[i].kind << ")";
  }
  // max_batch at a time.
  EXPECT_EQ(script_calls(*server_), (static_cast<long>(steps.size()) + max_batch - 1) / max_batch);
  EXPECT_EQ(server_->cli({"HGET", "sluice:{pool}:cc:meta", "n"}), "2");
}

INSTANTIATE_TEST_SUITE_P(MaxBatch, BatchingTest, ::testing::Values(1, 7, 64),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param); });

// The calls started during one turn of the loop go together when it ends; those that come while
// that call is in flight (held here by a paused server) wait, and go together when it answers.
// Each is decided in the order started.
TEST_F(RedisTest, CallsOfATurnGoTogetherAndThoseThatComeInFlightGoWhenItAnswers) {
  const Limit limit = make(Limit::fixed_window({.limit = 100, .period = 1h}));
  const std::vector<LimitRequest> request = {{"k", &limit, 1, OnStoreFailure::kError}};
  constexpr std::size_t kFirst = 5, kCalls = 12;
  Answers answers(kCalls);
  Loop loop;
  const auto store = connected(*server_, loop, {.command_timeout = 5000ms});
  ASSERT_NE(store, nullptr);
  server_->cli({"CONFIG", "RESETSTAT"});
  ASSERT_EQ(server_->cli({"CLIENT", "PAUSE", "5000", "WRITE"}), "OK");  // every script call waits
  auto start = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      store->async_acquire_all(request, [&answers, i](Result<std::vector<Decision>> r) {
        answers.set(i, std::move(r));
      });
    }
  };
  loop.run([&] { start(0, kFirst); });
  loop.run([&] { start(kFirst, kCalls); });
  EXPECT_EQ(answers.times_answered, 0u);
  server_->cli({"CLIENT", "UNPAUSE"});
  answers.wait();
  EXPECT_EQ(script_calls(*server_), 2);
  for (std::size_t i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(answers.results[i].ok()) << "call " << i << ": " << answers.results[i].error().message;
    EXPECT_EQ(answers.results[i]->front().remaining, static_cast<std::int64_t>(100 - 1 - i)) << "call " << i;
  }
}

// A call that waits for the end of a turn which outlasts the call's deadline fails with a timeout
// and is never sent: sent late, it could take from a limit after its caller was told it timed out
// (and decided by its on_store_failure).
TEST_F(RedisTest, ACallWhoseTurnOutlastsItsDeadlineFailsUnsent) {
  const Limit limit = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  const std::vector<LimitRequest> request = {{"late", &limit, 1, OnStoreFailure::kError}};
  Answers answers(1);
  Loop loop;
  const auto store = connected(*server_, loop, {.command_timeout = 5ms});
  ASSERT_NE(store, nullptr);
  server_->cli({"CONFIG", "RESETSTAT"});
  loop.run([&] {
    store->async_acquire_all(request, [&answers](Result<std::vector<Decision>> r) { answers.set(0, std::move(r)); });
    std::this_thread::sleep_for(20ms);  // the rest of a slow turn
  });
  answers.wait();
  ASSERT_FALSE(answers.results[0].ok());
  EXPECT_EQ(answers.results[0].error().code, ErrorCode::kTimeout);
  EXPECT_EQ(script_calls(*server_), 0);
  EXPECT_EQ(server_->cli({"EXISTS", "sluice:{late}:fw"}), "0");
}

// Calls queued behind one that times out: each completes once, with a timeout, and none waits
// past its own deadline (they went when the first timed out, with deadlines of their own, not
// another timeout from then).
TEST_F(RedisTest, QueuedCallsBehindATimeoutEachFailOnce) {
  constexpr auto kTimeout = 300ms;
  const Limit limit = make(Limit::fixed_window({.limit = 1000, .period = 1s}));
  constexpr std::size_t kCalls = 100;
  Answers answers(kCalls);
  Loop loop;
  const auto store = connected(*server_, loop, {.command_timeout = kTimeout});
  ASSERT_NE(store, nullptr);
  server_->cli({"CLIENT", "PAUSE", "5000", "WRITE"});  // every script call waits
  const std::vector<LimitRequest> request = {{"k", &limit, 1, OnStoreFailure::kError}};
  const auto started = std::chrono::steady_clock::now();
  auto start = [&](std::size_t i) {
    store->async_acquire_all(request, [&answers, i](Result<std::vector<Decision>> r) {
      answers.set(i, std::move(r));
    });
  };
  loop.run([&] { start(0); });
  loop.run([&] {  // the first is in flight: these queue behind it
    for (std::size_t i = 1; i < kCalls; ++i) start(i);
  });
  answers.wait();
  const auto took = std::chrono::steady_clock::now() - started;
  server_->cli({"CLIENT", "UNPAUSE"});
  EXPECT_EQ(answers.times_answered, kCalls);
  for (std::size_t i = 0; i < kCalls; ++i) {
    ASSERT_FALSE(answers.results[i].ok()) << "call " << i;
    EXPECT_EQ(answers.results[i].error().code, ErrorCode::kTimeout) << "call " << i;
  }
  EXPECT_LT(took, 2 * kTimeout) << "queued calls waited a second timeout";
}

// A release queued behind a call that times out is still sent (an acquire would fail unsent):
// late, it gives its permit back, where dropped it would keep it taken until the lease times out.
TEST_F(RedisTest, AReleaseQueuedPastItsDeadlineIsStillSent) {
  constexpr auto kTimeout = 300ms;
  const Limit limit = make(Limit::concurrency({.limit = 2, .lease_timeout = 1h}));
  Loop loop;
  const auto store = connected(*server_, loop, {.command_timeout = kTimeout});
  ASSERT_NE(store, nullptr);
  const auto held = store->acquire("pool", limit);
  ASSERT_TRUE(held.ok() && held->allowed);
  server_->cli({"CLIENT", "PAUSE", "5000", "WRITE"});  // every script call waits
  const std::vector<LimitRequest> request = {{"pool", &limit, 1, OnStoreFailure::kError}};
  std::promise<Result<std::vector<Decision>>> acquired;
  std::promise<Result<bool>> released;
  loop.run([&] {
    store->async_acquire_all(request, [&](Result<std::vector<Decision>> r) {
      acquired.set_value(std::move(r));
    });
  });
  loop.run([&] {  // the acquire is in flight: the release queues behind it
    store->async_release("pool", limit, held->lease,
                         [&](Result<bool> r) { released.set_value(std::move(r)); });
  });
  const auto a = acquired.get_future().get();
  const auto r = released.get_future().get();
  server_->cli({"CLIENT", "UNPAUSE"});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, ErrorCode::kTimeout);
  ASSERT_FALSE(r.ok());  // sent, but not answered within its (new) deadline
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
  // Both ran once Redis resumed (a timed-out call may have run): the acquire took a permit, which
  // the store gave back (its caller never had it), and the release gave the first one back. A peek
  // goes after them on the same connection.
  const auto now = store->peek("pool", limit);
  ASSERT_TRUE(now.ok()) << now.error().message;
  EXPECT_EQ(now->remaining, 2);
}

// A call whose state is not sluice's fails alone: the calls batched with it are decided, and the
// key is left as it was.
// A call that fails on its second limit (a key holding what sluice did not write) after its
// concurrency limit dropped expired leases: the state's count stays that of the leases in its set,
// whether the call went alone (acquire.lua) or in a batch (many.lua), and the next acquire is
// decided by the leases held.
TEST_F(RedisTest, AFailedCallLeavesAConcurrencyCountWithItsLeases) {
  const Limit leases = make(Limit::concurrency({.limit = 3, .lease_timeout = 100ms}));
  const Limit window = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  const std::vector<LimitRequest> failing = {{"pool", &leases, 1, OnStoreFailure::kError},
                                             {"bad", &window, 1, OnStoreFailure::kError}};
  const std::vector<LimitRequest> other = {{"other", &window, 1, OnStoreFailure::kError}};
  for (const bool batched : {false, true}) {
    server_->cli({"FLUSHALL"});
    const Nanos t0{kT0us * 1000};
    ManualClock clock{t0};
    Loop loop;
    const auto store = connected(*server_, loop, {.command_timeout = 2000ms, .pinned_clock = &clock});
    ASSERT_NE(store, nullptr);
    for (const auto at : {0ms, 10ms, 50ms}) {
      clock.set(t0 + at);
      const auto d = store->acquire("pool", leases);
      ASSERT_TRUE(d.ok() && d->allowed);
    }
    server_->cli({"HSET", "sluice:{bad}:fw", "not", "a window"});
    clock.set(t0 + 120ms);  // the first two leases have expired
    if (batched) {
      // The three go together.
      Answers answers(3);
      loop.run([&] {
        const std::vector<const std::vector<LimitRequest>*> calls = {&other, &failing, &other};
        for (std::size_t i = 0; i < calls.size(); ++i) {
          store->async_acquire_all(*calls[i], [&answers, i](Result<std::vector<Decision>> r) {
            answers.set(i, std::move(r));
          });
        }
      });
      answers.wait();
      EXPECT_FALSE(answers.results[1].ok());
      EXPECT_TRUE(answers.results[2].ok());
    } else {
      std::vector<Decision> decisions(failing.size());
      EXPECT_FALSE(store->acquire_all(failing, decisions).ok());
    }
    const std::string held = server_->cli({"ZCARD", "sluice:{pool}:cc"});
    EXPECT_EQ(server_->cli({"HGET", "sluice:{pool}:cc:meta", "n"}), held) << (batched ? "batched" : "alone");
    const auto next = store->acquire("pool", leases);
    ASSERT_TRUE(next.ok()) << next.error().message;
    EXPECT_TRUE(next->allowed) << (batched ? "batched" : "alone");
    EXPECT_EQ(next->remaining, 3 - std::stol(held) - 1) << (batched ? "batched" : "alone");
  }
}

TEST_F(RedisTest, ACallThatFailsInABatchFailsAlone) {
  const Limit limit = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  server_->cli({"SET", "sluice:{bad}:fw", "not a window"});
  const std::vector<std::vector<LimitRequest>> calls = {
      {{"good", &limit, 1, OnStoreFailure::kError}},  // the three go together
      {{"bad", &limit, 1, OnStoreFailure::kError}},
      {{"good", &limit, 1, OnStoreFailure::kError}},
  };
  Answers answers(calls.size());
  Loop loop;
  const auto store = connected(*server_, loop, {.command_timeout = 2000ms});
  ASSERT_NE(store, nullptr);
  server_->cli({"CONFIG", "RESETSTAT"});
  loop.run([&] {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      store->async_acquire_all(calls[i], [&answers, i](Result<std::vector<Decision>> r) {
        answers.set(i, std::move(r));
      });
    }
  });
  answers.wait();
  EXPECT_EQ(script_calls(*server_), 1);
  ASSERT_TRUE(answers.results[0].ok()) << answers.results[0].error().message;
  EXPECT_EQ(answers.results[0]->front().remaining, 9);
  ASSERT_FALSE(answers.results[1].ok());
  EXPECT_EQ(answers.results[1].error().code, ErrorCode::kProtocol);
  ASSERT_TRUE(answers.results[2].ok()) << answers.results[2].error().message;
  EXPECT_EQ(answers.results[2]->front().remaining, 8);
  EXPECT_EQ(server_->cli({"GET", "sluice:{bad}:fw"}), "not a window");
}

}  // namespace
}  // namespace sluice::testing
