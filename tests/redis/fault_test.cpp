// RedisStore when Redis fails, each against a real server: killed under load (every call answered
// by its failure policy within the timeout + 5 ms, no crash), SCRIPT FLUSH under load (no error
// reaches the caller), CLIENT PAUSE (timeouts honoured, then the breaker answers at once), and
// back on Redis within a second of it answering again.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <string_view>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_fixture.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using redis::RedisStore;

// A socket listening on a free loopback port (`port`), or -1.
int loopback_listener(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// A closed loop of `depth` asynchronous acquisitions on an io_context of its own thread, cycling
// through the failure policies, recording how each call ended and how long it took.
class Load {
 public:
  struct Outcome {
    int calls = 0;
    int errors = 0;
    int fallbacks = 0;
    int policy_violations = 0;  // a fallback that contradicts the request's policy
    Nanos slowest{0};
    std::string first_error;
  };

  Load(const std::string& address, const Limit& limit, int depth,
       std::chrono::milliseconds timeout = std::chrono::milliseconds(50))
      : limit_(limit) {
    auto store = RedisStore::open(io_.get_executor(),
                                  {.address = address, .command_timeout = timeout, .fleet_size = 4});
    EXPECT_TRUE(store.ok());
    store_ = std::move(*store);
    thread_ = std::thread([this, depth] {
      store_->async_connect([this, depth](Status s) {
        EXPECT_TRUE(s.ok());
        for (int i = 0; i < depth; ++i) next();
      });
      io_.run();
    });
  }

  ~Load() { stop(); }

  int calls() const { return calls_.load(); }

  Outcome stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return outcome_;
  }

 private:
  void next() {
    static constexpr OnStoreFailure kPolicies[] = {OnStoreFailure::kAllow, OnStoreFailure::kDeny,
                                                    OnStoreFailure::kLocal};
    const OnStoreFailure policy = kPolicies[n_++ % 3];
    const auto start = Clock::now();
    ++in_flight_;
    store_->async_acquire(LimitRequest{"k", &limit_, 1, policy}, [this, start, policy](Result<Decision> d) {
      --in_flight_;
      outcome_.slowest = std::max<Nanos>(outcome_.slowest, Clock::now() - start);
      ++outcome_.calls;
      ++calls_;
      if (!d.ok()) {
        if (outcome_.errors++ == 0) outcome_.first_error = d.error().message;
      } else if (d->fallback) {
        ++outcome_.fallbacks;
        if ((policy == OnStoreFailure::kAllow && !d->allowed) ||
            (policy == OnStoreFailure::kDeny && d->allowed)) {
          ++outcome_.policy_violations;
        }
      }
      if (!stop_) next();
      else if (in_flight_ == 0) store_.reset();
    });
  }

  boost::asio::io_context io_{1};
  Limit limit_;
  std::unique_ptr<RedisStore> store_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> calls_{0};
  int in_flight_ = 0;
  unsigned n_ = 0;
  Outcome outcome_;
};

Limit plenty() { return make(Limit::fixed_window({.limit = 1'000'000'000, .period = 1h})); }

// Kills the store's Redis and calls it (kAllow answers each) until its breaker opens, then starts
// Redis again: the breaker is left to close by the store's own probes.
void open_the_breaker_then_restart(RedisServer& server, RedisStore& store) {
  const Limit limit = plenty();
  ASSERT_FALSE(store.acquire("k", limit)->fallback);
  server.kill();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store.acquire("k", limit).ok());
  ASSERT_EQ(store.breaker().state(), BreakerState::kOpen);
  ASSERT_TRUE(server.restart().ok());
}

// One acquisition, and how long until its handler ran (not counting the wait of this thread for
// the handler's thread).
struct Timed {
  Result<Decision> decision;
  Nanos took;
};

Timed timed_acquire(RedisStore& store, const Limit& limit) {
  std::promise<Timed> done;
  const auto start = Clock::now();
  store.async_acquire("k", limit, 1, [&](Result<Decision> d) {
    done.set_value({std::move(d), Clock::now() - start});
  });
  return done.get_future().get();
}

TEST(RedisFaults, KillUnderLoadEveryCallIsAnsweredByItsPolicyInTime) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  Load load((*server)->address(), plenty(), 64);
  ASSERT_TRUE(eventually([&] { return load.calls() > 2000; }, 10s));
  (*server)->kill();
  const int at_kill = load.calls();
  ASSERT_TRUE(eventually([&] { return load.calls() > at_kill + 5000; }, 10s));
  const Load::Outcome o = load.stop();
  EXPECT_EQ(o.errors, 0) << o.first_error;
  EXPECT_GT(o.fallbacks, 4000);
  EXPECT_EQ(o.policy_violations, 0);
  EXPECT_LE(o.slowest, 50ms + kLateness);
}

TEST(RedisFaults, ScriptFlushUnderLoadReachesNoCaller) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  // A timeout is not what this test is about: give Redis time to compile the scripts again.
  Load load((*server)->address(), plenty(), 64, 2s);
  for (int i = 0; i < 10; ++i) {
    const int before = load.calls();
    ASSERT_TRUE(eventually([&] { return load.calls() > before + 300; }, 10s));
    ASSERT_EQ((*server)->cli({"SCRIPT", "FLUSH"}), "OK");
  }
  const Load::Outcome o = load.stop();
  EXPECT_EQ(o.errors, 0) << o.first_error;
  EXPECT_EQ(o.fallbacks, 0);
}

TEST(RedisFaults, ClientPauseTimesOutThenTheBreakerAnswersAtOnce) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = open_store((*server)->address(), {}, Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit limit = plenty();
  ASSERT_TRUE(store->acquire("k", limit).ok());
  ASSERT_EQ((*server)->cli({"CLIENT", "PAUSE", "1500", "ALL"}), "OK");
  const auto paused = Clock::now();
  int timeouts = 0;
  int open = 0;
  Nanos slowest{0};
  while (Clock::now() - paused < 1s) {
    const Timed t = timed_acquire(*store, limit);
    slowest = std::max(slowest, t.took);
    ASSERT_FALSE(t.decision.ok());
    if (t.decision.error().code == ErrorCode::kTimeout) ++timeouts;
    if (t.decision.error().code == ErrorCode::kCircuitOpen) ++open;
  }
  EXPECT_LE(slowest, store->options().command_timeout + kLateness);
  EXPECT_GE(timeouts, 5);  // the breaker opens after 5 failures in a row
  EXPECT_GT(open, 10 * timeouts);
  // Once the pause ends, decisions come from Redis again within a second.
  const auto deadline = paused + 1500ms + 1s;
  EXPECT_TRUE(eventually([&] { return store->acquire("k", limit).ok(); }, 2500ms));
  EXPECT_LE(Clock::now(), deadline);
}

// An acquire that timed out still runs once Redis gets to it, and takes its concurrency lease; the
// caller never had the lease, so nobody would release it, and its place would stay taken for the
// whole fleet until the lease timed out (an hour here). The store gives such leases back itself.
// Whether every place of `jobs` (5) is free again within 5 s: the leases given back.
bool all_places_come_back(RedisStore& store, const Limit& jobs) {
  return eventually(
      [&] {
        const Result<Decision> p = store.peek("jobs", jobs);
        return p.ok() && p->remaining == 5;
      },
      5s);
}

TEST(RedisFaults, TheLeasesOfAcquiresThatTimedOutAreGivenBack) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = open_store((*server)->address(), {}, Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit jobs = make(Limit::concurrency({.limit = 5, .lease_timeout = 1h}));
  ASSERT_EQ((*server)->cli({"CLIENT", "PAUSE", "300", "ALL"}), "OK");
  for (int i = 0; i < 3; ++i) {
    const Result<Decision> d = store->acquire("jobs", jobs);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error().code, ErrorCode::kTimeout);
  }
  // The three acquires run when the pause ends, and the three give-backs after them.
  EXPECT_TRUE(all_places_come_back(*store, jobs));
  const std::string stats = (*server)->cli({"INFO", "commandstats"});
  const auto at = stats.find("cmdstat_evalsha:calls=");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stol(stats.substr(at + 22)), 6);  // they did run: three acquires, three releases
}

// While the breaker is open, kLocal decides concurrency limits in the process; their releases are
// answered there (the lease was held) and never sent to Redis (request after request, they would
// pile up while Redis is down and all reach it once it is back).
TEST(RedisFaults, TheFallbacksLeasesAreReleasedInTheProcessAlone) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = open_store((*server)->address(), {.on_store_failure = OnStoreFailure::kLocal}, Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit jobs = make(Limit::concurrency({.limit = 5, .lease_timeout = 1h}));
  ASSERT_EQ((*server)->cli({"CLIENT", "PAUSE", "300", "ALL"}), "OK");
  const Limit limit = plenty();
  while (store->breaker().state() != BreakerState::kOpen) ASSERT_TRUE(store->acquire("k", limit)->fallback);
  for (int i = 0; i < 200; ++i) {
    const Result<Decision> d = store->acquire("jobs", jobs);
    ASSERT_TRUE(d.ok() && d->fallback && d->allowed);
    const Status released = store->release("jobs", jobs, d->lease);
    ASSERT_TRUE(released.ok()) << released.error().message;
  }
  // Once Redis answers, a call after whatever the store had sent meanwhile. A release looks its
  // lease up (HGET) in the leases' hash: none was sent.
  ASSERT_TRUE(eventually([&] { return store->peek("jobs", jobs).ok(); }, 5s));
  const std::string stats = (*server)->cli({"INFO", "commandstats"});
  const auto at = stats.find("cmdstat_hget:calls=");
  EXPECT_EQ(at == std::string::npos ? 0 : std::stol(stats.substr(at + 19)), 0);
}

// A lease taken on Redis and released while the breaker is open (Redis blinked) is given back once
// Redis answers: otherwise its place stays taken, for the whole fleet, until lease_timeout.
TEST(RedisFaults, ARedisLeaseReleasedWhileTheBreakerIsOpenIsGivenBack) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = open_store((*server)->address(), {}, Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit jobs = make(Limit::concurrency({.limit = 5, .lease_timeout = 1h}));
  std::vector<std::uint64_t> leases;
  for (int i = 0; i < 5; ++i) {
    const Result<Decision> d = store->acquire("jobs", jobs);
    ASSERT_TRUE(d.ok() && d->allowed && !d->fallback);
    leases.push_back(d->lease);
  }
  ASSERT_EQ((*server)->cli({"CLIENT", "PAUSE", "300", "ALL"}), "OK");
  const Limit limit = plenty();
  while (store->breaker().state() != BreakerState::kOpen) (void)store->acquire("k", limit);
  for (const std::uint64_t lease : leases) {
    const Status released = store->release("jobs", jobs, lease);
    ASSERT_FALSE(released.ok());
    EXPECT_EQ(released.error().code, ErrorCode::kCircuitOpen);
  }
  EXPECT_TRUE(all_places_come_back(*store, jobs));
}

// While Redis is away, kLocal counts a limit in the process divided by the fleet: a rate too, its
// period made fleet times longer (1 token per 2 s, "at least 1" each, gave each of 3 gateways the
// whole rate).
TEST(RedisFaults, TheLocalFallbackDividesARateByTheFleet) {
  redis::RedisStoreOptions o;
  o.address = "redis://127.0.0.1:1";  // nothing listens there
  o.on_store_failure = OnStoreFailure::kLocal;
  o.fleet_size = 3;
  auto store = RedisStore::open(o);
  ASSERT_TRUE(store.ok()) << store.error().message;
  for (const Limit& limit : {make(Limit::token_bucket({.capacity = 9, .refill_tokens = 1, .refill_period = 2s})),
                             make(Limit::gcra({.limit = 1, .period = 2s, .burst = 9}))}) {
    SCOPED_TRACE(limit.to_string());
    for (int i = 0; i < 3; ++i) {
      const Result<Decision> d = (*store)->acquire(limit.to_string(), limit);
      ASSERT_TRUE(d.ok()) << d.error().message;
      EXPECT_TRUE(d->fallback && d->allowed);
    }
    const Result<Decision> refused = (*store)->acquire(limit.to_string(), limit);
    ASSERT_TRUE(refused.ok());
    EXPECT_FALSE(refused->allowed);
    EXPECT_GT(refused->retry_after, 5s);  // a token every 6 s in this process
    EXPECT_LE(refused->retry_after, 6s);
  }
}

// A period that the fleet would stretch past the longest (here past what 64 bits of nanoseconds
// hold) has its rate divided instead, as counts are.
TEST(RedisFaults, TheLocalFallbackDividesARateItCannotStretch) {
  redis::RedisStoreOptions o;
  o.address = "redis://127.0.0.1:1";  // nothing listens there
  o.on_store_failure = OnStoreFailure::kLocal;
  o.fleet_size = 1000;  // 365 d x 1000 is past 2^63 ns
  auto store = RedisStore::open(o);
  ASSERT_TRUE(store.ok()) << store.error().message;
  const Limit limit = make(Limit::token_bucket({.capacity = 2000, .refill_tokens = 1000, .refill_period = kMaxPeriod}));
  for (const bool allowed : {true, true, false}) {  // capacity 2 in this process
    const Result<Decision> d = (*store)->acquire("year", limit);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_TRUE(d->fallback);
    EXPECT_EQ(d->allowed, allowed);
    if (!allowed) {
      EXPECT_GT(d->retry_after, kMaxPeriod / 2);  // 1 token per 365 d
      EXPECT_LE(d->retry_after, kMaxPeriod);
    }
  }
}

// While Redis is away, a kLocal limit beside a kDeny one is only looked at (the request is refused
// anyway), but one whose share the request would overrun says so: the request is refused by a limit,
// not only by the store's absence.
TEST(RedisFaults, BesideADenyRefusalAnExhaustedLocalShareRefusesToo) {
  redis::RedisStoreOptions o;
  o.address = "redis://127.0.0.1:1";  // nothing listens there
  auto store = RedisStore::open(o);
  ASSERT_TRUE(store.ok()) << store.error().message;
  const Limit shared = make(Limit::fixed_window({.limit = 2, .period = 1h}));
  const Limit guarded = plenty();
  const LimitRequest alone{"shared", &shared, 1, OnStoreFailure::kLocal};
  for (const bool allowed : {true, true, false}) {  // the share of 2 spent
    std::array<Decision, 1> one;
    ASSERT_TRUE((*store)->acquire_all({&alone, 1}, one).ok());
    ASSERT_EQ(one[0].allowed, allowed);
  }
  const std::array<LimitRequest, 2> both{LimitRequest{"shared", &shared, 1, OnStoreFailure::kLocal},
                                         LimitRequest{"guarded", &guarded, 1, OnStoreFailure::kDeny}};
  std::array<Decision, 2> d;
  ASSERT_TRUE((*store)->acquire_all(both, d).ok());
  EXPECT_TRUE(d[0].fallback && d[1].fallback);
  EXPECT_FALSE(d[0].allowed);
  EXPECT_EQ(d[0].remaining, 0);
  EXPECT_GT(d[0].retry_after, 0s);  // the window's end
  EXPECT_LE(d[0].retry_after, 1h);
  EXPECT_FALSE(d[0].cost_exceeds_limit);
  EXPECT_FALSE(d[1].allowed);
  // A cost beyond the whole share: no wait admits it.
  const std::array<LimitRequest, 2> too_much{LimitRequest{"other", &shared, 3, OnStoreFailure::kLocal},
                                             LimitRequest{"guarded", &guarded, 3, OnStoreFailure::kDeny}};
  ASSERT_TRUE((*store)->acquire_all(too_much, d).ok());
  EXPECT_FALSE(d[0].allowed);
  EXPECT_TRUE(d[0].cost_exceeds_limit);
  EXPECT_EQ(d[0].retry_after, 0s);
}

// A call made while the store's first connection is being made waits for it, but not past its own
// deadline: one whose deadline passed meanwhile fails as not sent, and does not run once connected.
TEST(RedisFaults, ACallWaitingForTheFirstConnectionIsNotSentPastItsDeadline) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  ASSERT_EQ((*server)->cli({"CLIENT", "PAUSE", "500", "ALL"}), "OK");  // the handshake waits
  redis::RedisStoreOptions o;
  o.address = (*server)->address();
  o.command_timeout = 100ms;
  o.connect_timeout = 5s;
  auto store = RedisStore::open(o);
  ASSERT_TRUE(store.ok()) << store.error().message;
  const Limit limit = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  const Result<Decision> d = (*store)->acquire("first", limit);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kStoreUnavailable) << d.error().message;
  EXPECT_NE(d.error().message.find("not connected within the command's deadline"), std::string::npos)
      << d.error().message;
  ASSERT_TRUE(eventually([&] { return (*store)->peek("first", limit).ok(); }, 5s));
  EXPECT_EQ((*store)->peek("first", limit)->remaining, 10) << "the call that was not sent ran";
}

TEST(RedisFaults, BackOnRedisWithinASecondOfItAnsweringAgain) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = open_store((*server)->address(), {.on_store_failure = OnStoreFailure::kDeny},
                          Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit limit = plenty();
  ASSERT_FALSE(store->acquire("k", limit)->fallback);
  (*server)->kill();
  // Down: every call is denied by policy, at once.
  for (int i = 0; i < 50; ++i) {
    const Timed t = timed_acquire(*store, limit);
    ASSERT_TRUE(t.decision.ok());
    EXPECT_TRUE(t.decision->fallback);
    EXPECT_FALSE(t.decision->allowed);
    EXPECT_LE(t.took, kLateness);
  }
  EXPECT_EQ(store->breaker().state(), BreakerState::kOpen);
  ASSERT_TRUE((*server)->restart().ok());
  const auto answering = Clock::now();
  ASSERT_TRUE(eventually([&] { return !store->acquire("k", limit)->fallback; }, 5s));
  EXPECT_LT(Clock::now() - answering, 1s);
}

// While the breaker is open the store probes Redis itself: with no call made after Redis is back,
// the breaker closes, and the listener hears of the store going and coming back.
TEST(RedisFaults, TheBreakerClosesByItselfOnceRedisAnswersAgain) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = open_store((*server)->address(), {.on_store_failure = OnStoreFailure::kAllow},
                          Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  std::mutex mu;
  std::vector<std::pair<bool, std::string>> heard;
  store->on_availability([&](bool available, const std::string& why) {
    std::lock_guard lock(mu);
    heard.emplace_back(available, why);
  });
  ASSERT_NO_FATAL_FAILURE(open_the_breaker_then_restart(**server, *store));
  EXPECT_TRUE(eventually([&] { return store->breaker().state() == BreakerState::kClosed; }, 5s));
  std::lock_guard lock(mu);
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_FALSE(heard[0].first);
  EXPECT_NE(heard[0].second.find("redis 127.0.0.1:"), std::string::npos) << heard[0].second;
  EXPECT_TRUE(heard[1].first);
}

// A breaker that wants several probes to pass before it closes gets them from the store too: one
// success leaves it half-open, and the store probes again (it stayed half-open, waiting for a
// caller's call).
TEST(RedisFaults, TheBreakerClosesByItselfAfterEveryProbeItWants) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  CircuitBreakerOptions breaker = redis::RedisStoreOptions::default_breaker();
  breaker.half_open_probes = 3;
  auto store = open_store((*server)->address(), {.on_store_failure = OnStoreFailure::kAllow, .breaker = breaker},
                          Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  ASSERT_NO_FATAL_FAILURE(open_the_breaker_then_restart(**server, *store));
  EXPECT_TRUE(eventually([&] { return store->breaker().state() == BreakerState::kClosed; }, 5s))
      << "the breaker stayed " << to_string(store->breaker().state());
}

// The store's own probe is an acquire as a caller's is: a Redis out of memory, which answers PING
// and reads but refuses writes, keeps the breaker open without a call from anyone, and the breaker
// closes once Redis takes writes again.
TEST(RedisFaults, ARedisOutOfMemoryKeepsTheBreakerOpenUntilItTakesWritesAgain) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = open_store((*server)->address(), {.on_store_failure = OnStoreFailure::kAllow},
                          Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit limit = plenty();
  ASSERT_FALSE(store->acquire("k", limit)->fallback);
  ASSERT_EQ((*server)->cli({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store->acquire("k" + std::to_string(i), limit)->fallback);
  ASSERT_EQ(store->breaker().state(), BreakerState::kOpen);
  auto refused = [&] {
    const std::string stats = (*server)->cli({"INFO", "commandstats"});
    long long n = 0;
    for (const char* cmd : {"cmdstat_evalsha:", "cmdstat_eval:"}) {
      const auto at = stats.find(cmd);
      if (at == std::string::npos) continue;
      const auto field = stats.find("failed_calls=", at);
      n += std::stoll(stats.substr(field + 13));
    }
    return n;
  };
  const long long before = refused();
  // Probes have run and failed, with no call from a caller: the breaker stays open.
  ASSERT_TRUE(eventually([&] { return refused() >= before + 2; }, 5s));
  EXPECT_NE(store->breaker().state(), BreakerState::kClosed);
  ASSERT_EQ((*server)->cli({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  EXPECT_TRUE(eventually([&] { return store->breaker().state() == BreakerState::kClosed; }, 5s));
}

// Calls that go together in one batch script, which catches each call's error: a Redis out of memory
// is still Redis unable to decide (kStoreUnavailable, which the breaker counts), not a protocol error.
TEST(RedisFaults, ARedisOutOfMemoryFailsABatchAsUnavailable) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  boost::asio::io_context io;
  auto opened = RedisStore::open(io.get_executor(), {.address = (*server)->address(), .command_timeout = 2s});
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<RedisStore> store = std::move(*opened);
  ASSERT_EQ((*server)->cli({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  const Limit limit = plenty();
  std::vector<std::optional<ErrorCode>> codes;  // nothing for a decision
  store->async_connect([&](Status s) {
    ASSERT_TRUE(s.ok()) << s.error().message;
    for (int i = 0; i < 20; ++i) {
      store->async_acquire("k" + std::to_string(i), limit, 1, [&](Result<Decision> d) {
        codes.push_back(d.ok() ? std::nullopt : std::optional<ErrorCode>(d.error().code));
        if (codes.size() == 20) store.reset();
      });
    }
  });
  io.run();
  ASSERT_EQ(codes.size(), 20u);
  for (const auto& c : codes) EXPECT_EQ(c, ErrorCode::kStoreUnavailable);
}

// A server that accepts every connection, says it is full and closes it, as Redis at maxclients
// does: the handshake fails, so each reconnect waits longer, as after a failed connect, instead of
// trying again at once.
TEST(RedisFaults, AServerThatClosesAtOnceIsRetriedWithBackoff) {
  int port = 0;
  const int listener = loopback_listener(port);
  ASSERT_GE(listener, 0);
  std::atomic<int> accepted{0};
  std::thread closer([&] {
    for (int c; (c = ::accept(listener, nullptr, nullptr)) >= 0;) {
      ++accepted;
      static constexpr std::string_view kFull = "-ERR max number of clients reached\r\n";
      (void)::send(c, kFull.data(), kFull.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  });
  const auto start = Clock::now();
  {
    auto store = RedisStore::open({.address = "redis://127.0.0.1:" + std::to_string(port),
                                   .reconnect_min = 20ms,
                                   .reconnect_max = 1s});
    ASSERT_TRUE(store.ok());
    // The first attempt, then retries after 20, 40 and 80 ms: at least 140 ms for five
    // connections (without the backoff they take a millisecond or so).
    ASSERT_TRUE(eventually([&] { return accepted.load() >= 5; }, 10s));
    EXPECT_GE(Clock::now() - start, 140ms) << accepted.load() << " connections";
  }
  ::shutdown(listener, SHUT_RDWR);
  closer.join();
  ::close(listener);
}

// A TCP relay to a server that can go silent on the connections it carries, as a path through a NAT
// or firewall that dropped its state does: no FIN, no RST, nothing more in either direction, while
// new connections go through.
class SilencingRelay {
 public:
  explicit SilencingRelay(int server_port) : server_port_(server_port), listener_(loopback_listener(port_)) {
    acceptor_ = std::thread([this] {
      for (int client; (client = ::accept(listener_, nullptr, nullptr)) >= 0;) {
        const int server = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<std::uint16_t>(server_port_));
        if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
          ::close(client);
          ::close(server);
          continue;
        }
        std::lock_guard lock(mu_);
        const int generation = generation_;
        fds_.push_back(client);
        fds_.push_back(server);
        ++connections_;
        for (const auto& [from, to] : {std::pair{client, server}, std::pair{server, client}}) {
          pumps_.emplace_back([this, from, to, generation] {
            char buf[4096];
            for (ssize_t n; (n = ::recv(from, buf, sizeof buf, 0)) > 0;) {
              if (silenced_ > generation) continue;  // dropped on the floor
              if (::send(to, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) break;
            }
          });
        }
      }
    });
  }
  ~SilencingRelay() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (const int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : pumps_) t.join();
    for (const int fd : fds_) ::close(fd);
  }
  int port() const { return port_; }
  int connections() const { return connections_; }
  // The connections made so far carry nothing more; later ones do.
  void silence_existing() {
    std::lock_guard lock(mu_);
    silenced_ = ++generation_;
  }

 private:
  int server_port_;
  int port_ = 0;
  int listener_;
  std::thread acceptor_;
  std::mutex mu_;
  int generation_ = 0;
  std::atomic<int> silenced_{0};
  std::atomic<int> connections_{0};
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

// A connection that goes silent without closing is given up once nothing has come on it for a
// second while a command waited past its deadline, and made again: decisions are back on Redis
// within seconds, where they waited for the kernel to give up on the dead one (minutes).
TEST(RedisFaults, AConnectionThatGoesSilentIsMadeAgain) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  SilencingRelay relay((*server)->port());
  auto store = open_store("redis://127.0.0.1:" + std::to_string(relay.port()), {}, Timeouts::kProduction);
  ASSERT_NE(store, nullptr);
  const Limit limit = plenty();
  ASSERT_TRUE(store->acquire("k", limit).ok());
  ASSERT_EQ(relay.connections(), 1);
  relay.silence_existing();
  EXPECT_FALSE(store->acquire("k", limit).ok());  // timed out
  EXPECT_TRUE(eventually([&] { return store->acquire("k", limit).ok(); }, 20s));
  EXPECT_EQ(relay.connections(), 2);
}

// A server that accepts connections and never answers (a Redis stopped with SIGSTOP, or a host that
// is not Redis) is not taken for connected: connect() says so after connect_timeout.
TEST(RedisFaults, AServerThatNeverAnswersIsNotConnected) {
  int port = 0;
  const int listener = loopback_listener(port);  // the kernel accepts; nobody reads
  ASSERT_GE(listener, 0);
  {
    auto store = RedisStore::open({.address = "redis://127.0.0.1:" + std::to_string(port),
                                   .connect_timeout = 100ms});
    ASSERT_TRUE(store.ok());
    const Status s = (*store)->connect();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("connected, but no answer within 100ms"), std::string::npos)
        << s.error().message;
  }
  ::close(listener);
}

// A server that answers what is not Redis's protocol (an HTTP server at a mistyped port): each
// attempt fails as one that could not connect, so the breaker opens (sluice_store_up reads 0)
// before any call, and what is said names the server.
TEST(RedisFaults, AServerThatIsNotRedisOpensTheBreakerBeforeAnyCall) {
  int port = 0;
  const int listener = loopback_listener(port);
  ASSERT_GE(listener, 0);
  std::thread http([&] {
    for (int c; (c = ::accept(listener, nullptr, nullptr)) >= 0;) {
      static constexpr std::string_view kHttp = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
      (void)::send(c, kHttp.data(), kHttp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  });
  const std::string address = "127.0.0.1:" + std::to_string(port);
  {
    auto store = RedisStore::open({.address = "redis://" + address, .reconnect_min = 1ms, .reconnect_max = 10ms});
    ASSERT_TRUE(store.ok());
    EXPECT_TRUE(eventually([&] { return (*store)->breaker().state() != BreakerState::kClosed; }, 10s));
    const Status s = (*store)->connect();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("redis " + address + ": "), std::string::npos) << s.error().message;
  }
  ::shutdown(listener, SHUT_RDWR);
  http.join();
  ::close(listener);
}

// A Redis without cluster support given as a cluster's node gives no slot map: the store says why
// and counts it as a failed attempt, so the breaker opens before any call.
TEST(RedisFaults, ARedisWithoutClusterSupportGivenAsAClusterSaysSo) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto store = RedisStore::open({.address = "redis-cluster://127.0.0.1:" + std::to_string((*server)->port()),
                                 .connect_timeout = 200ms});
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(eventually([&] { return (*store)->breaker().state() != BreakerState::kClosed; }, 10s));
  const Status s = (*store)->connect();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("CLUSTER NODES: ERR This instance has cluster support disabled"),
            std::string::npos)
      << s.error().message;
}

// Nodes in cluster mode that were never made a cluster (no slot assigned): connecting says so,
// rather than only that no master was connected in time.
TEST(RedisFaults, NodesThatServeNoSlotAreSaidToBeNoClusterYet) {
  auto node = RedisServer::start({.cluster_node = true});
  ASSERT_TRUE(node.ok()) << node.error().message;
  auto store = RedisStore::open({.address = "redis-cluster://127.0.0.1:" + std::to_string((*node)->port()),
                                 .connect_timeout = 100ms});
  ASSERT_TRUE(store.ok());
  const Status s = (*store)->connect();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("serve no slot (a cluster not made yet? redis-cli --cluster create)"),
            std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace sluice::testing

