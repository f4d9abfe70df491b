// Schedule: when each request of an open-loop run is meant to leave: a constant rate or a linear
// ramp. An immutable value; safe to share between threads.
#pragma once

#include <cstdint>

#include "sluice/clock.h"

namespace sluice::bench {

class Schedule {
 public:
  // `count` requests at `rate` per second: request i at i / rate.
  static Schedule constant(double rate, std::uint64_t count);
  // As many requests as fit in `duration` at `rate` per second.
  static Schedule constant_for(double rate, Nanos duration);
  // A rate going linearly from `from` to `to` per second over `duration`, and the requests that
  // fit.
  static Schedule ramp(double from, double to, Nanos duration);

  std::uint64_t count() const { return count_; }
  // When request i (0 <= i < count()) is meant to be sent, from the start of the run.
  Nanos at(std::uint64_t i) const;
  // The rate asked for at the start and at the end, per second.
  double rate_from() const { return from_; }
  double rate_to() const { return to_; }

 private:
  Schedule(double from, double to, double seconds, std::uint64_t count)
      : from_(from), to_(to), seconds_(seconds), count_(count) {}

  double from_ = 0;     // requests per second at t = 0
  double to_ = 0;       // requests per second at t = seconds_ (equal to from_ for a constant rate)
  double seconds_ = 0;  // how long the ramp lasts (0 for a constant rate given by count)
  std::uint64_t count_ = 0;
};

}  // namespace sluice::bench
