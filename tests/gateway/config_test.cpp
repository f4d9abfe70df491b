// The configuration file: the issue's example loads as it stands, every mistake is reported with
// its file:line:column and field path, and export reads back into the same configuration.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config/json.h"
#include "config/path_pattern.h"
#include "config/yaml.h"
#include "load_config.h"

namespace sluice::config {
namespace {

using namespace std::chrono_literals;

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(SLUICE_GATEWAY_FIXTURES) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::shared_ptr<const Config> load_ok(const std::string& text) { return testing::load_config(text); }

std::vector<std::string> problems_of(const std::string& text) {
  auto r = load_yaml(text, "test.yaml");
  std::vector<std::string> out;
  if (auto* problems = std::get_if<std::vector<Problem>>(&r)) {
    for (const auto& p : *problems) out.push_back(p.to_string());
  }
  return out;
}

const char* kMinimal = R"(upstreams:
  - name: app
    targets: [127.0.0.1:8081]
systems:
  - key: crm
    interfaces: [orders]
interfaces:
  - id: orders
    path: /api/orders/*
    upstream: app
)";

TEST(ConfigYaml, TheIssueExampleLoadsAsItStands) {
  auto c = load_ok(fixture("issue_example.yaml"));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->listen, "127.0.0.1:8080");
  EXPECT_EQ(c->system_key_header, "X-System-Key");
  ASSERT_EQ(c->upstreams.size(), 1u);
  const Upstream& app = c->upstreams[0];
  EXPECT_EQ(app.targets, (std::vector<Target>{{"127.0.0.1", 8081}}));
  EXPECT_EQ(app.timeout, 5s);
  EXPECT_EQ(app.breaker.options.window, BreakerWindow::kCount);
  EXPECT_EQ(app.breaker.options.window_size, 20);
  EXPECT_EQ(app.breaker.options.slow_call_rate, 100);
  EXPECT_EQ(app.breaker.options.open_for, 30s);
  EXPECT_EQ(app.breaker.options.half_open_probes, 3);
  ASSERT_EQ(c->systems.size(), 2u);
  EXPECT_EQ(c->systems[0].limits[0].name, "crm-window");
  EXPECT_EQ(c->systems[0].limits[0].limit, *Limit::sliding_log({.limit = 50, .period = 15s}));
  EXPECT_FALSE(c->systems[1].enabled);
  EXPECT_TRUE(c->systems[1].all_interfaces);
  const Interface& orders = c->interfaces[0];
  EXPECT_EQ(orders.concurrency, 100);
  EXPECT_EQ(orders.limits[0].limit,
            *Limit::token_bucket({.capacity = 100, .refill_tokens = 10, .refill_period = 1s}));
  EXPECT_EQ(orders.limits[1].key_by, KeyBy::kHeader);
  EXPECT_EQ(orders.limits[1].key_name, "X-User-Id");
  EXPECT_TRUE(orders.limits[1].shadow);
  const Interface& login = c->interfaces[2];
  EXPECT_TRUE(login.is_public);
  EXPECT_EQ(login.limits[0].key_by, KeyBy::kClientIp);
  EXPECT_EQ(login.limits[0].on_store_failure, OnStoreFailure::kDeny);
  ASSERT_EQ(c->grants.size(), 1u);
  EXPECT_EQ(c->grants[0].limits[0].limit, *Limit::fixed_window({.limit = 1000, .period = 1h}));
}

TEST(ConfigYaml, ExportReadsBackIntoTheSameConfiguration) {
  auto c = load_ok(fixture("issue_example.yaml"));
  ASSERT_NE(c, nullptr);
  const std::string once = to_yaml(*c);
  auto again = load_ok(once);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(to_yaml(*again), once);
  EXPECT_EQ(again->interfaces[1].path, "/api/users/{id}");
  EXPECT_EQ(again->interfaces[1].methods, (std::vector<std::string>{"GET"}));
  EXPECT_EQ(again->grants[0].limits[0], c->grants[0].limits[0]);
  EXPECT_EQ(again->interfaces[0].limits[1], c->interfaces[0].limits[1]);
  // Counts and durations go bare, as other YAML tools read a number; names are quoted as needed.
  EXPECT_NE(once.find("{name: crm-window, algorithm: sliding_log, limit: 50, period: 15s}"), std::string::npos) << once;
  EXPECT_NE(once.find("{algorithm: gcra, limit: 5, period: 1m, burst: 5, key_by: client_ip"), std::string::npos) << once;
}

// JSON writes a character beyond U+FFFF as two \u escapes of UTF-16 surrogates (Python's json.dumps
// does by default): read as the character. An escaped backslash before "u" is no escape, and a
// surrogate on its own is no character.
TEST(ConfigYaml, JsonSurrogatePairEscapesAreReadAsTheirCharacter) {
  auto rocket = parse_system(R"({"interfaces": ["a"], "description": "rocket \ud83d\ude80!"})");
  ASSERT_TRUE(std::holds_alternative<System>(rocket));
  EXPECT_EQ(std::get<System>(rocket).description, "rocket \xF0\x9F\x9A\x80!");
  auto literal = parse_system(R"({"description": "\\ud83d\\ude80"})");
  ASSERT_TRUE(std::holds_alternative<System>(literal));
  EXPECT_EQ(std::get<System>(literal).description, R"(\ud83d\ude80)");
  auto lone = parse_system(R"({"description": "\ud83d alone"})");
  ASSERT_TRUE(std::holds_alternative<std::vector<Problem>>(lone));
  EXPECT_EQ(std::get<std::vector<Problem>>(lone).at(0).message,
            "the escape \\uD83D is half of a UTF-16 surrogate pair, which YAML does not take: write the character "
            "itself, or its \\U escape with 8 hex digits (\\U0001F680 for U+1F680)");
  // In YAML that is not JSON, a pair is refused with the same words; an escape past U+10FFFF says so.
  auto yaml_pair = parse_system("description: \"\\ud83d\\ude80\"\n");
  ASSERT_TRUE(std::holds_alternative<std::vector<Problem>>(yaml_pair));
  EXPECT_TRUE(std::get<std::vector<Problem>>(yaml_pair).at(0).message.starts_with("the escape \\uD83D is half"));
  auto beyond = parse_system("description: \"\\U00110000\"\n");
  ASSERT_TRUE(std::holds_alternative<std::vector<Problem>>(beyond));
  EXPECT_EQ(std::get<std::vector<Problem>>(beyond).at(0).message, "the escape of U+110000 is not a Unicode character");
  // A problem after a pair on its line is placed where it is in the text as sent.
  auto after = parse_system(R"({"description": "\ud83d\ude80\ud83d\ude80", "bogus": 1})");
  ASSERT_TRUE(std::holds_alternative<std::vector<Problem>>(after));
  EXPECT_EQ(std::get<std::vector<Problem>>(after).at(0).column, 45);
  EXPECT_EQ(problems_of("{\"upstreams\": [],\n \"x\": \"\\ud83d\\ude80\", \"y\": 1}"),
            (std::vector<std::string>{
                "test.yaml:2:2: x: unknown field \"x\" (known here: listen, admin_listen, store, fleet_size, store_timeout, "
                "system_key_header, language, rate_limit_headers, max_body_bytes, header_timeout, send_timeout, "
                "drain_delay, drain_timeout, access_log, decide_client_ip_from, trusted_proxies, upstreams, systems, interfaces, "
                "grants)",
                "test.yaml:2:23: y: unknown field \"y\" (known here: listen, admin_listen, store, fleet_size, store_timeout, "
                "system_key_header, language, rate_limit_headers, max_body_bytes, header_timeout, send_timeout, "
                "drain_delay, drain_timeout, access_log, decide_client_ip_from, trusted_proxies, upstreams, systems, interfaces, "
                "grants)"}));
}

// Words YAML reads as something else in any of their cases (NULL, True, Off) are quoted: written
// bare, "NULL" came back as no key at all, and a description "Null" as none.
TEST(ConfigYaml, WordsYamlReadsAsNullOrBooleansInAnyCaseAreQuotedOnExport) {
  Config c;
  for (const std::string word : {"NULL", "Null", "null", "TRUE", "True", "Off", "YES", "N"}) {
    System s;
    s.key = word + "-key";
    s.description = word;
    c.systems.push_back(s);
  }
  c.systems[0].key = "NULL";
  const std::string once = to_yaml(c);
  auto again = load_ok(once);
  ASSERT_NE(again, nullptr) << once;
  ASSERT_EQ(again->systems.size(), c.systems.size());
  for (std::size_t i = 0; i < c.systems.size(); ++i) {
    EXPECT_EQ(again->systems[i].key, c.systems[i].key);
    EXPECT_EQ(again->systems[i].description, c.systems[i].description);
  }
}

// How long a dead gateway's place in an interface's concurrency is held: given, exported, and
// refused without concurrency or out of range.
TEST(ConfigYaml, AConcurrencyLeaseTimeoutIsReadExportedAndChecked) {
  const std::string head = "upstreams: [{name: app, targets: [127.0.0.1:1]}]\ninterfaces:\n";
  auto c = load_ok(head + "  - {id: x, path: /x, upstream: app, concurrency: 5, concurrency_lease_timeout: 30s}\n");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->interfaces[0].concurrency_lease_timeout, std::chrono::seconds(30));
  EXPECT_NE(to_yaml(*c).find("    concurrency_lease_timeout: 30s\n"), std::string::npos) << to_yaml(*c);
  EXPECT_EQ(to_json(c->interfaces[0]).at("concurrency_lease_timeout").as_string(), "30s");
  EXPECT_EQ(problems_of(head + "  - {id: x, path: /x, upstream: app, concurrency_lease_timeout: 30s}\n"),
            (std::vector<std::string>{
                "test.yaml:3:65: interfaces[0].concurrency_lease_timeout: is given without concurrency"}));
  const auto long_one =
      problems_of(head + "  - {id: x, path: /x, upstream: app, concurrency: 5, concurrency_lease_timeout: 400d}\n");
  ASSERT_EQ(long_one.size(), 1u);
  EXPECT_NE(long_one[0].find("interfaces[0].concurrency_lease_timeout: lease timeout must be"), std::string::npos)
      << long_one[0];
}

// A limit's name may not be the one an unnamed limit of the same owner gets (its owner's, with -N
// when it has several): two limits would answer to it in RateLimit fields and the admin API.
TEST(ConfigYaml, ALimitNameAnUnnamedLimitGetsIsRefused) {
  const std::string head = "upstreams: [{name: app, targets: [127.0.0.1:1]}]\ninterfaces: [{id: x, path: /x, upstream: app}]\n";
  const std::string w = "{algorithm: fixed_window, limit: 1, period: 1m";
  EXPECT_EQ(problems_of(head + "systems:\n  - {key: dup, interfaces: [x], limits: [" + w + "}, " + w + "}, " + w +
                        ", name: dup-1}]}\n"),
            (std::vector<std::string>{"test.yaml:4:194: systems[0].limits[2].name: \"dup-1\" is the name the "
                                      "unnamed limit at systems[0].limits[1] gets: give one of them another"}));
  EXPECT_EQ(problems_of(head + "systems:\n  - {key: dup, interfaces: [x], limits: [" + w + "}, " + w + ", name: dup}]}\n")
                .size(),
            1u);
  EXPECT_EQ(problems_of(head + "grants:\n  - {system: s, interface: x, limits: [" + w + "}, " + w + ", name: s/x}]}\n" +
                        "systems: [{key: s, interfaces: [x]}]\n")
                .size(),
            1u);
  // Nor the name of an interface's in-flight limit.
  EXPECT_EQ(problems_of("upstreams: [{name: app, targets: [127.0.0.1:1]}]\ninterfaces:\n  - {id: x, path: /x, upstream: app, "
                        "concurrency: 5, limits: [" + w + ", name: x-in-flight}]}\n"),
            (std::vector<std::string>{"test.yaml:3:117: interfaces[0].limits[0].name: \"x-in-flight\" is the name the "
                                      "in-flight limit of interfaces[0].concurrency gets: give one of them another"}));
  // Names no unnamed limit gets are fine.
  EXPECT_TRUE(problems_of(head + "systems:\n  - {key: dup, interfaces: [x], limits: [" + w + "}, " + w + "}, " + w +
                          ", name: dup-2}]}\n")
                  .empty());
}

TEST(ConfigYaml, AStoreTimeoutOutOfRangeSaysWhatItGot) {
  EXPECT_EQ(problems_of("store_timeout: 2h\n" + std::string(kMinimal)),
            (std::vector<std::string>{"test.yaml:1:16: store_timeout: must be between 1ms and 1m, got 2h"}));
}

// A quote left open would take in the rest of the file up to the next quote of its kind (here the
// next system, which went missing without a word): a quoted string must close on its line.
TEST(ConfigYaml, AQuotedStringThatRunsOntoTheNextLineIsRefused) {
  const std::string head = "upstreams: [{name: app, targets: [127.0.0.1:8081]}]\n"
                           "interfaces: [{id: users, path: /api/users, upstream: app}]\n"
                           "systems:\n"
                           "  - key: crm\n";
  const std::string rest = "  - key: erp\n    interfaces: [users]\n";
  const std::string message = ": a quoted string runs on past the end of its line: close its quote on the line it opens";
  EXPECT_EQ(problems_of(head + "    description: \"CRM team\n" + rest),
            (std::vector<std::string>{"test.yaml:5:18" + message}));
  EXPECT_EQ(problems_of(head + "    description: 'CRM team\n" + rest),
            (std::vector<std::string>{"test.yaml:5:18" + message}));
  EXPECT_EQ(problems_of(head + "    description: \"CRM \\\n  team\"\n" + rest),
            (std::vector<std::string>{"test.yaml:5:18" + message}));
  // Quotes that close on their line, escaped quotes inside them included, are read as ever.
  auto c = load_ok(head + "    description: 'CRM ''team''' # \"\n" + "  - key: \"erp \\\"x\\\"\"\n");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->systems.size(), 2u);
  EXPECT_EQ(c->systems[0].description, "CRM 'team'");
  EXPECT_EQ(c->systems[1].key, "erp \"x\"");
  // A byte order mark before the text moves no quote (yaml-cpp counts positions after it); an alias
  // of the node it is in ends the walk rather than the process.
  auto bom = load_ok("\xEF\xBB\xBF" + head + "    description: a\"b\ngrants: []\n");
  ASSERT_NE(bom, nullptr);
  EXPECT_EQ(bom->systems[0].description, "a\"b");
  EXPECT_EQ(problems_of("\xEF\xBB\xBF" + head + "    description: \"CRM team\n" + rest),
            (std::vector<std::string>{"test.yaml:5:18" + message}));
  EXPECT_EQ(problems_of(head + "    colour: &s [*s]\n").size(), 1u);
}

// send_timeout is read, written back and checked like the other timeouts.
TEST(ConfigYaml, ASendTimeoutIsReadExportedAndChecked) {
  auto c = load_ok("send_timeout: 90s\n" + std::string(kMinimal));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->send_timeout, std::chrono::seconds(90));
  EXPECT_NE(config::to_yaml(*c).find("\nsend_timeout: 90s\n"), std::string::npos);
  EXPECT_EQ(load_ok(kMinimal)->send_timeout, std::chrono::seconds(60));
  // Stored (as JSON) only when it is not the default: a database this version writes still reads in
  // the version before, which does not know the field.
  EXPECT_EQ(config::to_json(*c).at("send_timeout").as_string(), "90s");
  EXPECT_FALSE(config::to_json(*load_ok(kMinimal)).contains("send_timeout"));
  EXPECT_EQ(problems_of("send_timeout: 0s\n" + std::string(kMinimal)),
            (std::vector<std::string>{"test.yaml:1:15: send_timeout: must be at least 1ms"}));
}

// drain_delay is read, written back and checked: 0s (the drain begins at the signal) when left out,
// and left out of the JSON a database holds at that default, as send_timeout is.
TEST(ConfigYaml, ADrainDelayIsReadExportedAndChecked) {
  auto c = load_ok("drain_delay: 15s\n" + std::string(kMinimal));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->drain_delay, 15s);
  const std::string exported = config::to_yaml(*c);
  EXPECT_NE(exported.find("\ndrain_delay: 15s\ndrain_timeout: 30s\n"), std::string::npos) << exported;
  auto again = load_ok(exported);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->drain_delay, 15s);
  EXPECT_EQ(load_ok(kMinimal)->drain_delay, 0s);
  EXPECT_NE(config::to_yaml(*load_ok(kMinimal)).find("\ndrain_delay: 0s\n"), std::string::npos);
  EXPECT_EQ(config::to_json(*c).at("drain_delay").as_string(), "15s");
  EXPECT_FALSE(config::to_json(*load_ok(kMinimal)).contains("drain_delay"));
  EXPECT_EQ(load_ok(config::pretty(config::to_json(*c)))->drain_delay, 15s);
  EXPECT_EQ(load_ok("drain_delay: 1h\n" + std::string(kMinimal))->drain_delay, 1h);
  EXPECT_EQ(problems_of("drain_delay: 61m\n" + std::string(kMinimal)),
            (std::vector<std::string>{"test.yaml:1:14: drain_delay: must be between 0s and 1h, got 61m"}));
  Config negative = *c;
  negative.drain_delay = -1s;
  const std::vector<Problem> problems = validate(negative);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "drain_delay");
  EXPECT_EQ(problems[0].message, "must be between 0s and 1h, got -1s");
}

TEST(ConfigYaml, DefaultsApplyWhenFieldsAreLeftOut) {
  auto c = load_ok(kMinimal);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->listen, "127.0.0.1:8080");
  EXPECT_EQ(c->admin_listen, "127.0.0.1:9090");
  EXPECT_EQ(c->language, Language::kEnglish);
  EXPECT_EQ(c->rate_limit_headers, RateLimitHeaders::kDraft);
  EXPECT_TRUE(c->systems[0].enabled);
  EXPECT_TRUE(c->interfaces[0].methods.empty());
  EXPECT_EQ(c->upstreams[0].failure_statuses.size(), 100u);
  EXPECT_TRUE(c->upstreams[0].breaker.enabled);
}

TEST(ConfigYaml, AnUnknownFieldIsReportedWithItsPositionAndPath) {
  const auto p = problems_of(std::string(kMinimal) + "    colour: blue\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].substr(0, p[0].find(" (known")),
            "test.yaml:11:5: interfaces[0].colour: unknown field \"colour\"");
}

// Names and descriptions go to JSON answers, the audit log and exports, which must read back.
TEST(ConfigYaml, TextThatIsNotUtf8IsRefusedWhereItStops) {
  for (const std::string bad : {"x\xff", "x\xc3(", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "x\xe2\x82"}) {
    const auto p = problems_of(std::string(kMinimal) + "    description: \"a " + bad + "\"\n");
    ASSERT_EQ(p.size(), 1u) << bad;
    EXPECT_EQ(p[0], "test.yaml:11:" + std::to_string(21 + (bad[0] == 'x' ? 1 : 0)) + ": is not valid UTF-8 text") << bad;
  }
  EXPECT_TRUE(problems_of(std::string(kMinimal) + "    description: \"订单 ✓ \xf0\x9f\x98\x80\"\n").empty());
}

// A status given by itself and in its class counts once, and exports once.
TEST(ConfigYaml, AFailureStatusGivenTwiceCountsOnce) {
  std::string text = kMinimal;
  const std::string targets = "    targets: [127.0.0.1:8081]\n";
  text.insert(text.find(targets) + targets.size(), "    failure_statuses: [429, 4xx, 429]\n");
  const auto c = load_ok(text);
  ASSERT_EQ(c->upstreams[0].failure_statuses.size(), 100u);
  EXPECT_EQ(c->upstreams[0].failure_statuses[0], 429);
  const std::string exported = to_yaml(*c);
  EXPECT_EQ(exported.find("429, 429"), std::string::npos);
  EXPECT_EQ(load_ok(exported)->upstreams[0].failure_statuses, c->upstreams[0].failure_statuses);
}

// YAML::Load reads the first document of several and drops the rest: a stray "---", or files
// joined, would lose what follows without a word.
TEST(ConfigYaml, ASecondYamlDocumentIsRefused) {
  const auto p = problems_of(std::string(kMinimal) + "---\nsystems:\n  - key: b\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(p[0].starts_with("test.yaml:12:1: a second YAML document (after a \"---\" line) begins here")) << p[0];
  // A "---" with nothing after it drops nothing.
  EXPECT_TRUE(problems_of(std::string(kMinimal) + "---\n").empty());
  EXPECT_TRUE(problems_of(std::string(kMinimal) + "--- # end\n").empty());
}

// YAML reads the first of two equal keys and drops the other: a setting given twice is refused, so
// that an override added at the end of a file is not silently ignored.
TEST(ConfigYaml, AFieldGivenTwiceIsRefusedWhereverItIs) {
  const std::string text = std::string("listen: 127.0.0.1:8080\n") + kMinimal + "    path: /api/other\n" +
                           "    limits: [{algorithm: fixed_window, limit: 10, period: 1s, limit: 20}]\n" +
                           "listen: 127.0.0.1:9999\n";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], "test.yaml:14:1: listen: is given twice (first on line 1): only the first would count");
  EXPECT_EQ(p[1], "test.yaml:12:5: interfaces[0].path: is given twice (first on line 10): only the first would count");
  EXPECT_EQ(p[2],
            "test.yaml:13:63: interfaces[0].limits[0].limit: is given twice (first on line 13): only the first "
            "would count");
}

// A store address is read as the gateway reads it at start: no check passes what cannot start.
TEST(ConfigYaml, AStoreAddressTheGatewayCouldNotUseIsRefused) {
  for (const auto& [store, why] : std::vector<std::pair<std::string, std::string>>{
           {"redis://127.0.0.1:x", "redis address: bad port 'x'"},
           {"redis://:6379", "redis address: missing host"},
           {"redis-cluster://[::1", "redis address: unclosed '['"},
           {"memcached://127.0.0.1", "must be local, redis://host:port or redis-cluster://host:port,host:port"}}) {
    const auto p = problems_of("store: \"" + store + "\"\n" + kMinimal);
    ASSERT_EQ(p.size(), 1u) << store;
    EXPECT_EQ(p[0], "test.yaml:1:8: store: " + why) << store;
  }
  EXPECT_TRUE(problems_of(std::string("store: redis-cluster://a:1,b:2\n") + kMinimal).empty());
}

// A status out of range is named by its place in the list as written, not among the statuses a
// class before it expands to.
TEST(ConfigYaml, AFailureStatusOutOfRangeIsNamedByItsPlaceInTheList) {
  const auto p = problems_of(
      "upstreams:\n"
      "  - {name: app, targets: [127.0.0.1:8081], failure_statuses: [5xx, 404, 99]}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "test.yaml:2:73: upstreams[0].failure_statuses[2]: must be an HTTP status from 100 to 599");
}

// A target written as a URL (nginx's proxy_pass takes one) or with port 0 reads as host:port, but
// every request to it would fail to connect: refused, saying what to write.
TEST(ConfigYaml, ATargetThatNoConnectionCouldReachIsRefused) {
  const auto p = problems_of(
      "upstreams:\n"
      "  - {name: app, targets: [\"http://127.0.0.1:8081\", \"https://api.example.com:443\", 127.0.0.1:0,\n"
      "                          \"a/b:80\", \"[::1]:8081\", app-1.internal:8081]}\n");
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0], "test.yaml:2:27: upstreams[0].targets[0]: \"http://127.0.0.1:8081\" is a URL: give host:port "
                  "(127.0.0.1:8081); sluice speaks plain HTTP/1.1 to its upstreams");
  EXPECT_EQ(p[1], "test.yaml:2:52: upstreams[0].targets[1]: \"https://api.example.com:443\" is a URL: give "
                  "host:port (api.example.com:443); sluice speaks plain HTTP/1.1 to its upstreams");
  EXPECT_EQ(p[2], "test.yaml:2:83: upstreams[0].targets[2]: \"127.0.0.1:0\": port 0 is no port to connect to");
  EXPECT_EQ(p[3], "test.yaml:3:27: upstreams[0].targets[3]: \"a/b:80\" is not host:port");
}

// An id longer than 256 bytes could be made, but a key would not fit the header it travels in, nor
// an id the admin API path that changes or deletes it.
TEST(ConfigYaml, IdsKeysAndNamesAreAtMost256Bytes) {
  const std::string at_most(256, 'a');
  const std::string longer(257, 'b');
  const auto config = [](const std::string& id) {
    return "upstreams: [{name: " + id + ", targets: [127.0.0.1:1]}]\n"
           "systems: [{key: " + id + ", interfaces: [\"*\"], limits: [{name: " + id +
           ", algorithm: fixed_window, limit: 1, period: 1s}]}]\n"
           "interfaces: [{id: " + id + ", path: /x, upstream: " + id + "}]\n";
  };
  EXPECT_TRUE(problems_of(config(at_most)).empty());
  const auto p = problems_of(config(longer));
  ASSERT_EQ(p.size(), 4u);
  for (const std::string& problem : p) {
    EXPECT_NE(problem.find(": must be at most 256 bytes long, got 257"), std::string::npos) << problem;
  }
}

// The admin API names a system, an interface or an upstream in its URLs, where "." and ".." are
// steps in the path to a browser or an HTTP client: such an id is refused.
TEST(ConfigYaml, AnIdAUrlCannotNameIsRefused) {
  for (const std::string dots : {".", ".."}) {
    const std::string text = "upstreams: [{name: '" + dots + "', targets: [127.0.0.1:1]}]\n"
                             "systems: [{key: '" + dots + "', interfaces: ['" + dots + "']}]\n"
                             "interfaces: [{id: '" + dots + "', path: /x, upstream: '" + dots + "'}]\n";
    const auto p = problems_of(text);
    ASSERT_EQ(p.size(), 3u) << dots;
    for (const std::string& problem : p) {
      EXPECT_NE(problem.find(": cannot be \"" + dots + "\": a URL cannot name it"), std::string::npos) << problem;
    }
  }
  EXPECT_TRUE(problems_of("upstreams: [{name: '...', targets: [127.0.0.1:1]}]\n").empty());
  // A credential's id is in a URL too (to revoke it).
  const auto credential = problems_of(
      "systems: [{key: crm, auth: api_key, credentials: [{id: '..', kind: api_key, "
      "api_key_sha256: " + std::string(64, 'a') + ", created: '2026-11-30T10:00:00Z'}]}]\n");
  ASSERT_EQ(credential.size(), 1u);
  EXPECT_NE(credential[0].find("systems[0].credentials[0].id: cannot be \"..\""), std::string::npos) << credential[0];
}

TEST(ConfigYaml, ALimitOutOfRangeNamesTheFieldInsideTheList) {
  const std::string text = std::string(kMinimal) +
                           "    limits:\n"
                           "      - {algorithm: fixed_window, limit: 10, period: 1s}\n"
                           "      - {algorithm: sliding_window, limit: 10, period: 400d}\n";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "test.yaml:13:56: interfaces[0].limits[1].period: period must be between 1ms and 365d, got 400d");
}

TEST(ConfigYaml, ABadDurationAndABadNumberAreBothReported) {
  const std::string text = std::string(kMinimal) +
                           "    limits:\n"
                           "      - {algorithm: gcra, limit: five, period: 1s}\n"
                           "    timeout: 3 seconds\n";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "test.yaml:12:34: interfaces[0].limits[0].limit: must be a whole number, got \"five\"");
  EXPECT_EQ(p[1], "test.yaml:13:14: interfaces[0].timeout: must be a duration like 500ms, 15s, 1m, 2h or 1d, got \"3 seconds\"");
}

// A whole number too large for any field is said to be out of range, not "not a whole number".
TEST(ConfigYaml, AWholeNumberTooLargeIsOutOfRange) {
  const std::string text = std::string(kMinimal) +
                           "    limits:\n"
                           "      - {algorithm: gcra, limit: 99999999999999999999, period: 1s}\n";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "test.yaml:12:34: interfaces[0].limits[0].limit: is out of range, got 99999999999999999999");
}

TEST(ConfigYaml, AParameterThatDoesNotBelongToTheAlgorithmIsRefused) {
  const std::string text = std::string(kMinimal) +
                           "    limits:\n"
                           "      - {algorithm: fixed_window, limit: 10, period: 1s, burst: 3}\n";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "test.yaml:12:65: interfaces[0].limits[0].burst: is not a parameter of fixed_window");
}

TEST(ConfigYaml, ReferencesToUnknownInterfacesUpstreamsAndSystemsAreRefused) {
  const std::string text = R"(upstreams:
  - name: app
    targets: [127.0.0.1:8081]
systems:
  - key: crm
    interfaces: [orders, nope]
interfaces:
  - id: orders
    path: /api/orders
    upstream: elsewhere
grants:
  - {system: ghost, interface: orders}
)";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], "test.yaml:10:15: interfaces[0].upstream: names no upstream: \"elsewhere\"");
  EXPECT_EQ(p[1], "test.yaml:6:26: systems[0].interfaces[1]: names no interface: \"nope\"");
  EXPECT_EQ(p[2], "test.yaml:12:14: grants[0].system: names no system: \"ghost\"");
}

TEST(ConfigYaml, DuplicateIdsAndConflictingRoutesAreRefused) {
  const std::string text = R"(upstreams:
  - {name: app, targets: [127.0.0.1:1]}
  - {name: app, targets: [127.0.0.1:2]}
systems:
  - {key: crm, interfaces: ["*"]}
  - {key: crm, interfaces: ["*"]}
interfaces:
  - {id: a, path: "/x/{id}", methods: [GET], upstream: app}
  - {id: b, path: "/x/{name}", methods: [GET, POST], upstream: app}
  - {id: c, path: "/x/{name}", methods: [DELETE], upstream: app}
)";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], "test.yaml:3:12: upstreams[1].name: \"app\" is the name of another upstream too");
  EXPECT_EQ(p[1], "test.yaml:9:19: interfaces[1].path: \"/x/{name}\" claims the same requests as interface \"a\" (/x/{id})");
  EXPECT_EQ(p[2], "test.yaml:6:11: systems[1].key: \"crm\" is the key of another system too");
}

TEST(ConfigYaml, BreakerSettingsAreValidatedByTheBreaker) {
  const std::string text = R"(upstreams:
  - name: app
    targets: [127.0.0.1:8081]
    breaker: {failure_rate: 150}
)";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "test.yaml:4:29: upstreams[0].breaker.failure_rate: must be a percentage from 0 to 100, got 150");
}

// A breaker that would take every call for slow is refused (one whose count window is smaller than
// minimum_calls is not: it judges its rates once the window is full).
TEST(ConfigYaml, ABreakerThatTakesEveryCallForSlowIsRefused) {
  EXPECT_EQ(problems_of("upstreams: [{name: app, targets: [127.0.0.1:1], breaker: {slow_call_rate: 50, slow_call: 0s}}]\n"),
            (std::vector<std::string>{
                "test.yaml:1:90: upstreams[0].breaker.slow_call: must be more than 0, got 0s"}));
  EXPECT_TRUE(problems_of("upstreams: [{name: app, targets: [127.0.0.1:1], breaker: {window: 5, "
                          "slow_call_rate: 50, slow_call: 500us}}]\n")
                  .empty());
  EXPECT_TRUE(problems_of("upstreams: [{name: app, targets: [127.0.0.1:1], breaker: {slow_call: 0s}}]\n").empty())
      << "slow_call_rate 0: slow calls are not judged";
}

// Problems in different places are all reported at once: a limit's range beside a breaker's
// settings (each of them) and an interface's; an entity with a field that could not be read is not
// judged again on what was read of it.
TEST(ConfigYaml, RangeProblemsAcrossTheFileAreReportedTogether) {
  const std::string text = R"(upstreams:
  - name: app
    targets: [127.0.0.1:1]
    breaker: {failure_rate: 101, jitter_percent: -1, window: 0, half_open_probes: 0}
systems:
  - key: crm
    interfaces: [x]
    limits:
      - {algorithm: fixed_window, limit: 0, period: 1s}
      - {algorithm: fixed_window, limit: 5, period: 1s, name: "a\"b"}
interfaces:
  - {id: x, path: /x, upstream: app, concurrency: 0}
)";
  EXPECT_EQ(problems_of(text),
            (std::vector<std::string>{
                "test.yaml:9:42: systems[0].limits[0].limit: limit must be between 1 and 2^40 (1099511627776), got 0",
                "test.yaml:4:29: upstreams[0].breaker.failure_rate: must be a percentage from 0 to 100, got 101",
                "test.yaml:4:50: upstreams[0].breaker.jitter_percent: must be a percentage from 0 to 100, got -1",
                "test.yaml:4:62: upstreams[0].breaker.window: must be at least 1, got 0",
                "test.yaml:4:83: upstreams[0].breaker.half_open_probes: must be at least 1, got 0",
                "test.yaml:12:51: interfaces[0].concurrency: must be between 1 and 2^40"}));
}

// A field that does not read is not judged further (a limit that could not be made is missing from
// its list), but the entity's other fields are: a limit out of range does not hide, until it is
// mended, a reference to nothing beside it.
TEST(ConfigYaml, AValueOutOfRangeDoesNotHideAReferenceToNothingBesideIt) {
  const std::string text = R"(upstreams:
  - {name: app, targets: [127.0.0.1:1]}
systems:
  - key: s1
    interfaces: [a, nosuch]
    limits: [{algorithm: fixed_window, limit: 0, period: 1h}]
interfaces:
  - {id: a, path: /a, upstream: ap, limits: [{algorithm: fixed_window, limit: 5, period: 400d}]}
grants:
  - {system: s9, interface: a, limits: [{algorithm: gcra, limit: 5, period: 1m, burst: 0}]}
)";
  EXPECT_EQ(problems_of(text),
            (std::vector<std::string>{
                "test.yaml:6:47: systems[0].limits[0].limit: limit must be between 1 and 2^40 (1099511627776), got 0",
                "test.yaml:8:90: interfaces[0].limits[0].period: period must be between 1ms and 365d, got 400d",
                "test.yaml:10:88: grants[0].limits[0].burst: burst must be between 1 and 2^40 (1099511627776), got 0",
                "test.yaml:8:33: interfaces[0].upstream: names no upstream: \"ap\"",
                "test.yaml:5:21: systems[0].interfaces[1]: names no interface: \"nosuch\"",
                "test.yaml:10:14: grants[0].system: names no system: \"s9\""}));
  // A check across an entity's fields does not judge the default standing in for one that did not
  // read: a lease timeout beside a concurrency that did not read is not "without concurrency".
  EXPECT_EQ(problems_of(R"(upstreams:
  - {name: app, targets: [127.0.0.1:1]}
interfaces:
  - {id: a, path: /a, upstream: app, concurrency: lots, concurrency_lease_timeout: 30s}
)"),
            (std::vector<std::string>{"test.yaml:4:51: interfaces[0].concurrency: must be a whole number, got \"lots\""}));
}

// A system key is sent as a header field's value: one with a control character, or a space at
// either end, could never be matched, and is refused.
TEST(ConfigYaml, ASystemKeyNoHeaderCanCarryIsRefused) {
  for (const char* key : {"\"a\\nb\"", "\"a\\tb\"", "\" crm\"", "\"crm \""}) {
    const auto p = problems_of(std::string("systems:\n  - key: ") + key + "\n");
    ASSERT_EQ(p.size(), 1u) << key;
    EXPECT_NE(p[0].find("systems[0].key: must not hold control characters, nor begin or end with a space"),
              std::string::npos) << p[0];
  }
  EXPECT_TRUE(problems_of("systems:\n  - key: \"crm team\"\n").empty());
}

// Written, ids, keys and names may not hold a character that shows nothing (a zero-width space, a
// no-break space, a direction mark): two that differ only by one would look the same in the
// console, the logs and the audit log. Letters of any script may. Read, they are taken (a value an
// earlier version stored must not stop a gateway), and so is what the configuration written over
// held already.
TEST(ConfigWriteRules, IdsThatHideACharacterAreRefusedWhenWritten) {
  const auto ok = load_ok("upstreams: [{name: app, targets: [127.0.0.1:1]}]\n"
                          "interfaces: [{id: \"заказы\", path: /a, upstream: app}]\n"
                          "systems: [{key: \"订单\", interfaces: [\"заказы\"]}]\n");
  ASSERT_NE(ok, nullptr);
  EXPECT_TRUE(config::write_problems(*ok, nullptr).empty());
  for (const char* hidden : {"\u200b", "\u00a0", "\u202e", "\ufeff", "\u2066", "\u061c", "\ufe0f"}) {
    const std::string name = std::string("cr") + hidden + "m";
    const auto c = load_ok("upstreams: [{name: \"" + name + "\", targets: [127.0.0.1:1]}]\n"
                           "interfaces: [{id: \"" + name + "\", path: /a, upstream: \"" + name + "\",\n"
                           "              limits: [{name: \"" + name + "\", algorithm: fixed_window, limit: 1, period: 1s}]}]\n"
                           "systems: [{key: \"" + name + "\"}]\n");
    ASSERT_NE(c, nullptr) << hidden;
    std::vector<std::string> paths;
    for (const config::Problem& p : config::write_problems(*c, nullptr)) {
      EXPECT_EQ(p.message, "must not hold invisible characters or bytes that are not UTF-8");
      paths.push_back(p.path);
    }
    EXPECT_EQ(paths, (std::vector<std::string>{"upstreams[0].name", "interfaces[0].id", "interfaces[0].limits[0].name",
                                               "systems[0].key"}))
        << hidden;
    EXPECT_TRUE(config::write_problems(*c, c.get()).empty()) << "held already: " << hidden;
    config::Config added = *c;
    added.systems.push_back(added.systems[0]);
    added.systems[1].key = "erp\u200b";
    const auto p = config::write_problems(added, c.get());
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].path, "systems[1].key");
  }
}

// Written, a description is at most 4096 bytes (each change copies it twice into the audit log);
// one held already, unchanged, is not judged.
TEST(ConfigWriteRules, ALongDescriptionIsRefusedWhenWritten) {
  auto c = load_ok("upstreams: [{name: app, targets: [127.0.0.1:1]}]\n"
                   "interfaces: [{id: a, path: /a, upstream: app}]\n"
                   "systems: [{key: crm}]\n");
  ASSERT_NE(c, nullptr);
  config::Config next = *c;
  next.systems[0].description.assign(4096, 'd');
  EXPECT_TRUE(config::write_problems(next, c.get()).empty());
  next.systems[0].description.push_back('d');
  next.interfaces[0].description.assign(5000, 'd');
  std::vector<std::string> got;
  for (const config::Problem& p : config::write_problems(next, c.get())) got.push_back(p.path + ": " + p.message);
  EXPECT_EQ(got, (std::vector<std::string>{"interfaces[0].description: must be at most 4096 bytes long, got 5000",
                                           "systems[0].description: must be at most 4096 bytes long, got 4097"}));
  EXPECT_TRUE(config::write_problems(next, &next).empty());
  EXPECT_TRUE(problems_of("systems: [{key: crm, description: \"" + std::string(5000, 'd') + "\"}]\n").empty())
      << "read, it is taken";
}

// The system key cannot travel in a header the gateway reads for its own ends: with X-Api-Key (in
// any spelling the gateway takes for it), every request would be refused as a bad API key; with
// Content-Length, a request's length would be its key. Others that could carry one are taken.
TEST(ConfigYaml, ASystemKeyHeaderOfTheGatewaysOwnIsRefused) {
  for (const char* header : {"X-Api-Key", "x-api-key", "X_Api_Key", "Content-Length", "Content_Length",
                             "Transfer-Encoding", "Connection", "Expect", "Upgrade"}) {
    const auto p = problems_of(std::string("system_key_header: ") + header + "\n");
    ASSERT_EQ(p.size(), 1u) << header;
    EXPECT_NE(p[0].find(std::string("system_key_header: cannot be ") + header + ": the gateway reads that header"),
              std::string::npos) << p[0];
  }
  for (const char* header : {"systemKey", "X-System-Key", "Host", "X-Sluice-Tenant", "Authorization", "Keep-Alive"}) {
    EXPECT_TRUE(problems_of(std::string("system_key_header: ") + header + "\n").empty()) << header;
  }
}

TEST(ConfigYaml, AGrantNeedsThePermissionItRefinesUnlessTheInterfaceIsPublic) {
  const std::string text = std::string(kMinimal) +
                           "  - {id: users, path: /api/users, upstream: app}\n"
                           "  - {id: login, path: /api/login, upstream: app, public: true}\n"
                           "grants:\n"
                           "  - {system: crm, interface: users}\n"
                           "  - {system: crm, interface: login}\n";
  const auto p = problems_of(text);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "test.yaml:14:5: grants[0]: system \"crm\" may not call interface \"users\": add it to the system's interfaces");
}

TEST(ConfigYaml, ASyntaxErrorPointsAtItsLine) {
  const auto p = problems_of("systems:\n  - key: [unclosed\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("test.yaml:3:", 0), 0u) << p[0];
}

TEST(ConfigYaml, LanguageAndHeaderFormsAreRead) {
  auto c = load_ok(std::string("language: zh-CN\nrate_limit_headers: legacy\nsystem_key_header: systemKey\n") + kMinimal);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->language, Language::kChinese);
  EXPECT_EQ(c->rate_limit_headers, RateLimitHeaders::kLegacy);
  EXPECT_EQ(c->system_key_header, "systemKey");
  EXPECT_EQ(problems_of(std::string("language: fr\n") + kMinimal),
            std::vector<std::string>{"test.yaml:1:11: language: must be en or zh-CN, got \"fr\""});
}

// The first key an object has twice, with the keys around it; none for JSON without a repeat,
// equal keys in different objects, or text that is not JSON.
TEST(ConfigJson, RepeatedKeysAreFoundWithTheirPath) {
  EXPECT_EQ(repeated_key(R"({"a":1,"b":2,"a":3})"), "a");
  EXPECT_EQ(repeated_key(R"({"a":{"x":1,"y":{"z":1},"x":2}})"), "a.x");
  EXPECT_EQ(repeated_key(R"({"a":[{"k":1},{"k":2,"k":3}]})"), "a.k");
  EXPECT_EQ(repeated_key(R"([{"k":1,"k":1}])"), "k");
  EXPECT_EQ(repeated_key(R"({"a\u0062":1,"ab":2})"), "ab");  // equal once unescaped
  EXPECT_EQ(repeated_key(R"({"a":{"k":1},"b":{"k":1},"k":[{"k":1}]})"), std::nullopt);
  EXPECT_EQ(repeated_key(R"({"a":1,"b":[1,2,{"a":1}]})"), std::nullopt);
  std::string many = "{";
  for (int i = 0; i < 20000; ++i) many += "\"k" + std::to_string(i) + "\":0,";
  EXPECT_EQ(repeated_key(many + "\"x\":1}"), std::nullopt);
  EXPECT_EQ(repeated_key(many + "\"k19999\":1}"), "k19999");
  EXPECT_EQ(repeated_key("not json"), std::nullopt);
  EXPECT_EQ(repeated_key(""), std::nullopt);
}

// trusted_proxies: read, written back, stored only when some are named, checked.
TEST(ConfigYaml, TrustedProxiesAreReadExportedAndChecked) {
  auto c = load_ok("trusted_proxies: [10.0.0.0/8, \"2001:db8::/32\", 192.0.2.7]\n" + std::string(kMinimal));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->trusted_proxies, (std::vector<std::string>{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7"}));
  const auto again = load_ok(config::to_yaml(*c));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->trusted_proxies, c->trusted_proxies);
  EXPECT_EQ(config::to_json(*c).at("trusted_proxies").as_array().size(), 3u);
  EXPECT_TRUE(load_ok(kMinimal)->trusted_proxies.empty());
  EXPECT_FALSE(config::to_json(*load_ok(kMinimal)).contains("trusted_proxies"));
  EXPECT_EQ(config::to_yaml(*load_ok(kMinimal)).find("trusted_proxies"), std::string::npos);
  EXPECT_EQ(problems_of("trusted_proxies: [10.0.0.1/8, lb.internal, 0.0.0.0/0]\n" + std::string(kMinimal)),
            (std::vector<std::string>{
                "test.yaml:1:19: trusted_proxies[0]: must be an IP address or a range such as 10.0.0.0/8, got \"10.0.0.1/8\"",
                "test.yaml:1:31: trusted_proxies[1]: must be an IP address or a range such as 10.0.0.0/8, got \"lb.internal\"",
                "test.yaml:1:44: trusted_proxies[2]: is every address: every client's X-Forwarded-For would be believed; "
                "name the proxies in front of sluice"}));
}

// decide_client_ip_from: read, written back, stored only when not the default, checked.
TEST(ConfigYaml, DecideClientIpFromIsReadExportedAndChecked) {
  auto c = load_ok("decide_client_ip_from: [10.0.0.0/8, \"2001:db8::/32\", 192.0.2.7]\n" + std::string(kMinimal));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->decide_client_ip_from, (std::vector<std::string>{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7"}));
  const auto again = load_ok(config::to_yaml(*c));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->decide_client_ip_from, c->decide_client_ip_from);
  EXPECT_EQ(config::to_json(*c).at("decide_client_ip_from").as_array().size(), 3u);
  EXPECT_EQ(load_ok(kMinimal)->decide_client_ip_from, (std::vector<std::string>{"127.0.0.0/8", "::1"}));
  EXPECT_FALSE(config::to_json(*load_ok(kMinimal)).contains("decide_client_ip_from"));
  EXPECT_TRUE(load_ok("decide_client_ip_from: []\n" + std::string(kMinimal))->decide_client_ip_from.empty());
  EXPECT_EQ(problems_of("decide_client_ip_from: [10.0.0.1/8, 10.0.0.0/33, host, 10.0.0.0/]\n" + std::string(kMinimal)),
            (std::vector<std::string>{
                "test.yaml:1:25: decide_client_ip_from[0]: must be an IP address or a range such as 10.0.0.0/8, got \"10.0.0.1/8\"",
                "test.yaml:1:37: decide_client_ip_from[1]: must be an IP address or a range such as 10.0.0.0/8, got \"10.0.0.0/33\"",
                "test.yaml:1:50: decide_client_ip_from[2]: must be an IP address or a range such as 10.0.0.0/8, got \"host\"",
                "test.yaml:1:56: decide_client_ip_from[3]: must be an IP address or a range such as 10.0.0.0/8, got \"10.0.0.0/\""}));
}

// A range holds the addresses that share its prefix; an IPv4-mapped IPv6 address is its IPv4 one.
TEST(ConfigNetworks, ARangeHoldsTheAddressesSharingItsPrefix) {
  const auto ten = parse_network("10.0.0.0/8");
  ASSERT_TRUE(ten.has_value());
  EXPECT_TRUE(ten->contains("10.255.1.2"));
  EXPECT_TRUE(ten->contains("::ffff:10.0.0.1"));
  EXPECT_FALSE(ten->contains("11.0.0.1"));
  EXPECT_FALSE(ten->contains("::a00:1"));  // IPv6, though its last bits are 10.0.0.1's
  EXPECT_FALSE(ten->contains("not an address"));
  const auto odd = parse_network("192.168.1.128/25");
  ASSERT_TRUE(odd.has_value());
  EXPECT_TRUE(odd->contains("192.168.1.200"));
  EXPECT_FALSE(odd->contains("192.168.1.127"));
  const auto one = parse_network("::1");
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->prefix, 128);
  EXPECT_TRUE(one->contains("::1"));
  EXPECT_FALSE(one->contains("::2"));
  EXPECT_TRUE(parse_network("0.0.0.0/0")->contains("203.0.113.9"));
  EXPECT_FALSE(parse_network("0.0.0.0/0")->contains("2001:db8::1"));
  EXPECT_TRUE(parse_network("2001:db8::/32")->contains("2001:db8:ffff::1"));
  for (const char* bad : {"10.0.0.1/8", "10.0.0.0/33", "::/129", "10.0.0.0/-1", "10.0.0.0/8x", "", "/8", "10.0.0.0/ 8"}) {
    EXPECT_FALSE(parse_network(bad).has_value()) << bad;
  }
}

// A target reads back from what to_string writes; as a Host field's authority, an IPv6 zone's "%"
// is written "%25" (RFC 6874), and nothing else changes.
TEST(ConfigTargets, ReadBackAndWriteAnIpv6ZoneEncodedInAnAuthority) {
  for (const char* text : {"127.0.0.1:8081", "[::1]:80", "[fe80::1%eth0]:8080", "app.internal:443"}) {
    const auto t = parse_target(text);
    ASSERT_TRUE(t.has_value()) << text;
    EXPECT_EQ(to_string(*t), text);
  }
  EXPECT_EQ(authority_of(*parse_target("[fe80::1%eth0]:8080")), "[fe80::1%25eth0]:8080");
  EXPECT_EQ(authority_of(*parse_target("[::1]:80")), "[::1]:80");
  EXPECT_EQ(authority_of(*parse_target("127.0.0.1:8081")), "127.0.0.1:8081");
  EXPECT_FALSE(parse_target("[::1]").has_value());
  EXPECT_FALSE(parse_target("host:65536").has_value());
}

TEST(ConfigLimits, FieldsRoundTripForEveryAlgorithm) {
  const Limit limits[] = {
      *Limit::token_bucket({.capacity = 100, .refill_tokens = 10, .refill_period = 1s}),
      *Limit::token_bucket({.capacity = 100, .refill_tokens = 10, .refill_period = 2s, .refill = Refill::kInterval}),
      *Limit::gcra({.limit = 5, .period = 1min, .burst = 2}),
      *Limit::sliding_log({.limit = 50, .period = 15s}),
      *Limit::sliding_window({.limit = 20, .period = 1s}),
      *Limit::fixed_window({.limit = 1000, .period = 1h}),
      *Limit::concurrency({.limit = 10, .lease_timeout = 30s}),
  };
  for (const Limit& l : limits) {
    LimitFields fields;
    for (const auto& [k, v] : limit_fields(l)) fields[k] = v;
    auto back = limit_from_fields(fields, nullptr);
    ASSERT_TRUE(back.ok()) << l.to_string();
    EXPECT_EQ(*back, l) << l.to_string();
  }
}

TEST(ConfigLimits, GcraBurstDefaultsToTheLimit) {
  auto l = limit_from_fields({{"algorithm", "gcra"}, {"limit", "5"}, {"period", "1m"}}, nullptr);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, *Limit::gcra({.limit = 5, .period = 1min, .burst = 5}));
}

TEST(ConfigLimits, ATokenBucketWithoutARateSaysWhichFieldsItNeeds) {
  std::vector<Problem> p;
  EXPECT_FALSE(limit_from_fields({{"algorithm", "token_bucket"}, {"capacity", "5"}}, &p).ok());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].path, "rate");
  EXPECT_NE(p[0].message.find("refill_interval"), std::string::npos);
}

// Both refill forms given: said as that, not as a field that is no parameter of a token bucket.
TEST(ConfigLimits, ATokenBucketWithBothRefillFormsSaysToGiveOne) {
  std::vector<Problem> p;
  EXPECT_FALSE(limit_from_fields({{"algorithm", "token_bucket"}, {"capacity", "5"}, {"rate", "1"}, {"per", "1s"},
                                  {"refill_tokens", "1"}, {"refill_interval", "1s"}},
                                 &p)
                   .ok());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].path, "refill_tokens");
  EXPECT_EQ(p[0].message,
            "cannot go with rate and per: give rate and per (continuous refill), or refill_tokens and "
            "refill_interval (refill in steps), not both");
}

// Every field of a limit that does not read or is out of range is reported, not the first.
TEST(ConfigLimits, EveryParameterOutOfRangeIsReportedWithItsField) {
  std::vector<Problem> p;
  EXPECT_FALSE(limit_from_fields({{"algorithm", "token_bucket"}, {"capacity", "0"}, {"rate", "-1"}, {"per", "0s"},
                                  {"colour", "red"}},
                                 &p)
                   .ok());
  std::vector<std::string> fields;
  for (const Problem& one : p) fields.push_back(one.path);
  EXPECT_EQ(fields, (std::vector<std::string>{"capacity", "rate", "per", "colour"}));
  EXPECT_NE(p[1].message.find("refill tokens must be between 1 and 2^40"), std::string::npos) << p[1].message;
  p.clear();
  EXPECT_FALSE(limit_from_fields({{"algorithm", "gcra"}, {"limit", "x"}, {"period", "400d"}, {"burst", "0"}}, &p).ok());
  fields.clear();
  for (const Problem& one : p) fields.push_back(one.path);
  EXPECT_EQ(fields, (std::vector<std::string>{"limit", "period", "burst"}));
  // What no one field decides, the time to fill, is the limit's as a whole.
  p.clear();
  EXPECT_FALSE(limit_from_fields({{"algorithm", "gcra"}, {"limit", "1"}, {"period", "365d"}, {"burst", "1099511627776"}}, &p)
                   .ok());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].path, "");
  EXPECT_NE(p[0].message.find("100 years"), std::string::npos) << p[0].message;
}

TEST(PathPattern, MatchesExactParameterAndPrefixPatterns) {
  std::string error;
  auto exact = *PathPattern::parse("/api/orders", &error);
  auto param = *PathPattern::parse("/api/orders/{id}", &error);
  auto prefix = *PathPattern::parse("/api/orders/*", &error);
  EXPECT_TRUE(exact.matches("/api/orders"));
  EXPECT_FALSE(exact.matches("/api/orders/"));
  EXPECT_FALSE(exact.matches("/api/orders/7"));
  EXPECT_TRUE(param.matches("/api/orders/7"));
  EXPECT_FALSE(param.matches("/api/orders/7/items"));
  EXPECT_FALSE(param.matches("/api/orders/"));
  EXPECT_TRUE(prefix.matches("/api/orders"));
  EXPECT_TRUE(prefix.matches("/api/orders/7/items"));
  EXPECT_FALSE(prefix.matches("/api/ordersx"));
}

TEST(PathPattern, ALiteralBeatsAParameterWhichBeatsAWildcard) {
  std::string e;
  auto lit = *PathPattern::parse("/a/b/c", &e);
  auto param = *PathPattern::parse("/a/{x}/c", &e);
  auto deep_prefix = *PathPattern::parse("/a/b/*", &e);
  auto shallow_prefix = *PathPattern::parse("/a/*", &e);
  EXPECT_LT(lit.compare_specificity(param), 0);
  EXPECT_LT(deep_prefix.compare_specificity(param), 0);  // the earlier literal decides
  EXPECT_LT(deep_prefix.compare_specificity(shallow_prefix), 0);
  EXPECT_LT(param.compare_specificity(shallow_prefix), 0);
  EXPECT_EQ(param.compare_specificity(*PathPattern::parse("/a/{y}/c", &e)), 0);
}

TEST(PathPattern, RefusesMalformedPatterns) {
  std::string e;
  EXPECT_FALSE(PathPattern::parse("api", &e));
  EXPECT_FALSE(PathPattern::parse("/a/*/b", &e));
  EXPECT_FALSE(PathPattern::parse("/a/{id", &e));
  EXPECT_FALSE(PathPattern::parse("/a/x{id}", &e));
  EXPECT_FALSE(PathPattern::parse("/a/../b", &e));
  EXPECT_FALSE(PathPattern::parse("/a//b", &e));
  EXPECT_EQ(e, "has an empty segment ('//' or a trailing '/')");
}

}  // namespace
}  // namespace sluice::config
