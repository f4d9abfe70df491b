#include "gateway/stats.h"

namespace sluice::gateway {

Stats::Stats(std::size_t shards, const Clock& clock)
    : clock_(clock),
      shard_count_(std::max<std::size_t>(shards, 1)),
      shards_(std::make_unique<Shard[]>(std::max<std::size_t>(shards, 1))) {}

std::int64_t Stats::now_second() const {
  return std::chrono::duration_cast<std::chrono::seconds>(clock_.now()).count();
}

void Stats::count(std::size_t shard, std::string_view system, std::string_view interface, Reason reason) {
  const std::int64_t second = now_second();
  Shard& s = shards_[shard % shard_count_];
  std::lock_guard lock(s.mu);
  Bucket& b = s.buckets[static_cast<std::size_t>(second % kSeconds)];
  if (b.second != second) {
    b.second = second;
    b.counts.clear();
  }
  const auto key = std::tuple<std::string_view, std::string_view, Reason>(system, interface, reason);
  auto it = b.counts.find(key);
  if (it == b.counts.end()) it = b.counts.emplace(Key(system, interface, reason), 0).first;
  ++it->second;
}

Stats::View Stats::view() const {
  View v;
  v.now = now_second();
  const std::int64_t first = v.now - kSeconds + 1;
  auto add = [](Series& series, Reason reason, std::size_t at, std::int64_t n) {
    if (reason == Reason::kOk) {
      series.admitted[at] += n;
      return;
    }
    auto& counts = series.rejected[to_string(reason)];
    if (counts.empty()) counts.assign(kSeconds, 0);
    counts[at] += n;
  };
  for (std::size_t i = 0; i < shard_count_; ++i) {
    const Shard& s = shards_[i];
    std::lock_guard lock(s.mu);
    for (const Bucket& b : s.buckets) {
      if (b.second < first || b.second > v.now) continue;
      const auto at = static_cast<std::size_t>(b.second - first);
      for (const auto& [key, n] : b.counts) {
        const auto& [system, interface, reason] = key;
        add(v.total, reason, at, n);
        if (!system.empty()) add(v.systems[system], reason, at, n);
        if (!interface.empty()) add(v.interfaces[interface], reason, at, n);
      }
    }
  }
  return v;
}

}  // namespace sluice::gateway
