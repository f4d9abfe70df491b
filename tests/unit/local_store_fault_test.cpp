// LocalStore::acquire_all when a step throws (a table that cannot grow, a log that cannot be made):
// every allocation of the call is failed in turn, by a global operator new that throws once a
// countdown armed on this thread runs out. Whichever step throws, the limits decided before it are
// given back (all or nothing) and every shard is unlocked. Its own executable: the replaced
// operator new would serve every other test too.
#include "sluice/local_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <new>
#include <string>
#include <thread>

#include "test_time.h"

namespace {

// Allocations left before one fails, on this thread; negative: none fails.
thread_local long allocations_left = -1;

void* allocate(std::size_t size) {
  if (allocations_left == 0) {
    allocations_left = -1;
    throw std::bad_alloc();
  }
  if (allocations_left > 0) --allocations_left;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::kT0;

Limit make(Result<Limit> r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return std::move(r).value();
}

// Whether a call on another thread gets through in time: it would wait for good on a shard left
// locked.
bool store_answers(LocalStore& store, const std::string& key, const Limit& limit) {
  auto answered = std::async(std::launch::async, [&] { return store.peek(key, limit).ok(); });
  return answered.wait_for(10s) == std::future_status::ready && answered.get();
}

TEST(LocalStoreFaults, AStepThatThrowsGivesBackWhatTheOthersTookAndUnlocksEveryShard) {
  ManualClock clock(kT0);
  LocalStore store(LocalStoreOptions{.clock = &clock, .shards = 4});
  const Limit bucket = make(Limit::token_bucket({.capacity = 5, .refill_tokens = 1, .refill_period = 1h}));
  const Limit window = make(Limit::fixed_window({.limit = 5, .period = 1h}));
  const Limit log = make(Limit::sliding_log({.limit = 5, .period = 1h}));  // each key's log is allocated
  int thrown = 0;
  for (long fail_at = 0; fail_at < 1000; ++fail_at) {
    SCOPED_TRACE("allocation " + std::to_string(fail_at) + " fails");
    // Keys decided before (so their states exist and have something to give back) and new ones.
    const std::string old_key = "old" + std::to_string(fail_at), new_key = "new" + std::to_string(fail_at);
    ASSERT_TRUE(store.acquire(old_key, bucket)->allowed);
    ASSERT_TRUE(store.acquire(old_key, window)->allowed);
    const LimitRequest all[] = {{old_key, &bucket, 1}, {old_key, &window, 1}, {new_key, &window, 1},
                                {new_key, &log, 1}, {old_key, &log, 1}};
    Decision decisions[5];
    bool threw = false;
    allocations_left = fail_at;
    try {
      (void)store.acquire_all(all, decisions);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    allocations_left = -1;
    ASSERT_TRUE(store_answers(store, old_key, bucket)) << "a shard was left locked";
    if (!threw) {
      // Every allocation the call makes has had its turn to fail.
      EXPECT_EQ(store.peek(old_key, bucket)->remaining, 3);
      EXPECT_EQ(store.peek(new_key, log)->remaining, 4);
      break;
    }
    ++thrown;
    EXPECT_EQ(store.peek(old_key, bucket)->remaining, 4) << "given back";
    EXPECT_EQ(store.peek(old_key, window)->remaining, 4) << "given back";
    EXPECT_EQ(store.peek(new_key, window)->remaining, 5) << "given back";
    EXPECT_EQ(store.peek(new_key, log)->remaining, 5) << "given back";
    EXPECT_EQ(store.peek(old_key, log)->remaining, 5) << "given back";
  }
  EXPECT_GE(thrown, 1) << "no allocation failed: the test tested nothing";
}

}  // namespace
}  // namespace sluice
