// Stats: requests per second over the last minute, by system and by interface, admitted and rejected
// by reason — what GET /admin/v1/stats serves and the console draws. Thread-safe: each worker thread
// counts into its own shard (one uncontended lock per request); a read sums them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "gateway/policy.h"
#include "sluice/clock.h"

namespace sluice::gateway {

class Stats {
 public:
  static constexpr int kSeconds = 60;

  // clock: the wall clock (seconds since the Unix epoch are the buckets' names).
  Stats(std::size_t shards, const Clock& clock);

  // One answered request: its system and interface (empty when none was identified) and its reason
  // (kOk: admitted; anything else: rejected for that reason).
  void count(std::size_t shard, std::string_view system, std::string_view interface, Reason reason);

  // One system's or interface's last minute: kSeconds counts each, oldest first; the last is the
  // second in progress.
  struct Series {
    std::vector<std::int64_t> admitted = std::vector<std::int64_t>(kSeconds, 0);
    std::map<std::string, std::vector<std::int64_t>> rejected;  // by reason name
  };
  struct View {
    std::int64_t now = 0;  // the Unix second of the last bucket
    // The whole instance, each request once: also those refused before a system or an interface
    // was known (a malformed request, a header too large), which count for neither.
    Series total;
    std::map<std::string, Series> systems;
    std::map<std::string, Series> interfaces;
  };
  View view() const;

 private:
  using Key = std::tuple<std::string, std::string, Reason>;
  struct Bucket {
    std::int64_t second = -1;
    std::map<Key, std::int64_t, std::less<>> counts;
  };
  struct alignas(64) Shard {
    mutable std::mutex mu;
    Bucket buckets[kSeconds];  // by second % kSeconds; guarded by mu
  };

  std::int64_t now_second() const;

  const Clock& clock_;
  std::size_t shard_count_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace sluice::gateway
