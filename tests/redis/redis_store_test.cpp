// RedisStore on one node: decisions, peek / reset / release, all-or-nothing acquire_all in one
// script call, the TTL rule, NOSCRIPT recovery, async use from callbacks and coroutines.
#include "sluice/redis/redis_store.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <sstream>

#include "redis/scripts.h"
#include "store_fixture.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using redis::RedisStore;
using redis::RedisStoreOptions;

// How many times Redis ran `command` (INFO commandstats).
long long calls(RedisServer& server, const std::string& command) {
  std::istringstream lines(server.cli({"INFO", "commandstats"}));
  const std::string prefix = "cmdstat_" + command + ":calls=";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size()));
  }
  return 0;
}

class RedisStoreTest : public RedisTest {};

TEST_F(RedisStoreTest, AdmitsUpToTheLimitThenTellsWhenToRetry) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 3, .period = 1h}));
  for (int i = 0; i < 3; ++i) {
    auto d = store->acquire("user:1", limit);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->remaining, 2 - i);
    EXPECT_EQ(d->limit, 3);
  }
  auto d = store->acquire("user:1", limit);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_GT(d->retry_after, 0ns);
  EXPECT_LE(d->retry_after, 1h);
  EXPECT_TRUE(store->acquire("user:2", limit)->allowed);
}

// connect() is optional: calls made at once after open(), from many threads, wait for the first
// connection instead of failing as "not connected" (and opening the store's breaker).
TEST_F(RedisStoreTest, CallsMadeRightAfterOpenWaitForTheFirstConnection) {
  expect_calls_right_after_open_to_wait(server_->address());
}

TEST_F(RedisStoreTest, OneScriptCallPerDecision) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::gcra({.limit = 100, .period = 1s, .burst = 10}));
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store->acquire("k", limit).ok());
  EXPECT_EQ(calls(*server_, "evalsha"), 50);
}

TEST_F(RedisStoreTest, PeekConsumesNothingAndResetForgets) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::sliding_log({.limit = 3, .period = 1min}));
  ASSERT_TRUE(store->acquire("k", limit, 2)->allowed);
  EXPECT_EQ(store->peek("k", limit)->remaining, 1);
  EXPECT_EQ(store->peek("k", limit)->remaining, 1);
  ASSERT_TRUE(store->reset("k", limit).ok());
  EXPECT_EQ(store->peek("k", limit)->remaining, 3);
  EXPECT_EQ(server_->cli({"DBSIZE"}), "0");
}

TEST_F(RedisStoreTest, ReleaseGivesALeaseBack) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::concurrency({.limit = 2, .lease_timeout = 1min}));
  auto a = store->acquire("jobs", limit);
  auto b = store->acquire("jobs", limit);
  ASSERT_TRUE(a->allowed && b->allowed);
  EXPECT_NE(a->lease, 0u);
  EXPECT_NE(a->lease, b->lease);
  EXPECT_FALSE(store->acquire("jobs", limit)->allowed);
  ASSERT_TRUE(store->release("jobs", limit, a->lease).ok());
  EXPECT_TRUE(store->acquire("jobs", limit)->allowed);
  // Releasing twice is no error, and gives nothing more back.
  ASSERT_TRUE(store->release("jobs", limit, a->lease).ok());
  EXPECT_FALSE(store->acquire("jobs", limit)->allowed);
}

TEST_F(RedisStoreTest, RefusesBadArguments) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 3, .period = 1s}));
  EXPECT_EQ(store->acquire("k", limit, 0).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->acquire("k", limit, kMaxLimit + 1).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->release("k", limit, 1).error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(RedisStore::open({.address = "http://x"}).ok());
}

TEST(RedisStoreOptionsTest, BadOptionsAreRefusedWithWhatIsWrong) {
  const auto refused = [](RedisStoreOptions options, std::string_view why) {
    auto store = RedisStore::open(std::move(options));
    ASSERT_FALSE(store.ok()) << why;
    EXPECT_EQ(store.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(store.error().message.find(why), std::string::npos) << store.error().message;
  };
  refused({.max_batch = 0}, "max_batch must be at least 1");
  refused({.reconnect_min = 300ms}, "reconnect_min must be from 0 to reconnect_max");
  refused({.deny_retry_after = -1ms}, "deny_retry_after must not be negative");
  refused({.cluster_map_refresh = -1ms}, "cluster_map_refresh must not be negative");
}

TEST_F(RedisStoreTest, AcquireAllIsOneCallAndAllOrNothing) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit wide = make(Limit::token_bucket({.capacity = 10, .refill_tokens = 1, .refill_period = 1h}));
  const Limit narrow = make(Limit::fixed_window({.limit = 1, .period = 1h}));
  const Limit log = make(Limit::sliding_log({.limit = 10, .period = 1h}));
  const Limit jobs = make(Limit::concurrency({.limit = 10, .lease_timeout = 1h}));
  const LimitRequest requests[] = {
      {"system:a", &wide, 2}, {"api:x", &log, 3}, {"jobs", &jobs, 4}, {"interface:b", &narrow, 1}};
  Decision d[4];
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_TRUE(d[0].allowed && d[1].allowed && d[2].allowed && d[3].allowed);
  // One call, of the function library's acquire (defined once, not at each call).
  EXPECT_EQ(calls(*server_, "fcall"), 1);
  EXPECT_EQ(calls(*server_, "evalsha"), 0);
  // The narrow limit now rejects: nothing else may be consumed.
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_FALSE(d[3].allowed);
  EXPECT_EQ(store->peek("system:a", wide)->remaining, 8);
  EXPECT_EQ(store->peek("api:x", log)->remaining, 7);
  EXPECT_EQ(store->peek("jobs", jobs)->remaining, 6);
}

// Every key carries a TTL no longer than the time until its state is full (rounded up to Redis's
// millisecond), for every algorithm.
TEST_F(RedisStoreTest, EveryKeyHasATtlUntilFull) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  // Long enough that nothing is full again before the test has looked (epoch-aligned windows and
  // ticks end at any moment, so theirs are a year).
  const Nanos year = std::chrono::hours(24 * 365);
  const Limit limits[] = {
      make(Limit::token_bucket({.capacity = 10, .refill_tokens = 1, .refill_period = 1min})),
      make(Limit::token_bucket({.capacity = 10, .refill_tokens = 3, .refill_period = year, .refill = Refill::kInterval})),
      make(Limit::gcra({.limit = 5, .period = 1min, .burst = 2})),
      make(Limit::fixed_window({.limit = 5, .period = year})),
      make(Limit::sliding_window({.limit = 5, .period = 1min})),
      make(Limit::sliding_log({.limit = 5, .period = 1min})),
      make(Limit::concurrency({.limit = 5, .lease_timeout = 1min})),
  };
  for (const Limit& limit : limits) {
    auto d = store->acquire("k", limit, 2);
    ASSERT_TRUE(d.ok() && d->allowed) << limit.to_string();
    const auto reset_ms = (d->reset_after.count() + 999'999) / 1'000'000;
    std::istringstream keys(server_->cli({"KEYS", "*"}));
    int n = 0;
    for (std::string key; std::getline(keys, key); ++n) {
      const long long ttl = std::stoll(server_->cli({"PTTL", key}));
      EXPECT_GT(ttl, 0) << key;
      EXPECT_LE(ttl, reset_ms) << key << " " << limit.to_string();
    }
    EXPECT_GE(n, 1) << limit.to_string();
    server_->cli({"FLUSHALL"});
  }
}

// A refund (a cluster's acquire_all giving back what one slot took) can remove the only entry of
// a sliding log still in the window. The state is then forgotten, rather than saved with a TTL of
// zero or less, which Redis refuses after the entry is already gone (the count then stayed).
TEST_F(RedisStoreTest, ARefundThatLeavesOnlyExpiredLogEntriesForgetsTheLog) {
  std::istringstream time(server_->cli({"TIME"}));
  long long seconds = 0, micros = 0;
  time >> seconds >> micros;
  const long long now = seconds * 1'000'000 + micros;
  const std::string old_at = std::to_string(now - 60'500'000);  // out of a 60 s window
  const std::string new_at = std::to_string(now - 1'000'000);   // in it, taken back below
  server_->cli({"RPUSH", "t:log", old_at + ":1", new_at + ":1"});
  server_->cli({"SET", "t:meta", "2:" + new_at});
  // KEYS: the list and the meta key; ARGV: no pinned time, one limit: the sliding log's code,
  // cost 1, limit 2, period 60 s in microseconds, and the time the entry to take back was logged.
  const std::string reply = server_->cli({"EVAL", redis::detail::kRefundScript.source, "2", "t:log", "t:meta", "",
                                          "1", "sl", "1", "2", "60000000", new_at});
  EXPECT_EQ(reply, "1");
  EXPECT_EQ(server_->cli({"EXISTS", "t:log", "t:meta"}), "0");
}

// A cluster's acquire_all gives back what one slot took a round trip after it took it, when another
// slot rejected. By then a decision may have found a bucket full, which it would have found so
// sooner without the take: a give-back then would admit more than the limit. Each call below is
// what a store sends (KEYS, the pinned time, the number of limits, each one's code and ARGV, the
// last being the value its take answered for a refund).
class RedisRefundTest : public RedisTest {
 protected:
  static constexpr const redis::detail::Script& kAcquire = redis::detail::kAcquireScript;
  static constexpr const redis::detail::Script& kRefund = redis::detail::kRefundScript;
  std::string call(const redis::detail::Script& script, const std::string& key, const std::string& at,
                   std::vector<std::string> limit) {
    std::vector<std::string> args{"EVAL", script.source, "1", key, at, "1"};
    args.insert(args.end(), limit.begin(), limit.end());
    return server_->cli(args);
  }
  // The first of the six values a decision answers (1: admitted) and the last (for a refund).
  static std::pair<std::string, std::string> admitted_and_refund_value(const std::string& reply) {
    std::istringstream in(reply);
    std::vector<std::string> v;
    for (std::string line; std::getline(in, line);) v.push_back(line);
    if (v.size() != 6) return {"?", reply};
    return {v[0], v[5]};
  }
};

// GCRA, one per millisecond, no more at once (as the store sends it: 1 unit a microsecond, 1,000 a
// token). A take at 1,000,000 µs; another caller's at 1,001,500 finds the bucket full; the first
// take's refund at 1,001,600 must not give the bucket back a token it no longer holds.
TEST_F(RedisRefundTest, AMeterRefundAfterTheBucketWasFullAgainGivesNothingBack) {
  const auto gcra = [](const std::string& refund_value) {
    return std::vector<std::string>{"gcra", "1", "1", "1", "1000", "1000", "0", "1000", "0", refund_value};
  };
  const auto [taken, base] = admitted_and_refund_value(call(kAcquire, "m", "1000000", gcra("0")));
  ASSERT_EQ(taken, "1");
  EXPECT_EQ(base, "1000000");  // the take's time
  ASSERT_EQ(admitted_and_refund_value(call(kAcquire, "m", "1001500", gcra("0"))).first, "1");
  EXPECT_EQ(call(kRefund, "m", "1001600", gcra(base)), "1");
  EXPECT_EQ(admitted_and_refund_value(call(kAcquire, "m", "1001700", gcra("0"))).first, "0")
      << "two admitted within 200 µs at one per millisecond";
  // Otherwise the cost less the time since the take goes back: two a millisecond, the second take
  // at 5,000,100 (its TAT 5,002,000), given back 100 µs later: 900 µs of it.
  const std::vector<std::string> two{"gcra", "1", "2", "1", "1000", "2000", "0", "1000", "0", "0"};
  ASSERT_EQ(admitted_and_refund_value(call(kAcquire, "q", "5000000", two)).first, "1");
  const auto [second, second_at] = admitted_and_refund_value(call(kAcquire, "q", "5000100", two));
  ASSERT_EQ(second, "1");
  EXPECT_EQ(second_at, "5000100");
  std::vector<std::string> refund = two;
  refund.back() = second_at;
  EXPECT_EQ(call(kRefund, "q", "5000200", refund), "1");
  EXPECT_EQ(server_->cli({"GET", "q"}), "5001100:0");
  // A take from a full bucket, given back a round trip (300 µs) later with no decision between:
  // the cost less those 300 µs goes back, which leaves the bucket full again (the key gone).
  const auto [full, full_at] = admitted_and_refund_value(call(kAcquire, "f", "7000000", two));
  ASSERT_EQ(full, "1");
  EXPECT_EQ(full_at, "7000000");
  refund.back() = full_at;
  EXPECT_EQ(call(kRefund, "f", "7000300", refund), "1");
  EXPECT_EQ(server_->cli({"EXISTS", "f"}), "0");
}

// The interval bucket: ten tokens every second, all ten taken in tick 0; the bucket is full again at
// tick 1 and another caller takes all ten; the first take's refund must not give them back.
TEST_F(RedisRefundTest, AnIntervalRefundAfterATickRefilledTheBucketGivesNothingBack) {
  const auto tbi = [](const std::string& refund_value) {
    return std::vector<std::string>{"tbi", "10", "10", "10", "1000000", refund_value};
  };
  const auto [taken, tick] = admitted_and_refund_value(call(kAcquire, "i", "999999", tbi("0")));
  ASSERT_EQ(taken, "1");
  EXPECT_EQ(tick, "0");
  ASSERT_EQ(admitted_and_refund_value(call(kAcquire, "i", "1000001", tbi("0"))).first, "1");
  EXPECT_EQ(call(kRefund, "i", "1000002", tbi(tick)), "1");
  EXPECT_EQ(admitted_and_refund_value(call(kAcquire, "i", "1000003", tbi("0"))).first, "0")
      << "twenty admitted in one tick of ten";
  // Within the take's tick, it is given back.
  server_->cli({"DEL", "i"});
  const auto [fresh, fresh_tick] = admitted_and_refund_value(call(kAcquire, "i", "3000000", tbi("0")));
  ASSERT_EQ(fresh, "1");
  EXPECT_EQ(fresh_tick, "3");
  EXPECT_EQ(call(kRefund, "i", "3000001", tbi(fresh_tick)), "1");
  EXPECT_EQ(admitted_and_refund_value(call(kAcquire, "i", "3000002", tbi("0"))).first, "1");
}

// A decision that raises an error (a key holding what sluice did not write) fails its call, and
// the limits decided before it give back what they took, as for a rejection: the caller never
// learns of a lease taken before the error, which would otherwise hold its place for the lease
// timeout (ten minutes here), nor of a window's count.
TEST_F(RedisStoreTest, AnErrorInOneLimitGivesBackWhatTheLimitsBeforeItTook) {
  server_->cli({"RPUSH", "{b}:fw", "x"});
  const std::string reply = server_->cli({"EVAL", redis::detail::kAcquireScript.source, "4", "{a}:cc", "{a}:cc:meta", "{a}:fw",
                                          "{b}:fw", "", "3", "cc", "1", "1", "600000000", "12345", "0", "fw", "1", "10",
                                          "1000000", "0", "fw", "1", "10", "1000000", "0"});
  EXPECT_NE(reply.find("WRONGTYPE"), std::string::npos) << reply;
  EXPECT_EQ(server_->cli({"EXISTS", "{a}:cc", "{a}:cc:meta", "{a}:fw"}), "0");
}

// A script cut short after taking leases or log entries off (as an older sluice's was on a node
// migrating the slot, by a Redis that refused it a key it had emptied) leaves a count above what is
// left. A decision that finds what is left can never free what the call needs counts what is left,
// rather than fail with a Lua error until the state expires.
TEST_F(RedisStoreTest, ALeaseCountAboveWhatTheLeasesHoldIsCountedAgain) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit one = make(Limit::concurrency({.limit = 1, .lease_timeout = 1h}));
  const auto held = store->acquire("jobs", one);
  ASSERT_TRUE(held.ok() && held->allowed);
  server_->cli({"ZREM", "sluice:{jobs}:cc", std::to_string(held->lease)});  // n still counts it
  const auto d = store->acquire("jobs", one);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 0);
  EXPECT_FALSE(store->acquire("jobs", one)->allowed);
}

TEST_F(RedisStoreTest, ALogTotalAboveWhatItsEntriesHoldIsCountedAgain) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit two = make(Limit::sliding_log({.limit = 2, .period = 1h}));
  ASSERT_TRUE(store->acquire("calls", two)->allowed);
  const std::string meta = server_->cli({"GET", "sluice:{calls}:sl:meta"});
  ASSERT_EQ(meta.substr(0, 2), "1:") << meta;
  server_->cli({"SET", "sluice:{calls}:sl:meta", "5:" + meta.substr(2)});  // 5 counted, 1 logged
  const auto d = store->acquire("calls", two);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 0);
  EXPECT_FALSE(store->acquire("calls", two)->allowed);
}

TEST_F(RedisStoreTest, ReloadsScriptsAfterScriptFlush) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 5, .period = 1h}));
  ASSERT_TRUE(store->acquire("k", limit).ok());
  server_->cli({"SCRIPT", "FLUSH"});
  auto d = store->acquire("k", limit);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->remaining, 3);
  // Sent once more as EVAL, which loads it again; then EVALSHA finds it.
  EXPECT_EQ(calls(*server_, "eval"), 1);
  ASSERT_TRUE(store->acquire("k", limit).ok());
  EXPECT_EQ(calls(*server_, "eval"), 1);
  EXPECT_EQ(calls(*server_, "evalsha"), 3);
}

// A function library keeps its tables from one call to the next; what a call reads and writes of
// the states must not: a state changed between two calls is read afresh.
TEST_F(RedisStoreTest, AFunctionCallReadsStatesAfreshEachTime) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit window = make(Limit::fixed_window({.limit = 5, .period = 1h}));
  const Limit jobs = make(Limit::concurrency({.limit = 5, .lease_timeout = 1h}));
  const LimitRequest requests[] = {{"a", &window, 1}, {"jobs", &jobs, 1}};
  Decision d[2];
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_EQ(d[0].remaining, 4);
  EXPECT_EQ(d[1].remaining, 4);
  server_->cli({"FLUSHALL"});
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_EQ(d[0].remaining, 4);
  EXPECT_EQ(d[1].remaining, 4);
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_EQ(d[0].remaining, 3);
  EXPECT_EQ(d[1].remaining, 3);
  EXPECT_EQ(calls(*server_, "fcall"), 3);
}

// A server whose function library is gone (FUNCTION FLUSH) is called by script, which decides the
// same; so is one that refuses functions (a Redis before 7, or an ACL user without FCALL): the call
// that finds it goes again as EVAL, and the store's calls after it by EVALSHA.
TEST_F(RedisStoreTest, CallsByScriptWhereTheFunctionLibraryIsGone) {
  auto store = open_store(server_->address());
  ASSERT_NE(store, nullptr);
  const Limit window = make(Limit::fixed_window({.limit = 5, .period = 1h}));
  const LimitRequest requests[] = {{"a", &window, 1}, {"b", &window, 1}};
  Decision d[2];
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  server_->cli({"FUNCTION", "FLUSH"});
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_EQ(d[0].remaining, 3);
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_EQ(d[1].remaining, 2);
  EXPECT_EQ(calls(*server_, "fcall"), 2);
  EXPECT_EQ(calls(*server_, "eval"), 1);
  EXPECT_EQ(calls(*server_, "evalsha"), 1);
}

// Decides three all-or-nothing calls through a store on `address` of `server`, where FCALL cannot be
// used: the first FCALL fails and goes again as EVAL, the rest go by EVALSHA, and every decision is
// as the function's would be.
void expect_calls_by_script(RedisServer& server, const std::string& address) {
  auto store = open_store(address);
  ASSERT_NE(store, nullptr);
  const Limit window = make(Limit::fixed_window({.limit = 5, .period = 1h}));
  const LimitRequest requests[] = {{"a", &window, 1}, {"b", &window, 2}};
  Decision d[2];
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_EQ(d[0].remaining, 3);
  EXPECT_EQ(d[1].remaining, 1);
  // All or nothing: b has one left of the two it asks, so a gives back what it took.
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_FALSE(d[1].allowed);
  EXPECT_EQ(calls(server, "eval"), 1);
  EXPECT_EQ(calls(server, "evalsha"), 2);
  EXPECT_EQ(store->peek("a", window)->remaining, 3);
}

TEST(RedisStoreFunctions, CallsByScriptOnARedisWithoutFunctions) {
  // FCALL and FUNCTION unknown, as on a Redis 6.
  auto server = RedisServer::start({.args = {"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}});
  ASSERT_TRUE(server.ok()) << server.error().message;
  expect_calls_by_script(**server, (*server)->address());
}

TEST(RedisStoreFunctions, CallsByScriptForAUserTheACLDeniesFunctions) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  ASSERT_EQ((*server)->cli({"ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function"}), "OK");
  expect_calls_by_script(**server, "redis://app:pw@127.0.0.1:" + std::to_string((*server)->port()));
}

TEST_F(RedisStoreTest, KeysUseThePrefixAndAHashTag) {
  auto store = open_store(server_->address(), {.prefix = "app:"});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->acquire("user:7", make(Limit::sliding_log({.limit = 5, .period = 1min})))->allowed);
  const std::string keys = server_->cli({"KEYS", "*"});
  EXPECT_NE(keys.find("app:{user:7}:sl"), std::string::npos) << keys;
  EXPECT_NE(keys.find("app:{user:7}:sl:meta"), std::string::npos) << keys;
}

TEST_F(RedisStoreTest, AuthenticatesAndSelectsTheDatabase) {
  auto secured = RedisServer::start({.password = "pw"});
  ASSERT_TRUE(secured.ok()) << secured.error().message;
  const int port = (*secured)->port();
  const Limit limit = make(Limit::fixed_window({.limit = 5, .period = 1h}));
  auto store = open_store("redis://:pw@127.0.0.1:" + std::to_string(port) + "/2");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->acquire("k", limit)->allowed);
  EXPECT_EQ((*secured)->cli({"-n", "2", "DBSIZE"}), "1");
  auto refused = RedisStore::open({.address = "redis://:wrong@127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE((*refused)->connect().ok());
  // No password at all: said at connect (before, the scripts sent first made the server close the
  // connection, and nothing said why).
  auto anonymous = RedisStore::open({.address = "redis://127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(anonymous.ok());
  const Status s = (*anonymous)->connect();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("NOAUTH"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("give the password in the address"), std::string::npos) << s.error().message;
}

// The address's user and password are percent-decoded before AUTH: a password holding '@', ':', '/'
// or '%' can be given (redis://:p%40ss@host sends AUTH p@ss), and so can a user's name.
TEST_F(RedisStoreTest, AuthenticatesWithAPercentEncodedUserAndPassword) {
  auto secured = RedisServer::start({.password = "p@ss:w/rd%"});
  ASSERT_TRUE(secured.ok()) << secured.error().message;
  ASSERT_EQ((*secured)->cli({"ACL", "SETUSER", "app@1", "on", ">x:y@z", "~*", "&*", "+@all"}), "OK");
  const std::string at = "@127.0.0.1:" + std::to_string((*secured)->port());
  const Limit limit = make(Limit::fixed_window({.limit = 5, .period = 1h}));
  for (const char* credentials : {":p%40ss%3Aw%2Frd%25", "p%40ss%3aw%2frd%25", "app%401:x%3Ay%40z"}) {
    auto store = open_store(std::string("redis://") + credentials + at);
    ASSERT_NE(store, nullptr) << credentials;
    const auto d = store->acquire("k", limit);
    ASSERT_TRUE(d.ok()) << credentials << ": " << d.error().message;
    EXPECT_TRUE(d->allowed) << credentials;
  }
}

// A '%' in the address's user or password is an escape since percent-decoding came in: an address
// written for a version that sent it as written (redis://:ab%5A@host, the password being "ab%5A")
// now sends AUTH abZ, and the refusal says why, without showing the password. A wrong password
// with no '%' gets no such hint.
TEST_F(RedisStoreTest, ARefusedPasswordWithAPercentSaysItIsAnEscape) {
  auto secured = RedisServer::start({.password = "ab%5A"});
  ASSERT_TRUE(secured.ok()) << secured.error().message;
  ASSERT_EQ((*secured)->cli({"ACL", "SETUSER", "app", "on", ">x%5A", "~*", "&*", "+@all"}), "OK");
  const std::string at = "@127.0.0.1:" + std::to_string((*secured)->port());
  const std::string hint = "the address's user or password holds a '%', which sluice reads as an escape";
  for (const char* credentials : {":ab%5A", "app:x%5A"}) {
    auto store = RedisStore::open({.address = std::string("redis://") + credentials + at});
    ASSERT_TRUE(store.ok()) << credentials;
    const Status s = (*store)->connect();
    ASSERT_FALSE(s.ok()) << credentials;
    const std::string& m = s.error().message;
    EXPECT_NE(m.find("refused the handshake: WRONGPASS"), std::string::npos) << m;
    EXPECT_NE(m.find(hint), std::string::npos) << m;
    EXPECT_NE(m.find("write a '%' itself as %25"), std::string::npos) << m;
    EXPECT_EQ(m.find("%5A"), std::string::npos) << m;
    EXPECT_EQ(m.find("abZ"), std::string::npos) << m;
    EXPECT_EQ(m.find("xZ"), std::string::npos) << m;
  }
  auto wrong = RedisStore::open({.address = "redis://:wrong" + at});
  ASSERT_TRUE(wrong.ok());
  const Status s = (*wrong)->connect();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("WRONGPASS"), std::string::npos) << s.error().message;
  EXPECT_EQ(s.error().message.find("'%'"), std::string::npos) << s.error().message;
  // Written as %25, the same password authenticates.
  auto store = open_store("redis://:ab%255A" + at);
  ASSERT_NE(store, nullptr);
  const auto d = store->acquire("k", make(Limit::fixed_window({.limit = 5, .period = 1h})));
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->allowed);
}

// The handshake's PING refused by the user's ACL (NOPERM) is still an answer: such a user may run
// the scripts.
TEST_F(RedisStoreTest, AUserWhoseAclLeavesOutPingConnects) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  ASSERT_EQ((*server)->cli({"ACL", "SETUSER", "default", "-ping"}), "OK");
  auto store = open_store((*server)->address());
  ASSERT_NE(store, nullptr);
  const auto d = store->acquire("k", make(Limit::fixed_window({.limit = 5, .period = 1h})));
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->allowed);
  EXPECT_FALSE(d->fallback);
}

TEST_F(RedisStoreTest, AsyncWithCallbacksOnTheCallersExecutor) {
  boost::asio::io_context io;
  auto opened = RedisStore::open(io.get_executor(), {.address = server_->address(), .command_timeout = 2s});
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<RedisStore> store = std::move(*opened);
  const Limit limit = make(Limit::fixed_window({.limit = 100, .period = 1h}));
  int admitted = 0;
  int answered = 0;
  store->async_connect([&](Status s) {
    ASSERT_TRUE(s.ok()) << s.error().message;
    for (int i = 0; i < 150; ++i) {
      store->async_acquire("k", limit, 1, [&](Result<Decision> d) {
        ++answered;
        if (d.ok() && d->allowed) ++admitted;
        if (answered == 150) store.reset();  // closes the connection, so io.run() returns
      });
    }
  });
  io.run();
  EXPECT_EQ(answered, 150);
  EXPECT_EQ(admitted, 100);
}

TEST_F(RedisStoreTest, AsyncWithCoroutines) {
  boost::asio::io_context io;
  auto opened = RedisStore::open(io.get_executor(), {.address = server_->address(), .command_timeout = 2s});
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<RedisStore> store = std::move(*opened);
  const Limit limit = make(Limit::sliding_window({.limit = 2, .period = 1h}));
  std::vector<bool> allowed;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        const Status s = co_await store->async_connect(boost::asio::use_awaitable);
        EXPECT_TRUE(s.ok());
        for (int i = 0; i < 3; ++i) {
          Result<Decision> d = co_await store->async_acquire("k", limit, 1, boost::asio::use_awaitable);
          allowed.push_back(d.ok() && d->allowed);
        }
        const LimitRequest both[] = {{"k", &limit, 1}, {"other", &limit, 1}};
        auto all = co_await store->async_acquire_all(both, boost::asio::use_awaitable);
        EXPECT_TRUE(all.ok());
        if (all.ok()) allowed.push_back((*all)[1].allowed);
        store.reset();
      },
      boost::asio::detached);
  io.run();
  EXPECT_EQ(allowed, (std::vector<bool>{true, true, false, true}));
}

// A server shutting down stops its loop with decisions in flight, then destroys its store: what was
// in flight is let go with the loop, not kept alive in a cycle with the connection (a leak).
// A store on `io`, connected by running it; null, having failed the test, when it cannot be.
std::unique_ptr<RedisStore> open_connected(boost::asio::io_context& io, RedisStoreOptions options) {
  auto opened = RedisStore::open(io.get_executor(), std::move(options));
  EXPECT_TRUE(opened.ok());
  if (!opened.ok()) return nullptr;
  bool connected = false;
  (*opened)->async_connect([&](Status s) { connected = s.ok(); });
  while (!connected && io.run_one_for(5s) > 0) {}
  EXPECT_TRUE(connected);
  return connected ? std::move(*opened) : nullptr;
}

TEST_F(RedisStoreTest, DestroyedOnAStoppedLoopLetsGoOfTheDecisionsInFlight) {
  auto io = std::make_unique<boost::asio::io_context>();
  std::unique_ptr<RedisStore> store = open_connected(*io, {.address = server_->address(), .command_timeout = 10s});
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 100, .period = 1h}));
  // Scripts wait while the server is paused, so the decisions stay in flight.
  ASSERT_EQ(server_->cli({"CLIENT", "PAUSE", "10000", "WRITE"}), "OK");
  auto token = std::make_shared<int>(0);
  for (int i = 0; i < 10; ++i) store->async_acquire("k", limit, 1, [token](Result<Decision>) {});
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_->cli({"INFO", "clients"}).find("blocked_clients:1") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    io->run_for(1ms);
  }
  ASSERT_NE(server_->cli({"INFO", "clients"}).find("blocked_clients:1"), std::string::npos);
  io->stop();
  EXPECT_GT(token.use_count(), 1);
  store.reset();
  io.reset();
  EXPECT_EQ(token.use_count(), 1);
  server_->cli({"CLIENT", "UNPAUSE"});
}

// Calls wait for the end of the turn of the loop that started them: a loop stopped before then
// never sends them, and destroying the store lets go of them (a leak, kept by the store's queue).
TEST_F(RedisStoreTest, DestroyedOnAStoppedLoopLetsGoOfTheCallsThatWaitForTheTurnToEnd) {
  auto io = std::make_unique<boost::asio::io_context>();
  std::unique_ptr<RedisStore> store = open_connected(*io, {.address = server_->address()});
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 100, .period = 1h}));
  auto token = std::make_shared<int>(0);
  io->restart();
  boost::asio::post(*io, [&] {
    for (int i = 0; i < 3; ++i) store->async_acquire("k", limit, 1, [token](Result<Decision>) {});
    io->stop();  // before the turn ends
  });
  io->run();
  EXPECT_GT(token.use_count(), 1);
  store.reset();
  io.reset();
  EXPECT_EQ(token.use_count(), 1);
  EXPECT_EQ(server_->cli({"EXISTS", "sluice:{k}:fw"}), "0");
}

}  // namespace
}  // namespace sluice::testing
