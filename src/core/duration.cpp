#include "core/duration.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <utility>

namespace sluice {
namespace {

constexpr std::int64_t kUs = 1000;
constexpr std::int64_t kMs = 1000 * kUs;
constexpr std::int64_t kS = 1000 * kMs;
constexpr std::int64_t kM = 60 * kS;
constexpr std::int64_t kH = 60 * kM;
constexpr std::int64_t kD = 24 * kH;

constexpr std::array<std::pair<std::string_view, std::int64_t>, 7> kUnits{{
    {"d", kD}, {"h", kH}, {"m", kM}, {"s", kS}, {"ms", kMs}, {"us", kUs}, {"ns", 1},
}};

}  // namespace

std::optional<Nanos> parse_duration(std::string_view text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data()) return std::nullopt;
  const std::string_view unit(ptr, static_cast<std::size_t>(end - ptr));
  for (const auto& [name, ns] : kUnits) {
    if (unit != name) continue;
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / ns)) {
      return std::nullopt;
    }
    return Nanos{static_cast<std::int64_t>(value) * ns};
  }
  return std::nullopt;
}

std::string format_duration(Nanos d) {
  const std::int64_t ns = d.count();
  if (ns == 0) return "0s";
  for (const auto& [name, unit] : kUnits) {
    if (ns % unit == 0) return std::to_string(ns / unit) + std::string(name);
  }
  return std::to_string(ns) + "ns";
}

}  // namespace sluice
