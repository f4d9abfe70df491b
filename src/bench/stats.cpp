#include "bench/stats.h"

#include <algorithm>
#include <numeric>

namespace sluice::bench {

std::uint64_t Stats::responses() const {
  return std::accumulate(status.begin(), status.end(), std::uint64_t{0});
}

std::uint64_t Stats::error_count() const {
  std::uint64_t n = 0;
  for (const auto& [reason, count] : errors) n += count;
  return n;
}

Counts& Stats::step_at(Nanos at, Nanos bucket) {
  const auto index =
      static_cast<std::size_t>(std::max<std::int64_t>(0, at.count() / bucket.count()));
  if (index >= timeline.size()) timeline.resize(index + 1);
  return timeline[index];
}

void Stats::merge(const Stats& other) {
  latency.merge(other.latency);
  for (std::size_t i = 0; i < status.size(); ++i) status[i] += other.status[i];
  for (const auto& [reason, count] : other.errors) errors[reason] += count;
  if (other.timeline.size() > timeline.size()) timeline.resize(other.timeline.size());
  for (std::size_t i = 0; i < other.timeline.size(); ++i) timeline[i] += other.timeline[i];
  if (other.callers.size() > callers.size()) callers.resize(other.callers.size());
  for (std::size_t i = 0; i < other.callers.size(); ++i) callers[i] += other.callers[i];
  rate_limit.merge(other.rate_limit);
  last_completion = std::max(last_completion, other.last_completion);
  retries += other.retries;
  if (other.max_send_lag > max_send_lag) {
    max_send_lag = other.max_send_lag;
    connection_wait_at_max_lag = other.connection_wait_at_max_lag;
  }
  max_connection_wait = std::max(max_connection_wait, other.max_connection_wait);
  if (other.first_write) {
    first_write = first_write ? std::min(*first_write, *other.first_write) : *other.first_write;
    last_write = last_write ? std::max(*last_write, *other.last_write) : *other.last_write;
  }
}

}  // namespace sluice::bench
