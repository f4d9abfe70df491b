#include "gateway/limiter.h"

namespace sluice::gateway {

void StoreLimiter::acquire_all(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                               Handler done) {
  Status s = requests.empty() ? Status{} : store_.acquire_all(requests, decisions);
  std::move(done)(std::move(s));
}

void StoreLimiter::acquire_each(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                                Handler done) {
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
  std::move(done)(Status{});
}

void StoreLimiter::release(std::string_view key, const Limit& limit, std::uint64_t lease, Handler done) {
  std::move(done)(store_.release(key, limit, lease));
}

}  // namespace sluice::gateway
