// What a proxied request takes from the heap in the coroutine frames and handlers Asio allocates.
// Asio keeps a few freed blocks per thread for reuse, but only blocks of up to 1020 bytes: a
// coroutine whose frame grows past that (a local too many in Worker::proxy, say) takes its frame
// from malloc on every request, and on the way frees a cached block of another (about 5% of a
// proxied request's instructions, unseen until measured). Asio takes those blocks from
// std::aligned_alloc, which this executable interposes to count the calls; so it is in an executable
// of such tests, left out of the sanitizer builds, whose runtime interposes it too (see
// CMakeLists.txt).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include <malloc.h>

#include "http_client.h"
#include "one_worker_gateway.h"

namespace {
std::atomic<long> aligned_allocations{0};
}  // namespace

// Every caller of std::aligned_alloc in this process comes here: counted, then served by glibc's
// memalign (the same allocator; free() releases either).
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  aligned_allocations.fetch_add(1, std::memory_order_relaxed);
  return ::memalign(alignment, size);
}

namespace sluice::gateway {
namespace {

using testing::HttpClient;

// Once a connection has carried a request, the next ones take nothing from the heap for Asio's
// frames and handlers: proxied with limits of every scope and an in-flight limit, refused by a
// limit, refused for an unknown caller. The gateway's (and the demo upstream's, in this process
// too) are all reused.
TEST(AllocationsTest, ARequestReusesAsiosFramesAndHandlers) {
  const auto gw = testing::start_one_worker(R"(
systems:
  - key: crm
    interfaces: ["*"]
    limits: [{algorithm: sliding_window, limit: 1000000, period: 1m}]
interfaces:
  - id: echo
    path: /echo/*
    upstream: app
    concurrency: 100
    limits:
      - {algorithm: token_bucket, capacity: 1000000, rate: 1000000, per: 1s}
      - {algorithm: gcra, limit: 1000000, period: 1s, burst: 1000}
  - id: tight
    path: /tight/*
    upstream: app
    limits: [{algorithm: fixed_window, limit: 1, period: 1h}]
grants:
  - {system: crm, interface: echo, limits: [{algorithm: fixed_window, limit: 1000000, period: 1h}]}
)");
  ASSERT_TRUE(gw.gateway);
  HttpClient c(gw.gateway->port());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.get("/echo/warm", "crm").status, 200);
  ASSERT_EQ(c.get("/tight/warm", "crm").status, 200);  // its one request
  ASSERT_EQ(c.get("/tight/warm", "crm").status, 429);
  ASSERT_EQ(c.get("/echo/warm", "nobody").status, 401);

  // The connection's session frame is larger than Asio reuses: counted, so the count works.
  const long before = aligned_allocations.load();
  ASSERT_GT(before, 0) << "Asio's blocks do not come through std::aligned_alloc: nothing is counted";
  constexpr int kRequests = 100;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(c.get("/echo/x", "crm").status, 200);
    ASSERT_EQ(c.get("/tight/x", "crm").status, 429);
    ASSERT_EQ(c.get("/echo/x", "nobody").status, 401);
  }
  EXPECT_EQ(aligned_allocations.load() - before, 0) << "over " << 3 * kRequests << " requests";
  EXPECT_EQ(c.connections(), 1);
}

}  // namespace
}  // namespace sluice::gateway
