// Rate-limit headers: the IETF RateLimit list, the older forms, Unix-time resets, Retry-After as
// seconds or an HTTP-date, and the window check that flags `remaining` rising inside a window and
// nothing else.
#include "bench/ratelimit_headers.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice::bench {
namespace {

using namespace std::chrono_literals;

TEST(RateLimitField, ReadsEveryQuotaOfTheStructuredList) {
  std::vector<QuotaSeen> quotas;
  parse_ratelimit_field(R"("per-system";r=3;t=10, "per-interface";r=40;t=5)", quotas);
  ASSERT_EQ(quotas.size(), 2u);
  EXPECT_EQ(quotas[0].name, "per-system");
  EXPECT_EQ(quotas[0].remaining, 3);
  EXPECT_EQ(quotas[0].reset_s, 10);
  EXPECT_EQ(quotas[1].name, "per-interface");
  EXPECT_EQ(quotas[1].remaining, 40);
  EXPECT_EQ(quotas[1].reset_s, 5);
}

TEST(RateLimitField, ReadsTheOlderDictionaryForm) {
  std::vector<QuotaSeen> quotas;
  parse_ratelimit_field("limit=100, remaining=50, reset=30", quotas);
  ASSERT_EQ(quotas.size(), 1u);
  EXPECT_EQ(quotas[0].name, "");
  EXPECT_EQ(quotas[0].remaining, 50);
  EXPECT_EQ(quotas[0].reset_s, 30);
}

TEST(RateLimitField, IgnoresWhatItDoesNotUnderstand) {
  std::vector<QuotaSeen> quotas;
  parse_ratelimit_field("garbage, \"x\";q=5", quotas);
  EXPECT_TRUE(quotas.empty());
}

TEST(Seconds, AcceptsOnlyWholeNonNegativeNumbers) {
  EXPECT_EQ(parse_seconds("15"), 15);
  EXPECT_EQ(parse_seconds(" 7 "), 7);
  EXPECT_FALSE(parse_seconds("-1"));
  EXPECT_FALSE(parse_seconds("1.5"));
  EXPECT_FALSE(parse_seconds("Wed, 21 Oct 2015 07:28:00 GMT"));
}

TEST(HttpDate, ReadsTheThreeFormsOfRfc9110) {
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), 784111777);  // IMF-fixdate
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), 784111777);  // RFC 850
  EXPECT_EQ(parse_http_date("Sun Nov  6 08:49:37 1994"), 784111777);        // asctime
  EXPECT_EQ(parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT"), 951782400);
  EXPECT_EQ(parse_http_date("Tuesday, 29-Feb-00 00:00:00 GMT"), 951782400);
  for (const char* bad : {"Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 UTC",
                          "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 6 Nov 1994 08:49:37 GMT",
                          "Sun, 06 Nov 1994 08:49:37 GMT x", "06 Nov 1994 08:49:37 GMT", "soon",
                          ""}) {
    EXPECT_FALSE(parse_http_date(bad)) << bad;
  }
}

TEST(RetryAfter, IsSecondsOrAnHttpDate) {
  // An HTTP-date was taken for no Retry-After at all.
  const std::int64_t now = 1'700'000'000;
  EXPECT_EQ(parse_retry_after("120", now), 120);
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2099 07:28:00 GMT", now), 4096250880 - now);
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), 0);  // already past
  EXPECT_FALSE(parse_retry_after("-1", now));
  EXPECT_FALSE(parse_retry_after("later", now));
}

TEST(RetryAfter, AValueIsShownPrintableAndShort) {
  EXPECT_EQ(printable_sample("-5"), "-5");
  EXPECT_EQ(printable_sample("a\x1b[2Jb\xff"), "a?[2Jb?");  // no escape sequence reaches a terminal
  EXPECT_EQ(printable_sample(std::string(50, 'x')), std::string(40, 'x') + "...");
}

TEST(Seconds, AUnixTimeResetBecomesSecondsLeft) {
  EXPECT_EQ(reset_delta(30, 1'700'000'000), 30);
  EXPECT_EQ(reset_delta(1'700'000'045, 1'700'000'000), 45);
  EXPECT_EQ(reset_delta(1'699'999'990, 1'700'000'000), 0);
}

class WindowCheckTest : public ::testing::Test {
 protected:
  void see(std::int64_t remaining, std::int64_t reset_s, Nanos sent, Nanos received,
           std::uint32_t caller = 0) {
    check_.observe(caller, QuotaSeen{"q", remaining, reset_s}, sent, received, summary_);
  }
  WindowCheck check_;
  RateLimitSummary summary_;
};

TEST_F(WindowCheckTest, FallingRemainingPasses) {
  see(5, 10, 0ms, 1ms);
  see(4, 10, 2ms, 3ms);
  see(3, 10, 4ms, 5ms);
  EXPECT_EQ(summary_.window_checks, 2u);
  EXPECT_EQ(summary_.window_rises, 0u);
}

TEST_F(WindowCheckTest, ARiseInsideTheWindowIsFlagged) {
  see(5, 10, 0ms, 1ms);
  see(8, 10, 2ms, 3ms);
  EXPECT_EQ(summary_.window_rises, 1u);
  EXPECT_NE(summary_.first_rise.find("from 5 to 8"), std::string::npos) << summary_.first_rise;
}

TEST_F(WindowCheckTest, ARiseAfterTheWindowCouldHaveResetIsNot) {
  see(0, 2, 0ms, 1ms);
  see(9, 2, 1500ms, 1501ms);  // 2 s rounded up may be 1.01 s: the window may have reset
  EXPECT_EQ(summary_.window_checks, 0u);
  EXPECT_EQ(summary_.window_rises, 0u);
}

TEST_F(WindowCheckTest, CallersAreCheckedSeparately) {
  see(5, 10, 0ms, 1ms, /*caller=*/0);
  see(9, 10, 2ms, 3ms, /*caller=*/1);
  EXPECT_EQ(summary_.window_rises, 0u);
}

TEST(RateLimitSummary, MergeKeepsTheExtremesAndDistinctPolicies) {
  RateLimitSummary a;
  RateLimitSummary b;
  a.remaining.add(10);
  a.add_policy("\"q\";q=50;w=60");
  b.remaining.add(0);
  b.remaining.add(49);
  b.add_policy("\"q\";q=50;w=60");
  b.retry_after_s.add(7);
  a.merge(b);
  EXPECT_EQ(a.remaining.count, 3u);
  EXPECT_EQ(a.remaining.min, 0);
  EXPECT_EQ(a.remaining.max, 49);
  EXPECT_EQ(a.policies.size(), 1u);
  EXPECT_EQ(a.retry_after_s.count, 1u);
  EXPECT_EQ(a.retry_after_s.max, 7);
}

}  // namespace
}  // namespace sluice::bench
