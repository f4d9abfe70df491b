// Limiter: the gateway's asynchronous seam to a limit store. A synchronous store (LocalStore) answers
// before the call returns; a networked one (Redis) answers later, on its own threads, and the
// caller's completion handler brings the answer back to the caller's executor. Implementations are
// thread-safe.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sluice/circuit_breaker.h"
#include "sluice/redis/cluster_news.h"
#include "sluice/result.h"
#include "sluice/store.h"

namespace sluice::gateway {

class Limiter {
 public:
  using Handler = boost::asio::any_completion_handler<void(Status)>;

  virtual ~Limiter() = default;

  // Gets ready to decide (a networked store: connects); the gateway calls it once, from the thread
  // of the event loop the limiter serves, before it accepts requests. Calls done with ok, or with
  // why the limiter cannot decide yet (it keeps trying meanwhile; limits follow on_store_failure).
  virtual void connect(Handler done) { std::move(done)(Status{}); }

  // The state of the breaker around a shared store, for /metrics; nothing for a store in this process.
  virtual std::optional<BreakerState> store_breaker() const { return std::nullopt; }

  // Tells `f` when a shared store stops answering (false, with why) and when it answers again
  // (true), from the limiter's event loop; the gateway logs it. A store in this process never does.
  using AvailabilityListener = std::function<void(bool available, const std::string& why)>;
  virtual void watch_store(AvailabilityListener /*f*/) {}
  // Tells `f` of each call a shared store answered with an error while available (a key holding
  // what sluice did not write), with why; the gateway logs it.
  using RefusalListener = std::function<void(const std::string& why)>;
  virtual void watch_refusals(RefusalListener /*f*/) {}
  // Tells `f` when one master of a Redis Cluster stops answering, answers again, or leaves the slot
  // map while not answering (see redis::RedisStore::on_node_change), from the limiter's event loop;
  // the gateway logs it. Any other store never does.
  using NodeListener = std::function<void(const std::string& node, redis::NodeState state, const std::string& why)>;
  virtual void watch_nodes(NodeListener /*f*/) {}
  // Tells `f` what an operator should know of a shared store that fails no call (see
  // redis::RedisStore::on_notice); the gateway logs it.
  using NoticeListener = std::function<void(redis::Notice notice, const std::string& text)>;
  virtual void watch_notices(NoticeListener /*f*/) {}

  // The limit a decision made by on_store_failure: local followed (Decision::fallback): this
  // process's share of `limit` in a fleet on a shared store; the limit itself for a store in this
  // process, which never falls back.
  virtual Limit local_share(const Limit& limit) const { return limit; }

  // Store::acquire_all: all or nothing. Calls done exactly once with the store's status, the
  // decisions filled in when it is ok. requests, their keys and decisions must stay valid until then.
  virtual void acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                           Handler done) = 0;
  // Each request decided on its own (shadow limits, which must not veto one another). A request
  // the store could not decide is decided by its on_store_failure (Decision::fallback set), and one
  // not even so gets a Decision with allowed and fallback set.
  virtual void acquire_each(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                            Handler done) = 0;
  // Gives back a concurrency lease. done says whether the store could be told (when not, the lease
  // times out by itself); key and limit need to stay valid only during the call.
  virtual void release(std::string_view key, const Limit& limit, std::uint64_t lease,
                       Handler done) = 0;

  // The same decisions from a store that answers before the call returns, without a handler (whose
  // type erasure costs an allocation per request): the store's status. nullopt from a store that
  // answers later (the default): call acquire_all / acquire_each instead.
  virtual std::optional<Status> acquire_all_now(std::span<const LimitRequest> /*requests*/,
                                                std::span<Decision> /*decisions*/) {
    return std::nullopt;
  }
  virtual std::optional<Status> acquire_each_now(std::span<const LimitRequest> /*requests*/,
                                                 std::span<Decision> /*decisions*/) {
    return std::nullopt;
  }

  // Awaitable forms for any Asio completion token (use_awaitable, a callback, ...).
  template <class Token>
  auto async_acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                         Token&& token) {
    return boost::asio::async_initiate<Token, void(Status)>(
        [this, requests, decisions](auto handler) { acquire_all(requests, decisions, std::move(handler)); },
        token);
  }
  template <class Token>
  auto async_acquire_each(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                          Token&& token) {
    return boost::asio::async_initiate<Token, void(Status)>(
        [this, requests, decisions](auto handler) { acquire_each(requests, decisions, std::move(handler)); },
        token);
  }
};

// Makes the limiter of one event loop, given its executor (see GatewayOptions::make_limiter).
using LimiterFactory = std::function<Result<std::shared_ptr<Limiter>>(boost::asio::any_io_executor)>;

// A Limiter over a synchronous Store: every call completes before it returns.
class StoreLimiter final : public Limiter {
 public:
  explicit StoreLimiter(Store& store) : store_(store) {}

  void acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                   Handler done) override;
  void acquire_each(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                    Handler done) override;
  void release(std::string_view key, const Limit& limit, std::uint64_t lease, Handler done) override;
  std::optional<Status> acquire_all_now(std::span<const LimitRequest> requests,
                                        std::span<Decision> decisions) override;
  std::optional<Status> acquire_each_now(std::span<const LimitRequest> requests,
                                         std::span<Decision> decisions) override;

 private:
  Store& store_;
};

}  // namespace sluice::gateway
