// RedisStore: limiter state shared by a fleet through Redis or Redis Cluster, one atomic Lua script
// call per decision (under load, per batch of the decisions that queued behind the call in flight),
// on a pipelined Asio client. Thread-safe: any method may be called from any thread, except that
// the synchronous ones (the Store interface) must not be called from a thread that runs the
// store's executor, since they wait for it.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/circuit_breaker.h"
#include "sluice/clock.h"
#include "sluice/local_store.h"
#include "sluice/redis/cluster_news.h"
#include "sluice/store.h"

namespace sluice::redis {

struct RedisStoreOptions {
  // redis://[[user]:password@]host:port[/db] or redis-cluster://host:port,host:port,...
  std::string address = "redis://127.0.0.1:6379";
  // Put before every key. A prefix with a hash tag ("app{rl}:") puts every key in one cluster slot.
  std::string prefix = "sluice:";
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds command_timeout{50};
  // Batching: the acquires (and releases) asked for a node (for a slot, on a cluster) during one
  // turn of the store's event loop go together as one script call when the turn ends; those that
  // come while a call is in flight queue, and go together when it answers; up to this many per
  // call. Under load a decision then costs Redis a share of one call; at rest a call waits only
  // for the end of its turn.
  // Each acquire is still decided all or nothing on its own, in the order asked. 1: every acquire
  // and release is a call of its own, pipelined.
  int max_batch = 64;
  // Reconnecting after a lost connection: at once, then after reconnect_min, doubling up to
  // reconnect_max.
  std::chrono::milliseconds reconnect_min{10};
  std::chrono::milliseconds reconnect_max{250};
  // A cluster: its slot map is read again at least this often, so that a node added or removed
  // that no call meets (a replica; an address the store was opened with, see on_notice) is known
  // within this time. It is read again at once too whenever a call or a connection shows it
  // changed (a redirection, a master lost). 0: only then.
  std::chrono::milliseconds cluster_map_refresh{30'000};
  // The policy of the calls that take no LimitRequest (acquire(key, limit, cost) and peek).
  OnStoreFailure on_store_failure = OnStoreFailure::kError;
  // OnStoreFailure::kLocal divides every limit by this: the number of instances sharing the store.
  int fleet_size = 1;
  // Where OnStoreFailure::kLocal decides; nullptr: a LocalStore of this store's own. Stores that
  // serve one instance together (one per thread) share one, so that the instance admits its share
  // once, not once per store.
  std::shared_ptr<LocalStore> local_store = nullptr;
  // What a decision of OnStoreFailure::kDeny tells the caller to wait.
  std::chrono::milliseconds deny_retry_after{1000};
  // Wraps every call to Redis (timeouts and unreachable nodes count as failures; rejections do not,
  // nor a cluster's call that failed at once for its slot alone). While open, calls fail at once
  // with kCircuitOpen and the failure policies decide; after open_for one call probes Redis, and
  // its success (of half_open_probes probes, one by default) closes the breaker. The default opens
  // after 5 failures in a row or half of the last 20 calls failing, and probes every 250ms, so
  // that decisions are back on Redis well within a second of it answering again.
  CircuitBreakerOptions breaker = default_breaker();

  static CircuitBreakerOptions default_breaker() {
    CircuitBreakerOptions b;
    b.window_size = 20;
    b.minimum_calls = 10;
    b.failure_rate = 50;
    b.consecutive_failures = 5;
    b.open_for = std::chrono::milliseconds(250);
    b.max_open_for = std::chrono::milliseconds(250);
    return b;
  }
  // Tests only: the time the scripts decide at, instead of Redis TIME.
  const Clock* pinned_clock = nullptr;
};

class RedisStore final : public Store {
 public:
  using DecisionHandler = boost::asio::any_completion_handler<void(Result<Decision>)>;
  using DecisionsHandler =
      boost::asio::any_completion_handler<void(Result<std::vector<Decision>>)>;
  using StatusHandler = boost::asio::any_completion_handler<void(Status)>;
  using ReleaseHandler = boost::asio::any_completion_handler<void(Result<bool>)>;

  // A store with a thread of its own, for synchronous use: no Asio needed.
  static Result<std::unique_ptr<RedisStore>> open(RedisStoreOptions options);
  // A store whose I/O runs on the caller's executor (e.g. an io_context's); completions run on each
  // handler's associated executor, by default this one. Destroy the store before that executor's
  // execution context; pending calls then complete with kStoreUnavailable. Decisions (and
  // releases' answers) read from a reply are dispatched, not posted: when the store reads the reply
  // on a thread already running the handler's executor, the handler runs at once, inside the
  // store's strand, until it returns or suspends (what it starts on the store then queues behind
  // the reply). Failures, and answers given before the initiating call returns, are always posted.
  static Result<std::unique_ptr<RedisStore>> open(boost::asio::any_io_executor executor,
                                                  RedisStoreOptions options);
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  // Connecting starts with open(). This waits until connected, or returns the error of the first
  // failed attempt; a cluster is connected once its slot map is loaded and every master connected,
  // and gives up waiting after 5 connect timeouts. Either way the store keeps reconnecting in the
  // background.
  Status connect();

  // The Store interface, synchronously.
  Result<Decision> acquire(std::string_view key, const Limit& limit,
                           std::int64_t cost = 1) override;
  Status acquire_all(std::span<const LimitRequest> requests,
                     std::span<Decision> decisions) override;
  Result<Decision> peek(std::string_view key, const Limit& limit) override;
  Status reset(std::string_view key, const Limit& limit) override;
  Status release(std::string_view key, const Limit& limit, std::uint64_t lease) override;

  // One request with its own failure policy.
  Result<Decision> acquire(const LimitRequest& request);

  // The same, asynchronously, with any Asio completion token (a callback, use_awaitable, ...).
  // Keys and limits are copied when the operation starts.
  template <class Token>
  auto async_connect(Token&& token) {
    return boost::asio::async_initiate<Token, void(Status)>(
        [this](auto handler) { start_connect(StatusHandler(std::move(handler))); }, token);
  }

  template <class Token>
  auto async_acquire(const LimitRequest& request, Token&& token) {
    return boost::asio::async_initiate<Token, void(Result<Decision>)>(
        [this](auto handler, const LimitRequest& r) {
          start_acquire(r, DecisionHandler(std::move(handler)));
        },
        token, request);
  }

  template <class Token>
  auto async_acquire(std::string_view key, const Limit& limit, std::int64_t cost, Token&& token) {
    return async_acquire(LimitRequest{key, &limit, cost, options_.on_store_failure},
                         std::forward<Token>(token));
  }

  // All or nothing; completes with one decision per request.
  template <class Token>
  auto async_acquire_all(std::span<const LimitRequest> requests, Token&& token) {
    return boost::asio::async_initiate<Token, void(Result<std::vector<Decision>>)>(
        [this](auto handler, std::span<const LimitRequest> r) {
          start_acquire_all(r, DecisionsHandler(std::move(handler)));
        },
        token, requests);
  }

  // The same, with the decisions written into `decisions` (one per request, valid until the
  // operation completes), completing with the status alone: for a caller that keeps its decisions
  // (the gateway), without a vector made and copied per call.
  template <class Token>
  auto async_acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                         Token&& token) {
    return boost::asio::async_initiate<Token, void(Status)>(
        [this](auto handler, std::span<const LimitRequest> r, std::span<Decision> d) {
          start_acquire_into(r, d, StatusHandler(std::move(handler)));
        },
        token, requests, decisions);
  }
  template <class Token>
  auto async_peek(std::string_view key, const Limit& limit, Token&& token) {
    return boost::asio::async_initiate<Token, void(Result<Decision>)>(
        [this](auto handler, std::string_view k, const Limit* l) {
          start_peek(k, *l, DecisionHandler(std::move(handler)));
        },
        token, key, &limit);
  }

  template <class Token>
  auto async_reset(std::string_view key, const Limit& limit, Token&& token) {
    return boost::asio::async_initiate<Token, void(Status)>(
        [this](auto handler, std::string_view k, const Limit* l) {
          start_reset(k, *l, StatusHandler(std::move(handler)));
        },
        token, key, &limit);
  }

  // Completes with whether the lease was held (false: released already, or timed out).
  template <class Token>
  auto async_release(std::string_view key, const Limit& limit, std::uint64_t lease, Token&& token) {
    return boost::asio::async_initiate<Token, void(Result<bool>)>(
        [this](auto handler, std::string_view k, const Limit* l, std::uint64_t id) {
          start_release(k, *l, id, ReleaseHandler(std::move(handler)));
        },
        token, key, &limit, lease);
  }

  const RedisStoreOptions& options() const { return options_; }
  // The limit OnStoreFailure::kLocal decides by: this instance's share of `limit`, its counts divided
  // by fleet_size (at least 1) and a rate's period made fleet_size times longer.
  Limit local_share(const Limit& limit) const;
  // The breaker around Redis, for metrics and operators (force_open, reset, ...).
  CircuitBreaker& breaker();

  // Tells `listener`, on the store's executor, when its breaker opens (false, with the error that
  // opened it) and when it closes again (true, with nothing). While the breaker is open, or
  // half-open wanting more probes, the store probes Redis itself (an acquire on a key of its own at
  // each open_for), so that it closes once Redis decides again even when no call comes. Set it
  // before the calls it should hear of.
  using AvailabilityListener = std::function<void(bool available, const std::string& why)>;
  void on_availability(AvailabilityListener listener);

  // Tells `listener`, on the store's executor, of each call Redis answered with an error while it
  // was available (a key holding what sluice did not write: WRONGTYPE; on a cluster, a state of two
  // keys made while its slot moves, refused with TRYAGAIN until it has moved), with the error and
  // the keys: such a call follows its on_store_failure as an outage does, but no breaker opens to
  // say so.
  using RefusalListener = std::function<void(const std::string& why)>;
  void on_refusal(RefusalListener listener);

  // A cluster: tells `listener`, on the store's executor, when the breaker of one master's calls
  // opens (kNotAnswering, with the failure that opened it: a hung or cut-off master), when it
  // closes again (kAnswering: meanwhile the store sends the master CLUSTER INFO whenever the
  // breaker lets a call through, so that it is found answering without a call for its keys), and
  // when a master not answering leaves the slot map (kGone, a replica having taken its slots).
  // Meanwhile the other masters' keys are decided as ever and the store's own breaker stays
  // closed, so on_availability says nothing of it. Nothing is told once the store closes: a master
  // said not to answer then is never said to answer again.
  using NodeListener = std::function<void(const std::string& node, NodeState state, const std::string& why)>;
  void on_node_change(NodeListener listener);

  // A cluster: tells `listener`, on the store's executor, what an operator should know that fails
  // no call: that none of the addresses the store was opened with is a node of the cluster any
  // more (a restart with them would find no cluster), and that one is again, as found at a read of
  // the slot map (see cluster_map_refresh). (Addresses given as host names are not looked at: the
  // cluster lists its nodes by address; nor are any when the first map lists none of them.)
  // With the notice, the line to log.
  using NoticeListener = std::function<void(Notice notice, const std::string& text)>;
  void on_notice(NoticeListener listener);

  struct Impl;
  struct OwnThread;

 private:
  RedisStore(RedisStoreOptions options, std::shared_ptr<Impl> impl,
             std::unique_ptr<OwnThread> own);

  void start_connect(StatusHandler handler);
  void start_acquire(const LimitRequest& request, DecisionHandler handler);
  void start_peek(std::string_view key, const Limit& limit, DecisionHandler handler);
  void start_decide(const LimitRequest& request, DecisionHandler handler);
  void start_acquire_all(std::span<const LimitRequest> requests, DecisionsHandler handler);
  void start_acquire_into(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                          StatusHandler handler);
  void start_reset(std::string_view key, const Limit& limit, StatusHandler handler);
  void start_release(std::string_view key, const Limit& limit, std::uint64_t lease,
                     ReleaseHandler handler);

  RedisStoreOptions options_;
  std::unique_ptr<OwnThread> own_;  // the thread of a store made for synchronous use
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis
