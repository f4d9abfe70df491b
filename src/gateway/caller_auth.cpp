#include "gateway/caller_auth.h"

#include <charconv>
#include <cstring>

#include "config/crypto.h"
#include "gateway/snapshot.h"

namespace sluice::gateway {
namespace {

bool expired(const std::optional<std::int64_t>& expires, std::int64_t now) { return expires && now >= *expires; }

}  // namespace

// --- CallerKeys -----------------------------------------------------------------------------------

CallerKeys::CallerKeys(const config::Config& config, const config::SecretKey* key,
                       std::vector<std::string>* problems) {
  for (const config::System& s : config.systems) {
    for (const config::Credential& c : s.credentials) {
      if (c.kind == config::Auth::kApiKey && s.auth == config::Auth::kApiKey) {
        if (auto raw = config::from_hex(c.api_key_sha256)) api_keys_[*raw] = ApiKey{s.key, c.expires};
      } else if (c.kind == config::Auth::kHmac && s.auth == config::Auth::kHmac) {
        if (key == nullptr) {
          if (problems != nullptr) {
            problems->push_back("system " + s.key + ": credential " + c.id +
                                ": SLUICE_SECRET_KEY is not set, so its signatures cannot be checked");
          }
          continue;
        }
        auto secret = key->open(c.sealed_secret);
        if (!secret.ok()) {
          if (problems != nullptr) problems->push_back("system " + s.key + ": credential " + c.id + ": " + secret.error().message);
          continue;
        }
        secrets_[s.key].push_back(Secret{std::move(*secret), c.expires});
      }
    }
  }
}

const CallerKeys::ApiKey* CallerKeys::api_key(std::string_view key_sha256, std::int64_t now_seconds) const {
  auto it = api_keys_.find(std::string(key_sha256));
  if (it == api_keys_.end() || expired(it->second.expires, now_seconds)) return nullptr;
  return &it->second;
}

const std::vector<CallerKeys::Secret>* CallerKeys::secrets(std::string_view system) const {
  auto it = secrets_.find(std::string(system));
  return it == secrets_.end() ? nullptr : &it->second;
}

// --- NonceCache -----------------------------------------------------------------------------------

NonceCache::NonceCache(std::size_t max_entries)
    : per_shard_(std::max<std::size_t>(1, max_entries / kShards)), shards_(std::make_unique<Shard[]>(kShards)) {}

NonceCache::Answer NonceCache::insert(std::string_view system, std::string_view nonce, std::int64_t until_seconds,
                                      std::int64_t now_seconds) {
  std::string named = std::to_string(system.size());  // the length first: no two pairs alike
  named.append(1, ':').append(system).append(nonce);
  const std::string sha = config::sha256(named);
  Digest digest{};
  std::memcpy(digest.data(), sha.data(), sizeof digest);
  Shard& s = shards_[digest[1] % kShards];
  std::lock_guard lock(s.mu);
  while (!s.expiry.empty() && s.expiry.top().until < now_seconds) {
    const Entry& gone = s.expiry.top();
    if (--gone.holder->second == 0) s.held.erase(gone.holder->first);
    s.seen.erase(gone.digest);
    s.expiry.pop();
  }
  if (s.seen.count(digest) != 0) return {Outcome::kReplayed};
  const auto holder = s.held.try_emplace(std::string(system), 0).first;
  // Half of what the other systems leave: one system can take half the shard, a second a quarter,
  // and so on, with room left for the next.
  const std::size_t left = per_shard_ - std::min(per_shard_, s.seen.size() - holder->second);
  if (s.seen.size() >= per_shard_ || holder->second >= std::max<std::size_t>(1, left / 2)) {
    if (holder->second == 0) s.held.erase(holder);
    return {Outcome::kNoRoom, s.expiry.empty() ? now_seconds + 1 : s.expiry.top().until + 1};
  }
  ++holder->second;
  s.seen.insert(digest);
  s.expiry.push(Entry{until_seconds, digest, &*holder});
  return {Outcome::kRemembered};
}

std::size_t NonceCache::size() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < kShards; ++i) {
    std::lock_guard lock(shards_[i].mu);
    n += shards_[i].seen.size();
  }
  return n;
}

// --- the checks -----------------------------------------------------------------------------------

CallerCheck identify_caller(Request& request, const Snapshot& snapshot, std::int64_t now_seconds) {
  if (request.caller_named_twice) return {Reason::kBadRequest, false};
  const std::string_view api_key = request.headers != nullptr ? request.headers->get(kApiKeyHeader) : "";
  if (!api_key.empty()) {
    const CallerKeys::ApiKey* owner = snapshot.callers().api_key(config::sha256(api_key), now_seconds);
    // A key may name its system on its own; next to a system key, it must be that system's.
    if (owner == nullptr || (request.has_system_key && !request.system_key.empty() &&
                             request.system_key != owner->system)) {
      return {Reason::kApiKeyInvalid, false};
    }
    request.has_system_key = true;
    request.system_key = owner->system;
    return {};
  }
  if (!request.has_system_key || request.system_key.empty()) return {};
  const SystemEntry* system = snapshot.system(request.system_key);
  if (system == nullptr) return {};  // check_access answers system_unknown
  switch (system->system->auth) {
    case config::Auth::kKey: return {};
    case config::Auth::kApiKey: return {Reason::kApiKeyInvalid, false};
    case config::Auth::kHmac: return {Reason::kOk, true};
  }
  return {};
}

std::string string_to_sign(std::string_view method, std::string_view target, std::string_view timestamp,
                           std::string_view nonce, std::string_view body_sha256_hex) {
  std::string s;
  s.reserve(method.size() + target.size() + timestamp.size() + nonce.size() + body_sha256_hex.size() + 4);
  s.append(method).append(1, '\n').append(target).append(1, '\n').append(timestamp).append(1, '\n');
  s.append(nonce).append(1, '\n').append(body_sha256_hex);
  return s;
}

std::string sign_request(std::string_view secret, std::string_view method, std::string_view target,
                         std::string_view timestamp, std::string_view nonce, std::string_view body) {
  return config::base64(
      config::hmac_sha256(secret, string_to_sign(method, target, timestamp, nonce, config::sha256_hex(body))));
}

SignatureCheck verify_signature(const Request& request, std::string_view target, std::string_view body_sha256_hex,
                                const Snapshot& snapshot, NonceCache& nonces, std::int64_t now_seconds) {
  if (request.headers == nullptr) return {Reason::kSignatureInvalid};
  // Each once: an upstream or a log reading the other would see values never checked.
  for (const std::string_view name : {kTimestampHeader, kNonceHeader, kSignatureHeader}) {
    if (request.headers->repeated(name)) return {Reason::kBadRequest};
  }
  const std::string_view timestamp = request.headers->get(kTimestampHeader);
  const std::string_view nonce = request.headers->get(kNonceHeader);
  const std::string_view signature = request.headers->get(kSignatureHeader);
  std::int64_t at = 0;
  auto [ptr, ec] = std::from_chars(timestamp.data(), timestamp.data() + timestamp.size(), at);
  if (timestamp.empty() || ec != std::errc() || ptr != timestamp.data() + timestamp.size() || nonce.empty() ||
      nonce.size() > 128 || signature.empty()) {
    return {Reason::kSignatureInvalid};
  }
  if (at < now_seconds - kSignatureSkewSeconds || at > now_seconds + kSignatureSkewSeconds) {
    return {Reason::kSignatureExpired};
  }
  const auto presented = config::from_base64(signature);
  const std::vector<CallerKeys::Secret>* secrets = snapshot.callers().secrets(request.system_key);
  // In its one canonical form (padded, no stray bits): one request, one signature.
  if (!presented || secrets == nullptr || config::base64(*presented) != signature) return {Reason::kSignatureInvalid};
  const std::string message = string_to_sign(request.method, target, timestamp, nonce, body_sha256_hex);
  bool match = false;
  for (const CallerKeys::Secret& s : *secrets) {
    // Every unexpired secret is tried, without stopping at a match.
    const bool same = config::constant_time_equal(config::hmac_sha256(s.secret, message), *presented);
    match = (same && !expired(s.expires, now_seconds)) || match;
  }
  if (!match) return {Reason::kSignatureInvalid};
  // Only a valid signature's nonce is remembered: forged requests cannot fill the cache.
  const NonceCache::Answer remembered = nonces.insert(request.system_key, nonce, at + kSignatureSkewSeconds, now_seconds);
  switch (remembered.outcome) {
    case NonceCache::Outcome::kRemembered: return {};
    case NonceCache::Outcome::kReplayed: return {Reason::kSignatureReplayed};
    case NonceCache::Outcome::kNoRoom: return {Reason::kSignatureRateLimited, remembered.room_at - now_seconds};
  }
  return {};
}

}  // namespace sluice::gateway
