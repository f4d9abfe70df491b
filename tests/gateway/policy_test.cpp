// The policy without sockets: every reason code, the order of the checks, the limits all or
// nothing, shadow limits, store failures, the response headers, and state keys across reloads.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "config/yaml.h"
#include "load_config.h"
#include "gateway/policy.h"
#include "sluice/local_store.h"

namespace sluice::gateway {
namespace {

using namespace std::chrono_literals;

// 2023-11-14 21:00:00 UTC, aligned to every window the tests use.
constexpr Nanos kT0 = std::chrono::seconds(1'699'995'600);

const char* kConfig = R"(
upstreams:
  - {name: app, targets: [127.0.0.1:1]}
systems:
  - key: crm
    interfaces: [orders, users, closed]
    limits: [{algorithm: fixed_window, limit: 5, period: 1m}]
  - {key: erp, enabled: false, interfaces: ["*"]}
  - {key: lonely, interfaces: []}
  - {key: ops, interfaces: ["*"]}
interfaces:
  - id: orders
    methods: [GET, POST]
    path: /api/orders/*
    upstream: app
    concurrency: 2
    limits:
      - {algorithm: fixed_window, limit: 3, period: 1m}
      - {name: per-user, algorithm: fixed_window, limit: 1, period: 1m, key_by: "header:X-User-Id", shadow: true}
  - {id: order, methods: [GET], path: "/api/orders/{id}", upstream: app}
  - {id: order-items, methods: [GET], path: "/api/orders/{id}/items", upstream: app}
  - {id: users, methods: [GET], path: "/api/users/{id}", upstream: app}
  - {id: closed, path: /api/closed, upstream: app, enabled: false}
  - id: login
    methods: [POST]
    path: /api/login
    upstream: app
    public: true
    limits: [{algorithm: gcra, limit: 2, period: 1m, burst: 2, key_by: client_ip}]
  - {id: search, path: /api/search, upstream: app, limits: [{algorithm: fixed_window, limit: 2, period: 1m, key_by: "query:q"}]}
grants:
  - {system: crm, interface: users, limits: [{algorithm: fixed_window, limit: 2, period: 1m}]}
)";

std::shared_ptr<const config::Config> parse(const std::string& text) { return testing::load_config(text); }

class MapHeaders final : public HeaderLookup {
 public:
  std::map<std::string, std::string> values;
  std::string_view get(std::string_view name) const override {  // as the gateway finds a header
    for (const auto& [k, v] : values) {
      if (config::cgi_alias_of(k, name)) return v;
    }
    return {};
  }
  bool repeated(std::string_view name) const override { return twice.count(std::string(name)) != 0; }
  std::set<std::string> twice;  // headers given twice
};

// A store that is down.
class DownLimiter final : public Limiter {
 public:
  void acquire_all(std::span<const LimitRequest>, std::span<Decision>, Handler done) override {
    std::move(done)(Status(Error{ErrorCode::kStoreUnavailable, "down"}));
  }
  void acquire_each(std::span<const LimitRequest>, std::span<Decision>, Handler done) override {
    std::move(done)(Status(Error{ErrorCode::kStoreUnavailable, "down"}));
  }
  void release(std::string_view, const Limit&, std::uint64_t, Handler done) override {
    std::move(done)(Status(Error{ErrorCode::kStoreUnavailable, "down"}));
  }
};

class PolicyTest : public ::testing::Test {
 protected:
  PolicyTest()
      : clock_(kT0),
        store_(LocalStoreOptions{.clock = &clock_}),
        limiter_(store_),
        breakers_(BreakerRegistry::Options{}),
        snapshot_(std::make_shared<Snapshot>(parse(kConfig), breakers_, 1)) {}

  Reason call(const std::string& method, const std::string& path, const std::string& key = "",
              const std::string& query = "", std::int64_t cost = 1) {
    Request r;
    r.method = method;
    r.path = path;
    r.query = query;
    r.has_system_key = !key.empty();
    r.system_key = key;
    r.client_ip = ip_;
    r.headers = &headers_;
    r.cost = cost;
    r.hold_in_flight = hold_;
    const Verdict& v = decide_now(r, *snapshot_, ctx_, limiter_);
    // Requests end at once unless a test holds them.
    if (!hold_) {
      for (const Lease& l : ctx_.leases) limiter_.release(l.key, *l.limit, l.id, [](Status) {});
    }
    return v.reason;
  }

  std::string headers(config::RateLimitHeaders form = config::RateLimitHeaders::kDraft) const {
    std::vector<std::pair<std::string_view, std::string>> out;
    append_headers(ctx_.verdict, form, out);
    std::string s;
    for (const auto& [k, v] : out) s += std::string(k) + ": " + v + "\n";
    return s;
  }

  ManualClock clock_;
  LocalStore store_;
  StoreLimiter limiter_;
  BreakerRegistry breakers_;
  std::shared_ptr<Snapshot> snapshot_;
  Context ctx_;
  MapHeaders headers_;
  std::string ip_ = "10.0.0.1";
  bool hold_ = false;
};

TEST_F(PolicyTest, AnIdentifiedSystemWithPermissionIsAdmitted) {
  EXPECT_EQ(call("GET", "/api/orders/7/items", "crm"), Reason::kInterfaceForbidden);
  EXPECT_EQ(call("POST", "/api/orders/new", "crm"), Reason::kOk);
  EXPECT_EQ(ctx_.interface->interface->id, "orders");
  EXPECT_EQ(ctx_.system->system->key, "crm");
}

// HEAD is GET without the body (RFC 9110 9.3.2): it goes where GET does.
TEST_F(PolicyTest, AHeadRequestGoesWhereAGetWould) {
  EXPECT_EQ(call("HEAD", "/api/users/1", "crm"), Reason::kOk);
  EXPECT_EQ(ctx_.interface->interface->id, "users");
  EXPECT_EQ(call("HEAD", "/api/login", "ops"), Reason::kInterfaceUnknown) << "POST only";
}

// An interface's in-flight limit holds a dead gateway's place for its concurrency_lease_timeout, 10
// minutes when none is given.
TEST(PolicyRoutes, TheInFlightLimitTakesTheInterfacesLeaseTimeout) {
  BreakerRegistry breakers(BreakerRegistry::Options{});
  const Snapshot snapshot(parse(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces:
  - {id: given, path: /given, upstream: app, concurrency: 5, concurrency_lease_timeout: 30s}
  - {id: default, path: /default, upstream: app, concurrency: 5}
)"),
                          breakers, 1);
  EXPECT_EQ(snapshot.route("GET", "/given")->in_flight_limit->to_string(), "concurrency(limit=5,lease_timeout=30s)");
  EXPECT_EQ(snapshot.route("GET", "/default")->in_flight_limit->to_string(), "concurrency(limit=5,lease_timeout=10m)");
}

// ... unless an interface of the same pattern lists HEAD; a more specific pattern for GET still
// beats a less specific one that lists HEAD.
TEST(PolicyRoutes, AHeadGoesToAnInterfaceOfItsPatternThatListsItFirst) {
  BreakerRegistry breakers(BreakerRegistry::Options{});
  const Snapshot snapshot(parse(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces:
  - {id: get-x, methods: [GET], path: /x, upstream: app}
  - {id: head-x, methods: [HEAD], path: /x, upstream: app}
  - {id: get-p, methods: [GET], path: "/p/{id}", upstream: app}
  - {id: head-p, methods: [HEAD], path: "/p/{name}", upstream: app}
  - {id: get-item, methods: [GET], path: "/api/items/{id}", upstream: app}
  - {id: any-api, methods: [HEAD, POST], path: "/api/*", upstream: app}
)"),
                          breakers, 1);
  auto id = [&](const char* method, const char* path) {
    const InterfaceEntry* e = snapshot.route(method, path);
    return e == nullptr ? std::string("none") : e->interface->id;
  };
  EXPECT_EQ(id("GET", "/x"), "get-x");
  EXPECT_EQ(id("HEAD", "/x"), "head-x");
  EXPECT_EQ(id("HEAD", "/p/1"), "head-p");
  EXPECT_EQ(id("GET", "/p/1"), "get-p");
  EXPECT_EQ(id("HEAD", "/api/items/1"), "get-item");
  EXPECT_EQ(id("HEAD", "/api/other"), "any-api");
  EXPECT_EQ(id("DELETE", "/x"), "none");
}

TEST_F(PolicyTest, ANonPublicInterfaceNeedsASystemKey) {
  EXPECT_EQ(call("GET", "/api/users/1"), Reason::kSystemKeyMissing);
  EXPECT_EQ(status_of(Reason::kSystemKeyMissing), 401);
}

TEST_F(PolicyTest, APublicInterfaceNeedsNoKey) {
  EXPECT_EQ(call("POST", "/api/login"), Reason::kOk);
  EXPECT_EQ(ctx_.system, nullptr);
}

TEST_F(PolicyTest, AnUnknownKeyIsRefusedEvenOnAPublicInterface) {
  EXPECT_EQ(call("POST", "/api/login", "nobody"), Reason::kSystemUnknown);
  EXPECT_EQ(status_of(Reason::kSystemUnknown), 401);
}

TEST_F(PolicyTest, ADisabledSystemIsRefused) {
  EXPECT_EQ(call("GET", "/api/users/1", "erp"), Reason::kSystemDisabled);
  EXPECT_EQ(status_of(Reason::kSystemDisabled), 403);
}

TEST_F(PolicyTest, ASystemWithoutPermissionsIsRefusedBeforeRouting) {
  EXPECT_EQ(call("GET", "/nowhere", "lonely"), Reason::kSystemNoPermissions);
  EXPECT_EQ(call("POST", "/api/login", "lonely"), Reason::kOk);  // public: permissions do not apply
}

TEST_F(PolicyTest, AnUnmatchedMethodOrPathIsAnUnknownInterface) {
  EXPECT_EQ(call("GET", "/api/nothing", "ops"), Reason::kInterfaceUnknown);
  EXPECT_EQ(call("DELETE", "/api/users/1", "ops"), Reason::kInterfaceUnknown);
  EXPECT_EQ(status_of(Reason::kInterfaceUnknown), 404);
}

TEST_F(PolicyTest, ADisabledInterfaceIsRefusedBeforePermissions) {
  EXPECT_EQ(call("GET", "/api/closed", "crm"), Reason::kInterfaceDisabled);
  EXPECT_EQ(call("GET", "/api/closed", "ops"), Reason::kInterfaceDisabled);
}

TEST_F(PolicyTest, AnInterfaceNotGrantedToTheSystemIsForbidden) {
  EXPECT_EQ(call("GET", "/api/search", "crm"), Reason::kInterfaceForbidden);
  EXPECT_EQ(status_of(Reason::kInterfaceForbidden), 403);
}

TEST_F(PolicyTest, TheChecksRunInTheDocumentedOrder) {
  // A missing key is reported before the route is known to be missing.
  EXPECT_EQ(call("GET", "/api/nothing"), Reason::kSystemKeyMissing);
  // Identification comes before routing, routing before permissions.
  EXPECT_EQ(call("GET", "/api/nothing", "nobody"), Reason::kSystemUnknown);
  EXPECT_EQ(call("GET", "/api/nothing", "erp"), Reason::kSystemDisabled);
  EXPECT_EQ(call("GET", "/api/nothing", "crm"), Reason::kInterfaceUnknown);
  // A refused request consumes no limit: crm's 5 per minute are all still there.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
}

TEST_F(PolicyTest, TheMostSpecificRouteWins) {
  EXPECT_EQ(call("GET", "/api/orders/7", "ops"), Reason::kOk);
  EXPECT_EQ(ctx_.interface->interface->id, "order");
  EXPECT_EQ(call("GET", "/api/orders/7/items", "ops"), Reason::kOk);
  EXPECT_EQ(ctx_.interface->interface->id, "order-items");
  EXPECT_EQ(call("POST", "/api/orders/7", "ops"), Reason::kOk);  // {id} is GET only
  EXPECT_EQ(ctx_.interface->interface->id, "orders");
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_EQ(ctx_.interface->interface->id, "orders");
}

TEST_F(PolicyTest, TheSystemLimitCountsAcrossInterfaces) {
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/users/2", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kSystemRateLimited);
  EXPECT_EQ(status_of(Reason::kSystemRateLimited), 429);
}

TEST_F(PolicyTest, TheInterfaceLimitCountsAcrossSystems) {
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kInterfaceRateLimited);
}

TEST_F(PolicyTest, AGrantLimitAppliesToItsPairOnly) {
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kGrantRateLimited);
  EXPECT_EQ(call("GET", "/api/users/1", "ops"), Reason::kOk);
}

TEST_F(PolicyTest, LimitsAreAllOrNothing) {
  // The interface limit (3) runs out first; the refused requests take nothing from crm's 5.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kInterfaceRateLimited);
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
  // Now crm's 5 are used up too; the system is checked (and named) first.
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kSystemRateLimited);
}

TEST_F(PolicyTest, TheInFlightLimitHoldsUntilTheRequestEnds) {
  hold_ = true;
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  std::vector<Lease> first = ctx_.leases;
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kInterfaceConcurrencyLimited);
  // The interface limit (3 a minute) would have admitted the refused request, and took nothing: 1
  // is left, not 0.
  EXPECT_EQ(headers(), "Retry-After: 1\nRateLimit-Policy: \"orders\";q=3;w=60\nRateLimit: \"orders\";r=1;t=60\n");
  ASSERT_EQ(first.size(), 1u);
  limiter_.release(first[0].key, *first[0].limit, first[0].id, [](Status) {});
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_EQ(headers(), "RateLimit-Policy: \"orders\";q=3;w=60\nRateLimit: \"orders\";r=0;t=60\n");
}

// A limit of the concurrency kind knows for sure only when a lease times out (its lease_timeout),
// but a place is free as soon as a request in flight ends: its refusal says 1 second, as the
// in-flight limit's does.
TEST_F(PolicyTest, AConcurrencyLimitsRefusalSaysRetryAfterOneSecond) {
  auto places = parse(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces:
  - {id: one, path: /one, upstream: app, public: true,
     limits: [{algorithm: concurrency, limit: 1, lease_timeout: 10m}, {algorithm: fixed_window, limit: 9, period: 1m}]}
)");
  snapshot_ = std::make_shared<Snapshot>(places, breakers_, 2);
  hold_ = true;
  EXPECT_EQ(call("GET", "/one"), Reason::kOk);
  EXPECT_EQ(call("GET", "/one"), Reason::kInterfaceRateLimited);
  EXPECT_EQ(headers(), "Retry-After: 1\nRateLimit-Policy: \"one-1\";q=9;w=60\nRateLimit: \"one-1\";r=8;t=60\n");
}

TEST_F(PolicyTest, DecideHoldsNoInFlightLease) {
  hold_ = false;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.method = "GET";
    r.path = "/api/orders/x";
    r.has_system_key = true;
    r.system_key = "ops";
    r.hold_in_flight = false;
    EXPECT_EQ(decide_now(r, *snapshot_, ctx_, limiter_).reason, Reason::kOk);
    EXPECT_TRUE(ctx_.leases.empty());
  }
}

TEST_F(PolicyTest, KeyedLimitsCountEachValueApart) {
  ip_ = "10.0.0.1";
  EXPECT_EQ(call("POST", "/api/login"), Reason::kOk);
  EXPECT_EQ(call("POST", "/api/login"), Reason::kOk);
  EXPECT_EQ(call("POST", "/api/login"), Reason::kInterfaceRateLimited);
  ip_ = "10.0.0.2";
  EXPECT_EQ(call("POST", "/api/login"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=a&x=1"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/search", "ops", "x=1&q=a"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=a"), Reason::kInterfaceRateLimited);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=b"), Reason::kOk);
}

// A query parameter is counted by its value as applications decode it; a parameter or header a
// limit is keyed by, given twice, is refused: the upstream may read the other one (PHP takes the
// last), which the limit did not count.
TEST_F(PolicyTest, AKeyIsItsDecodedValueAndAKeyGivenTwiceIsRefused) {
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=a+b"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=%61%20b"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=a%20%62"), Reason::kInterfaceRateLimited);
  // A '%' that is no escape: Go and Tomcat drop the pair, which another server reads.
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=%zz"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=b&q=a"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=b&%71=a"), Reason::kBadRequest);  // a name decodes too
  EXPECT_EQ(call("GET", "/api/search", "ops", "%71=a+b"), Reason::kInterfaceRateLimited);
  EXPECT_EQ(call("GET", "/api/search", "ops", "q=c&x=1&x=2"), Reason::kOk);  // x keys no limit
}

// A shadow limit rejects nothing, so its key given twice refuses nothing either: it counts the first.
TEST_F(PolicyTest, AShadowLimitsKeyGivenTwiceIsNotRefused) {
  headers_.values["X-User-Id"] = "7";
  headers_.twice.insert("X-User-Id");
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_TRUE(ctx_.verdict.shadow_rejected.empty());
  headers_.twice.clear();
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_EQ(ctx_.verdict.shadow_rejected.size(), 1u) << "the first value was counted";
}

TEST_F(PolicyTest, AShadowLimitReportsButNeverRejects) {
  headers_.values["X-User-Id"] = "7";
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_TRUE(ctx_.verdict.shadow_rejected.empty());
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  ASSERT_EQ(ctx_.verdict.shadow_rejected.size(), 1u);
  EXPECT_EQ(ctx_.verdict.shadow_rejected[0]->name, "per-user");
  headers_.values["X-User-Id"] = "8";
  EXPECT_EQ(call("GET", "/api/orders", "ops"), Reason::kOk);
  EXPECT_TRUE(ctx_.verdict.shadow_rejected.empty());
}

TEST_F(PolicyTest, AStoreFailureAdmitsUnlessALimitSaysDeny) {
  DownLimiter down;
  Request r;
  r.method = "GET";
  r.path = "/api/orders";
  r.has_system_key = true;
  r.system_key = "crm";
  EXPECT_EQ(decide_now(r, *snapshot_, ctx_, down).reason, Reason::kOk);
  EXPECT_TRUE(ctx_.verdict.store_failed);

  auto deny = parse(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces:
  - {id: login, path: /login, upstream: app, public: true,
     limits: [{algorithm: gcra, limit: 5, period: 1m, key_by: client_ip, on_store_failure: deny}]}
)");
  Snapshot s(deny, breakers_, 2);
  r.path = "/login";
  r.has_system_key = false;
  EXPECT_EQ(decide_now(r, s, ctx_, down).reason, Reason::kStoreUnavailable);
  EXPECT_EQ(status_of(Reason::kStoreUnavailable), 503);
  EXPECT_EQ(headers(), "Retry-After: 1\n");
}

TEST_F(PolicyTest, RejectionsCarryRetryAfterRoundedUpAndTheRateLimitFields) {
  for (int i = 0; i < 2; ++i) EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
  clock_.advance(20500ms);
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kGrantRateLimited);
  // The grant's fixed minute has 39.5 s left.
  EXPECT_EQ(headers(),
            "Retry-After: 40\n"
            "RateLimit-Policy: \"crm/users\";q=2;w=60\n"
            "RateLimit: \"crm/users\";r=0;t=40\n");
  EXPECT_EQ(headers(config::RateLimitHeaders::kLegacy),
            "Retry-After: 40\nX-RateLimit-Limit: 2\nX-RateLimit-Remaining: 0\nX-RateLimit-Reset: 40\n");
  EXPECT_EQ(headers(config::RateLimitHeaders::kNone), "Retry-After: 40\n");
}

TEST_F(PolicyTest, AnAdmittedRequestDescribesTheLimitClosestToExhaustion) {
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  // crm has 4 of 5 left, orders 2 of 3: the system's share (0.8) is larger, so orders is shown.
  EXPECT_EQ(headers(), "RateLimit-Policy: \"orders\";q=3;w=60\nRateLimit: \"orders\";r=2;t=60\n");
}

// A RateLimit field holds printable ASCII only: a name from an id in another script has its bytes
// (and '%', '"' and '\') percent-encoded, so that two names stay two.
TEST_F(PolicyTest, ALimitNameOutsidePrintableAsciiIsPercentEncodedInTheFields) {
  auto named = parse(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces:
  - {id: 限流, path: /cn, upstream: app, public: true, limits: [{algorithm: fixed_window, limit: 5, period: 1m}]}
  - {id: pct, path: /pct, upstream: app, public: true, limits: [{name: "a%b c", algorithm: fixed_window, limit: 5, period: 1m}]}
  - {id: 'x"y', path: /quote, upstream: app, public: true, limits: [{algorithm: fixed_window, limit: 5, period: 1m}]}
  - {id: 'x\y', path: /backslash, upstream: app, public: true, limits: [{algorithm: fixed_window, limit: 5, period: 1m}]}
)");
  snapshot_ = std::make_shared<Snapshot>(named, breakers_, 2);
  EXPECT_EQ(call("GET", "/cn"), Reason::kOk);
  EXPECT_EQ(headers(), "RateLimit-Policy: \"%E9%99%90%E6%B5%81\";q=5;w=60\nRateLimit: \"%E9%99%90%E6%B5%81\";r=4;t=60\n");
  EXPECT_EQ(call("GET", "/pct"), Reason::kOk);
  EXPECT_EQ(headers(), "RateLimit-Policy: \"a%25b c\";q=5;w=60\nRateLimit: \"a%25b c\";r=4;t=60\n");
  EXPECT_EQ(call("GET", "/quote"), Reason::kOk);
  EXPECT_EQ(headers(), "RateLimit-Policy: \"x%22y\";q=5;w=60\nRateLimit: \"x%22y\";r=4;t=60\n");
  EXPECT_EQ(call("GET", "/backslash"), Reason::kOk);
  EXPECT_EQ(headers(), "RateLimit-Policy: \"x%5Cy\";q=5;w=60\nRateLimit: \"x%5Cy\";r=4;t=60\n");
}

TEST_F(PolicyTest, ACostNoWaitCanAdmitGetsNoRetryAfter) {
  EXPECT_EQ(call("GET", "/api/users/1", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/users/1", "crm", "", 3), Reason::kGrantRateLimited);
  EXPECT_TRUE(ctx_.decisions[1].cost_exceeds_limit);
  EXPECT_EQ(headers().find("Retry-After"), std::string::npos);
  // The RateLimit field still says when the quota is full again (the fixed minute's end), not 0 as
  // if the request could pass now: no wait lets it.
  EXPECT_NE(headers().find("RateLimit: \"crm/users\";r=1;t=60\n"), std::string::npos) << headers();
}

// Of two refusals, one no wait turns around (a cost over the limit) and one that a long wait would,
// the RateLimit fields describe the first: the other's reset would tell the client to wait for
// what never comes.
TEST_F(PolicyTest, TheFieldsDescribeTheLimitNoWaitCanSatisfy) {
  auto two = parse(R"(
upstreams: [{name: app, targets: [127.0.0.1:1]}]
interfaces:
  - id: two
    path: /two
    upstream: app
    public: true
    limits:
      - {name: per-second, algorithm: fixed_window, limit: 2, period: 1s}
      - {name: per-hour, algorithm: fixed_window, limit: 3, period: 1h}
)");
  snapshot_ = std::make_shared<Snapshot>(two, breakers_, 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(call("GET", "/two"), Reason::kOk);
    clock_.advance(1s);
  }
  EXPECT_EQ(call("GET", "/two", "", "", 3), Reason::kInterfaceRateLimited);
  EXPECT_TRUE(ctx_.decisions[0].cost_exceeds_limit);
  EXPECT_EQ(headers().find("Retry-After"), std::string::npos) << headers();
  EXPECT_NE(headers().find("RateLimit-Policy: \"per-second\";q=2;w=1\n"), std::string::npos) << headers();
}

TEST_F(PolicyTest, ErrorBodiesAreJsonInEnglishOrChinese) {
  EXPECT_EQ(error_body(Reason::kInterfaceForbidden, config::Language::kEnglish),
            R"({"code":403,"reason":"interface_forbidden","msg":"The system may not call this interface."})");
  EXPECT_EQ(error_body(Reason::kSystemRateLimited, config::Language::kChinese),
            R"({"code":429,"reason":"system_rate_limited","msg":"系统繁忙,请稍后重试"})");
}

TEST_F(PolicyTest, AnUnchangedLimitKeepsItsStateAcrossAReload) {
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  // The new configuration changes the interface limit but not crm's.
  std::string changed = kConfig;
  changed.replace(changed.find("limit: 3, period: 1m"), 20, "limit: 9, period: 1m");
  snapshot_ = std::make_shared<Snapshot>(parse(changed), breakers_, 2);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kOk);
  EXPECT_EQ(call("GET", "/api/orders", "crm"), Reason::kSystemRateLimited);  // 5 in all, reload or not
}

// A caller's value comes last in a store key: one holding '|' cannot reach the counter of another
// limit whose name holds one ("p" with "q|v" is not "p|q" with "v"), nor of another system.
TEST_F(PolicyTest, AValueHoldingABarReachesNoOtherLimitsCounter) {
  snapshot_ = std::make_shared<Snapshot>(parse(R"(
upstreams: [{name: app, targets: ["127.0.0.1:1"]}]
interfaces:
  - {id: c, path: /c, upstream: app}
systems:
  - key: coll
    interfaces: [c]
    limits:
      - {name: p, algorithm: fixed_window, limit: 3, period: 1h, key_by: "header:X-User"}
      - {name: "p|q", algorithm: fixed_window, limit: 3, period: 1h, key_by: "header:X-User"}
)"),
                                         breakers_, 2);
  headers_.values["X-User"] = "q|v";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call("GET", "/c", "coll"), Reason::kOk);
  EXPECT_EQ(call("GET", "/c", "coll"), Reason::kSystemRateLimited);
  headers_.values["X-User"] = "v";
  EXPECT_EQ(call("GET", "/c", "coll"), Reason::kOk);
  const SystemEntry* coll = snapshot_->system("coll");
  EXPECT_EQ(coll->limits[1].key, "s|coll|" + coll->limits[1].rule->limit.to_string() + "|header:x-user|=p%7Cq|");
}

// Header names are the same in any case, and with '_' for '-' (as the header is found): a limit
// keyed by "header:X-User" that a reload spells "x_user" reads the same header and keeps counting.
TEST_F(PolicyTest, AHeaderNameSpeltOtherwiseKeepsItsCounters) {
  const auto config = [](const std::string& header) {
    return parse(R"(
upstreams: [{name: app, targets: ["127.0.0.1:1"]}]
interfaces:
  - {id: c, path: /c, upstream: app}
systems:
  - key: coll
    interfaces: [c]
    limits: [{algorithm: fixed_window, limit: 2, period: 1h, key_by: "header:)" + header + R"("}]
)");
  };
  snapshot_ = std::make_shared<Snapshot>(config("X-User"), breakers_, 2);
  headers_.values["X-User"] = "v";
  EXPECT_EQ(call("GET", "/c", "coll"), Reason::kOk);
  snapshot_ = std::make_shared<Snapshot>(config("x_user"), breakers_, 3);
  EXPECT_EQ(call("GET", "/c", "coll"), Reason::kOk);
  EXPECT_EQ(call("GET", "/c", "coll"), Reason::kSystemRateLimited);
}

// Ids may hold a '/': the grants (a/b, c) and (a, b/c) are two grants with two counters.
TEST(PolicyKeys, GrantsWhoseNamesJoinAlikeKeepTheirOwnCounters) {
  auto config = parse(R"(
upstreams: [{name: app, targets: ["127.0.0.1:1"]}]
interfaces:
  - {id: c, path: /c, upstream: app}
  - {id: b/c, path: /bc, upstream: app}
systems:
  - {key: a/b, interfaces: [c]}
  - {key: a, interfaces: [b/c]}
grants:
  - {system: a/b, interface: c, limits: [{algorithm: fixed_window, limit: 1, period: 1h}]}
  - {system: a, interface: b/c, limits: [{algorithm: fixed_window, limit: 1, period: 1h}]}
)");
  ASSERT_NE(config, nullptr);
  BreakerRegistry breakers(BreakerRegistry::Options{});
  const Snapshot snapshot(config, breakers, 1);
  const GrantEntry* first = snapshot.grant(*snapshot.system("a/b"), *snapshot.route("GET", "/c"));
  const GrantEntry* second = snapshot.grant(*snapshot.system("a"), *snapshot.route("GET", "/bc"));
  ASSERT_TRUE(first != nullptr && second != nullptr);
  EXPECT_NE(first->limits[0].key, second->limits[0].key);
  EXPECT_EQ(first->limits[0].name, second->limits[0].name) << "both are named a/b/c to the caller";
}

TEST_F(PolicyTest, KeysDependOnTheLimitNotOnItsPlaceInTheList) {
  std::string reordered = kConfig;
  reordered.replace(reordered.find("  - {key: erp"), 0, "  - {key: new, interfaces: [\"*\"]}\n");
  Snapshot again(parse(reordered), breakers_, 2);
  EXPECT_EQ(again.system("crm")->limits[0].key, snapshot_->system("crm")->limits[0].key);
  EXPECT_EQ(again.route("GET", "/api/orders")->limits[0].key, snapshot_->route("GET", "/api/orders")->limits[0].key);
}

TEST(PolicyPaths, DotSegmentsAreRefusedEvenWhenEncoded) {
  EXPECT_TRUE(path_is_clean("/api/orders/7"));
  EXPECT_TRUE(path_is_clean("/api/v1.2/x"));
  EXPECT_FALSE(path_is_clean("/api/public/../admin"));
  EXPECT_FALSE(path_is_clean("/api/./x"));
  EXPECT_FALSE(path_is_clean("/api/%2e%2E/x"));
  EXPECT_FALSE(path_is_clean("/api/.%2e"));
  EXPECT_FALSE(path_is_clean("api/x"));
  EXPECT_FALSE(path_is_clean("http://host/x"));
  EXPECT_TRUE(path_is_clean("/"));
  EXPECT_TRUE(path_is_clean("/api/.../x"));
  EXPECT_TRUE(path_is_clean("/api/a.b;v=1/c"));
}

// What other servers take for a separator or drop from a segment does not hide a dot segment:
// Tomcat, Jetty and Spring resolve "/public/..;/admin" to "/admin".
TEST(PolicyPaths, DotSegmentsAreRefusedWhereOtherServersWouldSeeThem) {
  EXPECT_FALSE(path_is_clean("/public/..;/admin"));
  EXPECT_FALSE(path_is_clean("/public/.;x=1/admin"));
  EXPECT_FALSE(path_is_clean("/public/..%2fadmin"));
  EXPECT_FALSE(path_is_clean("/public%2F..%2Fadmin"));
  EXPECT_FALSE(path_is_clean("/public/..\\admin"));
  EXPECT_FALSE(path_is_clean("/public\\..\\admin"));
  EXPECT_FALSE(path_is_clean("/public/..%5cadmin"));
  EXPECT_FALSE(path_is_clean("/public/%2E%2e;/admin"));
  EXPECT_FALSE(path_is_clean("/api/x%00.json"));
  EXPECT_TRUE(path_is_clean("/api/a%2fb"));      // an encoded slash alone is no dot segment
  EXPECT_TRUE(path_is_clean("/api/..x;/y"));     // nor is a name that starts with dots
  EXPECT_TRUE(path_is_clean("/api/x;..;/y"));    // nor dots inside path parameters
}

TEST(PolicyPaths, TheRoutingFormDecodesEscapesMergesSeparatorsAndDropsParametersAndATrailingSlash) {
  EXPECT_EQ(routing_form("/api/orders/7"), std::nullopt);
  EXPECT_EQ(routing_form("/"), std::nullopt);
  EXPECT_EQ(routing_form("/api/%61dmin/%7E%2d%2E%5F%30"), "/api/admin/~-._0");
  EXPECT_EQ(routing_form("/api/orders/%40me/%3a%2C"), "/api/orders/@me/:,");
  EXPECT_EQ(routing_form("/api//admin///x/"), "/api/admin/x");
  EXPECT_EQ(routing_form("/api/admin/"), "/api/admin");
  EXPECT_EQ(routing_form("/api/admin%2fx%5Cy\\z"), "/api/admin/x/y/z");
  EXPECT_EQ(routing_form("/api/admin;v=1/x;y"), "/api/admin/x");
  // %25 stays: decoded, it would read as the start of another escape. What is no escape stays.
  EXPECT_EQ(routing_form("/api/a%20b%25"), "/api/a b%25");
  EXPECT_EQ(routing_form("/api/x%25"), std::nullopt);
  EXPECT_EQ(routing_form("/api/x%6"), std::nullopt);
  EXPECT_EQ(routing_form("/api/x%zz"), std::nullopt);
}

// An upstream that decodes "%65" or merges "//" before routing would take these for the forbidden
// order-items interface; as written they match the orders catch-all, which crm may call.
TEST_F(PolicyTest, APathThatRoutesElsewhereOnceTidiedIsRefused) {
  EXPECT_EQ(call("GET", "/api/orders/7/items", "crm"), Reason::kInterfaceForbidden);
  EXPECT_EQ(call("GET", "/api/orders/7/it%65ms", "crm"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/orders//7/items", "crm"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/orders/7%2Fitems", "crm"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/orders/7/items;x=1", "crm"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/orders/7/items/", "crm"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/orders/7/items//", "crm"), Reason::kBadRequest);
  EXPECT_EQ(call("GET", "/api/%6Frders/7/items", ""), Reason::kBadRequest);  // before the key is looked at
  // Where the tidy form routes to the same interface, the path goes as it came (an id with an
  // encoded '/', as some APIs take).
  EXPECT_EQ(call("POST", "/api/orders/group%2Fproject", "crm"), Reason::kOk);
  EXPECT_EQ(ctx_.interface->interface->id, "orders");
  EXPECT_EQ(call("POST", "/api/orders/a%20b/c%41", "crm"), Reason::kOk);
}

TEST(PolicyPaths, QueryParametersAreFoundByName) {
  EXPECT_EQ(query_param("a=1&b=2", "b"), "2");
  EXPECT_EQ(query_param("ab=1&a=3", "a"), "3");
  EXPECT_EQ(query_param("a", "a"), "");
  EXPECT_EQ(query_param("", "a"), "");
}

// A parameter a limit is keyed by is counted only when every server reads it alike: some split at
// ';' as well as '&', PHP drops the spaces before a name, cuts it at a NUL and reads ' ', '.' and '['
// in it as '_' ("u[0]" is u), ASP.NET reads names in any case, Rack 2 "[u]" as u, and Go and Tomcat
// drop a pair with a '%' that is no escape. Given twice, or read another way (present or not) by one
// of them, the request is refused; counted by one reading alone, a value would be one another
// server does not see (a caller counted apart from the anonymous ones, say).
TEST(PolicyPaths, AQueryParameterIsCountedOnlyWhenEveryServerReadsItAlike) {
  EXPECT_EQ(query_param("u=a;b", "u"), "a;b");
  EXPECT_EQ(query_param("u=1&u=2", "u"), "1");
  for (const char* alike : {"u=me&x=1", "x=1", "", "u=1&uu=2;x=u", "u=", "u%3Bx=1&u=2", "a=1&&u=2&", "u=a+b%26c",
                            "u=%41"}) {
    EXPECT_FALSE(query_param_ambiguous(alike, "u")) << alike;
  }
  for (const char* ambiguous : {"u=random;u=me", "u=random&+u=me", "u=random&%20u=me", "u=1&%75=2",
                                "u=random&u%00x=me", "+u=random", "x=1;u=random", "u[0]=random", "u=a;b",
                                "u=me&next=/a;u=1", "u=random&[u]=me", "x=1;[u]=me", "U=me", "u=%zz1", "u=1%2"}) {
    EXPECT_TRUE(query_param_ambiguous(ambiguous, "u")) << ambiguous;
  }
  EXPECT_TRUE(query_param_ambiguous("u_id=random&u.id=me", "u_id"));
  EXPECT_TRUE(query_param_ambiguous("u_id=random", "u.id"));
  EXPECT_FALSE(query_param_ambiguous("u.id=me", "u.id"));
  // Brackets: entries of one array or hash are kept apart, as PHP and Rack keep them.
  EXPECT_FALSE(query_param_ambiguous("filter[user]=5&filter[status]=open", "filter[user]"));
  EXPECT_EQ(query_param("filter[user]=5&filter[status]=open", "filter[user]"), "5");
  EXPECT_TRUE(query_param_ambiguous("filter[user]=5&filter[user]=6", "filter[user]"));
}

}  // namespace
}  // namespace sluice::gateway
