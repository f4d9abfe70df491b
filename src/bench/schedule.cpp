#include "bench/schedule.h"

#include <cmath>

namespace sluice::bench {
namespace {

// The number of whole requests i with i < n, where n requests fit in the run: ceil(n), forgiving
// the rounding error of a product that should be whole (1000/s for 1 s is 1000, not 1001).
std::uint64_t requests_below(double n) {
  if (n <= 0) return 0;
  const double whole = std::round(n);
  if (std::abs(n - whole) < 1e-9 * std::max(1.0, n)) return static_cast<std::uint64_t>(whole);
  return static_cast<std::uint64_t>(std::ceil(n));
}

double seconds_of(Nanos d) { return static_cast<double>(d.count()) / 1e9; }

}  // namespace

Schedule Schedule::constant(double rate, std::uint64_t count) {
  return Schedule(rate, rate, 0, count);
}

Schedule Schedule::constant_for(double rate, Nanos duration) {
  const double seconds = seconds_of(duration);
  return Schedule(rate, rate, seconds, requests_below(rate * seconds));
}

Schedule Schedule::ramp(double from, double to, Nanos duration) {
  const double seconds = seconds_of(duration);
  return Schedule(from, to, seconds, requests_below((from + to) / 2 * seconds));
}

Nanos Schedule::at(std::uint64_t i) const {
  if (i == 0) return Nanos{0};
  const double n = static_cast<double>(i);
  double t = 0;
  if (from_ == to_ || seconds_ == 0) {
    t = n / from_;
  } else {
    // The requests sent by time t are from*t + a*t^2/2 with a = (to - from) / seconds. Solving for
    // the time of the i-th: t = 2i / (from + sqrt(from^2 + 2ai)), a form that stays exact as a -> 0
    // and for a falling ramp.
    const double a = (to_ - from_) / seconds_;
    t = 2 * n / (from_ + std::sqrt(std::max(0.0, from_ * from_ + 2 * a * n)));
  }
  return Nanos{static_cast<std::int64_t>(std::llround(t * 1e9))};
}

}  // namespace sluice::bench
