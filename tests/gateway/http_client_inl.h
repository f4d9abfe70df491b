// The template part of http_client.h.
#pragma once

#include <thread>

namespace sluice::testing {

template <class F>
bool eventually(F&& cond, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling interval, not a wait for time to pass
  }
}

}  // namespace sluice::testing
