// The gateway's policy as plain functions over a request and a snapshot, no sockets: who is
// calling, may it call this interface, do the limits admit it, and what the answer says (status,
// reason, message, Retry-After, RateLimit fields). Thread-compatible: one Context per request.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/container/static_vector.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/limiter.h"
#include "gateway/snapshot.h"

namespace sluice::gateway {

// Every answer the gateway gives has a stable reason.
enum class Reason : std::uint8_t {
  kOk,
  kSystemKeyMissing,
  kSystemUnknown,
  kApiKeyInvalid,       // caller authentication (caller_auth.h), all 401
  kSignatureInvalid,
  kSignatureExpired,
  kSignatureReplayed,
  kSignatureRateLimited,  // 429: no room to remember the nonce (NonceCache)
  kSystemDisabled,
  kSystemNoPermissions,
  kInterfaceUnknown,
  kInterfaceDisabled,
  kInterfaceForbidden,
  kSystemRateLimited,
  kInterfaceRateLimited,
  kGrantRateLimited,
  kInterfaceConcurrencyLimited,
  kStoreUnavailable,
  kUpstreamUnavailable,    // breaker open
  kUpstreamConnectFailed,  // 502
  kUpstreamTimeout,        // 504
  kUpstreamBadResponse,    // 502: an answer that is not HTTP the gateway may pass on
  kBadRequest,             // malformed or ambiguous request
  kHeaderTooLarge,
  kUriTooLong,             // 414: a request line over the head's limit on its own
  kVersionNotSupported,    // 505: a request line of another major version (HTTP/2.0)
  kBodyTooLarge,
  kRequestTimeout,
  kClientClosedRequest,    // 499: the client left while the upstream worked on its request
  kNotFound,               // the gateway's own endpoints
  kMethodNotAllowed,
  kDraining,
  kGatewayOverloaded,  // 503: the gateway could not open a socket (out of descriptors or memory)
};

inline constexpr int kReasonCount = static_cast<int>(Reason::kGatewayOverloaded) + 1;

const char* to_string(Reason reason);
int status_of(Reason reason);
std::string_view message(Reason reason, config::Language language);

// Looks a request header up by name (case-insensitive); empty when absent.
class HeaderLookup {
 public:
  virtual std::string_view get(std::string_view name) const = 0;
  // Whether the request has more than one header of that name.
  virtual bool repeated(std::string_view name) const = 0;

 protected:
  ~HeaderLookup() = default;
};

struct Request {
  std::string_view method;
  std::string_view path;   // without the query string
  std::string_view query;  // without the '?'
  bool has_system_key = false;
  std::string_view system_key;
  // The system key's header or the API key's came twice: refused (400), since the upstream, or a
  // log reading the other, would take the request for another caller's than the one judged here.
  bool caller_named_twice = false;
  std::string_view client_ip;
  const HeaderLookup* headers = nullptr;
  std::int64_t cost = 1;
  bool hold_in_flight = true;  // false for /decide, which holds no lease
};

// What the RateLimit fields describe: the limit closest to exhaustion.
struct Quota {
  std::string_view field_name;  // the limit's name, as its fields give it (CompiledLimit::field_name)
  std::int64_t limit = 0;
  Nanos window{0};
  std::int64_t remaining = 0;
  Nanos reset{0};
};

// Why a request is refused as bad_request, which its message says (the reason stays bad_request).
enum class BadRequest : std::uint8_t {
  kMalformed,       // not a request as the gateway takes it
  kPathNotClean,    // a "." or ".." segment (also encoded), or a NUL
  kPathAmbiguous,   // a path upstreams that tidy paths read as another interface's
  kKeyRepeated,     // a header or query parameter a limit counts by, given twice
  kCallerRepeated,  // the system key or API key header given twice, or in two spellings
};

// The cause of a refusal for a path that is not clean (see path_is_clean): a path with a dot
// segment or a NUL, or else one that is no path at all ("*", or none).
BadRequest unclean_path_cause(std::string_view path);

struct Verdict {
  Reason reason = Reason::kOk;
  BadRequest bad_request = BadRequest::kMalformed;  // with Reason::kBadRequest
  std::optional<Nanos> retry_after;  // Retry-After is sent when set
  std::optional<Quota> quota;
  std::vector<const CompiledLimit*> shadow_rejected;
  // The store could not decide: it failed, or some decisions (shadow ones too) were made by
  // on_store_failure.
  bool store_failed = false;
};

// A lease a request holds until it ends. key is the limit request's: it points into the Context
// (keys) or the snapshot, both of which outlive the request.
struct Lease {
  std::string_view key;
  const Limit* limit = nullptr;
  std::uint64_t id = 0;
};

// One request's working set; reusable (clear() keeps the allocations).
struct Context {
  const SystemEntry* system = nullptr;
  const InterfaceEntry* interface = nullptr;
  const GrantEntry* grant = nullptr;

  std::vector<std::string> keys;  // keyed-by limits' keys
  std::vector<LimitRequest> enforced;
  std::vector<const CompiledLimit*> enforced_limits;
  std::vector<Decision> decisions;
  std::vector<LimitRequest> shadow;
  std::vector<const CompiledLimit*> shadow_limits;
  std::vector<Decision> shadow_decisions;
  std::vector<Lease> leases;  // filled by judge() when admitted

  Verdict verdict;

  void clear();
};

// An address as limits keyed by client_ip count it, logs show it and X-Forwarded-For passes it on:
// asio's form (lower case, zeros compressed), and an IPv4 client of a dual-stack listener
// ("[::]:8080") in its IPv4 form, not as ::ffff:10.0.0.1, so that it is one client however it came
// (and as /decide and the admin API's /limits are told of it).
std::string client_address(const boost::asio::ip::address& address);
// text read as an IP address ("2001:DB8:0::1", "::ffff:10.0.0.1"), in that form; nullopt when it
// is not one.
std::optional<std::string> client_address(std::string_view text);

// Step 1 and 2: identifies the system and the interface and checks permissions, in the documented
// order. Fills ctx.system / interface / grant as far as it got; kOk when the request may go on. A
// path whose routing form (routing_form()) routes elsewhere than it does is kBadRequest, first.
Reason check_access(const Request& request, const Snapshot& snapshot, Context& ctx);

// Step 3, before the store: the limits that apply, as store requests (enforced, all or nothing;
// shadow ones apart).
void plan_limits(const Request& request, Context& ctx);

// Step 3, after the store: turns the decisions (or the store's failure) into the verdict, and
// notes the leases an admitted request holds. The limiter is the one that decided (for the share
// of a limit it decided in this process while its store could not: Limiter::local_share).
void judge(const Status& store, Context& ctx, const Limiter& limiter);

// The same for the shadow limits of an admitted request: which of them would have rejected it
// (and, in verdict.store_failed, whether the store could not decide them either).
void judge_shadow(const Status& store, Context& ctx);

// Checks 1 to 3 in one go, for a limiter that completes before it returns (StoreLimiter).
const Verdict& decide_now(const Request& request, const Snapshot& snapshot, Context& ctx,
                          Limiter& limiter);

// The JSON body of a refusal: {"code":429,"reason":"...","msg":"..."}; a bad_request's msg says
// `why`.
std::string error_body(Reason reason, config::Language language, BadRequest why = BadRequest::kMalformed);

// Seconds for Retry-After and RateLimit's t: rounded up, at least 1 for a positive wait.
std::int64_t ceil_seconds(Nanos d);

// The response header fields a verdict calls for (Retry-After, and the RateLimit fields in the
// configured form), appended to out as (name, value).
void append_headers(const Verdict& verdict, config::RateLimitHeaders form,
                    std::vector<std::pair<std::string_view, std::string>>& out);
// The same fields as header lines ("Name: value\r\n") appended to out; returns their names.
using HeaderNames = boost::container::static_vector<std::string_view, 4>;
HeaderNames write_header_lines(const Verdict& verdict, config::RateLimitHeaders form, std::string& out);

// Percent-decodes nothing and refuses what could route differently upstream: a path that does not
// start with '/', has a NUL (also %00), or a '.' / '..' segment — with dots also written %2E, and
// segments also split where some servers split them ('\', %2F, %5C) and cut at ';' (path
// parameters, which Java servers drop: "/public/..;/admin" is "/admin" to them).
bool path_is_clean(std::string_view path);

// The path as an upstream that decodes and tidies it before routing may read it: escapes decoded
// ("%61" is "a"; but %25, which would read as another escape), separators ('/', and '\', %2F, %5C
// as some servers take them) run together into one '/', each segment's parameters (";...")
// dropped, and a trailing '/' too. nullopt when that is the path itself.
std::optional<std::string> routing_form(std::string_view path);

// The value of one query parameter (raw, not decoded), its name decoded ("%71" is "q"); the first
// when given twice, empty when absent.
std::string_view query_param(std::string_view query, std::string_view name);
// Whether servers may read the parameter differently: given twice, or with another value (or none)
// where ';' ends a parameter too (Rack 2, CGI.pm, older Python and Go), as PHP reads names (" u",
// "u%00x" and "u[0]" are u; "u.id" is "u_id"), in any case (ASP.NET), without brackets at its ends
// (Rack 2: "[u]"), or in a pair with a '%' that is no escape (which Go and Tomcat drop).
bool query_param_ambiguous(std::string_view query, std::string_view name);

}  // namespace sluice::gateway
