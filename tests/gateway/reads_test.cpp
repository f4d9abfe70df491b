// The reads a proxied request costs the gateway's worker: one of the request and one of the
// upstream's answer, and none that finds nothing (a socket is read when epoll has said it has
// input: edge_reads.h), nor a peek at the pooled upstream connection before it is used again.
// Counted by interposing recv() for the gateway's worker threads (named sluice-w<N>), so in an
// executable of such tests that the sanitizer builds leave out: their runtime interposes recv too.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "http_client.h"
#include "one_worker_gateway.h"

namespace {
std::atomic<long> reads{0};        // that returned bytes or the end
std::atomic<long> empty_reads{0};  // that found nothing: EAGAIN
std::atomic<long> upstream_peeks{0};  // at a pooled upstream connection before it is used again
std::atomic<int> upstream_port{0};

bool on_a_worker() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return std::strncmp(name, "sluice-w", 8) == 0;
}
}  // namespace

// Every recv() of this process comes here: made as the system call, and counted when a worker made it.
extern "C" ssize_t recv(int fd, void* buf, size_t len, int flags) {
  const auto n = static_cast<ssize_t>(::syscall(SYS_recvfrom, fd, buf, len, flags, nullptr, nullptr));
  const int saved = errno;
  if (on_a_worker()) {
    if ((flags & MSG_PEEK) != 0) {
      // Not the peeks at a client whose answer is slow to come (TimedSocket::watch).
      sockaddr_in peer{};
      socklen_t size = sizeof peer;
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &size) == 0 && ntohs(peer.sin_port) == upstream_port.load()) {
        upstream_peeks.fetch_add(1);
      }
    } else if (n < 0 && (saved == EAGAIN || saved == EWOULDBLOCK)) {
      empty_reads.fetch_add(1);
    } else {
      reads.fetch_add(1);
    }
  }
  errno = saved;
  return n;
}

namespace sluice::gateway {
namespace {

using testing::HttpClient;

TEST(ReadsTest, AProxiedRequestIsTwoReadsAndNoneFindsNothing) {
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
)");
  ASSERT_TRUE(gw.gateway);
  upstream_port = gw.upstream->port();
  HttpClient c(gw.gateway->port());
  // The connections' first reads: the client's, and the upstream connection's, made as soon as the
  // request is sent, before any event says what the socket holds.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.get("/echo/warm", "crm").status, 200);
  ASSERT_GT(reads.load(), 0) << "the workers' reads do not come through recv(): nothing is counted";

  reads = 0;
  empty_reads = 0;
  upstream_peeks = 0;
  constexpr int kRequests = 100;
  for (int i = 0; i < kRequests; ++i) ASSERT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(empty_reads.load(), 0) << "over " << kRequests << " requests";
  EXPECT_EQ(upstream_peeks.load(), 0);
  EXPECT_EQ(reads.load(), 2 * kRequests);
  EXPECT_EQ(c.connections(), 1);
}

}  // namespace
}  // namespace sluice::gateway
