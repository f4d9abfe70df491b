// A limit shared through Redis: every process that runs this against one Redis takes from the same
// 5 requests a minute. find_package(sluice COMPONENTS redis) and sluice::redis, as a user would.
//
//   shared_limit [redis://host:port]
#include <sluice/redis/redis_store.h>

#include <chrono>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const std::string address = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  auto store = sluice::redis::RedisStore::open({.address = address});
  if (!store) {
    std::fprintf(stderr, "%s\n", store.error().message.c_str());
    return 2;
  }
  if (sluice::Status s = (*store)->connect(); !s) {
    std::fprintf(stderr, "%s\n", s.error().message.c_str());
    return 2;
  }
  auto limit = sluice::Limit::fixed_window({.limit = 5, .period = 1min});
  int admitted = 0;
  for (int i = 0; i < 8; ++i) {
    auto d = (*store)->acquire("example:shared", *limit);
    if (!d) {
      std::fprintf(stderr, "request %d: %s\n", i, d.error().message.c_str());
      return 2;
    }
    if (d->allowed) ++admitted;
  }
  std::printf("admitted %d of 8\n", admitted);
  return admitted == 5 ? 0 : 1;
}
