// Test helper: a configuration from YAML text, each of its problems reported as a test failure.
// Thread-compatible.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "config/yaml.h"

namespace sluice::testing {

inline std::shared_ptr<const config::Config> load_config(const std::string& text,
                                                         const std::string& file = "test.yaml") {
  auto r = config::load_yaml(text, file);
  if (auto* problems = std::get_if<std::vector<config::Problem>>(&r)) {
    for (const auto& p : *problems) ADD_FAILURE() << p.to_string();
    return nullptr;
  }
  return std::get<std::shared_ptr<const config::Config>>(r);
}

}  // namespace sluice::testing
