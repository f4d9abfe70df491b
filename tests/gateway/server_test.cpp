// The gateway end to end over real sockets, in front of a real upstream (the demo echo server):
// every check, the headers, proxying, the breaker, /decide, metrics, the access log, hot reload
// under load, bad input written as raw bytes, and drain.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <condition_variable>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "config/yaml.h"
#include "load_config.h"
#include "gateway/access_log.h"
#include "gateway/demo.h"
#include "gateway/gateway.h"
#include "http_client.h"

namespace sluice::gateway {
namespace {

using namespace std::chrono_literals;
using testing::HttpClient;
using testing::HttpResponse;

constexpr Nanos kT0 = std::chrono::seconds(1'699'995'600);

const char* kConfig = R"(
header_timeout: 500ms
max_body_bytes: 4096
upstreams:
  - name: app
    targets: [127.0.0.1:{UP}]
    timeout: 300ms
    breaker: {window: 4, minimum_calls: 4, failure_rate: 50, open_for: 10s, half_open_probes: 1}
  - name: slow
    targets: [127.0.0.1:{UP}]
    timeout: 10s
    breaker: {enabled: false}
  - name: dead
    targets: [127.0.0.1:{DEAD}]
    connect_timeout: 2s
    breaker: {enabled: false}
  - name: spread
    targets: [127.0.0.1:{DEAD}, 127.0.0.1:{UP}]
    breaker: {window: 2, minimum_calls: 2, failure_rate: 50, open_for: 10s}
  - name: spread3
    targets: [127.0.0.1:{DEAD}, 127.0.0.2:{DEAD}, 127.0.0.1:{UP}]
    breaker: {enabled: false}
  - name: closing
    targets: [127.0.0.1:{CLOSING}]
    timeout: 300ms
    breaker: {window: 2, minimum_calls: 2, failure_rate: 50, open_for: 10s}
systems:
  - {key: crm, interfaces: [echo, limited, flaky, dead, slow, burst, closing, spread, spread3]}
  - {key: erp, enabled: false, interfaces: ["*"]}
  - {key: lonely}
interfaces:
  - {id: echo, path: /echo/*, upstream: app}
  - {id: limited, path: /limited, upstream: app, limits: [{algorithm: fixed_window, limit: 2, period: 1m}]}
  - {id: burst, path: /burst, upstream: slow, limits: [{algorithm: fixed_window, limit: 50, period: 1h}]}
  - {id: flaky, path: /flaky, upstream: app}
  - {id: slow, path: /slow, upstream: slow, concurrency: 1}
  - {id: dead, path: /dead, upstream: dead}
  - {id: closing, path: /closing, upstream: closing}
  - {id: spread, path: /spread/*, upstream: spread}
  - {id: spread3, path: /spread3/*, upstream: spread3}
  - {id: off, path: /off, upstream: app, enabled: false}
  - {id: other, path: /other, upstream: app}
  - {id: public, path: /public, upstream: app, public: true}
  - id: per-user
    path: /per-user
    upstream: app
    public: true
    limits: [{algorithm: fixed_window, limit: 1, period: 1m, key_by: "header:X-User"}]
  - id: per-ip
    path: /per-ip
    upstream: app
    public: true
    limits: [{algorithm: fixed_window, limit: 1, period: 1m, key_by: client_ip}]
  - id: per-host
    path: /per-host
    upstream: app
    public: true
    limits: [{algorithm: fixed_window, limit: 1, period: 1m, key_by: "header:Host"}]
)";

std::shared_ptr<const config::Config> parse(const std::string& text) { return testing::load_config(text); }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t i = 0; (i = s.find(from, i)) != std::string::npos; i += to.size()) s.replace(i, from.size(), to);
  return s;
}

boost::json::object json(const std::string& text) {
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) {
    ADD_FAILURE() << "not a JSON object: " << text;
    return {};
  }
  return v.as_object();
}

std::string str(const boost::json::object& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
}

// A socket listening on a free loopback port (its port in *port), or -1.
int listen_on_loopback(int backlog, std::uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "cannot listen";
    if (fd >= 0) ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A client socket connected to a loopback port (set up first by `before`, e.g. a small receive
// window), or -1.
template <class Before>
int connect_to_loopback(std::uint16_t port, Before before) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (fd < 0 || !before(fd) || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ADD_FAILURE() << "cannot connect to port " << port;
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}
int connect_to_loopback(std::uint16_t port) {
  return connect_to_loopback(port, [](int) { return true; });
}

// A new connection to port with bytes sent on it (all of them): its descriptor, or -1.
int connect_and_send(std::uint16_t port, const std::string& bytes) {
  const int fd = connect_to_loopback(port);
  if (fd >= 0 && ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// What fd gives until `marker` has come, or until the connection ends or fails.
std::string read_until(int fd, std::string_view marker) {
  std::string in;
  char buf[4096];
  for (ssize_t n; in.find(marker) == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    in.append(buf, static_cast<std::size_t>(n));
  }
  return in;
}

// An upstream that reads a request (the header and its Content-Length body), sends `response`, and
// then, as `after` says: closes the connection; or shuts down its sending side only, which ends a
// response framed by the connection's end, and counts what the gateway still sends on it (it must
// not, the connection being over); or holds it until the gateway closes it; or (kIdle408) closes
// it, the first once told to by time_out_idle() and as servers that time out an idle connection
// with a 408 do, every later one at once; or (kDropNext) reads the next request and closes without
// an answer, as an upstream that fails while acting on it; or (kEarly) answers once the head is in
// and closes with the body unread, as an upstream refusing an upload does; or (kStray) on the first
// connection, once told to by time_out_idle(), sends a second response nobody asked for and holds
// the connection, as a broken upstream can; or (k408Next) on the first connection, answers the next
// request with a 408 and closes, as a server whose idle timeout crossed that request does. By
// default the response is framed by
// the connection's end (HTTP/1.1 with neither Content-Length nor chunked).
class ClosingUpstream {
 public:
  // kInterim: the response's first head (an interim one) goes at once, the rest on release().
  // kInterim408Next: as k408Next, with a 102 Processing before the 408.
  // kEarlyHold: as kEarly, then reads nothing more, and closes only when destroyed.
  enum class After {
    kClose, kHalfClose, kHold, kIdle408, kDropNext, kEarly, kEarlyHold, kStray, k408Next, kInterim, kInterim408Next
  };
  explicit ClosingUpstream(std::string response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello",
                           After after = After::kHalfClose)
      : ClosingUpstream(std::vector<std::string>{std::move(response)}, after) {}
  // The i-th connection gets responses[i], and the last one every connection after.
  ClosingUpstream(std::vector<std::string> responses, After after) : responses_(std::move(responses)), after_(after) {
    fd_ = listen_on_loopback(16, &port_);
    thread_ = std::thread([this] { serve(); });
  }
  ~ClosingUpstream() {
    {
      std::lock_guard lock(mutex_);
      time_out_ = true;
      changed_.notify_all();
    }
    ::shutdown(fd_, SHUT_RDWR);  // wakes the accept()
    if (const int c = current_.load(); c >= 0) ::shutdown(c, SHUT_RDWR);  // and a recv() on a connection
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }
  int requests() const { return requests_.load(); }  // read whole (kDropNext: and the next, begun)
  // The requests read whole, as they came on the wire (framed by Content-Length or chunked).
  std::vector<std::string> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }
  int closed() const { return closed_.load(); }  // connections it has closed
  int unasked() const { return unasked_.load(); }  // kHalfClose: connections the gateway wrote on after
  // kIdle408: the first connection sends its 408 and closes; kStray: it sends its stray response.
  // True once it has.
  bool time_out_idle() {
    std::unique_lock lock(mutex_);
    time_out_ = true;
    changed_.notify_all();
    return changed_.wait_for(lock, 10s, [&] { return closed_ > 0 || stray_sent_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    time_out_ = true;
    changed_.notify_all();
  }

 private:
  void serve() {
    for (std::size_t i = 0;; ++i) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      current_ = c;
      const std::string& response = responses_[std::min(i, responses_.size() - 1)];
      std::string in;
      std::size_t need = std::string::npos;  // header and body, once the header is in
      bool chunked = false;  // then the body ends with the last chunk (the tests' bodies hold no "0\r\n\r\n")
      char buf[4096];
      while (need == std::string::npos || in.size() < need) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<std::size_t>(n));
        const std::size_t end = in.find("\r\n\r\n");
        if (need == std::string::npos && end != std::string::npos) {
          const std::size_t cl = in.find("Content-Length: ");
          const bool early = after_ == After::kEarly || after_ == After::kEarlyHold;
          chunked = !early && in.find("Transfer-Encoding: chunked") < end;
          need = chunked ? std::string::npos - 1 : end + 4 + (cl < end && !early ? std::stoul(in.substr(cl + 16)) : 0);
        }
        if (chunked && in.ends_with("\r\n0\r\n\r\n")) need = in.size();
      }
      if (need != std::string::npos && in.size() >= need) {
        {
          std::lock_guard lock(mutex_);
          received_.push_back(in);
        }
        ++requests_;
        std::size_t sent = 0;
        if (after_ == After::kInterim) {
          sent = response.find("\r\n\r\n") + 4;
          (void)::send(c, response.data(), sent, MSG_NOSIGNAL);
          std::unique_lock lock(mutex_);
          changed_.wait(lock, [&] { return time_out_; });
        }
        (void)::send(c, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
        if (after_ == After::kHalfClose) ::shutdown(c, SHUT_WR);
        if (after_ == After::kEarlyHold) {
          std::unique_lock lock(mutex_);
          changed_.wait(lock, [&] { return time_out_; });
        }
        if (after_ == After::kIdle408 && closed_ == 0) {
          std::unique_lock lock(mutex_);
          changed_.wait(lock, [&] { return time_out_; });
          static constexpr std::string_view k408 =
              "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
          (void)::send(c, k408.data(), k408.size(), MSG_NOSIGNAL);
          ::close(c);
          ++closed_;
          changed_.notify_all();
          continue;
        }
        if (after_ == After::kStray && i == 0) {
          std::unique_lock lock(mutex_);
          changed_.wait(lock, [&] { return time_out_; });
          static constexpr std::string_view kStray = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED";
          (void)::send(c, kStray.data(), kStray.size(), MSG_NOSIGNAL);
          stray_sent_ = true;
          changed_.notify_all();
        }
        if (after_ == After::kDropNext && ::recv(c, buf, sizeof buf, 0) > 0) ++requests_;
        const bool then_408 = after_ == After::k408Next || after_ == After::kInterim408Next;
        if (then_408 && i == 0 && ::recv(c, buf, sizeof buf, 0) > 0) {
          ++requests_;
          static constexpr std::string_view k102 = "HTTP/1.1 102 Processing\r\n\r\n";
          if (after_ == After::kInterim408Next) (void)::send(c, k102.data(), k102.size(), MSG_NOSIGNAL);
          static constexpr std::string_view k408 =
              "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
          (void)::send(c, k408.data(), k408.size(), MSG_NOSIGNAL);
        }
        const bool hold = after_ == After::kHalfClose || after_ == After::kHold || after_ == After::kStray ||
                          after_ == After::kInterim;
        if (hold && ::recv(c, buf, sizeof buf, 0) > 0) {
          if (after_ == After::kHalfClose) ++unasked_;
          while (::recv(c, buf, sizeof buf, 0) > 0) {
          }
        }
      }
      current_ = -1;
      ::close(c);
      ++closed_;
    }
  }

  const std::vector<std::string> responses_;
  const After after_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<int> requests_{0};
  std::atomic<int> closed_{0};
  std::atomic<int> unasked_{0};
  std::atomic<int> current_{-1};  // the connection being served
  std::mutex mutex_;
  std::condition_variable changed_;
  bool time_out_ = false;  // kIdle408, kStray: time the waiting connection out
  bool stray_sent_ = false;
  std::vector<std::string> received_;
  std::thread thread_;
};

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto up = DemoUpstream::start();
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(*up);
    dir_ = testing::temp_dir();
    log_path_ = dir_ + "/access.log";
    start(config_text());
  }

  // closing_port: the port of a ClosingUpstream, or 0 for none; dead_port: the "dead" upstream's
  // (by default one nothing listens on).
  std::string config_text(const std::string& extra = "", std::uint16_t closing_port = 0,
                          std::uint16_t dead_port = 0) const {
    std::string text = replace_all(kConfig, "{UP}", std::to_string(upstream_->port()));
    text = replace_all(text, "{CLOSING}", std::to_string(closing_port != 0 ? closing_port : testing::free_port()));
    return replace_all(text, "{DEAD}", std::to_string(dead_port != 0 ? dead_port : testing::free_port())) + extra;
  }

  void start(const std::string& text, bool pin_workers = false) {
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "127.0.0.1:0";
    o.threads = 2;
    o.pin_workers = pin_workers;
    o.clock = &clock_;
    o.access_log = log_path_;
    o.log = [](std::string_view) {};
    auto g = Gateway::start(o, parse(text));
    ASSERT_TRUE(g.ok()) << g.error().message;
    gw_ = std::move(*g);
  }

  // A gateway whose "closing" upstream is `up`, in place of the one SetUp started.
  void restart_in_front_of(const ClosingUpstream& up) {
    gw_.reset();
    start(config_text("", up.port()));
  }

  HttpResponse get(const std::string& target, const std::string& key = "crm") {
    HttpClient c(gw_->port());
    return c.get(target, key);
  }

  std::string metrics() {
    HttpClient c(gw_->admin_port());
    return c.get("/metrics").body;
  }

  // The access log's line for the request with this X-Request-Id, once it is written.
  std::string access_log_line(const std::string& request_id) const {
    std::string line;
    EXPECT_TRUE(testing::eventually([&] {
      std::ifstream in(log_path_);
      for (std::string l; std::getline(in, l);) {
        if (l.find("\"" + request_id + "\"") != std::string::npos) line = l;
      }
      return !line.empty();
    })) << "no access log line for " << request_id;
    return line;
  }

  std::string raw(const std::string& bytes, std::chrono::milliseconds wait = 5s) {
    return testing::raw_exchange(gw_->port(), bytes, wait);
  }

  ManualClock clock_{kT0};
  std::unique_ptr<DemoUpstream> upstream_;
  std::unique_ptr<Gateway> gw_;
  std::string dir_;
  std::string log_path_;
};

struct Check {
  std::string path;
  std::string key;
  int status;
  std::string reason;
};

TEST_F(GatewayTest, EveryAccessCheckAnswersWithItsStatusAndReason) {
  const Check checks[] = {
      {"/echo/x", "", 401, "system_key_missing"},   {"/echo/x", "nobody", 401, "system_unknown"},
      {"/echo/x", "erp", 403, "system_disabled"},   {"/echo/x", "lonely", 403, "system_no_permissions"},
      {"/nothing", "crm", 404, "interface_unknown"}, {"/off", "crm", 403, "interface_disabled"},
      {"/other", "crm", 403, "interface_forbidden"},
  };
  HttpClient c(gw_->port());
  for (const Check& check : checks) {
    const HttpResponse r = c.get(check.path, check.key);
    EXPECT_EQ(r.status, check.status) << check.path << " " << check.key;
    const auto body = json(r.body);
    EXPECT_EQ(str(body, "reason"), check.reason);
    EXPECT_EQ(body.at("code").as_int64(), check.status);
    EXPECT_FALSE(str(body, "msg").empty());
    EXPECT_TRUE(r.keep_alive) << "a refusal keeps the connection";
  }
  EXPECT_EQ(upstream_->requests(), 0) << "no refused request reaches the upstream";
}

TEST_F(GatewayTest, ARateLimitedRequestGets429WithRetryAfterAndRateLimitFields) {
  HttpClient c(gw_->port());
  const HttpResponse first = c.get("/limited", "crm");
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.header("ratelimit-policy"), "\"limited\";q=2;w=60");
  EXPECT_EQ(first.header("ratelimit"), "\"limited\";r=1;t=60");
  EXPECT_EQ(c.get("/limited", "crm").status, 200);
  clock_.advance(15s);
  const HttpResponse third = c.get("/limited", "crm");
  EXPECT_EQ(third.status, 429);
  EXPECT_EQ(str(json(third.body), "reason"), "interface_rate_limited");
  EXPECT_EQ(third.header("retry-after"), "45");
  EXPECT_EQ(third.header("ratelimit"), "\"limited\";r=0;t=45");
  EXPECT_EQ(upstream_->requests(), 2);
}

TEST_F(GatewayTest, ProxyingPassesTheRequestThroughAndAddsTheForwardingFields) {
  HttpClient c(gw_->port());
  const HttpResponse r = c.request("POST", "/echo/a/b?x=1&y=2",
                                   {{"X-System-Key", "crm"},
                                    {"X-Forwarded-For", "203.0.113.9"},
                                    {"X-Sluice-System", "forged"},
                                    {"X-Request-Id", "req-42"},
                                    {"Connection", "keep-alive, X-Secret"},
                                    {"X-Secret", "hop"},
                                    {"X-Custom", "kept"}},
                                   "hello body");
  ASSERT_EQ(r.status, 200);
  const auto echo = json(r.body);
  EXPECT_EQ(str(echo, "method"), "POST");
  EXPECT_EQ(str(echo, "path"), "/echo/a/b");
  EXPECT_EQ(str(echo, "query"), "x=1&y=2");
  EXPECT_EQ(str(echo, "body"), "hello body");
  const auto& h = echo.at("headers").as_object();
  EXPECT_EQ(str(h, "X-Forwarded-For"), "203.0.113.9, 127.0.0.1");
  EXPECT_EQ(str(h, "X-Forwarded-Proto"), "http");
  EXPECT_EQ(str(h, "X-Sluice-System"), "crm");
  EXPECT_EQ(str(h, "X-Request-Id"), "req-42");
  EXPECT_EQ(str(h, "X-Custom"), "kept");
  EXPECT_EQ(str(h, "Via"), "1.1 sluice");
  EXPECT_EQ(h.count("X-Secret"), 0u);
  EXPECT_EQ(h.count("Connection"), 0u);
  EXPECT_EQ(r.header("x-request-id"), "req-42");
}

// The header the caller was identified by goes up as it came, even named in Connection: the
// upstream of a system counted as crm is not to see an anonymous caller.
TEST_F(GatewayTest, TheSystemKeyHeaderGoesUpEvenWhenConnectionNamesIt) {
  HttpClient c(gw_->port());
  const HttpResponse r = c.request("GET", "/echo/a", {{"X-System-Key", "crm"}, {"Connection", "x-system-key, X-Secret"},
                                                     {"X-Secret", "hop"}});
  ASSERT_EQ(r.status, 200);
  const auto echo = json(r.body);
  const auto& h = echo.at("headers").as_object();
  EXPECT_EQ(str(h, "X-System-Key"), "crm");
  EXPECT_EQ(str(h, "X-Sluice-System"), "crm");
  EXPECT_EQ(h.count("X-Secret"), 0u);
  // Spelt with '_' (which identifies the caller too), in the field and in Connection.
  const HttpResponse cgi = c.request("GET", "/echo/a", {{"X_System_Key", "crm"}, {"Connection", "X_System_Key"}});
  ASSERT_EQ(cgi.status, 200);
  const auto cgi_echo = json(cgi.body);
  EXPECT_EQ(str(cgi_echo.at("headers").as_object(), "X_System_Key"), "crm");
}

// So does a header a limit is keyed by: a caller who named it in Connection would be counted by a
// value the upstream never sees (which then takes it for a caller without one), in any spelling.
TEST_F(GatewayTest, AHeaderALimitIsKeyedByGoesUpEvenWhenConnectionNamesIt) {
  HttpClient c(gw_->port());
  const HttpResponse r = c.request("GET", "/per-user", {{"X-User", "u1"}, {"Connection", "X-User, x-secret"},
                                                       {"X-Secret", "hop"}});
  ASSERT_EQ(r.status, 200);
  const auto echo = json(r.body);
  const auto& h = echo.at("headers").as_object();
  EXPECT_EQ(str(h, "X-User"), "u1");
  EXPECT_EQ(h.count("X-Secret"), 0u);
  const HttpResponse cgi = c.request("GET", "/per-user", {{"X_User", "u2"}, {"Connection", "x_user"}});
  ASSERT_EQ(cgi.status, 200);
  const auto cgi_echo = json(cgi.body);
  EXPECT_EQ(str(cgi_echo.at("headers").as_object(), "X_User"), "u2");
  EXPECT_EQ(c.request("GET", "/per-user", {{"X-User", "u1"}, {"Connection", "X-User"}}).status, 429);
}

// Fields an upstream framework reads as the request's method or path in place of its request
// line's do not go up from a client: the gateway routed and permitted the request by its request
// line. What a proxy in front says of the client (Forwarded, X-Real-IP) goes on as it came.
TEST_F(GatewayTest, FieldsThatWouldOverrideTheMethodOrPathDoNotGoUp) {
  HttpClient c(gw_->port());
  const HttpResponse r = c.request("POST", "/echo/a",
                                   {{"X-System-Key", "crm"},
                                    {"X-HTTP-Method-Override", "DELETE"},
                                    {"x-http-method", "DELETE"},
                                    {"X_Method_Override", "DELETE"},
                                    {"X-Original-URL", "/admin"},
                                    {"X-Rewrite-URL", "/admin"},
                                    {"Forwarded", "for=192.0.2.1;proto=https"},
                                    {"X-Real-IP", "192.0.2.1"},
                                    {"X-Custom", "kept"}},
                                   "");
  ASSERT_EQ(r.status, 200);
  const auto echo = json(r.body);
  const auto& h = echo.at("headers").as_object();
  for (const char* name : {"X-HTTP-Method-Override", "x-http-method", "X_Method_Override", "X-Original-URL",
                           "X-Rewrite-URL"}) {
    EXPECT_EQ(h.count(name), 0u) << name;
  }
  EXPECT_EQ(str(h, "Forwarded"), "for=192.0.2.1;proto=https");
  EXPECT_EQ(str(h, "X-Real-IP"), "192.0.2.1");
  EXPECT_EQ(str(h, "X-Custom"), "kept");
}

// A client's "Proxy" field does not go up: CGI-style upstreams (PHP, Go's net/http/cgi) give it to
// the application as HTTP_PROXY, which HTTP clients there take as their outgoing proxy (httpoxy,
// CVE-2016-5385). Other Proxy- fields that are not hop-by-hop go on.
TEST_F(GatewayTest, AClientsProxyFieldDoesNotGoUp) {
  HttpClient c(gw_->port());
  const HttpResponse r =
      c.request("GET", "/echo/a", {{"X-System-Key", "crm"}, {"Proxy", "http://evil:3128"}, {"Proxy-Foo", "kept"}}, "");
  ASSERT_EQ(r.status, 200);
  const auto echo = json(r.body);
  const auto& h = echo.at("headers").as_object();
  EXPECT_EQ(h.count("Proxy"), 0u);
  EXPECT_EQ(str(h, "Proxy-Foo"), "kept");
}

// Via lists the intermediaries in order: the client's own entries, then the gateway's, with the
// protocol the request came in.
TEST_F(GatewayTest, ViaGetsTheGatewayAfterWhatTheClientSaid) {
  const std::string out = raw("GET /echo/x HTTP/1.0\r\nHost: a\r\nX-System-Key: crm\r\nVia: 1.1 edge\r\n\r\n");
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const std::string body = out.substr(out.find("\r\n\r\n") + 4);
  const std::size_t client = body.find(R"("Via":"1.1 edge")");
  const std::size_t gateway = body.find(R"("Via":"1.0 sluice")");
  EXPECT_NE(client, std::string::npos) << body;
  EXPECT_NE(gateway, std::string::npos) << body;
  EXPECT_LT(client, gateway) << body;
}

// Several X-Forwarded-For fields (from proxies in front) are one list, the client's address last;
// an empty one adds no empty entry.
TEST_F(GatewayTest, EveryEarlierForwardedForGoesUpInOneField) {
  const std::string out = raw("GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n"
                              "X-Forwarded-For: 203.0.113.9\r\nx-forwarded-for: 198.51.100.7, 10.0.0.1\r\n"
                              "X-Forwarded-For:   \r\n"
                              "Connection: close\r\n\r\n");
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const auto h = json(out.substr(out.find("\r\n\r\n") + 4)).at("headers").as_object();
  EXPECT_EQ(str(h, "X-Forwarded-For"), "203.0.113.9, 198.51.100.7, 10.0.0.1, 127.0.0.1");
}

// The upstream's response reaches the client without its hop-by-hop fields (and those its
// Connection field names), with the gateway's X-Request-Id instead of its own, and framed anew.
TEST_F(GatewayTest, TheUpstreamsHopByHopFieldsAndRequestIdStayBehind) {
  ClosingUpstream upstream("HTTP/1.1 201 Made\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n"
                           "X-Request-Id: upstream-id\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\nok",
                           ClosingUpstream::After::kClose);
  restart_in_front_of(upstream);
  const std::string out = raw("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n"
                              "X-Request-Id: mine\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(out.substr(0, out.find("\r\n")), "HTTP/1.1 201 Made");
  const std::string head = out.substr(0, out.find("\r\n\r\n") + 2);
  EXPECT_NE(head.find("\r\nX-Kept: yes\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("\r\nX-Request-Id: mine\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("upstream-id"), std::string::npos) << head;
  EXPECT_EQ(head.find("X-Hop"), std::string::npos) << head;
  EXPECT_EQ(head.find("Keep-Alive"), std::string::npos) << head;
  EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("\r\nContent-Length: 2\r\n"), std::string::npos) << head;
  EXPECT_EQ(out.substr(out.find("\r\n\r\n") + 4), "ok");
}

// A 204 goes on without the framing fields an upstream wrongly gave it (RFC 9110 8.6), and without
// the body it wrongly sent.
TEST_F(GatewayTest, A204GoesOnWithoutFraming) {
  ClosingUpstream upstream("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-Kept: yes\r\n\r\nHELLO",
                           ClosingUpstream::After::kClose);
  restart_in_front_of(upstream);
  const std::string out = raw("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(testing::raw_status(out), 204) << out;
  const std::string head = out.substr(0, out.find("\r\n\r\n") + 2);
  EXPECT_NE(head.find("\r\nX-Kept: yes\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("Content-Length"), std::string::npos) << head;
  EXPECT_EQ(out.substr(out.find("\r\n\r\n") + 4), "") << out;
}

// A response head the gateway cannot read exactly (here a folded field line) is not passed on.
// So is a transfer coding besides chunked, which no request asks for (none says TE) and which an
// HTTP/1.0 client could not be sent.
TEST_F(GatewayTest, AnUpstreamsMalformedHeadIs502) {
  for (const std::string response : {"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
                                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok",
                                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
                                     "2\r\nok\r\n0\r\n\r\n"}) {
    ClosingUpstream upstream(response, ClosingUpstream::After::kClose);
    restart_in_front_of(upstream);
    const HttpResponse r = get("/closing");
    EXPECT_EQ(r.status, 502) << response;
    EXPECT_EQ(str(json(r.body), "reason"), "upstream_bad_response") << response;
    EXPECT_EQ(upstream.requests(), 1) << response;
  }
}

// Bytes that cannot begin an HTTP response (another protocol's greeting, an error text) are a bad
// response as soon as they come, whether the upstream then closes or waits: not a connection that
// failed (502 upstream_connect_failed, sent again) nor, left waiting, a timeout.
TEST_F(GatewayTest, BytesThatAreNotHttpAreABadResponseAtOnce) {
  for (const auto after : {ClosingUpstream::After::kClose, ClosingUpstream::After::kHold}) {
    for (const std::string response : {"SSH-2.0-OpenSSH_9.2", "hello", "http/1.1 200 OK"}) {
      ClosingUpstream upstream(response, after);
      restart_in_front_of(upstream);
      const HttpResponse r = get("/closing");
      EXPECT_EQ(r.status, 502) << response;
      EXPECT_EQ(str(json(r.body), "reason"), "upstream_bad_response") << response;
      EXPECT_EQ(upstream.requests(), 1) << response;
    }
  }
}

// An answer that breaks before the first piece of its body went on (a malformed or overflowing
// chunk size) is a 502 like a malformed head: nothing of it reached the client, whose request was
// read whole, and whose connection carries on.
TEST_F(GatewayTest, AnUpstreamsMalformedFirstChunkIs502AndTheClientsConnectionCarriesOn) {
  for (const std::string response : {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
                                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\nok\r\n"}) {
    ClosingUpstream upstream(response, ClosingUpstream::After::kClose);
    restart_in_front_of(upstream);
    HttpClient c(gw_->port());
    const HttpResponse r = c.get("/closing", "crm");
    EXPECT_EQ(r.status, 502) << response;
    EXPECT_EQ(str(json(r.body), "reason"), "upstream_bad_response") << response;
    EXPECT_TRUE(r.keep_alive) << response;
    EXPECT_EQ(c.get("/_sluice/healthz", "").status, 200) << response;
    EXPECT_EQ(c.connections(), 1) << response;
  }
}

TEST_F(GatewayTest, AClientsSluiceSystemHeaderNeverReachesTheUpstream) {
  HttpClient c(gw_->port());
  const HttpResponse r = c.request("GET", "/public", {{"X-Sluice-System", "crm"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json(r.body).at("headers").as_object().count("X-Sluice-System"), 0u);
  EXPECT_FALSE(r.header("x-request-id").empty());
}

// A header a limit is keyed by, given twice (also spelt with '_', as a CGI-style upstream reads
// it), is refused: the upstream might read the value the limit did not count.
TEST_F(GatewayTest, AKeyHeaderGivenTwiceIsRefused) {
  const std::string head = "GET /per-user HTTP/1.1\r\nHost: a\r\n";
  EXPECT_EQ(testing::raw_status(raw(head + "X-User: a\r\nConnection: close\r\n\r\n")), 200);
  EXPECT_EQ(testing::raw_status(raw(head + "X-User: a\r\nConnection: close\r\n\r\n")), 429);
  EXPECT_EQ(testing::raw_status(raw(head + "X-User: b\r\nX-User: a\r\nConnection: close\r\n\r\n")), 400);
  EXPECT_EQ(testing::raw_status(raw(head + "X-User: b\r\nX_User: a\r\nConnection: close\r\n\r\n")), 400);
  EXPECT_EQ(testing::raw_status(raw(head + "X-User: b\r\nConnection: close\r\n\r\n")), 200);
  EXPECT_EQ(testing::raw_status(raw(head + "X-User: c\r\nX-Other: a\r\nConnection: close\r\n\r\n")), 200);
}

// A bad_request says what is wrong with the request, in the configured language (it said "The
// request is malformed or ambiguous." whatever it was).
TEST_F(GatewayTest, ABadRequestSaysWhatIsWrong) {
  const auto msg = [&](const std::string& bytes) {
    const std::string r = raw(bytes);
    const std::size_t body = r.find("\r\n\r\n");
    boost::system::error_code ec;
    const auto v = boost::json::parse(body == std::string::npos ? "" : r.substr(body + 4), ec);
    return !ec && v.is_object() ? std::string(v.as_object().at("msg").as_string()) : "unreadable: " + r;
  };
  const std::string end = "Host: a\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(msg("GET /echo/../x HTTP/1.1\r\nX-System-Key: crm\r\n" + end),
            "The path has a . or .. segment (also encoded), or a NUL: write the path it stands for.");
  EXPECT_EQ(msg("GET /limited/ HTTP/1.1\r\nX-System-Key: crm\r\n" + end),
            "Servers that tidy paths read this path as another interface's (an encoded character, //, ; or a "
            "trailing /): write that interface's path as it is.");
  EXPECT_EQ(msg("GET /per-user HTTP/1.1\r\nX-User: a\r\nX-User: b\r\n" + end),
            "A header or query parameter a limit counts by is given more than once, or in a form servers read "
            "differently: give it once, plainly.");
  EXPECT_EQ(msg("GET /echo/x HTTP/1.1\r\nX-System-Key: crm\r\nX_System_Key: crm\r\n" + end),
            "The system key, API key or a signature header is given more than once (or spelt with both - and "
            "_): give it once.");
  // A signature field too, found before a body is read.
  EXPECT_EQ(msg("POST /echo/x HTTP/1.1\r\nX-System-Key: crm\r\nX-Sluice-Nonce: a\r\nX_Sluice_Nonce: b\r\n"
                "Content-Length: 5\r\n" + end + "hello"),
            "The system key, API key or a signature header is given more than once (or spelt with both - and "
            "_): give it once.");
  EXPECT_EQ(msg("GET /echo/x HTTP/1.1\r\nX-System-Key: crm\r\nContent-Length: 1\r\nContent-Length: 2\r\n" + end),
            "The request is malformed or ambiguous.");
  // A target that is no path at all is no path with a dot segment either.
  EXPECT_EQ(msg("OPTIONS * HTTP/1.1\r\nX-System-Key: crm\r\n" + end), "The request is malformed or ambiguous.");
  gw_.reset();
  start(config_text("language: zh-CN\n"));
  EXPECT_EQ(msg("GET /per-user HTTP/1.1\r\nX-User: a\r\nX-User: b\r\n" + end),
            "限流所依据的请求头或查询参数出现了多次，或以不同服务器会读出不同值的形式给出：请只给一次，并按常规写法");
}

// The system key header spelt with '_' is the same field to a CGI-style upstream: next to the key
// header it is a second key (the upstream could read the other caller); alone, it is the key, as
// the upstream reads it (else a public interface would take the caller for nobody, and the caller
// escape its system's limits while the upstream took it for that system).
TEST_F(GatewayTest, TheSystemKeyHeaderSpeltWithUnderscoresIsTheKey) {
  const std::string head = "GET /echo/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n";
  EXPECT_EQ(testing::raw_status(raw(head + "X-System-Key: crm\r\nX_System_Key: erp\r\n\r\n")), 400);
  EXPECT_EQ(testing::raw_status(raw(head + "x_system_key: erp\r\nX-System-Key: crm\r\n\r\n")), 400);
  const std::string alone = raw(head + "X_System_Key: erp\r\n\r\n");
  EXPECT_NE(alone.find("system_disabled"), std::string::npos) << alone;
  EXPECT_EQ(testing::raw_status(raw(head + "X_System_Key: crm\r\n\r\n")), 200);
  EXPECT_EQ(upstream_->requests(), 1);
  // A key header named with '_' meets its '-' spelling the same way.
  gw_.reset();
  start(config_text("system_key_header: sys_key\n"));
  EXPECT_EQ(testing::raw_status(raw(head + "sys_key: crm\r\nSys-Key: erp\r\n\r\n")), 400);
  EXPECT_EQ(testing::raw_status(raw(head + "Sys_Key: crm\r\n\r\n")), 200);
}

// A request target in absolute form goes up with its authority as the Host: a limit keyed by Host
// counts that, not the client's Host field, which the upstream never sees.
TEST_F(GatewayTest, ALimitKeyedByHostCountsTheHostTheUpstreamGets) {
  const auto get = [&](const std::string& target, const std::string& host) {
    return testing::raw_status(raw("GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"));
  };
  EXPECT_EQ(get("http://same.example/per-host", "h1"), 200);
  EXPECT_EQ(get("http://same.example/per-host", "h2"), 429);
  EXPECT_EQ(get("/per-host", "same.example"), 429);
  EXPECT_EQ(get("/per-host", "h1"), 200);
}

// A header a limit is keyed by, spelt with '_', is the value a CGI-style upstream reads for it: it
// is counted, not taken for a request without the header.
TEST_F(GatewayTest, AKeyHeaderSpeltWithUnderscoresIsCounted) {
  const std::string head = "GET /per-user HTTP/1.1\r\nHost: a\r\nConnection: close\r\n";
  EXPECT_EQ(testing::raw_status(raw(head + "X_User: a\r\n\r\n")), 200);
  EXPECT_EQ(testing::raw_status(raw(head + "X-User: a\r\n\r\n")), 429);
  EXPECT_EQ(testing::raw_status(raw(head + "\r\n")), 200) << "no header: a counter of its own";
  HttpClient c(gw_->port());
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, R"({"path":"/per-user","headers":{"X_User":"a"}})").status, 429)
      << "/decide reads it so too";
}

// A CGI-style upstream (PHP, WSGI, Rack) reads X_Sluice_System as X-Sluice-System: the fields the
// gateway sets are not forged that way either. Other names with '_' pass.
TEST_F(GatewayTest, TheFieldsTheGatewaySetsCannotBeForgedWithUnderscores) {
  HttpClient c(gw_->port());
  const HttpResponse r = c.request("GET", "/public",
                                   {{"X_Sluice_System", "crm"},
                                    {"x-sluice_system", "crm"},
                                    {"X_Forwarded_For", "203.0.113.9"},
                                    {"X-Forwarded_Proto", "https"},
                                    {"X_Request_Id", "forged"},
                                    {"X_Custom_Thing", "kept"}});
  ASSERT_EQ(r.status, 200);
  const auto echo = json(r.body);
  const auto& h = echo.at("headers").as_object();
  for (const char* forged : {"X_Sluice_System", "x-sluice_system", "X_Forwarded_For", "X-Forwarded_Proto",
                             "X_Request_Id"}) {
    EXPECT_EQ(h.count(forged), 0u) << forged;
  }
  EXPECT_EQ(str(h, "X_Custom_Thing"), "kept");
  EXPECT_EQ(str(h, "X-Forwarded-For"), "127.0.0.1");
  EXPECT_EQ(str(h, "X-Forwarded-Proto"), "http");
  // X-Api-Key spelt with '_' is the API key, as the upstream would read it: an unknown one here.
  const HttpResponse keyed = c.request("GET", "/public", {{"X_Api_Key", "k"}});
  EXPECT_EQ(keyed.status, 401);
  EXPECT_EQ(str(json(keyed.body), "reason"), "api_key_invalid");
}

// An upstream that switches protocols unasked (the gateway forwards no Upgrade) no longer speaks
// HTTP on that connection: the answer is a 502, and the connection is closed, never pooled for the
// next request.
TEST_F(GatewayTest, ASwitchOfProtocolsNobodyAskedForIs502AndItsConnectionIsNotReused) {
  ClosingUpstream upstream("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
                           ClosingUpstream::After::kHold);
  restart_in_front_of(upstream);
  HttpClient c(gw_->port());
  for (int i = 1; i <= 2; ++i) {
    const HttpResponse r = c.get("/closing", "crm");
    EXPECT_EQ(r.status, 502) << i;
    EXPECT_EQ(str(json(r.body), "reason"), "upstream_bad_response") << i;
    EXPECT_TRUE(testing::eventually([&] { return upstream.closed() == i; })) << i;
  }
  EXPECT_EQ(upstream.requests(), 2);
}

// An interim response (103 Early Hints) reaches an HTTP/1.1 client as the upstream sends it, before
// the final one, without its hop-by-hop and framing fields.
TEST_F(GatewayTest, AnInterimResponseIsPassedOnBeforeTheFinalOne) {
  ClosingUpstream upstream(
      "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\nConnection: X-Hop\r\nX-Hop: 1\r\n"
      "Content-Length: 0\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
      ClosingUpstream::After::kInterim);
  restart_in_front_of(upstream);
  const int fd = connect_to_loopback(gw_->port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string in;
  char buf[4096];
  while (in.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << in;
    in.append(buf, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(in, "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n");
  upstream.release();
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) in.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const std::string final_response = in.substr(in.find("\r\n\r\n") + 4);
  EXPECT_EQ(final_response.substr(0, final_response.find("\r\n")), "HTTP/1.1 200 OK") << in;
  EXPECT_EQ(final_response.substr(final_response.find("\r\n\r\n") + 4), "hello") << in;
}

// An HTTP/1.0 client would take an interim response for the answer: it gets only the final one.
// Nor does a client get the upstream's 100 Continue: the gateway answers Expect itself.
TEST_F(GatewayTest, InterimResponsesAnHttp10ClientOrA100ContinueAreNotPassedOn) {
  ClosingUpstream upstream(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
      ClosingUpstream::After::kClose);
  restart_in_front_of(upstream);
  const std::string old = raw("GET /closing HTTP/1.0\r\nHost: a\r\nX-System-Key: crm\r\n\r\n");
  EXPECT_EQ(old.substr(0, old.find("\r\n")), "HTTP/1.1 200 OK") << old;
  EXPECT_EQ(old.find(" 103 "), std::string::npos) << old;
  const std::string now = raw("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(now.substr(0, now.find("\r\n")), "HTTP/1.1 103 Early Hints") << now;
  EXPECT_EQ(now.find(" 100 "), std::string::npos) << now;
  EXPECT_EQ(now.substr(now.size() - 5), "hello") << now;
}

// "Connection" may name hop-by-hop fields to drop, in any number of Connection fields, but never
// the framing: a body whose Content-Length were dropped would reach the upstream as a second
// request that no check had seen (here with a forged X-Sluice-System).
TEST_F(GatewayTest, ConnectionCannotDropTheFramingSoABodyIsNeverASecondRequest) {
  const std::string inner = "GET /echo/smuggled HTTP/1.1\r\nHost: a\r\nX-Sluice-System: root\r\n\r\n";
  const std::string out = raw("POST /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n"
                              "Connection: close, Content-Length\r\nX-Drop: 1\r\n"
                              "Connection: X-Drop, Host, Transfer-Encoding\r\nX-Kept: 1\r\nContent-Length: " +
                              std::to_string(inner.size()) +
                              "\r\n\r\n" + inner);
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const boost::json::object seen = json(out.substr(out.find("\r\n\r\n") + 4));
  EXPECT_EQ(str(seen, "body"), inner) << "the body went up as a body";
  const auto& h = seen.at("headers").as_object();
  EXPECT_EQ(str(h, "Content-Length"), std::to_string(inner.size()));
  EXPECT_EQ(h.count("X-Drop"), 0u) << "named in the second Connection field, not next to the first";
  EXPECT_EQ(str(h, "X-Kept"), "1");
  EXPECT_EQ(upstream_->requests(), 1);
}

// Each response on a connection, in order: its status and whether its head says the connection
// closes.
std::vector<std::pair<int, bool>> statuses_and_closes(const std::string& out) {
  std::vector<std::pair<int, bool>> found;
  for (std::size_t at = out.find("HTTP/1.1 "); at != std::string::npos; at = out.find("HTTP/1.1 ", at + 1)) {
    const std::string head = out.substr(at, out.find("\r\n\r\n", at) - at);
    found.emplace_back(testing::raw_status(out.substr(at)), head.find("\r\nConnection: close") != std::string::npos);
  }
  return found;
}

// A POST to /per-user (a limit of 1 per X-User) with this body, framed by framing.
std::string post_per_user(const std::string& user, const std::string& framing, const std::string& body) {
  return "POST /per-user HTTP/1.1\r\nHost: a\r\nX-User: " + user + "\r\n" + framing + "\r\n" + body;
}
const std::string kNextGet = "GET /echo/next HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n";

// The gateway's own endpoints answer a request with a body they do not take (healthz's 405 for a
// POST, where it got 200; an unknown path's 404; decide's 405 for a PUT) as a refusal does: a small
// body that came is read and dropped, never taken for the next request, and the connection
// carries on; a larger one closes it, unread.
TEST_F(GatewayTest, TheGatewaysOwnAnswersDropASmallBodyAndKeepTheConnection) {
  gw_.reset();
  start(replace_all(config_text(), "max_body_bytes: 4096", "max_body_bytes: 1048576"));
  const std::string inner = "GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n";
  const std::string framing = " HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(inner.size()) + "\r\n\r\n";
  const std::string out = raw("POST /_sluice/healthz" + framing + inner + "POST /_sluice/nothing" + framing + inner +
                              "PUT /_sluice/v1/decide" + framing + inner + kNextGet);
  EXPECT_EQ(statuses_and_closes(out), (std::vector<std::pair<int, bool>>{{405, false}, {404, false}, {405, false}, {200, true}}))
      << out;
  EXPECT_NE(out.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos) << out;
  EXPECT_EQ(upstream_->requests(), 1) << "only the last GET went up, none of the bodies";
  const std::string big = std::string(64 * 1024 + 1, 'x');
  const std::string closed = raw("POST /_sluice/healthz HTTP/1.1\r\nHost: a\r\nContent-Length: " +
                                 std::to_string(big.size()) + "\r\n\r\n" + big + kNextGet);
  EXPECT_EQ(statuses_and_closes(closed), (std::vector<std::pair<int, bool>>{{405, true}})) << closed.substr(0, 300);
}

// A refused POST whose small body came is answered on a connection that carries on (its body read
// and dropped, as nginx's limit_req does), and the request pipelined after it is served.
TEST_F(GatewayTest, ARefusedPostWithASmallBodyKeepsItsConnection) {
  const std::string post = post_per_user("u1", "Content-Length: 5\r\n", "hello");
  const std::string out = raw(post + post + kNextGet);
  EXPECT_EQ(statuses_and_closes(out), (std::vector<std::pair<int, bool>>{{200, false}, {429, false}, {200, true}}))
      << out;
  EXPECT_EQ(upstream_->requests(), 2);
}

// The same with a chunked body (an extension, a trailer): the parser that frames a proxied body
// frames it, so a request written inside it is never taken for the next one.
TEST_F(GatewayTest, ARefusedPostWithASmallChunkedBodyKeepsItsConnection) {
  const std::string inner = "GET /echo/smuggled HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n";
  char size[16];
  std::snprintf(size, sizeof size, "%zx", inner.size());
  const std::string body = std::string(size) + ";ext=1\r\n" + inner + "\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n";
  const std::string post = post_per_user("u2", "Transfer-Encoding: chunked\r\n", body);
  const std::string out = raw(post + post + kNextGet);
  EXPECT_EQ(statuses_and_closes(out), (std::vector<std::pair<int, bool>>{{200, false}, {429, false}, {200, true}}))
      << out;
  EXPECT_EQ(upstream_->requests(), 2) << "the body's GET never went up on its own";
}

// A refused body is dropped up to 64 KiB on the wire: one of 64 KiB keeps the connection, one a
// byte over it (by its length, or chunks that run past it) is answered with it closed, unread.
TEST_F(GatewayTest, ARefusedBodyOverTheDiscardBoundClosesTheConnection) {
  gw_.reset();
  start(replace_all(config_text(), "max_body_bytes: 4096", "max_body_bytes: 1048576"));
  ASSERT_EQ(testing::raw_status(raw(post_per_user("u3", "Content-Length: 1\r\nConnection: close\r\n", "x"))), 200);
  const std::size_t bound = 64 * 1024;
  const std::string at = raw(post_per_user("u3", "Content-Length: " + std::to_string(bound) + "\r\n",
                                           std::string(bound, 'x')) + kNextGet);
  EXPECT_EQ(statuses_and_closes(at), (std::vector<std::pair<int, bool>>{{429, false}, {200, true}})) << at.substr(0, 400);
  const std::string over = raw(post_per_user("u3", "Content-Length: " + std::to_string(bound + 1) + "\r\n",
                                             std::string(bound + 1, 'x')) + kNextGet);
  EXPECT_EQ(statuses_and_closes(over), (std::vector<std::pair<int, bool>>{{429, true}})) << over.substr(0, 400);
  const std::string chunked =
      raw(post_per_user("u3", "Transfer-Encoding: chunked\r\n", "8000\r\n" + std::string(0x8000, 'x') + "\r\n8000\r\n" +
                                                                   std::string(0x8000, 'x') + "\r\n0\r\n\r\n") +
          kNextGet);
  EXPECT_EQ(statuses_and_closes(chunked), (std::vector<std::pair<int, bool>>{{429, true}})) << chunked.substr(0, 400);
}

// A refused request that expects 100-continue gets no 100 (its client is told not to send the
// body) and its connection closes, the body unread; the same request without the expectation keeps
// its connection.
TEST_F(GatewayTest, ARefusedPostExpecting100ContinueGetsNoneAndCloses) {
  ASSERT_EQ(testing::raw_status(raw(post_per_user("u4", "Content-Length: 1\r\nConnection: close\r\n", "x"))), 200);
  const std::string expecting = raw(post_per_user("u4", "Expect: 100-continue\r\nContent-Length: 5\r\n", ""), 2s);
  EXPECT_EQ(statuses_and_closes(expecting), (std::vector<std::pair<int, bool>>{{429, true}})) << expecting;
  EXPECT_EQ(expecting.find("100 Continue"), std::string::npos) << expecting;
  const std::string plain = raw(post_per_user("u4", "Content-Length: 5\r\n", "hello") + kNextGet);
  EXPECT_EQ(statuses_and_closes(plain), (std::vector<std::pair<int, bool>>{{429, false}, {200, true}})) << plain;
}

// A refused body that does not come whole within header_timeout (500ms here) is not waited for
// longer: the refusal goes out with the connection closed. One sent in two pieces that both come
// keeps it.
TEST_F(GatewayTest, ARefusedBodySlowerThanTheTimeoutClosesTheConnection) {
  ASSERT_EQ(testing::raw_status(raw(post_per_user("u5", "Content-Length: 1\r\nConnection: close\r\n", "x"))), 200);
  testing::RawConnection split(gw_->port());
  ASSERT_TRUE(split.send(post_per_user("u5", "Content-Length: 10\r\n", "hello")));
  ASSERT_TRUE(split.send("world" + kNextGet));
  const std::string out = split.read_until("(until the connection closes)");
  EXPECT_EQ(statuses_and_closes(out), (std::vector<std::pair<int, bool>>{{429, false}, {200, true}})) << out;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string stalled = raw(post_per_user("u5", "Content-Length: 10\r\n", "hello"), 5s);  // and then nothing
  EXPECT_EQ(statuses_and_closes(stalled), (std::vector<std::pair<int, bool>>{{429, true}})) << stalled;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s) << "the refusal was not held past the timeout";
}

// However long header_timeout is, a refused body is waited for a second at most: a client that
// stalls is answered then, with the connection closed, rather than after the minute it is given.
TEST_F(GatewayTest, ARefusedBodyIsWaitedForASecondAtMost) {
  gw_.reset();
  start(replace_all(config_text(), "header_timeout: 500ms", "header_timeout: 60s"));
  ASSERT_EQ(testing::raw_status(raw(post_per_user("u6", "Content-Length: 1\r\nConnection: close\r\n", "x"))), 200);
  const std::string stalled = raw(post_per_user("u6", "Content-Length: 10\r\n", "hello"), 10s);  // and then nothing
  EXPECT_EQ(statuses_and_closes(stalled), (std::vector<std::pair<int, bool>>{{429, true}})) << stalled;
}

// A request that is not proxied (healthz here) counts under no system: nothing of the previous
// request on the same connection carries over.
TEST_F(GatewayTest, ARequestOnAKeptAliveConnectionStartsWithAFreshContext) {
  HttpClient c(gw_->port());
  ASSERT_EQ(c.get("/echo/x", "crm").status, 200);
  ASSERT_EQ(c.get("/_sluice/healthz").status, 200);
  ASSERT_EQ(c.get("/nowhere/../x").status, 400);
  ASSERT_EQ(c.connections(), 1);  // all three on one connection
  const std::string m = metrics();
  EXPECT_NE(m.find(R"(sluice_requests_total{system="crm",interface="echo",reason="ok",status="200"} 1)"),
            std::string::npos) << m;
  EXPECT_NE(m.find(R"(sluice_requests_total{system="",interface="",reason="ok",status="200"} 1)"),
            std::string::npos) << m;
}

// A response that ends with the connection leaves nothing to reuse: the gateway never writes the
// next request on it (a request with a body could not be sent again).
TEST_F(GatewayTest, AConnectionTheUpstreamEndedIsNotPooled) {
  ClosingUpstream closing;
  restart_in_front_of(closing);
  HttpClient c(gw_->port());
  for (int i = 0; i < 3; ++i) {
    const HttpResponse r = c.get("/closing", "crm");
    EXPECT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body, "hello") << i;
    ASSERT_TRUE(testing::eventually([&] { return closing.closed() == i + 1; }));
  }
  EXPECT_EQ(closing.requests(), 3);
  EXPECT_EQ(closing.unasked(), 0);
}

// A good status followed by a body that never comes: the head went on as it came, the body is cut
// short when the read times out (the connection closes), and the breaker counts it as the failure it
// is.
TEST_F(GatewayTest, AnUpstreamThatStallsAfterItsHeaderTimesOutAndCountsAsAFailure) {
  ClosingUpstream stalling("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", ClosingUpstream::After::kHold);
  restart_in_front_of(stalling);
  for (int i = 0; i < 2; ++i) {
    const std::string id = "stalled-" + std::to_string(i);
    const std::string out = raw("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: " + id + "\r\n\r\n");
    EXPECT_EQ(testing::raw_status(out), 200) << out;
    EXPECT_TRUE(out.ends_with("\r\n\r\n")) << "no byte of the body, then the end: " << out;
    const auto logged = json(access_log_line(id));
    EXPECT_EQ(str(logged, "reason"), "upstream_timeout");
  }
  HttpClient c(gw_->port());
  const HttpResponse open = c.get("/closing", "crm");
  EXPECT_EQ(open.status, 503) << "two failures in a window of two open the breaker";
  EXPECT_EQ(stalling.requests(), 2);
}

// What the upstream has sent reaches the client before the rest comes (a stream of events, say):
// here the header and part of the body, then the upstream stalls until the gateway gives up, or
// closes. The client gets what came, then a closed connection, and the log says why the body is
// short.
TEST_F(GatewayTest, APartOfTheBodyIsPassedOnWithoutWaitingForTheRest) {
  struct Case {
    const char* response;
    ClosingUpstream::After after;
    const char* body;
    const char* reason;
  };
  const Case cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel", ClosingUpstream::After::kHold, "hel", "upstream_timeout"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n123456789", ClosingUpstream::After::kClose, "123456789",
       "upstream_connect_failed"},
  };
  for (const Case& c : cases) {
    ClosingUpstream upstream(c.response, c.after);
    restart_in_front_of(upstream);
    const std::string out =
        raw(std::string("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: ") + c.reason +
                "\r\n\r\n",
            5s);
    EXPECT_EQ(testing::raw_status(out), 200) << out;
    EXPECT_EQ(out.substr(out.find("\r\n\r\n") + 4), c.body) << "then cut off, as the upstream was";
    const auto logged = json(access_log_line(c.reason));
    EXPECT_EQ(logged.at("status").as_int64(), 200);
    EXPECT_EQ(str(logged, "reason"), c.reason);
  }
}

// An upstream that closes idle connections sooner than the gateway: a request with a body (which
// cannot be sent twice) is not sent on a pooled connection the upstream has closed.
TEST_F(GatewayTest, ARequestWithABodyTakesNoPooledConnectionTheUpstreamClosed) {
  ClosingUpstream closing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kClose);
  restart_in_front_of(closing);
  HttpClient c(gw_->port());
  for (int i = 0; i < 3; ++i) {
    const HttpResponse r = c.request("POST", "/closing", {{"X-System-Key", "crm"}}, "payload");
    EXPECT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body, "hello") << i;
    ASSERT_TRUE(testing::eventually([&] { return closing.closed() == i + 1; }));
  }
  EXPECT_EQ(closing.requests(), 3);
}

// The same upstream for requests without a body: a pooled connection it closed fails before any
// answer, and the request is sent again on a fresh connection.
TEST_F(GatewayTest, ARequestWithoutABodyIsSentAgainWhenItsPooledConnectionWasClosed) {
  ClosingUpstream closing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kClose);
  restart_in_front_of(closing);
  HttpClient c(gw_->port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(testing::eventually([&] { return closing.closed() == i; }));
    const HttpResponse r = c.get("/closing", "crm");
    EXPECT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body, "hello") << i;
  }
  EXPECT_EQ(closing.requests(), 3);
}

// An upstream that takes a request on a pooled connection and closes it without an answer may have
// acted on it: an idempotent request is sent again, a POST is not (it could place an order twice).
TEST_F(GatewayTest, OnlyAnIdempotentRequestIsSentAgainAfterTheUpstreamTookIt) {
  ClosingUpstream dropping("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kDropNext);
  restart_in_front_of(dropping);
  HttpClient c(gw_->port());
  EXPECT_EQ(c.request("POST", "/closing", {{"X-System-Key", "crm"}}, "").status, 200);
  const HttpResponse post = c.request("POST", "/closing", {{"X-System-Key", "crm"}}, "");
  EXPECT_EQ(post.status, 502);
  EXPECT_EQ(str(json(post.body), "reason"), "upstream_connect_failed");
  EXPECT_EQ(dropping.requests(), 2) << "the POST went up once";
}

TEST_F(GatewayTest, AnIdempotentRequestIsSentAgainAfterTheUpstreamTookItAndClosed) {
  ClosingUpstream dropping("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kDropNext);
  restart_in_front_of(dropping);
  HttpClient c(gw_->port());
  EXPECT_EQ(c.get("/closing", "crm").status, 200);
  const HttpResponse del = c.request("DELETE", "/closing", {{"X-System-Key", "crm"}}, "");
  EXPECT_EQ(del.status, 200);
  EXPECT_EQ(del.body, "hello");
  EXPECT_EQ(dropping.requests(), 3) << "dropped once, then answered on a fresh connection";
}

// Some servers answer the idle connection they close with a 408. On a pooled connection that 408
// answers no request of the gateway's: the request goes again on a fresh connection.
TEST_F(GatewayTest, AnIdleConnections408IsNoAnswerAndTheRequestIsSentAgain) {
  ClosingUpstream idle("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kIdle408);
  restart_in_front_of(idle);
  HttpClient c(gw_->port());
  const HttpResponse first = c.get("/closing", "crm");
  EXPECT_EQ(first.status, 200);
  ASSERT_TRUE(idle.time_out_idle());  // the connection the gateway pooled: 408, then closed
  const HttpResponse second = c.get("/closing", "crm");
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, "hello");
  EXPECT_EQ(idle.requests(), 2);
  EXPECT_TRUE(testing::eventually([&] { return idle.closed() == 2; }));
}

// Bytes an upstream sends on a pooled connection while it is idle answer no request: the connection
// is not used again (a GET sent on it took them for its answer, and every later request on it the
// answer of the one before).
TEST_F(GatewayTest, APooledConnectionThatSentSomethingUnaskedIsNotUsedAgain) {
  ClosingUpstream stray("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kStray);
  restart_in_front_of(stray);
  HttpClient c(gw_->port());
  EXPECT_EQ(c.get("/closing", "crm").body, "hello");
  ASSERT_TRUE(stray.time_out_idle());
  const HttpResponse r = c.get("/closing", "crm");  // on a fresh connection
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  EXPECT_EQ(stray.requests(), 2);
}

// A 408 that crosses a request on a pooled connection says the upstream did not act on it: a POST
// that can be written again goes again too, on a fresh connection.
TEST_F(GatewayTest, A408OnAPooledConnectionSendsAPostAgain) {
  ClosingUpstream up("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::k408Next);
  restart_in_front_of(up);
  HttpClient c(gw_->port());
  EXPECT_EQ(c.request("POST", "/closing", {{"X-System-Key", "crm"}}).body, "hello");
  const HttpResponse second = c.request("POST", "/closing", {{"X-System-Key", "crm"}});
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, "hello");
  EXPECT_EQ(up.requests(), 3);
}

// A 408 after an interim response is the upstream's answer to the request it had taken: it reaches
// the client, and the request is not sent again.
TEST_F(GatewayTest, A408AfterAnInterimResponseIsTheAnswerAndNothingGoesAgain) {
  ClosingUpstream up("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kInterim408Next);
  restart_in_front_of(up);
  HttpClient c(gw_->port());
  EXPECT_EQ(c.request("POST", "/closing", {{"X-System-Key", "crm"}}).body, "hello");
  EXPECT_EQ(c.request("POST", "/closing", {{"X-System-Key", "crm"}}).status, 408);
  EXPECT_EQ(up.requests(), 2);
}

// The value of a metric line that starts with `name` (-1 when there is none).
long metric(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stol(text.substr(at + name.size() + 2));
}

// The sum of the metric lines that start with `prefix` (a name and some of its labels).
long metric_sum(const std::string& text, const std::string& prefix) {
  long sum = 0;
  for (std::size_t at = 0; (at = text.find("\n" + prefix, at)) != std::string::npos; ++at) {
    sum += std::stol(text.substr(text.find("} ", at) + 2));
  }
  return sum;
}

// A target named by a host name is looked up once per 30 s (then in the background), not for each
// connection; a name that does not resolve fails the request as a connect failure would, and is
// counted.
TEST_F(GatewayTest, UpstreamHostNamesResolveOnceInAWhileNotPerConnection) {
  ClosingUpstream closing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ClosingUpstream::After::kClose);
  gw_.reset();
  std::string text = replace_all(config_text("", closing.port()), "127.0.0.1:" + std::to_string(closing.port()),
                                 "localhost:" + std::to_string(closing.port()));
  // A label over 63 bytes: getaddrinfo refuses it without asking a DNS server.
  const std::string unresolvable = std::string(64, 'a') + ".invalid";
  start(replace_all(text, "  - name: dead\n    targets: [127.0.0.1:", "  - name: dead\n    targets: [" + unresolvable + ":"));
  const std::string ok = "sluice_upstream_resolutions_total{result=\"ok\"}";
  HttpClient c(gw_->port());  // one connection: one worker, whose resolutions these are
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.get("/closing", "crm").status, 200) << i;
    ASSERT_TRUE(testing::eventually([&] { return closing.closed() == i + 1; }));
  }
  EXPECT_EQ(closing.requests(), 3) << "three connections";
  EXPECT_EQ(metric(metrics(), ok), 1);
  clock_.advance(31s);
  EXPECT_EQ(c.get("/closing", "crm").status, 200);  // on the last addresses, while they are looked up
  EXPECT_TRUE(testing::eventually([&] { return metric(metrics(), ok) == 2; })) << "looked up again once 30 s passed";
  EXPECT_EQ(c.get("/closing", "crm").status, 200);
  EXPECT_EQ(metric(metrics(), ok), 2);

  const std::string failed = "sluice_upstream_resolutions_total{result=\"failed\"}";
  const HttpResponse dead = c.get("/dead", "crm");
  EXPECT_EQ(dead.status, 502);
  EXPECT_EQ(str(json(dead.body), "reason"), "upstream_connect_failed");
  EXPECT_EQ(metric(metrics(), failed), 1);
  EXPECT_EQ(c.get("/dead", "crm").status, 502);
  EXPECT_EQ(metric(metrics(), failed), 1) << "a name that just failed is not looked up again at once";
  clock_.advance(1s);
  EXPECT_EQ(c.get("/dead", "crm").status, 502);
  EXPECT_EQ(metric(metrics(), failed), 2) << "but a second later";
}

TEST_F(GatewayTest, UpstreamConnectionsAreReused) {
  HttpClient c(gw_->port());
  for (int i = 0; i < 20; ++i) ASSERT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(upstream_->requests(), 20);
  EXPECT_LE(upstream_->connections(), 2);  // one per worker thread at most
}

TEST_F(GatewayTest, BodiesStreamBothWays) {
  const std::string chunked =
      "POST /echo/up HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n";
  const std::string out = raw(chunked);
  EXPECT_EQ(testing::raw_status(out), 200);
  EXPECT_NE(out.find("\"body\":\"hello world\""), std::string::npos) << out;

  HttpClient c(gw_->port());
  const HttpResponse big = c.get("/echo/big?bytes=300000", "crm");
  EXPECT_EQ(big.status, 200);
  EXPECT_EQ(big.body.size(), 300000u);
}

// A chunked message (its head, then its body): `bytes` in all, in chunks larger than 512 bytes and
// at most 16 KiB, mostly larger than 1 KiB.
void expect_relayed_in_pieces_of_up_to_16KiB(const std::string& message, std::size_t bytes) {
  const std::size_t head_end = message.find("\r\n\r\n");
  ASSERT_NE(message.substr(0, head_end).find("Transfer-Encoding: chunked"), std::string::npos) << message.substr(0, 300);
  std::size_t total = 0, largest = 0, chunks = 0;
  for (std::size_t i = head_end + 4;;) {
    const std::size_t eol = message.find("\r\n", i);
    ASSERT_NE(eol, std::string::npos);
    const std::size_t n = std::stoul(message.substr(i, eol - i), nullptr, 16);
    if (n == 0) break;
    total += n;
    largest = std::max(largest, n);
    ++chunks;
    i = eol + 2 + n + 2;
  }
  EXPECT_EQ(total, bytes);
  EXPECT_GT(largest, 512u) << "over " << chunks << " chunks";
  EXPECT_LE(largest, 16u * 1024);
  EXPECT_LT(chunks, bytes / 1024) << "most pieces are small";
}

// A body is relayed in pieces of what one read brought, up to 16 KiB: a close-delimited response
// of 300 KB, all there to read, reaches an HTTP/1.1 client re-chunked in pieces larger than the
// 512 bytes a read was once held to (which took a read and a write per 512 bytes).
TEST_F(GatewayTest, ABodyIsRelayedInPiecesOfUpTo16KiBNot512Bytes) {
  constexpr std::size_t kBytes = 300000;
  ClosingUpstream up("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + std::string(kBytes, 'x'));
  restart_in_front_of(up);
  const int fd = connect_and_send(gw_->port(), "GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n"
                                               "Connection: close\r\n\r\n");
  ASSERT_GE(fd, 0);
  const std::string out = read_until(fd, "\r\n0\r\n\r\n");
  ::close(fd);
  ASSERT_EQ(testing::raw_status(out), 200) << out.substr(0, 200);
  expect_relayed_in_pieces_of_up_to_16KiB(out, kBytes);
}

// The same for an upload: seven chunks of 64 KiB, all sent at once, reach the upstream in pieces of
// what one read brought, up to 16 KiB.
TEST_F(GatewayTest, AnUploadIsRelayedInPiecesOfUpTo16KiBNot512Bytes) {
  constexpr std::size_t kChunk = 64 * 1024, kChunks = 7;
  ClosingUpstream up("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", ClosingUpstream::After::kClose);
  gw_.reset();
  start(replace_all(config_text("", up.port()), "max_body_bytes: 4096", "max_body_bytes: 1048576"));
  char size[16];
  std::snprintf(size, sizeof size, "%zx", kChunk);
  std::string request = "POST /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nTransfer-Encoding: chunked\r\n"
                        "Connection: close\r\n\r\n";
  for (std::size_t i = 0; i < kChunks; ++i) request += std::string(size) + "\r\n" + std::string(kChunk, 'x') + "\r\n";
  request += "0\r\n\r\n";
  ASSERT_EQ(testing::raw_status(raw(request)), 200);
  const std::vector<std::string> received = up.received();
  ASSERT_EQ(received.size(), 1u);
  expect_relayed_in_pieces_of_up_to_16KiB(received[0], kChunk * kChunks);
}

// An upstream's repeated Content-Length of one value reaches the client as one field (RFC 9110
// 8.6), as a request's goes up: a client that refuses repeats, or reads the last, is not misled.
TEST_F(GatewayTest, RepeatedContentLengthsOfOneValueReachTheClientAsOne) {
  ClosingUpstream up("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\ncontent-length: 5\r\n\r\nhello");
  restart_in_front_of(up);
  const std::string out = raw("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const std::size_t head_end = out.find("\r\n\r\n");
  std::string head = out.substr(0, head_end + 2);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  std::size_t fields = 0;
  for (std::size_t at = 0; (at = head.find("\r\ncontent-length:", at)) != std::string::npos; ++at) ++fields;
  EXPECT_EQ(fields, 1u) << out;
  EXPECT_NE(head.find("\r\ncontent-length: 5\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.substr(head_end + 4), "hello");
}

// A client with a small receive window takes a large body a little at a time, so the gateway waits
// on it between pieces: every byte arrives, once.
TEST_F(GatewayTest, ALargeBodyToAClientWithASmallWindowArrivesWhole) {
  const int fd = connect_to_loopback(gw_->port(), [](int s) {
    const int small = 4096;
    return ::setsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0;
  });
  ASSERT_GE(fd, 0);
  constexpr std::size_t kBytes = 4 << 20;
  const std::string request = "GET /echo/big?bytes=" + std::to_string(kBytes) +
                              " HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  ASSERT_EQ(testing::raw_status(out), 200) << out.substr(0, 200);
  const std::string body = out.substr(out.find("\r\n\r\n") + 4);
  EXPECT_EQ(body.size(), kBytes);
  EXPECT_EQ(body.find_first_not_of('x'), std::string::npos);
}

// A timeout as long as a duration can be (meant as "never") does not wrap around into the past.
TEST_F(GatewayTest, ATimeoutAsLongAsADurationCanBeNeverFires) {
  ASSERT_TRUE(gw_->reload(parse(replace_all(config_text(), "timeout: 300ms", "timeout: 106751d"))).ok());
  HttpClient c(gw_->port());
  EXPECT_EQ(c.get("/echo/x?delay_ms=50", "crm").status, 200);
}

TEST_F(GatewayTest, TheBreakerOpensOnUpstreamFailuresAndClosesAfterRecovery) {
  HttpClient c(gw_->port());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.get("/flaky?status=500", "crm").status, 500);
  const HttpResponse open = c.get("/echo/x", "crm");
  EXPECT_EQ(open.status, 503);
  EXPECT_EQ(str(json(open.body), "reason"), "upstream_unavailable");
  EXPECT_EQ(open.header("retry-after"), "10");
  EXPECT_EQ(upstream_->requests(), 4) << "an open breaker answers at once";
  EXPECT_NE(metrics().find("sluice_breaker_state{upstream=\"app\",state=\"open\"} 1"), std::string::npos);

  clock_.advance(10s);
  EXPECT_EQ(c.get("/echo/probe", "crm").status, 200);  // the half-open probe succeeds
  EXPECT_EQ(c.get("/echo/x", "crm").status, 200);
  EXPECT_EQ(c.get("/echo/y", "crm").status, 200);
  const std::string m = metrics();
  EXPECT_NE(m.find("sluice_breaker_state{upstream=\"app\",state=\"closed\"} 1"), std::string::npos);
  EXPECT_NE(m.find("sluice_breaker_transitions_total{upstream=\"app\",state=\"half_open\"} 1"), std::string::npos);
}

// A scrape once the open period is over, with no request since, says what the next request would
// find: half-open, its probe let through. The scrape changes nothing: the request makes the
// transition (and it is counted then).
TEST_F(GatewayTest, AScrapeAfterTheOpenPeriodSaysHalfOpenWithoutARequest) {
  HttpClient c(gw_->port());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.get("/flaky?status=500", "crm").status, 500);
  const std::string state = "sluice_breaker_state{upstream=\"app\",state=";
  const std::string half_opened = "sluice_breaker_transitions_total{upstream=\"app\",state=\"half_open\"}";
  clock_.advance(9s);
  std::string m = metrics();
  EXPECT_NE(m.find(state + "\"open\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find(state + "\"half_open\"} 0"), std::string::npos) << m;

  clock_.advance(1s);
  m = metrics();
  EXPECT_NE(m.find(state + "\"open\"} 0"), std::string::npos) << m;
  EXPECT_NE(m.find(state + "\"half_open\"} 1"), std::string::npos) << m;
  EXPECT_EQ(m.find(half_opened), std::string::npos) << m;
  EXPECT_EQ(upstream_->requests(), 4);

  EXPECT_EQ(c.get("/echo/probe", "crm").status, 200);  // the probe, which closes it
  m = metrics();
  EXPECT_NE(m.find(state + "\"closed\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find(half_opened + " 1"), std::string::npos) << m;
}

// A half-open breaker judges its probe once the first piece of the body is in: a stream that goes
// on for long closes the breaker when it starts, rather than holding the only probe until it ends.
TEST_F(GatewayTest, AHalfOpenBreakerJudgesAStreamingProbeByItsFirstPiece) {
  const std::string failure = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  ClosingUpstream up({failure, failure, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel"},
                     ClosingUpstream::After::kHold);
  restart_in_front_of(up);
  HttpClient c(gw_->port());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(c.get("/closing", "crm").status, 500) << i;
  EXPECT_NE(metrics().find("sluice_breaker_state{upstream=\"closing\",state=\"open\"} 1"), std::string::npos);
  clock_.advance(10s);

  const int probe = connect_and_send(gw_->port(), "GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n");
  ASSERT_GE(probe, 0);
  const std::string in = read_until(probe, "\r\n\r\nhel");
  ASSERT_NE(in.find("\r\n\r\nhel"), std::string::npos) << in;
  // The stream is still going (7 bytes to come): the breaker has closed already.
  const std::string m = metrics();
  EXPECT_NE(m.find("sluice_breaker_state{upstream=\"closing\",state=\"closed\"} 1"), std::string::npos) << m;
  ::close(probe);
}

// An upstream that answers its head and is slow with the body (a stream of events before its
// first event, a long poll): the client gets the head as it comes, not a 504 once the read that
// waits for the first piece times out.
TEST_F(GatewayTest, AResponseHeadGoesOnBeforeItsBodyComes) {
  ClosingUpstream up("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 10\r\n\r\n",
                     ClosingUpstream::After::kHold);
  restart_in_front_of(up);
  const int fd = connect_and_send(gw_->port(), "GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n");
  ASSERT_GE(fd, 0);
  const std::string in = read_until(fd, "\r\n\r\n");
  EXPECT_TRUE(in.starts_with("HTTP/1.1 200")) << in;
  EXPECT_NE(in.find("text/event-stream"), std::string::npos) << in;
  ::close(fd);
}

// A target that cannot be connected to has taken nothing: the request goes to the next, and the
// one that failed rests for 5 s (the breaker, judging the upstream, sees no failure).
TEST_F(GatewayTest, ARequestGoesToTheNextTargetWhenOneCannotBeConnectedTo) {
  HttpClient c(gw_->port());  // one connection: one worker, whose targets these are
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.get("/spread/x", "crm").status, 200) << i;
  const std::string dead = "sluice_upstream_connect_failures_total{upstream=\"spread\",target=\"127.0.0.1:";
  auto failures = [&] { return metric_sum(metrics(), dead); };
  EXPECT_EQ(failures(), 1) << "tried once, then left to rest";
  EXPECT_EQ(upstream_->requests(), 6);
  EXPECT_NE(metrics().find("sluice_breaker_state{upstream=\"spread\",state=\"closed\"} 1"), std::string::npos);
  clock_.advance(5s);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(c.get("/spread/x", "crm").status, 200) << i;
  EXPECT_EQ(failures(), 2) << "tried again once its rest was over";
}

// With two of three targets down, a request tries each at most once and reaches the third; the
// two then rest, and later requests go straight to the third until their rest is over.
TEST_F(GatewayTest, EachTargetIsTriedAtMostOnceAndTheFailedOnesRest) {
  HttpClient c(gw_->port());
  auto failures = [&] { return metric_sum(metrics(), "sluice_upstream_connect_failures_total{upstream=\"spread3\""); };
  EXPECT_EQ(c.get("/spread3/x", "crm").status, 200);
  EXPECT_EQ(failures(), 2) << "both down targets tried once, then the third";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.get("/spread3/x", "crm").status, 200) << i;
  EXPECT_EQ(failures(), 2) << "resting targets are passed over";
  EXPECT_EQ(upstream_->requests(), 5);
  clock_.advance(5s);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.get("/spread3/x", "crm").status, 200) << i;
  EXPECT_EQ(failures(), 4) << "each tried once more when its rest was over";
}

TEST_F(GatewayTest, AnUnreachableUpstreamIs502AndASlowOneIs504) {
  HttpClient c(gw_->port());
  const HttpResponse dead = c.get("/dead", "crm");
  EXPECT_EQ(dead.status, 502);
  EXPECT_EQ(str(json(dead.body), "reason"), "upstream_connect_failed");
  EXPECT_TRUE(dead.keep_alive) << "a request read whole leaves its connection open";
  // Never before the interface's timeout (300ms), which the coarse clock the deadlines read could
  // cut short by a tick.
  for (int i = 0; i < 3; ++i) {
    const auto started = std::chrono::steady_clock::now();
    const HttpResponse slow = c.get("/echo/x?delay_ms=2000", "crm");
    EXPECT_GE(std::chrono::steady_clock::now() - started, 300ms) << i;
    EXPECT_EQ(slow.status, 504);
    EXPECT_EQ(str(json(slow.body), "reason"), "upstream_timeout");
    EXPECT_TRUE(slow.keep_alive);
  }
}

// A body the upstream never took is still on the client's connection: it closes.
TEST_F(GatewayTest, AnUnreachableUpstreamClosesAConnectionWithABodyUnread) {
  const std::string reply = raw(
      "POST /dead HTTP/1.1\r\nHost: x\r\nX-System-Key: crm\r\nContent-Length: 5\r\n\r\nhello"
      "GET /echo/x HTTP/1.1\r\nHost: x\r\nX-System-Key: crm\r\n\r\n");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 502")) << reply;
  EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
  EXPECT_EQ(reply.find("HTTP/1.1 200"), std::string::npos) << "the body was not taken for a request";
}

// A listener whose accept queue is full (backlog 0, one connection in it, none accepted): the
// kernel drops further SYNs, so a connect to it neither succeeds nor fails until it gives up.
class FullListener {
 public:
  FullListener() {
    fd_ = listen_on_loopback(0, &port_);
    filler_ = connect_to_loopback(port_);
  }
  ~FullListener() {
    ::close(filler_);
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  int filler_ = -1;
  std::uint16_t port_ = 0;
};

TEST_F(GatewayTest, AConnectThatHangsIs504OnceTheConnectTimeoutPasses) {
  const FullListener hanging;
  gw_.reset();
  start(replace_all(config_text("", 0, hanging.port()), "connect_timeout: 2s", "connect_timeout: 200ms"));
  HttpClient c(gw_->port());
  const HttpResponse r = c.get("/dead", "crm");
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(str(json(r.body), "reason"), "upstream_timeout");
  EXPECT_TRUE(r.keep_alive) << "the client's connection is not at fault";
  EXPECT_EQ(c.get("/echo/next", "crm").status, 200) << "and serves its next request";
}

// A client that leaves while the gateway is still connecting to a target that hangs is not kept
// for the connect timeout (2s here): its place goes at once, and the target is not blamed.
TEST_F(GatewayTest, AClientThatLeavesWhileTheConnectHangsIsNotWaitedFor) {
  const FullListener hanging;
  gw_.reset();
  start(config_text("", 0, hanging.port()));
  const std::string request = "GET /dead HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: left-connecting\r\n\r\n";
  const int fd = connect_and_send(gw_->port(), request);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  ::close(fd);
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 0; }, 1500ms));
  const auto logged = json(access_log_line("left-connecting"));
  EXPECT_EQ(logged.at("status").as_int64(), 499);
  EXPECT_EQ(str(logged, "reason"), "client_closed_request");
  EXPECT_EQ(metrics().find("sluice_upstream_connect_failures_total{upstream=\"dead\""), std::string::npos) << metrics();
}

// The upstream's timeout runs from the end of the request: an upload that pauses longer than it
// (a slow client, within its own header_timeout per read) is answered when the upstream answers.
// The pause is real time: deadlines run on the monotonic clock.
TEST_F(GatewayTest, ASlowUploadGivesTheUpstreamItsWholeTimeout) {
  gw_.reset();
  start(replace_all(config_text(), "header_timeout: 500ms", "header_timeout: 5s"));  // "echo": timeout 300ms
  const int fd = connect_to_loopback(gw_->port());
  ASSERT_GE(fd, 0);
  const std::string first = "POST /echo/up?delay_ms=50 HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nContent-Length: 10\r\n"
                            "X-Request-Id: slow-upload\r\nConnection: close\r\n\r\nhello";
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL), static_cast<ssize_t>(first.size()));
  std::this_thread::sleep_for(800ms);
  ASSERT_EQ(::send(fd, "world", 5, MSG_NOSIGNAL), 5);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  EXPECT_EQ(testing::raw_status(out), 200) << out;
  EXPECT_NE(out.find("\"body\":\"helloworld\""), std::string::npos) << out;
  // The upload's 800 ms are the client's: the upstream's latency (and the breaker's slow-call
  // judgement) counts from the end of the request.
  const auto logged = json(access_log_line("slow-upload"));
  EXPECT_GE(logged.at("latency_ms").as_double(), 800.0);
  EXPECT_LT(logged.at("upstream_latency_ms").as_double(), 700.0);
}

TEST_F(GatewayTest, TheInFlightLimitRefusesWhileARequestIsInProgress) {
  std::atomic<int> slow_status{0};
  std::thread slow([&] {
    HttpClient c(gw_->port());
    slow_status = c.get("/slow?delay_ms=1500", "crm").status;
  });
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  const HttpResponse refused = get("/slow", "crm");
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(str(json(refused.body), "reason"), "interface_concurrency_limited");
  EXPECT_EQ(refused.header("retry-after"), "1");
  slow.join();
  EXPECT_EQ(slow_status.load(), 200);
  // The lease is given back just after the response is written.
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 0; }));
  EXPECT_EQ(get("/slow", "crm").status, 200) << "the lease was given back";
}

// A client that gives up on a slow upstream frees its in-flight place within a sweep or two of
// closing its connection, not when the upstream answers (10 s here); nobody is answered, and the
// log says 499.
TEST_F(GatewayTest, AClientThatGivesUpFreesItsInFlightPlaceWithoutWaitingForTheUpstream) {
  const std::string request =
      "GET /slow?delay_ms=60000 HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: gives-up\r\n\r\n";
  const int fd = connect_and_send(gw_->port(), request);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  EXPECT_EQ(get("/slow", "crm").status, 429);
  ::close(fd);
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 0; }, 5s));
  EXPECT_EQ(get("/slow", "crm").status, 200);
  const auto logged = json(access_log_line("gives-up"));
  EXPECT_EQ(logged.at("status").as_int64(), 499);
  EXPECT_EQ(str(logged, "reason"), "client_closed_request");
  EXPECT_LT(logged.at("upstream_latency_ms").as_double(), 5000.0);
}

// What fd gives until the connection ends: the status and how many bytes the body has.
std::pair<int, std::size_t> read_to_end(int fd) {
  std::string head;
  std::size_t body = 0;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    if (head.find("\r\n\r\n") == std::string::npos) {
      head.append(buf, static_cast<std::size_t>(n));
      const std::size_t end = head.find("\r\n\r\n");
      if (end != std::string::npos) body = head.size() - end - 4;
    } else {
      body += static_cast<std::size_t>(n);
    }
  }
  return {testing::raw_status(head), body};
}

// A client that stops reading its answer for longer than the upstream's timeout still gets all of
// it: the upstream's timeout bounds the reads from the upstream, and the client's pause is the
// client's (send_timeout bounds it, 60 s by default). The answer is larger than what the sockets'
// buffers hold, so the gateway waits on the client; it was cut at the upstream's timeout.
TEST_F(GatewayTest, AClientThatPausesReadingLongerThanTheUpstreamsTimeoutGetsAllOfItsAnswer) {
  constexpr std::size_t kBytes = std::size_t{32} << 20;
  const int fd = connect_and_send(gw_->port(), "GET /echo/big?bytes=" + std::to_string(kBytes) +
                                                   " HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n"
                                                   "X-Request-Id: paused\r\nConnection: close\r\n\r\n");
  ASSERT_GE(fd, 0);
  // Twice the upstream's timeout (300 ms) passes on the gateway's deadlines: two requests it times
  // out, one after the other.
  for (int i = 0; i < 2; ++i) EXPECT_EQ(get("/echo/x?delay_ms=5000", "crm").status, 504) << i;
  const auto [status, body] = read_to_end(fd);
  ::close(fd);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, kBytes);
  const auto logged = json(access_log_line("paused"));
  EXPECT_EQ(logged.at("status").as_int64(), 200);
  EXPECT_EQ(str(logged, "reason"), "ok");
}

// A client that reads nothing of its answer for send_timeout has it cut and its connection closed;
// the log keeps the status it was sent, and says why.
TEST_F(GatewayTest, AClientThatReadsNothingForTheSendTimeoutHasItsAnswerCut) {
  gw_.reset();
  start(replace_all(config_text(), "header_timeout: 500ms", "header_timeout: 500ms\nsend_timeout: 200ms"));
  constexpr std::size_t kBytes = std::size_t{32} << 20;
  const int fd = connect_and_send(gw_->port(), "GET /echo/big?bytes=" + std::to_string(kBytes) +
                                                   " HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n"
                                                   "X-Request-Id: unread\r\n\r\n");
  ASSERT_GE(fd, 0);
  const auto logged = json(access_log_line("unread"));
  EXPECT_EQ(logged.at("status").as_int64(), 200);
  EXPECT_EQ(str(logged, "reason"), "request_timeout");
  const auto [status, body] = read_to_end(fd);
  ::close(fd);
  EXPECT_EQ(status, 200);
  EXPECT_LT(body, kBytes);
}

// A client that leaves while the upstream is slow to send the body (a stream, or a stall) frees its
// place too, and the upstream connection is closed; the log keeps the status it was sent.
TEST_F(GatewayTest, AClientThatLeavesWhileTheBodyStallsFreesItsPlace) {
  ClosingUpstream stalled("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", ClosingUpstream::After::kHold);
  gw_.reset();
  start(replace_all(config_text("", stalled.port()), "    targets: [127.0.0.1:" + std::to_string(stalled.port()) +
                                                         "]\n    timeout: 300ms",
                    "    targets: [127.0.0.1:" + std::to_string(stalled.port()) + "]\n    timeout: 60s"));
  const std::string request = "GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: left-mid-body\r\n\r\n";
  const int fd = connect_and_send(gw_->port(), request);
  ASSERT_GE(fd, 0);
  const std::string out = read_until(fd, "hello");
  ASSERT_NE(out.find("hello"), std::string::npos) << out;
  EXPECT_EQ(gw_->metrics().in_flight(), 1);
  ::close(fd);
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 0; }, 5s));
  EXPECT_TRUE(testing::eventually([&] { return stalled.closed() == 1; }, 5s));
  const auto logged = json(access_log_line("left-mid-body"));
  EXPECT_EQ(logged.at("status").as_int64(), 200);
  EXPECT_EQ(str(logged, "reason"), "client_closed_request");
}

// A client that gives up is nothing the upstream did wrong, unless the call had already outlasted
// the breaker's slow_call: then it counts as slow, or a hung upstream whose clients all give up
// would never trip its breaker. Two give-ups each time, in a window of two.
TEST_F(GatewayTest, AGiveUpCountsForTheBreakerOnlyAsASlowCall) {
  for (const char* slow_call : {"1h", "1ms"}) {
    gw_.reset();
    start(replace_all(config_text(), "    timeout: 10s\n    breaker: {enabled: false}",
                      std::string("    timeout: 10s\n    breaker: {slow_call_rate: 50, slow_call: ") + slow_call +
                          ", window: 2, minimum_calls: 2, open_for: 1h}"));
    for (int i = 0; i < 2; ++i) {
      const std::string request = "GET /slow?delay_ms=60000 HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n";
      const int fd = connect_and_send(gw_->port(), request);
      ASSERT_GE(fd, 0);
      ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
      ::close(fd);
      ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 0; }, 5s)) << slow_call;
    }
    const std::string open = std::string(slow_call) == "1ms" ? "1" : "0";
    EXPECT_NE(metrics().find("sluice_breaker_state{upstream=\"slow\",state=\"open\"} " + open), std::string::npos)
        << slow_call << "\n" << metrics();
    EXPECT_EQ(get("/slow", "crm").status, open == "1" ? 503 : 200) << slow_call;
  }
}

// A next request sent while the upstream works on the first (pipelined) is not taken for the
// client leaving: the sweeps that peek at the client's socket find it waiting there.
TEST_F(GatewayTest, ARequestSentAheadIsNotTakenForTheClientLeaving) {
  const int fd = connect_to_loopback(gw_->port());
  ASSERT_GE(fd, 0);
  const std::string first = "GET /slow?delay_ms=300 HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n";
  const std::string second = "GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL), static_cast<ssize_t>(first.size()));
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  ASSERT_EQ(::send(fd, second.data(), second.size(), MSG_NOSIGNAL), static_cast<ssize_t>(second.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const std::size_t at = out.find("HTTP/1.1 ", 1);
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_EQ(testing::raw_status(out), 200) << out;
  EXPECT_EQ(testing::raw_status(out.substr(at)), 200) << out;
}

TEST_F(GatewayTest, ConcurrentClientsGetExactlyTheLimit) {
  std::atomic<int> ok{0};
  std::atomic<int> limited{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      HttpClient c(gw_->port());
      for (int i = 0; i < 40; ++i) {
        const int s = c.get("/burst", "crm").status;
        (s == 200 ? ok : limited).fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 50);
  EXPECT_EQ(limited.load(), 110);
}

TEST_F(GatewayTest, DecideAnswersTheSameDecisionWithoutProxying) {
  HttpClient c(gw_->port());
  const std::string body = R"({"system":"crm","method":"GET","path":"/limited?a=1","cost":1})";
  const HttpResponse first = c.request("POST", "/_sluice/v1/decide", {}, body);
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(str(json(first.body), "interface"), "limited");
  EXPECT_EQ(first.header("ratelimit"), "\"limited\";r=1;t=60");
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, body).status, 200);
  const HttpResponse third = c.request("POST", "/_sluice/v1/decide", {}, body);
  EXPECT_EQ(third.status, 429);
  EXPECT_EQ(str(json(third.body), "reason"), "interface_rate_limited");
  EXPECT_EQ(third.header("retry-after"), "60");
  const HttpResponse forbidden =
      c.request("POST", "/_sluice/v1/decide", {}, R"({"system":"crm","method":"GET","path":"/other"})");
  EXPECT_EQ(forbidden.status, 403);
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, "not json").status, 400);
  // A field of the wrong type is a bad request, not an absent field (a numeric key is no key).
  for (const char* bad : {R"({"system":123,"path":"/echo/x"})", R"({"system":"crm","method":1,"path":"/echo/x"})",
                          R"({"system":"crm","path":"/echo/x","headers":"X: 1"})",
                          R"({"path":"/echo/x","headers":{"X-Api-Key":"a","x-api-key":"b"}})",
                          R"({"system":"crm","path":"/echo/x","cost":"2"})"}) {
    const HttpResponse r = c.request("POST", "/_sluice/v1/decide", {}, bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(str(json(r.body), "reason"), "bad_request") << bad;
  }
  // What a proxied request could not carry.
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"system":"crm","method":"","path":"/echo/x"})", "method must be"},
           {R"({"system":"crm","method":"G ET","path":"/echo/x"})", "method must be"},
           {R"({"system":"crm","method":"get","path":"/echo/x"})", "method must be"},
           {R"({"system":"crm","path":"/echo/x y"})", "path must be"},
           {"{\"system\":\"crm\",\"path\":\"/echo/\u00e9\"}", "path must be"},
           {R"({"system":"crm","path":"/echo/x#top"})", "path must be"},
           {R"({"system":"crm","path":"/echo/x","client_ip":"not-an-ip"})", "client_ip must be"},
           {R"({"system":"crm","path":"/echo/x","client_ip":""})", "client_ip must be"},
           {R"({"system":"crm","path":"/echo/x","body_sha256":"zz"})", "body_sha256 must be"},
           {R"({"system":"crm"})", "the field path is missing"},
           {R"({"system":"crm","path":7})", "the field path must be a string"},
           {R"({"system":"crm","path":"/echo/x","cost":0})", "cost must be"},
           {R"({"system":"crm","path":"/echo/x","cost":-1})", "cost must be"},
           {R"({"system":"crm","path":"/echo/x","cost":1.0})", "cost must be"},
           {R"({"system":"crm","path":"/echo/x","cost":1099511627777})", "cost must be"},
           {R"({"system":"crm","path":"/echo/x","headers":["X: 1"]})", "headers must be an object"},
           {R"({"system":"crm","path":"/echo/x","headers":{"X-User":5}})", "headers.X-User must be a string"},
           {R"({"system":"crm","path":"/echo/x","headers":{"X-User":["a","b"]}})", "headers.X-User must be a string"},
           {R"({"system":"crm","path":"/echo/x","headers":{"X-User":"a\r\nX: y"}})", "headers.X-User has a character"},
           {R"({"system":"crm","path":"/echo/x","headers":{"X User":"a"}})", "headers: X User is not a header name"},
           {R"({"system":"crm","path":"/echo/x","headers":{"X-User":"a","X_User":"b"}})", "headers.X_User is given twice"},
           {R"({"system":"crm","path":"/echo/x","headers":{"X-Z":"a","x-z":"b"}})", "headers.x-z is given twice"}}) {
    const HttpResponse r = c.request("POST", "/_sluice/v1/decide", {}, bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_TRUE(str(json(r.body), "msg").starts_with(why)) << bad << ": " << r.body;
  }
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, R"({"system":"crm","path":"/echo/x","cost":2})").status, 200);
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, R"({"system":"crm","path":"/echo/x","client_ip":"::1"})").status,
            200);
  const HttpResponse get = c.request("GET", "/_sluice/v1/decide");
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(get.header("allow"), "POST");
  EXPECT_EQ(upstream_->requests(), 0);
}

// An IPv4 client of a dual-stack listener is its IPv4 address, not ::ffff:a.b.c.d: one client to
// its limits whichever way it came, in the log and upstream too.
TEST_F(GatewayTest, AnIpv4ClientOfADualStackListenerIsItsIpv4Address) {
  gw_.reset();
  GatewayOptions o;
  o.listen = "[::]:0";
  o.admin_listen = "127.0.0.1:0";
  o.clock = &clock_;
  o.access_log = log_path_;
  o.log = [](std::string_view) {};
  auto g = Gateway::start(o, parse(config_text()));
  ASSERT_TRUE(g.ok()) << g.error().message;
  gw_ = std::move(*g);
  HttpClient c(gw_->port());
  const HttpResponse echo = c.request("GET", "/echo/x", {{"X-System-Key", "crm"}, {"X-Request-Id", "dual"}});
  ASSERT_EQ(echo.status, 200);
  EXPECT_EQ(str(json(echo.body).at("headers").as_object(), "X-Forwarded-For"), "127.0.0.1");
  EXPECT_NE(access_log_line("dual").find(R"("client_ip":"127.0.0.1")"), std::string::npos) << access_log_line("dual");
  EXPECT_EQ(c.get("/per-ip").status, 200);
  const std::string decide = R"({"path":"/per-ip","client_ip":")";
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, decide + R"(::ffff:127.0.0.1"})").status, 429);
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, decide + R"(::ffff:10.0.0.1"})").status, 200);
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, decide + R"(10.0.0.1"})").status, 429);
}

// Behind proxies the gateway trusts, a request is its client's as X-Forwarded-For names it (read
// from the right, past the trusted proxies): counted, logged and sent on as that client's, with the
// protocol X-Forwarded-Proto says. From a peer not trusted, both are the peer's own.
TEST_F(GatewayTest, ARequestFromATrustedProxyIsItsClients) {
  gw_.reset();
  start(config_text("trusted_proxies: [127.0.0.1, 10.0.0.0/8]\n"));
  HttpClient c(gw_->port());
  const auto via = [&](const std::string& forwarded_for, const std::string& id = "none") {
    return c.request("GET", "/per-ip",
                     {{"X-Forwarded-For", forwarded_for}, {"X-Forwarded-Proto", "https"}, {"X-Request-Id", id}});
  };
  const HttpResponse first = via("203.0.113.7", "forwarded");
  ASSERT_EQ(first.status, 200);
  const auto echo = json(first.body);
  const auto& h = echo.at("headers").as_object();
  EXPECT_EQ(str(h, "X-Forwarded-For"), "203.0.113.7, 127.0.0.1");
  EXPECT_EQ(str(h, "X-Forwarded-Proto"), "https");
  EXPECT_NE(access_log_line("forwarded").find(R"("client_ip":"203.0.113.7")"), std::string::npos)
      << access_log_line("forwarded");
  EXPECT_EQ(via("203.0.113.7").status, 429);  // the same client
  EXPECT_EQ(via("203.0.113.8").status, 200);  // another
  // What a client wrote left of the entry its proxy made counts for nothing.
  EXPECT_EQ(via("198.51.100.1, 203.0.113.7").status, 429);
  // Trusted proxies on the way are passed over; a port is no part of an address.
  EXPECT_EQ(via("203.0.113.9:5555, 10.1.2.3").status, 200);
  EXPECT_EQ(via("203.0.113.9, 10.1.2.3").status, 429);
  EXPECT_EQ(via("[2001:db8::1]:443").status, 200);
  EXPECT_EQ(via("2001:db8::1").status, 429);
  // Several fields are one list, in order; every entry trusted: the leftmost.
  EXPECT_EQ(c.request("GET", "/per-ip", {{"X-Forwarded-For", "198.51.100.5"}, {"X-Forwarded-For", "10.0.0.1"}}).status,
            200);
  EXPECT_EQ(via("198.51.100.5").status, 429);
  EXPECT_EQ(via("10.0.0.2, 10.0.0.1").status, 200);
  EXPECT_EQ(via("10.0.0.2").status, 429);
  // An entry that is not an address (a zone id, a bracket not closed, a port that is none) leaves
  // the peer's own, as does a request without the field.
  EXPECT_EQ(via("unknown").status, 200);
  for (const std::string entry : {"2001:db8::5%7", "[2001:db8::6", "[2001:db8::7]x", "198.51.100.6:", "198.51.100.7:ab",
                                  "[198.51.100.8]:1"}) {
    EXPECT_EQ(via(entry).status, 429) << entry;
  }
  EXPECT_EQ(c.get("/per-ip").status, 429);
  // The protocol is the nearest proxy's word: the last entry.
  const auto proto = [&](const std::vector<std::pair<std::string, std::string>>& fields) {
    const HttpResponse r = c.request("GET", "/echo/x", fields);
    return str(json(r.body).at("headers").as_object(), "X-Forwarded-Proto");
  };
  EXPECT_EQ(proto({{"X-System-Key", "crm"}, {"X-Forwarded-Proto", "HTTPS"}}), "https");
  EXPECT_EQ(proto({{"X-System-Key", "crm"}, {"X-Forwarded-Proto", "https, http"}}), "http");
  EXPECT_EQ(proto({{"X-System-Key", "crm"}, {"X-Forwarded-Proto", "http"}, {"X-Forwarded-Proto", "https"}}), "https");
  EXPECT_EQ(proto({{"X-System-Key", "crm"}, {"X-Forwarded-Proto", "wss"}}), "http");
  // /decide from behind the proxy: the client it names asks, and may not name another address.
  const HttpResponse other = c.request("POST", "/_sluice/v1/decide", {{"X-Forwarded-For", "203.0.113.66"}},
                                       R"({"path":"/per-ip","client_ip":"192.0.2.99"})");
  EXPECT_EQ(other.status, 400);
  EXPECT_NE(other.body.find("this request came from 203.0.113.66"), std::string::npos) << other.body;
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {{"X-Forwarded-For", "203.0.113.66"}}, R"({"path":"/per-ip"})").status,
            200);
  EXPECT_EQ(via("203.0.113.66").status, 429);

  gw_.reset();
  start(config_text("trusted_proxies: [10.0.0.0/8]\n"));
  HttpClient d(gw_->port());
  const HttpResponse untrusted =
      d.request("GET", "/per-ip", {{"X-Forwarded-For", "203.0.113.7"}, {"X-Forwarded-Proto", "https"}});
  ASSERT_EQ(untrusted.status, 200);
  EXPECT_EQ(str(json(untrusted.body).at("headers").as_object(), "X-Forwarded-Proto"), "http");
  EXPECT_EQ(d.request("GET", "/per-ip", {{"X-Forwarded-For", "203.0.113.8"}}).status, 429);  // the peer's
}

// A client_ip other than its own is taken only from a peer decide_client_ip_from names: from anyone
// else it would spend another address's counters (lock a victim out of a login limit).
TEST_F(GatewayTest, DecideTakesAnotherClientsAddressOnlyFromATrustedPeer) {
  gw_.reset();
  start(config_text("decide_client_ip_from: [10.0.0.0/8]\n"));
  HttpClient c(gw_->port());
  const std::string decide = R"({"path":"/per-ip","client_ip":")";
  const HttpResponse refused = c.request("POST", "/_sluice/v1/decide", {}, decide + R"(203.0.113.9"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("only from a peer in decide_client_ip_from (10.0.0.0/8); this request came from 127.0.0.1"),
            std::string::npos)
      << refused.body;
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, decide + R"(127.0.0.1"})").status, 200);  // its own
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, R"({"path":"/per-ip"})").status, 429);
  gw_.reset();
  start(config_text("decide_client_ip_from: [127.0.0.1]\n"));
  HttpClient trusted(gw_->port());
  EXPECT_EQ(trusted.request("POST", "/_sluice/v1/decide", {}, decide + R"(203.0.113.9"})").status, 200);
  EXPECT_EQ(trusted.request("POST", "/_sluice/v1/decide", {}, decide + R"(203.0.113.9"})").status, 429);
}

// With language: zh-CN, /decide's refusals are in Chinese too, whatever was wrong.
TEST_F(GatewayTest, DecideRefusesInTheGatewaysLanguage) {
  gw_.reset();
  start(config_text("language: zh-CN\n"));
  HttpClient c(gw_->port());
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "请求体应为 JSON 对象"},
           {R"({"system":"crm","method":"get","path":"/echo/x"})", "method 应为大写的 HTTP 方法"},
           {R"({"system":"crm","path":"/echo/x#top"})", "path 应为可见的 ASCII 字符"},
           {R"({"system":"crm","path":"/echo/x","client_ip":"x"})", "client_ip 应为 IP 地址"},
           {R"({"system":"crm","path":"/echo/x","body_sha256":"zz"})", "body_sha256 应为 64 位十六进制数字"},
           {R"({"system":"crm","path":"/echo/x","cost":0})", "cost 应为 1 到 2^40"},
           {R"({"system":"crm","path":"/echo/x","headers":{"X-User":5}})", "headers.X-User 应为字符串"},
           {R"({"system":"crm","system":"erp","path":"/echo/x"})", "字段 system 出现了两次"}}) {
    const HttpResponse r = c.request("POST", "/_sluice/v1/decide", {}, bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_TRUE(str(json(r.body), "msg").starts_with(why)) << bad << ": " << r.body;
  }
}

// A field given twice is refused, where the JSON parser would keep the last: a proxy before sluice
// may have read the first ("crm", which may call /echo) and sluice then decided for another.
TEST_F(GatewayTest, DecideRefusesAFieldGivenTwice) {
  HttpClient c(gw_->port());
  const HttpResponse system = c.request("POST", "/_sluice/v1/decide", {},
                                        R"({"system":"crm","path":"/echo/x","system":"erp"})");
  EXPECT_EQ(system.status, 400);
  EXPECT_EQ(str(json(system.body), "reason"), "bad_request");
  EXPECT_EQ(str(json(system.body), "msg"), "the field system is given twice");
  const HttpResponse header = c.request("POST", "/_sluice/v1/decide", {},
                                        R"({"system":"crm","path":"/echo/x","headers":{"X-User-Id":"1","X-User-Id":"2"}})");
  EXPECT_EQ(header.status, 400);
  EXPECT_EQ(str(json(header.body), "msg"), "the field headers.X-User-Id is given twice");
  // A header name is the same name in any case: the first would key a limit here, and another
  // reader might take the last.
  const HttpResponse cased = c.request("POST", "/_sluice/v1/decide", {},
                                       R"({"system":"crm","path":"/echo/x","headers":{"X-User-Id":"1","x-user-id":"2"}})");
  EXPECT_EQ(cased.status, 400);
  EXPECT_EQ(str(json(cased.body), "reason"), "bad_request");
  // Equal values in different objects are no repeat.
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {},
                      R"({"system":"crm","path":"/echo/x","headers":{"system":"crm","path":"/"}})").status,
            200);
}

// A field /decide does not know is refused, not dropped: a misspelt "cost" would be decided at 1.
TEST_F(GatewayTest, DecideRefusesAFieldItDoesNotKnow) {
  HttpClient c(gw_->port());
  for (const std::string field : {"Cost", "cots", "query"}) {
    const HttpResponse r = c.request("POST", "/_sluice/v1/decide", {},
                                     R"({"system":"crm","path":"/echo/x",")" + field + R"(":4})");
    EXPECT_EQ(r.status, 400) << field;
    EXPECT_EQ(str(json(r.body), "msg"), "unknown field " + field +
                                            ": the fields are system, method, path, cost, client_ip, body_sha256 "
                                            "and headers");
  }
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {},
                      R"({"system":"crm","method":"GET","path":"/echo/x","cost":1,"client_ip":"127.0.0.1",)"
                      R"("body_sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","headers":{}})")
                .status,
            200);
}

// A 400 for a /decide body read whole (bad JSON, an unknown field) keeps the connection, as a 200 or
// a 429 does: a keep-alive client asks again on it. A body not read whole (too large) still closes it.
TEST_F(GatewayTest, DecideKeepsTheConnectionAfterA400ForABodyItReadWhole) {
  auto decide = [](const std::string& body, const std::string& more = "") {
    return "POST /_sluice/v1/decide HTTP/1.1\r\nHost: a\r\n" + more + "Content-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  };
  const std::string valid = R"({"system":"crm","path":"/echo/x"})";
  // Each response's status and whether its head says the connection closes, in order.
  auto responses = [](const std::string& out) {
    std::vector<std::pair<int, bool>> found;
    for (std::size_t at = out.find("HTTP/1.1 "); at != std::string::npos; at = out.find("HTTP/1.1 ", at + 1)) {
      const std::string head = out.substr(at, out.find("\r\n\r\n", at) - at);
      found.emplace_back(testing::raw_status(out.substr(at)), head.find("\r\nConnection: close") != std::string::npos);
    }
    return found;
  };
  const std::string out = raw(decide("not json") + decide(R"({"system":"crm","path":"/echo/x","cots":2})") +
                              decide(valid, "Connection: close\r\n"));
  EXPECT_EQ(responses(out), (std::vector<std::pair<int, bool>>{{400, false}, {400, false}, {200, true}})) << out;
  HttpClient c(gw_->port());
  const HttpResponse bad = c.request("POST", "/_sluice/v1/decide", {}, "{");
  EXPECT_EQ(bad.status, 400);
  EXPECT_TRUE(bad.keep_alive);
  EXPECT_EQ(c.request("POST", "/_sluice/v1/decide", {}, valid).status, 200);
  EXPECT_EQ(c.connections(), 1);
  // Too large: the rest of the body is unread, and would be taken for the next request.
  const std::string large = raw(decide(std::string(64 * 1024 + 1, 'x')) + decide(valid));
  EXPECT_EQ(responses(large), (std::vector<std::pair<int, bool>>{{413, true}})) << large.substr(0, 300);
}

// An HTTP/1.0 client knows no chunking: a chunked body (or one without a length) reaches it
// unframed, ended by the connection's close.
TEST_F(GatewayTest, AnHttp10ClientGetsABodyWithoutALengthUnframedAndTheConnectionClosed) {
  ClosingUpstream chunked("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                          ClosingUpstream::After::kClose);
  restart_in_front_of(chunked);
  const std::string out =
      raw("GET /closing HTTP/1.0\r\nHost: a\r\nX-System-Key: crm\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(testing::raw_status(out), 200) << out;
  const std::string head = out.substr(0, out.find("\r\n\r\n") + 4);
  EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << out;
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << out;
  EXPECT_EQ(out.substr(head.size()), "hello") << "and then the connection's end";
}

// An HTTP/1.0 client gets no 100 Continue, which it would take for the answer: its expectation
// is ignored (RFC 9110 10.1.1).
TEST_F(GatewayTest, AnHttp10ClientGetsNo100Continue) {
  const std::string out = raw("POST /echo/x HTTP/1.0\r\nHost: a\r\nX-System-Key: crm\r\nExpect: 100-continue\r\n"
                              "Content-Length: 5\r\n\r\nhello");
  EXPECT_EQ(testing::raw_status(out), 200) << out;
  EXPECT_EQ(out.find("100 Continue"), std::string::npos) << out;
}

// An HTTP/1.0 client that asks to keep its connection is told it is kept: HTTP/1.0 does not assume
// it.
TEST_F(GatewayTest, AnHttp10ClientsKeepAliveIsAnswered) {
  const std::string out = raw("GET /echo/x HTTP/1.0\r\nHost: a\r\nX-System-Key: crm\r\nConnection: keep-alive\r\n\r\n"
                              "GET /_sluice/healthz HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n"
                              "GET /_sluice/healthz HTTP/1.0\r\nHost: a\r\n\r\n");
  std::size_t responses = 0, kept = 0;
  for (std::size_t at = 0; (at = out.find(" 200 OK\r\n", at)) != std::string::npos; ++at) ++responses;
  for (std::size_t at = 0; (at = out.find("\r\nConnection: keep-alive\r\n", at)) != std::string::npos; ++at) ++kept;
  EXPECT_EQ(responses, 3u) << out;
  EXPECT_EQ(kept, 2u) << out;
}

// The gateway's own answers to HEAD carry the body's length and no body: a body would be read as
// the start of the next response on the connection.
TEST_F(GatewayTest, AnswersToHeadHaveNoBody) {
  const std::string out = raw("HEAD /echo/x HTTP/1.1\r\nHost: a\r\n\r\n"
                              "GET /_sluice/healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(testing::raw_status(out), 401) << out;
  EXPECT_NE(out.find("Content-Length: "), std::string::npos) << out;
  const std::size_t end = out.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << out;
  EXPECT_EQ(testing::raw_status(out.substr(end + 4)), 200) << "the next response follows the head at once: " << out;
}

// A body the gateway reads itself (/decide, or a signed request's) that is too large or too slow
// gets 413 or 408, as a proxied one does.
TEST_F(GatewayTest, ABodyTheGatewayReadsGets413WhenTooLargeAnd408WhenTooSlow) {
  const std::string head = "POST /_sluice/v1/decide HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string large = raw(head + "10001\r\n" + std::string(0x10001, 'x') + "\r\n0\r\n\r\n");
  EXPECT_EQ(testing::raw_status(large), 413) << large.substr(0, 200);
  const std::string slow = raw(head + "10\r\n{\"system\"", 5s);  // and then nothing, past header_timeout
  EXPECT_EQ(testing::raw_status(slow), 408) << slow;
}

// The gateway has a clock: its own answers carry a Date (RFC 9110 6.6.1: an origin server's 2xx to
// 4xx must), and so does a proxied answer whose upstream sent none; an upstream's Date is kept, once.
TEST_F(GatewayTest, AnswersCarryADateAndAnUpstreamsOwnIsKept) {
  const std::regex imf_fixdate(R"((Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT)");
  auto dates = [](const std::string& raw) {
    std::vector<std::string> found;
    for (std::size_t at = raw.find("\r\nDate: "); at != std::string::npos; at = raw.find("\r\nDate: ", at + 1)) {
      found.push_back(raw.substr(at + 8, raw.find("\r\n", at + 8) - at - 8));
    }
    return found;
  };
  for (const std::string request : {"GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: nobody\r\nConnection: close\r\n\r\n",
                                    "GET /_sluice/healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                                    "GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n"}) {
    const std::vector<std::string> found = dates(raw(request));
    ASSERT_EQ(found.size(), 1u) << request;
    EXPECT_TRUE(std::regex_match(found[0], imf_fixdate)) << found[0];
  }
  ClosingUpstream dated("HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 2\r\n\r\nok",
                        ClosingUpstream::After::kClose);
  gw_.reset();
  start(config_text("", dated.port()));
  EXPECT_EQ(dates(raw("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n")),
            (std::vector<std::string>{"Sun, 06 Nov 1994 08:49:37 GMT"}));
  // An upstream that names its Date hop-by-hop has it dropped, and the gateway's goes instead.
  ClosingUpstream hop_dated(
      "HTTP/1.1 200 OK\r\nConnection: Date\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 2\r\n\r\nok",
      ClosingUpstream::After::kClose);
  gw_.reset();
  start(config_text("", hop_dated.port()));
  const std::vector<std::string> found = dates(raw("GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n"));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(std::regex_match(found[0], imf_fixdate)) << found[0];
  EXPECT_NE(found[0], "Sun, 06 Nov 1994 08:49:37 GMT");
}

TEST_F(GatewayTest, HealthzAnswersOk) {
  const HttpResponse r = get("/_sluice/healthz", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"status":"ok"})");
}

TEST_F(GatewayTest, MetricsCountRequestsBySystemInterfaceReasonAndStatus) {
  get("/limited");
  get("/limited");
  get("/limited");
  get("/echo/x", "nobody");
  // A request is counted just after its response is written, maybe by another worker: wait for
  // each count.
  const std::vector<std::string> counted{
      "sluice_requests_total{system=\"crm\",interface=\"limited\",reason=\"ok\",status=\"200\"} 2",
      "sluice_requests_total{system=\"crm\",interface=\"limited\",reason=\"interface_rate_limited\",status=\"429\"} 1",
      "sluice_requests_total{system=\"\",interface=\"echo\",reason=\"system_unknown\",status=\"401\"} 1",
      "sluice_in_flight_requests 0"};
  std::string m;
  ASSERT_TRUE(testing::eventually([&] {
    m = metrics();
    return std::all_of(counted.begin(), counted.end(), [&](const std::string& c) { return m.find(c) != std::string::npos; });
  })) << m;
  EXPECT_NE(m.find("sluice_decision_duration_seconds_count 4"), std::string::npos);
  EXPECT_NE(m.find("sluice_in_flight_requests 0"), std::string::npos);
}

TEST_F(GatewayTest, TheAdminListenerExportsTheConfigurationAsYaml) {
  HttpClient c(gw_->admin_port());
  const HttpResponse r = c.get("/config");
  EXPECT_EQ(r.status, 200);
  auto again = config::load_yaml(r.body, "exported.yaml");
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<const config::Config>>(again)) << r.body;
  EXPECT_EQ(config::to_yaml(*std::get<std::shared_ptr<const config::Config>>(again)), r.body);
}

// A reload that changes what takes effect at start only: /config goes on showing what is in effect
// (it showed the new store, which the gateway was not deciding on).
TEST_F(GatewayTest, ConfigShowsTheStartOnlySettingsInEffectAfterAReload) {
  HttpClient c(gw_->admin_port());
  const std::string before = c.get("/config").body;
  ASSERT_NE(before.find("store: local"), std::string::npos) << before;
  ASSERT_TRUE(gw_->reload(parse("store: \"redis://127.0.0.1:1\"\nfleet_size: 4\n" + config_text())).ok());
  const std::string after = c.get("/config").body;
  EXPECT_NE(after.find("store: local"), std::string::npos) << after;
  // The addresses as bound: port 0 picked these.
  EXPECT_NE(after.find("listen: \"127.0.0.1:" + std::to_string(gw_->port()) + "\""), std::string::npos) << after;
  EXPECT_NE(after.find("admin_listen: \"127.0.0.1:" + std::to_string(gw_->admin_port()) + "\""), std::string::npos)
      << after;
  EXPECT_EQ(after.find("127.0.0.1:1\""), std::string::npos) << after;
  EXPECT_EQ(after.find("fleet_size: 4"), std::string::npos) << after;
}

// A request the admin listener cannot read is answered, and its connection closed, rather than just
// hung up on.
TEST_F(GatewayTest, TheAdminListenerAnswersWhatItCannotRead) {
  for (const auto& [bytes, status] : std::vector<std::pair<std::string, int>>{
           {"POST /admin/v1/systems HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
           {"POST /admin/v1/systems HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n", 400},
           {"GET /config HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n", 431},
           // Framing the data plane refuses as ambiguous: a request hidden in the body is not answered.
           {"GET /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nGET /config HTTP/1.1\r\nHost: a\r\n\r\n",
            400},
           {"GET /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400},
           {"GET /healthz HTTP/1.1\r\n\r\n", 400},
           {"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400}}) {
    const std::string out = testing::raw_exchange(gw_->admin_port(), bytes, 5s);
    EXPECT_EQ(testing::raw_status(out), status) << out.substr(0, 200);
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << out.substr(0, 200);
    EXPECT_EQ(out.find("HTTP/1.1", 1), std::string::npos) << "one answer: " << out.substr(0, 400);
  }
}

// HEAD is answered as GET without the body: a body would be read as the next response.
TEST_F(GatewayTest, TheAdminListenerAnswersHeadAsGetWithoutTheBody) {
  const std::string out = testing::raw_exchange(
      gw_->admin_port(), "HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
      5s);
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const std::size_t first_end = out.find("\r\n\r\n") + 4;
  EXPECT_NE(out.substr(0, first_end).find("Content-Length: 15\r\n"), std::string::npos) << out;
  EXPECT_TRUE(out.substr(first_end).starts_with("HTTP/1.1 200 OK\r\n")) << out;
  EXPECT_TRUE(out.ends_with(R"({"status":"ok"})")) << out;
}

// The admin listener's own routes take GET and HEAD; another method is told so, as the data plane's
// /_sluice/healthz and the admin API's routes are.
TEST_F(GatewayTest, TheAdminListenersOwnRoutesRefuseAnotherMethodWith405) {
  for (const char* route : {"/healthz", "/metrics", "/config"}) {
    const std::string out = testing::raw_exchange(
        gw_->admin_port(), std::string("POST ") + route + " HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 5s);
    EXPECT_EQ(testing::raw_status(out), 405) << route << "\n" << out;
    EXPECT_NE(out.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos) << out;
  }
}

TEST_F(GatewayTest, EachRequestWritesOneJsonAccessLogLine) {
  HttpClient c(gw_->port());
  c.request("GET", "/limited?q=1", {{"X-System-Key", "crm"}, {"X-Request-Id", "log-me"}});
  const auto o = json(access_log_line("log-me"));
  EXPECT_EQ(str(o, "system"), "crm");
  EXPECT_EQ(str(o, "interface"), "limited");
  EXPECT_EQ(str(o, "method"), "GET");
  EXPECT_EQ(str(o, "path"), "/limited");
  EXPECT_EQ(str(o, "reason"), "ok");
  EXPECT_EQ(o.at("status").as_int64(), 200);
  EXPECT_TRUE(o.at("latency_ms").is_double());
  EXPECT_TRUE(o.at("upstream_latency_ms").is_double());
  EXPECT_EQ(str(o, "time").size(), 27u);
}

TEST_F(GatewayTest, HotReloadUnderLoadFailsNoRequest) {
  const std::string a = config_text();
  const std::string b = replace_all(a, "limit: 50, period: 1h", "limit: 60, period: 1h");
  std::atomic<bool> done{false};
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&] {
      HttpClient c(gw_->port());
      for (int i = 0; i < 300; ++i) {
        (c.get("/echo/x", "crm").status == 200 ? ok : failed).fetch_add(1);
      }
    });
  }
  std::thread reloader([&] {
    int n = 0;
    while (!done) {
      ASSERT_TRUE(gw_->reload(parse(n++ % 2 == 0 ? b : a)).ok());
    }
  });
  for (auto& t : clients) t.join();
  done = true;
  reloader.join();
  EXPECT_EQ(ok.load(), 900);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(gw_->snapshot()->generation(), 2u);
}

// An idle pooled connection to a target a reload removed is closed (not left, its upstream gone,
// for as long as the gateway runs: one per request in flight, per worker, per reload).
TEST_F(GatewayTest, IdleConnectionsToATargetAReloadRemovedAreClosed) {
  std::uint16_t port = 0;
  const int listener = listen_on_loopback(4, &port);
  ASSERT_GE(listener, 0);
  std::atomic<bool> closed{false};
  std::thread upstream([&] {  // answers one request, keeps the connection, and sees when it closes
    const int c = ::accept(listener, nullptr, nullptr);
    (void)read_until(c, "\r\n\r\n");
    const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
    pollfd p{c, POLLIN, 0};
    char byte = 0;
    if (::poll(&p, 1, 10'000) == 1 && ::recv(c, &byte, 1, 0) == 0) closed = true;
    ::close(c);
  });
  gw_.reset();
  start(config_text("", port));
  EXPECT_EQ(HttpClient(gw_->port()).get("/closing", "crm").status, 200);
  ASSERT_TRUE(gw_->reload(parse(config_text("", testing::free_port()))).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(HttpClient(gw_->port()).get("/echo/x", "crm").status, 200);  // each worker
  EXPECT_TRUE(testing::eventually([&] { return closed.load(); }, std::chrono::seconds(5)));
  upstream.join();
  ::close(listener);
}

TEST_F(GatewayTest, AReloadKeepsTheCountersOfUnchangedLimits) {
  EXPECT_EQ(get("/limited").status, 200);
  EXPECT_EQ(get("/limited").status, 200);
  ASSERT_TRUE(gw_->reload(parse(replace_all(config_text(), "limit: 50, period: 1h", "limit: 5, period: 1h"))).ok());
  EXPECT_EQ(get("/limited").status, 429);
  ASSERT_TRUE(gw_->reload(parse(replace_all(config_text(), "limit: 2, period: 1m", "limit: 3, period: 1m"))).ok());
  EXPECT_EQ(get("/limited").status, 200) << "a changed limit starts afresh";
}

// --- bad input, as raw bytes ------------------------------------------------------------------

struct BadInput {
  const char* name;
  std::string bytes;
  int status;
};

TEST_F(GatewayTest, BadInputIsRefusedAndNeverReachesTheUpstream) {
  const std::string head = "POST /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n";
  const BadInput cases[] = {
      {"header over 8 KiB", "GET /echo/x HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n", 431},
      {"request line over 8 KiB", "GET /echo/" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n", 414},
      {"a bare CR where the head would end", "GET /echo/x HTTP/1.1\r\nHost: a\r\n\r\r\n", 400},
      {"body over the limit", head + "Content-Length: 5000\r\n\r\n" + std::string(5000, 'b'), 413},
      {"chunked body over the limit",
       head + "Transfer-Encoding: chunked\r\n\r\n1388\r\n" + std::string(5000, 'b') + "\r\n0\r\n\r\n", 413},
      {"Content-Length and Transfer-Encoding",
       head + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"Transfer-Encoding and Content-Length",
       head + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400},
      {"two different Content-Lengths", head + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400},
      {"malformed chunk", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400},
      {"unknown Transfer-Encoding", head + "Transfer-Encoding: gzip\r\n\r\nhello", 400},
      {"chunked after another coding", head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400},
      {"dot segments", "GET /echo/../admin HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n", 400},
      {"not HTTP", "HELLO\r\n\r\n", 400},
      // Refused at once: a head in bare LFs never ends in CRLF CRLF, and used to wait for the timeout.
      {"lines ending in a bare LF", "GET /echo/x HTTP/1.1\nHost: a\nX-System-Key: crm\n\n", 400},
      {"chunk lines ending in a bare LF", head + "Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n", 400},
      // RFC 9112 3.2: one Host, which is a host, and there in HTTP/1.1.
      {"no Host", "GET /echo/x HTTP/1.1\r\nX-System-Key: crm\r\n\r\n", 400},
      {"two Hosts", "GET /echo/x HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-System-Key: crm\r\n\r\n", 400},
      {"a Host that is not a host", "GET /echo/x HTTP/1.1\r\nHost: a b/c\r\nX-System-Key: crm\r\n\r\n", 400},
      {"a target outside ASCII", "GET /echo/\xc0\xaf HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n", 400},
      {"a fragment", "GET /echo/x#/y HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n", 400},
      {"a method in lower case", "get /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n\r\n", 400},
  };
  for (const BadInput& c : cases) {
    const std::string out = raw(c.bytes);
    EXPECT_EQ(testing::raw_status(out), c.status) << c.name << ": " << out.substr(0, 200);
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << c.name;
    EXPECT_NE(out.find("X-Request-Id: "), std::string::npos) << c.name << ": every answer names its request";
  }
  EXPECT_EQ(upstream_->requests(), 0);
}

// The access log's values are JSON strings in UTF-8 whatever bytes they hold: well-formed UTF-8 as
// it came, control characters and bytes of no UTF-8 character escaped (overlong forms, surrogates,
// truncated sequences, past U+10FFFF).
// The log goes out in whole lines: a message another writer adds to the same file between them
// (the gateway's stderr, with 2>&1) never lands inside one.
TEST(AccessLogTest, LinesGoOutWholeBetweenOtherWriters) {
  const std::string path = testing::temp_dir() + "/access.log";
  auto log = AccessLog::open(path);
  ASSERT_TRUE(log.ok()) << log.error().message;
  const int other = ::open(path.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(other, 0);
  std::string line;
  const std::string path_field(150, 'p');
  for (int i = 0; i < 3000; ++i) {  // about 10 buffers
    AccessRecord r;
    r.request_id = "id";
    r.method = "GET";
    r.path = path_field;
    r.status = 200;
    (*log)->write(r, line);
    if (i % 7 == 0) {
      ASSERT_EQ(::write(other, "message\n", 8), 8);
    }
  }
  (*log)->flush();
  ::close(other);
  std::ifstream in(path);
  int lines = 0;
  int messages = 0;
  for (std::string l; std::getline(in, l);) {
    if (l == "message") {
      ++messages;
      continue;
    }
    boost::system::error_code ec;
    (void)boost::json::parse(l, ec);
    ASSERT_FALSE(ec) << "line " << lines << " cut: " << l;
    ++lines;
  }
  EXPECT_EQ(lines, 3000);
  EXPECT_EQ(messages, 429);
}

// Makes a FIFO at path and opens its reading end (non-blocking, so that a writer can open it);
// the reader's descriptor, or -1.
int fifo_with_reader(const std::string& path) {
  if (::mkfifo(path.c_str(), 0600) != 0) return -1;
  return ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
}

// A reader that never reads (a stuck log shipper on a pipe) holds no writer up: past kMaxQueued
// bytes waiting, lines are dropped, counted, and said why.
TEST(AccessLogTest, AReaderThatNeverReadsHoldsNoWriterUp) {
  ::signal(SIGPIPE, SIG_IGN);  // as main() does: the writer left stuck meets the reader's close
  const std::string fifo = testing::temp_dir() + "/access.fifo";
  const int reader = fifo_with_reader(fifo);
  ASSERT_GE(reader, 0);
  {
    auto log = AccessLog::open(fifo);
    ASSERT_TRUE(log.ok()) << log.error().message;
    std::string line;
    AccessRecord r;
    const std::string path(200, 'p');
    r.path = path;
    const std::size_t lines = 2 * kMaxQueued / 200;
    for (std::size_t i = 0; i < lines; ++i) (*log)->write(r, line);
    EXPECT_FALSE((*log)->flush(std::chrono::milliseconds(100)));
    const auto lost = (*log)->take_lost();
    ASSERT_TRUE(lost.has_value());
    EXPECT_GT(lost->first, lines / 4);
    EXPECT_EQ(lost->second, "more than 8 MiB waited to be written");
    EXPECT_FALSE((*log)->take_lost().has_value());  // said once
    EXPECT_GT((*log)->unwritten(), 0u);
    // A logrotate's SIGHUP meanwhile does not wait for the stuck writer either.
    EXPECT_TRUE((*log)->reopen());
  }
  ::close(reader);
}

// Lines a reader that never reads left unwritten when the gateway stops are said, not dropped
// without a word (the stop waits for them 2 s at most).
TEST(AccessLogTest, LinesLeftUnwrittenAtTheStopAreSaid) {
  ::signal(SIGPIPE, SIG_IGN);
  const std::string fifo = testing::temp_dir() + "/stop.fifo";
  const int reader = fifo_with_reader(fifo);
  ASSERT_GE(reader, 0);
  auto up = DemoUpstream::start();
  ASSERT_TRUE(up.ok());
  std::mutex mu;
  std::string said;
  {
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "off";
    o.access_log = fifo;
    o.log = [&](std::string_view line) {
      std::lock_guard lock(mu);
      said += std::string(line) + "\n";
    };
    auto g = Gateway::start(o, parse("upstreams: [{name: app, targets: [127.0.0.1:" + std::to_string((*up)->port()) +
                                     "]}]\ninterfaces: [{id: echo, path: /echo/*, upstream: app, public: true}]\n"));
    ASSERT_TRUE(g.ok()) << g.error().message;
    HttpClient c((*g)->port());
    const std::string path = "/echo/" + std::string(300, 'p');  // 1000 lines: more than a pipe holds
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(c.get(path).status, 200);
  }
  ::close(reader);
  EXPECT_NE(said.find(" lines not yet written after 2 s at exit (its reader is slow or stopped): lost"), std::string::npos) << said;
}

// A line longer than a pipe takes whole even with its path cut (many long shadow limits' names) is
// dropped and counted, not written in pieces, and the lines after it go on.
TEST(AccessLogTest, ALineTooLongEvenWithoutItsPathIsDroppedAndCounted) {
  const std::string fifo = testing::temp_dir() + "/long.fifo";
  const int reader = fifo_with_reader(fifo);
  ASSERT_GE(reader, 0);
  auto log = AccessLog::open(fifo);
  ASSERT_TRUE(log.ok()) << log.error().message;
  std::vector<CompiledLimit> limits(20);
  std::vector<const CompiledLimit*> rejected;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    limits[i].name = std::string(255, static_cast<char>('a' + i));
    rejected.push_back(&limits[i]);
  }
  std::string line;
  AccessRecord r;
  r.request_id = "long";
  r.shadow_rejected = &rejected;
  (*log)->write(r, line);
  AccessRecord after;
  after.request_id = "after";
  (*log)->write(after, line);
  ASSERT_TRUE((*log)->flush());
  const auto lost = (*log)->take_lost();
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->first, 1u);
  EXPECT_EQ(lost->second, "a line over 4096 bytes");
  char buf[8192];
  const ssize_t n = ::read(reader, buf, sizeof buf);
  ASSERT_GT(n, 0);
  const std::string got(buf, static_cast<std::size_t>(n));
  EXPECT_EQ(got.find("\"long\""), std::string::npos);
  EXPECT_NE(got.find("\"after\""), std::string::npos) << got;
  ::close(reader);
}

// A write that fails part way (a full disk; here the file size limit) leaves the file in whole
// lines: what follows, once there is room, starts a line of its own.
TEST(AccessLogTest, AFailedWriteLeavesOnlyWholeLines) {
  const std::string path = testing::temp_dir() + "/full.log";
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit small = before;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto log = AccessLog::open(path);
  ASSERT_TRUE(log.ok()) << log.error().message;
  std::string line;
  AccessRecord r;
  for (int i = 0; i < 20; ++i) {
    const std::string id = "r" + std::to_string(i);
    r.request_id = id;
    (*log)->write(r, line);
    ASSERT_TRUE((*log)->flush());
  }
  const auto lost = (*log)->take_lost();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
  ASSERT_TRUE(lost.has_value());
  EXPECT_NE(lost->second.find("too large"), std::string::npos) << lost->second;
  r.request_id = "after";
  (*log)->write(r, line);
  ASSERT_TRUE((*log)->flush());
  std::ifstream in(path);
  int whole = 0;
  for (std::string l; std::getline(in, l);) {
    boost::system::error_code ec;
    (void)boost::json::parse(l, ec);
    EXPECT_FALSE(ec) << "not a whole line: " << l;
    ++whole;
  }
  EXPECT_EQ(whole + static_cast<int>(lost->first), 21);
}

// A named pipe that nobody reads holds nothing up: the start is refused, saying so, and a reopen
// (a SIGHUP, on a worker's loop) fails at once and leaves the log where it was.
TEST(AccessLogTest, APipeThatNobodyReadsIsSaidNotWaitedFor) {
  ::signal(SIGPIPE, SIG_IGN);  // as main() does
  const std::string fifo = testing::temp_dir() + "/access.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto refused = AccessLog::open(fifo);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "cannot open the access log " + fifo + ": a named pipe that nobody reads: start its reader first");
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  auto log = AccessLog::open(fifo);
  ASSERT_TRUE(log.ok()) << log.error().message;
  ::close(reader);  // the log shipper goes away
  errno = 0;
  EXPECT_FALSE((*log)->reopen());
  EXPECT_EQ(errno, ENXIO);
  EXPECT_EQ(AccessLog::open_error(ENXIO), "a named pipe that nobody reads: start its reader first");
}

// After logrotate moves the file away, reopen() writes to a new file at the path; what was
// buffered goes to the old one.
TEST(AccessLogTest, ReopenWritesToANewFileAtThePath) {
  const std::string path = testing::temp_dir() + "/access.log";
  auto log = AccessLog::open(path);
  ASSERT_TRUE(log.ok()) << log.error().message;
  std::string line;
  AccessRecord r;
  r.request_id = "before";
  (*log)->write(r, line);
  ASSERT_EQ(std::rename(path.c_str(), (path + ".1").c_str()), 0);
  ASSERT_TRUE((*log)->reopen());
  r.request_id = "after";
  (*log)->write(r, line);
  (*log)->flush();
  auto text = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string rotated = text(path + ".1");
  const std::string fresh = text(path);
  EXPECT_NE(rotated.find("\"before\""), std::string::npos) << rotated;
  EXPECT_EQ(rotated.find("\"after\""), std::string::npos) << rotated;
  EXPECT_NE(fresh.find("\"after\""), std::string::npos) << fresh;
  EXPECT_EQ(fresh.find("\"before\""), std::string::npos) << fresh;
}

// The line an access log writes for one record; empty when none was written.
std::string logged_line(const AccessRecord& r) {
  const std::string path = testing::temp_dir() + "/access.log";
  auto log = AccessLog::open(path);
  EXPECT_TRUE(log.ok()) << log.error().message;
  if (!log.ok()) return "";
  std::string line;
  (*log)->write(r, line);
  (*log)->flush();
  std::ifstream in(path);
  std::string written;
  std::getline(in, written);
  return written;
}

// A line fits in PIPE_BUF, which a pipe takes whole: a long path is cut, and the line says so.
TEST(AccessLogTest, ALongPathIsCutSoThatTheLineFits) {
  const std::string long_path = "/" + std::string(8000, '"');
  AccessRecord r;
  r.request_id = "long";
  r.path = long_path;
  const std::string written = logged_line(r);
  ASSERT_FALSE(written.empty());
  EXPECT_LE(written.size() + 1, kMaxLine);
  const auto o = json(written);
  EXPECT_TRUE(o.at("path_cut").as_bool());
  const std::string logged(o.at("path").as_string());
  EXPECT_GT(logged.size(), 1000u);
  EXPECT_EQ(long_path.substr(0, logged.size()), logged);
}

// A request line of 8 KiB may be all method: it is cut to 64 bytes, and the path still fits.
TEST(AccessLogTest, ALongMethodIsCutAndThePathKept) {
  const std::string method(7000, 'M');
  AccessRecord r;
  r.request_id = "long";
  r.method = method;
  r.path = "/api/orders";
  const std::string written = logged_line(r);
  ASSERT_FALSE(written.empty());
  EXPECT_LE(written.size() + 1, kMaxLine);
  const auto o = json(written);
  EXPECT_TRUE(o.at("method_cut").as_bool());
  EXPECT_EQ(o.at("method").as_string(), std::string(64, 'M'));
  EXPECT_EQ(o.at("path").as_string(), "/api/orders");
  EXPECT_EQ(o.count("path_cut"), 0u);
}

TEST(AccessLogTest, ValuesStayJsonInUtf8) {
  const std::pair<std::string, std::string> cases[] = {
      {"plain \"q\" \\", "plain \\\"q\\\" \\\\"},
      {"caf\xc3\xa9 \xe6\x9d\xa5 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe6\x9d\xa5 \xf0\x9f\x98\x80"},
      {"\x01\x7f", "\\u0001\\u007f"},
      {"\xff\xfe-id", "\\u00ff\\u00fe-id"},
      {"/\xc0\xaf", "/\\u00c0\\u00af"},              // an overlong "/"
      {"\xed\xa0\x80", "\\u00ed\\u00a0\\u0080"},    // a surrogate
      {"\xf4\x90\x80\x80", "\\u00f4\\u0090\\u0080\\u0080"},  // past U+10FFFF
      {"a\xe6\x9d", "a\\u00e6\\u009d"},              // cut short
      // The edges of the second byte's range (RFC 3629), each side.
      {"\xc2\x80 \xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf",
       "\xc2\x80 \xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf"},
      {"\xe0\x9f\xbf", "\\u00e0\\u009f\\u00bf"},
      {"\xf0\x8f\xbf\xbf", "\\u00f0\\u008f\\u00bf\\u00bf"},
      {"\x80 \xf5\xc1", "\\u0080 \\u00f5\\u00c1"},
  };
  for (const auto& [in, expected] : cases) {
    std::string out;
    append_json_escaped(out, in);
    EXPECT_EQ(out, expected);
    boost::system::error_code ec;
    (void)boost::json::parse("\"" + out + "\"", ec);
    EXPECT_FALSE(ec) << out;
  }
}

// A client that closes its connection before its body is whole has left: that is a 499 in the log,
// not bad input, and nothing is answered (the upstream got the start of the body, and sees the
// connection close).
TEST_F(GatewayTest, ABodyCutShortByTheClientClosingIsTheClientLeaving) {
  for (const std::string& cut :
       {std::string("POST /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: cut-length\r\n"
                    "Content-Length: 10\r\n\r\nhello"),
        std::string("POST /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: cut-chunked\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n5\r\nhel")}) {
    const int fd = connect_to_loopback(gw_->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, cut.data(), cut.size(), MSG_NOSIGNAL), static_cast<ssize_t>(cut.size()));
    ::shutdown(fd, SHUT_WR);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    EXPECT_EQ(out, "") << cut;
    const std::string id = cut.find("chunked") != std::string::npos ? "cut-chunked" : "cut-length";
    const auto logged = json(access_log_line(id));
    EXPECT_EQ(logged.at("status").as_int64(), 499) << id;
    EXPECT_EQ(str(logged, "reason"), "client_closed_request") << id;
  }
}

// A request refused before its path is read is logged by its path alone, as every other: a query may
// carry a secret.
TEST_F(GatewayTest, ARequestRefusedWhileReadingIsLoggedWithoutItsQuery) {
  const std::string out = raw("GET /echo/x?token=s3cret HTTP/1.1\r\nX-Request-Id: two-hosts\r\nHost: a\r\nHost: b\r\n"
                              "Connection: close\r\n\r\n");
  EXPECT_EQ(testing::raw_status(out), 400) << out;
  const std::string line = access_log_line("two-hosts");
  EXPECT_EQ(str(json(line), "path"), "/echo/x") << line;
  EXPECT_EQ(line.find("s3cret"), std::string::npos) << line;
}

// A caller named twice is refused, whichever name comes first: the upstream, or a log reading the
// other, would take the request for another caller's.
TEST_F(GatewayTest, ACallerNamedTwiceIsRefused) {
  for (const char* keys : {"X-System-Key: crm\r\nX-System-Key: erp\r\n", "X-System-Key: erp\r\nx-system-key: crm\r\n",
                           "X-System-Key: crm\r\nX-System-Key: crm\r\n", "X-Api-Key: a\r\nX-Api-Key: b\r\n"}) {
    const std::string out = raw(std::string("GET /echo/x HTTP/1.1\r\nHost: a\r\n") + keys + "Connection: close\r\n\r\n");
    EXPECT_EQ(testing::raw_status(out), 400) << keys;
    EXPECT_NE(out.find("\"bad_request\""), std::string::npos) << out;
  }
  EXPECT_EQ(upstream_->requests(), 0);
}

// An HTTP/1.0 request may come without Host; it goes up in HTTP/1.1, which needs one: the target's.
TEST_F(GatewayTest, AnHttp10RequestWithoutHostGoesUpWithTheTargets) {
  const std::string out = raw("GET /echo/x HTTP/1.0\r\nX-System-Key: crm\r\n\r\n");
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const auto h = json(out.substr(out.find("\r\n\r\n") + 4)).at("headers").as_object();
  EXPECT_EQ(str(h, "Host"), "127.0.0.1:" + std::to_string(upstream_->port()));
  // One with a Host keeps it.
  const std::string kept = raw("GET /echo/x HTTP/1.0\r\nHost: api.example\r\nX-System-Key: crm\r\n\r\n");
  ASSERT_EQ(testing::raw_status(kept), 200) << kept;
  EXPECT_EQ(str(json(kept.substr(kept.find("\r\n\r\n") + 4)).at("headers").as_object(), "Host"), "api.example");
}

// A target in absolute form (RFC 9112 3.2.2: a server must accept it) is routed by its path and
// goes upstream in origin form, with its authority as the only Host; one whose authority is not a
// host is refused.
TEST_F(GatewayTest, AnAbsoluteFormTargetIsRoutedByItsPathWithItsAuthorityAsHost) {
  const std::string out = raw("GET HTTP://api.example:8443/echo/x?y=1 HTTP/1.1\r\nHost: other\r\nX-System-Key: crm\r\n"
                              "X-Request-Id: absolute\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const auto echo = json(out.substr(out.find("\r\n\r\n") + 4));
  EXPECT_EQ(str(echo, "path"), "/echo/x");
  EXPECT_EQ(str(echo, "query"), "y=1");
  EXPECT_EQ(str(echo.at("headers").as_object(), "Host"), "api.example:8443");
  EXPECT_EQ(str(json(access_log_line("absolute")), "path"), "/echo/x");
  for (const char* target : {"http:///echo/x", "http://user@api.example/echo/x", "http://a b/echo/x",
                             "http://api.example/echo/../admin"}) {
    const std::string refused =
        raw(std::string("GET ") + target + " HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(testing::raw_status(refused), 400) << target;
  }
  EXPECT_EQ(upstream_->requests(), 1);
}

// A request id that is not one (not visible ASCII) is replaced by the gateway's own, so that the
// access log stays JSON in UTF-8 and the upstream gets a clean field.
TEST_F(GatewayTest, ARequestIdThatIsNotOneIsReplaced) {
  const std::string out =
      raw("GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: \xff\xfe-id\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(testing::raw_status(out), 200) << out;
  const auto h = json(out.substr(out.find("\r\n\r\n") + 4)).at("headers").as_object();
  const std::string id = str(h, "X-Request-Id");
  EXPECT_EQ(id.size(), 24u) << id;
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  EXPECT_NE(out.find("X-Request-Id: " + id + "\r\n"), std::string::npos) << out;
  // 128 characters are kept; 129 are not.
  for (const std::size_t n : {128u, 129u}) {
    const std::string given(n, 'r');
    const std::string reply =
        raw("GET /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: " + given + "\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(reply.find("X-Request-Id: " + given + "\r\n") != std::string::npos, n == 128) << n;
  }
}

// Sends head, then `body` bytes in 64 KiB pieces, on a thread of its own, until done or refused.
std::thread upload_in_pieces(int fd, const std::string& head, std::size_t body) {
  return std::thread([fd, head, body] {
    (void)::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    const std::string piece(64 * 1024, 'x');
    for (std::size_t sent = 0; sent < body;) {
      const ssize_t n = ::send(fd, piece.data(), std::min(piece.size(), body - sent), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
  });
}

// An upstream that refuses an upload before it has all of it answers early and stops reading: its
// answer reaches the client, rather than a 502 for the write that failed, and the breaker counts
// no failure. The client's connection ends (the rest of its body was not read), and the answer says
// so.
TEST_F(GatewayTest, AnUpstreamsEarlyAnswerToAnUploadReachesTheClient) {
  ClosingUpstream refusing("HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo long",
                           ClosingUpstream::After::kEarly);
  gw_.reset();
  start(replace_all(config_text("", refusing.port()), "max_body_bytes: 4096", "max_body_bytes: 67108864"));
  constexpr std::size_t kBody = 8u << 20;
  const std::string head = "POST /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nContent-Length: " +
                           std::to_string(kBody) + "\r\n\r\n";
  // Twice: two failures in a window of two would open the breaker.
  for (int i = 0; i < 2; ++i) {
    const int fd = connect_to_loopback(gw_->port());
    ASSERT_GE(fd, 0);
    std::thread upload = upload_in_pieces(fd, head, kBody);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    ::shutdown(fd, SHUT_RDWR);
    upload.join();
    ::close(fd);
    EXPECT_EQ(testing::raw_status(out), 413) << i << ": " << out.substr(0, 300);
    EXPECT_NE(out.substr(0, out.find("\r\n\r\n") + 2).find("\r\nConnection: close\r\n"), std::string::npos)
        << i << ": " << out.substr(0, 300);
    EXPECT_EQ(out.substr(out.find("\r\n\r\n") + 4), "too long") << i;
  }
  EXPECT_NE(metrics().find("sluice_breaker_state{upstream=\"closing\",state=\"closed\"} 1"), std::string::npos);
}

// An upstream that answers an upload early and then neither reads nor closes has its answer relayed
// too: the write of the body it does not read stops (it waited out the upstream's timeout, 504).
TEST_F(GatewayTest, AnUpstreamsEarlyAnswerStopsAWriteItDoesNotRead) {
  ClosingUpstream refusing("HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo long",
                           ClosingUpstream::After::kEarlyHold);
  gw_.reset();
  start(replace_all(config_text("", refusing.port()), "max_body_bytes: 4096", "max_body_bytes: 67108864"));
  constexpr std::size_t kBody = 32u << 20;
  const std::string head = "POST /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nContent-Length: " +
                           std::to_string(kBody) + "\r\n\r\n";
  const int fd = connect_to_loopback(gw_->port());
  ASSERT_GE(fd, 0);
  std::thread upload = upload_in_pieces(fd, head, kBody);
  const std::string out = read_until(fd, "too long");
  ::shutdown(fd, SHUT_RDWR);
  upload.join();
  ::close(fd);
  EXPECT_EQ(testing::raw_status(out), 413) << out.substr(0, 300);
}

// An upstream that answers an upload early while the client pauses it (a 413 after the first
// bytes) has its answer relayed at once: the gateway watches the upstream while it waits on the
// client, rather than finding the answer only when its next write fails (here never: the client
// waits for the answer, and was sent a 408 at the header timeout instead).
TEST_F(GatewayTest, AnUpstreamsEarlyAnswerReachesAClientThatPausesItsUpload) {
  ClosingUpstream refusing("HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo long",
                           ClosingUpstream::After::kEarly);
  gw_.reset();
  start(replace_all(replace_all(config_text("", refusing.port()), "max_body_bytes: 4096", "max_body_bytes: 1048576"),
                    "header_timeout: 500ms", "header_timeout: 5s"));
  const std::string request = "POST /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: paused-upload\r\n"
                              "Content-Length: 124000\r\n\r\n" + std::string(1000, 'x');
  const auto start = std::chrono::steady_clock::now();
  const int fd = connect_and_send(gw_->port(), request);
  ASSERT_GE(fd, 0);
  const std::string out = read_until(fd, "too long");
  ::close(fd);
  EXPECT_EQ(testing::raw_status(out), 413) << out;
  EXPECT_NE(out.find("\r\nConnection: close\r\n"), std::string::npos) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << "answered at once, not at the header timeout";
  EXPECT_EQ(str(json(access_log_line("paused-upload")), "reason"), "ok");
}

// A 2xx may come early from an upstream that still reads the body (a stream that answers at once):
// the upload goes on, whole, also across a pause of the client's. Only an answer of 300 or more, or
// a close, cuts it.
TEST_F(GatewayTest, AnEarly2xxFromAnUpstreamThatStillReadsLetsTheUploadGoOn) {
  constexpr std::size_t kBody = 4u << 20;
  std::uint16_t port = 0;
  const int listener = listen_on_loopback(1, &port);
  ASSERT_GE(listener, 0);
  std::atomic<bool> answered{false};
  std::atomic<std::size_t> received{0};
  std::thread upstream([&] {
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    std::string in;
    char buf[65536];
    while (in.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, static_cast<std::size_t>(n));
    }
    static constexpr std::string_view kAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    (void)::send(c, kAnswer.data(), kAnswer.size(), MSG_NOSIGNAL);
    answered = true;
    std::size_t body = in.size() - in.find("\r\n\r\n") - 4;
    for (ssize_t n; body < kBody && (n = ::recv(c, buf, sizeof buf, 0)) > 0;) body += static_cast<std::size_t>(n);
    received = body;
    ::close(c);
  });
  gw_.reset();
  start(replace_all(config_text("", port), "max_body_bytes: 4096", "max_body_bytes: 67108864"));
  const int fd = connect_to_loopback(gw_->port());
  ASSERT_GE(fd, 0);
  const std::string first = "POST /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nContent-Length: " +
                            std::to_string(kBody) + "\r\n\r\n" + std::string(1000, 'x');
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL), static_cast<ssize_t>(first.size()));
  // The client pauses once the answer is there, for longer than the gateway's first looks at the
  // upstream (10, 30, 70 ms): for as long as the gateway takes to time out a request to the echo
  // upstream (300 ms), then sends the rest.
  ASSERT_TRUE(testing::eventually([&] { return answered.load(); }));
  EXPECT_EQ(get("/echo/x?delay_ms=5000", "crm").status, 504);
  std::thread upload = upload_in_pieces(fd, "", kBody - 1000);
  const std::string out = read_until(fd, "\r\n\r\nok");
  upload.join();
  ::close(fd);
  upstream.join();
  ::close(listener);
  EXPECT_EQ(testing::raw_status(out), 200) << out;
  EXPECT_EQ(received.load(), kBody);
}

// A client refused before its upload ends (413 at the header here) can send the rest and read the
// answer: the gateway's close lingers, reading what still comes, rather than resetting the
// connection, which would fail the client's sends.
TEST_F(GatewayTest, ARefusedUploadCanFinishSendingBeforeTheConnectionCloses) {
  const int fd = connect_to_loopback(gw_->port());
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nContent-Length: 1048576\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  EXPECT_EQ(testing::raw_status(out), 413) << out;
  // The answer is in, and the gateway's side is shut: the body still goes, every byte of it.
  const std::string piece(64 * 1024, 'x');
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL), static_cast<ssize_t>(piece.size())) << i;
  }
  ::close(fd);
}

// Its access log line counts the latency from the head's first byte, not from its timeout.
TEST_F(GatewayTest, AHeaderThatTakesTooLongGets408AndTheConnectionClosed) {
  const auto start = std::chrono::steady_clock::now();
  const std::string out = raw("GET /echo/x HTTP/1.1\r\nHost: a\r\n", 5s);
  EXPECT_EQ(testing::raw_status(out), 408);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << "closed by the server, not by the test's wait";
  EXPECT_EQ(upstream_->requests(), 0);
  const std::size_t at = out.find("X-Request-Id: ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string id = out.substr(at + 14, out.find("\r\n", at) - at - 14);
  const auto logged = json(access_log_line(id));
  EXPECT_EQ(str(logged, "reason"), "request_timeout");
  EXPECT_GT(logged.at("latency_ms").to_number<double>(), 400.0) << "header_timeout is 500ms";
}

// A head refused before it ended, for its time (408) or its size (431), names the method and path of
// its request line in the log when that line came whole (the path without its query, as for every
// request); one whose request line did not end names none.
TEST_F(GatewayTest, AHeadRefusedBeforeItEndedLogsItsRequestLine) {
  const auto logged = [&](const std::string& bytes, int status) {
    const std::string out = raw(bytes, 5s);
    EXPECT_EQ(testing::raw_status(out), status) << out;
    const std::size_t at = out.find("X-Request-Id: ");
    if (at == std::string::npos) {
      ADD_FAILURE() << "no X-Request-Id: " << out;
      return boost::json::object{};
    }
    return json(access_log_line(out.substr(at + 14, out.find("\r\n", at) - at - 14)));
  };
  const auto expect = [](const boost::json::object& o, const std::string& method, const std::string& path,
                         int status, const std::string& reason) {
    EXPECT_EQ(str(o, "method"), method);
    EXPECT_EQ(str(o, "path"), path);
    EXPECT_EQ(o.at("status").as_int64(), status);
    EXPECT_EQ(str(o, "reason"), reason);
    EXPECT_EQ(str(o, "system"), "");
    EXPECT_EQ(str(o, "interface"), "");
    EXPECT_EQ(str(o, "client_ip"), "127.0.0.1");
    EXPECT_TRUE(o.at("upstream_latency_ms").is_null());
  };
  expect(logged("POST /echo/x?token=secret HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\n", 408), "POST", "/echo/x", 408,
         "request_timeout");
  expect(logged("\r\nGET /echo/y HTTP/1.1\r\n", 408), "GET", "/echo/y", 408, "request_timeout");
  expect(logged("POST /echo/x?token=sec", 408), "", "", 408, "request_timeout");
  expect(logged("GET /echo/x HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n", 431), "GET",
         "/echo/x", 431, "header_too_large");
  EXPECT_EQ(upstream_->requests(), 0);
}

// A request line that came whole and is not one (HTTP/0.9's "GET /", no version) is a 400 at once,
// and one of another major version (HTTP/2.0 sent as text) a 505 (RFC 9110 15.6.6), not a 408 once
// header_timeout has passed for a head that would never be whole; the log names its method and path.
TEST_F(GatewayTest, ARequestLineWithoutAVersionOrOfAnotherIsAnsweredAtOnce) {
  gw_.reset();
  start(replace_all(config_text(), "header_timeout: 500ms", "header_timeout: 60s"));
  for (const auto& [bytes, method, path, status, reason] :
       {std::tuple{"GET /echo/x\r\n", "GET", "/echo/x", 400, "bad_request"},
        std::tuple{"POST /echo/y?q=1 HTTP/2.0\r\nHost: a\r\n", "POST", "/echo/y", 505, "http_version_not_supported"}}) {
    const std::string out = raw(bytes, 30s);  // the answer, or the gateway's close, ends it
    ASSERT_EQ(testing::raw_status(out), status) << bytes << ": " << out;
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
    const std::size_t at = out.find("X-Request-Id: ");
    ASSERT_NE(at, std::string::npos) << out;
    const auto logged = json(access_log_line(out.substr(at + 14, out.find("\r\n", at) - at - 14)));
    EXPECT_EQ(str(logged, "method"), method);
    EXPECT_EQ(str(logged, "path"), path);
    EXPECT_EQ(str(logged, "reason"), reason);
  }
  EXPECT_EQ(upstream_->requests(), 0);
}

TEST_F(GatewayTest, AnIdleConnectionIsClosedQuietly) {
  EXPECT_EQ(raw("", 5s), "");
}

// --- threads ------------------------------------------------------------------------------------

// This process's threads by name: the CPUs each may run on, as /proc lists them ("0-1", "3").
using testing::cpus_of_threads;

// Workers are named; with pin_workers, worker i runs on the i-th CPU the process may use (in
// turn), and without, on any of them; either way they serve.
TEST_F(GatewayTest, PinnedWorkersEachRunOnTheirOwnCpu) {
  const std::vector<int> allowed = testing::allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  std::string all;  // the process's (its main thread's)
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("Cpus_allowed_list:")) all = line.substr(line.find_first_not_of(" \t", 18));
  }
  ASSERT_FALSE(all.empty());
  std::map<std::string, std::string> threads;
  ASSERT_TRUE(testing::eventually([&] {
    threads = cpus_of_threads();
    return threads.count("sluice-w0") == 1 && threads.count("sluice-w1") == 1;
  }));
  EXPECT_EQ(threads["sluice-w0"], all);
  EXPECT_EQ(threads["sluice-w1"], all);

  gw_.reset();
  start(config_text(), /*pin_workers=*/true);
  ASSERT_TRUE(testing::eventually([&] {
    threads = cpus_of_threads();
    return threads["sluice-w0"] == std::to_string(allowed[0]) &&
           threads["sluice-w1"] == std::to_string(allowed[1 % allowed.size()]);
  })) << threads["sluice-w0"] << " " << threads["sluice-w1"];
  for (int i = 0; i < 4; ++i) EXPECT_EQ(get("/echo/x").status, 200);  // on both workers
}

// --- drain --------------------------------------------------------------------------------------

// The admin listener's /healthz says 503 meanwhile.
TEST_F(GatewayTest, DrainFinishesRequestsInFlightAndRefusesNewConnections) {
  HttpClient idle(gw_->port());
  ASSERT_EQ(idle.get("/echo/x", "crm").status, 200);  // an idle kept-alive connection
  // The gauge drops just after the response is written: wait for it before counting the next.
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 0; }));
  std::atomic<int> status{0};
  std::string connection;
  std::thread slow([&] {
    HttpClient c(gw_->port());
    const HttpResponse r = c.get("/slow?delay_ms=1000", "crm");
    connection = r.header("connection");
    status = r.status;
  });
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  HttpClient admin(gw_->admin_port());
  EXPECT_EQ(admin.get("/healthz").status, 200);
  gw_->drain();
  EXPECT_TRUE(testing::eventually([&] { return !testing::can_connect(gw_->port()); }));
  // A load balancer polling the admin listener takes the instance out while it drains.
  const HttpResponse health = admin.get("/healthz");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.body, R"({"status":"draining"})");
  slow.join();
  EXPECT_EQ(status.load(), 200);
  EXPECT_EQ(connection, "close");
  gw_->wait();
}

// A drain_timeout as long as a duration can be (about 292 years) is a deadline that never comes,
// not one past already (its end overflowing the clock), which would cut what is in flight at once.
TEST_F(GatewayTest, TheLongestDrainTimeoutCutsNothing) {
  gw_.reset();
  start(config_text("drain_timeout: 106751d\n"));
  std::atomic<int> status{0};
  std::thread slow([&] { status = HttpClient(gw_->port()).get("/slow?delay_ms=300", "crm").status; });
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  gw_->drain();
  slow.join();
  EXPECT_EQ(status.load(), 200);
  gw_->wait();
}

// An admin long poll held when the gateway drains is answered at once with what it has (here "not
// modified") and its connection closed, not cut off by the stop without an answer; one that comes
// while it drains is told so (503, Retry-After), not held nor answered at once again and again.
TEST_F(GatewayTest, AHeldLongPollIsAnsweredWhenTheGatewayDrains) {
  std::atomic<int> asked{0};
  gw_->add_admin_route("GET", "/admin/v1/poll", [&](const AdminRequest&) {
    ++asked;
    AdminResponse r{304, "application/json", ""};
    r.hold = std::chrono::seconds(60);
    return r;
  });
  std::atomic<int> slow_status{0};
  std::thread slow([&] {  // keeps the drain going
    HttpClient c(gw_->port());
    slow_status = c.get("/slow?delay_ms=1500", "crm").status;
  });
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  const std::string poll = "GET /admin/v1/poll HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::string answer;
  std::thread held([&] { answer = testing::raw_exchange(gw_->admin_port(), poll, 10s); });
  ASSERT_TRUE(testing::eventually([&] { return asked.load() >= 2; }));  // held: asked again
  gw_->drain();
  held.join();
  EXPECT_EQ(testing::raw_status(answer), 304) << answer;
  EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos) << answer;
  const std::string later = testing::raw_exchange(gw_->admin_port(), poll, 10s);
  EXPECT_EQ(testing::raw_status(later), 503) << later;
  EXPECT_NE(later.find("\"reason\":\"draining\""), std::string::npos) << later;
  EXPECT_NE(later.find("Retry-After: 1\r\n"), std::string::npos) << later;
  slow.join();
  EXPECT_EQ(slow_status.load(), 200);
  gw_->wait();
}

// A connection whose next request has begun to come when the drain begins is not idle: that
// request is read whole and answered (with Connection: close), not cut off unanswered and unlogged.
TEST_F(GatewayTest, ARequestBegunWhenTheDrainBeginsIsAnswered) {
  const int fd = connect_and_send(gw_->port(), "GET /_sluice/healthz HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_GE(fd, 0);
  ASSERT_NE(read_until(fd, "}").find("\"ok\"}"), std::string::npos);  // accepted, and between requests
  const std::string first = "GET /echo/begun HTTP/1.1\r\nHost: a\r\n";
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL), static_cast<ssize_t>(first.size()));
  gw_->drain();
  const std::string rest = "X-System-Key: crm\r\nX-Request-Id: begun\r\n\r\n";
  ASSERT_EQ(::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL), static_cast<ssize_t>(rest.size()));
  const std::string answer = read_until(fd, "\r\n\r\n");
  ::close(fd);
  EXPECT_EQ(testing::raw_status(answer), 200) << answer;
  EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos) << answer;
  gw_->wait();
  gw_.reset();  // the access log is written out as the process exits
  EXPECT_EQ(json(access_log_line("begun")).at("status").as_int64(), 200);
}

// A request still waiting on its upstream when drain_timeout passes is answered (504: the upstream
// did not answer in the time left) and logged, rather than cut off by the stop with neither.
TEST_F(GatewayTest, ARequestLeftAtTheDrainTimeoutIsAnsweredAndLogged) {
  gw_.reset();
  start("drain_timeout: 200ms\n" + config_text());
  std::atomic<int> status{0};
  std::thread slow([&] {
    HttpClient c(gw_->port());
    status = c.request("GET", "/slow?delay_ms=5000", {{"X-System-Key", "crm"}, {"X-Request-Id", "cut-by-drain"}})
                 .status;
  });
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  gw_->drain();
  gw_->wait();
  slow.join();
  gw_.reset();  // the access log is written out as the process exits
  EXPECT_EQ(status.load(), 504);
  const auto o = json(access_log_line("cut-by-drain"));
  EXPECT_EQ(o.at("status").as_int64(), 504);
  EXPECT_EQ(str(o, "reason"), "upstream_timeout");
}

// A stream still flowing at the drain timeout, its every read and write done at once, is cut and
// logged too: its reads and writes got no new deadline after the cut.
TEST_F(GatewayTest, AStreamStillFlowingAtTheDrainTimeoutIsCutAndLogged) {
  std::uint16_t port = 0;
  const int listener = listen_on_loopback(1, &port);
  ASSERT_GE(listener, 0);
  std::atomic<bool> streaming{true};
  std::thread upstream([&] {
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    read_until(c, "\r\n\r\n");
    const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string chunk = "400\r\n" + std::string(1024, 'x') + "\r\n";
    bool ok = ::send(c, head.data(), head.size(), MSG_NOSIGNAL) > 0;
    while (ok && streaming) ok = ::send(c, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0;
    ::close(c);
  });
  gw_.reset();
  start("drain_timeout: 200ms\n" + config_text("", port));
  const int fd = connect_and_send(gw_->port(),
                                  "GET /closing HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: stream-cut\r\n\r\n");
  ASSERT_GE(fd, 0);
  std::thread reader([fd] {
    char buf[16384];
    while (::recv(fd, buf, sizeof buf, 0) > 0) {
    }
  });
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  gw_->drain();
  gw_->wait();
  gw_.reset();  // the access log is written out as the process exits
  reader.join();
  ::close(fd);
  streaming = false;
  ::shutdown(listener, SHUT_RDWR);
  upstream.join();
  ::close(listener);
  const auto o = json(access_log_line("stream-cut"));
  EXPECT_EQ(o.at("status").as_int64(), 200);
  EXPECT_EQ(str(o, "reason"), "upstream_timeout");  // as for a stream that stalled
}

// An upload still coming at the drain timeout is answered 408 and logged.
TEST_F(GatewayTest, AnUploadLeftAtTheDrainTimeoutIsAnsweredAndLogged) {
  gw_.reset();
  start("drain_timeout: 200ms\n" + config_text());
  const int fd = connect_and_send(gw_->port(),
                          "POST /echo/x HTTP/1.1\r\nHost: a\r\nX-System-Key: crm\r\nX-Request-Id: upload-cut\r\n"
                          "Content-Length: 100\r\n\r\nonly part");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::eventually([&] { return gw_->metrics().in_flight() == 1; }));
  gw_->drain();
  gw_->wait();
  const std::string answer = read_until(fd, "\r\n\r\n");
  ::close(fd);
  gw_.reset();  // the access log is written out as the process exits
  EXPECT_EQ(testing::raw_status(answer), 408) << answer;
  const auto o = json(access_log_line("upload-cut"));
  EXPECT_EQ(o.at("status").as_int64(), 408);
  EXPECT_EQ(str(o, "reason"), "request_timeout");
}

}  // namespace
}  // namespace sluice::gateway
