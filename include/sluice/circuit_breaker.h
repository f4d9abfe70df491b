// CircuitBreaker: stops calling a dependency that keeps failing, then probes it before trusting it
// again. Thread-safe; a call in the closed state takes no lock until its outcome is recorded.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/clock.h"
#include "sluice/result.h"
#include "sluice/spin_lock.h"

namespace sluice {

enum class BreakerState : std::uint8_t {
  kClosed,        // calls pass; outcomes are recorded and judged
  kOpen,          // calls are rejected until the open period ends
  kHalfOpen,      // a few probes pass; their success closes, a failure reopens
  kForcedOpen,    // forced by an operator: every call is rejected
  kForcedClosed,  // forced by an operator: every call passes, nothing is judged
  kDisabled,      // the breaker is off: every call passes, nothing is recorded
};

const char* to_string(BreakerState state);

namespace detail {
template <class R>
inline constexpr bool kIsResult = false;
template <class T>
inline constexpr bool kIsResult<Result<T>> = true;
}  // namespace detail

enum class BreakerWindow : std::uint8_t {
  kCount,  // the last window_size calls
  kTime,   // the calls of the last window_duration, in ten slices that slide in turn
};

struct CircuitBreakerOptions {
  BreakerWindow window = BreakerWindow::kCount;
  std::int32_t window_size = 100;
  Nanos window_duration = std::chrono::seconds(60);
  // Rates are judged once the window holds at least this many calls.
  std::int32_t minimum_calls = 10;
  // Opens when at least this percentage of the window's calls failed; 0 turns the check off.
  std::int32_t failure_rate = 50;
  // Opens when at least this percentage took longer than slow_call; 0 turns the check off (and
  // with a count window, call() then reads no clock at all).
  std::int32_t slow_call_rate = 0;
  Nanos slow_call = std::chrono::seconds(60);
  // Opens after this many failures in a row, whatever the window says; 0 turns the check off.
  // "5 failures, then open for 60 s": consecutive_failures = 5, failure_rate = 0, open_for = 60 s.
  std::int32_t consecutive_failures = 0;
  Nanos open_for = std::chrono::seconds(60);
  // Each reopening without a close in between multiplies the open period (1: constant), up to
  // max_open_for; jitter shortens each period by a random 0..jitter_percent % of it.
  std::int32_t backoff_multiplier = 1;
  Nanos max_open_for = std::chrono::minutes(10);
  std::int32_t jitter_percent = 0;
  // Half-open: at most this many probes in flight; this many successes close the breaker.
  std::int32_t half_open_probes = 1;
  const Clock* clock = nullptr;  // nullptr: SteadyClock
  // Called after every state change, outside the breaker's lock, in no guaranteed order between
  // threads.
  std::function<void(BreakerState from, BreakerState to)> on_state_change{};

  // Every setting out of range, each as its own error ("failure_rate must be ..."); none when
  // valid. validate() is the first of them.
  std::vector<Error> problems() const;
  Status validate() const;
};

// What the window holds now, for metrics and the admin API.
struct BreakerStats {
  // The state a call would find now: an open breaker whose open period is over is half-open (it
  // turns so, and says so in state(), only when that call comes: reading changes nothing).
  BreakerState state = BreakerState::kClosed;
  std::int64_t calls = 0;
  std::int64_t failures = 0;
  std::int64_t slow_calls = 0;
  Nanos open_remaining{0};  // until the open period ends (open states only)
};

// Permission for one call: record its outcome (or release it) exactly once.
class BreakerPermit {
 public:
  bool admitted() const { return admitted_; }
  // When rejected: how long until the breaker will let a call through again, as far as it knows.
  Nanos retry_after() const { return retry_after_; }

 private:
  friend class CircuitBreaker;
  std::uint64_t generation_ = 0;
  Nanos retry_after_{0};
  bool admitted_ = false;
  bool probe_ = false;
  bool recorded_ = false;  // the breaker does not count this call (forced or disabled states)
};

class CircuitBreaker {
 public:
  // The options must validate(); invalid values are clamped into range.
  explicit CircuitBreaker(CircuitBreakerOptions options = {});
  CircuitBreaker(const CircuitBreaker&) = delete;
  CircuitBreaker& operator=(const CircuitBreaker&) = delete;

  BreakerPermit try_acquire();
  // The outcome of an admitted call and how long it took (only compared with slow_call). Whether
  // it counted: not when the call was admitted before the breaker's last change of state, nor in
  // a forced or disabled state.
  bool record(const BreakerPermit& permit, bool failed, Nanos duration = Nanos{0});
  // An admitted call that ended with no outcome to judge (cancelled): frees its probe slot.
  void release(const BreakerPermit& permit);

  // Runs fn if the breaker admits it, times it and records its outcome: an exception (rethrown), or
  // a Status / Result that is not ok (const too), is a failure. Returns fn's Status or Result as it
  // is, or wraps any other return value (a reference: a copy) in a Result (Status for void); a
  // rejected call returns
  // ErrorCode::kCircuitOpen without running fn.
  template <class F>
  auto call(F&& fn);

  BreakerState state() const;
  BreakerStats stats() const;
  const CircuitBreakerOptions& options() const { return options_; }

  void force_open();
  void force_closed();
  void disable();
  // Back to closed with an empty window, ending any forced or disabled state.
  void reset();

 private:
  struct Bucket {
    std::int64_t slice = -1;
    std::int64_t calls = 0;
    std::int64_t failures = 0;
    std::int64_t slow = 0;
  };
  struct Transition {
    BreakerState from;
    BreakerState to;
  };

  bool times_calls() const { return timed_; }
  Nanos now() const { return clock_->now(); }
  Error rejection(const BreakerPermit& permit) const;

  // All below run under mu_. Each returns the transition it made, if any.
  bool set_state(BreakerState to, Transition& t);
  void clear_window();
  void add_outcome(bool failed, bool slow, Nanos now);
  void add_to_slices(bool failed, bool slow, Nanos now);
  bool should_open() const;
  void open(Nanos now, Transition& t);
  void notify(const Transition& t, bool changed) const;

  static std::uint64_t pack(BreakerState s, std::uint64_t generation) {
    return (generation << 8) | static_cast<std::uint64_t>(s);
  }
  static BreakerState state_of(std::uint64_t word) { return static_cast<BreakerState>(word & 0xff); }

  const CircuitBreakerOptions options_;
  const Clock* const clock_;
  const bool timed_;  // whether call() needs the clock

  // State and generation in one word, so the closed fast path reads both with one load. The
  // generation changes with every transition; outcomes of permits from another generation are
  // ignored. Written only under mu_.
  std::atomic<std::uint64_t> word_;

  mutable detail::SpinLock mu_;  // held for a few dozen instructions at a time
  // Guarded by mu_:
  std::vector<std::uint8_t> ring_;  // count window: bit 0 failed, bit 1 slow
  std::size_t ring_next_ = 0;
  std::vector<Bucket> buckets_;     // time window
  std::int64_t calls_ = 0;
  std::int64_t failures_ = 0;
  std::int64_t slow_ = 0;
  std::int32_t failures_in_a_row_ = 0;
  std::int32_t opens_in_a_row_ = 0;
  Nanos open_until_{0};
  std::int32_t probes_in_flight_ = 0;
  std::int32_t probe_successes_ = 0;
  Nanos last_probe_at_{0};
  std::mt19937_64 rng_;
};

template <class F>
auto CircuitBreaker::call(F&& fn) {
  using R = std::remove_cvref_t<std::invoke_result_t<F&>>;  // a const Result or a reference, as its value
  using Out = std::conditional_t<std::is_void_v<R> || std::is_same_v<R, Status>, Status,
                                 std::conditional_t<detail::kIsResult<R>, R, Result<R>>>;
  const BreakerPermit permit = try_acquire();
  if (!permit.admitted()) return Out(rejection(permit));
  const Nanos start = times_calls() ? now() : Nanos{0};
  auto elapsed = [&] { return times_calls() ? now() - start : Nanos{0}; };
  bool recorded = false;  // an exception after the outcome was recorded (handing it over) is not one more
  try {
    if constexpr (std::is_void_v<R>) {
      fn();
      record(permit, false, elapsed());
      return Out{};
    } else {
      R r = fn();
      bool failed = false;
      if constexpr (std::is_same_v<R, Status> || detail::kIsResult<R>) failed = !r.ok();
      record(permit, failed, elapsed());
      recorded = true;
      return Out(std::move(r));
    }
  } catch (...) {
    if (!recorded) record(permit, true, elapsed());
    throw;
  }
}

}  // namespace sluice
