#include "vectors.h"

#include <boost/json.hpp>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sluice::testing {
namespace {

namespace json = boost::json;

Limit limit_from(const json::object& o) {
  const std::string algorithm(o.at("algorithm").as_string());
  auto i = [&](const char* field) { return o.at(field).to_number<std::int64_t>(); };
  auto us = [&](const char* field) { return Nanos{Micros{i(field)}}; };
  Result<Limit> r = invalid_argument("unknown algorithm " + algorithm);
  if (algorithm == "token_bucket") {
    r = Limit::token_bucket({.capacity = i("capacity"),
                             .refill_tokens = i("refill_tokens"),
                             .refill_period = us("refill_period_us"),
                             .refill = o.at("refill").as_string() == "interval" ? Refill::kInterval
                                                                               : Refill::kContinuous});
  } else if (algorithm == "gcra") {
    r = Limit::gcra({.limit = i("limit"), .period = us("period_us"), .burst = i("burst")});
  } else if (algorithm == "fixed_window") {
    r = Limit::fixed_window({.limit = i("limit"), .period = us("period_us")});
  } else if (algorithm == "sliding_window") {
    r = Limit::sliding_window({.limit = i("limit"), .period = us("period_us")});
  } else if (algorithm == "sliding_log") {
    r = Limit::sliding_log({.limit = i("limit"), .period = us("period_us")});
  } else if (algorithm == "concurrency") {
    r = Limit::concurrency({.limit = i("limit"), .lease_timeout = us("lease_timeout_us")});
  }
  if (!r.ok()) throw std::runtime_error("bad limit in vectors: " + r.error().message);
  return *r;
}

}  // namespace

std::vector<VectorCase> load_vectors(const std::string& name) {
  const std::string path = std::string(SLUICE_VECTORS_DIR) + "/" + name + ".json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  const json::value doc = json::parse(text.str());
  std::vector<VectorCase> cases;
  for (const json::value& c : doc.at("cases").as_array()) {
    const json::object& co = c.as_object();
    VectorCase vc{std::string(co.at("name").as_string()), limit_from(co.at("limit").as_object()), {}};
    for (const json::value& s : co.at("steps").as_array()) {
      const json::object& so = s.as_object();
      VectorStep step;
      step.t_us = so.at("t_us").to_number<std::int64_t>();
      if (so.contains("op")) {
        step.release_of = so.at("of_step").to_number<std::int64_t>();
        step.released = so.at("released").as_bool();
      } else {
        step.cost = so.at("cost").to_number<std::int64_t>();
        step.allowed = so.at("allowed").as_bool();
        step.cost_exceeds_limit = so.at("cost_exceeds_limit").as_bool();
        step.remaining = so.at("remaining").to_number<std::int64_t>();
        step.retry_after_us = so.at("retry_after_us").to_number<std::int64_t>();
        step.reset_after_us = so.at("reset_after_us").to_number<std::int64_t>();
      }
      vc.steps.push_back(step);
    }
    cases.push_back(std::move(vc));
  }
  return cases;
}

}  // namespace sluice::testing
