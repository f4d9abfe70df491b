// Durations as people write them: "250ms", "15s", "1m", "2h", "7d". Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sluice/clock.h"

namespace sluice {

// "1500ms" -> 1.5 s. Accepts a non-negative integer followed by ns, us, ms, s, m, h or d.
std::optional<Nanos> parse_duration(std::string_view text);

// The shortest exact spelling: 60 s -> "1m", 1.5 s -> "1500ms".
std::string format_duration(Nanos d);

}  // namespace sluice
