#include "sluice/redis/address.h"

#include <algorithm>
#include <charconv>

namespace sluice::redis {

std::string Endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

namespace {

Result<int> parse_int(std::string_view s, int lo, int hi, const char* what) {
  int v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || v < lo || v > hi) {
    return invalid_argument(std::string("redis address: bad ") + what + " '" + std::string(s) + "'");
  }
  return v;
}

Result<Endpoint> parse_endpoint(std::string_view s) {
  Endpoint e;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {  // [IPv6]:port
    const auto close = s.find(']');
    if (close == std::string_view::npos) return invalid_argument("redis address: unclosed '['");
    e.host = std::string(s.substr(1, close - 1));
    s.remove_prefix(close + 1);
    if (!s.empty()) {
      if (s.front() != ':') return invalid_argument("redis address: expected ':' after ']'");
      port = s.substr(1);
    }
  } else {
    const auto colon = s.rfind(':');
    e.host = std::string(s.substr(0, colon));
    if (colon != std::string_view::npos) port = s.substr(colon + 1);
    if (e.host.find(':') != std::string::npos) {
      return invalid_argument("redis address: an IPv6 host goes in brackets, as [::1]:6379");
    }
  }
  if (e.host.empty()) return invalid_argument("redis address: missing host");
  if (std::any_of(e.host.begin(), e.host.end(), [](char c) { return c <= ' ' || c == 0x7f; })) {
    return invalid_argument("redis address: a space or control character in the host '" + e.host + "'");
  }
  if (!port.empty()) {
    auto p = parse_int(port, 1, 65535, "port");
    if (!p) return p.error();
    e.port = static_cast<std::uint16_t>(*p);
  }
  return e;
}

// RFC 3986 percent-decoding, as a URL's userinfo is written: a password holding '@', ':' or '/' comes
// as %40, %3A or %2F, and a '%' as %25. The error names `part` and never shows the text: it may be a
// password.
Result<std::string> percent_decoded(std::string_view s, const char* part) {
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int high = i + 1 < s.size() ? hex(s[i + 1]) : -1;
    const int low = i + 2 < s.size() ? hex(s[i + 2]) : -1;
    if (high < 0 || low < 0) {
      return invalid_argument(std::string("redis address: the ") + part +
                              " has a '%' that is not followed by two hex digits (write '%' as %25)");
    }
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

}  // namespace

Result<Address> parse_address(std::string_view text) {
  Address a;
  constexpr std::string_view kSingle = "redis://";
  constexpr std::string_view kCluster = "redis-cluster://";
  if (text.starts_with(kSingle)) {
    text.remove_prefix(kSingle.size());
  } else if (text.starts_with(kCluster)) {
    text.remove_prefix(kCluster.size());
    a.cluster = true;
  } else {
    // Said without what lies between "://" and an '@': a password.
    std::string shown(text);
    const auto scheme = shown.find("://");
    const auto at = shown.rfind('@');
    if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
      shown.replace(scheme + 3, at - scheme - 3, "...");
    }
    if (text.starts_with("rediss://")) {
      return invalid_argument("redis address: TLS (rediss://) is not supported, got '" + shown + "'");
    }
    return invalid_argument("redis address must start with redis:// or redis-cluster://, got '" + shown + "'");
  }
  if (const auto at = text.rfind('@'); at != std::string_view::npos) {
    const std::string_view credentials = text.substr(0, at);
    // "redis-cluster://:pw@a:1,:pw@b:2" would take "pw@a:1,:pw" for the password, and drop a.
    if (a.cluster && credentials.find(',') != std::string_view::npos) {
      return invalid_argument("redis address: the credentials go once, before the first host "
                              "(redis-cluster://:password@host:port,host:port)");
    }
    // Split before decoding: a user's %3A is part of its name. Without a ':' the credentials are a
    // password (redis://secret@host), as redis-cli reads them.
    const auto colon = credentials.find(':');
    a.escaped_credentials = credentials.find('%') != std::string_view::npos;
    if (colon != std::string_view::npos) {
      auto user = percent_decoded(credentials.substr(0, colon), "user");
      if (!user) return user.error();
      a.user = std::move(*user);
    }
    auto password = percent_decoded(colon == std::string_view::npos ? credentials : credentials.substr(colon + 1),
                                    "password");
    if (!password) return password.error();
    a.password = std::move(*password);
    // "redis://:@host", say from a variable left empty: no AUTH would be sent, unnoticed.
    if (a.password.empty()) return invalid_argument("redis address: an empty password before '@'");
    text.remove_prefix(at + 1);
  }
  if (const auto slash = text.find('/'); slash != std::string_view::npos) {
    const std::string_view db = text.substr(slash + 1);
    text = text.substr(0, slash);
    if (!db.empty()) {
      if (a.cluster) return invalid_argument("redis address: a cluster has no database number");
      auto n = parse_int(db, 0, 1 << 20, "database");
      if (!n) return n.error();
      a.db = *n;
    }
  }
  while (!text.empty()) {
    const auto comma = text.find(',');
    if (comma == 0 || comma == text.size() - 1) return invalid_argument("redis address: an empty host in the list");
    auto e = parse_endpoint(text.substr(0, comma));
    if (!e) return e.error();
    a.nodes.push_back(std::move(*e));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (a.nodes.empty()) return invalid_argument("redis address: no host");
  if (!a.cluster && a.nodes.size() > 1) {
    return invalid_argument("redis address: several hosts need redis-cluster://");
  }
  return a;
}

}  // namespace sluice::redis
