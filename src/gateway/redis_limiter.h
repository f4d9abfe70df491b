// RedisLimiter: the gateway's Limiter on a RedisStore, so that every gateway of a fleet counts a
// limit in one place; while Redis cannot decide, each limit's on_store_failure does. Thread-safe,
// as its store is; completions run on the caller's executor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <string>

#include "gateway/limiter.h"
#include "sluice/redis/redis_store.h"

namespace sluice::gateway {

class RedisLimiter final : public Limiter {
 public:
  // A limiter whose store runs its I/O on `executor`.
  static Result<std::shared_ptr<RedisLimiter>> open(boost::asio::any_io_executor executor,
                                                    redis::RedisStoreOptions options);

  void connect(Handler done) override;
  std::optional<BreakerState> store_breaker() const override { return store_->breaker().state(); }
  Limit local_share(const Limit& limit) const override { return store_->local_share(limit); }
  void watch_store(AvailabilityListener f) override { store_->on_availability(std::move(f)); }
  void watch_refusals(RefusalListener f) override { store_->on_refusal(std::move(f)); }
  void watch_nodes(NodeListener f) override { store_->on_node_change(std::move(f)); }
  void watch_notices(NoticeListener f) override { store_->on_notice(std::move(f)); }
  void acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                   Handler done) override;
  // Each request follows its own on_store_failure while Redis cannot decide, as in acquire_all: a
  // shadow limit reports what it would have done, and a shadow limit never rejects.
  void acquire_each(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                    Handler done) override;
  void release(std::string_view key, const Limit& limit, std::uint64_t lease, Handler done) override;

  redis::RedisStore& store() { return *store_; }

 private:
  RedisLimiter(boost::asio::any_io_executor executor, std::unique_ptr<redis::RedisStore> store)
      : executor_(std::move(executor)), store_(std::move(store)) {}

  boost::asio::any_io_executor executor_;
  std::unique_ptr<redis::RedisStore> store_;
};

// Checks the options (the address first) and returns the factory `sluice serve` gives
// GatewayOptions::make_limiter: a RedisLimiter for each worker thread, with a RedisStore (and so a
// connection per Redis node) of its own, running on that worker's event loop.
//
// One store per worker rather than one for the process: a decision is sent, answered and resumed on
// the thread that serves its request, with no hop to another thread and back and no strand or lock
// shared between workers; each store's pipeline carries one worker's requests. The price is a
// connection per worker and node, and a circuit breaker per worker, each of which learns of an
// outage from its own calls (5 failures in a row at most). The in-process store that
// on_store_failure: local falls back on is one for all of them (unless the options name one), so a
// gateway admits its share of a limit once, not once per thread.
Result<LimiterFactory> redis_limiters(redis::RedisStoreOptions options);

// The address without its password, to print.
std::string describe_store(const std::string& address);

}  // namespace sluice::gateway
