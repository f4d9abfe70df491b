// A flag's value given empty (an unset variable in a script) is refused as misuse (exit 2), not
// taken for the default: `--db "$DB"` with DB unset must not write a database nobody meant.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace sluice::cli {

inline const CLI::Validator kNotEmpty(
    [](const std::string& value) { return value.empty() ? std::string("must not be empty") : std::string(); },
    "NOT EMPTY");

}  // namespace sluice::cli
