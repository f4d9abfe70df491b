// make_plan: the load modes and their defaults, the serialised requests, and a clear message for
// every kind of bad input.
#include "bench/plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>

namespace sluice::bench {
namespace {

using namespace std::chrono_literals;

Options with_url(std::string url = "http://127.0.0.1:8080/api/orders?x=1") {
  Options o;
  o.url = std::move(url);
  return o;
}

Plan ok(const Options& o) {
  Result<Plan> plan = make_plan(o, 2);
  EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
  return plan.ok() ? std::move(plan).value() : Plan{};
}

// The message of a plan that must fail.
std::string error_of(const Options& o) {
  Result<Plan> plan = make_plan(o, 2);
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : plan.error().message;
}

TEST(Plan, DefaultsToTenSecondsOfClosedLoopOnTenConnections) {
  const Plan p = ok(with_url());
  EXPECT_EQ(p.mode, Mode::kDuration);
  EXPECT_EQ(p.duration, 10s);
  EXPECT_EQ(p.connections, 10);
  EXPECT_EQ(p.threads, 2);
  EXPECT_EQ(p.bucket, 1s);
}

TEST(Plan, ABurstOpensOneConnectionPerRequestAndCountsPerTenthOfASecond) {
  Options o = with_url();
  o.burst = 1000;
  const Plan p = ok(o);
  EXPECT_EQ(p.mode, Mode::kBurst);
  EXPECT_EQ(p.connections, 1000);
  EXPECT_EQ(p.requests, 1000u);
  EXPECT_EQ(p.bucket, 100ms);
}

TEST(Plan, ARateWithRequestsSendsThatMany) {
  Options o = with_url();
  o.rate = 200;
  o.requests = 50;
  const Plan p = ok(o);
  EXPECT_EQ(p.mode, Mode::kRate);
  EXPECT_EQ(p.requests, 50u);
  EXPECT_EQ(p.schedule->at(1), 5ms);
}

TEST(Plan, NoMoreConnectionsThanRequests) {
  Options o = with_url();
  o.requests = 3;
  o.connections = 50;
  EXPECT_EQ(ok(o).connections, 3);
  EXPECT_EQ(ok(o).threads, 2);
}

TEST(Plan, SerialisesTheRequestOncePerVariedValue) {
  Options o = with_url();
  o.method = "post";
  o.headers = {"Content-Type: application/json", "X-Trace:  abc "};
  o.body = R"({"a":1})";
  o.vary_header = "X-System-Key=crm, erp,oa";
  const Plan p = ok(o);
  ASSERT_EQ(p.wire.size(), 3u);
  EXPECT_EQ(p.wire[1],
            "POST /api/orders?x=1 HTTP/1.1\r\n"
            "Host: 127.0.0.1:8080\r\n"
            "User-Agent: sluice-bench\r\n"
            "Content-Type: application/json\r\n"
            "X-Trace: abc\r\n"
            "X-System-Key: erp\r\n"
            "Content-Length: 7\r\n"
            "\r\n"
            R"({"a":1})");
  EXPECT_EQ(p.vary_values, (std::vector<std::string>{"crm", "erp", "oa"}));
}

TEST(Plan, AUrlWithoutSchemeOrPathMeansHttpAndSlash) {
  Options o = with_url("localhost:9000");
  const Plan p = ok(o);
  EXPECT_EQ(p.target.host, "localhost");
  EXPECT_EQ(p.target.port, "9000");
  EXPECT_EQ(p.target.path, "/");
  EXPECT_EQ(with_url("http://[::1]/x").url, "http://[::1]/x");
  EXPECT_EQ(ok(with_url("http://[::1]/x")).target.host, "::1");
  EXPECT_EQ(ok(with_url("http://[::1]/x")).target.host_header, "[::1]");
  EXPECT_EQ(ok(with_url("http://example.test/x")).target.port, "80");
}

TEST(Plan, APortMustBeANumberFrom1To65535) {
  // Boost.URL's port_number() wraps 99999 to 34463: a run would have gone to another port.
  for (const char* url : {"http://127.0.0.1:99999/x", "http://127.0.0.1:65536/", "http://h:0/",
                          "http://h:/", "http://127.0.0.1:18004:18004/", "http://[::1]:80:80/"}) {
    EXPECT_NE(error_of(with_url(url)).find("bad port"), std::string::npos) << url;
  }
  EXPECT_EQ(ok(with_url("http://127.0.0.1:65535/")).target.port, "65535");
}

TEST(Plan, AHostWithATrailingDotKeepsItsPort) {
  // Boost.URL read "127.0.0.1.:18004/" as the address 127.0.0.1 and the path ".:18004/".
  const Plan address = ok(with_url("http://127.0.0.1.:18004/x"));
  EXPECT_EQ(address.target.host, "127.0.0.1");  // an address, as browsers read it
  EXPECT_EQ(address.target.port, "18004");
  EXPECT_EQ(address.target.path, "/x");
  EXPECT_EQ(address.target.host_header, "127.0.0.1.:18004");
  const Plan name = ok(with_url("http://localhost.:18004/"));
  EXPECT_EQ(name.target.host, "localhost.");  // an absolute name, for the resolver
  EXPECT_EQ(name.target.port, "18004");
  EXPECT_EQ(name.target.path, "/");
}

TEST(Plan, TheSchemeIsCaseInsensitive) {
  const Plan p = ok(with_url("HTTP://127.0.0.1:8080/a?b=1"));
  EXPECT_EQ(p.target.port, "8080");
  EXPECT_EQ(p.target.path, "/a?b=1");
  EXPECT_NE(error_of(with_url("HTTPS://127.0.0.1/")).find("plain HTTP"), std::string::npos);
}

TEST(Plan, ReadsTheBodyFromAFile) {
  const std::string path = ::testing::TempDir() + "plan_body.json";
  std::ofstream(path) << "{\"from\":\"file\"}";
  Options o = with_url();
  o.method = "PUT";
  o.body_file = path;
  const Plan p = ok(o);
  EXPECT_NE(p.wire[0].find("Content-Length: 15\r\n\r\n{\"from\":\"file\"}"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Plan, ADirectoryAsTheBodyFileIsRefusedWithAMessage) {
  // It was read with an ifstream, which threw from inside libstdc++: the process was terminated.
  Options o = with_url();
  o.body_file = "/";
  EXPECT_EQ(error_of(o), "--body-file: cannot read '/': Is a directory");
}

TEST(Plan, AVariedHeaderIsCheckedAsAHeaderIs) {
  // They were accepted, and sent: a second length, a second Host, a second X-K.
  Options o = with_url();
  o.vary_header = "Content-Length=1,2";
  EXPECT_EQ(error_of(o),
            "--vary-header Content-Length: sluice bench sets the body's length itself");
  o.vary_header = "transfer-encoding=chunked";
  EXPECT_NE(error_of(o).find("length itself"), std::string::npos);
  o.headers = {"Host: h0"};
  o.vary_header = "Host=h1";
  EXPECT_EQ(error_of(o),
            "--vary-header Host: the header is also given with --header; give it with one of them");
  o.headers = {"X-K: z"};
  o.vary_header = "x-k=a,b";
  EXPECT_NE(error_of(o).find("also given with --header"), std::string::npos);
  o.headers = {};
  o.vary_header = "Host=h1,h2";  // alone, it replaces the default Host
  const Plan p = ok(o);
  EXPECT_EQ(p.wire[1],
            "GET /api/orders?x=1 HTTP/1.1\r\nUser-Agent: sluice-bench\r\nHost: h2\r\n\r\n");
}

// Two Host fields are a request every server must refuse (RFC 9112 3.2); other fields may repeat.
TEST(Plan, HostIsGivenOnce) {
  Options o = with_url();
  o.headers = {"Host: a", "host: b"};
  EXPECT_EQ(error_of(o), "--header Host is given twice: a request has one Host");
  o.headers = {"Cookie: a=1", "Cookie: b=2"};
  EXPECT_NE(ok(o).wire[0].find("Cookie: a=1\r\nCookie: b=2\r\n"), std::string::npos);
}

TEST(Plan, DescribesOneRequestInTheSingular) {
  Options burst = with_url();
  burst.burst = 1;
  EXPECT_EQ(ok(burst).describe(),
            "burst of 1 request written at one instant on 1 connection, 1 thread");
  Options closed = with_url();
  closed.requests = 1;
  EXPECT_EQ(ok(closed).describe(), "1 request, closed loop on 1 connection, 1 thread");
  Options rate = with_url();
  rate.rate = 1;
  rate.requests = 1;
  EXPECT_EQ(ok(rate).describe(), "open loop at 1 req/s, 1 request on 1 connection, 1 thread");
}

TEST(Plan, ARampWhoseEndsAreEqualIsStillARamp) {
  Options o = with_url();
  o.ramp = "10:10";
  o.duration = "10s";
  const Plan p = ok(o);
  EXPECT_TRUE(p.ramp);
  EXPECT_EQ(p.describe(),
            "open loop ramping from 10 to 10 req/s over 10s (100 requests) on 10 connections, "
            "2 threads");
}

TEST(Plan, RejectsConflictingLoads) {
  Options o = with_url();
  o.burst = 10;
  o.rate = 5;
  EXPECT_NE(error_of(o).find("--burst"), std::string::npos);
  Options both = with_url();
  both.requests = 10;
  both.duration = "5s";
  EXPECT_NE(error_of(both).find("not both"), std::string::npos);
  Options burst_conns = with_url();
  burst_conns.burst = 10;
  burst_conns.connections = 5;
  EXPECT_NE(error_of(burst_conns).find("--connections"), std::string::npos);
}

TEST(Plan, RejectsARampWithoutDurationOrWithBadRates) {
  Options o = with_url();
  o.ramp = "10:100";
  EXPECT_NE(error_of(o).find("needs --duration"), std::string::npos);
  o.duration = "10s";
  o.ramp = "10-100";
  EXPECT_NE(error_of(o).find("FROM:TO"), std::string::npos);
  o.ramp = "0:0";
  EXPECT_NE(error_of(o).find("not both 0"), std::string::npos);
}

// A rate so low that its schedule (nanoseconds from the start) overflows sent every request at once:
// it is refused, as is a number of requests whose last would be due centuries out.
TEST(Plan, ARateTooLowForItsScheduleIsRefused) {
  Options o = with_url();
  o.rate = 1e-10;
  o.requests = 3;
  EXPECT_NE(error_of(o).find("--rate must be from 0.000001"), std::string::npos) << error_of(o);
  o.rate = 1e-6;
  ok(o);
  o.requests = 100'000;
  EXPECT_NE(error_of(o).find("would take over 285 years"), std::string::npos) << error_of(o);
  o.requests.reset();
  o.rate.reset();
  o.duration = "10s";
  o.ramp = "0:1e-10";
  EXPECT_NE(error_of(o).find("--ramp rates must be 0 or from 0.000001"), std::string::npos) << error_of(o);
}

TEST(Plan, ADurationTooLongAndAURLWithASpaceSayWhatIsWrong) {
  // Both said what they are not: "'106752d' is not a duration", "is not a URL (leftover)".
  Options o = with_url();
  o.duration = "106752d";
  EXPECT_EQ(error_of(o), "--duration: '106752d' is too long: at most 106751d");
  o.duration = "9223372037s";
  EXPECT_EQ(error_of(o), "--duration: '9223372037s' is too long: at most 106751d");
  o.duration = "106751d";
  EXPECT_TRUE(make_plan(o, 2).ok());
  for (const std::string url : {"http://h:1/a b", "http://h:1/\xc3\xa9", "http://h:1/a\tb"}) {
    Options u;
    u.url = url;
    EXPECT_EQ(error_of(u), "'" + url + "' is not a URL: a space, a control or a non-ASCII character must be "
                                       "percent-encoded (%20, %C3%A9)");
  }
}

// What Boost.URL calls "leftover" or "invalid" in a path, query or fragment, said plainly.
TEST(Plan, AURLWithACharacterToEncodeSaysWhichAndHow) {
  const std::pair<std::string, std::string> cases[] = {
      {"http://h:1/a{b", "'{' must be percent-encoded (%7B)"},
      {"http://h:1/a?q=x|y", "'|' must be percent-encoded (%7C)"},
      {"http://h:1/a#f\\", "'\\' must be percent-encoded (%5C)"},
      {"http://h:1/a#f#g", "'#' must be percent-encoded (%23)"},
      {"http://h:1/a[0]", "'[' must be percent-encoded (%5B)"},
      {"http://h:1/a\"b", "'\"' must be percent-encoded (%22)"},
      {"http://h:1/%zz", "'%' must begin a percent-encoded byte of two hex digits (%25 for '%' itself)"},
      {"http://h:1/?q=%", "'%' must begin a percent-encoded byte of two hex digits (%25 for '%' itself)"},
      {"http://h:1/?q=%4", "'%' must begin a percent-encoded byte of two hex digits (%25 for '%' itself)"},
  };
  for (const auto& [url, why] : cases) {
    Options o;
    o.url = url;
    EXPECT_EQ(error_of(o), "'" + url + "' is not a URL: " + why);
  }
  // What RFC 3986 allows there passes: sub-delimiters, ':' and '@', a percent-encoded byte, '?'
  // in a query and '/' or '?' in a fragment.
  const Plan p = ok(with_url("http://h:1/a!$&'()*+,;=:@b?x=%41&y=?#/f?"));
  EXPECT_EQ(p.target.path, "/a!$&'()*+,;=:@b?x=%41&y=?");
}

TEST(Plan, RejectsBadNumbersAndDurations) {
  Options o = with_url();
  o.duration = "10";
  EXPECT_NE(error_of(o).find("not a duration"), std::string::npos);
  Options rate = with_url();
  rate.rate = -5;
  EXPECT_NE(error_of(rate).find("--rate"), std::string::npos);
  Options conns = with_url();
  conns.connections = 0;
  EXPECT_NE(error_of(conns).find("--connections"), std::string::npos);
  Options timeout = with_url();
  timeout.timeout = "0s";
  EXPECT_NE(error_of(timeout).find("--timeout"), std::string::npos);
  // The runner keeps to a timeout within a millisecond: a shorter one would not hold.
  timeout.timeout = "999us";
  EXPECT_EQ(error_of(timeout), "--timeout: '999us' is shorter than the 1ms the runner can keep to");
  timeout.timeout = "1ms";
  EXPECT_TRUE(make_plan(timeout, 2).ok());
}

TEST(Plan, RejectsBadUrls) {
  EXPECT_NE(error_of(with_url("")).find("give the URL"), std::string::npos);
  EXPECT_NE(error_of(with_url("https://example.test/")).find("plain HTTP"), std::string::npos);
  EXPECT_NE(error_of(with_url("ftp://example.test/")).find("http://"), std::string::npos);
  EXPECT_NE(error_of(with_url("http://u:p@example.test/")).find("Authorization"),
            std::string::npos);
  EXPECT_NE(error_of(with_url("http://exa mple/")).find("not a URL"), std::string::npos);
}

TEST(Plan, RejectsBadHeadersBodiesAndStatuses) {
  Options header = with_url();
  header.headers = {"NoColon"};
  EXPECT_NE(error_of(header).find("'Name: value'"), std::string::npos);
  header.headers = {"Content-Length: 5"};
  EXPECT_NE(error_of(header).find("length itself"), std::string::npos);
  for (const char* bad : {"X-A: b\x01c", "X-A: b\rc", "X-A: b\x7f"}) {
    header.headers = {bad};
    EXPECT_NE(error_of(header).find("control character"), std::string::npos) << bad;
  }
  header.headers = {"X-A: b\tc"};  // a tab is a value's own
  EXPECT_TRUE(make_plan(header, 2).ok());
  Options vary = with_url();
  vary.vary_header = "X-Key";
  EXPECT_NE(error_of(vary).find("Name=value1"), std::string::npos);
  vary.vary_header = "X-Key=a,,b";
  EXPECT_NE(error_of(vary).find("non-empty"), std::string::npos);
  vary.vary_header = "X-Key=a,b\x01";
  EXPECT_NE(error_of(vary).find("control characters"), std::string::npos);
  Options body = with_url();
  body.body_file = "/nonexistent/body.json";
  EXPECT_EQ(error_of(body),
            "--body-file: cannot read '/nonexistent/body.json': No such file or directory");
  Options status = with_url();
  status.expect_status = "200,4xx";
  EXPECT_NE(error_of(status).find("--expect-status"), std::string::npos);
  Options method = with_url();
  method.method = "GE T";
  EXPECT_NE(error_of(method).find("--method"), std::string::npos);
}

}  // namespace
}  // namespace sluice::bench
