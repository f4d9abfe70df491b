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

// See unchanged() in the header.
void FastClock::begin_write(std::uint32_t seq) const noexcept {
#if defined(__SANITIZE_THREAD__)
  seq_.exchange(seq + 1, std::memory_order_acq_rel);
#else
  seq_.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

Nanos FastClock::slow_now() const noexcept { return usable_ ? reanchor() : read(CLOCK_REALTIME); }

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
