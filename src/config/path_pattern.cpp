#include "config/path_pattern.h"

namespace sluice::config {

std::optional<PathPattern> PathPattern::parse(std::string_view text, std::string* error) {
  auto fail = [&](std::string message) -> std::optional<PathPattern> {
    *error = std::move(message);
    return std::nullopt;
  };
  if (text.empty() || text[0] != '/') return fail("must start with '/'");
  if (text.find_first_of("?# \t") != std::string_view::npos) {
    return fail("must be a path only (no query, fragment or spaces)");
  }
  PathPattern p;
  if (text == "/") return p;
  std::string_view rest = text.substr(1);
  while (true) {
    const std::size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    const bool last = slash == std::string_view::npos;
    if (seg.empty()) return fail("has an empty segment ('//' or a trailing '/')");
    if (seg == "*") {
      if (!last) return fail("'*' may only be the last segment");
      p.prefix_ = true;
      break;
    }
    if (seg == "." || seg == "..") return fail("must not contain '.' or '..' segments");
    if (seg.front() == '{' || seg.back() == '}') {
      if (seg.size() < 3 || seg.front() != '{' || seg.back() != '}' ||
          seg.substr(1, seg.size() - 2).find_first_of("{}/*") != std::string_view::npos) {
        return fail("a parameter is a whole segment, like {id}");
      }
      p.segments_.push_back({Kind::kParam, std::string(seg.substr(1, seg.size() - 2))});
      ++p.params_;
    } else {
      if (seg.find_first_of("{}*") != std::string_view::npos) {
        return fail("'*' and '{name}' must be whole segments");
      }
      p.segments_.push_back({Kind::kLiteral, std::string(seg)});
    }
    if (last) break;
    rest = rest.substr(slash + 1);
  }
  return p;
}

bool PathPattern::matches(std::string_view path) const {
  if (path.empty() || path[0] != '/') return false;
  std::string_view rest = path.substr(1);
  for (const Segment& seg : segments_) {
    if (rest.data() == nullptr) return false;  // the path has no more segments
    const std::size_t slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    if (seg.kind == Kind::kLiteral ? part != seg.text : part.empty()) return false;
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  }
  if (prefix_) return true;
  // Nothing may follow an exact or parameter pattern (a single trailing '/' aside from "/").
  return rest.data() == nullptr || (segments_.empty() && rest.empty());
}

int PathPattern::compare_specificity(const PathPattern& other) const {
  // Ranks per position: a literal 0, a parameter 1, the end of an exact pattern 2 (it beats a
  // wildcard, which may match the end too), the wildcard 3.
  auto rank = [](const PathPattern& p, std::size_t i) {
    if (i < p.segments_.size()) return p.segments_[i].kind == Kind::kLiteral ? 0 : 1;
    return p.prefix_ ? 3 : 2;
  };
  const std::size_t n = std::max(segments_.size(), other.segments_.size()) + 1;
  for (std::size_t i = 0; i < n; ++i) {
    const int a = rank(*this, i);
    const int b = rank(other, i);
    if (a != b) return a < b ? -1 : 1;
    if (a >= 2) return 0;
  }
  return 0;
}

std::string PathPattern::shape() const {
  std::string s;
  for (const Segment& seg : segments_) s += seg.kind == Kind::kLiteral ? "/" + seg.text : "/{}";
  if (prefix_) s += "/*";
  return s.empty() ? "/" : s;
}

}  // namespace sluice::config
