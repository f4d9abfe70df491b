// Options (the flags of `sluice bench` as given) and Plan (the run they ask for, checked, requests
// serialised). Values; make_plan is a pure function apart from reading --body-file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/schedule.h"
#include "sluice/clock.h"
#include "sluice/result.h"

namespace sluice::bench {

// The flags as the user gave them; durations and lists still as text, so that make_plan can say
// which flag is wrong and why.
struct Options {
  std::string url;
  std::optional<int> connections;  // default kDefaultConnections; a burst opens one per request
  std::optional<int> threads;      // default: one per core, at most one per connection
  // The load: at most one of burst, requests+duration (closed loop), rate, ramp.
  std::optional<std::uint64_t> burst;
  std::optional<std::uint64_t> requests;
  std::optional<std::string> duration;  // "10s"; the default load is 10 s of closed loop
  std::optional<double> rate;           // per second
  std::optional<std::string> ramp;      // "FROM:TO" per second, over --duration
  // The requests.
  std::string method = "GET";
  std::vector<std::string> headers;  // "Name: value"
  std::optional<std::string> body;
  std::optional<std::string> body_file;
  std::optional<std::string> vary_header;  // "Name=v1,v2,v3"
  std::string timeout = "10s";
  // The assertions.
  std::optional<std::string> expect_status;  // "200,429"
  std::optional<std::uint64_t> expect_admitted;
  std::optional<std::uint64_t> expect_admitted_max;

  static constexpr int kDefaultConnections = 10;
};

enum class Mode {
  kBurst,     // one connection per request, all requests written at one instant
  kRequests,  // closed loop: each connection sends its next request when the last is answered
  kDuration,  // closed loop for a time
  kRate,      // open loop: requests leave on a schedule, whatever the server does
};

struct Target {
  std::string host;         // as resolved: a name, an IPv4 address, or an IPv6 one without brackets
  std::string port;         // "80" when the URL has none
  std::string path;         // the request-target: path and query, "/" at least
  std::string host_header;  // host[:port] as in the URL
};

struct Expectations {
  std::vector<int> status;  // empty: not checked
  std::optional<std::uint64_t> admitted;
  std::optional<std::uint64_t> admitted_max;
};

struct Plan {
  std::string url;
  Target target;
  Mode mode = Mode::kDuration;
  int connections = 0;
  int threads = 0;
  std::uint64_t requests = 0;        // burst and kRequests; for kRate, schedule.count()
  Nanos duration{0};                 // kDuration, and kRate when given as a time
  std::optional<Schedule> schedule;  // kRate: constant or ramp
  bool ramp = false;                 // kRate given by --ramp, even with FROM equal to TO
  bool head = false;                 // HEAD: responses carry no body whatever their headers say
  bool close_each = false;           // the request says "Connection: close": one request a connection
  // One serialised request per value of the varied header (one in all when nothing varies).
  std::vector<std::string> wire;
  std::string vary_name;
  std::vector<std::string> vary_values;
  Nanos timeout{0};  // for a connection to open, and for each response
  Nanos bucket{0};   // the report's time step: 1 s, or 100 ms for a burst
  Expectations expect;

  std::string describe() const;  // "burst of 100 requests", "1000 req/s for 10s", ...
};

// Checks the options and builds the plan, or says in one line which flag is wrong.
Result<Plan> make_plan(const Options& options, int cores);

}  // namespace sluice::bench
