// SpinLock: a test-and-test-and-set lock for critical sections of a few dozen instructions, such as
// a LocalStore shard's. Thread-safe; meets the Lockable requirements (std::lock_guard works).
// After a short spin a waiter yields its core, so a holder that was preempted still gets to run.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sluice::detail {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
#if defined(__x86_64__)
          _mm_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    }
  }

  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }

  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace sluice::detail
