// The gateway with no file descriptor left to open. These tests lower RLIMIT_NOFILE for the whole
// process, so they run in an executable of their own, which the sanitizer builds leave out (see
// CMakeLists.txt): the sanitizers' runtime needs descriptors too (UBSan's vptr check opens a pipe to
// see whether memory is readable) and, without them, reports errors that are not there.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gateway/demo.h"
#include "gateway/gateway.h"
#include "http_client.h"
#include "load_config.h"

namespace sluice::gateway {
namespace {

using testing::HttpClient;
using testing::HttpResponse;

// The sum of the metric lines that start with `prefix` (a name and some of its labels).
long metric_sum(const std::string& text, const std::string& prefix) {
  long sum = 0;
  for (std::size_t at = 0; (at = text.find("\n" + prefix, at)) != std::string::npos; ++at) {
    sum += std::stol(text.substr(text.find("} ", at) + 2));
  }
  return sum;
}

// While it lives, no descriptor can be opened past the lowest `left` ones free (none by default):
// the soft limit is set that far above the lowest one free.
class NoDescriptorLeft {
 public:
  explicit NoDescriptorLeft(int left = 0) {
    const int lowest_free = ::dup(0);
    EXPECT_GE(lowest_free, 0);
    ::close(lowest_free);
    EXPECT_EQ(::getrlimit(RLIMIT_NOFILE, &before_), 0);
    rlimit none = before_;
    none.rlim_cur = static_cast<rlim_t>(lowest_free + left);
    EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &none), 0);
  }
  ~NoDescriptorLeft() { ::setrlimit(RLIMIT_NOFILE, &before_); }
  NoDescriptorLeft(const NoDescriptorLeft&) = delete;
  NoDescriptorLeft& operator=(const NoDescriptorLeft&) = delete;

 private:
  rlimit before_{};
};

class DescriptorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto up = DemoUpstream::start();
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(*up);
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "127.0.0.1:0";
    o.threads = 1;
    o.access_log = "off";
    o.log = [this](std::string_view line) {
      std::lock_guard lock(log_mutex_);
      log_ += std::string(line) + "\n";
    };
    auto g = Gateway::start(o, testing::load_config(R"(
upstreams:
  - name: app
    targets: [127.0.0.1:)" + std::to_string(upstream_->port()) + R"(]
    breaker: {window: 4, minimum_calls: 1, failure_rate: 50, open_for: 10s}
systems:
  - {key: crm, interfaces: ["*"], limits: [{algorithm: fixed_window, limit: 1000, period: 1h}]}
interfaces:
  - {id: echo, path: /echo/*, upstream: app}
)"));
    ASSERT_TRUE(g.ok()) << g.error().message;
    gw_ = std::move(*g);
  }

  std::string metrics() {
    HttpClient c(gw_->admin_port());
    return c.get("/metrics").body;
  }

  std::string log() {
    std::lock_guard lock(log_mutex_);
    return log_;
  }

  std::unique_ptr<DemoUpstream> upstream_;
  std::unique_ptr<Gateway> gw_;
  std::mutex log_mutex_;
  std::string log_;
};

// Out of descriptors, a request is answered 503 gateway_overloaded with Retry-After: the upstream,
// which did nothing wrong, is not blamed (no connect failure counted, its breaker closed), nor are
// the limits, which admitted it (no RateLimit fields).
TEST_F(DescriptorsTest, OutOfDescriptorsIsTheGatewaysOverloadNotTheUpstreamsFailure) {
  HttpClient c(gw_->port());
  ASSERT_EQ(c.get("/_sluice/healthz").status, 200);  // connected and accepted, no upstream yet
  HttpResponse refused;
  {
    NoDescriptorLeft none;
    refused = c.get("/echo/x", "crm");
  }
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("\"reason\":\"gateway_overloaded\""), std::string::npos) << refused.body;
  EXPECT_EQ(refused.header("retry-after"), "1");
  EXPECT_EQ(refused.header("ratelimit"), "");
  EXPECT_EQ(refused.header("ratelimit-policy"), "");
  const testing::HttpResponse admitted = c.get("/echo/x", "crm");
  EXPECT_EQ(admitted.status, 200);
  EXPECT_TRUE(admitted.header("ratelimit").starts_with("\"crm\";r=998;t=")) << admitted.header("ratelimit");
  const std::string m = metrics();
  EXPECT_EQ(metric_sum(m, "sluice_upstream_connect_failures_total{upstream=\"app\""), 0);
  EXPECT_NE(m.find("\nsluice_breaker_state{upstream=\"app\",state=\"closed\"} 1"), std::string::npos);
}

// A connection that arrives with no descriptor left to accept it is said in the log and waits in
// the listen backlog: once descriptors are back, it is accepted and served.
TEST_F(DescriptorsTest, AcceptWithoutDescriptorsIsSaidAndTheConnectionServedLater) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);  // made while descriptors are left
  ASSERT_GE(fd, 0);
  {
    NoDescriptorLeft none;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(gw_->port());
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_TRUE(testing::eventually([&] {
      return log().find("cannot accept connections: Too many open files (1 failed since the last such line") !=
             std::string::npos;
    })) << log();
  }
  const std::string request = "GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string answer;
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  while (::poll(&p, 1, 10'000) == 1) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_EQ(log().find("cannot accept connections", log().find("cannot accept connections") + 1), std::string::npos)
      << "said once, not once per retry: " << log();
}

// A gateway that cannot make its worker threads' event loops fails to start, saying why; it does
// not say it is serving and then end the process from a worker thread.
TEST(DescriptorsStartTest, WorkersWithoutDescriptorsFailTheStartWithTheReason) {
  GatewayOptions o;
  o.listen = "127.0.0.1:0";
  o.admin_listen = "off";
  o.threads = 2;
  o.log = [](std::string_view) {};
  auto config = testing::load_config(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces: [{id: a, path: /a, upstream: app, public: true}]
)");
  ASSERT_NE(config, nullptr);
  Result<std::unique_ptr<Gateway>> g = invalid_argument("not started");
  {
    NoDescriptorLeft none;
    g = Gateway::start(o, config);
  }
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().message,
            "cannot start worker thread 1 of 2: Too many open files (each needs a few file descriptors; raise "
            "ulimit -n or use fewer --threads)");
}

// With a few descriptors more, each start either serves or fails saying why: no step past the
// workers (the listeners, the signal handling, the connections it could serve) ends the process,
// and none says it serves when no connection could be.
TEST(DescriptorsStartTest, EveryStepThatNeedsDescriptorsFailsTheStartWithTheReason) {
  auto config = testing::load_config(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces: [{id: a, path: /a, upstream: app, public: true}]
)");
  ASSERT_NE(config, nullptr);
  std::set<std::string> said;
  bool served = false;
  for (int left = 0; left < 32 && !served; ++left) {
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "127.0.0.1:0";
    o.threads = 1;
    o.access_log = "off";
    o.handle_signals = true;
    o.log = [](std::string_view) {};
    Result<std::unique_ptr<Gateway>> g = invalid_argument("not started");
    {
      NoDescriptorLeft few(left);
      g = Gateway::start(o, config);
    }
    if (g.ok()) {
      served = true;
      HttpClient c((*g)->port());
      EXPECT_EQ(c.get("/_sluice/healthz").status, 200) << "started with " << left << " descriptors";
    } else {
      const std::string& m = g.error().message;
      said.insert(m.substr(0, m.find_first_of(":(")));
    }
  }
  EXPECT_TRUE(served);
  EXPECT_EQ(said, (std::set<std::string>{"cannot start worker thread 1 of 1", "cannot listen on 127.0.0.1",
                                         "cannot handle signals", "too few file descriptors left to serve a connection "}))
      << ::testing::PrintToString(said);
}

}  // namespace
}  // namespace sluice::gateway
