#include "sluice/clock.h"

#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace sluice {
namespace {

Nanos read(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return Nanos{static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec};
}

constexpr std::int64_t kCalibrateAfterNs = 10'000'000;  // the first rate needs a 10 ms baseline
constexpr std::int64_t kReanchorNs = 100'000'000;

#if defined(__x86_64__)
bool invariant_tsc() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) == 0 || a < 0x80000007) return false;
  __get_cpuid(0x80000007, &a, &b, &c, &d);
  return (d & (1U << 8)) != 0;
}
std::uint64_t ticks() { return __rdtsc(); }
#else
bool invariant_tsc() { return false; }
std::uint64_t ticks() { return 0; }
#endif

}  // namespace

Nanos SystemClock::now() const noexcept { return read(CLOCK_REALTIME); }

const SystemClock& SystemClock::instance() {
  static const SystemClock clock;
  return clock;
}

Nanos SteadyClock::now() const noexcept { return read(CLOCK_MONOTONIC); }

const SteadyClock& SteadyClock::instance() {
  static const SteadyClock clock;
  return clock;
}

FastClock::FastClock()
    : usable_(invariant_tsc()), first_ns_(read(CLOCK_REALTIME).count()), first_tsc_(ticks()) {}

const FastClock& FastClock::instance() {
  static const FastClock clock;
  return clock;
}

// ThreadSanitizer does not model fences: in its builds the sequence lock uses read-modify-writes,
// which order at least as strongly (and every field is atomic, so there is no data race to find).
bool FastClock::unchanged(std::uint32_t seq) const noexcept {
#if defined(__SANITIZE_THREAD__)
  return seq_.fetch_add(0, std::memory_order_acq_rel) == seq;
#else
  std::atomic_thread_fence(std::memory_order_acquire);
  return seq_.load(std::memory_order_relaxed) == seq;
#endif
}

void FastClock::begin_write(std::uint32_t seq) const noexcept {
#if defined(__SANITIZE_THREAD__)
  seq_.exchange(seq + 1, std::memory_order_acq_rel);
#else
  seq_.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

// A sequence-lock read (Boehm, "Can seqlocks get along with programming language memory models?"):
// the fields are atomics read relaxed between two reads of seq_; a changed or odd seq_ means a
// writer was busy, and the slow path answers instead.
Nanos FastClock::now() const noexcept {
  if (!usable_) return read(CLOCK_REALTIME);
  const std::uint32_t seq = seq_.load(std::memory_order_acquire);
  const std::int64_t base_ns = base_ns_.load(std::memory_order_relaxed);
  const std::uint64_t base_tsc = base_tsc_.load(std::memory_order_relaxed);
  const std::uint64_t scale = ns_per_tick_q32_.load(std::memory_order_relaxed);
  const std::uint64_t max_ticks = max_ticks_.load(std::memory_order_relaxed);
  if ((seq & 1) != 0 || !unchanged(seq) || scale == 0) return reanchor();
  const std::uint64_t elapsed = ticks() - base_tsc;
  if (elapsed > max_ticks) return reanchor();
  return Nanos{base_ns + static_cast<std::int64_t>((elapsed * scale) >> 32)};
}

// Reads CLOCK_REALTIME and, if no other thread is doing so, publishes a new anchor with the rate
// measured over the whole time since construction.
Nanos FastClock::reanchor() const noexcept {
  const Nanos now = read(CLOCK_REALTIME);
  const std::uint64_t tsc = ticks();
  const std::int64_t since_ns = now.count() - first_ns_;
  const std::uint64_t since_ticks = tsc - first_tsc_;
  if (since_ns < kCalibrateAfterNs || since_ticks == 0) return now;
  if (writing_.exchange(true, std::memory_order_acquire)) return now;
  const auto scale = static_cast<std::uint64_t>(
      (static_cast<unsigned __int128>(since_ns) << 32) / since_ticks);
  const std::uint32_t seq = seq_.load(std::memory_order_relaxed);
  begin_write(seq);
  base_ns_.store(now.count(), std::memory_order_relaxed);
  base_tsc_.store(tsc, std::memory_order_relaxed);
  ns_per_tick_q32_.store(scale, std::memory_order_relaxed);
  max_ticks_.store(scale == 0 ? 0 : (static_cast<std::uint64_t>(kReanchorNs) << 32) / scale,
                   std::memory_order_relaxed);
  seq_.store(seq + 2, std::memory_order_release);
  writing_.store(false, std::memory_order_release);
  return now;
}

}  // namespace sluice
