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

// Wall-clock time like SystemClock at about half the cost: the CPU's time-stamp counter, scaled by
// a rate measured against CLOCK_MONOTONIC (which NTP slews but no clock step moves) and re-anchored
// to CLOCK_REALTIME every 100 ms (so it follows NTP and steps).
// Readings may differ from SystemClock's by a microsecond or so, and may step back by as much at a
// re-anchor. Where the counter is not invariant (or on other CPUs) it is SystemClock.
class FastClock final : public Clock {
 public:
  FastClock();
  // Defined inline below: the fast path is a few loads, the counter read and a multiply, and a
  // call costs a measurable share of that (BM_TokenBucket_ClockRead/FastClock 34.4 -> 32.7 ns).
  Nanos now() const noexcept override;
  static const FastClock& instance();

 private:
  Nanos slow_now() const noexcept;
  Nanos reanchor() const noexcept;
  bool unchanged(std::uint32_t seq) const noexcept;
  void begin_write(std::uint32_t seq) const noexcept;

  const bool usable_;
  std::int64_t first_ns_ = 0;    // CLOCK_MONOTONIC at construction, for the rate
  std::uint64_t first_tsc_ = 0;  // the counter then
  // The published calibration, read under a sequence lock: seq_ is odd while a writer updates it.
  mutable std::atomic<std::uint32_t> seq_{0};
  mutable std::atomic<std::int64_t> base_ns_{0};
  mutable std::atomic<std::uint64_t> base_tsc_{0};
  mutable std::atomic<std::uint64_t> ns_per_tick_q32_{0};  // 0: not calibrated yet
  mutable std::atomic<std::uint64_t> max_ticks_{0};        // re-anchor after this many ticks
  mutable std::atomic<bool> writing_{false};               // one writer at a time
};

// A sequence-lock read (Boehm, "Can seqlocks get along with programming language memory models?"):
// the fields are atomics read relaxed between two reads of seq_; a changed or odd seq_ means a
// writer was busy, and the slow path answers instead. Uncalibrated (or where the counter is not
// invariant) the scale is 0, which sends every read down the slow path too.
inline bool FastClock::unchanged(std::uint32_t seq) const noexcept {
  // ThreadSanitizer does not model fences: in its builds the sequence lock uses read-modify-writes,
  // which order at least as strongly (and every field is atomic, so there is no data race to find).
#if defined(__SANITIZE_THREAD__)
  return seq_.fetch_add(0, std::memory_order_acq_rel) == seq;
#else
  std::atomic_thread_fence(std::memory_order_acquire);
  return seq_.load(std::memory_order_relaxed) == seq;
#endif
}

inline Nanos FastClock::now() const noexcept {
#if defined(__x86_64__)
  const std::uint32_t seq = seq_.load(std::memory_order_acquire);
  const std::int64_t base_ns = base_ns_.load(std::memory_order_relaxed);
  const std::uint64_t base_tsc = base_tsc_.load(std::memory_order_relaxed);
  const std::uint64_t scale = ns_per_tick_q32_.load(std::memory_order_relaxed);
  const std::uint64_t max_ticks = max_ticks_.load(std::memory_order_relaxed);
  if ((seq & 1) != 0 || !unchanged(seq) || scale == 0) return slow_now();
  const std::uint64_t elapsed = __builtin_ia32_rdtsc() - base_tsc;
  if (elapsed > max_ticks) return slow_now();
  return Nanos{base_ns + static_cast<std::int64_t>((elapsed * scale) >> 32)};
#else
  return slow_now();
#endif
}

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
