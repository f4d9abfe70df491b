// Helpers for tests that pass time in: a base instant aligned to every period the tests use.
#pragma once

#include <chrono>

#include "sluice/clock.h"

namespace sluice::testing {

// 2023-11-14 21:00:00 UTC: a multiple of one hour (and so of every period up to one hour that divides
// it), in the range real clocks give.
inline constexpr Nanos kT0 = std::chrono::seconds(1'699'995'600);

inline Nanos at_ms(std::int64_t ms) { return kT0 + std::chrono::milliseconds(ms); }
inline Nanos at_us(std::int64_t us) { return kT0 + std::chrono::microseconds(us); }

}  // namespace sluice::testing
