#include "sluice/limit.h"

#include <numeric>
#include <string>

#include "core/duration.h"

// Returns the error of a failed check from the enclosing function.
#define SLUICE_CHECK(expr)                  \
  do {                                      \
    const Status status_ = (expr);          \
    if (!status_) return status_.error();   \
  } while (0)

namespace sluice {

const char* to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kTokenBucket: return "token_bucket";
    case Algorithm::kGcra: return "gcra";
    case Algorithm::kSlidingLog: return "sliding_log";
    case Algorithm::kSlidingWindow: return "sliding_window";
    case Algorithm::kFixedWindow: return "fixed_window";
    case Algorithm::kConcurrency: return "concurrency";
  }
  return "unknown";
}

Status check_count(const char* what, std::int64_t value) {
  if (value < 1 || value > kMaxLimit) {
    return invalid_argument(std::string(what) + " must be between 1 and 2^40 (1099511627776), got " +
                            std::to_string(value));
  }
  return {};
}

Status check_period(const char* what, Nanos period) {
  if (period < kMinPeriod || period > kMaxPeriod) {
    return invalid_argument(std::string(what) + " must be between 1ms and 365d, got " +
                            format_duration(period));
  }
  if (period.count() % 1000 != 0) {
    return invalid_argument(std::string(what) + " must be a whole number of microseconds, got " +
                            std::to_string(period.count()) + "ns");
  }
  return {};
}

namespace {

using detail::LimitParams;

constexpr std::int64_t kMaxFillUs = kMaxFillTime.count() / 1000;

Status check_fill_time(__int128 fill_us) {
  if (fill_us > kMaxFillUs) {
    return invalid_argument(
        "the limit would take longer than 100 years to refill from empty; raise the rate or lower "
        "the capacity");
  }
  return {};
}

// The meter shared by the continuous token bucket and GCRA: `quota` at once, `rate` per `period_us`.
LimitParams meter(Algorithm algorithm, std::int64_t quota, std::int64_t rate, std::int64_t period_us) {
  LimitParams p;
  p.algorithm = algorithm;
  p.refill = Refill::kContinuous;
  p.quota = quota;
  p.rate = rate;
  p.period_us = period_us;
  const std::int64_t g = std::gcd(period_us, rate);
  p.units_per_token = period_us / g;
  p.units_per_us = rate / g;
  return p;
}

__int128 meter_fill_us(const LimitParams& p) {
  const __int128 units = static_cast<__int128>(p.quota) * p.units_per_token;
  return (units + p.units_per_us - 1) / p.units_per_us;
}

}  // namespace

Result<Limit> Limit::token_bucket(const TokenBucketSpec& spec) {
  SLUICE_CHECK(check_count("capacity", spec.capacity));
  SLUICE_CHECK(check_count("refill tokens", spec.refill_tokens));
  SLUICE_CHECK(check_period("refill period", spec.refill_period));
  if (spec.refill != Refill::kContinuous && spec.refill != Refill::kInterval) {
    return invalid_argument("refill must be Refill::kContinuous or Refill::kInterval, got " +
                            std::to_string(static_cast<int>(spec.refill)));
  }
  const std::int64_t period_us = spec.refill_period.count() / 1000;
  if (spec.refill == Refill::kContinuous) {
    LimitParams p = meter(Algorithm::kTokenBucket, spec.capacity, spec.refill_tokens, period_us);
    SLUICE_CHECK(check_fill_time(meter_fill_us(p)));
    return Limit(p);
  }
  LimitParams p;
  p.algorithm = Algorithm::kTokenBucket;
  p.refill = Refill::kInterval;
  p.quota = spec.capacity;
  p.rate = spec.refill_tokens;
  p.period_us = period_us;
  const std::int64_t steps = (spec.capacity + spec.refill_tokens - 1) / spec.refill_tokens;
  SLUICE_CHECK(check_fill_time(static_cast<__int128>(steps) * period_us));
  return Limit(p);
}

Result<Limit> Limit::gcra(const GcraSpec& spec) {
  SLUICE_CHECK(check_count("limit", spec.limit));
  SLUICE_CHECK(check_count("burst", spec.burst));
  SLUICE_CHECK(check_period("period", spec.period));
  LimitParams p = meter(Algorithm::kGcra, spec.burst, spec.limit, spec.period.count() / 1000);
  SLUICE_CHECK(check_fill_time(meter_fill_us(p)));
  return Limit(p);
}

namespace {

Result<LimitParams> window_params(Algorithm algorithm, const WindowSpec& spec) {
  SLUICE_CHECK(check_count("limit", spec.limit));
  SLUICE_CHECK(check_period("period", spec.period));
  LimitParams p;
  p.algorithm = algorithm;
  p.quota = spec.limit;
  p.rate = spec.limit;
  p.period_us = spec.period.count() / 1000;
  return p;
}

}  // namespace

Result<Limit> Limit::sliding_log(const WindowSpec& spec) {
  auto p = window_params(Algorithm::kSlidingLog, spec);
  if (!p) return p.error();
  return Limit(*p);
}

Result<Limit> Limit::sliding_window(const WindowSpec& spec) {
  auto p = window_params(Algorithm::kSlidingWindow, spec);
  if (!p) return p.error();
  return Limit(*p);
}

Result<Limit> Limit::fixed_window(const WindowSpec& spec) {
  auto p = window_params(Algorithm::kFixedWindow, spec);
  if (!p) return p.error();
  return Limit(*p);
}

Result<Limit> Limit::concurrency(const ConcurrencySpec& spec) {
  SLUICE_CHECK(check_count("limit", spec.limit));
  SLUICE_CHECK(check_period("lease timeout", spec.lease_timeout));
  LimitParams p;
  p.algorithm = Algorithm::kConcurrency;
  p.quota = spec.limit;
  p.rate = spec.limit;
  p.period_us = spec.lease_timeout.count() / 1000;
  return Limit(p);
}

Limit::Limit(const detail::LimitParams& p) : p_(p) {
  p_.by_period = detail::Divider(static_cast<std::uint64_t>(p_.period_us));
  p_.by_rate = detail::Divider(static_cast<std::uint64_t>(p_.rate));
  if (p_.units_per_token > 0) {
    p_.by_units_per_token = detail::Divider(static_cast<std::uint64_t>(p_.units_per_token));
    p_.by_units_per_us = detail::Divider(static_cast<std::uint64_t>(p_.units_per_us));
  }
}

Nanos Limit::window() const {
  if (p_.algorithm == Algorithm::kGcra ||
      (p_.algorithm == Algorithm::kTokenBucket && p_.refill == Refill::kContinuous)) {
    return Nanos{static_cast<std::int64_t>(meter_fill_us(p_)) * 1000};
  }
  if (p_.algorithm == Algorithm::kTokenBucket) {
    const std::int64_t steps = (p_.quota + p_.rate - 1) / p_.rate;
    return Nanos{steps * p_.period_us * 1000};
  }
  return Nanos{p_.period_us * 1000};
}

std::string Limit::to_string() const {
  const std::string period = format_duration(Nanos{p_.period_us * 1000});
  const std::string quota = std::to_string(p_.quota);
  const std::string rate = std::to_string(p_.rate);
  switch (p_.algorithm) {
    case Algorithm::kTokenBucket:
      if (p_.refill == Refill::kContinuous) {
        return "token_bucket(capacity=" + quota + ",rate=" + rate + ",per=" + period + ")";
      }
      return "token_bucket(capacity=" + quota + ",refill_tokens=" + rate +
             ",refill_interval=" + period + ")";
    case Algorithm::kGcra:
      return "gcra(limit=" + rate + ",period=" + period + ",burst=" + quota + ")";
    case Algorithm::kConcurrency:
      return "concurrency(limit=" + quota + ",lease_timeout=" + period + ")";
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingWindow:
    case Algorithm::kFixedWindow:
      return std::string(sluice::to_string(p_.algorithm)) + "(limit=" + quota + ",period=" + period +
             ")";
  }
  return "unknown";
}

bool operator==(const Limit& a, const Limit& b) {
  const LimitParams& x = a.p_;
  const LimitParams& y = b.p_;
  return x.algorithm == y.algorithm && x.refill == y.refill && x.quota == y.quota &&
         x.rate == y.rate && x.period_us == y.period_us;
}

}  // namespace sluice
