// A program outside the sluice tree: find_package(sluice) and sluice::core, as a user would.
#include <sluice/sluice.h>

#include <chrono>
#include <cstdio>

int main() {
  using namespace std::chrono_literals;
  sluice::LocalStore store;
  auto limit = sluice::Limit::token_bucket({.capacity = 5, .refill_tokens = 1, .refill_period = 1s});
  int admitted = 0;
  for (int i = 0; i < 8; ++i) {
    auto d = store.acquire("user:42", *limit);
    if (d.ok() && d->allowed) ++admitted;
    else if (d.ok()) std::printf("request %d: retry in %lld ms\n", i, static_cast<long long>(std::chrono::ceil<std::chrono::milliseconds>(d->retry_after).count()));
  }
  std::printf("admitted %d of 8\n", admitted);
  return admitted == 5 ? 0 : 1;
}
