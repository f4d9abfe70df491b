// Loads the shared test vectors (tests/vectors/<name>.json) for the core's and the Redis store's
// tests. Plain functions; the loaded cases are plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/limit.h"

namespace sluice::testing {

struct VectorStep {
  std::int64_t t_us = 0;
  std::int64_t cost = 0;  // 0: a peek
  bool allowed = false;
  bool cost_exceeds_limit = false;
  std::int64_t remaining = 0;
  std::int64_t retry_after_us = 0;
  std::int64_t reset_after_us = 0;
  // A release step (concurrency): the index of the step whose lease it releases, else -1.
  std::int64_t release_of = -1;
  bool released = false;
};

struct VectorCase {
  std::string name;
  Limit limit;
  std::vector<VectorStep> steps;
};

// Reads <SLUICE_VECTORS_DIR>/<name>.json; throws std::runtime_error with the reason on bad input.
std::vector<VectorCase> load_vectors(const std::string& name);

}  // namespace sluice::testing
