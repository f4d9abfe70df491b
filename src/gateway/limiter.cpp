#include "gateway/limiter.h"

namespace sluice::gateway {

void StoreLimiter::acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                               Handler done) {
  std::move(done)(*acquire_all_now(requests, decisions));
}

void StoreLimiter::acquire_each(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                                Handler done) {
  std::move(done)(*acquire_each_now(requests, decisions));
}

std::optional<Status> StoreLimiter::acquire_all_now(std::span<const LimitRequest> requests,
                                                    std::span<Decision> decisions) {
  return requests.empty() ? Status{} : store_.acquire_all(requests, decisions);
}

std::optional<Status> StoreLimiter::acquire_each_now(std::span<const LimitRequest> requests,
                                                     std::span<Decision> decisions) {
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto d = store_.acquire(requests[i].key, *requests[i].limit, requests[i].cost);
    if (d.ok()) {
      decisions[i] = *d;
    } else {
      decisions[i] = Decision{};
      decisions[i].allowed = true;
      decisions[i].fallback = true;
    }
  }
  return Status{};
}

void StoreLimiter::release(std::string_view key, const Limit& limit, std::uint64_t lease, Handler done) {
  std::move(done)(store_.release(key, limit, lease));
}

}  // namespace sluice::gateway
