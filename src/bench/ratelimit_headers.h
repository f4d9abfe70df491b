// Reading responses' rate-limit headers (RateLimit, X-RateLimit-*, Retry-After), and checking that
// `remaining` only falls within a window. Pure functions and values; not synchronised.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/clock.h"

namespace sluice::bench {

// One quota as a response reports it: `"name";r=remaining;t=reset` in the IETF RateLimit field, or
// the separate RateLimit-Remaining / RateLimit-Reset fields (name "").
struct QuotaSeen {
  std::string name;
  std::optional<std::int64_t> remaining;
  std::optional<std::int64_t> reset_s;  // seconds until the quota resets
};

// Appends the quotas of a RateLimit field value to `out`. Understands the structured list of the
// current IETF draft (`"a";r=1;t=3, "b";r=5;t=10`) and the older `limit=100, remaining=50,
// reset=30`. Ignores what it does not understand.
void parse_ratelimit_field(std::string_view value, std::vector<QuotaSeen>& out);

// A non-negative whole number of seconds (delta-seconds, as in Retry-After), or nothing.
std::optional<std::int64_t> parse_seconds(std::string_view value);

// An HTTP-date (RFC 9110 5.6.7) as a Unix time: the IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT",
// and the obsolete forms a recipient must accept too, RFC 850's "Sunday, 06-Nov-94 08:49:37 GMT"
// (a two-digit year 70-99 is 19xx, 00-69 20xx) and asctime's "Sun Nov  6 08:49:37 1994".
std::optional<std::int64_t> parse_http_date(std::string_view value);

// Retry-After (RFC 9110 10.2.3) in seconds: delta-seconds, or an HTTP-date, which becomes the
// seconds left from `now_unix_s` (0 for a date already past).
std::optional<std::int64_t> parse_retry_after(std::string_view value, std::int64_t now_unix_s);

// `value` as a report may show it: at most 40 bytes, with every byte that is not printable ASCII as
// '?' (a header's value may carry control bytes and obs-text).
std::string printable_sample(std::string_view value);

// A reset given as a Unix time (X-RateLimit-Reset: 1700000000, as some services send it) becomes
// the seconds left from `now_unix_s`; a small value is already a delta and stays as it is.
std::int64_t reset_delta(std::int64_t value, std::int64_t now_unix_s);

// The smallest and the largest of some values, and how many there were.
struct Spread {
  std::uint64_t count = 0;
  std::int64_t min = 0;
  std::int64_t max = 0;

  void add(std::int64_t value);
  void merge(const Spread& other);
};

// What the rate-limit headers of a whole run showed.
struct RateLimitSummary {
  Spread remaining;      // one value per quota a response reported (two quotas: two values)
  Spread reset_s;        // seconds until the quota resets
  Spread retry_after_s;  // Retry-After, in seconds
  std::uint64_t rejected_without_retry_after = 0;  // 429s without one (or without a valid one)
  // Responses whose Retry-After was neither seconds nor an HTTP date ("-5", "soon"), and the first
  // such value as the report shows it.
  std::uint64_t retry_after_invalid = 0;
  std::string first_invalid_retry_after;
  std::vector<std::string> policies;  // distinct RateLimit-Policy values, at most kMaxPolicies
  // The window check: pairs of responses to the same caller and quota where the server must have
  // decided the second after the first, inside the same window; and those where remaining rose.
  std::uint64_t window_checks = 0;
  std::uint64_t window_rises = 0;
  std::string first_rise;  // what the first rise looked like, for the report

  static constexpr std::size_t kMaxPolicies = 8;

  void add_policy(std::string_view value);
  void merge(const RateLimitSummary& other);
};

// Checks, on one connection, that remaining only falls within a window. Requests on a connection go
// one at a time, so the server decided each after the one before: no reordering can make a rise
// appear. A rise counts only when the earlier response's window cannot have reset yet: the later
// response came back less than (reset - 1) seconds after the earlier request was sent (the second
// allows for a reset rounded up). Meaningful for window limits; a token bucket refills between
// requests, so its remaining may rise at any time.
class WindowCheck {
 public:
  void observe(std::uint32_t caller, const QuotaSeen& quota, Nanos sent, Nanos received,
               RateLimitSummary& summary);

 private:
  struct Last {
    std::uint32_t caller = 0;
    std::string name;
    std::int64_t remaining = 0;
    std::optional<std::int64_t> reset_s;
    Nanos sent{0};
  };
  std::vector<Last> last_;  // one per caller and quota name seen on this connection
};

}  // namespace sluice::bench
