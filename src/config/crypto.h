// The cryptography the control plane needs, over OpenSSL: SHA-256, HMAC-SHA256, constant-time
// comparison, random tokens, base64/hex, and AES-256-GCM sealing of secrets at rest. Pure functions
// and a value type (SecretKey); thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/result.h"

namespace sluice::config {

// SHA-256 of data: 32 raw bytes.
std::string sha256(std::string_view data);
// SHA-256 of data as 64 lower-case hex digits.
std::string sha256_hex(std::string_view data);
// HMAC-SHA256(key, data): 32 raw bytes.
std::string hmac_sha256(std::string_view key, std::string_view data);

// Whether a and b are equal, in time that depends on their lengths only.
bool constant_time_equal(std::string_view a, std::string_view b);

// n bytes from the operating system's random generator.
std::string random_bytes(std::size_t n);
// A fresh secret for people to copy: prefix followed by 32 random bytes in unpadded base64url
// (43 characters), e.g. "sluice_ak_Zq3...".
std::string random_token(std::string_view prefix);
// A short random identifier: prefix and 12 hex digits, e.g. "ak_3f9a0c2e41d7".
std::string random_id(std::string_view prefix);

std::string to_hex(std::string_view bytes);
// A hex digit's value (either case), or -1.
int hex_digit(char ch);
std::optional<std::string> from_hex(std::string_view hex);
std::string base64(std::string_view bytes);  // standard alphabet, padded
std::optional<std::string> from_base64(std::string_view text);  // standard alphabet, padding optional

// The key that encrypts signing secrets at rest (SLUICE_SECRET_KEY): 32 bytes, given as 64 hex digits
// or as standard base64.
class SecretKey {
 public:
  static Result<SecretKey> parse(std::string_view text);
  // From the environment variable SLUICE_SECRET_KEY: nullopt when unset or empty; an error when set
  // to something that is not a key.
  static Result<std::optional<SecretKey>> from_environment();

  // "v1:" + base64(nonce[12] | ciphertext | tag[16]): AES-256-GCM with a fresh random nonce.
  std::string seal(std::string_view plaintext) const;
  // The plaintext, or an error when the text was not sealed by this key or was altered.
  Result<std::string> open(std::string_view sealed) const;

 private:
  std::array<unsigned char, 32> key_{};
};

}  // namespace sluice::config
