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

// A reading of a clock with the counter read just before and after it: the counter at the middle,
// and the spread, which is large when something (a preemption) came between them.
struct Paired {
  std::int64_t ns = 0;
  std::uint64_t tsc = 0;
  std::uint64_t spread = 0;
};

Paired paired(clockid_t id) {
  const std::uint64_t t0 = ticks();
  const std::int64_t ns = read(id).count();
  const std::uint64_t t1 = ticks();
  return {ns, t0 + (t1 - t0) / 2, t1 - t0};
}

// A pair whose readings are further apart than this does not describe one instant.
constexpr std::uint64_t kMaxSpreadNs = 5'000;

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

FastClock::FastClock() : usable_(invariant_tsc()) {
  // The baseline of the rate: the tightest of a few pairs.
  Paired best = paired(CLOCK_MONOTONIC);
  for (int i = 0; i < 4; ++i) {
    const Paired p = paired(CLOCK_MONOTONIC);
    if (p.spread < best.spread) best = p;
  }
  first_ns_ = best.ns;
  first_tsc_ = best.tsc;
}

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
// measured over the whole time since construction — against CLOCK_MONOTONIC, which NTP slews as it
// slews the wall clock but which no step moves: a step of the wall clock (chrony's makestep at
// boot, say) would otherwise skew the rate for minutes after.
Nanos FastClock::reanchor() const noexcept {
  const Paired wall = paired(CLOCK_REALTIME);
  const Paired mono = paired(CLOCK_MONOTONIC);
  const Nanos now{wall.ns};
  const std::int64_t since_ns = mono.ns - first_ns_;
  const std::uint64_t since_ticks = mono.tsc - first_tsc_;
  if (since_ns < kCalibrateAfterNs || since_ticks == 0) return now;
  const auto scale = static_cast<std::uint64_t>(
      (static_cast<unsigned __int128>(since_ns) << 32) / since_ticks);
  // A counter from 1 MHz to 100 GHz; anything else is a broken counter, not a rate to publish.
  if (scale < (std::uint64_t{1} << 32) / 100 || scale > (std::uint64_t{1000} << 32)) return now;
  // A pair a preemption came between would shift every reading until the next anchor.
  const auto spread_ns = [scale](std::uint64_t t) { return (static_cast<unsigned __int128>(t) * scale) >> 32; };
  if (spread_ns(wall.spread) > kMaxSpreadNs || spread_ns(mono.spread) > kMaxSpreadNs) return now;
  if (writing_.exchange(true, std::memory_order_acquire)) return now;
  const std::uint32_t seq = seq_.load(std::memory_order_relaxed);
  begin_write(seq);
  base_ns_.store(wall.ns, std::memory_order_relaxed);
  base_tsc_.store(wall.tsc, std::memory_order_relaxed);
  ns_per_tick_q32_.store(scale, std::memory_order_relaxed);
  max_ticks_.store(scale == 0 ? 0 : (static_cast<std::uint64_t>(kReanchorNs) << 32) / scale,
                   std::memory_order_relaxed);
  seq_.store(seq + 2, std::memory_order_release);
  writing_.store(false, std::memory_order_release);
  return now;
}

}  // namespace sluice
