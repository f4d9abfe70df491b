// The report made from a run's stats: counts by outcome, each assertion's verdict and reason, the
// JSON fields scripts rely on, the text and the SVG chart.
#include "bench/report.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <chrono>

namespace sluice::bench {
namespace {

using namespace std::chrono_literals;

Plan burst_plan() {
  Options o;
  o.url = "http://127.0.0.1:8080/api";
  o.burst = 100;
  o.expect_status = "200,429";
  o.expect_admitted = 50;
  o.expect_admitted_max = 50;
  Result<Plan> plan = make_plan(o, 2);
  EXPECT_TRUE(plan.ok());
  return std::move(plan).value();
}

// 50 admitted and 50 rejected in the first 100 ms, latencies 1..100 ms.
RunResult fifty_fifty() {
  RunResult run;
  Stats& s = run.stats;
  s.status[200] = 50;
  s.status[429] = 50;
  s.timeline.push_back(Counts{50, 50, 0, 0});
  for (int ms = 1; ms <= 100; ++ms) s.latency.record(static_cast<std::uint64_t>(ms) * 1'000'000);
  s.first_write = 10us;
  s.last_write = 310us;
  s.rate_limit.add_policy("\"test\";q=50;w=60");
  run.elapsed = 100ms;
  return run;
}

TEST(Report, CountsResponsesByOutcome) {
  const Report r = make_report(burst_plan(), fifty_fifty());
  EXPECT_EQ(r.requests, 100u);
  EXPECT_EQ(r.admitted, 50u);
  EXPECT_EQ(r.rejected, 50u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_DOUBLE_EQ(r.throughput_rps, 1000.0);
  EXPECT_NEAR(r.latency.p50_us, 50'000, 500);
  EXPECT_EQ(r.burst_spread, 300us);
  EXPECT_TRUE(r.passed());
}

TEST(Report, EachAssertionFailsWithItsOwnReason) {
  RunResult run = fifty_fifty();
  run.stats.status[200] = 53;
  run.stats.status[503] = 2;
  run.stats.errors["connect: Connection refused"] = 1;
  const Report r = make_report(burst_plan(), run);
  ASSERT_EQ(r.expectations.size(), 3u);
  EXPECT_FALSE(r.expectations[0].passed);
  EXPECT_EQ(r.expectations[0].detail,
            "2 responses had another status: 2 × 503; 1 requests got no response "
            "(connect: Connection refused)");
  EXPECT_FALSE(r.expectations[1].passed);
  EXPECT_EQ(r.expectations[1].detail, "53 admitted (2xx), expected exactly 50");
  EXPECT_FALSE(r.expectations[2].passed);
  EXPECT_EQ(r.expectations[2].detail, "53 admitted (2xx), more than the 50 allowed");
  EXPECT_FALSE(r.passed());
}

TEST(Report, NamesTheMostCommonErrorNotTheFirstInOrder) {
  RunResult run = fifty_fifty();
  run.stats.errors["connect: Connection refused"] = 1;
  run.stats.errors["timeout: no response within 10s"] = 5;
  EXPECT_EQ(make_report(burst_plan(), run).most_common_error(), "timeout: no response within 10s");
  EXPECT_EQ(make_report(burst_plan(), fifty_fifty()).most_common_error(), "");
}

TEST(Report, JsonHasTheFieldsScriptsReadAtTheTop) {
  const auto json = boost::json::parse(to_json(make_report(burst_plan(), fifty_fifty())));
  const auto& o = json.as_object();
  EXPECT_EQ(o.at("requests").to_number<int>(), 100);
  EXPECT_EQ(o.at("admitted").to_number<int>(), 50);
  EXPECT_EQ(o.at("rejected").to_number<int>(), 50);
  EXPECT_EQ(o.at("errors").to_number<int>(), 0);
  EXPECT_EQ(o.at("status_counts").at("429").to_number<int>(), 50);
  EXPECT_EQ(o.at("throughput_rps").to_number<double>(), 1000.0);
  for (const char* p : {"p50", "p90", "p99", "p999", "max"}) {
    EXPECT_GT(o.at("latency_us").at(p).to_number<double>(), 0.0) << p;
  }
  const auto& buckets = o.at("latency_buckets_us").as_array();
  ASSERT_EQ(buckets.size(), 100u);  // 1..100 ms: one value in each bucket
  EXPECT_EQ(buckets[0].as_array()[1].to_number<int>(), 1);
  EXPECT_NEAR(buckets[0].as_array()[0].to_number<double>(), 1000.0, 10.0);
  EXPECT_EQ(o.at("timeline").at("step_ms").to_number<int>(), 100);
  EXPECT_EQ(o.at("timeline").at("steps").as_array().size(), 1u);
  EXPECT_EQ(o.at("mode").as_string(), "burst");
  EXPECT_TRUE(o.at("passed").as_bool());
}

TEST(Report, ARampIsReportedAsARampEvenWithEqualEnds) {
  Options o;
  o.url = "http://127.0.0.1:8080/api";
  o.ramp = "10:10";
  o.duration = "10s";
  Result<Plan> plan = make_plan(o, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(make_report(*plan, RunResult{}).mode, "ramp");  // it said "rate"
}

TEST(Report, JsonIsValidUtf8WhateverBytesTheResponsesCarried) {
  // A RateLimit-Policy with obs-text (0x80-0xFF) went into the JSON as it was: invalid UTF-8.
  RunResult run = fifty_fifty();
  run.stats.rate_limit.policies = {"\"a\";q=5;w=10 x\xff", "\"caf\xc3\xa9\";q=1;w=1 \xe4\xb8\xad",
                                   "\xed\xa0\x80\xc3"};
  run.stats.errors["bad response: \xc0\xaf"] = 1;
  boost::system::error_code ec;
  const auto json = boost::json::parse(to_json(make_report(burst_plan(), run)), ec);
  ASSERT_FALSE(ec) << ec.message();
  const auto& policies = json.at("rate_limit").at("policies").as_array();
  ASSERT_EQ(policies.size(), 3u);
  EXPECT_EQ(policies[0].as_string(), "\"a\";q=5;w=10 x\uFFFD");
  EXPECT_EQ(policies[1].as_string(), "\"caf\u00e9\";q=1;w=1 \u4e2d");  // well-formed: kept
  EXPECT_EQ(policies[2].as_string(), "\uFFFD\uFFFD\uFFFD\uFFFD");     // a surrogate, a cut end
  EXPECT_EQ(json.at("error_counts").as_object().count("bad response: \uFFFD\uFFFD"), 1u);
}

TEST(Report, RejectionsWithoutRetryAfterAreInTheTextAsInTheJson) {
  // With no other rate-limit header, the text said "none seen" while the JSON counted them.
  RunResult run;
  run.stats.status[429] = 4;
  run.stats.rate_limit.rejected_without_retry_after = 4;
  const std::string text = format_report(make_report(burst_plan(), run));
  EXPECT_EQ(text.find("none seen"), std::string::npos) << text;
  EXPECT_NE(text.find("Retry-After        none; 4 of 4 rejections had none"), std::string::npos)
      << text;
  RunResult quiet;
  quiet.stats.status[200] = 4;
  EXPECT_NE(format_report(make_report(burst_plan(), quiet)).find("Rate-limit headers   none seen"),
            std::string::npos);
}

TEST(Report, AnInvalidRetryAfterIsSaidAsSuchNotJustAsNone) {
  // "Retry-After: -5" was reported only as a rejection without one.
  RunResult run;
  run.stats.status[429] = 4;
  run.stats.rate_limit.rejected_without_retry_after = 4;
  run.stats.rate_limit.retry_after_invalid = 4;
  run.stats.rate_limit.first_invalid_retry_after = "-5";
  const Report report = make_report(burst_plan(), run);
  const std::string text = format_report(report);
  EXPECT_NE(text.find("Retry-After        none; 4 of 4 rejections had none\n"
                      "                       4 invalid (neither seconds nor a date); first: \"-5\"\n"),
            std::string::npos)
      << text;
  const boost::json::value json = boost::json::parse(to_json(report));
  const boost::json::value& rl = json.at("rate_limit");
  EXPECT_EQ(rl.at("retry_after_invalid").to_number<int>(), 4);
  EXPECT_EQ(rl.at("first_invalid_retry_after").as_string(), "-5");
}

TEST(Report, ARiseOfRemainingSaysWhatItMeansForEachAlgorithm) {
  // A sliding log (the demo's) frees quota before its reset, and the report warned of servers that
  // each count alone against one gateway.
  RunResult run = fifty_fifty();
  run.stats.rate_limit.remaining.add(1);
  run.stats.rate_limit.window_checks = 93;
  run.stats.rate_limit.window_rises = 3;
  run.stats.rate_limit.first_rise = "remaining rose from 0 to 1";
  const std::string text = format_report(make_report(burst_plan(), run));
  EXPECT_EQ(text.find("WARNING"), std::string::npos) << text;
  EXPECT_NE(text.find("window check       remaining rose within a window 3 times in 93 checks; first: remaining "
                      "rose from 0 to 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(with a fixed window, a sign of servers or processes that each count alone; a sliding "
                      "window or log, a token bucket or GCRA frees quota as time passes)"),
            std::string::npos)
      << text;
}

TEST(Report, AWindowCheckThatFoundNoRiseCountsItsChecksInWords) {
  // It said "(1 checks)".
  RunResult run = fifty_fifty();
  run.stats.rate_limit.remaining.add(1);
  for (const auto& [checks, words] : {std::pair{1, "(1 check)"}, std::pair{2, "(2 checks)"}}) {
    run.stats.rate_limit.window_checks = checks;
    const std::string text = format_report(make_report(burst_plan(), run));
    EXPECT_NE(text.find(std::string("window check       remaining only fell within each window ") + words + "\n"),
              std::string::npos)
        << text;
  }
}

TEST(Report, RemainingIsCountedInValuesNotResponses) {
  // Two responses of two quotas each: the text said "on 4 responses".
  RunResult run = fifty_fifty();
  for (std::int64_t remaining : {9, 4, 8, 3}) run.stats.rate_limit.remaining.add(remaining);
  const std::string text = format_report(make_report(burst_plan(), run));
  EXPECT_NE(text.find("remaining          9 down to 3, 4 values seen"), std::string::npos) << text;
}

TEST(Report, TextShowsCountsLatencyTimelineAndVerdicts) {
  const std::string text = format_report(make_report(burst_plan(), fifty_fifty()));
  EXPECT_NE(text.find("Admitted     50 (2xx)"), std::string::npos) << text;
  EXPECT_NE(text.find("Rejected     50 (429)"), std::string::npos) << text;
  EXPECT_NE(text.find("p99.9"), std::string::npos) << text;
  EXPECT_NE(text.find("Per 100ms"), std::string::npos) << text;
  EXPECT_NE(text.find("all written within 300us"), std::string::npos) << text;
  EXPECT_NE(text.find("ok    --expect-admitted 50"), std::string::npos) << text;
}

TEST(Report, SaysHowManyRequestsWereSentAgain) {
  RunResult run = fifty_fifty();
  run.stats.retries = 2;
  const Report r = make_report(burst_plan(), run);
  EXPECT_EQ(r.retried, 2u);
  EXPECT_NE(format_report(r).find("Retried      2 (the server had closed the connection"),
            std::string::npos);
  EXPECT_EQ(boost::json::parse(to_json(r)).at("retried").to_number<int>(), 2);
  EXPECT_EQ(format_report(make_report(burst_plan(), fifty_fifty())).find("Retried"),
            std::string::npos);
}

// An open-loop run behind its schedule says why: every connection busy (more --connections would
// help), or a sender that could not keep to time with connections free (a busy machine).
TEST(Report, LagBehindTheScheduleSaysWhetherConnectionsRanOut) {
  Options o;
  o.url = "http://127.0.0.1:8080/api";
  o.rate = 20;
  o.duration = "5s";
  Result<Plan> plan = make_plan(o, 2);
  ASSERT_TRUE(plan.ok());
  RunResult run = fifty_fifty();
  run.stats.max_send_lag = 500ms;
  run.stats.connection_wait_at_max_lag = 2ms;  // woken late, then it waited a little for a connection
  // Another request waited long for a connection, but was not as far behind.
  run.stats.max_connection_wait = 400ms;
  EXPECT_NE(format_report(make_report(*plan, run)).find("500ms at worst behind schedule (the sender fell behind"),
            std::string::npos)
      << format_report(make_report(*plan, run));
  run.stats.connection_wait_at_max_lag = 400ms;
  EXPECT_NE(format_report(make_report(*plan, run)).find("(every connection was busy: try more --connections)"),
            std::string::npos);
  run.stats.max_send_lag = 2ms;  // within what a timer may be late by: no word on it
  EXPECT_EQ(format_report(make_report(*plan, run)).find("behind schedule ("), std::string::npos);
}

// Threads' stats merged keep the wait of the request most behind, not another thread's.
TEST(Report, MergedStatsKeepTheConnectionWaitOfTheRequestMostBehind) {
  Stats a;
  a.max_send_lag = 500ms;
  a.connection_wait_at_max_lag = 2ms;
  a.max_connection_wait = 2ms;
  Stats b;
  b.max_send_lag = 300ms;
  b.connection_wait_at_max_lag = 300ms;
  b.max_connection_wait = 300ms;
  Stats merged = b;
  merged.merge(a);
  EXPECT_EQ(merged.max_send_lag, 500ms);
  EXPECT_EQ(merged.connection_wait_at_max_lag, 2ms);
  EXPECT_EQ(merged.max_connection_wait, 300ms);
  a.merge(b);
  EXPECT_EQ(a.connection_wait_at_max_lag, 2ms);
}

TEST(Report, ChartIsOneSvgWithBarsAndPercentiles) {
  const std::string svg = to_svg(make_report(burst_plan(), fifty_fifty()));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("#2e7d32"), std::string::npos);  // admitted bars
  EXPECT_NE(svg.find("#ef6c00"), std::string::npos);  // rejected bars
  EXPECT_NE(svg.find(">p99.9<"), std::string::npos);
  EXPECT_EQ(svg.find("&&"), std::string::npos);
}

TEST(Report, FormatsLatencyInTheUnitThatReadsBest) {
  EXPECT_EQ(format_latency_us(8.5), "8.50us");
  EXPECT_EQ(format_latency_us(850), "850us");
  EXPECT_EQ(format_latency_us(12'345), "12.3ms");
  EXPECT_EQ(format_latency_us(1'500'000), "1.50s");
}

}  // namespace
}  // namespace sluice::bench
