// Caller authentication end to end over real sockets, in front of the demo echo upstream: API keys,
// signed requests (their bodies reach the upstream intact, 100-continue included), /decide, no limit
// key for a caller that failed, and the admin listener's built-in routes off loopback.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <atomic>
#include <numeric>
#include <optional>

#include "config/crypto.h"
#include "control_test.h"
#include "gateway/caller_auth.h"
#include "gateway/demo.h"
#include "gateway/gateway.h"
#include "sluice/local_store.h"

namespace sluice::gateway {
namespace {

using testing::HttpClient;
using testing::HttpResponse;
using control_test::reason_of;

constexpr Nanos kT0 = std::chrono::seconds(1'800'000'000);
constexpr const char* kApiKey = "sluice_ak_test-key";
constexpr const char* kSecret = "sluice_hs_test-secret";

class ServerAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto up = DemoUpstream::start();
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(*up);
    const std::string yaml =
        "upstreams: [{name: app, targets: [\"127.0.0.1:" + std::to_string(upstream_->port()) + "\"]}]\n"
        "interfaces:\n"
        "  - id: echo\n"
        "    path: /echo/*\n"
        "    upstream: app\n"
        "    limits:\n"
        "      - {algorithm: fixed_window, limit: 1000, period: 1h, key_by: client_ip}\n"
        "      - {algorithm: fixed_window, limit: 1000, period: 1h, key_by: \"header:X-User\"}\n"
        "systems:\n"
        "  - key: crm\n"
        "    auth: api_key\n"
        "    interfaces: [echo]\n"
        "    credentials: [{id: ak_1, kind: api_key, api_key_sha256: " + config::sha256_hex(kApiKey) +
        ", created: \"2027-01-01T00:00:00Z\"}]\n"
        "  - key: erp\n"
        "    auth: hmac\n"
        "    interfaces: [echo]\n"
        "    credentials: [{id: hs_1, kind: hmac, sealed_secret: \"" + key_.seal(kSecret) +
        "\", created: \"2027-01-01T00:00:00Z\"}]\n";
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_listen = "0.0.0.0:0";
    o.clock = &clock_;
    o.access_log = "off";
    o.log = [](std::string_view) {};
    o.limiter = std::make_shared<StoreLimiter>(store_);
    o.secret_key = key_;
    o.nonce_capacity = nonce_capacity_;
    o.admin_guard = [](const AdminRequest& r) { return r.from_loopback || r.header("Authorization") == "Bearer t"; };
    auto g = Gateway::start(o, control_test::parse(yaml));
    ASSERT_TRUE(g.ok()) << g.error().message;
    gw_ = std::move(*g);
  }

  // The signature headers for a request, signed now with secret.
  std::vector<std::pair<std::string, std::string>> signed_headers(const std::string& method, const std::string& target,
                                                                  const std::string& body, const std::string& nonce,
                                                                  const std::string& secret = kSecret,
                                                                  Nanos skew = Nanos{0}) {
    const std::string ts = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(clock_.now() + skew).count());
    return {{"X-System-Key", "erp"},
            {"X-Sluice-Timestamp", ts},
            {"X-Sluice-Nonce", nonce},
            {"X-Sluice-Signature", sign_request(secret, method, target, ts, nonce, body)}};
  }

  HttpResponse post(const std::string& target, const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& headers) {
    return HttpClient(gw_->port()).request("POST", target, headers, body);
  }

  ManualClock clock_{kT0};
  config::SecretKey key_ = *config::SecretKey::parse(config::to_hex(config::random_bytes(32)));
  LocalStore store_{{.clock = &clock_}};
  std::unique_ptr<DemoUpstream> upstream_;
  std::unique_ptr<Gateway> gw_;
  std::size_t nonce_capacity_ = NonceCache::kDefaultCapacity;
};

TEST_F(ServerAuthTest, AnApiKeyIdentifiesItsSystemAndAWrongOneIs401WithItsReason) {
  HttpClient c(gw_->port());
  const HttpResponse ok = c.request("GET", "/echo/a", {{"X-Api-Key", kApiKey}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_NE(ok.body.find("\"X-Sluice-System\":\"crm\""), std::string::npos) << ok.body;
  EXPECT_EQ(ok.body.find(kApiKey), std::string::npos) << "the key reached the upstream: " << ok.body;
  const HttpResponse bad = c.request("GET", "/echo/a", {{"X-Api-Key", "sluice_ak_guess"}});
  EXPECT_EQ(bad.status, 401);
  EXPECT_EQ(reason_of(bad), "api_key_invalid");
  EXPECT_EQ(reason_of(c.request("GET", "/echo/a", {{"X-System-Key", "crm"}})), "api_key_invalid");
}

TEST_F(ServerAuthTest, ASignedRequestReachesTheUpstreamWithItsBodyIntactOnce) {
  const std::string body = R"({"amount": 12.50, "currency": "EUR"})";
  const auto headers = signed_headers("POST", "/echo/pay?order=7", body, "nonce-1");
  const HttpResponse ok = post("/echo/pay?order=7", body, headers);
  ASSERT_EQ(ok.status, 200) << ok.body;
  boost::system::error_code ec;
  const auto echo = boost::json::parse(ok.body, ec).as_object();
  EXPECT_EQ(echo.at("body").as_string(), body);
  EXPECT_EQ(echo.at("query").as_string(), "order=7");
  const HttpResponse replay = post("/echo/pay?order=7", body, headers);
  EXPECT_EQ(replay.status, 401);
  EXPECT_EQ(reason_of(replay), "signature_replayed");
}

class SmallNonceCacheTest : public ServerAuthTest {
 protected:
  SmallNonceCacheTest() { nonce_capacity_ = 16; }  // one nonce per shard
};

// A system that signs more requests within the window than the cache has room for is told to slow
// down (429, with when room comes), not that its requests were replayed; nothing reaches upstream.
TEST_F(SmallNonceCacheTest, ASignedRequestTheCacheHasNoRoomForIs429WithRetryAfter) {
  int passed = 0;
  HttpResponse refused;
  for (int i = 0; i < 4096 && refused.status == 0; ++i) {
    const std::string nonce = "n-" + std::to_string(i);
    const HttpResponse r = post("/echo/pay", "{}", signed_headers("POST", "/echo/pay", "{}", nonce));
    if (r.status == 200) {
      ++passed;
    } else {
      refused = r;
    }
  }
  EXPECT_GT(passed, 0);
  EXPECT_LE(passed, 16);
  ASSERT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(reason_of(refused), "signature_rate_limited");
  EXPECT_EQ(refused.header("retry-after"), "301");  // when the first nonce's window has passed
  EXPECT_EQ(upstream_->requests(), passed);
  clock_.advance(std::chrono::seconds(301));
  EXPECT_EQ(post("/echo/pay", "{}", signed_headers("POST", "/echo/pay", "{}", "after")).status, 200);
}

TEST_F(ServerAuthTest, TamperedExpiredAndUnsignedRequestsAreRefusedWithTheirReasons) {
  const auto signed_for_one = signed_headers("POST", "/echo/pay", R"({"amount":1})", "n-1");
  EXPECT_EQ(reason_of(post("/echo/pay", R"({"amount":1000})", signed_for_one)), "signature_invalid");
  EXPECT_EQ(reason_of(post("/echo/pay", "{}", signed_headers("POST", "/echo/pay", "{}", "n-2", "sluice_hs_guess"))),
            "signature_invalid");
  EXPECT_EQ(reason_of(post("/echo/pay", "{}", signed_headers("POST", "/echo/pay", "{}", "n-3", kSecret,
                                                            std::chrono::seconds(-301)))),
            "signature_expired");
  EXPECT_EQ(reason_of(post("/echo/pay", "{}", {{"X-System-Key", "erp"}})), "signature_invalid");
  EXPECT_EQ(upstream_->requests(), 0);
}

TEST_F(ServerAuthTest, ASignedRequestThatExpectsContinueGetsOneContinueThenItsAnswer) {
  const std::string body = "hello";
  std::string bytes = "POST /echo/c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n";
  for (const auto& [k, v] : signed_headers("POST", "/echo/c", body, "n-1")) bytes += k + ": " + v + "\r\n";
  bytes += "\r\n" + body;
  const std::string out = testing::raw_exchange(gw_->port(), bytes);
  std::size_t continues = 0;
  for (std::size_t i = 0; (i = out.find("HTTP/1.1 100 Continue", i)) != std::string::npos; ++i) ++continues;
  EXPECT_EQ(continues, 1u) << out;
  EXPECT_NE(out.find("HTTP/1.1 200 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("\"body\":\"hello\""), std::string::npos) << out;
}

// The signature's window is judged once the body is in: a request whose body comes after the window
// has closed is refused, whenever its header came (else a replay could hold its body back until
// the original's nonce had been forgotten). "100 Continue" says the gateway has the header.
TEST_F(ServerAuthTest, ASignatureIsJudgedWhenItsBodyIsInNotWhenItsHeaderCame) {
  const std::string body = "hello";
  std::string head = "POST /echo/c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n"
                     "Connection: close\r\n";
  for (const auto& [k, v] : signed_headers("POST", "/echo/c", body, "n-late")) head += k + ": " + v + "\r\n";
  head += "\r\n";
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  s.connect({boost::asio::ip::make_address("127.0.0.1"), gw_->port()});
  boost::asio::write(s, boost::asio::buffer(head));
  std::string got;
  char buf[4096];
  while (got.find("\r\n\r\n") == std::string::npos) got.append(buf, s.read_some(boost::asio::buffer(buf)));
  ASSERT_NE(got.find("100 Continue"), std::string::npos) << got;
  clock_.advance(std::chrono::seconds(301));
  boost::asio::write(s, boost::asio::buffer(body));
  std::string out;
  for (boost::system::error_code ec; !ec;) out.append(buf, s.read_some(boost::asio::buffer(buf), ec));
  EXPECT_EQ(testing::raw_status(out), 401) << out;
  EXPECT_NE(out.find("signature_expired"), std::string::npos) << out;
  EXPECT_EQ(upstream_->requests(), 0);
}

TEST_F(ServerAuthTest, CallersThatFailAuthenticationCreateNoLimitState) {
  HttpClient c(gw_->port());
  for (int i = 0; i < 25; ++i) {
    const std::string user = "user-" + std::to_string(i);
    EXPECT_EQ(c.request("GET", "/echo/x", {{"X-Api-Key", "sluice_ak_guess-" + user}, {"X-User", user}}).status, 401);
    auto forged = signed_headers("POST", "/echo/x", "", "n-" + user, "sluice_hs_guess");
    forged.emplace_back("X-User", user);
    EXPECT_EQ(c.request("POST", "/echo/x", forged).status, 401);
  }
  EXPECT_EQ(store_.size(), 0u);
  // They count against the interface they asked for, by reason (once each answer's bookkeeping, which
  // follows the answer, is done).
  auto rejected = [&](const char* reason) {
    const Stats::View view = gw_->stats().view();
    const auto echo = view.interfaces.find("echo");
    if (echo == view.interfaces.end() || echo->second.rejected.count(reason) == 0) return 0;
    const auto& counts = echo->second.rejected.at(reason);
    return std::accumulate(counts.begin(), counts.end(), 0);
  };
  EXPECT_TRUE(testing::eventually([&] { return rejected("api_key_invalid") == 25 && rejected("signature_invalid") == 25; }))
      << rejected("api_key_invalid") << " " << rejected("signature_invalid");
  EXPECT_EQ(c.request("GET", "/echo/x", {{"X-Api-Key", kApiKey}, {"X-User", "real"}}).status, 200);
  EXPECT_EQ(store_.size(), 2u);  // its client address and its X-User
}

TEST_F(ServerAuthTest, DecideAuthenticatesCallersToo) {
  HttpClient c(gw_->port());
  auto decide = [&](const std::string& body) { return c.request("POST", "/_sluice/v1/decide", {}, body); };
  EXPECT_EQ(reason_of(decide(R"({"system":"crm","method":"GET","path":"/echo/a"})")), "api_key_invalid");
  EXPECT_EQ(decide(R"({"system":"crm","method":"GET","path":"/echo/a","headers":{"X-Api-Key":")" +
                   std::string(kApiKey) + "\"}}")
                .status,
            200);
  const std::string payload = "{\"x\":1}";
  boost::json::object headers;
  for (const auto& [k, v] : signed_headers("POST", "/echo/b?y=2", payload, "n-1")) headers[k] = v;
  boost::json::object req{{"system", "erp"}, {"method", "POST"}, {"path", "/echo/b?y=2"}, {"headers", headers},
                          {"body_sha256", config::sha256_hex(payload)}};
  EXPECT_EQ(decide(boost::json::serialize(req)).status, 200);
  EXPECT_EQ(reason_of(decide(boost::json::serialize(req))), "signature_replayed");
  req["body_sha256"] = config::sha256_hex("{\"x\":2}");
  EXPECT_EQ(reason_of(decide(boost::json::serialize(req))), "signature_invalid");
  // Hex in upper case is the same hash: the signature (made over lower case) still holds.
  headers.clear();
  for (const auto& [k, v] : signed_headers("POST", "/echo/b?y=2", payload, "n-2")) headers[k] = v;
  std::string upper = config::sha256_hex(payload);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  req["headers"] = headers;
  req["body_sha256"] = upper;
  EXPECT_EQ(decide(boost::json::serialize(req)).status, 200);
}

// The first IPv4 address of this machine that is not loopback.
std::string non_loopback_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    if (std::string(text).rfind("127.", 0) != 0) found = text;
  }
  freeifaddrs(list);
  return found;
}

// One request to address:port, the status of its answer (0 for none).
int status_from(const std::string& address, std::uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    pollfd p{fd, POLLIN, 0};
    char buf[4096];
    while (::poll(&p, 1, 5000) > 0) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return testing::raw_status(out);
}

TEST_F(ServerAuthTest, MetricsAndHealthNeedATokenOffLoopbackOnly) {
  const std::string address = non_loopback_address();
  ASSERT_FALSE(address.empty()) << "this test needs a network interface with an IPv4 address besides loopback";
  const std::string plain = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  const std::string with_token =
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(status_from("127.0.0.1", gw_->admin_port(), plain), 200);
  EXPECT_EQ(status_from(address, gw_->admin_port(), plain), 401);
  EXPECT_EQ(status_from(address, gw_->admin_port(), with_token), 200);
}

// From loopback, only a request that asks for itself goes without a token: one a reverse proxy on
// the host forwards (its clients are anywhere), or one naming the listener by a name an attacker's
// DNS may point at 127.0.0.1 (a page in the operator's browser: DNS rebinding), needs one.
TEST_F(ServerAuthTest, FromLoopbackAForwardedOrRenamedRequestNeedsAToken) {
  const auto status = [&](const std::string& fields) {
    return status_from("127.0.0.1", gw_->admin_port(),
                       "GET /config HTTP/1.1\r\n" + fields + "Connection: close\r\n\r\n");
  };
  const std::string port = std::to_string(gw_->admin_port());
  for (const std::string& host : std::vector<std::string>{"127.0.0.1", "127.0.0.1:" + port, "localhost:" + port, "LocalHost", "[::1]:" + port,
                                 "[::1]"}) {
    EXPECT_EQ(status("Host: " + host + "\r\n"), 200) << host;
  }
  for (const std::string& fields : std::vector<std::string>{"Host: evil.example:" + port + "\r\n", "Host: localhost.evil.example\r\n",
                                   "Host: [::1\r\n", "Host: 127.0.0.1\r\nX-Forwarded-For: 203.0.113.9\r\n",
                                   "Host: 127.0.0.1\r\nForwarded: for=203.0.113.9\r\n",
                                   "Host: 127.0.0.1\r\nX-Real-IP: 203.0.113.9\r\n"}) {
    EXPECT_EQ(status(fields), 401) << fields;
  }
  EXPECT_EQ(status("Host: evil.example\r\nAuthorization: Bearer t\r\n"), 200);
}

// Every answer of the admin listener is what its Content-Type says (no browser sniffs JSON for HTML).
TEST_F(ServerAuthTest, TheAdminListenerAnswersNoSniff) {
  gw_->add_admin_route("GET", "/admin/v1/", [](const AdminRequest&) {
    return AdminResponse{200, "application/json", "{\"x\":\"<script>\"}"};
  });
  HttpClient c(gw_->admin_port());
  for (const char* path : {"/healthz", "/metrics", "/admin/v1/x", "/nothing"}) {
    EXPECT_EQ(c.get(path).header("x-content-type-options"), "nosniff") << path;
  }
  const std::string answer = testing::raw_exchange(
      gw_->admin_port(), "PUT /admin/v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n");
  EXPECT_NE(answer.find("X-Content-Type-Options: nosniff"), std::string::npos) << answer;
}

TEST_F(ServerAuthTest, TheAdminListenerTakesAWholeConfigurationsBodyAndAnswers413PastItsLimit) {
  gw_->add_admin_route("PUT", "/admin/v1/", [](const AdminRequest& r) {
    return AdminResponse{200, "application/json", "{\"bytes\":" + std::to_string(r.body.size()) + "}"};
  });
  const std::string big(3 << 20, 'x');  // past the old 1 MiB limit
  EXPECT_EQ(HttpClient(gw_->admin_port()).request("PUT", "/admin/v1/config", {}, big).body,
            "{\"bytes\":" + std::to_string(big.size()) + "}");
  const std::string too_big = "PUT /admin/v1/config HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                              std::to_string((16 << 20) + 1) + "\r\n\r\n";
  const std::string answer = testing::raw_exchange(gw_->admin_port(), too_big);
  EXPECT_EQ(testing::raw_status(answer), 413) << answer;
  EXPECT_NE(answer.find("\"reason\":\"body_too_large\""), std::string::npos) << answer;
}

// A route that answers with its body's length, and refuses without "Bearer t" from the head alone.
void add_counting_route(Gateway& gw, std::atomic<int>& handled) {
  gw.add_admin_route(
      "PUT", "/admin/v1/",
      [&handled](const AdminRequest& r) {
        ++handled;
        return AdminResponse{200, "application/json", "{\"bytes\":" + std::to_string(r.body.size()) + "}"};
      },
      [](const AdminRequest& head) -> std::optional<AdminResponse> {
        if (head.header("Authorization") == "Bearer t") return std::nullopt;
        return AdminResponse{401, "application/json", R"({"code":401,"reason":"unauthorized","msg":"no"})"};
      });
}

// A client that sends "Expect: 100-continue" waits for "100 Continue" before it sends its body (a
// strict one for ever): the admin listener says it once it has the head, as the data plane does, on
// every request of a connection; an HTTP/1.0 client, which knows no 1xx, sends its body at once.
TEST_F(ServerAuthTest, TheAdminListenerAnswersExpectContinueOnceItHasTheHead) {
  std::atomic<int> handled{0};
  add_counting_route(*gw_, handled);
  testing::RawConnection c(gw_->admin_port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.send("PUT /admin/v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n"
                       "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    EXPECT_EQ(c.read_until("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n") << "request " << i;
    EXPECT_EQ(handled, i);
    ASSERT_TRUE(c.send("hello"));
    const std::string answer = c.read_until("{\"bytes\":5}");
    EXPECT_EQ(testing::raw_status(answer), 200) << answer;
    EXPECT_NE(answer.find("{\"bytes\":5}"), std::string::npos) << answer;
  }
  const std::string old = testing::raw_exchange(
      gw_->admin_port(), "PUT /admin/v1/x HTTP/1.0\r\nAuthorization: Bearer t\r\nExpect: 100-continue\r\n"
                         "Content-Length: 5\r\n\r\nhello");
  EXPECT_EQ(testing::raw_status(old), 200) << old;
  EXPECT_EQ(old.find("100 Continue"), std::string::npos) << old;
}

// What would be refused whatever the body (no token, no route, a body too large) is answered from
// the head, without "100 Continue", and the connection ends: the body is never read, so the client
// need not send it.
TEST_F(ServerAuthTest, TheAdminListenerRefusesFromTheHeadWhatItWouldRefuseWhateverTheBody) {
  std::atomic<int> handled{0};
  add_counting_route(*gw_, handled);
  const auto exchange = [&](const std::string& head) {
    return testing::raw_exchange(gw_->admin_port(), head + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  };
  const std::string tokenless = exchange("PUT /admin/v1/x HTTP/1.1\r\nHost: x\r\n");
  EXPECT_EQ(testing::raw_status(tokenless), 401) << tokenless;
  EXPECT_NE(tokenless.find("Connection: close"), std::string::npos) << tokenless;
  const std::string routeless = exchange("PUT /elsewhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n");
  EXPECT_EQ(testing::raw_status(routeless), 404) << routeless;
  const std::string address = non_loopback_address();
  ASSERT_FALSE(address.empty()) << "this test needs a network interface with an IPv4 address besides loopback";
  EXPECT_EQ(status_from(address, gw_->admin_port(),
                        "PUT /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"),
            401);
  const std::string too_big = testing::raw_exchange(
      gw_->admin_port(), "PUT /admin/v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nExpect: 100-continue\r\n"
                         "Content-Length: " + std::to_string((16 << 20) + 1) + "\r\n\r\n");
  EXPECT_EQ(testing::raw_status(too_big), 413) << too_big;
  for (const std::string* out : {&tokenless, &routeless, &too_big}) {
    EXPECT_EQ(out->find("100 Continue"), std::string::npos) << *out;
  }
  EXPECT_EQ(handled, 0);
}

}  // namespace
}  // namespace sluice::gateway
