// Decision: what a limiter answers for one request. A rejection is a value, not an error.
// A plain value type.
#pragma once

#include <cstdint>

#include "sluice/clock.h"

namespace sluice {

struct Decision {
  bool allowed = false;
  // Rejected, and would be rejected at any time: the cost is larger than the limit can ever hold.
  // retry_after is 0 then; retrying is pointless.
  bool cost_exceeds_limit = false;
  std::int64_t limit = 0;      // the most the limit admits at once (capacity, burst or window limit)
  std::int64_t remaining = 0;  // what could still pass right now, after this request
  Nanos retry_after{0};        // wait this long and the same cost will pass, if nothing else happens
                               // meanwhile (0 when allowed)
  Nanos reset_after{0};        // until the state is back to full (nothing consumed)
  std::uint64_t lease = 0;     // concurrency limits: the lease to release (0 otherwise)
  bool fallback = false;       // decided by the request's on_store_failure policy, because the
                               // shared store could not be reached

  friend bool operator==(const Decision&, const Decision&) = default;
};

}  // namespace sluice
