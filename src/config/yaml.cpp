#include "config/yaml.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "config/crypto.h"
#include "config/json.h"
#include "core/duration.h"

namespace sluice::config {
namespace {


// Whether the document at `at` starts after a "---" line, rather than where the text simply goes on
// after the first ended (as after a JSON value: YAML reads more text as another document).
bool after_separator(std::string_view text, const YAML::Mark& at) {
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  const auto line = static_cast<std::size_t>(std::max(at.line, 0));
  if (line < lines.size() && lines[line].substr(0, static_cast<std::size_t>(std::max(at.column, 0))).starts_with("---")) {
    return true;
  }
  for (std::size_t i = std::min(line, lines.size()); i-- > 0;) {
    std::string_view l = lines[i];
    while (!l.empty() && (l.front() == ' ' || l.front() == '\t' || l.front() == '\r')) l.remove_prefix(1);
    if (l.empty() || l.front() == '#') continue;
    return l.starts_with("---");
  }
  return false;
}

// Where a quoted string that goes on past the end of its line starts, when one does. YAML lets a
// quoted string run over lines; no value of a configuration needs to, and a quote left open takes
// in everything up to the next quote of its kind (the rest of a list, say) without a word.
// Each collection is looked at once (`seen`, by where it starts: an alias has its anchor's), so that
// an alias of an enclosing node, or many aliases of one, cost no more than the text.
std::optional<YAML::Mark> quoted_over_lines(std::string_view text, const YAML::Node& n, std::set<int>& seen) {
  if (n.IsScalar()) {
    const YAML::Mark m = n.Mark();
    // yaml-cpp counts positions after a byte order mark.
    const std::size_t at = static_cast<std::size_t>(m.pos) + (text.starts_with("\xEF\xBB\xBF") ? 3 : 0);
    if (m.pos < 0 || at >= text.size()) return std::nullopt;
    const char quote = text[at];
    if (quote != '"' && quote != '\'') return std::nullopt;
    for (std::size_t i = at + 1; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '\n' || c == '\r') return m;
      if (quote == '"' && c == '\\') {
        if (i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) return m;  // an escaped line break
        ++i;
      } else if (c == quote) {
        if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
          ++i;  // '' stands for '
        } else {
          return std::nullopt;
        }
      }
    }
    return m;
  }
  if (!(n.IsSequence() || n.IsMap()) || !seen.insert(n.Mark().pos).second) return std::nullopt;
  if (n.IsSequence()) {
    for (const YAML::Node& e : n) {
      if (auto m = quoted_over_lines(text, e, seen)) return m;
    }
  } else {
    for (const auto& kv : n) {
      if (auto m = quoted_over_lines(text, kv.first, seen)) return m;
      if (auto m = quoted_over_lines(text, kv.second, seen)) return m;
    }
  }
  return std::nullopt;
}

// The value of the four hex digits at s[at], or -1.
int hex4_at(std::string_view s, std::size_t at) {
  if (at + 4 > s.size()) return -1;
  int v = 0;
  for (std::size_t i = at; i < at + 4; ++i) {
    const int d = hex_digit(s[i]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// JSON writes a character beyond U+FFFF as the \u escapes of its two UTF-16 surrogates
// ("\uD83D\uDE80", as Python's json.dumps does by default), which YAML's reader refuses. In a text
// that is JSON, where every backslash is in a string, each such pair becomes the one escape YAML
// has for the character ("\U0001F680"); a surrogate on its own stays, and is refused. `joins` gets
// where each pair was joined, (line, column) from 0 in the text returned, which is 2 bytes shorter
// there: see as_sent().
using Joins = std::vector<std::pair<int, int>>;
std::string surrogate_pairs_joined(std::string_view text, Joins& joins) {
  if (text.find("\\u") == std::string_view::npos) return std::string(text);
  boost::system::error_code ec;
  boost::json::parse(text, ec);
  if (ec) return std::string(text);
  std::string out;
  out.reserve(text.size());
  int line = 0;                // of `out`'s end, from 0
  std::size_t line_start = 0;  // where that line starts in `out`
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      if (text[i] == '\n') {
        ++line;
        line_start = out.size() + 1;
      }
      out += text[i];
      continue;
    }
    const int high = text[i + 1] == 'u' ? hex4_at(text, i + 2) : -1;
    const int low = i + 7 < text.size() && text[i + 6] == '\\' && text[i + 7] == 'u' ? hex4_at(text, i + 8) : -1;
    if (high >= 0xD800 && high <= 0xDBFF && low >= 0xDC00 && low <= 0xDFFF) {
      joins.emplace_back(line, static_cast<int>(out.size() - line_start));
      char escape[16];
      std::snprintf(escape, sizeof escape, "\\U%08X", 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00));
      out += escape;
      i += 11;
    } else {
      out.append(text.substr(i, 2));  // an escape of its own: its second character is not a start
      ++i;
    }
  }
  return out;
}

// YAML's reader's message, said for a reader of the file. Its one about a \u or \U escape gives the
// code point in decimal ("invalid unicode: 55357"), which no one who wrote "\ud83d" recognises.
std::string reader_message(const YAML::Exception& e) {
  constexpr std::string_view kInvalidUnicode = "invalid unicode: ";
  if (!e.msg.starts_with(kInvalidUnicode)) return e.msg;
  const long code = std::strtol(e.msg.c_str() + kInvalidUnicode.size(), nullptr, 10);
  char hex[16];
  std::snprintf(hex, sizeof hex, "%04lX", code);
  if (code >= 0xD800 && code <= 0xDFFF) {
    return "the escape \\u" + std::string(hex) +
           " is half of a UTF-16 surrogate pair, which YAML does not take: write the character itself, or "
           "its \\U escape with 8 hex digits (\\U0001F680 for U+1F680)";
  }
  return "the escape of U+" + std::string(hex) + " is not a Unicode character";
}

// Problems placed in the joined text put back where they are in the text as sent.
void as_sent(std::vector<Problem>& problems, const Joins& joins) {
  for (Problem& p : problems) {
    for (const auto& [line, column] : joins) {
      if (line == p.line - 1 && column < p.column - 1) p.column += 2;
    }
  }
}

// Reads text as one YAML document into root; the problem when it is not one. Names and descriptions
// go to JSON answers, the audit log and exports, which must read back: the text must be UTF-8. A
// second document (after a "---") would be dropped without a word.
std::optional<Problem> read_one_document(std::string_view original, const std::string& file, YAML::Node& root,
                                         Joins& joins) {
  const std::string joined = surrogate_pairs_joined(original, joins);
  const std::string_view text = joined;
  if (const std::size_t bad = invalid_utf8_at(text); bad != std::string_view::npos) {
    const std::string_view before = text.substr(0, bad);
    const std::size_t line_start = before.rfind('\n') + 1;  // npos + 1: 0
    return Problem{"", "is not valid UTF-8 text", file,
                   static_cast<int>(std::count(before.begin(), before.end(), '\n')) + 1,
                   static_cast<int>(bad - line_start) + 1};
  }
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    for (std::size_t i = 1; i < documents.size(); ++i) {
      if (documents[i].IsNull()) continue;  // a "---" with nothing after it drops nothing
      const YAML::Mark at = documents[i].Mark();
      return Problem{"",
                     after_separator(text, at)
                         ? "a second YAML document (after a \"---\" line) begins here: a configuration is one document"
                         : "text goes on here after the configuration ended: a configuration is one JSON value or "
                           "YAML document",
                     file, at.line + 1, at.column + 1};
    }
    root = documents.empty() ? YAML::Node() : documents[0];
    std::set<int> seen;
    if (const auto at = quoted_over_lines(text, root, seen)) {
      return Problem{"", "a quoted string runs on past the end of its line: close its quote on the line it opens",
                     file, at->line + 1, at->column + 1};
    }
  } catch (const YAML::Exception& e) {
    return Problem{"", reader_message(e), file, e.mark.line + 1, e.mark.column + 1};
  }
  return std::nullopt;
}

// Walks the YAML tree into a Config, collecting every problem (with its line and column) instead of
// stopping at the first, and remembering where each field was so that the model's own validation
// can point into the file too.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  std::vector<Problem>& problems() { return problems_; }

  void config(const YAML::Node& root, Config& c) {
    // An empty document is refused rather than read as the defaults: it is far more often a file
    // caught half-written, or a body that came out empty, than a wish to serve nothing.
    if (root.IsNull()) {
      fail(root, "", "is empty (write {} for the built-in defaults)");
      return;
    }
    if (!root.IsMap()) {
      fail(root, "", "must be a mapping of settings (listen, upstreams, systems, interfaces, grants, ...)");
      return;
    }
    mark("", root);
    fields(root, "", {"listen", "admin_listen", "store", "fleet_size", "store_timeout", "system_key_header",
                      "language", "rate_limit_headers", "max_body_bytes", "header_timeout", "send_timeout",
                      "drain_delay", "drain_timeout", "access_log", "decide_client_ip_from", "trusted_proxies", "upstreams",
                      "systems", "interfaces", "grants"});
    string(root, "", "listen", c.listen);
    string(root, "", "admin_listen", c.admin_listen);
    string(root, "", "store", c.store);
    integer(root, "", "fleet_size", c.fleet_size);
    duration(root, "", "store_timeout", c.store_timeout);
    string(root, "", "system_key_header", c.system_key_header);
    std::string language;
    if (string(root, "", "language", language)) {
      if (language == "en") {
        c.language = Language::kEnglish;
      } else if (language == "zh-CN") {
        c.language = Language::kChinese;
      } else {
        fail(root["language"], "language", "must be en or zh-CN, got \"" + language + "\"");
      }
    }
    std::string headers;
    if (string(root, "", "rate_limit_headers", headers)) {
      if (headers == "draft") {
        c.rate_limit_headers = RateLimitHeaders::kDraft;
      } else if (headers == "legacy") {
        c.rate_limit_headers = RateLimitHeaders::kLegacy;
      } else if (headers == "none") {
        c.rate_limit_headers = RateLimitHeaders::kNone;
      } else {
        fail(root["rate_limit_headers"], "rate_limit_headers", "must be draft, legacy or none");
      }
    }
    integer(root, "", "max_body_bytes", c.max_body_bytes);
    duration(root, "", "header_timeout", c.header_timeout);
    duration(root, "", "send_timeout", c.send_timeout);
    duration(root, "", "drain_delay", c.drain_delay);
    duration(root, "", "drain_timeout", c.drain_timeout);
    string(root, "", "access_log", c.access_log);
    if (root["decide_client_ip_from"].IsDefined()) {
      c.decide_client_ip_from.clear();
      strings(root, "", "decide_client_ip_from", c.decide_client_ip_from);
    }
    strings(root, "", "trusted_proxies", c.trusted_proxies);
    list(root, "", "upstreams", [&](const YAML::Node& n, const std::string& at) {
      c.upstreams.push_back(upstream(n, at));
    });
    list(root, "", "systems", [&](const YAML::Node& n, const std::string& at) {
      c.systems.push_back(system(n, at));
    });
    list(root, "", "interfaces", [&](const YAML::Node& n, const std::string& at) {
      c.interfaces.push_back(interface(n, at));
    });
    list(root, "", "grants", [&](const YAML::Node& n, const std::string& at) {
      c.grants.push_back(grant(n, at));
    });
  }

  // Places a validation problem at the field it names, or at the nearest enclosing one known.
  void locate(Problem& p) const {
    p.file = file_;
    std::string path = p.path;
    while (true) {
      auto it = marks_.find(path);
      if (it != marks_.end()) {
        p.line = it->second.line + 1;
        p.column = it->second.column + 1;
        return;
      }
      if (path.empty()) return;
      const std::size_t cut = path.find_last_of(".[");
      path = cut == std::string::npos ? "" : path.substr(0, cut);
    }
  }

  // One entity on its own (an admin API request body): problems' paths start at its fields.
  System one_system(const YAML::Node& n) { return system(n, ""); }
  Interface one_interface(const YAML::Node& n) { return interface(n, ""); }
  Upstream one_upstream(const YAML::Node& n) { return upstream(n, ""); }
  Grant one_grant(const YAML::Node& n) { return grant(n, ""); }

 private:
  static std::string join(const std::string& at, const std::string& key) {
    return at.empty() ? key : at + "." + key;
  }

  void mark(const std::string& path, const YAML::Node& n) { marks_.emplace(path, n.Mark()); }

  void fail(const YAML::Node& n, const std::string& path, std::string message) {
    const YAML::Mark m = n.Mark();
    problems_.push_back(Problem{path, std::move(message), file_, m.line + 1, m.column + 1});
  }

  // A key given twice in one mapping: YAML reads the first and drops the other, so an override
  // added at the end of a file would be ignored without a word. False when there is one.
  bool once_each(const YAML::Node& map, const std::string& at) {
    std::map<std::string, int> first_line;
    bool ok = true;
    for (const auto& kv : map) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      const auto [it, added] = first_line.emplace(key, kv.first.Mark().line + 1);
      if (added) continue;
      fail(kv.first, join(at, key),
           "is given twice (first on line " + std::to_string(it->second) + "): only the first would count");
      ok = false;
    }
    return ok;
  }

  // Every key of the mapping must be one of `known`, and given once.
  void fields(const YAML::Node& map, const std::string& at, std::initializer_list<const char*> known) {
    once_each(map, at);
    for (const auto& kv : map) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      const bool ok = std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; });
      if (ok) continue;
      std::string list;
      for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
      fail(kv.first, join(at, key), "unknown field \"" + key + "\" (known here: " + list + ")");
    }
  }

  // Reads map[key] as a scalar into out; false when absent or not a scalar.
  bool scalar(const YAML::Node& map, const std::string& at, const char* key, std::string& out) {
    const YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) return false;
    mark(join(at, key), n);
    if (!n.IsScalar()) {
      fail(n, join(at, key), "must be a single value, not a list or mapping");
      return false;
    }
    out = n.Scalar();
    return true;
  }

  bool string(const YAML::Node& map, const std::string& at, const char* key, std::string& out) {
    return scalar(map, at, key, out);
  }

  template <class Int>
  bool integer(const YAML::Node& map, const std::string& at, const char* key, Int& out) {
    std::string s;
    if (!scalar(map, at, key, s)) return false;
    Int v{};
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range && ptr == s.data() + s.size()) {
      fail(map[key], join(at, key), "is out of range, got " + s);
      return false;
    }
    if (ec != std::errc() || ptr != s.data() + s.size()) {
      fail(map[key], join(at, key), "must be a whole number, got \"" + s + "\"");
      return false;
    }
    out = v;
    return true;
  }

  bool boolean(const YAML::Node& map, const std::string& at, const char* key, bool& out) {
    std::string s;
    if (!scalar(map, at, key, s)) return false;
    if (s != "true" && s != "false") {
      fail(map[key], join(at, key), "must be true or false, got \"" + s + "\"");
      return false;
    }
    out = s == "true";
    return true;
  }

  bool duration(const YAML::Node& map, const std::string& at, const char* key, Nanos& out) {
    std::string s;
    if (!scalar(map, at, key, s)) return false;
    auto d = parse_duration(s);
    if (!d) {
      fail(map[key], join(at, key), "must be a duration like 500ms, 15s, 1m, 2h or 1d, got \"" + s + "\"");
      return false;
    }
    out = *d;
    return true;
  }

  template <class F>
  void list(const YAML::Node& map, const std::string& at, const char* key, F&& each) {
    const YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) return;
    mark(join(at, key), n);
    if (!n.IsSequence()) {
      fail(n, join(at, key), "must be a list");
      return;
    }
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string path = join(at, key) + "[" + std::to_string(i) + "]";
      mark(path, n[i]);
      each(n[i], path);
    }
  }

  void strings(const YAML::Node& map, const std::string& at, const char* key,
               std::vector<std::string>& out) {
    list(map, at, key, [&](const YAML::Node& n, const std::string& path) {
      if (!n.IsScalar()) {
        fail(n, path, "must be a single value");
        return;
      }
      out.push_back(n.Scalar());
    });
  }

  bool is_map(const YAML::Node& n, const std::string& at) {
    if (n.IsMap()) return true;
    fail(n, at, "must be a mapping ({field: value, ...})");
    return false;
  }

  Upstream upstream(const YAML::Node& n, const std::string& at) {
    Upstream u;
    if (!is_map(n, at)) return u;
    fields(n, at, {"name", "targets", "connect_timeout", "timeout", "max_idle_connections",
                   "failure_statuses", "breaker"});
    string(n, at, "name", u.name);
    list(n, at, "targets", [&](const YAML::Node& t, const std::string& path) {
      auto target = t.IsScalar() ? parse_target(t.Scalar()) : std::nullopt;
      if (!target) {
        fail(t, path, "must be host:port");
        return;
      }
      u.targets.push_back(*target);
    });
    duration(n, at, "connect_timeout", u.connect_timeout);
    duration(n, at, "timeout", u.timeout);
    integer(n, at, "max_idle_connections", u.max_idle_connections);
    if (n["failure_statuses"].IsDefined()) {
      u.failure_statuses.clear();
      list(n, at, "failure_statuses", [&](const YAML::Node& s, const std::string& path) {
        std::int32_t v = 0;
        const std::string text = s.IsScalar() ? s.Scalar() : "";
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.size() == 3 && text.substr(1) == "xx" && text[0] >= '1' && text[0] <= '5') {
          for (int k = 0; k < 100; ++k) u.failure_statuses.push_back((text[0] - '0') * 100 + k);
        } else if (ec == std::errc() && ptr == text.data() + text.size()) {
          // Checked here, where its place in the list is known (a class before it expands to 100).
          if (v < 100 || v > 599) fail(s, path, "must be an HTTP status from 100 to 599");
          else u.failure_statuses.push_back(v);
        } else {
          fail(s, path, "must be an HTTP status like 503, or a class like 5xx");
        }
      });
      // Each once ("5xx, 503" is the 5xx class), so that it exports as it counts.
      std::set<std::int32_t> seen;
      std::erase_if(u.failure_statuses, [&](std::int32_t v) { return !seen.insert(v).second; });
    }
    const YAML::Node b = n["breaker"];
    if (b.IsDefined() && !b.IsNull()) {
      const std::string bat = join(at, "breaker");
      mark(bat, b);
      if (is_map(b, bat)) breaker(b, bat, u.breaker);
    }
    return u;
  }

  void breaker(const YAML::Node& n, const std::string& at, Breaker& out) {
    fields(n, at, {"enabled", "force", "window", "minimum_calls", "failure_rate", "slow_call_rate", "slow_call",
                   "consecutive_failures", "open_for", "max_open_for", "backoff_multiplier",
                   "jitter_percent", "half_open_probes"});
    CircuitBreakerOptions& o = out.options;
    boolean(n, at, "enabled", out.enabled);
    std::string force;
    if (scalar(n, at, "force", force)) {
      if (force == "open" || force == "closed" || force == "none") {
        out.force = force == "open" ? BreakerForce::kOpen : force == "closed" ? BreakerForce::kClosed : BreakerForce::kNone;
      } else {
        fail(n["force"], join(at, "force"), "must be open, closed or none, got \"" + force + "\"");
      }
    }
    std::string window;
    if (scalar(n, at, "window", window)) {
      std::int32_t count = 0;
      auto [ptr, ec] = std::from_chars(window.data(), window.data() + window.size(), count);
      if (ec == std::errc() && ptr == window.data() + window.size()) {
        o.window = BreakerWindow::kCount;
        o.window_size = count;
      } else if (auto d = parse_duration(window)) {
        o.window = BreakerWindow::kTime;
        o.window_duration = *d;
      } else {
        fail(n["window"], join(at, "window"),
             "must be a number of calls (20) or a duration (60s), got \"" + window + "\"");
      }
    }
    integer(n, at, "minimum_calls", o.minimum_calls);
    integer(n, at, "failure_rate", o.failure_rate);
    integer(n, at, "slow_call_rate", o.slow_call_rate);
    duration(n, at, "slow_call", o.slow_call);
    integer(n, at, "consecutive_failures", o.consecutive_failures);
    duration(n, at, "open_for", o.open_for);
    if (!duration(n, at, "max_open_for", o.max_open_for)) o.max_open_for = std::max(o.max_open_for, o.open_for);
    integer(n, at, "backoff_multiplier", o.backoff_multiplier);
    integer(n, at, "jitter_percent", o.jitter_percent);
    integer(n, at, "half_open_probes", o.half_open_probes);
  }

  std::vector<LimitRule> limits(const YAML::Node& owner, const std::string& at) {
    std::vector<LimitRule> rules;
    list(owner, at, "limits", [&](const YAML::Node& n, const std::string& path) {
      if (!is_map(n, path)) return;
      LimitFields f;
      // The rule around the limit; its limit is a placeholder until the fields are read (Limit has
      // no empty state).
      LimitRule extra{.limit = *Limit::fixed_window({.limit = 1, .period = std::chrono::seconds(1)})};
      bool ok = once_each(n, path);
      for (const auto& kv : n) {
        const std::string key = kv.first.Scalar();
        const std::string field = path + "." + key;
        mark(field, kv.second);
        if (!kv.second.IsScalar()) {
          fail(kv.second, field, "must be a single value");
          ok = false;
          continue;
        }
        const std::string value = kv.second.Scalar();
        if (key == "name") {
          extra.name = value;
        } else if (key == "key_by") {
          ok = key_by(kv.second, field, value, extra) && ok;
        } else if (key == "on_store_failure") {
          if (value == "allow") {
            extra.on_store_failure = OnStoreFailure::kAllow;
          } else if (value == "deny") {
            extra.on_store_failure = OnStoreFailure::kDeny;
          } else if (value == "local") {
            extra.on_store_failure = OnStoreFailure::kLocal;
          } else {
            fail(kv.second, field, "must be allow, deny or local, got \"" + value + "\"");
            ok = false;
          }
        } else if (key == "shadow") {
          if (value == "true" || value == "false") {
            extra.shadow = value == "true";
          } else {
            fail(kv.second, field, "must be true or false, got \"" + value + "\"");
            ok = false;
          }
        } else {
          f.emplace(key, value);  // a key given twice is reported, and only the first counts
        }
      }
      std::vector<Problem> problems;
      auto limit = limit_from_fields(f, &problems);
      if (!limit.ok()) {
        for (const Problem& problem : problems) {
          const std::string field = problem.path.empty() ? path : path + "." + problem.path;
          const YAML::Node where = problem.path.empty() || !n[problem.path].IsDefined() ? n : n[problem.path];
          fail(where, field, problem.message);
        }
        return;
      }
      if (!ok) return;
      extra.limit = *limit;
      rules.push_back(std::move(extra));
    });
    return rules;
  }

  bool key_by(const YAML::Node& n, const std::string& at, const std::string& value, LimitRule& r) {
    if (value == "owner") {
      r.key_by = KeyBy::kOwner;
    } else if (value == "client_ip") {
      r.key_by = KeyBy::kClientIp;
    } else if (value.rfind("header:", 0) == 0 && value.size() > 7) {
      r.key_by = KeyBy::kHeader;
      r.key_name = value.substr(7);
    } else if (value.rfind("query:", 0) == 0 && value.size() > 6) {
      r.key_by = KeyBy::kQuery;
      r.key_name = value.substr(6);
    } else {
      fail(n, at, "must be owner, client_ip, header:NAME or query:NAME, got \"" + value + "\"");
      return false;
    }
    return true;
  }

  System system(const YAML::Node& n, const std::string& at) {
    System s;
    if (!is_map(n, at)) return s;
    fields(n, at, {"key", "description", "enabled", "auth", "credentials", "interfaces", "limits"});
    string(n, at, "key", s.key);
    string(n, at, "description", s.description);
    boolean(n, at, "enabled", s.enabled);
    std::string auth;
    if (scalar(n, at, "auth", auth)) {
      if (!auth_of(auth, s.auth)) fail(n["auth"], join(at, "auth"), "must be key, api_key or hmac, got \"" + auth + "\"");
    }
    const YAML::Node credentials = n["credentials"];
    s.credentials_listed = credentials.IsDefined() && credentials.IsSequence();
    list(n, at, "credentials", [&](const YAML::Node& c, const std::string& path) {
      s.credentials.push_back(credential(c, path));
    });
    std::vector<std::string> ids;
    strings(n, at, "interfaces", ids);
    for (std::string& id : ids) {
      if (id == "*") {
        s.all_interfaces = true;
      } else if (std::find(s.interfaces.begin(), s.interfaces.end(), id) == s.interfaces.end()) {
        s.interfaces.push_back(std::move(id));  // each once, as it counts
      }
    }
    s.limits = limits(n, at);
    return s;
  }

  static bool auth_of(const std::string& text, Auth& out) {
    if (text == "key" || text == "api_key" || text == "hmac") {
      out = text == "key" ? Auth::kKey : text == "api_key" ? Auth::kApiKey : Auth::kHmac;
      return true;
    }
    return false;
  }

  bool time(const YAML::Node& map, const std::string& at, const char* key, std::int64_t& out) {
    std::string s;
    if (!scalar(map, at, key, s)) return false;
    auto t = parse_time(s);
    if (!t) {
      fail(map[key], join(at, key), "must be a UTC time like 2026-11-30T10:00:00Z, got \"" + s + "\"");
      return false;
    }
    out = *t;
    return true;
  }

  Credential credential(const YAML::Node& n, const std::string& at) {
    Credential c;
    if (!is_map(n, at)) return c;
    fields(n, at, {"id", "kind", "api_key_sha256", "sealed_secret", "created", "expires"});
    string(n, at, "id", c.id);
    std::string kind;
    if (!scalar(n, at, "kind", kind)) {
      fail(n, join(at, "kind"), "is required (api_key or hmac)");
    } else if (!auth_of(kind, c.kind) || c.kind == Auth::kKey) {
      fail(n["kind"], join(at, "kind"), "must be api_key or hmac, got \"" + kind + "\"");
    }
    string(n, at, "api_key_sha256", c.api_key_sha256);
    string(n, at, "sealed_secret", c.sealed_secret);
    time(n, at, "created", c.created);
    std::int64_t expires = 0;
    if (time(n, at, "expires", expires)) c.expires = expires;
    return c;
  }

  Interface interface(const YAML::Node& n, const std::string& at) {
    Interface f;
    if (!is_map(n, at)) return f;
    fields(n, at, {"id", "description", "methods", "path", "upstream", "enabled", "public", "limits",
                   "concurrency", "concurrency_lease_timeout", "timeout"});
    string(n, at, "id", f.id);
    string(n, at, "description", f.description);
    strings(n, at, "methods", f.methods);
    string(n, at, "path", f.path);
    string(n, at, "upstream", f.upstream);
    boolean(n, at, "enabled", f.enabled);
    boolean(n, at, "public", f.is_public);
    f.limits = limits(n, at);
    std::int64_t concurrency = 0;
    if (integer(n, at, "concurrency", concurrency)) f.concurrency = concurrency;
    Nanos lease{0};
    if (duration(n, at, "concurrency_lease_timeout", lease)) f.concurrency_lease_timeout = lease;
    Nanos timeout{0};
    if (duration(n, at, "timeout", timeout)) f.timeout = timeout;
    return f;
  }

  Grant grant(const YAML::Node& n, const std::string& at) {
    Grant g;
    if (!is_map(n, at)) return g;
    fields(n, at, {"system", "interface", "limits"});
    string(n, at, "system", g.system);
    string(n, at, "interface", g.interface);
    g.limits = limits(n, at);
    return g;
  }

  std::string file_;
  std::vector<Problem> problems_;
  std::map<std::string, YAML::Mark> marks_;
};

// --- export -------------------------------------------------------------------------------------

// A scalar as YAML: plain when it cannot be mistaken for anything else, double-quoted otherwise.
// YAML reads null and the booleans in more than one case ("NULL", "Null", "True", "OFF").
std::string quote(const std::string& s) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](char ch) { return static_cast<char>(std::tolower(static_cast<unsigned char>(ch))); });
  const bool plain =
      !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) != 0 ||
               std::string_view("_-./:").find(ch) != std::string_view::npos;
      }) && std::isalpha(static_cast<unsigned char>(s[0])) != 0 &&
      lower != "true" && lower != "false" && lower != "null" && lower != "yes" && lower != "no" && lower != "on" &&
      lower != "off" && lower != "y" && lower != "n";
  if (plain || (s[0] == '/' && s.find_first_of("{}*#: ") == std::string::npos)) return s;
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      q += '\\';
    } else if (ch == '\n') {
      q += "\\n";
      continue;
    } else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
      q += hex;
      continue;
    }
    q += ch;
  }
  return q + "\"";
}

std::string strings_flow(const std::vector<std::string>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + quote(v[i]);
  return s + "]";
}

std::string limit_flow(const LimitRule& r) {
  std::string s = "{";
  auto add = [&](const std::string& k, const std::string& v) {
    s += (s.size() > 1 ? ", " : "") + k + ": " + v;
  };
  if (!r.name.empty()) add("name", quote(r.name));
  // A count or a duration goes bare (limit: 20, period: 1s), as YAML tools read a number and a
  // plain string; anything else is quoted as needed.
  auto bare = [](const std::string& v) {
    const std::size_t digits = v.find_first_not_of("0123456789");
    const std::string_view unit = digits == std::string::npos ? "" : std::string_view(v).substr(digits);
    return digits != 0 && (unit.empty() || unit == "ms" || unit == "s" || unit == "m" || unit == "h" || unit == "d");
  };
  for (const auto& [k, v] : limit_fields(r.limit)) add(k, bare(v) ? v : quote(v));
  if (r.key_by == KeyBy::kClientIp) add("key_by", "client_ip");
  if (r.key_by == KeyBy::kHeader) add("key_by", quote("header:" + r.key_name));
  if (r.key_by == KeyBy::kQuery) add("key_by", quote("query:" + r.key_name));
  if (r.on_store_failure != OnStoreFailure::kAllow) add("on_store_failure", to_string(r.on_store_failure));
  if (r.shadow) add("shadow", "true");
  return s + "}";
}

void limits_block(std::ostringstream& out, const std::vector<LimitRule>& rules, const char* indent) {
  if (rules.empty()) return;
  out << indent << "limits:\n";
  for (const LimitRule& r : rules) out << indent << "  - " << limit_flow(r) << "\n";
}

}  // namespace

std::string describe(const Breaker& b) {
  const CircuitBreakerOptions& o = b.options;
  std::string s = "{";
  if (!b.enabled) s += "enabled: false, ";
  if (b.force != BreakerForce::kNone) s += std::string("force: ") + to_string(b.force) + ", ";
  s += "window: " + (o.window == BreakerWindow::kCount ? std::to_string(o.window_size)
                                                        : format_duration(o.window_duration));
  s += ", minimum_calls: " + std::to_string(o.minimum_calls);
  s += ", failure_rate: " + std::to_string(o.failure_rate);
  s += ", slow_call_rate: " + std::to_string(o.slow_call_rate);
  s += ", slow_call: " + format_duration(o.slow_call);
  s += ", consecutive_failures: " + std::to_string(o.consecutive_failures);
  s += ", open_for: " + format_duration(o.open_for);
  s += ", max_open_for: " + format_duration(o.max_open_for);
  s += ", backoff_multiplier: " + std::to_string(o.backoff_multiplier);
  s += ", jitter_percent: " + std::to_string(o.jitter_percent);
  s += ", half_open_probes: " + std::to_string(o.half_open_probes);
  return s + "}";
}

namespace {

// The entity a problem's path is in: "upstreams[0]" of "upstreams[0].breaker.window", or a
// setting of the file's top level ("listen").
std::string entity_of(std::string_view path) {
  const std::size_t close = path.find(']');
  return std::string(close != std::string_view::npos ? path.substr(0, close + 1) : path.substr(0, path.find('.')));
}

// The field of an entity a problem's path is in: "upstreams[0].breaker" of
// "upstreams[0].breaker.window", "systems[0].limits" of "systems[0].limits[1].period" (a list that
// lost an entry, whose later entries moved up), "systems[0]" itself, or a setting of the file's top
// level ("listen").
std::string field_of(std::string_view path) {
  const std::size_t close = path.find(']');
  if (close == std::string_view::npos) return std::string(path.substr(0, path.find('.')));
  const std::size_t end = path.find_first_of(".[", close + 2);
  return std::string(path.substr(0, end));
}

}  // namespace

std::vector<Problem> problems_beside(const Config& config, const std::vector<Problem>& unread) {
  std::set<std::string> unread_entities;
  std::set<std::string> unread_fields;
  for (const Problem& p : unread) {
    unread_entities.insert(entity_of(p.path));
    unread_fields.insert(field_of(p.path));
  }
  std::vector<Problem> beside;
  for (Problem& p : validate(config)) {
    const std::string entity = entity_of(p.path);
    const std::string field = field_of(p.path);
    static const std::set<std::string> kReferences{"upstream", "interfaces", "system", "interface"};
    const bool reference = field.size() > entity.size() && kReferences.count(field.substr(entity.size() + 1)) != 0;
    if (unread_entities.count(entity) != 0 &&
        (!reference || unread_fields.count(field) != 0 || unread_fields.count(entity) != 0)) {
      continue;
    }
    beside.push_back(std::move(p));
  }
  return beside;
}

namespace {

// load_yaml, in the text with its surrogate pairs joined.
LoadResult load_joined(std::string_view text, std::string_view file, LoadFor purpose, Joins& joins) {
  YAML::Node root;
  if (std::optional<Problem> p = read_one_document(text, std::string(file), root, joins)) return std::vector<Problem>{*p};
  Reader reader{std::string(file)};
  auto config = std::make_shared<Config>();
  try {
    reader.config(root, *config);
  } catch (const YAML::Exception& e) {
    return std::vector<Problem>{
        Problem{"", reader_message(e), std::string(file), e.mark.line + 1, e.mark.column + 1}};
  }
  std::vector<Problem> problems = std::move(reader.problems());
  // What the file's values break beyond their own fields (ranges, references).
  for (Problem& p : problems_beside(*config, problems)) {
    reader.locate(p);
    problems.push_back(std::move(p));
  }
  if (purpose.write && problems.empty()) {
    for (Problem& p : write_problems(*config, purpose.before)) {
      reader.locate(p);
      problems.push_back(std::move(p));
    }
  }
  if (!problems.empty()) return problems;
  return std::shared_ptr<const Config>(std::move(config));
}

}  // namespace

LoadResult load_yaml(std::string_view text, std::string_view file, LoadFor purpose) {
  Joins joins;
  LoadResult loaded = load_joined(text, file, purpose, joins);
  if (auto* problems = std::get_if<std::vector<Problem>>(&loaded)) as_sent(*problems, joins);
  return loaded;
}

namespace {

// parse_entity, in the text with its surrogate pairs joined.
template <class T, class F>
EntityResult<T> parse_joined(std::string_view text, F read, Joins& joins, T* partial) {
  Reader reader{""};
  T value;
  YAML::Node root;
  if (std::optional<Problem> p = read_one_document(text, "", root, joins)) return std::vector<Problem>{*p};
  if (!root.IsDefined() || root.IsNull()) {
    return std::vector<Problem>{Problem{"", "is empty: expected a mapping of fields"}};
  }
  try {
    value = read(reader, root);
  } catch (const YAML::Exception& e) {
    return std::vector<Problem>{Problem{"", reader_message(e), "", e.mark.line + 1, e.mark.column + 1}};
  }
  if (!reader.problems().empty()) {
    if (partial != nullptr) *partial = std::move(value);
    return std::move(reader.problems());
  }
  return value;
}

template <class T, class F>
EntityResult<T> parse_entity(std::string_view text, F read, T* partial) {
  Joins joins;
  EntityResult<T> parsed = parse_joined<T>(text, read, joins, partial);
  if (auto* problems = std::get_if<std::vector<Problem>>(&parsed)) as_sent(*problems, joins);
  return parsed;
}

}  // namespace

EntityResult<System> parse_system(std::string_view text, System* read) {
  return parse_entity<System>(text, [](Reader& r, const YAML::Node& n) { return r.one_system(n); }, read);
}
EntityResult<Interface> parse_interface(std::string_view text, Interface* read) {
  return parse_entity<Interface>(text, [](Reader& r, const YAML::Node& n) { return r.one_interface(n); }, read);
}
EntityResult<Upstream> parse_upstream(std::string_view text, Upstream* read) {
  return parse_entity<Upstream>(text, [](Reader& r, const YAML::Node& n) { return r.one_upstream(n); }, read);
}
EntityResult<Grant> parse_grant(std::string_view text, Grant* read) {
  return parse_entity<Grant>(text, [](Reader& r, const YAML::Node& n) { return r.one_grant(n); }, read);
}

LoadResult load_yaml_file(const std::string& path, LoadFor purpose) {
  // Said with the system's reason (No such file or directory, Permission denied): "cannot read the
  // file" alone left a mistyped path, a file's mode and a missing mount to be told apart by hand.
  const auto problem = [&](std::string message) { return std::vector<Problem>{Problem{"", std::move(message), path}}; };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return problem(std::string("cannot read the file: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return problem("is a directory, not a file");
  }
  std::string text;
  int error = 0;
  char buffer[16384];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      error = errno;
      break;
    }
  }
  ::close(fd);
  if (error != 0) return problem(std::string("cannot read the file: ") + std::strerror(error));
  return load_yaml(text, path, purpose);
}

std::string to_yaml(const Config& c) {
  std::ostringstream out;
  out << "listen: " << quote(c.listen) << "\n";
  out << "admin_listen: " << quote(c.admin_listen) << "\n";
  out << "store: " << quote(c.store) << "\n";
  out << "fleet_size: " << c.fleet_size << "\n";
  out << "store_timeout: " << format_duration(c.store_timeout) << "\n";
  out << "system_key_header: " << quote(c.system_key_header) << "\n";
  out << "language: " << to_string(c.language) << "\n";
  out << "rate_limit_headers: " << to_string(c.rate_limit_headers) << "\n";
  out << "max_body_bytes: " << c.max_body_bytes << "\n";
  out << "header_timeout: " << format_duration(c.header_timeout) << "\n";
  out << "send_timeout: " << format_duration(c.send_timeout) << "\n";
  out << "drain_delay: " << format_duration(c.drain_delay) << "\n";
  out << "drain_timeout: " << format_duration(c.drain_timeout) << "\n";
  out << "access_log: " << quote(c.access_log) << "\n";
  out << "decide_client_ip_from: " << strings_flow(c.decide_client_ip_from) << "\n";
  if (!c.trusted_proxies.empty()) out << "trusted_proxies: " << strings_flow(c.trusted_proxies) << "\n";
  out << "upstreams:" << (c.upstreams.empty() ? " []" : "") << "\n";
  for (const Upstream& u : c.upstreams) {
    out << "  - name: " << quote(u.name) << "\n";
    std::vector<std::string> targets;
    for (const Target& t : u.targets) targets.push_back(to_string(t));
    out << "    targets: " << strings_flow(targets) << "\n";
    out << "    connect_timeout: " << format_duration(u.connect_timeout) << "\n";
    out << "    timeout: " << format_duration(u.timeout) << "\n";
    out << "    max_idle_connections: " << u.max_idle_connections << "\n";
    if (u.failure_statuses != Upstream::default_failure_statuses()) {
      std::vector<std::string> statuses;
      for (std::int32_t s : u.failure_statuses) statuses.push_back(std::to_string(s));
      out << "    failure_statuses: [";
      for (std::size_t i = 0; i < statuses.size(); ++i) out << (i ? ", " : "") << statuses[i];
      out << "]\n";
    }
    out << "    breaker: " << describe(u.breaker) << "\n";
  }
  out << "systems:" << (c.systems.empty() ? " []" : "") << "\n";
  for (const System& s : c.systems) {
    out << "  - key: " << quote(s.key) << "\n";
    if (!s.description.empty()) out << "    description: " << quote(s.description) << "\n";
    out << "    enabled: " << (s.enabled ? "true" : "false") << "\n";
    if (s.auth != Auth::kKey) out << "    auth: " << to_string(s.auth) << "\n";
    if (!s.credentials.empty()) out << "    credentials:\n";
    for (const Credential& k : s.credentials) {
      out << "      - {id: " << quote(k.id) << ", kind: " << to_string(k.kind);
      if (!k.api_key_sha256.empty()) out << ", api_key_sha256: " << quote(k.api_key_sha256);
      if (!k.sealed_secret.empty()) out << ", sealed_secret: " << quote(k.sealed_secret);
      out << ", created: " << quote(format_time(k.created));
      if (k.expires) out << ", expires: " << quote(format_time(*k.expires));
      out << "}\n";
    }
    std::vector<std::string> ids = s.interfaces;
    if (s.all_interfaces) ids.insert(ids.begin(), "*");
    out << "    interfaces: " << strings_flow(ids) << "\n";
    limits_block(out, s.limits, "    ");
  }
  out << "interfaces:" << (c.interfaces.empty() ? " []" : "") << "\n";
  for (const Interface& f : c.interfaces) {
    out << "  - id: " << quote(f.id) << "\n";
    if (!f.description.empty()) out << "    description: " << quote(f.description) << "\n";
    if (!f.methods.empty()) out << "    methods: " << strings_flow(f.methods) << "\n";
    out << "    path: " << quote(f.path) << "\n";
    out << "    upstream: " << quote(f.upstream) << "\n";
    out << "    enabled: " << (f.enabled ? "true" : "false") << "\n";
    out << "    public: " << (f.is_public ? "true" : "false") << "\n";
    if (f.concurrency) out << "    concurrency: " << *f.concurrency << "\n";
    if (f.concurrency_lease_timeout) {
      out << "    concurrency_lease_timeout: " << format_duration(*f.concurrency_lease_timeout) << "\n";
    }
    if (f.timeout) out << "    timeout: " << format_duration(*f.timeout) << "\n";
    limits_block(out, f.limits, "    ");
  }
  out << "grants:" << (c.grants.empty() ? " []" : "") << "\n";
  for (const Grant& g : c.grants) {
    out << "  - system: " << quote(g.system) << "\n";
    out << "    interface: " << quote(g.interface) << "\n";
    limits_block(out, g.limits, "    ");
  }
  return out.str();
}

}  // namespace sluice::config
