// The limiting algorithms as pure transitions: decide(state, limit, now, cost) -> Decision.
// No clock, no locks, no allocation for the fixed-size states: the caller owns the state and
// serialises access to it. The Redis scripts (src/redis/scripts) run the same transitions; the shared
// vectors in tests/vectors keep the two identical.
//
// Every state starts value-initialised, which means full (nothing consumed). A decision consumes only
// when it admits. `now` is converted to whole microseconds; a `now` earlier than one the state has
// already seen counts as "no time has passed" and never grants extra. `cost` is 0 (a peek: the
// answer for cost 0, nothing consumed) up to kMaxLimit; the stores check that range.
#pragma once

#include <cstdint>
#include <deque>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"

namespace sluice {

// Token bucket with continuous refill, and GCRA: the theoretical arrival time (TAT) of the meter in
// units of 1 / units_per_us microseconds, a 128-bit integer kept as two words. The bucket is full
// when tat <= now.
struct GcraState {
  std::uint64_t tat_lo = 0;
  std::int64_t tat_hi = 0;
};

// Token bucket with interval refill: tokens missing from capacity, and the refill tick (multiple of
// refill_period since the epoch) they were last brought up to date at.
struct IntervalBucketState {
  std::int64_t missing = 0;
  std::int64_t tick = 0;
};

// Fixed window: the window index (now / period) and what it has admitted.
struct FixedWindowState {
  std::int64_t window = 0;
  std::int64_t count = 0;
};

// Sliding window counter: the current window index and the counts of it and the previous window,
// packed into 128 bits (44 + 42 + 42: window indexes stay below 2^44 for periods of at least 1 ms
// until the year 2255; counts are at most 2^40).
class SlidingWindowState {
 public:
  std::int64_t window() const { return static_cast<std::int64_t>(lo_ & kWindowMask); }
  std::int64_t previous() const {
    return static_cast<std::int64_t>((lo_ >> 44) | ((hi_ & kLow22) << 20));
  }
  std::int64_t current() const { return static_cast<std::int64_t>(hi_ >> 22); }
  void set(std::int64_t window, std::int64_t previous, std::int64_t current);

 private:
  static constexpr std::uint64_t kWindowMask = (std::uint64_t{1} << 44) - 1;
  static constexpr std::uint64_t kLow22 = (std::uint64_t{1} << 22) - 1;
  std::uint64_t lo_ = 0;  // window (44 bits) | low 20 bits of previous
  std::uint64_t hi_ = 0;  // high 22 bits of previous | current (42 bits)
};

// Sliding log: admitted requests in the last period, oldest first, as (time, cost) runs.
struct SlidingLogState {
  struct Entry {
    std::int64_t at_us;
    std::int64_t count;
  };
  std::deque<Entry> entries;
  std::int64_t total = 0;      // sum of entries' counts
  std::int64_t latest_us = 0;  // the latest time seen
};

// Concurrency limit: leases in flight, ordered by expiry.
struct ConcurrencyState {
  struct Lease {
    std::uint64_t id;
    std::int64_t expires_us;
    std::int64_t permits;
  };
  std::deque<Lease> leases;
  std::int64_t in_flight = 0;  // sum of leases' permits
  std::int64_t latest_us = 0;
};

// Token bucket (continuous) and GCRA.
Decision decide(GcraState& state, const Limit& limit, Nanos now, std::int64_t cost);
// Token bucket (interval).
Decision decide(IntervalBucketState& state, const Limit& limit, Nanos now, std::int64_t cost);
Decision decide(FixedWindowState& state, const Limit& limit, Nanos now, std::int64_t cost);
Decision decide(SlidingWindowState& state, const Limit& limit, Nanos now, std::int64_t cost);
Decision decide(SlidingLogState& state, const Limit& limit, Nanos now, std::int64_t cost);
// An admitted request takes the lease id the caller chose (unique among the state's leases); the
// decision carries it back in `lease`.
Decision decide(ConcurrencyState& state, const Limit& limit, Nanos now, std::int64_t cost,
                std::uint64_t lease_id);

// Gives back the permits of an admitted request, as if it had never been admitted.
// Sliding log: takes `cost` off the newest entries (the request just admitted).
void undo(SlidingLogState& state, std::int64_t cost);
// Concurrency: releases a lease; false when it is not (or no longer) held.
bool release(ConcurrencyState& state, std::uint64_t lease_id);

}  // namespace sluice
