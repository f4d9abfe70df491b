// The configuration as JSON: the admin API's bodies and `sluice config export --format json`. The
// field names and values are the YAML file's, so load_yaml and parse_system & co read this JSON back
// (JSON is YAML) into equal values. Pure functions; thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"

namespace sluice::config {

boost::json::object to_json(const Config& config);
boost::json::object to_json(const Upstream& upstream);
boost::json::object to_json(const System& system);
boost::json::object to_json(const Interface& interface);
boost::json::object to_json(const Grant& grant);
boost::json::object to_json(const Credential& credential);
boost::json::object to_json(const LimitRule& rule);

// The configuration's settings without its four lists (listen, store, language, ...).
boost::json::object settings_json(const Config& config);

// JSON text indented by two spaces, one member per line, for people and diffs.
std::string pretty(const boost::json::value& value);

// The first key that an object in this JSON text has twice, with the keys of the objects around
// it ("headers.X-Api-Key"); nothing when no key repeats, or when the text is not JSON (which
// parsing it says). Boost.JSON keeps the last of two equal keys without a word, where the YAML
// loader refuses them: requests and admin bodies are checked with this, so that a field means
// one thing to every reader of the text.
std::optional<std::string> repeated_key(std::string_view text);

}  // namespace sluice::config
