#include "gateway/admin_api.h"

#include <boost/asio/ip/address.hpp>
#include <boost/json.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "config/crypto.h"
#include "config/json.h"
#include "config/yaml.h"
#include "core/duration.h"
#include "gateway/metrics.h"
#include "gateway/policy.h"

namespace sluice::gateway {
namespace {

namespace json = boost::json;
using config::Problem;
using config::Refusal;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr std::string_view kPrefix = "/admin/v1/";

// --- responses ----------------------------------------------------------------------------------

AdminResponse json_response(int status, const json::value& body, Headers headers = {}) {
  AdminResponse r;
  r.status = status;
  r.body = json::serialize(body);
  r.headers = std::move(headers);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

// (msg may quote what a request gave, in bytes that are not UTF-8: JSON's are.)
AdminResponse error(int status, std::string_view reason, std::string_view msg, Headers headers = {}) {
  return json_response(status, json::object{{"code", status}, {"reason", reason}, {"msg", config::as_utf8(msg)}},
                       std::move(headers));
}

AdminResponse no_content(Headers headers = {}) {
  AdminResponse r;
  r.status = 204;
  r.headers = std::move(headers);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

AdminResponse method_not_allowed(std::string_view allow) {
  return error(405, "method_not_allowed", "This resource answers " + std::string(allow) + " only.",
               {{"Allow", std::string(allow)}});
}

AdminResponse not_found(std::string_view what) { return error(404, "not_found", what); }

// Where a request's body sits in the configuration, for the problems inside it: empty when the body
// is the whole configuration; kNoBody when no problem can be in the body (a delete; a change the
// body only asks for, as a breaker's force).
using BodyAt = std::optional<std::string_view>;
constexpr BodyAt kNoBody = std::nullopt;

// Problems as JSON: "path" in the whole configuration, and "field" relative to the request body when
// the problem is inside it.
json::array problems_json(const std::vector<Problem>& problems, BodyAt body_at) {
  json::array out;
  for (const Problem& p : problems) {
    json::object o;
    o["path"] = p.path;
    const std::string_view path = p.path;
    if (body_at) {
      const std::string_view prefix = *body_at;
      if (prefix.empty()) {
        o["field"] = p.path;
      } else if (path == prefix) {
        o["field"] = "";
      } else if (path.starts_with(prefix) && (path[prefix.size()] == '.' || path[prefix.size()] == '[')) {
        o["field"] = path.substr(prefix.size() + (path[prefix.size()] == '.' ? 1 : 0));
      }
    }
    o["message"] = p.message;
    if (p.line > 0) {
      o["line"] = p.line;
      o["column"] = p.column;
    }
    out.push_back(std::move(o));
  }
  return out;
}

AdminResponse invalid(const std::vector<Problem>& problems, BodyAt prefix, std::string_view msg) {
  json::object o{{"code", 400}, {"reason", "invalid_config"}, {"msg", msg}};
  o["problems"] = problems_json(problems, prefix);
  return json_response(400, o);
}

// The problems of a body read on its own (paths relative to it), placed at prefix in the configuration.
std::vector<Problem> placed(std::vector<Problem> problems, const std::string& prefix) {
  for (Problem& p : problems) p.path = p.path.empty() ? prefix : prefix + "." + p.path;
  return problems;
}

// The configuration in the database does not validate: no part of it can be read or changed. Its
// problems are listed in msg, and each in `problems` (none is in a request's body).
AdminResponse stored_invalid(const std::string& why, const std::vector<Problem>& problems) {
  json::object o{{"code", 409},
                 {"reason", "stored_config_invalid"},
                 {"msg", why + "\nReplace it whole to fix it: PUT /admin/v1/config, or sluice config apply or "
                               "import (sluice config export --as-stored prints it as it is)."}};
  o["problems"] = problems_json(problems, kNoBody);
  return json_response(409, o);
}

// Why the configuration could not be read (problems: what is wrong with it when it is not valid).
AdminResponse unreadable(const Error& e, const std::vector<Problem>& problems) {
  if (e.code == ErrorCode::kInvalidArgument) return stored_invalid(e.message, problems);
  return error(503, "store_unavailable", e.message);
}

AdminResponse refusal_response(const Refusal& r, BodyAt prefix) {
  switch (r.kind) {
    case Refusal::Kind::kNotFound: return not_found(r.message);
    case Refusal::Kind::kConflict: return error(409, "conflict", r.message);
    case Refusal::Kind::kStale: return error(412, "precondition_failed", r.message);
    case Refusal::Kind::kInvalid: return invalid(r.problems, prefix, r.message);
    case Refusal::Kind::kStoredInvalid: return stored_invalid(r.message, r.problems);
    case Refusal::Kind::kFailed: return error(503, "store_unavailable", r.message);
  }
  return error(503, "store_unavailable", r.message);
}

// --- request parts --------------------------------------------------------------------------------

// Sets `bad` when a '%' is not an escape (%XX): such a name is refused, not read as it stands.
std::string percent_decode(std::string_view s, bool plus_is_space, bool& bad) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && config::hex_digit(s[i + 1]) >= 0 && config::hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(config::hex_digit(s[i + 1]) * 16 + config::hex_digit(s[i + 2]));
      i += 2;
    } else if (s[i] == '%') {
      bad = true;
      out += s[i];
    } else if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string percent_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) != 0 || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string revision_tag(std::int64_t revision) { return "\"r" + std::to_string(revision) + "\""; }

std::string entity_tag(const json::value& full) {
  return "\"" + config::sha256_hex(json::serialize(full)).substr(0, 20) + "\"";
}

// If-Match or If-None-Match as given: absent, "*", revisions of the configuration ("r42") and
// entities' tags, in any mix. The condition holds when any listed tag matches (RFC 9110 13.1.1).
// If-Match compares strongly: a weak tag (W/"...") matches nothing; If-None-Match weakly.
struct Precondition {
  bool present = false;
  bool any = false;
  std::vector<std::int64_t> revisions;
  std::vector<std::string> tags;

  // The request's field of that name. Given empty, it is present and lists nothing (which nothing
  // matches), not absent.
  Precondition(const AdminRequest& req, std::string_view field, bool weak = false) {
    present = req.has(field);
    const std::string joined = req.list(field);
    const std::string_view header = joined;
    std::size_t start = 0;
    while (start < header.size()) {
      std::size_t end = header.find(',', start);
      if (end == std::string_view::npos) end = header.size();
      std::string_view tag = header.substr(start, end - start);
      while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
      while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
      if (tag.starts_with("W/")) {
        if (!weak) {
          start = end + 1;
          continue;
        }
        tag.remove_prefix(2);
      }
      if (tag == "*") any = true;
      std::int64_t r = 0;
      if (tag.size() > 3 && tag.starts_with("\"r") && tag.back() == '"') {
        auto [p, ec] = std::from_chars(tag.data() + 2, tag.data() + tag.size() - 1, r);
        if (ec == std::errc() && p == tag.data() + tag.size() - 1) revisions.push_back(r);
      }
      if (!tag.empty()) tags.emplace_back(tag);
      start = end + 1;
    }
  }

  bool lists(const std::string& tag) const { return std::find(tags.begin(), tags.end(), tag) != tags.end(); }
  bool lists_revision(std::int64_t r) const { return std::find(revisions.begin(), revisions.end(), r) != revisions.end(); }
  // Whether it lists anything but revisions (an entity's tag, or *).
  bool lists_more_than_revisions() const { return any || tags.size() > revisions.size(); }
};

// A write's If-Match and If-None-Match. If-Match holds when the configuration is at a revision it
// lists, or else when the entity the write changes exists and has a tag it lists (or it lists *).
// A change decides that with check(), in the write's transaction, so that no write lands between
// the check and the commit. A replacement of the whole configuration (no entity, no tag) uses
// resolve() and the store's check of the revision as it commits.
struct Conditions {
  Precondition match;
  Precondition none_match;
  std::optional<std::int64_t> revision_held;  // resolve(): a listed revision, the configuration's

  explicit Conditions(const AdminRequest& req)
      : match(req, "If-Match"), none_match(req, "If-None-Match", true) {}

  // For a replacement: looks whether the configuration is at a revision If-Match lists; then the
  // store checks, as it commits, that it still is (a move in between is refused, not overlooked).
  // A refusal when none listed is current and If-Match is not *, or when the revision cannot be
  // read.
  std::optional<AdminResponse> resolve(config::ConfigStore& store) {
    if (!match.present || match.revisions.empty()) return std::nullopt;
    auto at = store.revision();
    if (!at.ok()) return error(503, "store_unavailable", at.error().message);
    if (match.lists_revision(*at)) {
      revision_held = *at;
    } else if (!match.any) {
      return error(412, "precondition_failed", changed_since(*at));
    }
    return std::nullopt;
  }

  std::optional<std::int64_t> revision() const { return revision_held; }

  // In a change to the configuration at `revision`: `what` (an entity, or the one a change is made
  // in: a credential's system) exists or not, with the ETag `tag` when it does.
  std::optional<Refusal> check(std::int64_t revision, bool exists, const std::string& tag,
                               const std::string& what) const {
    if (match.present && !match.lists_revision(revision)) {
      if (!match.revisions.empty() && !match.lists_more_than_revisions()) {
        return Refusal{Refusal::Kind::kStale, changed_since(revision), {}};
      }
      if (!exists) return Refusal{Refusal::Kind::kStale, "If-Match: " + what + " does not exist", {}};
      if (!match.any && !match.lists(tag)) {
        return Refusal{Refusal::Kind::kStale,
                       "If-Match: " + what + " changed since you read it (its ETag is now " + tag +
                           "): read it again and redo the change",
                       {}};
      }
    }
    // A revision listed is the configuration's, as for a replacement: it must have moved since.
    if (none_match.lists_revision(revision)) {
      return Refusal{Refusal::Kind::kStale, "If-None-Match: the configuration is at " + revision_tag(revision) + ".", {}};
    }
    if (none_match.present && exists && (none_match.any || none_match.lists(tag))) {
      return Refusal{Refusal::Kind::kStale,
                     "If-None-Match: " + what + (none_match.any ? " exists" : " is still as you read it"), {}};
    }
    return std::nullopt;
  }

 private:
  std::string changed_since(std::int64_t at) const {
    return "the configuration changed since revision " + std::to_string(match.revisions.back()) + " (it is at " +
           std::to_string(at) + "): read it again and redo the change";
  }
};

// A write to what has no ETag (tokens, counters, a breaker's state on this instance) can hold no
// precondition but If-Match: * (it exists): any other is refused rather than ignored.
std::optional<AdminResponse> no_preconditions(const AdminRequest& req, std::string_view what) {
  const Precondition match(req, "If-Match");
  if ((match.present && !match.any) || req.has("If-None-Match")) {
    return error(412, "precondition_failed",
                 std::string(what) + " has no ETag: a write to it takes no If-None-Match, and no If-Match but *.");
  }
  return std::nullopt;
}

std::optional<Nanos> wait_of(std::string_view text) {
  if (text.empty()) return Nanos{0};
  std::int64_t seconds = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  // Any longer than a day is a day (the hold is capped far below): as nanoseconds, 9223372037 s
  // and more would wrap around to no wait at all.
  constexpr std::int64_t kDay = 86400;
  if (ec == std::errc() && p == text.data() + text.size() && seconds >= 0) return std::chrono::seconds(std::min(seconds, kDay));
  if (ec == std::errc::result_out_of_range && p == text.data() + text.size() && text.front() != '-') {
    return std::chrono::seconds(kDay);
  }
  return parse_duration(text);
}

// A body that is meant as JSON (it starts with '{') and is not: where it stops and why, as a JSON
// parser says it (the YAML parser that reads the configuration says it in YAML's terms: "end of
// map flow not found" at line 1, column 1).
std::optional<Problem> json_syntax_problem(std::string_view body) {
  const std::size_t start = body.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || body[start] != '{') return std::nullopt;
  json::stream_parser parser;
  boost::system::error_code ec;
  const std::size_t used = parser.write(body.data(), body.size(), ec);
  if (!ec) parser.finish(ec);
  if (!ec) return std::nullopt;
  Problem p{"", "is not valid JSON: " + ec.message()};
  const std::string_view read = body.substr(0, std::min(used, body.size()));
  p.line = 1 + static_cast<int>(std::count(read.begin(), read.end(), '\n'));
  p.column = 1 + static_cast<int>(read.size() - (read.rfind('\n') == std::string_view::npos ? 0 : read.rfind('\n') + 1));
  return p;
}

// The body as a JSON object; nothing when it is not one, or names a field twice.
std::optional<json::object> json_object_body(std::string_view body) {
  if (body.empty()) return json::object();
  if (config::repeated_key(body)) return std::nullopt;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return std::move(v.as_object());
}

// The 400 for a body json_object_body() did not take: which field is given twice, or the shape it
// must have.
AdminResponse bad_body(std::string_view body, std::string_view shape) {
  if (const std::optional<std::string> repeated = config::repeated_key(body)) {
    return error(400, "bad_request", "The body gives the field \"" + *repeated + "\" twice: give each field once.");
  }
  return error(400, "bad_request", shape);
}

std::string str_field(const json::object& o, std::string_view name) {
  auto it = o.find(name);
  return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : std::string();
}

json::object redacted(json::object o) {
  if (auto it = o.find("credentials"); it != o.end() && it->value().is_array()) {
    for (json::value& c : it->value().as_array()) {
      if (!c.is_object()) continue;
      c.as_object().erase("api_key_sha256");
      c.as_object().erase("sealed_secret");
    }
  }
  return o;
}

std::int64_t millis(Nanos d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// --- the entities ---------------------------------------------------------------------------------

template <class T>
struct Entity;

template <class T>
std::string path_of(const std::vector<std::string>& id);

// Deletes the grants `gone` says, each with an audit row of its own along with the change's.
template <class Gone>
void delete_grants(config::Config& c, config::ChangeRecord& record, Gone gone) {
  std::erase_if(c.grants, [&](const config::Grant& g) {
    if (!gone(g)) return false;
    record.along.push_back({"grant.delete", path_of<config::Grant>({g.system, g.interface}),
                            json::serialize(config::to_json(g)), "null"});
    return true;
  });
}

template <>
struct Entity<config::System> {
  static constexpr std::string_view kCollection = "systems";
  static constexpr std::string_view kName = "system";
  static constexpr std::size_t kIdParts = 1;
  static std::vector<config::System>& list(config::Config& c) { return c.systems; }
  static std::vector<std::string> id(const config::System& s) { return {s.key}; }
  static void set_id(config::System& s, const std::vector<std::string>& id) { s.key = id[0]; }
  static auto parse(std::string_view text, config::System* read) { return config::parse_system(text, read); }
  // Credentials have routes of their own: a write of the system keeps those it had.
  static void carry_over(const config::System* before, config::System& next) {
    next.credentials = before != nullptr ? before->credentials : std::vector<config::Credential>{};
  }
  static void on_delete(config::Config& c, const config::System& s, config::ChangeRecord& record) {
    delete_grants(c, record, [&](const config::Grant& g) { return g.system == s.key; });
  }
};

template <>
struct Entity<config::Interface> {
  static constexpr std::string_view kCollection = "interfaces";
  static constexpr std::string_view kName = "interface";
  static constexpr std::size_t kIdParts = 1;
  static std::vector<config::Interface>& list(config::Config& c) { return c.interfaces; }
  static std::vector<std::string> id(const config::Interface& f) { return {f.id}; }
  static void set_id(config::Interface& f, const std::vector<std::string>& id) { f.id = id[0]; }
  static auto parse(std::string_view text, config::Interface* read) { return config::parse_interface(text, read); }
  static void carry_over(const config::Interface*, config::Interface&) {}
  static void on_delete(config::Config& c, const config::Interface& f, config::ChangeRecord& record) {
    delete_grants(c, record, [&](const config::Grant& g) { return g.interface == f.id; });
  }
};

template <>
struct Entity<config::Upstream> {
  static constexpr std::string_view kCollection = "upstreams";
  static constexpr std::string_view kName = "upstream";
  static constexpr std::size_t kIdParts = 1;
  static std::vector<config::Upstream>& list(config::Config& c) { return c.upstreams; }
  static std::vector<std::string> id(const config::Upstream& u) { return {u.name}; }
  static void set_id(config::Upstream& u, const std::vector<std::string>& id) { u.name = id[0]; }
  static auto parse(std::string_view text, config::Upstream* read) { return config::parse_upstream(text, read); }
  static void carry_over(const config::Upstream*, config::Upstream&) {}
  static void on_delete(config::Config&, const config::Upstream&, config::ChangeRecord&) {}
};

template <>
struct Entity<config::Grant> {
  static constexpr std::string_view kCollection = "grants";
  static constexpr std::string_view kName = "grant";
  static constexpr std::size_t kIdParts = 2;
  static std::vector<config::Grant>& list(config::Config& c) { return c.grants; }
  static std::vector<std::string> id(const config::Grant& g) { return {g.system, g.interface}; }
  static void set_id(config::Grant& g, const std::vector<std::string>& id) {
    g.system = id[0];
    g.interface = id[1];
  }
  static auto parse(std::string_view text, config::Grant* read) { return config::parse_grant(text, read); }
  static void carry_over(const config::Grant*, config::Grant&) {}
  static void on_delete(config::Config&, const config::Grant&, config::ChangeRecord&) {}
};

template <class T>
std::string path_of(const std::vector<std::string>& id) {
  std::string p(Entity<T>::kCollection);
  for (const std::string& part : id) p += "/" + percent_encode(part);
  return p;
}

template <class T>
std::string describe(const std::vector<std::string>& id) {
  std::string d = std::string(Entity<T>::kName) + " \"" + id[0] + "\"";
  if (id.size() > 1) d += " for interface \"" + id[1] + "\"";
  return d;
}

template <class T>
std::ptrdiff_t find(std::vector<T>& list, const std::vector<std::string>& id) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (Entity<T>::id(list[i]) == id) return static_cast<std::ptrdiff_t>(i);
  }
  return -1;
}

template <class T>
std::string prefix_of(std::size_t index) {
  return std::string(Entity<T>::kCollection) + "[" + std::to_string(index) + "]";
}

json::object breaker_json(const UpstreamEntry& u) {
  json::object o;
  o["upstream"] = u.upstream->name;
  o["enabled"] = u.upstream->breaker.enabled;
  o["force"] = config::to_string(u.upstream->breaker.force);
  if (u.breaker) {
    const BreakerStats s = u.breaker->stats();
    o["state"] = to_string(s.state);
    o["calls"] = s.calls;
    o["failures"] = s.failures;
    o["slow_calls"] = s.slow_calls;
    o["open_remaining_ms"] = millis(s.open_remaining);
  } else {
    o["state"] = to_string(BreakerState::kDisabled);
  }
  return o;
}

json::object series_json(const Stats::Series& s) {
  json::object o;
  json::array admitted(s.admitted.begin(), s.admitted.end());
  std::int64_t admitted_total = 0;
  for (std::int64_t n : s.admitted) admitted_total += n;
  json::object rejected;
  std::int64_t rejected_total = 0;
  for (const auto& [reason, counts] : s.rejected) {
    rejected[reason] = json::array(counts.begin(), counts.end());
    for (std::int64_t n : counts) rejected_total += n;
  }
  o["admitted"] = std::move(admitted);
  o["rejected"] = std::move(rejected);
  o["admitted_total"] = admitted_total;
  o["rejected_total"] = rejected_total;
  return o;
}

// A token's expiry as the API shows it: the time, or null for never.
json::value expiry_json(std::int64_t expires) {
  return expires == 0 ? json::value(nullptr) : json::value(config::format_time(expires));
}

// What a keyed limit's rule reads its value from, for messages: "header X-User",
// "query parameter user", "client address".
std::string counted_name(const config::LimitRule& rule) {
  switch (rule.key_by) {
    case config::KeyBy::kHeader: return "header " + rule.key_name;
    case config::KeyBy::kQuery: return "query parameter " + rule.key_name;
    case config::KeyBy::kClientIp: return "client address";
    case config::KeyBy::kOwner: break;
  }
  return "owner";
}

// What it counts apart: "each value of header X-User apart (key_by: header:X-User)".
std::string counted_by(const config::LimitRule& rule) {
  std::string by = config::to_string(rule.key_by);
  if (rule.key_by == config::KeyBy::kHeader || rule.key_by == config::KeyBy::kQuery) by += ":" + rule.key_name;
  return (rule.key_by == config::KeyBy::kClientIp ? std::string("each client address") : "each value of " + counted_name(rule)) +
         " apart (key_by: " + by + ")";
}

}  // namespace

// --- AdminAuth ------------------------------------------------------------------------------------

void AdminAuth::set_tokens(std::vector<config::TokenInfo> tokens) {
  std::lock_guard lock(mu_);
  tokens_ = std::move(tokens);
  ++generation_;
}

void AdminAuth::set_reload(std::function<std::optional<std::vector<config::TokenInfo>>()> reload) {
  std::lock_guard lock(mu_);
  reload_ = std::move(reload);
}

bool AdminAuth::empty() const {
  std::lock_guard lock(mu_);
  return tokens_.empty();
}

std::optional<AdminAuth::Principal> AdminAuth::authenticate(std::string_view authorization,
                                                            std::int64_t* expired) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), authorization.begin(),
                  [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) ==
                                              std::tolower(static_cast<unsigned char>(b)); })) {
    return std::nullopt;
  }
  const std::string presented = config::sha256_hex(authorization.substr(kBearer.size()));
  std::unique_lock lock(mu_);
  const auto find = [&]() -> const config::TokenInfo* {
    const config::TokenInfo* found = nullptr;
    for (const config::TokenInfo& t : tokens_) {
      // Every token is compared, in constant time, whatever matched before.
      if (config::constant_time_equal(presented, t.token_sha256)) found = &t;
    }
    return found;
  };
  const config::TokenInfo* found = find();
  const auto now = std::chrono::steady_clock::now();
  if (found == nullptr && reload_ && now - reloaded_ >= kReloadEvery) {
    // Perhaps made a moment ago by another process (sluice token create): read them again.
    reloaded_ = now;
    const std::uint64_t before = generation_;
    lock.unlock();
    std::optional<std::vector<config::TokenInfo>> tokens = reload_();
    lock.lock();
    // Not over tokens set meanwhile (a revocation the watcher read after this read): they are newer.
    if (tokens && generation_ == before) {
      tokens_ = std::move(*tokens);
      ++generation_;
    }
    found = find();
  }
  if (found == nullptr) return std::nullopt;
  const Clock& clock = clock_ != nullptr ? *clock_ : SystemClock::instance();
  if (found->expired_at(std::chrono::duration_cast<std::chrono::seconds>(clock.now()).count())) {
    if (expired != nullptr) *expired = found->expires;
    return std::nullopt;
  }
  return Principal{found->id, found->name, found->role, found->expires};
}

Status check_admin_listen(std::string_view address, bool tokens_exist) {
  if (address == "off") return {};
  auto target = config::parse_target(address);
  if (!target) return invalid_argument("admin_listen \"" + std::string(address) + "\" is not host:port");
  const std::string& host = target->host;
  // An address, judged as one (a name like 127.0.0.1.example.com is not loopback), or localhost.
  boost::system::error_code ec;
  const boost::asio::ip::address ip = boost::asio::ip::make_address(host, ec);
  const bool loopback = host == "localhost" || (!ec && ip.is_loopback());
  if (loopback || tokens_exist) return {};
  return invalid_argument("refusing to serve the admin API on " + std::string(address) +
                          ", off loopback, while no admin token exists (of either role): create one first "
                          "(sluice token create --role admin, or --role read), or listen on 127.0.0.1");
}

// --- AdminApi -------------------------------------------------------------------------------------

struct AdminApi::Call {
  const AdminRequest& request;
  std::string method;
  std::vector<std::string> segments;  // after /admin/v1/, percent-decoded
  std::map<std::string, std::string> query;
  AdminAuth::Principal principal;
  std::string actor;

  std::string param(const std::string& name) const {
    auto it = query.find(name);
    return it == query.end() ? std::string() : it->second;
  }
};

AdminApi::AdminApi(AdminApiOptions options) : options_(std::move(options)) {}

std::shared_ptr<const std::string> AdminApi::config_body(const config::StoredConfig& stored, bool admin,
                                                         bool yaml) const {
  std::lock_guard lock(cache_mu_);  // held while building: the others asking want the same answer
  if (cache_.answered != stored.config) {
    cache_.answered = stored.config;
    for (auto& body : cache_.bodies) body.reset();
  }
  std::shared_ptr<const std::string>& body = cache_.bodies[(admin ? 2 : 0) + (yaml ? 1 : 0)];
  if (!body) {
    const config::Config* shown = stored.config.get();
    config::Config redacted;
    if (!admin) {
      // The limit store's password is for admin tokens (and the followers that hold one) only.
      redacted = *stored.config;
      redacted.store = config::redact_store_password(redacted.store);
      shown = &redacted;
    }
    body = std::make_shared<const std::string>(yaml ? config::to_yaml(*shown)
                                                    : json::serialize(config::to_json(*shown)));
  }
  return body;
}

std::int64_t AdminApi::now_seconds() const {
  const Clock& clock = options_.clock != nullptr ? *options_.clock : SystemClock::instance();
  return std::chrono::duration_cast<std::chrono::seconds>(clock.now()).count();
}

Result<config::StoredConfig> AdminApi::current(std::vector<Problem>* problems) const {
  if (options_.store != nullptr) {
    // The revision counts the commits to one file: the generation says it is still that file
    // (looked at on both sides of the revision, in case it is replaced in between).
    const std::uint64_t generation = options_.store->generation();
    auto revision = options_.store->revision();
    if (revision.ok() && generation == options_.store->generation()) {
      if (options_.watched) {
        // Read already, to be served.
        WatchedConfig w = options_.watched();
        if (w.installed.config && w.generation == generation && w.installed.revision == *revision) return w.installed;
      }
      std::lock_guard lock(cache_mu_);
      if (cache_.stored.config && cache_.generation == generation && cache_.stored.revision == *revision) {
        return cache_.stored;
      }
    }
    auto loaded = options_.store->load(problems);
    if (loaded.ok() && generation == options_.store->generation()) {
      std::lock_guard lock(cache_mu_);
      cache_.generation = generation;
      cache_.stored = *loaded;
    }
    return loaded;
  }
  config::StoredConfig pulled = options_.pulled();
  if (!pulled.config) return Error{ErrorCode::kStoreUnavailable, "No configuration has been pulled from the primary yet."};
  return pulled;
}

// Everything asked of a request before its route: that it is under /admin/v1/, its token and role,
// its query; fills call's segments, query and principal. The refusal, or nullopt to go on.
std::optional<AdminResponse> AdminApi::admit(Call& call) const {
  const AdminRequest& request = call.request;
  const std::string_view target = request.target;
  const std::size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  if (!path.starts_with(kPrefix)) return not_found("No such admin API route.");
  bool bad_escape = false;
  for (std::string_view rest = path.substr(kPrefix.size()); !rest.empty();) {
    const std::size_t slash = rest.find('/');
    call.segments.push_back(percent_decode(rest.substr(0, slash), false, bad_escape));
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
    // A '/' at the end makes an empty segment, which no route has: /systems/a/ is not "a".
    if (rest.empty()) call.segments.emplace_back();
  }
  std::string repeated;  // a query parameter given twice: which value was meant is not known
  if (q != std::string_view::npos) {
    for (std::string_view rest = target.substr(q + 1); !rest.empty();) {
      const std::size_t amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      const std::size_t eq = pair.find('=');
      std::string name = percent_decode(pair.substr(0, eq), true, bad_escape);
      std::string value = eq == std::string_view::npos ? "" : percent_decode(pair.substr(eq + 1), true, bad_escape);
      if (!name.empty() && !call.query.emplace(name, std::move(value)).second && repeated.empty()) {
        repeated = std::move(name);
      }
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
  }
  const std::string_view authorization = request.single("Authorization");
  std::int64_t expired = 0;
  auto principal = options_.auth ? options_.auth->authenticate(authorization, &expired) : std::nullopt;
  if (!principal) {
    // Which of: none given, given twice, one past its expiry, or one this API does not know
    // (revoked, mistyped).
    const bool given = !request.list("Authorization").empty();
    return error(401, "unauthorized",
                 !given                  ? "This needs a token (sluice token create): Authorization: Bearer <token>."
                 : authorization.empty() ? "Give Authorization once: Authorization: Bearer <token>."
                 : expired != 0          ? "The token expired at " + config::format_time(expired) +
                                               ": an admin can create another (sluice token create)."
                                         : "The token is not one of this admin API's (revoked, or mistyped): "
                                           "Authorization: Bearer <token>.",
                 {{"WWW-Authenticate", "Bearer realm=\"sluice\""}});
  }
  if (call.segments.empty() ||
      std::any_of(call.segments.begin(), call.segments.end(), [](const std::string& s) { return s.empty(); })) {
    return not_found("No such admin API route.");
  }
  call.principal = *principal;
  call.actor = "token:" + principal->name + " (" + principal->id + ")";
  const bool reads = call.method == "GET";
  const std::string& what = call.segments[0];
  if ((!reads || what == "tokens") && principal->role != config::Role::kAdmin) {
    return error(403, "forbidden", "This token has the read role; this needs the admin role.");
  }
  if (!repeated.empty()) return error(400, "bad_request", "The query parameter " + repeated + " is given twice.");
  if (bad_escape) return error(400, "bad_request", "The URL holds a % that is not an escape: write % as %25.");
  // An id or name is UTF-8 (a query value need not be: a counter keyed by a query parameter may
  // count any bytes, and can be read and reset).
  if (std::any_of(call.segments.begin(), call.segments.end(),
                  [](const std::string& s) { return config::invalid_utf8_at(s) != std::string_view::npos; })) {
    return error(400, "bad_request", "The URL's path has escapes that decode to bytes that are not UTF-8 text.");
  }
  return std::nullopt;
}

std::optional<AdminResponse> AdminApi::screen(const AdminRequest& head) const {
  Call call{head, head.method, {}, {}, {}, {}};
  return admit(call);
}

AdminResponse AdminApi::handle(const AdminRequest& request) const {
  Call call{request, request.method, {}, {}, {}, {}};
  if (auto refused = admit(call)) return *refused;
  const bool reads = call.method == "GET";
  const std::string& what = call.segments[0];
  if (what == "config") return config_route(call);
  if (what == "systems") return entity_route<config::System>(call);
  if (what == "interfaces") return entity_route<config::Interface>(call);
  if (what == "upstreams") return entity_route<config::Upstream>(call);
  if (what == "grants") return entity_route<config::Grant>(call);
  if (what == "audit") return audit_route(call);
  if (what == "stats") return stats_route(call);
  if (what == "limits") return limits_route(call);
  if (what == "breakers") return breakers_route(call);
  if (what == "tokens") return tokens_route(call);
  if (what == "whoami" && call.segments.size() == 1) {
    if (!reads) return method_not_allowed("GET");
    const AdminAuth::Principal& principal = call.principal;
    return json_response(200, json::object{{"id", principal.id}, {"name", principal.name},
                                           {"role", config::to_string(principal.role)},
                                           {"expires", expiry_json(principal.expires)}});
  }
  return not_found("No such admin API route.");
}

namespace {

AdminResponse read_only(const std::string& primary) {
  return error(409, "read_only",
               "This instance follows " + primary + ": change the configuration there; it arrives here within seconds.");
}

}  // namespace

// GET / PUT /admin/v1/config
AdminResponse AdminApi::config_route(Call& call) const {
  if (call.segments.size() != 1) return not_found("No such admin API route.");
  const AdminRequest& req = call.request;
  if (call.method == "GET") {
    const auto wait = wait_of(call.param("wait"));
    if (!wait) return error(400, "bad_request", "wait must be a number of seconds or a duration like 30s");
    // The cheap check first: a long poll asks again every 50 ms.
    std::int64_t revision = 0;
    if (options_.store != nullptr) {
      auto r = options_.store->revision();
      if (!r.ok()) return error(503, "store_unavailable", r.error().message);
      revision = *r;
    } else {
      revision = options_.pulled().revision;
    }
    const std::string tag = revision_tag(revision);
    const Precondition none_match(req, "If-None-Match", true);  // compared weakly
    // A long poll is answered 304 while it may still wait: unchanged, or (a database's) changed but
    // not read yet by the watcher, which reads each revision to serve it. This thread then reads
    // nothing: the configuration of thousands of systems takes a while to read, and every poll
    // asks again each 50 ms.
    bool unread = false;
    if (!none_match.revisions.empty() && *wait > Nanos{0} && options_.store != nullptr && options_.watched) {
      const WatchedConfig w = options_.watched();
      unread = w.generation == options_.store->generation() && w.looked < revision;
    }
    if (none_match.present && (none_match.any || none_match.lists_revision(revision) || unread)) {
      // Unread, it answers for the revision the poll has (if its time is up before the watcher reads).
      AdminResponse r = no_content({{"ETag", unread ? revision_tag(none_match.revisions.back()) : tag}});
      r.status = 304;
      r.hold = std::min(*wait, options_.max_wait);
      return r;
    }
    std::vector<Problem> problems;
    auto read = current(&problems);
    if (!read.ok()) {
      // Invalid, with the revision it is at: a replacement that fixes it can be made conditional on
      // it (one read apart, so at worst it is refused with 412).
      AdminResponse r = unreadable(read.error(), problems);
      if (read.error().code == ErrorCode::kInvalidArgument) r.headers.emplace_back("ETag", tag);
      return r;
    }
    const config::StoredConfig& stored = *read;
    const std::string format = call.param("format");
    if (!format.empty() && format != "yaml" && format != "json") {
      return error(400, "bad_request", "format must be yaml or json, got \"" + format + "\".");
    }
    const bool yaml = format == "yaml" || (format.empty() && req.header("Accept").find("yaml") != std::string_view::npos);
    AdminResponse r;
    r.content_type = yaml ? "application/yaml" : "application/json";
    r.body = *config_body(stored, call.principal.role == config::Role::kAdmin, yaml);
    r.headers = {{"Cache-Control", "no-store"}, {"ETag", revision_tag(stored.revision)}};
    return r;
  }
  if (call.method != "PUT") return method_not_allowed("GET, PUT");
  if (options_.store == nullptr) return read_only(options_.primary);
  auto loaded = config::load_yaml(req.body, "");
  if (auto* problems = std::get_if<std::vector<Problem>>(&loaded)) {
    // Text that did not parse (one problem, at no field) meant as JSON: said in JSON's terms.
    if (problems->size() == 1 && problems->front().path.empty()) {
      if (auto bad = json_syntax_problem(req.body)) *problems = {*bad};
    }
    return invalid(*problems, "", "The configuration was refused: nothing was changed.");
  }
  const auto& next = std::get<std::shared_ptr<const config::Config>>(loaded);
  Conditions conditions(req);
  if (conditions.match.present && !conditions.match.any && conditions.match.revisions.empty()) {
    return error(412, "precondition_failed", "If-Match must be the configuration's ETag (\"r<revision>\") or *");
  }
  if (auto refused = conditions.resolve(*options_.store)) return *refused;
  // The configuration always exists: If-None-Match holds only for a revision it is no longer at.
  if (conditions.none_match.present) {
    auto at = options_.store->revision();
    if (!at.ok()) return error(503, "store_unavailable", at.error().message);
    if (conditions.none_match.any || conditions.none_match.lists_revision(*at)) {
      return error(412, "precondition_failed", "If-None-Match: the configuration is at " + revision_tag(*at) + ".");
    }
  }
  const config::WriteResult w =
      options_.store->replace(call.actor, "config.replace", *next, conditions.revision());
  if (!w.ok()) return refusal_response(*w.refusal, "");
  return json_response(200, json::object{{"revision", w.revision}}, {{"ETag", revision_tag(w.revision)}});
}

template <class T>
AdminResponse AdminApi::entity_route(Call& call) const {
  using E = Entity<T>;
  const std::vector<std::string>& seg = call.segments;
  const std::size_t parts = seg.size() - 1;
  const AdminRequest& req = call.request;
  if constexpr (std::is_same_v<T, config::System>) {
    if (seg.size() >= 3 && seg[2] == "credentials") return credentials_route(call);
  }
  if (parts != 0 && parts != E::kIdParts) return not_found("No such admin API route.");
  const bool collection = parts == 0;

  if (call.method == "GET") {
    std::vector<Problem> problems;
    auto read = current(&problems);
    if (!read.ok()) return unreadable(read.error(), problems);
    const config::StoredConfig& stored = *read;
    config::Config c = *stored.config;
    auto& list = E::list(c);
    if (collection) {
      json::array items;
      for (const T& e : list) items.push_back(redacted(config::to_json(e)));
      return json_response(200, json::object{{"items", std::move(items)}, {"revision", stored.revision}},
                           {{"ETag", revision_tag(stored.revision)}});
    }
    const std::vector<std::string> id(seg.begin() + 1, seg.end());
    const auto at = find(list, id);
    if (at < 0) return not_found("No " + describe<T>(id) + ".");
    const json::object full = config::to_json(list[static_cast<std::size_t>(at)]);
    return json_response(200, redacted(full), {{"ETag", entity_tag(full)}});
  }
  if (collection ? call.method != "POST" : call.method != "PUT" && call.method != "DELETE") {
    return method_not_allowed(collection ? "GET, POST" : "GET, PUT, DELETE");
  }
  if (options_.store == nullptr) return read_only(options_.primary);

  Conditions conditions(req);
  std::string prefix;
  bool created = false;
  json::object after;  // the entity as stored (or as it was, when the write changed nothing)

  if (call.method == "DELETE") {
    const std::vector<std::string> id(seg.begin() + 1, seg.end());
    const config::WriteResult w = options_.store->update(
        call.actor,
        [&](config::Config& c, config::ChangeRecord& record, std::int64_t revision) -> std::optional<Refusal> {
          auto& list = E::list(c);
          const auto at = find(list, id);
          if (at < 0) {
            if (auto r = conditions.check(revision, false, "", describe<T>(id))) return r;
            return Refusal{Refusal::Kind::kNotFound, "No " + describe<T>(id) + ".", {}};
          }
          const T gone = list[static_cast<std::size_t>(at)];
          const json::object full = config::to_json(gone);
          if (auto r = conditions.check(revision, true, entity_tag(full), describe<T>(id))) return r;
          record = {std::string(E::kName) + ".delete", path_of<T>(id), json::serialize(full), "null"};
          list.erase(list.begin() + at);
          E::on_delete(c, gone, record);
          return std::nullopt;
        });
    if (!w.ok()) return refusal_response(*w.refusal, kNoBody);
    return no_content({{"X-Sluice-Revision", std::to_string(w.revision)}});
  }

  // POST (create) and PUT (create or replace): the body is the entity.
  T read;
  auto parsed = E::parse(req.body, &read);
  std::vector<std::string> id;
  if (!collection) id.assign(seg.begin() + 1, seg.end());
  if (auto* problems = std::get_if<std::vector<Problem>>(&parsed)) {
    // Placed where the entity is, or would go, in the configuration; with what the configuration
    // says of its fields that did read (a reference to nothing beside a limit out of range).
    const auto stored = current();
    config::Config c;
    if (stored.ok()) c = *stored->config;
    auto& list = E::list(c);
    const auto at = collection ? -1 : find(list, id);
    const std::size_t index = at >= 0 ? static_cast<std::size_t>(at) : list.size();
    const std::string where = prefix_of<T>(index);
    std::vector<Problem> all = placed(*problems, where);
    const std::vector<std::string> given = E::id(read);
    if (!collection && std::all_of(given.begin(), given.end(), [](const std::string& s) { return s.empty(); })) {
      E::set_id(read, id);
    }
    if (stored.ok() && (collection || E::id(read) == id)) {
      E::carry_over(at >= 0 ? &list[index] : nullptr, read);
      if (at >= 0) {
        list[index] = std::move(read);
      } else {
        list.push_back(std::move(read));
      }
      // Its own: another entity's problem with it (a grant it may no longer call) would judge the
      // defaults standing in for what did not read.
      for (Problem& p : config::problems_beside(c, all)) {
        if (p.path.starts_with(where + ".")) all.push_back(std::move(p));
      }
    }
    return invalid(all, where, "The " + std::string(E::kName) + " was refused: nothing was changed.");
  }
  T entity = std::get<T>(std::move(parsed));
  if (collection) {
    id = E::id(entity);
  } else {
    const std::vector<std::string> given = E::id(entity);
    const bool unnamed = std::all_of(given.begin(), given.end(), [](const std::string& s) { return s.empty(); });
    if (unnamed) {
      E::set_id(entity, id);
    } else if (given != id) {
      return error(400, "bad_request",
                   "The body names " + describe<T>(given) + " but the URL " + describe<T>(id) +
                       ": to rename, create the new one and delete the old.");
    }
  }
  const config::WriteResult w = options_.store->update(
      call.actor,
      [&](config::Config& c, config::ChangeRecord& record, std::int64_t revision) -> std::optional<Refusal> {
        auto& list = E::list(c);
        const auto at = find(list, id);
        const bool exists = at >= 0;
        if (collection && exists) {
          return Refusal{Refusal::Kind::kConflict,
                         describe<T>(id) + " exists already: PUT /admin/v1/" + path_of<T>(id) + " to change it", {}};
        }
        const T* before = exists ? &list[static_cast<std::size_t>(at)] : nullptr;
        const json::object before_json = before != nullptr ? config::to_json(*before) : json::object();
        if (auto r = conditions.check(revision, exists, entity_tag(before_json), describe<T>(id))) return r;
        E::carry_over(before, entity);
        record.action = std::string(E::kName) + (exists ? ".update" : ".create");
        record.target = path_of<T>(id);
        record.before = exists ? json::serialize(before_json) : "null";
        std::size_t index = static_cast<std::size_t>(at);
        if (exists) {
          list[index] = entity;
        } else {
          index = list.size();
          list.push_back(entity);
        }
        prefix = prefix_of<T>(index);
        created = !exists;
        after = config::to_json(list[index]);
        record.after = json::serialize(after);
        return std::nullopt;
      });
  if (!w.ok()) return refusal_response(*w.refusal, prefix);
  Headers headers{{"ETag", entity_tag(after)}, {"X-Sluice-Revision", std::to_string(w.revision)}};
  if (created) headers.emplace_back("Location", std::string(kPrefix) + path_of<T>(id));
  return json_response(created ? 201 : 200, redacted(after), std::move(headers));
}

// /admin/v1/systems/{key}/credentials[/{id}]
AdminResponse AdminApi::credentials_route(Call& call) const {
  const std::vector<std::string>& seg = call.segments;
  const std::string& key = seg[1];
  if (seg.size() > 4) return not_found("No such admin API route.");
  if (seg.size() == 3 && call.method == "GET") {
    std::vector<Problem> problems;
    const auto stored = current(&problems);
    if (!stored.ok()) return unreadable(stored.error(), problems);
    for (const config::System& s : stored->config->systems) {
      if (s.key != key) continue;
      json::array items;
      for (const config::Credential& c : s.credentials) {
        json::object o = config::to_json(c);
        o.erase("api_key_sha256");
        o.erase("sealed_secret");
        o["active"] = !c.expires || now_seconds() < *c.expires;
        items.push_back(std::move(o));
      }
      return json_response(200, json::object{{"system", key}, {"auth", config::to_string(s.auth)},
                                             {"items", std::move(items)}});
    }
    return not_found("No system \"" + key + "\".");
  }
  if (seg.size() == 3 && call.method != "POST") return method_not_allowed("GET, POST");
  if (seg.size() == 4 && call.method != "DELETE") return method_not_allowed("DELETE");
  if (options_.store == nullptr) return read_only(options_.primary);
  const std::string target = "systems/" + percent_encode(key) + "/credentials";
  Conditions conditions(call.request);  // on the system, whose ETag its credentials are part of
  std::string system_tag;                // the system's ETag after the write

  if (seg.size() == 4) {
    const std::string& id = seg[3];
    const config::WriteResult w = options_.store->update(
        call.actor,
        [&](config::Config& c, config::ChangeRecord& record, std::int64_t revision) -> std::optional<Refusal> {
          for (config::System& s : c.systems) {
            if (s.key != key) continue;
            if (auto r = conditions.check(revision, true, entity_tag(config::to_json(s)), describe<config::System>({key}))) return r;
            auto it = std::find_if(s.credentials.begin(), s.credentials.end(),
                                   [&](const config::Credential& k) { return k.id == id; });
            if (it == s.credentials.end()) {
              return Refusal{Refusal::Kind::kNotFound, "No credential \"" + id + "\" of system \"" + key + "\".", {}};
            }
            record = {"credential.delete", target + "/" + percent_encode(id), json::serialize(config::to_json(*it)),
                      "null"};
            s.credentials.erase(it);
            system_tag = entity_tag(config::to_json(s));
            return std::nullopt;
          }
          if (auto r = conditions.check(revision, false, "", describe<config::System>({key}))) return r;
          return Refusal{Refusal::Kind::kNotFound, "No system \"" + key + "\".", {}};
        });
    if (!w.ok()) return refusal_response(*w.refusal, kNoBody);
    return no_content({{"ETag", system_tag}, {"X-Sluice-Revision", std::to_string(w.revision)}});
  }

  // POST: a new API key or signing secret, shown once.
  auto body = json_object_body(call.request.body);
  if (!body) return bad_body(call.request.body, "The body must be a JSON object: {\"kind\": \"api_key\"}.");
  std::vector<Problem> problems;
  const std::string kind = str_field(*body, "kind");
  if (kind != "api_key" && kind != "hmac") problems.push_back(Problem{"kind", "must be api_key or hmac"});
  const std::int64_t now = now_seconds();
  std::optional<std::int64_t> expires;
  if (auto it = body->find("expires"); it != body->end() && !it->value().is_null()) {
    expires = it->value().is_string() ? config::parse_time(it->value().as_string()) : std::nullopt;
    if (!expires) problems.push_back(Problem{"expires", "must be a UTC time like 2026-11-30T10:00:00Z"});
    // Refused from then on: made expired, it would be a secret shown once and never taken.
    if (expires && *expires <= now) {
      problems.push_back(Problem{"expires", "must be in the future (it is " + config::format_time(now) +
                                                " now): a credential is refused from the time it expires"});
    }
  }
  bool rotate = false;
  if (auto it = body->find("rotate"); it != body->end()) {
    if (!it->value().is_bool()) problems.push_back(Problem{"rotate", "must be true or false"});
    rotate = it->value().is_bool() && it->value().as_bool();
  }
  Nanos overlap = std::chrono::hours(24);
  if (auto it = body->find("overlap"); it != body->end()) {
    auto d = it->value().is_string() ? parse_duration(it->value().as_string()) : std::nullopt;
    if (!d) problems.push_back(Problem{"overlap", "must be a duration like 1h or 7d"});
    // It is how long the old credentials stay when rotating: without a rotation it would mean
    // nothing, and be dropped unsaid.
    if (d && !rotate) problems.push_back(Problem{"overlap", "applies only with \"rotate\": true"});
    overlap = d.value_or(overlap);
  }
  for (const auto& kv : *body) {
    if (kv.key() != "kind" && kv.key() != "expires" && kv.key() != "rotate" && kv.key() != "overlap") {
      problems.push_back(Problem{std::string(kv.key()), "unknown field (known: kind, expires, rotate, overlap)"});
    }
  }
  if (!problems.empty()) {
    json::object o{{"code", 400}, {"reason", "bad_request"}, {"msg", "The credential request was refused."}};
    o["problems"] = problems_json(problems, "");
    return json_response(400, o);
  }
  if (kind == "hmac" && options_.secret_key == nullptr) {
    return error(503, "secret_key_missing",
                 "SLUICE_SECRET_KEY is not set on this instance, so it cannot store a signing secret "
                 "(sealed at rest with that key).");
  }
  config::Credential credential;
  credential.kind = kind == "hmac" ? config::Auth::kHmac : config::Auth::kApiKey;
  credential.id = config::random_id(kind == "hmac" ? "hs_" : "ak_");
  credential.created = now;
  credential.expires = expires;
  const std::string secret = config::random_token(kind == "hmac" ? "sluice_hs_" : "sluice_ak_");
  if (credential.kind == config::Auth::kApiKey) {
    credential.api_key_sha256 = config::sha256_hex(secret);
  } else {
    credential.sealed_secret = options_.secret_key->seal(secret);
  }
  // Expiries are whole seconds: the old keys' is rounded up, so that they overlap the new one for
  // `overlap` at least (rounded down, "1s" could have been a few milliseconds).
  const Clock& clock = options_.clock != nullptr ? *options_.clock : SystemClock::instance();
  const std::int64_t until = std::chrono::ceil<std::chrono::seconds>(clock.now() + overlap).count();
  json::array rotated;
  const config::WriteResult w = options_.store->update(
      call.actor, [&](config::Config& c, config::ChangeRecord& record, std::int64_t revision) -> std::optional<Refusal> {
        for (config::System& s : c.systems) {
          if (s.key != key) continue;
          const json::object before = config::to_json(s);
          if (auto r = conditions.check(revision, true, entity_tag(before), describe<config::System>({key}))) return r;
          if (rotate) {
            for (config::Credential& old : s.credentials) {
              if (old.kind != credential.kind || (old.expires && *old.expires <= until)) continue;
              old.expires = until;
              rotated.push_back(json::object{{"id", old.id}, {"expires", config::format_time(until)}});
            }
          }
          s.credentials.push_back(credential);
          const json::object after = config::to_json(s);
          record = {"credential.create", target + "/" + credential.id, json::serialize(before), json::serialize(after)};
          system_tag = entity_tag(after);
          return std::nullopt;
        }
        if (auto r = conditions.check(revision, false, "", describe<config::System>({key}))) return r;
        return Refusal{Refusal::Kind::kNotFound, "No system \"" + key + "\".", {}};
      });
  if (!w.ok()) return refusal_response(*w.refusal, kNoBody);
  json::object o = config::to_json(credential);
  o.erase("api_key_sha256");
  o.erase("sealed_secret");
  o[credential.kind == config::Auth::kApiKey ? "api_key" : "secret"] = secret;
  o["rotated"] = std::move(rotated);
  o["note"] = "This is the only time the secret is shown: sluice keeps only its hash (API keys) or keeps it sealed.";
  return json_response(201, o, {{"ETag", system_tag}, {"X-Sluice-Revision", std::to_string(w.revision)}});
}

AdminResponse AdminApi::audit_route(Call& call) const {
  if (call.segments.size() != 1) return not_found("No such admin API route.");
  if (call.method != "GET") return method_not_allowed("GET");
  if (options_.store == nullptr) return read_only(options_.primary);
  // Whole numbers, all of the parameter ("1e2" is not 1).
  auto number = [](const std::string& text) -> std::optional<std::int64_t> {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return v;
  };
  std::int64_t limit = 50;
  std::optional<std::int64_t> before;
  const std::string l = call.param("limit");
  const std::string b = call.param("before");
  if (!l.empty()) {
    const auto n = number(l);
    if (!n || *n < 1 || *n > 1000) return error(400, "bad_request", "limit must be a number from 1 to 1000");
    limit = *n;
  }
  if (!b.empty()) {
    before = number(b);
    if (!before || *before < 1) return error(400, "bad_request", "before must be an audit entry id");
  }
  // One more than asked for: whether there is an older page, without sending the reader to an empty one.
  auto entries = options_.store->audit(static_cast<std::size_t>(limit) + 1, before);
  if (!entries.ok()) return error(503, "store_unavailable", entries.error().message);
  const bool more = static_cast<std::int64_t>(entries->size()) > limit;
  if (more) entries->pop_back();
  json::array items;
  for (const config::AuditEntry& e : *entries) {
    boost::system::error_code ec;
    json::object o{{"id", e.id},         {"at", config::format_time(e.at)}, {"actor", e.actor},
                   {"action", e.action}, {"target", e.target},             {"revision", e.revision}};
    // Redacted as written; again here for rows written before the store's password was.
    o["before"] = json::parse(config::redact_credentials(e.before), ec);
    o["after"] = json::parse(config::redact_credentials(e.after), ec);
    items.push_back(std::move(o));
  }
  json::value next = nullptr;
  if (more) next = entries->back().id;
  return json_response(200, json::object{{"items", std::move(items)}, {"next_before", next}});
}

AdminResponse AdminApi::stats_route(Call& call) const {
  if (call.segments.size() != 1) return not_found("No such admin API route.");
  if (call.method != "GET") return method_not_allowed("GET");
  const std::shared_ptr<const Snapshot> snapshot = options_.snapshot();
  const Stats::View view = options_.stats != nullptr ? options_.stats->view() : Stats::View{};
  json::object o;
  o["now"] = config::format_time(view.now);
  o["seconds"] = Stats::kSeconds;
  o["total"] = series_json(view.total);
  // Every configured one in configuration order, then those seen lately but since removed.
  auto listing = [](const char* name_field, const std::vector<std::string>& configured,
                    const std::map<std::string, Stats::Series>& seen) {
    std::vector<std::string> names = configured;
    for (const auto& kv : seen) {
      if (std::find(configured.begin(), configured.end(), kv.first) == configured.end()) names.push_back(kv.first);
    }
    json::array out;
    for (const std::string& name : names) {
      auto it = seen.find(name);
      json::object e{{name_field, name}};
      for (auto& kv : series_json(it == seen.end() ? Stats::Series{} : it->second)) e.insert(kv);
      out.push_back(std::move(e));
    }
    return out;
  };
  std::vector<std::string> system_keys;
  for (const config::System& s : snapshot->config().systems) system_keys.push_back(s.key);
  std::vector<std::string> interface_ids;
  for (const config::Interface& f : snapshot->config().interfaces) interface_ids.push_back(f.id);
  json::array systems = listing("key", system_keys, view.systems);
  json::array interfaces = listing("id", interface_ids, view.interfaces);
  o["systems"] = std::move(systems);
  o["interfaces"] = std::move(interfaces);
  json::array breakers;
  for (const UpstreamEntry& u : snapshot->upstreams()) breakers.push_back(breaker_json(u));
  o["breakers"] = std::move(breakers);
  json::object store{{"kind", options_.limit_store},
                     {"errors_total", options_.metrics != nullptr ? options_.metrics->store_errors() : 0}};
  const std::vector<BreakerState> store_breakers =
      options_.store_breakers ? options_.store_breakers() : std::vector<BreakerState>{};
  store["up"] = store_up(store_breakers);
  json::array breakers_of_store;
  for (BreakerState b : store_breakers) breakers_of_store.push_back(json::string(to_string(b)));
  store["breakers"] = std::move(breakers_of_store);
  o["store"] = std::move(store);
  json::object source{{"generation", snapshot->generation()}};
  if (options_.describe_source) options_.describe_source(source);
  o["config"] = std::move(source);
  return json_response(200, o);
}

AdminResponse AdminApi::limits_route(Call& call) const {
  const bool reset = call.segments.size() == 2 && call.segments[1] == "reset";
  if (call.segments.size() != 1 && !reset) return not_found("No such admin API route.");
  if (reset ? call.method != "POST" : call.method != "GET") return method_not_allowed(reset ? "POST" : "GET");
  if (reset) {
    if (auto refused = no_preconditions(call.request, "A limit's count")) return *refused;
  }
  if (options_.limits == nullptr) return error(503, "store_unavailable", "No limit store to read from.");
  const std::shared_ptr<const Snapshot> snapshot = options_.snapshot();
  const std::string key = call.param("key");
  const std::string value = call.param("value");
  const std::string only = call.param("limit");
  const InterfaceEntry* itf = nullptr;
  const std::vector<CompiledLimit>* limits = nullptr;
  auto interface_named = [&](std::string_view id) -> const InterfaceEntry* {
    for (const InterfaceEntry& e : snapshot->interfaces()) {
      if (e.interface->id == id) return &e;
    }
    return nullptr;
  };
  if (key.starts_with("system:")) {
    if (const SystemEntry* s = snapshot->system(key.substr(7))) limits = &s->limits;
  } else if (key.starts_with("interface:")) {
    itf = interface_named(key.substr(10));
    if (itf != nullptr) limits = &itf->limits;
  } else if (key.starts_with("grant:")) {
    // grant:SYSTEM/INTERFACE; either may hold a slash, so every split is tried, and system= says
    // which is meant when more than one names a grant.
    const std::string rest = key.substr(6);
    const std::string system = call.param("system");
    std::vector<std::string> named;  // the grants the key could mean, as "system" + interface "i"
    for (std::size_t slash = rest.find('/'); slash != std::string::npos; slash = rest.find('/', slash + 1)) {
      const std::string system_key = rest.substr(0, slash);
      if (!system.empty() && system_key != system) continue;
      const SystemEntry* s = snapshot->system(system_key);
      const InterfaceEntry* f = interface_named(rest.substr(slash + 1));
      const GrantEntry* g = s != nullptr && f != nullptr ? snapshot->grant(*s, *f) : nullptr;
      if (g == nullptr) continue;
      limits = &g->limits;
      named.push_back("system \"" + system_key + "\" with interface \"" + rest.substr(slash + 1) + "\"");
    }
    if (named.size() > 1) {
      std::string all;
      for (const std::string& n : named) all += (all.empty() ? "" : "; ") + n;
      return error(400, "bad_request",
                   "\"" + key + "\" names more than one grant (" + all + "): add system=KEY to say which");
    }
  } else {
    return error(400, "bad_request",
                 "key must be system:KEY, interface:ID or grant:SYSTEM/INTERFACE (and value=... for limits keyed "
                 "by client_ip, a header or a query parameter)");
  }
  if (limits == nullptr) {
    const std::string system = call.param("system");
    return not_found("Nothing in the configuration is called \"" + key + "\"" +
                     (system.empty() ? "" : " with system \"" + system + "\"") + ".");
  }

  std::vector<const CompiledLimit*> selected;
  for (const CompiledLimit& l : *limits) selected.push_back(&l);
  if (itf != nullptr && itf->in_flight_limit) selected.push_back(&itf->in_flight);
  if (!only.empty()) {
    std::erase_if(selected, [&](const CompiledLimit* l) { return l->name != only; });
    if (selected.empty()) {
      return not_found("\"" + key + "\" has no limit named \"" + only + "\"" + (reset ? ": nothing was reset." : "."));
    }
  }
  // A value="" given empty names the one count of requests without the header or parameter (or
  // with it empty), which is not the same as no value given: then a keyed limit has no one state to
  // show, and none to reset.
  const bool valued = call.query.contains("value");
  // Whether the value is meant for a limit keyed by a header or a query parameter: one that is no
  // address then leaves the client_ip limits beside it without a state rather than refuse the look.
  const bool for_names = std::any_of(selected.begin(), selected.end(), [](const CompiledLimit* l) {
    return l->rule != nullptr && (l->rule->key_by == config::KeyBy::kHeader || l->rule->key_by == config::KeyBy::kQuery);
  });
  const std::string nothing = reset ? ": nothing was reset." : ".";
  struct Item {
    const CompiledLimit* limit;
    std::string store_key;
    std::string note;  // why it has no state to show: no value given, or one it cannot count
  };
  std::vector<Item> chosen;
  // Each selected limit's store key, every one checked before anything is reset.
  for (const CompiledLimit* l : selected) {
    Item item{l, l->key, {}};
    const config::LimitRule* rule = l->rule;
    const bool keyed = rule != nullptr && rule->key_by != config::KeyBy::kOwner;
    const std::string which = "limit \"" + l->name + "\" of \"" + config::as_utf8(key) + "\"";
    const std::string how = rule == nullptr || rule->key_by == config::KeyBy::kClientIp
                                ? std::string("value=ADDRESS (203.0.113.7, 2001:db8::1)")
                                : "value=VALUE (value= left empty: the requests without " + counted_name(*rule) +
                                      ", or with it empty)";
    if (keyed && !valued) {
      item.note = "The " + which + " counts " + counted_by(*rule) + ": say which count with " + how + ".";
      if (reset) {
        return error(400, "bad_request",
                     "The " + which + " counts " + counted_by(*rule) + ": say which count to reset with " + how +
                         (selected.size() > 1 ? ", or pick a limit with limit=NAME" : "") + nothing);
      }
    } else if (keyed && rule->key_by == config::KeyBy::kClientIp) {
      // As the gateway counts the address: 2001:DB8:0::1 is 2001:db8::1, ::ffff:10.0.0.1 is 10.0.0.1.
      if (const std::optional<std::string> address = client_address(value)) {
        item.store_key += *address;
      } else {
        const std::string why = "value \"" + config::as_utf8(value) + "\" is not an IP address, and the " + which +
                                " counts " + counted_by(*rule);
        if (reset || !for_names) {
          return error(400, "bad_request",
                       why + (selected.size() > 1 ? "; limit=NAME picks one of the others" : "") + nothing);
        }
        item.note = why + ".";
      }
    } else if (keyed) {
      item.store_key += value;
    }
    chosen.push_back(std::move(item));
  }
  json::array items;
  for (const Item& c : chosen) {
    const CompiledLimit* l = c.limit;
    const Limit& limit = l->rule != nullptr ? l->rule->limit : *itf->in_flight_limit;
    json::object o;
    o["name"] = l->name;
    o["scope"] = l->scope == Scope::kSystem ? "system" : l->scope == Scope::kInterface ? "interface"
                 : l->scope == Scope::kGrant ? "grant" : "in_flight";
    o["owner"] = l->owner;
    if (l->rule != nullptr) {
      o["limit"] = config::to_json(*l->rule);
    } else {
      o["limit"] = json::object{{"algorithm", "concurrency"}, {"limit", limit.params().quota}};
    }
    o["store_key"] = config::as_utf8(c.store_key);
    if (!c.note.empty()) {
      o["state"] = nullptr;  // one state per value: say which with value=
      o["note"] = c.note;
      items.push_back(std::move(o));
      continue;
    }
    if (reset) {
      if (Status s = options_.limits->reset(c.store_key, limit); !s) {
        return error(503, "store_unavailable", s.error().message);
      }
    }
    auto d = options_.limits->peek(c.store_key, limit);
    if (!d.ok()) return error(503, "store_unavailable", d.error().message);
    // (No retry_after: a peek asks for a cost of 0, which always passes.)
    o["state"] = json::object{
        {"limit", d->limit}, {"remaining", d->remaining}, {"reset_after_ms", millis(d->reset_after)}};
    items.push_back(std::move(o));
  }
  // A value may be any bytes the counter was keyed by; JSON is UTF-8 (so too the audit log's rows).
  const std::string shown_key = config::as_utf8(key);
  const json::value shown_value = valued ? json::value(config::as_utf8(value)) : json::value(nullptr);
  if (reset) {
    const json::object what{{"key", shown_key}, {"value", shown_value}, {"limit", config::as_utf8(only)}};
    if (auto unsaid = note(call, "limits.reset", "limits", what)) return *unsaid;
  }
  return json_response(200, json::object{{"key", shown_key}, {"value", shown_value}, {"items", std::move(items)}});
}

// An action that changes state but no configuration (a reset), into the audit log with what it
// was; the answer to give when that could not be written (the action was done).
std::optional<AdminResponse> AdminApi::note(const Call& call, std::string action, std::string target,
                                            const json::object& what) const {
  if (options_.store == nullptr) return std::nullopt;  // no database, no audit log
  const Status s = options_.store->note(call.actor, {std::move(action), std::move(target), "null", json::serialize(what)});
  if (s.ok()) return std::nullopt;
  return error(503, "store_unavailable", "Done, but the audit log could not be written: " + s.error().message);
}

AdminResponse AdminApi::breakers_route(Call& call) const {
  const std::vector<std::string>& seg = call.segments;
  const std::shared_ptr<const Snapshot> snapshot = options_.snapshot();
  if (seg.size() == 1) {
    if (call.method != "GET") return method_not_allowed("GET");
    json::array items;
    for (const UpstreamEntry& u : snapshot->upstreams()) items.push_back(breaker_json(u));
    return json_response(200, json::object{{"items", std::move(items)}});
  }
  if (seg.size() > 3) return not_found("No such admin API route.");
  const std::string& name = seg[1];
  const UpstreamEntry* entry = nullptr;
  for (const UpstreamEntry& u : snapshot->upstreams()) {
    if (u.upstream->name == name) entry = &u;
  }
  if (entry == nullptr) return not_found("No upstream \"" + name + "\".");
  if (seg.size() == 2) {
    if (call.method != "GET") return method_not_allowed("GET");
    return json_response(200, breaker_json(*entry));
  }
  if (call.method != "POST") return method_not_allowed("POST");
  if (seg[2] == "reset") {
    if (auto refused = no_preconditions(call.request, "A breaker's state")) return *refused;
    if (!entry->breaker) return error(409, "conflict", "The breaker of upstream \"" + name + "\" is disabled.");
    if (entry->upstream->breaker.force != config::BreakerForce::kNone) {
      return error(409, "conflict",
                   "The configuration forces this breaker " + std::string(config::to_string(entry->upstream->breaker.force)) +
                       ": POST {\"force\": \"none\"} to .../force first.");
    }
    entry->breaker->reset();  // this instance's breaker only
    if (auto unsaid = note(call, "breaker.reset", "breakers/" + name, json::object{{"upstream", name}})) return *unsaid;
    return json_response(200, breaker_json(*entry));
  }
  if (seg[2] != "force") return not_found("No such admin API route.");
  if (options_.store == nullptr) return read_only(options_.primary);
  auto body = json_object_body(call.request.body);
  const std::string force = body ? str_field(*body, "force") : "";
  // Nothing else: a field this route does not know would be dropped unsaid.
  if ((force != "open" && force != "closed" && force != "none") || body->size() != 1) {
    return error(400, "bad_request", "The body must be {\"force\": \"open\"}, {\"force\": \"closed\"} or {\"force\": \"none\"}.");
  }
  Conditions conditions(call.request);  // on the upstream, whose ETag its breaker's force is part of
  std::string upstream_tag;              // the upstream's ETag after the write
  const config::WriteResult w = options_.store->update(
      call.actor,
      [&](config::Config& c, config::ChangeRecord& record, std::int64_t revision) -> std::optional<Refusal> {
        for (config::Upstream& u : c.upstreams) {
          if (u.name != name) continue;
          if (auto r = conditions.check(revision, true, entity_tag(config::to_json(u)), describe<config::Upstream>({name}))) {
            return r;
          }
          // A disabled breaker cannot be forced; a force left on it can be cleared.
          if (!u.breaker.enabled && force != "none") {
            return Refusal{Refusal::Kind::kConflict, "The breaker of upstream \"" + name + "\" is disabled.", {}};
          }
          const std::string before = json::serialize(config::to_json(u));
          u.breaker.force = force == "open" ? config::BreakerForce::kOpen
                            : force == "closed" ? config::BreakerForce::kClosed
                                                : config::BreakerForce::kNone;
          const json::object after = config::to_json(u);
          record = {"breaker.force", "upstreams/" + percent_encode(name), before, json::serialize(after)};
          upstream_tag = entity_tag(after);
          return std::nullopt;
        }
        if (auto r = conditions.check(revision, false, "", describe<config::Upstream>({name}))) return r;
        return Refusal{Refusal::Kind::kNotFound, "No upstream \"" + name + "\".", {}};
      });
  if (!w.ok()) return refusal_response(*w.refusal, kNoBody);
  return json_response(200, json::object{{"upstream", name}, {"force", force}, {"revision", w.revision}},
                       {{"ETag", upstream_tag}, {"X-Sluice-Revision", std::to_string(w.revision)}});
}

AdminResponse AdminApi::tokens_route(Call& call) const {
  const std::vector<std::string>& seg = call.segments;
  if (seg.size() > 2) return not_found("No such admin API route.");
  if (seg.size() == 1 && call.method != "GET" && call.method != "POST") return method_not_allowed("GET, POST");
  if (seg.size() == 2 && call.method != "DELETE") return method_not_allowed("DELETE");
  if (options_.store == nullptr) return read_only(options_.primary);
  if (call.method != "GET") {
    if (auto refused = no_preconditions(call.request, "A token")) return *refused;
  }
  auto refresh = [&] {
    if (options_.tokens_changed) options_.tokens_changed();
  };
  if (seg.size() == 2) {
    auto deleted = options_.store->delete_token(call.actor, seg[1]);
    if (!deleted.ok()) return error(503, "store_unavailable", deleted.error().message);
    if (!*deleted) return not_found("No token \"" + seg[1] + "\".");
    refresh();
    return no_content();
  }
  if (call.method == "GET") {
    auto tokens = options_.store->tokens();
    if (!tokens.ok()) return error(503, "store_unavailable", tokens.error().message);
    json::array items;
    for (const config::TokenInfo& t : *tokens) {
      items.push_back(json::object{{"id", t.id},
                                   {"name", t.name},
                                   {"role", config::to_string(t.role)},
                                   {"created", config::format_time(t.created)},
                                   {"created_by", t.created_by},
                                   {"expires", expiry_json(t.expires)}});
    }
    return json_response(200, json::object{{"items", std::move(items)}});
  }
  auto body = json_object_body(call.request.body);
  if (!body) {
    return bad_body(call.request.body, "The body must be a JSON object: {\"name\": \"...\", \"role\": \"admin\" or "
                                       "\"read\", \"expires_in\": \"90d\" (optional)}.");
  }
  std::vector<Problem> problems;
  const auto role = config::role_from_string(str_field(*body, "role"));
  const std::string name = str_field(*body, "name");
  if (const auto* given = body->if_contains("name"); given != nullptr && !given->is_string()) {
    problems.push_back(Problem{"name", "must be a string"});
  } else if (name.empty()) {
    problems.push_back(Problem{"name", "is required: a name that says who or what uses the token"});
  }
  if (!role) problems.push_back(Problem{"role", "must be admin or read"});
  Nanos lifetime{0};
  if (const auto* given = body->if_contains("expires_in"); given != nullptr && !given->is_null()) {
    const auto d = given->is_string() ? parse_duration(std::string(given->as_string())) : std::nullopt;
    if (!d || *d < config::kShortestTokenLifetime || *d > config::kLongestTokenLifetime) {
      problems.push_back(Problem{"expires_in", "must be a duration from 1m to 3650d, like \"90d\" (or null: never)"});
    } else {
      lifetime = *d;
    }
  }
  // Nothing else: a field this route does not know would be dropped unsaid.
  for (const auto& kv : *body) {
    if (kv.key() != "name" && kv.key() != "role" && kv.key() != "expires_in") {
      problems.push_back(Problem{std::string(kv.key()), "unknown field (known: name, role, expires_in)"});
    }
  }
  auto refused = [&] {
    json::object o{{"code", 400}, {"reason", "bad_request"}, {"msg", "The token request was refused."}};
    o["problems"] = problems_json(problems, "");
    return json_response(400, o);
  };
  if (!problems.empty()) return refused();
  auto created = options_.store->create_token(call.actor, *role, name, lifetime);
  if (!created.ok() && created.error().code == ErrorCode::kInvalidArgument) {
    problems.push_back(Problem{"name", created.error().message});  // what the store refuses is the name
    return refused();
  }
  if (!created.ok()) return error(503, "store_unavailable", created.error().message);
  refresh();
  const config::TokenInfo& t = created->first;
  return json_response(201, json::object{{"id", t.id},
                                         {"name", t.name},
                                         {"role", config::to_string(t.role)},
                                         {"created", config::format_time(t.created)},
                                         {"created_by", t.created_by},
                                         {"expires", expiry_json(t.expires)},
                                         {"token", created->second},
                                         {"note", "This is the only time the token is shown: sluice keeps only its hash."}});
}

}  // namespace sluice::gateway
