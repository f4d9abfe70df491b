// An interface's path pattern: exact (/api/orders), parameter (/api/orders/{id}) or prefix
// (/api/orders/*), and the order that says which of two matching patterns is the more specific.
// Plain values; thread-compatible.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

class PathPattern {
 public:
  enum class Kind : std::uint8_t { kLiteral, kParam };

  struct Segment {
    Kind kind = Kind::kLiteral;
    std::string text;  // the literal, or the parameter's name
  };

  // Parses a pattern; on failure returns nullopt and says why in *error.
  static std::optional<PathPattern> parse(std::string_view text, std::string* error);

  // Whether the path (no query string) matches: every segment matches in turn and, for a prefix
  // pattern, anything may follow (including nothing: /api/orders/* matches /api/orders).
  bool matches(std::string_view path) const;

  // Negative when this pattern is more specific than `other`: segment by segment a literal beats a
  // parameter, which beats the rest-of-path wildcard, and a pattern that ends beats one whose
  // wildcard would go on. Zero for patterns of the same shape (which can only both match a path
  // when they are the same pattern).
  int compare_specificity(const PathPattern& other) const;

  // The pattern with parameter names dropped ({id} -> {}), for finding duplicates.
  std::string shape() const;
  bool is_exact() const { return !prefix_ && params_ == 0; }
  bool is_prefix() const { return prefix_; }
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  std::vector<Segment> segments_;
  bool prefix_ = false;
  int params_ = 0;
};

}  // namespace sluice::config
