#include "sluice/clock.h"

#include <time.h>

namespace sluice {
namespace {

Nanos read(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return Nanos{static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec};
}

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

}  // namespace sluice
