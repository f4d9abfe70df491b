// FastClockProbe: how far FastClock readings fall from the system clock, each reading bracketed by
// two of the system clock's. FastClock follows a step of the system clock only at its next re-anchor
// (every 100 ms), so readings within 150 ms after a step are left out: a step shows as the system
// clock's offset from CLOCK_MONOTONIC (which no step moves) jumping between two readings taken
// without a pause (a reading whose bracket was long, preempted or with a step inside it, says
// nothing sure and is left out too). Virtual machines step the guest's clock (by half a
// millisecond, seen on a Firecracker guest) to follow the host's.
#pragma once

#include <chrono>
#include <optional>

#include "sluice/clock.h"

namespace sluice::testing {

class FastClockProbe {
 public:
  // How far one reading of `fast` fell outside its bracket; nullopt when left out.
  std::optional<Nanos> off(const FastClock& fast) {
    using namespace std::chrono_literals;
    const Nanos m0 = steady_.now();
    const Nanos before = system_.now();
    const Nanos reading = fast.now();
    const Nanos after = system_.now();
    const Nanos m1 = steady_.now();
    // The system clock's offset from the monotonic one lies within [lo, hi]; slewing moves it by
    // well under a microsecond between two readings, a step by its size.
    const Nanos lo = before - m1;
    const Nanos hi = after - m0;
    if (hi - lo > 20us) return std::nullopt;
    if (seen_ && (lo > hi_ + 20us || hi < lo_ - 20us)) quiet_until_ = m1 + 150ms;
    lo_ = lo;
    hi_ = hi;
    seen_ = true;
    if (m1 < quiet_until_) return std::nullopt;
    return reading < before ? before - reading : (reading > after ? reading - after : 0ns);
  }

 private:
  const SystemClock& system_ = SystemClock::instance();
  const SteadyClock& steady_ = SteadyClock::instance();
  bool seen_ = false;
  Nanos lo_{0};
  Nanos hi_{0};
  Nanos quiet_until_ = Nanos::min();
};

}  // namespace sluice::testing
