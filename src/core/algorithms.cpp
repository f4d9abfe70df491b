#include "sluice/algorithms.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace sluice {
namespace {

using i128 = __int128;

std::int64_t to_us(Nanos now) { return now.count() > 0 ? now.count() / 1000 : 0; }

Nanos from_us(std::int64_t us) { return Nanos{us * 1000}; }

// ceil(a / d) for a >= 0, by the precomputed divider whenever a fits in 64 bits.
std::int64_t ceil_div(i128 a, const detail::Divider& d) {
  if (a <= static_cast<i128>(UINT64_MAX)) {
    return static_cast<std::int64_t>(d.divide_up(static_cast<std::uint64_t>(a)));
  }
  const auto b = static_cast<i128>(d.divisor());
  return static_cast<std::int64_t>((a + b - 1) / b);
}

std::int64_t floor_div(std::int64_t a, const detail::Divider& d) {
  return static_cast<std::int64_t>(d.divide(static_cast<std::uint64_t>(a)));
}

i128 load(const GcraState& s) {
  return static_cast<i128>((static_cast<unsigned __int128>(static_cast<std::uint64_t>(s.tat_hi))
                            << 64) |
                           s.tat_lo);
}

void store(GcraState& s, i128 tat) {
  s.tat_lo = static_cast<std::uint64_t>(tat);
  s.tat_hi = static_cast<std::int64_t>(tat >> 64);
}

// How far after now a clock stepped back can leave a state: two periods, or a day if more. A state
// further ahead was kept under another limit on its key (a period or rate changed: a window index
// of 1 s windows read as one of 60 s windows lies millennia ahead), and is read as none, as a
// state past full is: kept, it would hold the key for as long, and its times overflow.
constexpr std::int64_t kDayUs = 86'400'000'000;
std::int64_t ahead_allowed_us(const detail::LimitParams& p) { return std::max(2 * p.period_us, kDayUs); }

// Whether the window or tick `index` (of p.period_us) starts further after now than that.
bool kept_under_another_limit(std::int64_t index, const detail::LimitParams& p, std::int64_t now_us) {
  return index > (now_us + ahead_allowed_us(p)) / p.period_us;
}

Decision start(const Limit& limit) {
  Decision d;
  d.limit = limit.params().quota;
  return d;
}

}  // namespace

// GCRA over integer units: a token is units_per_token units, a microsecond units_per_us units.
// The meter admits while tat - now stays within quota tokens' worth of units.
Decision decide(GcraState& state, const Limit& limit, Nanos now, std::int64_t cost) {
  assert(cost >= 0 && cost <= kMaxLimit);
  const detail::LimitParams& p = limit.params();
  const std::int64_t upu = p.units_per_us;
  const std::int64_t upt = p.units_per_token;
  if (load(state) - static_cast<i128>(to_us(now)) * upu >
      static_cast<i128>(p.quota) * upt + static_cast<i128>(ahead_allowed_us(p)) * upu) {
    state = GcraState{};  // kept under another limit (see ahead_allowed_us)
  }
  if (upu == 1 && cost <= p.quota) {
    // The common case of whole microseconds per token: the TAT and the bucket's depth (the time to
    // refill it, at most 100 years) fit in 64 bits, and a unit is a microsecond. The same answers
    // as the general case below, in 64-bit arithmetic.
    const std::int64_t now_us = to_us(now);
    const std::int64_t base = std::max(static_cast<std::int64_t>(load(state)), now_us);
    const std::int64_t wait = base + cost * upt - now_us;
    const std::int64_t capacity = p.quota * upt;
    Decision d = start(limit);
    if (wait <= capacity) {
      if (cost > 0) store(state, base + cost * upt);
      d.allowed = true;
      d.remaining = p.quota - static_cast<std::int64_t>(
                                  p.by_units_per_token.divide_up(static_cast<std::uint64_t>(wait)));
      d.reset_after = from_us(wait);
      return d;
    }
    const std::int64_t depth = base - now_us;
    d.remaining = std::max<std::int64_t>(
        0, p.quota - static_cast<std::int64_t>(
                         p.by_units_per_token.divide_up(static_cast<std::uint64_t>(depth))));
    d.reset_after = from_us(depth);
    d.retry_after = from_us(wait - capacity);
    return d;
  }
  const i128 now_u = static_cast<i128>(to_us(now)) * upu;
  const i128 tat = load(state);
  const i128 base = tat > now_u ? tat : now_u;
  const i128 capacity = static_cast<i128>(p.quota) * upt;

  Decision d = start(limit);
  const i128 next = base + static_cast<i128>(cost) * upt;
  if (cost <= p.quota && next - now_u <= capacity) {
    d.allowed = true;
    if (cost > 0) store(state, next);
    d.remaining = p.quota - ceil_div(next - now_u, p.by_units_per_token);
    d.reset_after = from_us(ceil_div(next - now_u, p.by_units_per_us));
    return d;
  }
  // None when an earlier `now` puts the TAT a full bucket or more ahead (where the tokens it is ahead
  // by, hours of a fast meter's, may not fit in 64 bits).
  d.remaining = base - now_u >= capacity ? 0 : p.quota - ceil_div(base - now_u, p.by_units_per_token);
  d.reset_after = from_us(ceil_div(base - now_u, p.by_units_per_us));
  if (cost > p.quota) {
    d.cost_exceeds_limit = true;
  } else {
    d.retry_after = from_us(ceil_div(next - now_u - capacity, p.by_units_per_us));
  }
  return d;
}

// Interval token bucket: refill_tokens at every tick (multiple of the period since the epoch).
Decision decide(IntervalBucketState& state, const Limit& limit, Nanos now, std::int64_t cost) {
  assert(cost >= 0 && cost <= kMaxLimit);
  const detail::LimitParams& p = limit.params();
  const std::int64_t now_us = to_us(now);
  if (kept_under_another_limit(state.tick, p, now_us)) state = IntervalBucketState{};
  const std::int64_t tick = std::max(floor_div(now_us, p.by_period), state.tick);
  // A bucket is at most empty: more missing than the capacity was kept under a larger one.
  std::int64_t missing = std::min(state.missing, p.quota);
  if (missing > 0 && tick > state.tick) {
    const std::int64_t ticks = tick - state.tick;
    missing = ticks >= ceil_div(missing, p.by_rate) ? 0 : missing - ticks * p.rate;
  }
  // The time at which `tokens` more than now are back, as an offset from now.
  auto after = [&](std::int64_t tokens) {
    return tokens <= 0 ? Nanos{0}
                       : from_us((tick + ceil_div(tokens, p.by_rate)) * p.period_us - now_us);
  };

  Decision d = start(limit);
  if (cost <= p.quota && cost <= p.quota - missing) {
    missing += cost;
    state.missing = missing;
    state.tick = tick;
    d.allowed = true;
    d.remaining = p.quota - missing;
    d.reset_after = after(missing);
    return d;
  }
  state.missing = missing;
  state.tick = tick;
  d.remaining = std::max<std::int64_t>(0, p.quota - missing);  // below 0 once the limit was lowered
  d.reset_after = after(missing);
  if (cost > p.quota) {
    d.cost_exceeds_limit = true;
  } else {
    d.retry_after = after(cost - (p.quota - missing));
  }
  return d;
}

Decision decide(FixedWindowState& state, const Limit& limit, Nanos now, std::int64_t cost) {
  assert(cost >= 0 && cost <= kMaxLimit);
  const detail::LimitParams& p = limit.params();
  const std::int64_t now_us = to_us(now);
  if (kept_under_another_limit(state.window, p, now_us)) state = FixedWindowState{};
  const std::int64_t window = std::max(floor_div(now_us, p.by_period), state.window);
  const std::int64_t count = window == state.window ? state.count : 0;
  const Nanos window_end = from_us((window + 1) * p.period_us - now_us);

  Decision d = start(limit);
  if (cost <= p.quota - count) {
    state.window = window;
    state.count = count + cost;
    d.allowed = true;
    d.remaining = p.quota - state.count;
    d.reset_after = state.count > 0 ? window_end : Nanos{0};
    return d;
  }
  d.remaining = std::max<std::int64_t>(0, p.quota - count);  // below 0 once the limit was lowered
  d.reset_after = count > 0 ? window_end : Nanos{0};
  if (cost > p.quota) {
    d.cost_exceeds_limit = true;
  } else {
    d.retry_after = window_end;
  }
  return d;
}

void SlidingWindowState::set(std::int64_t window, std::int64_t previous, std::int64_t current) {
  const auto w = static_cast<std::uint64_t>(window);
  const auto prev = static_cast<std::uint64_t>(previous);
  const auto cur = static_cast<std::uint64_t>(current);
  lo_ = (w & kWindowMask) | (prev << 44);
  hi_ = (prev >> 20) | (cur << 22);
}

// Sliding window counter: the previous window's count weighs in proportion to how much of it still
// overlaps the last period, rounded up: used = current + ceil(previous * (period - elapsed) / period).
Decision decide(SlidingWindowState& state, const Limit& limit, Nanos now, std::int64_t cost) {
  assert(cost >= 0 && cost <= kMaxLimit);
  const detail::LimitParams& p = limit.params();
  const std::int64_t period = p.period_us;
  const std::int64_t quota = p.quota;
  const std::int64_t now_us = to_us(now);
  if (kept_under_another_limit(state.window(), p, now_us)) state = SlidingWindowState{};
  std::int64_t window = floor_div(now_us, p.by_period);
  std::int64_t elapsed = now_us - window * period;
  if (window < state.window()) {  // earlier than the state: as at the start of the state's window
    window = state.window();
    elapsed = 0;
  }
  std::int64_t previous = 0;
  std::int64_t current = 0;
  if (window == state.window()) {
    previous = state.previous();
    current = state.current();
  } else if (window == state.window() + 1) {
    previous = state.current();
  }
  const auto weighted = [&](std::int64_t count, std::int64_t at) {
    return ceil_div(static_cast<i128>(count) * (period - at), p.by_period);
  };
  const std::int64_t used = current + weighted(previous, elapsed);
  const std::int64_t start_us = window * period;  // may lie after now_us when time went backwards
  auto until = [&](std::int64_t at_us) { return from_us(at_us - now_us); };
  auto reset_for = [&](std::int64_t cur, std::int64_t prev) {
    if (cur > 0) return until(start_us + 2 * period);
    if (prev > 0) return until(start_us + period);
    return Nanos{0};
  };

  Decision d = start(limit);
  if (cost <= quota - used) {
    // A peek leaves the state as it was, as the Redis script does: moved into the peek's window, a
    // later call with an earlier time (a clock gone back) would be judged in that window instead.
    if (cost > 0) state.set(window, previous, current + cost);
    d.allowed = true;
    d.remaining = quota - used - cost;
    d.reset_after = reset_for(current + cost, previous);
    return d;
  }
  d.remaining = std::max<std::int64_t>(0, quota - used);
  d.reset_after = reset_for(current, previous);
  if (cost > quota) {
    d.cost_exceeds_limit = true;
    return d;
  }
  // Later in this window, once enough of the previous window's weight has slid out:
  // previous * (period - at) <= room * period  <=>  at >= period - floor(room * period / previous).
  const std::int64_t room = quota - current - cost;
  if (room >= 0 && previous > 0) {
    const auto keep = static_cast<std::int64_t>(static_cast<i128>(room) * period / previous);
    if (keep > 0) {
      d.retry_after = until(start_us + period - keep);
      return d;
    }
  }
  // In the next window, where this window's count becomes the previous one.
  std::int64_t at = 0;
  if (current > 0) {
    const auto keep =
        static_cast<std::int64_t>(static_cast<i128>(quota - cost) * period / current);
    at = std::max<std::int64_t>(0, period - keep);
  }
  d.retry_after = until(start_us + period + at);
  return d;
}

// Sliding log: exact; admits while the log holds fewer than `quota` in (now - period, now].
Decision decide(SlidingLogState& state, const Limit& limit, Nanos now, std::int64_t cost) {
  assert(cost >= 0 && cost <= kMaxLimit);
  const detail::LimitParams& p = limit.params();
  const std::int64_t now_us = to_us(now);
  const std::int64_t t = std::max(now_us, state.latest_us);
  state.latest_us = t;
  while (!state.entries.empty() && state.entries.front().at_us + p.period_us <= t) {
    state.total -= state.entries.front().count;
    state.entries.pop_front();
  }
  auto reset = [&] {
    return state.entries.empty() ? Nanos{0}
                                 : from_us(state.entries.back().at_us + p.period_us - now_us);
  };

  Decision d = start(limit);
  if (cost <= p.quota - state.total) {
    if (cost > 0) {
      if (!state.entries.empty() && state.entries.back().at_us == t) {
        state.entries.back().count += cost;
      } else {
        state.entries.push_back({t, cost});
      }
      state.total += cost;
    }
    d.allowed = true;
    d.remaining = p.quota - state.total;
    d.reset_after = reset();
    return d;
  }
  d.remaining = std::max<std::int64_t>(0, p.quota - state.total);  // below 0 once the limit was lowered
  d.reset_after = reset();
  if (cost > p.quota) {
    d.cost_exceeds_limit = true;
    return d;
  }
  // Once the oldest entries holding `need` have left the window.
  const std::int64_t need = state.total + cost - p.quota;
  std::int64_t freed = 0;
  for (const auto& e : state.entries) {
    freed += e.count;
    if (freed >= need) {
      d.retry_after = from_us(e.at_us + p.period_us - now_us);
      break;
    }
  }
  return d;
}

void undo(SlidingLogState& state, std::int64_t cost) {
  while (cost > 0 && !state.entries.empty()) {
    auto& back = state.entries.back();
    const std::int64_t take = std::min(cost, back.count);
    back.count -= take;
    state.total -= take;
    cost -= take;
    if (back.count == 0) state.entries.pop_back();
  }
}

Decision decide(ConcurrencyState& state, const Limit& limit, Nanos now, std::int64_t cost,
                std::uint64_t lease_id) {
  assert(cost >= 0 && cost <= kMaxLimit);
  const detail::LimitParams& p = limit.params();
  const std::int64_t now_us = to_us(now);
  const std::int64_t t = std::max(now_us, state.latest_us);
  state.latest_us = t;
  while (!state.leases.empty() && state.leases.front().expires_us <= t) {
    state.in_flight -= state.leases.front().permits;
    state.leases.pop_front();
  }
  auto reset = [&] {
    return state.leases.empty() ? Nanos{0} : from_us(state.leases.back().expires_us - now_us);
  };

  Decision d = start(limit);
  if (cost <= p.quota - state.in_flight) {
    if (cost > 0) {
      const ConcurrencyState::Lease lease{lease_id, t + p.period_us, cost};
      auto it = state.leases.end();
      while (it != state.leases.begin() && std::prev(it)->expires_us > lease.expires_us) --it;
      state.leases.insert(it, lease);
      state.in_flight += cost;
      d.lease = lease_id;
    }
    d.allowed = true;
    d.remaining = p.quota - state.in_flight;
    d.reset_after = reset();
    return d;
  }
  d.remaining = std::max<std::int64_t>(0, p.quota - state.in_flight);  // below 0 once the limit was lowered
  d.reset_after = reset();
  if (cost > p.quota) {
    d.cost_exceeds_limit = true;
    return d;
  }
  // Once enough leases have timed out (sooner, if they are released).
  const std::int64_t need = state.in_flight + cost - p.quota;
  std::int64_t freed = 0;
  for (const auto& lease : state.leases) {
    freed += lease.permits;
    if (freed >= need) {
      d.retry_after = from_us(lease.expires_us - now_us);
      break;
    }
  }
  return d;
}

bool release(ConcurrencyState& state, std::uint64_t lease_id) {
  const auto it = std::find_if(state.leases.begin(), state.leases.end(),
                               [&](const auto& lease) { return lease.id == lease_id; });
  if (it == state.leases.end()) return false;
  state.in_flight -= it->permits;
  state.leases.erase(it);
  return true;
}

}  // namespace sluice
