// Caller authentication as plain functions, run before the access checks and before any limit key is
// built, so that made-up credentials cannot fill the limit store: API keys (X-Api-Key) and HMAC
// signatures (X-Sluice-Timestamp, X-Sluice-Nonce, X-Sluice-Signature) with replay refusal.
// Thread-safe (NonceCache locks; the rest reads an immutable snapshot).
#pragma once

#include <string>
#include <string_view>

#include "gateway/caller_keys.h"
#include "gateway/policy.h"

namespace sluice::gateway {

inline constexpr std::string_view kApiKeyHeader = "X-Api-Key";
inline constexpr std::string_view kTimestampHeader = "X-Sluice-Timestamp";
inline constexpr std::string_view kNonceHeader = "X-Sluice-Nonce";
inline constexpr std::string_view kSignatureHeader = "X-Sluice-Signature";
// A signature's timestamp may be this far from the gateway's clock, either way.
inline constexpr std::int64_t kSignatureSkewSeconds = 300;

struct CallerCheck {
  Reason reason = Reason::kOk;
  // The named system signs its requests: call verify_signature with the body's SHA-256.
  bool needs_signature = false;
};

// Who is calling, from the header fields alone. A caller named twice is a bad request. An X-Api-Key
// names the system it belongs to (and sets request.system_key to it); a system whose auth is
// api_key cannot be named without its key; one whose auth is hmac needs a signature. now_seconds:
// Unix time.
CallerCheck identify_caller(Request& request, const Snapshot& snapshot, std::int64_t now_seconds);

struct SignatureCheck {
  Reason reason = Reason::kOk;
  std::int64_t retry_after_seconds = 0;  // kSignatureRateLimited: when the nonce cache may have room
};

// For a system whose auth is hmac: the signature over the method, the target as sent (path and
// query), the timestamp, the nonce and the body's SHA-256 (hex) must match one of its unexpired
// secrets; the timestamp must be within kSignatureSkewSeconds of now; the nonce must be new, and
// the cache must have room to remember it (NonceCache::Outcome::kNoRoom: kSignatureRateLimited).
SignatureCheck verify_signature(const Request& request, std::string_view target, std::string_view body_sha256_hex,
                                const Snapshot& snapshot, NonceCache& nonces, std::int64_t now_seconds);

// What a caller signs: method "\n" target "\n" timestamp "\n" nonce "\n" hex(SHA-256(body)).
std::string string_to_sign(std::string_view method, std::string_view target, std::string_view timestamp,
                           std::string_view nonce, std::string_view body_sha256_hex);
// The X-Sluice-Signature value: base64(HMAC-SHA256(secret, string_to_sign(...))).
std::string sign_request(std::string_view secret, std::string_view method, std::string_view target,
                         std::string_view timestamp, std::string_view nonce, std::string_view body);

}  // namespace sluice::gateway
