// Clocks: the manual clock moves only when told; FastClock stays within a few microseconds of the
// system clock across calibration and re-anchoring (real time passes: the clock is what is tested).
#include "sluice/clock.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(ManualClock, MovesOnlyWhenTold) {
  ManualClock clock(5s);
  EXPECT_EQ(clock.now(), 5s);
  clock.advance(250ms);
  EXPECT_EQ(clock.now(), 5250ms);
  clock.set(1s);
  EXPECT_EQ(clock.now(), 1s);
}

TEST(FastClock, StaysWithinMicrosecondsOfTheSystemClock) {
  const FastClock fast;
  const SystemClock& system = SystemClock::instance();
  const Nanos start = system.now();
  int readings = 0;
  Nanos worst{0};
  // 350 ms: the first calibration at 10 ms, then three re-anchors.
  while (system.now() - start < 350ms) {
    const Nanos before = system.now();
    const Nanos reading = fast.now();
    const Nanos after = system.now();
    const Nanos off = reading < before ? before - reading : (reading > after ? reading - after : 0ns);
    worst = std::max(worst, off);
    ++readings;
  }
  EXPECT_GT(readings, 1000);
  EXPECT_LT(worst, 50us);
}

}  // namespace
}  // namespace sluice
