// Clocks: where "now" comes from. Limiters take now as an argument; long-lived objects hold a Clock&.
// SystemClock and SteadyClock are stateless and thread-safe; ManualClock is thread-safe (atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice {

using Nanos = std::chrono::nanoseconds;
using Micros = std::chrono::microseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds since this clock's epoch; never negative.
  virtual Nanos now() const noexcept = 0;
};

// Wall-clock time since the Unix epoch (CLOCK_REALTIME). Windows (fixed, sliding) align to the epoch,
// as they do in Redis, so "1000 per hour" resets at the top of the hour. It can step backwards;
// every algorithm treats an earlier time as "no time has passed", never as extra credit.
class SystemClock final : public Clock {
 public:
  Nanos now() const noexcept override;
  static const SystemClock& instance();
};

// Monotonic time since an arbitrary epoch (CLOCK_MONOTONIC): for measuring durations.
class SteadyClock final : public Clock {
 public:
  Nanos now() const noexcept override;
  static const SteadyClock& instance();
};

// A clock that moves only when told: for tests and simulations.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = Nanos{0}) : now_(start.count()) {}
  Nanos now() const noexcept override { return Nanos{now_.load(std::memory_order_acquire)}; }
  void set(Nanos t) { now_.store(t.count(), std::memory_order_release); }
  void advance(Nanos d) { now_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<std::int64_t> now_;
};

}  // namespace sluice
