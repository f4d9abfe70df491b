// Store: keyed limiter state with atomic decisions, in-process (LocalStore) or shared (RedisStore).
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "sluice/decision.h"
#include "sluice/limit.h"
#include "sluice/result.h"

namespace sluice {

// What a shared store (RedisStore) answers for a request when it cannot reach its backend. Each
// request carries its own; the local store never fails that way and ignores it.
enum class OnStoreFailure : std::uint8_t {
  kError,  // report the error (kStoreUnavailable, kTimeout)
  kAllow,  // fail open: admit
  kDeny,   // fail closed: reject
  kLocal,  // decide in this process, with the limit divided by the store's fleet size
};

// One limit a request must pass: the state `key` names, the rule it follows, what the request takes.
// A key names one state of each kind of limit (the meter of token buckets and GCRA, the interval
// bucket, the fixed window, the sliding window, the log, the leases): give each limit a key of its
// own ("user:42:second", "user:42:hour"). acquire_all refuses two different limits of one kind on
// one key; separate calls cannot tell, and would count each other's requests in one state.
struct LimitRequest {
  std::string_view key;
  const Limit* limit = nullptr;
  std::int64_t cost = 1;
  OnStoreFailure on_store_failure = OnStoreFailure::kError;
};

class Store {
 public:
  virtual ~Store() = default;

  // Decides one request and consumes when it admits. cost is 1 to kMaxLimit.
  virtual Result<Decision> acquire(std::string_view key, const Limit& limit,
                                   std::int64_t cost = 1) = 0;

  // Several limits for one request, all or nothing: decisions[i] answers requests[i]; the request is
  // admitted when every decision is allowed, and when any is not, none of them consumes anything.
  // decisions.size() must equal requests.size().
  virtual Status acquire_all(std::span<const LimitRequest> requests,
                             std::span<Decision> decisions) = 0;

  // The state as a request of cost 0 sees it (remaining, reset_after), consuming nothing.
  virtual Result<Decision> peek(std::string_view key, const Limit& limit) = 0;

  // Forgets the key's state: it is full again.
  virtual Status reset(std::string_view key, const Limit& limit) = 0;

  // Concurrency limits: gives back the permits of an admitted request (Decision::lease).
  // Releasing a lease that is not held (released already, or timed out) is not an error.
  virtual Status release(std::string_view key, const Limit& limit, std::uint64_t lease) = 0;
};

// Checks what every store checks before deciding: a cost of 1 to kMaxLimit and one decision slot per
// request. Returns the error to report, if any.
Status validate(std::span<const LimitRequest> requests, std::span<Decision> decisions);

}  // namespace sluice
