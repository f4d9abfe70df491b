// The gateway's configuration model: systems, interfaces, grants, upstreams and their limits, with
// no knowledge of YAML or SQLite. A Config is a plain value; the gateway shares one immutable
// snapshot (std::shared_ptr<const Config>) between threads and swaps it whole on reload.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/circuit_breaker.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/result.h"

namespace sluice::config {

// What a limit counts separately: the system / interface / grant it belongs to as a whole, or each
// value of the client address, a request header or a query parameter inside it.
enum class KeyBy : std::uint8_t { kOwner, kClientIp, kHeader, kQuery };

// What a request gets when the store cannot decide (Redis down): let it through, refuse it (503), or
// have this process decide with the limit divided by the fleet size.
enum class OnStoreFailure : std::uint8_t { kAllow, kDeny, kLocal };

enum class Language : std::uint8_t { kEnglish, kChinese };

// Which response header fields describe the limit closest to exhaustion.
enum class RateLimitHeaders : std::uint8_t {
  kDraft,   // RateLimit-Policy and RateLimit (IETF httpapi draft)
  kLegacy,  // X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset
  kNone,
};

struct LimitRule {
  std::string name{};  // empty: none given (the gateway names it after its owner)
  Limit limit;
  KeyBy key_by = KeyBy::kOwner;
  std::string key_name{};  // the header or query parameter name for kHeader / kQuery
  OnStoreFailure on_store_failure = OnStoreFailure::kAllow;
  bool shadow = false;  // counted and reported, never rejects

  friend bool operator==(const LimitRule&, const LimitRule&) = default;
};

struct Target {
  std::string host;
  std::uint16_t port = 0;
  friend bool operator==(const Target&, const Target&) = default;
};

// An operator's override of a breaker, kept with the configuration so that every instance applies it.
enum class BreakerForce : std::uint8_t { kNone, kOpen, kClosed };

struct Breaker {
  bool enabled = true;
  BreakerForce force = BreakerForce::kNone;
  // The breaker's thresholds; clock and on_state_change are left empty (the gateway sets them).
  CircuitBreakerOptions options;
};

struct Upstream {
  std::string name;
  std::vector<Target> targets;
  Nanos connect_timeout = std::chrono::seconds(1);
  Nanos timeout = std::chrono::seconds(30);  // until the response header; then per body read
  std::int32_t max_idle_connections = 64;    // kept open per target and thread
  // Upstream statuses the breaker counts as failures (besides connect errors and timeouts).
  std::vector<std::int32_t> failure_statuses = default_failure_statuses();
  Breaker breaker;

  static std::vector<std::int32_t> default_failure_statuses();
};

// How a system's callers prove who they are.
enum class Auth : std::uint8_t {
  kKey,     // the system key header names the system; nothing secret (what callers do today)
  kApiKey,  // a secret key in X-Api-Key, kept only as its SHA-256
  kHmac,    // requests signed with HMAC-SHA256 under a secret kept only sealed (SLUICE_SECRET_KEY)
};

// One secret of a system's callers. Several may be valid at once while they rotate: the old one
// gets an expiry, the new one none.
struct Credential {
  std::string id;               // names it in lists and URLs; not secret
  Auth kind = Auth::kApiKey;    // kApiKey or kHmac
  std::string api_key_sha256;   // kApiKey: the key's SHA-256 in 64 hex digits
  std::string sealed_secret;    // kHmac: the signing secret sealed by SecretKey::seal
  std::int64_t created = 0;     // Unix seconds
  std::optional<std::int64_t> expires;  // Unix seconds; refused from then on

  friend bool operator==(const Credential&, const Credential&) = default;
};

struct System {
  std::string key;
  std::string description;
  bool enabled = true;
  Auth auth = Auth::kKey;
  std::vector<Credential> credentials;
  // Read from a file that lists them (maybe as []): a replacement of the configuration takes them as
  // they are, where a system listed without them keeps those it has.
  bool credentials_listed = false;
  bool all_interfaces = false;          // "*"
  std::vector<std::string> interfaces;  // interface ids it may call (besides "*")
  std::vector<LimitRule> limits;
};

// An interface's concurrency_lease_timeout when it gives none.
inline constexpr Nanos kConcurrencyLeaseTimeout = std::chrono::minutes(10);

struct Interface {
  std::string id;
  std::string description;
  std::vector<std::string> methods;  // upper case; empty: any method
  std::string path;                  // /exact, /prefix/*, /with/{param}
  std::string upstream;
  bool enabled = true;
  bool is_public = false;  // callable without a system key ("public" in the file)
  std::vector<LimitRule> limits;
  std::optional<std::int64_t> concurrency;  // requests in flight at once
  // How long a place in `concurrency` is held by a gateway that died holding it (a shared store);
  // nothing: kConcurrencyLeaseTimeout.
  std::optional<Nanos> concurrency_lease_timeout;
  std::optional<Nanos> timeout;             // overrides the upstream's
};

struct Grant {
  std::string system;
  std::string interface;
  std::vector<LimitRule> limits;
};

struct Config {
  std::string listen = "127.0.0.1:8080";
  std::string admin_listen = "127.0.0.1:9090";
  std::string store = "local";
  // How many gateways share the store: on_store_failure: local divides each limit by it.
  std::int32_t fleet_size = 1;
  static constexpr std::int32_t kMaxFleetSize = 10000;
  // How long a call to a shared store (Redis) may take; past it the limits follow on_store_failure.
  Nanos store_timeout = std::chrono::milliseconds(50);
  std::string system_key_header = "X-System-Key";
  Language language = Language::kEnglish;
  RateLimitHeaders rate_limit_headers = RateLimitHeaders::kDraft;
  std::int64_t max_body_bytes = 10 * 1024 * 1024;
  Nanos header_timeout = std::chrono::seconds(10);
  // How long a write to a client may wait while the client reads nothing (nginx's send_timeout).
  Nanos send_timeout = std::chrono::seconds(60);
  // On SIGTERM, how long /_sluice/healthz says draining while connections are still accepted and
  // served as usual (so that a load balancer takes the instance out first), before the drain begins.
  Nanos drain_delay{0};
  static constexpr Nanos kMaxDrainDelay = std::chrono::hours(1);
  Nanos drain_timeout = std::chrono::seconds(30);
  std::string access_log = "stdout";  // stdout, off, or a file path
  // Peers (IP addresses or ranges, parse_network) whose /_sluice/v1/decide requests may name the
  // address of the client they ask for (client_ip): from others, a client_ip is refused, since it
  // would spend another address's counters.
  std::vector<std::string> decide_client_ip_from = {"127.0.0.0/8", "::1"};
  // Proxies in front of the gateway (IP addresses or ranges, parse_network) taken at their word
  // about the client: a request from one is counted, keyed and logged by the client address its
  // X-Forwarded-For gives, and the protocol its X-Forwarded-Proto gives (https or http) goes up.
  // Empty: none, every request is its peer's, in http.
  std::vector<std::string> trusted_proxies;
  std::vector<Upstream> upstreams;
  std::vector<System> systems;
  std::vector<Interface> interfaces;
  std::vector<Grant> grants;
};

// One thing wrong with a configuration: the field it is about (e.g. "interfaces[0].limits[1].period")
// and, when it came from a file, where in it.
// Whether text holds a control character: C0 and DEL, or C1 (U+0080 to U+009F, "\xc2\x80" to
// "\xc2\x9f" in UTF-8). Ids and names go into URLs, logs, metrics labels and the console: they hold
// none.
bool has_control_characters(std::string_view s);

// The length of the well-formed UTF-8 sequence s starts with (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), or 0. JSON text is UTF-8.
std::size_t utf8_sequence(std::string_view s);

// Where the first byte that does not belong to well-formed UTF-8 is; npos when there is none.
std::size_t invalid_utf8_at(std::string_view s);

// s with each byte that belongs to no well-formed UTF-8 character replaced by U+FFFD: text that can
// go into JSON (which is UTF-8) as it reads.
std::string as_utf8(std::string_view s);

// Whether text holds a character that shows nothing or moves what follows, or is not UTF-8: a
// space other than ' ', a zero-width, joining or blank one, a direction mark or override, a soft
// hyphen, a line or paragraph separator (the list is at the definition). Two ids that differ only
// by one would look alike in the console, the logs and the audit log.
bool has_invisible_characters(std::string_view text);

// Whether a field name reads as `name` (whatever its case) where fields reach applications
// CGI-style (X_Sluice_System and X-Sluice-System are both HTTP_X_SLUICE_SYSTEM there): how the
// gateway looks a request's fields up. Inline: a request's every field is compared with several
// names, most of another length.
inline bool cgi_alias_of(std::string_view field, std::string_view name) {
  if (field.size() != name.size()) return false;
  if (field == name) return true;  // spelt as configured: the usual case
  const auto fold = [](char c) {
    if (c == '_') return '-';
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c | 0x20) : c;
  };
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (fold(field[i]) != fold(name[i])) return false;
  }
  return true;
}

// The longest id, key or name, in bytes. A system's key travels in a header field and every id in
// the admin API's paths, both read within 8 KiB, and in log lines, metrics labels and the console's
// tables: a longer one could be made, but then not be read, changed or deleted.
inline constexpr std::size_t kMaxIdBytes = 256;
// The longest description: a few paragraphs for people. Each change to an entity copies it into the
// audit log twice (before and after), and the console shows it in full.
inline constexpr std::size_t kMaxDescriptionBytes = 4096;

struct Problem {
  std::string path{};
  std::string message{};
  std::string file{};
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based

  std::string to_string() const;
};

// Checks what the model's types cannot: duplicate ids, references to unknown interfaces, upstreams
// and systems, routes that two interfaces would both claim, values out of range. Empty when valid.
std::vector<Problem> validate(const Config& config);

// The rules a configuration is held to when it is written (the admin API, the console, `config
// import`), beside validate()'s: no id, key or name with an invisible character (two that differ by
// one would look the same in the console and the logs), no description over kMaxDescriptionBytes.
// Not when one is read, from the database or a file: a value an earlier version took must not stop
// a gateway from starting. What `before` (the configuration the write starts from; may be null)
// holds already is not judged: an edit of one system is not refused for another's name.
std::vector<Problem> write_problems(const Config& config, const Config* before);

// A limit as named fields, as people write it: {"algorithm": "gcra", "limit": "5", "period": "1m",
// "burst": "5"}. Durations take ms, s, m, h and d.
using LimitFields = std::map<std::string, std::string>;

// Builds a limit from its fields. On failure, every problem is appended to problems (when given),
// each with the offending field's name as its path (empty: the limit as a whole).
Result<Limit> limit_from_fields(const LimitFields& fields, std::vector<Problem>* problems);
// The canonical fields of a limit (the algorithm first, then its parameters), which
// limit_from_fields turns back into an equal limit.
std::vector<std::pair<std::string, std::string>> limit_fields(const Limit& limit);

// The name a limit given none goes by (in RateLimit fields and the admin API): its owner's (a
// system's key, an interface's id, "system/interface" for a grant), with "-<place>" when the owner
// has several unnamed limits.
std::string unnamed_limit_name(std::string_view owner, std::size_t unnamed, std::size_t place);
// The name of an interface's in-flight limit (its concurrency).
std::string in_flight_limit_name(std::string_view interface_id);

// "host:port" -> Target; nullopt when it is not one.
std::optional<Target> parse_target(std::string_view text);

// IP addresses sharing a prefix: "10.0.0.0/8", "2001:db8::/32", or an address alone (all its bits).
struct Network {
  std::array<unsigned char, 16> bytes{};  // an IPv4 address in the first 4
  bool v4 = false;
  int prefix = 0;  // bits
  // An address in its text form; an IPv4-mapped IPv6 one (::ffff:10.0.0.1) is its IPv4 address.
  bool contains(std::string_view address) const;
};
// nullopt when text is not such a range (an address with bits set past the prefix is one).
std::optional<Network> parse_network(std::string_view text);
// An address to listen on: host:port whose host is an IP address or localhost (a name would be
// resolved once, at start, to whatever it named then). nullopt when it is not one.
std::optional<Target> parse_listen_address(std::string_view text);
// Target -> "host:port" ("[host]:port" for an IPv6 address), as parse_target reads it.
std::string to_string(const Target& target);
// The target as a URI's authority, for a Host field: as to_string, but an IPv6 zone's "%" is
// written "%25" (RFC 6874), as a URI needs it.
std::string authority_of(const Target& target);

// The breaker's settings in one line, as the YAML file writes them ({window: 20, ...}); equal
// settings describe equally.
std::string describe(const Breaker& breaker);

// A store URL with its password (redis://[user:]PASSWORD@host...) replaced by kRedactedPassword,
// for those who may read the configuration but not the store's secret; without one, unchanged.
inline constexpr std::string_view kRedactedPassword = "REDACTED";
std::string redact_store_password(std::string_view store);
// Whether store's password is kRedactedPassword: the URL as it was shown with its password withheld,
// which is not a password anyone set. Saving it as one would lock the gateway out of its store.
bool has_redacted_password(std::string_view store);

// Unix seconds as RFC 3339 in UTC ("2026-11-30T10:00:00Z"), and back (nullopt when it is not one).
std::string format_time(std::int64_t unix_seconds);
std::optional<std::int64_t> parse_time(std::string_view text);

const char* to_string(KeyBy key_by);
const char* to_string(OnStoreFailure policy);
const char* to_string(Auth auth);
const char* to_string(BreakerForce force);
const char* to_string(Language language);
const char* to_string(RateLimitHeaders headers);

}  // namespace sluice::config
