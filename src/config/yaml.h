// The configuration as a YAML (or JSON) file: loading with precise errors (file:line:column and the
// field's path), and export back to YAML. Pure functions; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.h"

namespace sluice::config {

// A loaded and validated configuration, or everything wrong with the text (never an empty list).
using LoadResult = std::variant<std::shared_ptr<const Config>, std::vector<Problem>>;

// What a configuration is loaded for: to be read (served), or to be written into a database, which
// also holds it to write_problems() against `before`, the configuration written over (null: none).
struct LoadFor {
  bool write = false;
  const Config* before = nullptr;
};

// Parses and validates YAML text; `file` names it in the problems.
LoadResult load_yaml(std::string_view text, std::string_view file, LoadFor purpose = {});
// Reads a file, then load_yaml.
LoadResult load_yaml_file(const std::string& path, LoadFor purpose = {});

// One entity as YAML or JSON text (JSON is YAML), e.g. an admin API request body, read on its own:
// the problems' paths start at its fields ("limits[0].period"). References to other entities are
// checked later, by validate() on the whole configuration. With problems, *read (when given) gets
// what did read of it, defaults standing in for the rest: for problems_beside.
template <class T>
using EntityResult = std::variant<T, std::vector<Problem>>;
EntityResult<System> parse_system(std::string_view text, System* read = nullptr);
EntityResult<Interface> parse_interface(std::string_view text, Interface* read = nullptr);
EntityResult<Upstream> parse_upstream(std::string_view text, Upstream* read = nullptr);
EntityResult<Grant> parse_grant(std::string_view text, Grant* read = nullptr);

// Of what validate() finds in a configuration some fields of which did not read (`unread`: the
// problems that said so, paths from the configuration's top), what to report beside them: every
// problem of an entity that read whole; of one that did not, only its references to others (which
// depend on nothing else), when the reference itself read. An entity with a problem already is not
// judged on what was read of it: a limit that could not be made is missing from its list, which
// moves the others, and a check across fields would judge a default standing in for a field.
std::vector<Problem> problems_beside(const Config& config, const std::vector<Problem>& unread);

// The configuration as YAML that load_yaml reads back into an equal configuration.
std::string to_yaml(const Config& config);

}  // namespace sluice::config
