#include "gateway/policy.h"

#include <algorithm>
#include <charconv>
#include <array>
#include <cassert>

#include "config/crypto.h"

namespace sluice::gateway {
namespace {

struct ReasonInfo {
  const char* name;
  int status;
  std::string_view en;
  std::string_view zh;
};

constexpr std::array<ReasonInfo, kReasonCount> kReasons{{
    {"ok", 200, "OK.", "成功"},
    {"system_key_missing", 401, "The request carries no system key.", "请求未携带系统标识,请联系管理员"},
    {"system_unknown", 401, "The system key is not configured.", "系统未配置,请联系管理员"},
    {"api_key_invalid", 401, "The API key is missing, unknown or expired.", "API 密钥缺失、无效或已过期"},
    {"signature_invalid", 401, "The request signature is missing or does not match.", "请求签名缺失或不匹配"},
    {"signature_expired", 401, "The request timestamp is more than 300 seconds off.", "请求时间戳偏差超过 300 秒"},
    {"signature_replayed", 401, "The request nonce was already used.", "请求随机数已被使用(重放)"},
    {"signature_rate_limited", 429, "Too many signed requests from this system within 300 seconds; retry later.",
     "该系统 300 秒内的签名请求过多,请稍后重试"},
    {"system_disabled", 403, "The system is disabled.", "系统已禁用,不可以调用"},
    {"system_no_permissions", 403, "The system has no interface permissions.",
     "系统未配置接口权限,请联系管理员"},
    {"interface_unknown", 404, "No interface is configured for this method and path.",
     "接口未配置,请联系管理员"},
    {"interface_disabled", 403, "The interface is disabled.", "接口已禁用,不可以调用"},
    {"interface_forbidden", 403, "The system may not call this interface.", "没有调用权限,请联系管理员"},
    {"system_rate_limited", 429, "Too many requests from this system; retry later.",
     "系统繁忙,请稍后重试"},
    {"interface_rate_limited", 429, "Too many requests to this interface; retry later.",
     "接口繁忙,请稍后重试"},
    {"grant_rate_limited", 429, "Too many requests from this system to this interface; retry later.",
     "该系统调用此接口过于频繁,请稍后重试"},
    {"interface_concurrency_limited", 429, "Too many requests to this interface are in progress; retry later.",
     "接口并发请求过多,请稍后重试"},
    {"store_unavailable", 503, "The rate limit store is unavailable; retry later.",
     "限流存储不可用,请稍后重试"},
    {"upstream_unavailable", 503, "The service is unavailable (circuit open); retry later.",
     "服务暂不可用(已熔断),请稍后重试"},
    {"upstream_connect_failed", 502, "The service could not be reached.", "无法连接后端服务"},
    {"upstream_timeout", 504, "The service did not answer in time.", "后端服务响应超时"},
    {"upstream_bad_response", 502, "The service sent an invalid response.", "后端服务返回了无效的响应"},
    {"bad_request", 400, "The request is malformed or ambiguous.", "请求格式错误"},
    {"header_too_large", 431, "The request header is larger than 8 KiB.", "请求头过大"},
    {"uri_too_long", 414, "The request target is longer than 8 KiB.", "请求地址过长"},
    {"http_version_not_supported", 505, "The HTTP version is not supported; send HTTP/1.1.",
     "不支持该 HTTP 版本,请使用 HTTP/1.1"},
    {"body_too_large", 413, "The request body is too large.", "请求体过大"},
    {"request_timeout", 408, "The request took too long to arrive.", "请求接收超时"},
    {"client_closed_request", 499, "The client closed the connection before the answer came.",
     "客户端在响应前关闭了连接"},
    {"not_found", 404, "Not found.", "未找到"},
    {"method_not_allowed", 405, "Method not allowed.", "不允许的请求方法"},
    {"draining", 503, "The gateway is shutting down; retry.", "网关正在关闭,请重试"},
    {"gateway_overloaded", 503, "The gateway is out of resources for now; retry later.", "网关资源不足,请稍后重试"},
}};

const ReasonInfo& info(Reason r) { return kReasons[static_cast<std::size_t>(r)]; }

Reason rejection_of(Scope scope) {
  switch (scope) {
    case Scope::kSystem: return Reason::kSystemRateLimited;
    case Scope::kInterface: return Reason::kInterfaceRateLimited;
    case Scope::kGrant: return Reason::kGrantRateLimited;
    case Scope::kInFlight: return Reason::kInterfaceConcurrencyLimited;
  }
  return Reason::kInterfaceRateLimited;
}

// A request refused by an in-flight limit, or a limit of the concurrency kind: the client is told to
// come back in a second, since requests in flight end much sooner than their leases expire (which
// is when the decision knows a place is free for sure).
constexpr Nanos kInFlightRetry = std::chrono::seconds(1);

// The character of a query string's name or value (application/x-www-form-urlencoded) at raw[i], as
// applications read it: an escape decoded ("%61" is "a"), '+' a space, and an escape that is not
// one as it is. Moves i past it.
char form_char(std::string_view raw, std::size_t& i) {
  const char c = raw[i++];
  if (c == '+') return ' ';
  if (c == '%' && i + 1 < raw.size() && config::hex_digit(raw[i]) >= 0 && config::hex_digit(raw[i + 1]) >= 0) {
    const char decoded = static_cast<char>(config::hex_digit(raw[i]) * 16 + config::hex_digit(raw[i + 1]));
    i += 2;
    return decoded;
  }
  return c;
}

void append_decoded(std::string& out, std::string_view raw) {
  for (std::size_t i = 0; i < raw.size();) out += form_char(raw, i);
}

// How a server may read a query string. kStandard: parameters end at '&', names decoded ("%71" is
// "q"). kSemicolons: ';' ends one too (Rack 2, Perl's CGI.pm, Python before 3.9.2, Go before
// 1.17). kPhp: '&' only; a name without the spaces before it and cut at a NUL, with '_' for ' ',
// '.' and '[' before its brackets ("u.id" is "u_id"), and "u[0]" an entry of u. kLoose: '&' and
// ';', names in any case (ASP.NET) and without brackets at their ends (Rack 2 reads "[u]" as u).
enum class Reading { kStandard, kSemicolons, kPhp, kLoose };

// The name as PHP keys $_GET by it, and where its brackets begin (npos: none).
std::pair<std::string, std::size_t> php_key(std::string_view name) {
  std::string key(name.substr(0, name.find('\0')));
  key.erase(0, key.find_first_not_of(' '));
  std::size_t open = key.find('[');
  if (open != std::string::npos && key.find(']', open) == std::string::npos) open = std::string::npos;
  for (std::size_t i = 0; i < std::min(open, key.size()); ++i) {
    if (key[i] == ' ' || key[i] == '.' || key[i] == '[') key[i] = '_';
  }
  return {key, open};
}

// A name as kLoose reads it.
std::string loose_key(std::string_view name) {
  std::string key(name);
  key.erase(0, key.find_first_not_of("[] "));
  key.erase(key.find_last_not_of("[]") + 1);
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

// Whether `raw` (a decoded name) is the parameter `name` in a reading.
bool names(std::string_view raw, std::string_view name, Reading reading) {
  switch (reading) {
    case Reading::kStandard:
    case Reading::kSemicolons: return raw == name;
    case Reading::kLoose: return loose_key(raw) == loose_key(name);
    case Reading::kPhp: {
      const auto [key, brackets] = php_key(raw);
      const auto [wanted, wanted_brackets] = php_key(name);
      // "u[0]" makes u an array: it is u as far as a limit counting by u is concerned.
      return key == wanted ||
             (wanted_brackets == std::string::npos && brackets != std::string::npos && key.substr(0, brackets) == wanted);
    }
  }
  return false;
}

// Whether `raw` holds a '%' that is no escape: Go and Tomcat drop such a parameter, whose value
// another server reads.
bool bad_escape(std::string_view raw) {
  for (std::size_t at = raw.find('%'); at != std::string_view::npos; at = raw.find('%', at + 1)) {
    if (at + 2 >= raw.size() || config::hex_digit(raw[at + 1]) < 0 || config::hex_digit(raw[at + 2]) < 0) return true;
  }
  return false;
}

// The raw value of the parameter `name` in one reading (empty when it has no '='; the first when
// given twice, and `twice` is set); nullopt when it is absent. `twice` is set too when one of its
// pairs holds a '%' that is no escape.
std::optional<std::string_view> param_in(std::string_view query, std::string_view name, Reading reading,
                                         bool& twice) {
  const bool semicolons = reading == Reading::kSemicolons || reading == Reading::kLoose;
  std::optional<std::string_view> found;
  std::string decoded;
  while (!query.empty()) {
    const std::size_t end = query.find_first_of(semicolons ? "&;" : "&");
    const std::string_view param = query.substr(0, end);
    query = end == std::string_view::npos ? std::string_view() : query.substr(end + 1);
    const std::size_t eq = param.find('=');
    decoded.clear();
    append_decoded(decoded, param.substr(0, eq));
    if (!names(decoded, name, reading)) continue;
    if (found || bad_escape(param)) {
      twice = true;
    } else {
      found = eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1);
    }
  }
  return found;
}

// Appends the value a keyed-by limit counts this request under.
void append_key_value(std::string& out, const config::LimitRule& rule, const Request& request) {
  switch (rule.key_by) {
    case config::KeyBy::kOwner: return;
    case config::KeyBy::kClientIp: out.append(request.client_ip); return;
    case config::KeyBy::kHeader:
      if (request.headers != nullptr) out.append(request.headers->get(rule.key_name));
      return;
    case config::KeyBy::kQuery: append_decoded(out, query_param(request.query, rule.key_name)); return;
  }
}

// Whether every header and query parameter an enforced limit of `limits` is keyed by comes at most
// once: counted by one value, a request whose upstream read another (PHP takes a parameter's last)
// would take another value's place. A shadow limit rejects nothing, so it refuses nothing either:
// it counts the first value.
bool keys_given_once(const std::vector<CompiledLimit>& limits, const Request& request) {
  for (const CompiledLimit& l : limits) {
    if (l.rule == nullptr || l.rule->shadow) continue;
    if (l.rule->key_by == config::KeyBy::kHeader && request.headers != nullptr &&
        request.headers->repeated(l.rule->key_name)) {
      return false;
    }
    if (l.rule->key_by == config::KeyBy::kQuery && query_param_ambiguous(request.query, l.rule->key_name)) return false;
  }
  return true;
}

void add_limits(const std::vector<CompiledLimit>& limits, Context& ctx) {
  for (const CompiledLimit& l : limits) {
    (l.rule->shadow ? ctx.shadow_limits : ctx.enforced_limits).push_back(&l);
  }
}

// What the store does for a limit when it cannot decide (the in-flight limit, which has no rule of
// its own, admits).
OnStoreFailure store_policy(const CompiledLimit* l) {
  if (l->rule == nullptr) return OnStoreFailure::kAllow;
  switch (l->rule->on_store_failure) {
    case config::OnStoreFailure::kAllow: return OnStoreFailure::kAllow;
    case config::OnStoreFailure::kDeny: return OnStoreFailure::kDeny;
    case config::OnStoreFailure::kLocal: return OnStoreFailure::kLocal;
  }
  return OnStoreFailure::kAllow;
}

// Fills requests with one store request per limit, keyed-by limits' keys built into ctx.keys.
void to_requests(const Request& request, const std::vector<const CompiledLimit*>& limits,
                 std::vector<LimitRequest>& requests, std::size_t& next_key, Context& ctx) {
  for (const CompiledLimit* l : limits) {
    const Limit* limit = l->rule != nullptr ? &l->rule->limit : ctx.interface->in_flight_limit.get();
    std::string_view key = l->key;
    if (l->rule != nullptr && l->rule->key_by != config::KeyBy::kOwner) {
      std::string& k = ctx.keys[next_key++];
      k.assign(l->key);
      append_key_value(k, *l->rule, request);
      key = k;
    }
    requests.push_back(LimitRequest{key, limit, request.cost, store_policy(l)});
  }
}

// Whether a's remaining share of its limit is smaller than b's.
bool closer_to_exhaustion(const Decision& a, const Decision& b) {
  return static_cast<__int128>(a.remaining) * b.limit < static_cast<__int128>(b.remaining) * a.limit;
}

}  // namespace

const char* to_string(Reason reason) { return info(reason).name; }
int status_of(Reason reason) { return info(reason).status; }
std::string_view message(Reason reason, config::Language language) {
  return language == config::Language::kChinese ? info(reason).zh : info(reason).en;
}

void Context::clear() {
  system = nullptr;
  interface = nullptr;
  grant = nullptr;
  enforced.clear();
  enforced_limits.clear();
  decisions.clear();
  shadow.clear();
  shadow_limits.clear();
  shadow_decisions.clear();
  leases.clear();
  verdict.reason = Reason::kOk;
  verdict.retry_after.reset();
  verdict.quota.reset();
  verdict.shadow_rejected.clear();
  verdict.store_failed = false;
  verdict.bad_request = BadRequest::kMalformed;
}

Reason check_access(const Request& request, const Snapshot& snapshot, Context& ctx) {
  ctx.interface = snapshot.route(request.method, request.path);
  // "/api/%61dmin", "/api//admin", "/api/admin;x" or "/api/admin/" is "/api/admin" to many
  // upstreams: routed as written, it would reach that interface through a catch-all, with the
  // catch-all's permissions and limits. Such a path must not route elsewhere than its routing form,
  // when that routes anywhere.
  if (const std::optional<std::string> tidy = routing_form(request.path)) {
    const InterfaceEntry* other = snapshot.route(request.method, *tidy);
    if (other != nullptr && other != ctx.interface) {
      ctx.interface = nullptr;  // (logged as it is: for no interface)
      ctx.verdict.bad_request = BadRequest::kPathAmbiguous;
      return Reason::kBadRequest;
    }
  }
  const bool is_public = ctx.interface != nullptr && ctx.interface->interface->is_public;
  const bool has_key = request.has_system_key && !request.system_key.empty();
  if (!has_key) {
    if (!is_public) return Reason::kSystemKeyMissing;
  } else {
    ctx.system = snapshot.system(request.system_key);
    if (ctx.system == nullptr) return Reason::kSystemUnknown;
    if (!ctx.system->system->enabled) return Reason::kSystemDisabled;
    if (!ctx.system->has_permissions && !is_public) return Reason::kSystemNoPermissions;
  }
  if (ctx.interface == nullptr) return Reason::kInterfaceUnknown;
  if (!ctx.interface->interface->enabled) return Reason::kInterfaceDisabled;
  if (ctx.system != nullptr) {
    if (!is_public && !ctx.system->permitted[ctx.interface->index]) return Reason::kInterfaceForbidden;
    ctx.grant = snapshot.grant(*ctx.system, *ctx.interface);
  }
  if (snapshot.keys_by_request() && ((ctx.system != nullptr && !keys_given_once(ctx.system->limits, request)) ||
                                     !keys_given_once(ctx.interface->limits, request) ||
                                     (ctx.grant != nullptr && !keys_given_once(ctx.grant->limits, request)))) {
    ctx.verdict.bad_request = BadRequest::kKeyRepeated;
    return Reason::kBadRequest;
  }
  return Reason::kOk;
}

void plan_limits(const Request& request, Context& ctx) {
  if (ctx.system != nullptr) add_limits(ctx.system->limits, ctx);
  add_limits(ctx.interface->limits, ctx);
  if (ctx.grant != nullptr) add_limits(ctx.grant->limits, ctx);
  if (request.hold_in_flight && ctx.interface->in_flight_limit) {
    ctx.enforced_limits.push_back(&ctx.interface->in_flight);
  }
  std::size_t keyed = 0;
  for (const auto* list : {&ctx.enforced_limits, &ctx.shadow_limits}) {
    for (const CompiledLimit* l : *list) {
      keyed += l->rule != nullptr && l->rule->key_by != config::KeyBy::kOwner ? 1 : 0;
    }
  }
  if (ctx.keys.size() < keyed) ctx.keys.resize(keyed);
  std::size_t next_key = 0;
  to_requests(request, ctx.enforced_limits, ctx.enforced, next_key, ctx);
  to_requests(request, ctx.shadow_limits, ctx.shadow, next_key, ctx);
  ctx.decisions.resize(ctx.enforced.size());
  ctx.shadow_decisions.resize(ctx.shadow.size());
}

void judge(const Status& store, Context& ctx, const Limiter& limiter) {
  Verdict& v = ctx.verdict;
  if (!store.ok()) {
    v.store_failed = true;
    const bool deny = std::any_of(ctx.enforced_limits.begin(), ctx.enforced_limits.end(), [](const CompiledLimit* l) {
      return l->rule != nullptr && l->rule->on_store_failure == config::OnStoreFailure::kDeny;
    });
    if (deny) {
      v.reason = Reason::kStoreUnavailable;
      v.retry_after = std::chrono::seconds(1);
    }
    return;
  }
  const Decision* quota = nullptr;
  const CompiledLimit* quota_limit = nullptr;
  std::int64_t quota_cost = 0;
  bool rejected = false;
  bool pointless = false;  // a rejection that no wait would turn around
  bool made_up_refusal = false;
  Nanos wait{0};
  for (std::size_t i = 0; i < ctx.decisions.size(); ++i) {
    const Decision& d = ctx.decisions[i];
    const CompiledLimit* l = ctx.enforced_limits[i];
    // Decided by on_store_failure: allow and deny made the decision up; local decided in this
    // process on its share of the limit, which is a real rate-limit decision.
    const OnStoreFailure policy = ctx.enforced[i].on_store_failure;
    const bool made_up = d.fallback && policy != OnStoreFailure::kLocal;
    v.store_failed = v.store_failed || d.fallback;
    if (!d.allowed) {
      // The limits come in the order of their reasons (system, interface, grant, in-flight) and a
      // store that could not decide comes after them, so the smallest reason is the one to give.
      const Reason r = made_up ? Reason::kStoreUnavailable : rejection_of(l->scope);
      if (!rejected || r < v.reason) v.reason = r;
      rejected = true;
      made_up_refusal = made_up_refusal || made_up;
      pointless = pointless || d.cost_exceeds_limit;
      const bool places = l->scope == Scope::kInFlight || l->rule->limit.algorithm() == Algorithm::kConcurrency;
      wait = std::max(wait, places ? kInFlightRetry : d.retry_after);
    }
    if (made_up || l->scope == Scope::kInFlight || l->rule->limit.algorithm() == Algorithm::kConcurrency) {
      continue;
    }
    // The limit the RateLimit fields describe: a rejecting one that no wait turns around (a cost
    // over the limit: another's reset would tell the client to wait for what never comes), else a
    // rejecting one with the longest wait, or else the one with the smallest share left.
    const bool better =
        quota == nullptr ||
        (!d.allowed && (quota->allowed || (!quota->cost_exceeds_limit &&
                                           (d.cost_exceeds_limit || d.retry_after > quota->retry_after)))) ||
        (d.allowed && quota->allowed && closer_to_exhaustion(d, *quota));
    if (better) {
      quota = &d;
      quota_limit = l;
      quota_cost = ctx.enforced[i].cost;
    }
  }
  if (rejected && !pointless) v.retry_after = std::max(wait, Nanos{1});
  if (quota != nullptr) {
    // When the request could pass (its retry_after), or when the quota is full again: for an
    // admitted one, and for a cost no wait admits, which has no retry_after.
    const bool until_full = quota->allowed || quota->cost_exceeds_limit;
    // A limit that admitted a request another refused (an in-flight limit, say) had its cost given
    // back: what remains is what it said plus that cost. But a limit decided in this process while
    // the store was down, beside a refusal on_store_failure made up, was only looked at (see
    // RedisStore's failure policies): what it said is what remains.
    std::int64_t remaining = quota->remaining;
    const bool only_looked_at = quota->fallback && made_up_refusal;
    if (rejected && quota->allowed && !only_looked_at) remaining = std::min(quota->limit, remaining + quota_cost);
    // A limit decided in this process while the store could not (on_store_failure: local) was
    // decided on this gateway's share of it: the decision's limit is the share's quota, and the
    // window is the share's too (a token bucket's or GCRA's share refills over a longer period).
    const Limit& rule = quota_limit->rule->limit;
    const Nanos window = quota->fallback ? limiter.local_share(rule).window() : rule.window();
    v.quota = Quota{quota_limit->field_name, quota->limit, window, remaining,
                    until_full ? quota->reset_after : quota->retry_after};
  }
  if (rejected) return;
  for (std::size_t i = 0; i < ctx.decisions.size(); ++i) {
    if (ctx.decisions[i].lease != 0) {
      ctx.leases.push_back(Lease{ctx.enforced[i].key, ctx.enforced[i].limit, ctx.decisions[i].lease});
    }
  }
}

void judge_shadow(const Status& store, Context& ctx) {
  if (!store.ok()) {
    ctx.verdict.store_failed = true;
    return;
  }
  for (std::size_t i = 0; i < ctx.shadow_decisions.size(); ++i) {
    const Decision& d = ctx.shadow_decisions[i];
    ctx.verdict.store_failed = ctx.verdict.store_failed || d.fallback;
    // A refusal by on_store_failure (deny, or local's share spent) is one too: enforced, the limit
    // would have refused the request.
    if (!d.allowed) ctx.verdict.shadow_rejected.push_back(ctx.shadow_limits[i]);
    if (d.lease != 0) ctx.leases.push_back(Lease{ctx.shadow[i].key, ctx.shadow[i].limit, d.lease});
  }
}

const Verdict& decide_now(const Request& request, const Snapshot& snapshot, Context& ctx,
                          Limiter& limiter) {
  ctx.clear();
  ctx.verdict.reason = check_access(request, snapshot, ctx);
  if (ctx.verdict.reason != Reason::kOk) return ctx.verdict;
  plan_limits(request, ctx);
  bool done = false;
  limiter.acquire_all(ctx.enforced, ctx.decisions, [&](Status s) {
    judge(s, ctx, limiter);
    done = true;
  });
  assert(done && "decide_now needs a limiter that completes inline");
  if (ctx.verdict.reason != Reason::kOk || ctx.shadow.empty()) return ctx.verdict;
  limiter.acquire_each(ctx.shadow, ctx.shadow_decisions, [&](Status s) { judge_shadow(s, ctx); });
  return ctx.verdict;
}

namespace {

// A bad_request's message by its cause (kMalformed's is the reason's own). No JSON escaping needed.
std::string_view bad_request_message(BadRequest why, config::Language language) {
  const bool zh = language == config::Language::kChinese;
  switch (why) {
    case BadRequest::kMalformed: break;
    case BadRequest::kPathNotClean:
      return zh ? "路径中有 . 或 .. 段（包括编码形式）或空字符：请写出规范路径"
                : "The path has a . or .. segment (also encoded), or a NUL: write the path it stands for.";
    case BadRequest::kPathAmbiguous:
      return zh ? "该路径会被后端读作另一个接口的路径（编码字符、// 、; 或结尾的 /）：请按该接口的路径书写"
                : "Servers that tidy paths read this path as another interface's (an encoded character, //, ; "
                  "or a trailing /): write that interface's path as it is.";
    case BadRequest::kKeyRepeated:
      return zh ? "限流所依据的请求头或查询参数出现了多次，或以不同服务器会读出不同值的形式给出：请只给一次，并按常规写法"
                : "A header or query parameter a limit counts by is given more than once, or in a form servers "
                  "read differently: give it once, plainly.";
    case BadRequest::kCallerRepeated:
      return zh ? "系统标识、API 密钥或签名请求头出现了多次（或以 - 和 _ 两种写法出现）：请只给一次"
                : "The system key, API key or a signature header is given more than once (or spelt with both - "
                  "and _): give it once.";
  }
  return message(Reason::kBadRequest, language);
}

}  // namespace

BadRequest unclean_path_cause(std::string_view path) {
  return path.starts_with('/') ? BadRequest::kPathNotClean : BadRequest::kMalformed;
}

std::string error_body(Reason reason, config::Language language, BadRequest why) {
  std::string body = "{\"code\":" + std::to_string(status_of(reason)) + ",\"reason\":\"" + to_string(reason) +
                     "\",\"msg\":\"";
  // The messages need no JSON escaping.
  body += reason == Reason::kBadRequest ? bad_request_message(why, language) : message(reason, language);
  body += "\"}";
  return body;
}

std::int64_t ceil_seconds(Nanos d) {
  if (d.count() <= 0) return 0;
  return (d.count() + 999'999'999) / 1'000'000'000;
}

namespace {

void append_int(std::string& out, std::int64_t v) {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, static_cast<std::size_t>(end - digits));
}

// Writes the fields a verdict calls for: field(name) returns the string to append that field's
// value to.
template <class Field>
void write_fields(const Verdict& v, config::RateLimitHeaders form, Field&& field) {
  if (v.retry_after) append_int(field("Retry-After"), std::max<std::int64_t>(1, ceil_seconds(*v.retry_after)));
  if (!v.quota) return;
  const Quota& q = *v.quota;
  const std::int64_t remaining = std::max<std::int64_t>(q.remaining, 0);
  switch (form) {
    case config::RateLimitHeaders::kDraft: {
      std::string& policy = field("RateLimit-Policy");
      policy.append(q.field_name);
      policy += ";q=";
      append_int(policy, q.limit);
      policy += ";w=";
      append_int(policy, ceil_seconds(q.window));
      std::string& state = field("RateLimit");
      state.append(q.field_name);
      state += ";r=";
      append_int(state, remaining);
      state += ";t=";
      append_int(state, ceil_seconds(q.reset));
      break;
    }
    case config::RateLimitHeaders::kLegacy:
      append_int(field("X-RateLimit-Limit"), q.limit);
      append_int(field("X-RateLimit-Remaining"), remaining);
      append_int(field("X-RateLimit-Reset"), ceil_seconds(q.reset));
      break;
    case config::RateLimitHeaders::kNone: break;
  }
}

}  // namespace

void append_headers(const Verdict& v, config::RateLimitHeaders form,
                    std::vector<std::pair<std::string_view, std::string>>& out) {
  write_fields(v, form, [&](std::string_view name) -> std::string& { return out.emplace_back(name, "").second; });
}

HeaderNames write_header_lines(const Verdict& v, config::RateLimitHeaders form, std::string& out) {
  HeaderNames names;
  write_fields(v, form, [&](std::string_view name) -> std::string& {
    if (!names.empty()) out += "\r\n";
    names.push_back(name);
    out.append(name);
    out += ": ";
    return out;
  });
  if (!names.empty()) out += "\r\n";
  return names;
}

namespace {

// The length of the segment separator at path[i]: '/', and what some servers also split on ('\\',
// %2F, %5C); 0 if there is none.
std::size_t separator_at(std::string_view path, std::size_t i) {
  if (path[i] == '/' || path[i] == '\\') return 1;
  if (path[i] != '%' || i + 2 >= path.size()) return 0;
  const char a = path[i + 1];
  const char b = static_cast<char>(path[i + 2] | 0x20);  // lower case
  return (a == '2' && b == 'f') || (a == '5' && b == 'c') ? 3 : 0;
}

}  // namespace

bool path_is_clean(std::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  // The current segment: how many dots (also %2E) it has, whether anything else, and whether its
  // path parameters (";...", which Java servers drop before resolving dots) have begun.
  int dots = 0;
  bool other = false;
  bool params = false;
  for (std::size_t i = 1; i <= path.size();) {
    const std::size_t sep = i == path.size() ? 1 : separator_at(path, i);
    if (sep > 0) {
      if (!other && (dots == 1 || dots == 2)) return false;
      dots = 0;
      other = params = false;
      i += sep;
      continue;
    }
    const char c = path[i];
    const bool escape = c == '%' && i + 2 < path.size();
    if (c == '\0' || (escape && path[i + 1] == '0' && path[i + 2] == '0')) return false;
    if (params) {
      ++i;
    } else if (c == ';') {
      params = true;
      ++i;
    } else if (c == '.') {
      ++dots;
      ++i;
    } else if (escape && path[i + 1] == '2' && (path[i + 2] | 0x20) == 'e') {
      ++dots;
      i += 3;
    } else {
      other = true;
      ++i;
    }
  }
  return true;
}

std::optional<std::string> routing_form(std::string_view path) {
  // Most paths have nothing to tidy: one look at each character says so ('/' only when doubled).
  static constexpr auto kMaybe = [] {
    std::array<bool, 256> t{};
    for (const unsigned char c : std::string_view("%\\;/")) t[c] = true;
    return t;
  }();
  bool plain = path.size() <= 1 || path.back() != '/';
  for (std::size_t i = 0; i < path.size() && plain; ++i) {
    const char c = path[i];
    if (kMaybe[static_cast<unsigned char>(c)]) plain = c == '/' && (i + 1 == path.size() || path[i + 1] != '/');
  }
  if (plain) return std::nullopt;
  std::string out;
  out.reserve(path.size());
  bool params = false;  // in a segment's parameters
  for (std::size_t i = 0; i < path.size();) {
    if (const std::size_t sep = separator_at(path, i)) {
      if (out.empty() || out.back() != '/') out += '/';
      params = false;
      i += sep;
      continue;
    }
    const char c = path[i];
    if (params || c == ';') {
      params = true;
      ++i;
      continue;
    }
    if (c == '%' && i + 2 < path.size()) {
      const int hi = config::hex_digit(path[i + 1]);
      const int lo = config::hex_digit(path[i + 2]);
      // Every escape but a '%' itself, which decoded would read as the start of another.
      if (hi >= 0 && lo >= 0 && !(hi == 2 && lo == 5)) {
        out += static_cast<char>(hi * 16 + lo);
        i += 3;
        continue;
      }
    }
    out += c;
    ++i;
  }
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out == path) return std::nullopt;
  return out;
}

bool query_param_ambiguous(std::string_view query, std::string_view name) {
  bool twice = false;
  const auto standard = param_in(query, name, Reading::kStandard, twice);
  const auto semicolons = param_in(query, name, Reading::kSemicolons, twice);
  const auto php = param_in(query, name, Reading::kPhp, twice);
  const auto loose = param_in(query, name, Reading::kLoose, twice);
  return twice || semicolons != standard || php != standard || loose != standard;
}

std::string_view query_param(std::string_view query, std::string_view name) {
  bool twice = false;
  return param_in(query, name, Reading::kStandard, twice).value_or(std::string_view());
}

std::string client_address(const boost::asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6()).to_string();
  }
  return a.to_string();
}

std::optional<std::string> client_address(std::string_view text) {
  // (make_address reads a C string: what follows a NUL would go unread.)
  if (text.find('\0') != std::string_view::npos) return std::nullopt;
  boost::system::error_code ec;
  const boost::asio::ip::address address = boost::asio::ip::make_address(text, ec);
  if (ec) return std::nullopt;
  return client_address(address);
}

}  // namespace sluice::gateway
