// Stats: what one load thread saw (counts, latencies, a timeline, rate-limit headers), and merging
// them. Not synchronised: each thread fills its own; they are merged after the threads have ended.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/histogram.h"
#include "bench/ratelimit_headers.h"
#include "sluice/clock.h"

namespace sluice::bench {

// Requests by what became of them: in one step of the timeline, or for one caller.
struct Counts {
  std::uint64_t admitted = 0;  // 2xx
  std::uint64_t rejected = 0;  // 429
  std::uint64_t other = 0;     // any other status
  std::uint64_t errors = 0;    // no response: connection refused or reset, timeout, bad HTTP

  Counts& operator+=(const Counts& o) {
    admitted += o.admitted;
    rejected += o.rejected;
    other += o.other;
    errors += o.errors;
    return *this;
  }
};

// Whether a status admits (2xx) or rejects (429) a request, or is something else.
enum class Outcome { kAdmitted, kRejected, kOther };
inline Outcome outcome_of(int status) {
  if (status >= 200 && status < 300) return Outcome::kAdmitted;
  if (status == 429) return Outcome::kRejected;
  return Outcome::kOther;
}

struct Stats {
  Histogram latency;                            // nanoseconds, of requests that got a response
  std::array<std::uint64_t, 600> status{};      // responses by status code (100..599)
  std::map<std::string, std::uint64_t> errors;  // requests without a response, by reason
  std::vector<Counts> timeline;  // by when requests completed, one step per Plan::bucket
  std::vector<Counts> callers;   // per value of the varied header (--vary-header), or one
  RateLimitSummary rate_limit;
  Nanos last_completion{0};  // since the start of the run
  // Requests sent again on a fresh connection: the server had closed the reused one they were
  // written on, and not a byte came back.
  std::uint64_t retries = 0;
  // Open loop: the most a request left after its scheduled time, and the most of such a wait spent
  // with every connection busy (the rest is the sender's own: a machine too busy to keep to time).
  Nanos max_send_lag{0};
  Nanos max_connection_wait{0};
  Nanos connection_wait_at_max_lag{0};  // of the request that was most behind
  // Burst: when the first and the last request were written, since the start of the run.
  std::optional<Nanos> first_write;
  std::optional<Nanos> last_write;

  std::uint64_t responses() const;
  std::uint64_t error_count() const;

  // Counts a response or an error into the step of the timeline where `at` falls.
  Counts& step_at(Nanos at, Nanos bucket);
  void merge(const Stats& other);
};

}  // namespace sluice::bench
