// Micro-benchmarks of the core: one decision with time passed in and with the clock read, the local
// store on one hot key and on distinct keys from two threads, 100,000 Zipf-distributed keys (time
// and measured bytes per key), and the circuit breaker's call() overhead.
#include <benchmark/benchmark.h>
#include <malloc.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <charconv>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sluice/algorithms.h"
#include "sluice/circuit_breaker.h"
#include "sluice/clock.h"
#include "sluice/local_store.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// A bucket that admits at the rate the loop asks: 1,000 tokens, a million per second.
const Limit& bucket() {
  static const Limit limit =
      *Limit::token_bucket({.capacity = 1000, .refill_tokens = 1'000'000, .refill_period = 1s});
  return limit;
}

const Limit& gcra() {
  static const Limit limit = *Limit::gcra({.limit = 1'000'000, .period = 1s, .burst = 1000});
  return limit;
}

// --- One key, one thread, time passed in ---------------------------------------------------------

// Decisions on one state of type State, the time advancing `step` before each.
template <class State>
void time_passed_in(benchmark::State& state, const Limit& limit, Nanos step) {
  State s;
  Nanos now = SystemClock::instance().now();
  for (auto _ : state) {
    now += step;
    benchmark::DoNotOptimize(decide(s, limit, now, 1));
  }
}

void BM_TokenBucket_TimePassedIn(benchmark::State& state) {
  time_passed_in<GcraState>(state, bucket(), 1us);
}
BENCHMARK(BM_TokenBucket_TimePassedIn);

// The same bucket asked ten times faster than it refills: after the first 1,000, nine decisions in
// ten reject (as Go's Allow benchmark does once its bucket is empty).
void BM_TokenBucket_TimePassedIn_Rejecting(benchmark::State& state) {
  time_passed_in<GcraState>(state, bucket(), 100ns);
}
BENCHMARK(BM_TokenBucket_TimePassedIn_Rejecting);

void BM_Gcra_TimePassedIn(benchmark::State& state) { time_passed_in<GcraState>(state, gcra(), 1us); }
BENCHMARK(BM_Gcra_TimePassedIn);

// A rate that does not divide the period (3 per second): the meter's units are not microseconds.
void BM_Gcra_RationalRate_TimePassedIn(benchmark::State& state) {
  static const Limit limit = *Limit::gcra({.limit = 3'000'007, .period = 3s, .burst = 1000});
  time_passed_in<GcraState>(state, limit, 1us);
}
BENCHMARK(BM_Gcra_RationalRate_TimePassedIn);

void BM_IntervalBucket_TimePassedIn(benchmark::State& state) {
  static const Limit limit = *Limit::token_bucket(
      {.capacity = 1000, .refill_tokens = 1000, .refill_period = 1ms, .refill = Refill::kInterval});
  time_passed_in<IntervalBucketState>(state, limit, 1us);
}
BENCHMARK(BM_IntervalBucket_TimePassedIn);

void BM_SlidingWindow_TimePassedIn(benchmark::State& state) {
  static const Limit limit = *Limit::sliding_window({.limit = 1'000'000, .period = 1s});
  time_passed_in<SlidingWindowState>(state, limit, 1us);
}
BENCHMARK(BM_SlidingWindow_TimePassedIn);

// --- One key, one thread, the clock read for every decision ------------------------------------

// The bucket of Go's Allow benchmark (bench/peers/go): 1,000 tokens, a million per second. Asked
// every few tens of nanoseconds, it is empty after the first 1,000 and then admits one decision in
// every microsecond's worth, rejecting the rest — as Go's does.
template <class ClockT>
void BM_TokenBucket_ClockRead(benchmark::State& state) {
  const ClockT& clock = ClockT::instance();
  const Limit& limit = bucket();  // as Go's benchmark makes its limiter before the loop
  GcraState s;
  for (auto _ : state) benchmark::DoNotOptimize(decide(s, limit, clock.now(), 1));
}
BENCHMARK(BM_TokenBucket_ClockRead<FastClock>)->Name("BM_TokenBucket_ClockRead/FastClock");
BENCHMARK(BM_TokenBucket_ClockRead<SystemClock>)->Name("BM_TokenBucket_ClockRead/SystemClock");

// A meter with a burst so deep that every decision admits, whatever the loop's speed.
template <class ClockT>
void BM_Gcra_ClockRead(benchmark::State& state) {
  static const Limit limit = *Limit::gcra({.limit = 1000, .period = 1ms, .burst = kMaxLimit});
  const ClockT& clock = ClockT::instance();
  GcraState s;
  for (auto _ : state) benchmark::DoNotOptimize(decide(s, limit, clock.now(), 1));
}
BENCHMARK(BM_Gcra_ClockRead<FastClock>)->Name("BM_Gcra_ClockRead/FastClock");
BENCHMARK(BM_Gcra_ClockRead<SystemClock>)->Name("BM_Gcra_ClockRead/SystemClock");

// The clocks alone, for reading the two above.
void BM_FastClock_Now(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(FastClock::instance().now());
}
BENCHMARK(BM_FastClock_Now);
void BM_SystemClock_Now(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(SystemClock::instance().now());
}
BENCHMARK(BM_SystemClock_Now);
#if defined(__x86_64__)
// The instruction FastClock is built on: the floor of any clock read on this machine.
void BM_Rdtsc(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(__rdtsc());
}
BENCHMARK(BM_Rdtsc);
#endif

// --- The local store from two threads: one hot key, and a key per thread -----------------------

LocalStore& shared_store() {
  static LocalStore store;
  return store;
}

void BM_LocalStore_HotKey(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(shared_store().acquire("hot", bucket()));
}
BENCHMARK(BM_LocalStore_HotKey)->Threads(1)->Threads(2)->UseRealTime();

void BM_LocalStore_DistinctKeys(benchmark::State& state) {
  const std::string key = "thread:" + std::to_string(state.thread_index());
  for (auto _ : state) benchmark::DoNotOptimize(shared_store().acquire(key, bucket()));
}
BENCHMARK(BM_LocalStore_DistinctKeys)->Threads(1)->Threads(2)->UseRealTime();

// --- 100,000 keys, Zipf-distributed (s = 1), through the local store ---------------------------

// Each key is formatted as the request arrives, as the gateway builds its keys, so the figure is the
// store's work plus that formatting, not cache misses on a table of prepared key strings.
void BM_LocalStore_Zipf100k(benchmark::State& state) {
  constexpr int kKeys = 100'000;
  std::vector<double> weights(kKeys);
  for (int i = 0; i < kKeys; ++i) weights[i] = 1.0 / (i + 1);
  std::discrete_distribution<int> zipf(weights.begin(), weights.end());
  std::mt19937_64 rng(1);
  std::vector<int> order(1 << 20);
  for (int& k : order) k = zipf(rng);
  char key[16] = "user:";
  auto key_of = [&key](int i) {
    const auto end = std::to_chars(key + 5, key + sizeof key, 1'000'000 + i).ptr;
    return std::string_view(key, static_cast<std::size_t>(end - key));
  };

  // A slow refill keeps every touched key's state in the store for the whole run.
  const Limit limit = *Limit::token_bucket({.capacity = 1000, .refill_tokens = 1, .refill_period = 1h});
  ManualClock clock(SystemClock::instance().now());
  const std::size_t heap_before = mallinfo2().uordblks;
  auto store = std::make_unique<LocalStore>(LocalStoreOptions{.clock = &clock});
  for (int i = 0; i < kKeys; ++i) (void)store->acquire(key_of(i), limit);
  const std::size_t heap_after = mallinfo2().uordblks;

  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(store->acquire(key_of(order[i]), limit));
    i = (i + 1) & (order.size() - 1);
  }
  state.counters["keys"] = static_cast<double>(store->size());
  state.counters["heap_bytes_per_key"] =
      static_cast<double>(heap_after - heap_before) / static_cast<double>(store->size());
  state.counters["table_bytes_per_key"] =
      static_cast<double>(store->memory_bytes()) / static_cast<double>(store->size());
}
BENCHMARK(BM_LocalStore_Zipf100k);

// --- The circuit breaker's call() against calling the function directly ------------------------

int work(int x) { return x + 1; }

void BM_DirectCall(benchmark::State& state) {
  int x = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(x = work(x));
  }
}
BENCHMARK(BM_DirectCall);

void BM_BreakerCall(benchmark::State& state) {
  CircuitBreaker breaker;  // count window, failure rate: no clock read on the closed path
  int x = 0;
  for (auto _ : state) {
    auto r = breaker.call([&] { return x = work(x); });
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_BreakerCall);

void BM_BreakerCall_Timed(benchmark::State& state) {
  CircuitBreakerOptions o;  // slow-call detection: two clock reads per call
  o.slow_call_rate = 100;
  o.slow_call = 1s;
  o.clock = &FastClock::instance();
  CircuitBreaker breaker(o);
  int x = 0;
  for (auto _ : state) {
    auto r = breaker.call([&] { return x = work(x); });
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_BreakerCall_Timed);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
