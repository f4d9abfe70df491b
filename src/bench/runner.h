// run(): the load itself, on threads that each drive their share of the connections with Asio.
// Thread-safe to call; it blocks, and calls its hooks on the calling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "bench/plan.h"
#include "bench/stats.h"
#include "sluice/clock.h"
#include "sluice/result.h"

namespace sluice::bench {

// A snapshot for the live progress line.
struct Progress {
  Nanos elapsed{0};
  std::uint64_t responses = 0;
  std::uint64_t admitted = 0;
  std::uint64_t rejected = 0;
  std::uint64_t errors = 0;
};

struct RunHooks {
  std::function<void(const Progress&)> on_progress;  // every progress_every while the load runs
  Nanos progress_every = std::chrono::milliseconds(250);
  // When it becomes true (e.g. on Ctrl-C), no new request is sent; those in flight are awaited and
  // the run ends with what it has seen.
  const std::atomic<bool>* stop = nullptr;
  // Once, when the run sees `stop` and begins to wait for the requests in flight.
  std::function<void()> on_stopping;
};

struct RunResult {
  Stats stats;       // all threads merged
  Nanos elapsed{0};  // from the start of the load to the last response or error
  bool stopped_early = false;
};

// Resolves the target, opens every connection, then runs the plan's load. Fails, with a message for
// a person, when the host cannot be resolved or a connection cannot be opened; everything that goes
// wrong once the load has started is counted in the stats instead. A stop while the connections
// are opening ends the run at once, stopped early, with nothing sent.
Result<RunResult> run(const Plan& plan, const RunHooks& hooks = {});

}  // namespace sluice::bench
