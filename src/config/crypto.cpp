#include "config/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>

namespace sluice::config {
namespace {

constexpr std::size_t kNonceBytes = 12;
constexpr std::size_t kTagBytes = 16;
constexpr std::string_view kSealedPrefix = "v1:";
// Bound into every sealed secret, so that a ciphertext made for something else does not open.
constexpr std::string_view kAad = "sluice secret v1";

const unsigned char* bytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }
unsigned char* bytes(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_with(std::string_view in, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const std::uint32_t v = (static_cast<std::uint8_t>(in[i]) << 16) | (static_cast<std::uint8_t>(in[i + 1]) << 8) |
                            static_cast<std::uint8_t>(in[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  const std::size_t rest = in.size() - i;
  if (rest > 0) {
    std::uint32_t v = static_cast<std::uint8_t>(in[i]) << 16;
    if (rest == 2) v |= static_cast<std::uint8_t>(in[i + 1]) << 8;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    if (rest == 2) out += alphabet[(v >> 6) & 63];
    if (pad) out.append(rest == 1 ? "==" : "=");
  }
  return out;
}

struct CipherCtx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
};

}  // namespace

std::string sha256(std::string_view data) {
  std::string out(32, '\0');
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), bytes(out), &len, EVP_sha256(), nullptr) != 1 || len != 32) {
    std::abort();  // only when OpenSSL itself is broken
  }
  return out;
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

std::string hmac_sha256(std::string_view key, std::string_view data) {
  std::string out(32, '\0');
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), bytes(data), data.size(), bytes(out), &len) ==
          nullptr ||
      len != 32) {
    std::abort();
  }
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(bytes(out), static_cast<int>(n)) != 1) std::abort();
  return out;
}

std::string random_token(std::string_view prefix) {
  static constexpr char kUrl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  return std::string(prefix) + base64_with(random_bytes(32), kUrl, false);
}

std::string random_id(std::string_view prefix) { return std::string(prefix) + to_hex(random_bytes(6)); }

std::string to_hex(std::string_view in) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(in.size() * 2);
  for (char ch : in) {
    out += kDigits[static_cast<std::uint8_t>(ch) >> 4];
    out += kDigits[static_cast<std::uint8_t>(ch) & 15];
  }
  return out;
}

int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hex_digit(hex[i]);
    const int lo = hex_digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string base64(std::string_view in) { return base64_with(in, kBase64, true); }

std::optional<std::string> from_base64(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char ch : text) {
    const char* at = ch == '\0' ? nullptr : std::char_traits<char>::find(kBase64, 64, ch);
    if (at == nullptr) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(at - kBase64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

Result<SecretKey> SecretKey::parse(std::string_view text) {
  std::optional<std::string> raw = text.size() == 64 ? from_hex(text) : from_base64(text);
  if (!raw || raw->size() != 32) {
    return invalid_argument("SLUICE_SECRET_KEY must be 32 bytes as 64 hex digits or base64 "
                            "(e.g. the output of `openssl rand -hex 32`)");
  }
  SecretKey key;
  std::copy(raw->begin(), raw->end(), key.key_.begin());
  return key;
}

Result<std::optional<SecretKey>> SecretKey::from_environment() {
  const char* value = std::getenv("SLUICE_SECRET_KEY");
  if (value == nullptr || *value == '\0') return std::optional<SecretKey>();
  auto key = parse(value);
  if (!key.ok()) return key.error();
  return std::optional<SecretKey>(*key);
}

std::string SecretKey::seal(std::string_view plaintext) const {
  const std::string nonce = random_bytes(kNonceBytes);
  std::string out = nonce;
  out.resize(kNonceBytes + plaintext.size() + kTagBytes);
  CipherCtx c;
  int len = 0;
  int total = 0;
  bool ok = c.ctx != nullptr &&
            EVP_EncryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, key_.data(), bytes(nonce)) == 1 &&
            EVP_EncryptUpdate(c.ctx, nullptr, &len, bytes(kAad), static_cast<int>(kAad.size())) == 1 &&
            EVP_EncryptUpdate(c.ctx, bytes(out) + kNonceBytes, &len, bytes(plaintext),
                              static_cast<int>(plaintext.size())) == 1;
  total = len;
  ok = ok && EVP_EncryptFinal_ex(c.ctx, bytes(out) + kNonceBytes + total, &len) == 1;
  total += len;
  ok = ok && EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes),
                                 bytes(out) + kNonceBytes + total) == 1;
  if (!ok) std::abort();
  return std::string(kSealedPrefix) + base64(out);
}

Result<std::string> SecretKey::open(std::string_view sealed) const {
  const Error bad = invalid_argument("the secret cannot be decrypted with this SLUICE_SECRET_KEY (another key "
                                     "sealed it, or it was altered)");
  if (!sealed.starts_with(kSealedPrefix)) return bad;
  auto raw = from_base64(sealed.substr(kSealedPrefix.size()));
  if (!raw || raw->size() < kNonceBytes + kTagBytes) return bad;
  const std::size_t n = raw->size() - kNonceBytes - kTagBytes;
  std::string out(n, '\0');
  std::string tag = raw->substr(kNonceBytes + n);
  CipherCtx c;
  int len = 0;
  bool ok = c.ctx != nullptr &&
            EVP_DecryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, key_.data(), bytes(*raw)) == 1 &&
            EVP_DecryptUpdate(c.ctx, nullptr, &len, bytes(kAad), static_cast<int>(kAad.size())) == 1 &&
            EVP_DecryptUpdate(c.ctx, bytes(out), &len, bytes(*raw) + kNonceBytes, static_cast<int>(n)) == 1 &&
            EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), tag.data()) == 1;
  int final_len = 0;
  ok = ok && EVP_DecryptFinal_ex(c.ctx, bytes(out) + len, &final_len) == 1;
  if (!ok) return bad;
  return out;
}

}  // namespace sluice::config
