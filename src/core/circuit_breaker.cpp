#include "sluice/circuit_breaker.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "core/duration.h"

namespace sluice {
namespace {

constexpr int kSlices = 10;  // a time window slides in tenths
// A rejected call in half-open cannot know when the probes will finish; it is told to come back in
// a second (or open_for, when shorter).
constexpr Nanos kHalfOpenRetry = std::chrono::seconds(1);
// The longest open period and time window: longer ones would overflow the times they are added to
// (and no breaker needs to stay open for more than a year).
constexpr Nanos kLongest = std::chrono::hours(24 * 365);

CircuitBreakerOptions clamped(CircuitBreakerOptions o) {
  o.window_size = std::max(o.window_size, 1);
  o.window_duration = std::clamp(o.window_duration, Nanos{std::chrono::milliseconds(10)}, kLongest);
  o.minimum_calls = std::max(o.minimum_calls, 1);
  // A count window never holds more than its size: a larger minimum would never be reached.
  if (o.window == BreakerWindow::kCount) o.minimum_calls = std::min(o.minimum_calls, o.window_size);
  o.failure_rate = std::clamp(o.failure_rate, 0, 100);
  o.slow_call_rate = std::clamp(o.slow_call_rate, 0, 100);
  o.consecutive_failures = std::max(o.consecutive_failures, 0);
  o.open_for = std::clamp(o.open_for, Nanos{std::chrono::milliseconds(1)}, kLongest);
  o.backoff_multiplier = std::max(o.backoff_multiplier, 1);
  o.max_open_for = std::clamp(o.max_open_for, o.open_for, kLongest);
  o.jitter_percent = std::clamp(o.jitter_percent, 0, 100);
  o.half_open_probes = std::max(o.half_open_probes, 1);
  return o;
}

}  // namespace

const char* to_string(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed: return "closed";
    case BreakerState::kOpen: return "open";
    case BreakerState::kHalfOpen: return "half_open";
    case BreakerState::kForcedOpen: return "forced_open";
    case BreakerState::kForcedClosed: return "forced_closed";
    case BreakerState::kDisabled: return "disabled";
  }
  return "unknown";
}

std::vector<Error> CircuitBreakerOptions::problems() const {
  std::vector<Error> out;
  auto percent = [&](const char* name, std::int32_t v) {
    if (v < 0 || v > 100) {
      out.push_back(invalid_argument(std::string(name) + " must be a percentage from 0 to 100, got " +
                                     std::to_string(v)));
    }
  };
  auto positive = [&](const char* name, std::int64_t v) {
    if (v < 1) out.push_back(invalid_argument(std::string(name) + " must be at least 1, got " + std::to_string(v)));
  };
  percent("failure_rate", failure_rate);
  percent("slow_call_rate", slow_call_rate);
  percent("jitter_percent", jitter_percent);
  positive("window_size", window_size);
  positive("minimum_calls", minimum_calls);
  positive("half_open_probes", half_open_probes);
  positive("backoff_multiplier", backoff_multiplier);
  if (consecutive_failures < 0) out.push_back(invalid_argument("consecutive_failures must not be negative"));
  if (window == BreakerWindow::kTime && window_duration < std::chrono::milliseconds(10)) {
    out.push_back(invalid_argument("window_duration must be at least 10ms, got " + format_duration(window_duration)));
  }
  auto at_most_a_year = [&](const char* name, Nanos v) {
    if (v > kLongest) out.push_back(invalid_argument(std::string(name) + " must be at most 365d, got " + format_duration(v)));
  };
  if (window == BreakerWindow::kTime) at_most_a_year("window_duration", window_duration);
  at_most_a_year("open_for", open_for);
  at_most_a_year("max_open_for", max_open_for);
  if (open_for < std::chrono::milliseconds(1)) {
    out.push_back(invalid_argument("open_for must be at least 1ms, got " + format_duration(open_for)));
  } else if (max_open_for < open_for) {
    out.push_back(invalid_argument("max_open_for must not be shorter than open_for"));
  }
  if (slow_call_rate > 0) {
    // Not positive, every call would be slow: the breaker would open on a healthy upstream.
    if (slow_call <= Nanos{0}) {
      out.push_back(invalid_argument("slow_call must be more than 0, got " + format_duration(slow_call)));
    }
    at_most_a_year("slow_call", slow_call);
  }
  if (failure_rate == 0 && slow_call_rate == 0 && consecutive_failures == 0) {
    out.push_back(invalid_argument(
        "the breaker would never open: set failure_rate, slow_call_rate or consecutive_failures"));
  }
  return out;
}

Status CircuitBreakerOptions::validate() const {
  std::vector<Error> all = problems();
  if (all.empty()) return {};
  return std::move(all.front());
}

CircuitBreaker::CircuitBreaker(CircuitBreakerOptions options)
    : options_(clamped(std::move(options))),
      clock_(options_.clock != nullptr ? options_.clock : &SteadyClock::instance()),
      timed_(options_.slow_call_rate > 0 || options_.window == BreakerWindow::kTime),
      word_(pack(BreakerState::kClosed, 0)),
      rng_(std::random_device{}()) {
  if (options_.window == BreakerWindow::kCount) {
    ring_.assign(static_cast<std::size_t>(options_.window_size), 0);
  } else {
    buckets_.assign(kSlices, Bucket{});
  }
}

BreakerState CircuitBreaker::state() const { return state_of(word_.load(std::memory_order_acquire)); }

BreakerPermit CircuitBreaker::try_acquire() {
  BreakerPermit p;
  const std::uint64_t word = word_.load(std::memory_order_acquire);
  const BreakerState s = state_of(word);
  if (s == BreakerState::kClosed) {  // the fast path: no lock
    p.admitted_ = true;
    p.generation_ = word >> 8;
    return p;
  }
  if (s == BreakerState::kForcedClosed || s == BreakerState::kDisabled) {
    p.admitted_ = true;
    p.recorded_ = true;
    return p;
  }

  Transition t{};
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    const Nanos now = clock_->now();
    BreakerState current = state_of(word_.load(std::memory_order_relaxed));
    switch (current) {
      case BreakerState::kClosed:
        p.admitted_ = true;
        p.generation_ = word_.load(std::memory_order_relaxed) >> 8;
        return p;
      case BreakerState::kForcedClosed:
      case BreakerState::kDisabled:
        p.admitted_ = true;
        p.recorded_ = true;
        return p;
      case BreakerState::kForcedOpen:
        p.retry_after_ = options_.open_for;
        return p;
      case BreakerState::kOpen:
        if (now < open_until_) {
          p.retry_after_ = open_until_ - now;
          return p;
        }
        changed = set_state(BreakerState::kHalfOpen, t);
        probes_in_flight_ = 0;
        probe_successes_ = 0;
        break;
      case BreakerState::kHalfOpen:
        // Probes that never reported back for a whole open period are given up on, so a lost
        // probe cannot keep the breaker half-open for ever.
        if (probes_in_flight_ >= options_.half_open_probes &&
            now - last_probe_at_ >= options_.open_for) {
          probes_in_flight_ = 0;
          changed = set_state(BreakerState::kHalfOpen, t);
        }
        break;
    }
    if (probes_in_flight_ < options_.half_open_probes) {
      ++probes_in_flight_;
      last_probe_at_ = now;
      p.admitted_ = true;
      p.probe_ = true;
      p.generation_ = word_.load(std::memory_order_relaxed) >> 8;
    } else {
      // The probes' outcome comes within a call's time, which only they know: a second, or the
      // open period when shorter.
      p.retry_after_ = std::min(kHalfOpenRetry, options_.open_for);
    }
  }
  notify(t, changed);
  return p;
}

bool CircuitBreaker::record(const BreakerPermit& permit, bool failed, Nanos duration) {
  if (!permit.admitted_ || permit.recorded_) return false;
  const bool slow = options_.slow_call_rate > 0 && duration >= options_.slow_call;
  Transition t{};
  bool changed = false;
  bool counted = true;
  {
    std::lock_guard lock(mu_);
    const std::uint64_t word = word_.load(std::memory_order_relaxed);
    if ((word >> 8) != permit.generation_) return false;  // from before the last transition: stale
    const BreakerState s = state_of(word);
    if (s == BreakerState::kClosed) {
      const Nanos now = timed_ ? clock_->now() : Nanos{0};
      add_outcome(failed, slow, now);
      if (should_open()) {
        open(timed_ ? now : clock_->now(), t);
        changed = true;
      }
    } else if (s == BreakerState::kHalfOpen && permit.probe_) {
      --probes_in_flight_;
      if (failed || slow) {
        open(clock_->now(), t);
        changed = true;
      } else if (++probe_successes_ >= options_.half_open_probes) {
        clear_window();
        opens_in_a_row_ = 0;
        changed = set_state(BreakerState::kClosed, t);
      }
    } else {
      counted = false;
    }
  }
  notify(t, changed);
  return counted;
}

void CircuitBreaker::release(const BreakerPermit& permit) {
  if (!permit.admitted_ || !permit.probe_) return;
  std::lock_guard lock(mu_);
  const std::uint64_t word = word_.load(std::memory_order_relaxed);
  if ((word >> 8) == permit.generation_ && state_of(word) == BreakerState::kHalfOpen) {
    --probes_in_flight_;
  }
}

Error CircuitBreaker::rejection(const BreakerPermit& permit) const {
  const bool half_open = state() == BreakerState::kHalfOpen;
  return Error{ErrorCode::kCircuitOpen,
               std::string(half_open ? "circuit breaker is half-open, its probes in flight" : "circuit breaker is open") +
                   "; retry in " + format_duration(permit.retry_after())};
}

BreakerStats CircuitBreaker::stats() const {
  std::lock_guard lock(mu_);
  BreakerStats s;
  s.state = state_of(word_.load(std::memory_order_relaxed));
  s.calls = calls_;
  s.failures = failures_;
  s.slow_calls = slow_;
  if (options_.window == BreakerWindow::kTime && !buckets_.empty()) {
    // The window as of now: the slices that slid out since the last call are not counted (a call
    // drops them; a breaker with no calls would show them for ever).
    const std::int64_t slice = clock_->now().count() / (options_.window_duration.count() / kSlices);
    s.calls = s.failures = s.slow_calls = 0;
    for (const Bucket& b : buckets_) {
      if (b.slice < 0 || b.slice <= slice - kSlices) continue;
      s.calls += b.calls;
      s.failures += b.failures;
      s.slow_calls += b.slow;
    }
  }
  if (s.state == BreakerState::kOpen) {
    // Past its open period the breaker lets the next call through as a probe (try_acquire): a
    // view that said open would tell an operator, or an alert, of an outage no call would meet.
    const Nanos now = clock_->now();
    if (now >= open_until_) {
      s.state = BreakerState::kHalfOpen;
    } else {
      s.open_remaining = open_until_ - now;
    }
  }
  return s;
}

void CircuitBreaker::force_open() {
  Transition t{};
  bool changed;
  {
    std::lock_guard lock(mu_);
    changed = set_state(BreakerState::kForcedOpen, t);
  }
  notify(t, changed);
}

void CircuitBreaker::force_closed() {
  Transition t{};
  bool changed;
  {
    std::lock_guard lock(mu_);
    changed = set_state(BreakerState::kForcedClosed, t);
  }
  notify(t, changed);
}

void CircuitBreaker::disable() {
  Transition t{};
  bool changed;
  {
    std::lock_guard lock(mu_);
    changed = set_state(BreakerState::kDisabled, t);
  }
  notify(t, changed);
}

void CircuitBreaker::reset() {
  Transition t{};
  bool changed;
  {
    std::lock_guard lock(mu_);
    clear_window();
    opens_in_a_row_ = 0;
    changed = set_state(BreakerState::kClosed, t);
  }
  notify(t, changed);
}

bool CircuitBreaker::set_state(BreakerState to, Transition& t) {
  const std::uint64_t word = word_.load(std::memory_order_relaxed);
  t = Transition{state_of(word), to};
  word_.store(pack(to, (word >> 8) + 1), std::memory_order_release);
  return t.from != t.to;
}

void CircuitBreaker::clear_window() {
  std::fill(ring_.begin(), ring_.end(), 0);
  ring_next_ = 0;
  std::fill(buckets_.begin(), buckets_.end(), Bucket{});
  calls_ = failures_ = slow_ = 0;
  failures_in_a_row_ = 0;
}

void CircuitBreaker::add_outcome(bool failed, bool slow, Nanos now) {
  failures_in_a_row_ = failed ? failures_in_a_row_ + 1 : 0;
  if (ring_.empty()) {
    add_to_slices(failed, slow, now);
  } else {
    std::uint8_t& slot = ring_[ring_next_];
    if (calls_ == static_cast<std::int64_t>(ring_.size())) {  // full: the oldest slides out
      failures_ -= slot & 1;
      slow_ -= slot >> 1;
      --calls_;
    }
    slot = static_cast<std::uint8_t>((failed ? 1 : 0) | (slow ? 2 : 0));
    if (++ring_next_ == ring_.size()) ring_next_ = 0;
  }
  ++calls_;
  failures_ += failed ? 1 : 0;
  slow_ += slow ? 1 : 0;
}

void CircuitBreaker::add_to_slices(bool failed, bool slow, Nanos now) {
  const std::int64_t slice_len = options_.window_duration.count() / kSlices;
  const std::int64_t slice = now.count() / slice_len;
  for (Bucket& b : buckets_) {  // drop slices that slid out of the window
    if (b.slice >= 0 && b.slice <= slice - kSlices) {
      calls_ -= b.calls;
      failures_ -= b.failures;
      slow_ -= b.slow;
      b = Bucket{};
    }
  }
  Bucket& b = buckets_[static_cast<std::size_t>(slice % kSlices)];
  b.slice = slice;
  ++b.calls;
  b.failures += failed ? 1 : 0;
  b.slow += slow ? 1 : 0;
}

bool CircuitBreaker::should_open() const {
  if (options_.consecutive_failures > 0 && failures_in_a_row_ >= options_.consecutive_failures) {
    return true;
  }
  if (calls_ < options_.minimum_calls) return false;
  if (options_.failure_rate > 0 && failures_ * 100 >= options_.failure_rate * calls_) return true;
  return options_.slow_call_rate > 0 && slow_ * 100 >= options_.slow_call_rate * calls_;
}

void CircuitBreaker::open(Nanos now, Transition& t) {
  Nanos period = options_.open_for;
  for (std::int32_t i = 0; i < opens_in_a_row_ && period < options_.max_open_for; ++i) {
    period = period.count() > options_.max_open_for.count() / options_.backoff_multiplier
                 ? options_.max_open_for
                 : period * options_.backoff_multiplier;
  }
  period = std::min(period, options_.max_open_for);
  if (options_.jitter_percent > 0) {
    const auto spread = static_cast<std::uint64_t>(period.count() / 100 * options_.jitter_percent);
    if (spread > 0) period -= Nanos{static_cast<std::int64_t>(rng_() % (spread + 1))};
  }
  ++opens_in_a_row_;
  open_until_ = now + period;
  clear_window();
  set_state(BreakerState::kOpen, t);
}

void CircuitBreaker::notify(const Transition& t, bool changed) const {
  if (changed && options_.on_state_change) options_.on_state_change(t.from, t.to);
}

}  // namespace sluice
