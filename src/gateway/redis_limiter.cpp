#include "gateway/redis_limiter.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/bind_executor.hpp>

#include "sluice/redis/address.h"

namespace sluice::gateway {

namespace asio = boost::asio;

Result<std::shared_ptr<RedisLimiter>> RedisLimiter::open(asio::any_io_executor executor,
                                                         redis::RedisStoreOptions options) {
  auto store = redis::RedisStore::open(executor, std::move(options));
  if (!store) return store.error();
  return std::shared_ptr<RedisLimiter>(new RedisLimiter(std::move(executor), std::move(*store)));
}

void RedisLimiter::connect(Handler done) { store_->async_connect(std::move(done)); }

void RedisLimiter::acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                               Handler done) {
  if (requests.empty()) return std::move(done)(Status{});
  store_->async_acquire_all(requests, decisions, std::move(done));
}

void RedisLimiter::acquire_each(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                                Handler done) {
  if (requests.empty()) return std::move(done)(Status{});
  // The calls answer one by one (on the caller's executor, but perhaps a pool's threads).
  struct Join {
    std::span<Decision> decisions;
    Handler done;
    std::atomic<std::size_t> left;
  };
  const auto ex = asio::get_associated_executor(done, executor_);
  auto join = std::make_shared<Join>(decisions, std::move(done), requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    store_->async_acquire(requests[i], asio::bind_executor(ex, [join, i](Result<Decision> d) {
      if (d) {
        join->decisions[i] = *d;
      } else {
        // Not decided even by its policy (a request the store refuses as such): admitted, and
        // marked as a fallback.
        join->decisions[i] = Decision{};
        join->decisions[i].allowed = true;
        join->decisions[i].fallback = true;
      }
      if (join->left.fetch_sub(1, std::memory_order_acq_rel) == 1) std::move(join->done)(Status{});
    }));
  }
}

void RedisLimiter::release(std::string_view key, const Limit& limit, std::uint64_t lease, Handler done) {
  const auto ex = asio::get_associated_executor(done, executor_);
  store_->async_release(key, limit, lease,
                        asio::bind_executor(ex, [done = std::move(done)](Result<bool> r) mutable {
                          std::move(done)(r ? Status{} : Status(r.error()));
                        }));
}

Result<LimiterFactory> redis_limiters(redis::RedisStoreOptions options) {
  if (auto address = redis::parse_address(options.address); !address) return address.error();
  if (options.fleet_size < 1) return invalid_argument("the fleet size must be at least 1");
  if (!options.local_store) options.local_store = std::make_shared<LocalStore>();
  return LimiterFactory([options = std::move(options)](
                            asio::any_io_executor executor) -> Result<std::shared_ptr<Limiter>> {
    auto limiter = RedisLimiter::open(std::move(executor), options);
    if (!limiter) return limiter.error();
    return std::shared_ptr<Limiter>(std::move(*limiter));
  });
}

std::string describe_store(const std::string& address) {
  auto a = redis::parse_address(address);
  if (!a) return "an invalid Redis address";
  std::string out = a->cluster ? "redis-cluster://" : "redis://";
  for (std::size_t i = 0; i < a->nodes.size(); ++i) out += (i > 0 ? "," : "") + a->nodes[i].to_string();
  if (a->db != 0) out += "/" + std::to_string(a->db);
  return out;
}

}  // namespace sluice::gateway
