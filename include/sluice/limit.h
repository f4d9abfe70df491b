// Limit: one validated limiting rule (algorithm + parameters), with the constants its decisions need
// precomputed. Immutable after creation; safe to share between threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "sluice/clock.h"
#include "sluice/divider.h"
#include "sluice/result.h"

namespace sluice {

enum class Algorithm : std::uint8_t {
  kTokenBucket,
  kGcra,
  kSlidingLog,
  kSlidingWindow,
  kFixedWindow,
  kConcurrency,
};

const char* to_string(Algorithm algorithm);

// How a token bucket refills.
enum class Refill : std::uint8_t {
  kContinuous,  // smoothly: refill_tokens spread evenly over each refill_period
  kInterval,    // in steps: refill_tokens at once at every multiple of refill_period since the epoch,
                // like a timer that tops the bucket up (computed lazily; there is no timer thread)
};

// Ranges every spec must respect. Limits, capacities, bursts and costs go up to 2^40; periods are
// whole microseconds from 1 ms to 365 days; the time a limit takes to go from empty back to full is
// at most 100 years. Inside these ranges no computation overflows (see docs/algorithms.md).
inline constexpr std::int64_t kMaxLimit = std::int64_t{1} << 40;
inline constexpr Nanos kMinPeriod = std::chrono::milliseconds(1);
inline constexpr Nanos kMaxPeriod = std::chrono::hours(24 * 365);
inline constexpr Nanos kMaxFillTime = std::chrono::hours(24 * 365 * 100);

// The checks of one parameter each spec makes (`what` names it in the message), for a caller that
// reports every parameter out of range at once rather than the first.
Status check_count(const char* what, std::int64_t value);
Status check_period(const char* what, Nanos period);

struct TokenBucketSpec {
  std::int64_t capacity = 0;       // the most tokens the bucket holds; it starts full
  std::int64_t refill_tokens = 0;  // tokens added per refill_period
  Nanos refill_period{0};
  Refill refill = Refill::kContinuous;
};

// GCRA, the leaky bucket as a meter: `limit` per `period` on average, at most `burst` at once.
struct GcraSpec {
  std::int64_t limit = 0;
  Nanos period{0};
  std::int64_t burst = 0;
};

// Sliding log, sliding window counter and fixed window: at most `limit` per `period`.
struct WindowSpec {
  std::int64_t limit = 0;
  Nanos period{0};
};

// At most `limit` in flight; a lease not released within lease_timeout is given back by itself.
struct ConcurrencySpec {
  std::int64_t limit = 0;
  Nanos lease_timeout{0};
};

namespace detail {

// The validated parameters and the constants derived from them. Times in microseconds.
struct LimitParams {
  Algorithm algorithm = Algorithm::kTokenBucket;
  Refill refill = Refill::kContinuous;
  std::int64_t quota = 0;      // capacity, burst or limit: the most admitted at once
  std::int64_t rate = 0;       // token bucket: refill_tokens; gcra: limit; windows: limit
  std::int64_t period_us = 0;  // refill_period, period or lease_timeout
  // Continuous token bucket and GCRA run as one meter over rational time. One token is worth
  // unit_per_token "units", and each microsecond adds units_per_us units (period and rate divided by
  // their gcd), so every quantity is an exact integer.
  std::int64_t units_per_token = 0;
  std::int64_t units_per_us = 0;
  // The divisions decisions make, precomputed.
  Divider by_period;           // period_us
  Divider by_rate;             // rate
  Divider by_units_per_token;  // units_per_token (meter only)
  Divider by_units_per_us;     // units_per_us (meter only)
};

}  // namespace detail

class Limit {
 public:
  static Result<Limit> token_bucket(const TokenBucketSpec& spec);
  static Result<Limit> gcra(const GcraSpec& spec);
  static Result<Limit> sliding_log(const WindowSpec& spec);
  static Result<Limit> sliding_window(const WindowSpec& spec);
  static Result<Limit> fixed_window(const WindowSpec& spec);
  static Result<Limit> concurrency(const ConcurrencySpec& spec);

  Algorithm algorithm() const { return p_.algorithm; }
  // The most the limit admits at once: capacity, burst, window limit or permits in flight.
  std::int64_t quota() const { return p_.quota; }
  // The period the quota refers to, for RateLimit-Policy's w= (the time a bucket takes to refill
  // from empty, for the bucket algorithms).
  Nanos window() const;
  // A canonical description, e.g. "gcra(limit=5,period=60s,burst=5)". Equal limits describe equally.
  std::string to_string() const;

  const detail::LimitParams& params() const { return p_; }

  friend bool operator==(const Limit& a, const Limit& b);

 private:
  explicit Limit(const detail::LimitParams& p);
  detail::LimitParams p_;
};

}  // namespace sluice
