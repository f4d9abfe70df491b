#include "sluice/local_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/flat_table.h"
#include "core/key_hash.h"
#include "sluice/spin_lock.h"
#include "sluice/algorithms.h"

namespace sluice {

using detail::FlatTable;
using detail::Hash128;

namespace {

using LogPtr = std::unique_ptr<SlidingLogState>;
using LeasesPtr = std::unique_ptr<ConcurrencyState>;
using Fixed = std::array<std::uint64_t, 2>;  // any fixed-size state, bit for bit

template <class P>
constexpr bool kIsFixed = !std::is_same_v<P, LogPtr> && !std::is_same_v<P, LeasesPtr>;

static_assert(sizeof(GcraState) == sizeof(Fixed) && sizeof(IntervalBucketState) == sizeof(Fixed) &&
              sizeof(FixedWindowState) == sizeof(Fixed) &&
              sizeof(SlidingWindowState) == sizeof(Fixed));

// Runs a decision on a table's payload, creating heap states on first use.
template <class P>
Decision run(P& payload, const Limit& limit, Nanos now, std::int64_t cost, std::uint64_t lease) {
  if constexpr (std::is_same_v<P, LogPtr>) {
    if (!payload) payload = std::make_unique<SlidingLogState>();
    return decide(*payload, limit, now, cost);
  } else if constexpr (std::is_same_v<P, LeasesPtr>) {
    if (!payload) payload = std::make_unique<ConcurrencyState>();
    return decide(*payload, limit, now, cost, lease);
  } else {
    (void)lease;
    return decide(payload, limit, now, cost);
  }
}

std::int64_t to_us(Nanos t) { return t.count() > 0 ? t.count() / 1000 : 0; }

[[gnu::cold, gnu::noinline]] Error bad_cost(std::int64_t cost) {
  return invalid_argument("cost must be between 1 and 2^40 (1099511627776), got " +
                          std::to_string(cost));
}

bool valid_cost(std::int64_t cost) { return cost >= 1 && cost <= kMaxLimit; }

std::size_t pow2_at_least(std::size_t n) { return std::bit_ceil(std::max<std::size_t>(n, 1)); }

// The fewest keys a shard's share of max_keys holds (see the constructor): enough that keys spread by
// their hash fill the shards nearly evenly.
constexpr std::size_t kMinKeysPerShard = 1024;

// The kind of state a limit keeps: limits of one kind on one key share its state (as RedisStore's
// keys do, by their suffix).
int state_kind(const Limit& limit) {
  switch (limit.algorithm()) {
    case Algorithm::kTokenBucket: return limit.params().refill == Refill::kInterval ? 1 : 0;
    case Algorithm::kGcra: return 0;
    case Algorithm::kFixedWindow: return 2;
    case Algorithm::kSlidingWindow: return 3;
    case Algorithm::kSlidingLog: return 4;
    case Algorithm::kConcurrency: return 5;
  }
  return 0;
}

}  // namespace

Status validate(std::span<const LimitRequest> requests, std::span<Decision> decisions) {
  if (requests.size() != decisions.size()) {
    return invalid_argument("acquire_all needs one decision slot per request");
  }
  for (const LimitRequest& r : requests) {
    if (r.limit == nullptr) return invalid_argument("a limit request has no limit");
    if (!valid_cost(r.cost)) return bad_cost(r.cost);
  }
  // Two different limits of one kind on one key would decide one state by two rules ("10 a second
  // and 3 an hour" on "user:42": each would count the other's requests in its own window). One
  // limit named twice on a key counts twice, as one call of both costs would.
  for (std::size_t i = 1; i < requests.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (requests[i].key == requests[j].key && state_kind(*requests[i].limit) == state_kind(*requests[j].limit) &&
          !(*requests[i].limit == *requests[j].limit)) {
        return invalid_argument("two limits of one kind (" + requests[j].limit->to_string() + ", " +
                                requests[i].limit->to_string() + ") name the key '" + std::string(requests[i].key) +
                                "': a key holds one state of each kind, so give each limit a key of its own");
      }
    }
  }
  return {};
}

struct alignas(64) LocalStore::Shard {
  mutable detail::SpinLock mu;
  // The tables, one per kind of state; all guarded by mu.
  FlatTable<GcraState> gcra;
  FlatTable<IntervalBucketState> interval;
  FlatTable<FixedWindowState> fixed;
  FlatTable<SlidingWindowState> sliding;
  FlatTable<LogPtr> logs;
  FlatTable<LeasesPtr> leases;

  template <class F>
  decltype(auto) with_table(const Limit& limit, F&& f) {
    switch (limit.algorithm()) {
      case Algorithm::kTokenBucket:
        if (limit.params().refill == Refill::kInterval) return f(interval);
        return f(gcra);
      case Algorithm::kGcra: return f(gcra);
      case Algorithm::kFixedWindow: return f(fixed);
      case Algorithm::kSlidingWindow: return f(sliding);
      case Algorithm::kSlidingLog: return f(logs);
      case Algorithm::kConcurrency: return f(leases);
    }
    return f(gcra);  // not reached: every algorithm is handled above
  }

  std::size_t size() const {
    return gcra.size() + interval.size() + fixed.size() + sliding.size() + logs.size() +
           leases.size();
  }

  std::size_t memory_bytes() const {
    return gcra.memory_bytes() + interval.memory_bytes() + fixed.memory_bytes() +
           sliding.memory_bytes() + logs.memory_bytes() + leases.memory_bytes();
  }

  // Makes room for one more key: sweeps a little on every insert, and evicts at the cap.
  template <class P>
  void make_room(FlatTable<P>& table, std::int64_t now_us, std::size_t cap) {
    table.sweep(now_us, 4);
    if (size() < cap) return;
    gcra.sweep(now_us, 64);
    interval.sweep(now_us, 64);
    fixed.sweep(now_us, 64);
    sliding.sweep(now_us, 64);
    logs.sweep(now_us, 64);
    leases.sweep(now_us, 64);
    while (size() >= cap) {
      const std::size_t largest = std::max({gcra.size(), interval.size(), fixed.size(),
                                            sliding.size(), logs.size(), leases.size()});
      if (gcra.size() == largest) gcra.evict(16);
      else if (interval.size() == largest) interval.evict(16);
      else if (fixed.size() == largest) fixed.evict(16);
      else if (sliding.size() == largest) sliding.evict(16);
      else if (logs.size() == largest) logs.evict(16);
      else leases.evict(16);
    }
  }

  // Records the state a decision left: kept until it is full again, dropped when it already is.
  template <class P>
  static void settle(FlatTable<P>& table, typename FlatTable<P>::Slot& slot, std::int64_t now_us,
                     const Decision& d) {
    if (d.reset_after.count() <= 0) {
      table.erase(slot);
    } else {
      slot.expires_us = now_us + to_us(d.reset_after);
    }
  }

  // One decision on one key, under mu.
  template <class P>
  Decision decide_key(FlatTable<P>& table, const Hash128& h, const Limit& limit, Nanos now,
                      std::int64_t cost, std::uint64_t lease, std::size_t cap) {
    const std::int64_t now_us = to_us(now);
    // A key not held decides on a fresh state, kept only when it differs from a fresh one. One
    // Decision for both paths, so that it is built where the caller wants it (no copy: a copy of
    // the fields just written stalls on store forwarding).
    auto* slot = table.find(h);
    P fresh{};
    Decision d = run(slot != nullptr ? slot->payload : fresh, limit, now, cost, lease);
    if (slot != nullptr) {
      settle(table, *slot, now_us, d);
    } else if (d.reset_after.count() > 0) {
      make_room(table, now_us, cap);
      auto& inserted = table.insert(h);
      inserted.payload = std::move(fresh);
      inserted.expires_us = now_us + to_us(d.reset_after);
    }
    return d;
  }
};

namespace {

std::atomic<std::uint64_t> next_store_id{1};

// Long keys are hashed once per thread and then remembered by their address: a caller that decides
// the same long keys over and over (the gateway, whose limits' keys spell out their rules) pays a
// compare instead of a hash (about 430 instructions for 60 bytes). An entry is checked against the
// key's bytes and the store, so a key that changed or moved, or another store, is hashed afresh.
// Two-way sets, so that two keys whose addresses fall on one set do not take turns evicting each
// other on every request (with direct mapping, where the heap happened to put a snapshot's keys
// decided whether a proxied request hashed none of them or two: 800 instructions).
constexpr std::size_t kMemoMinBytes = 32;
struct MemoEntry {
  std::uint64_t store = 0;
  const char* at = nullptr;
  std::string key;
  detail::Hash128 hash{};
};
struct MemoSet {
  std::array<MemoEntry, 2> ways;
  std::uint8_t newest = 0;  // the way hit or filled last; a miss replaces the other
};
constexpr int kMemoSetBits = 5;
thread_local std::array<MemoSet, std::size_t{1} << kMemoSetBits> memo;

}  // namespace

LocalStore::LocalStore(LocalStoreOptions options)
    : clock_(options.clock != nullptr ? options.clock : &FastClock::instance()), id_(next_store_id.fetch_add(1)) {
  const std::size_t max_keys = options.max_keys != 0 ? options.max_keys : LocalStoreOptions{}.max_keys;
  std::size_t shards = options.shards;
  if (shards == 0) shards = 16 * std::max(1U, std::thread::hardware_concurrency());
  shards = pow2_at_least(shards);
  // A cap too small to share among the shards gets fewer of them: a shard at its share evicts
  // while the others have room, so a share of a few keys would evict the states of live limits.
  while (shards > 1 && max_keys / shards < kMinKeysPerShard) shards /= 2;
  shard_bits_ = static_cast<std::size_t>(std::countr_zero(shards));
  keys_per_shard_ = (max_keys + shards - 1) / shards;
  shards_ = std::make_unique<Shard[]>(shards);
  hash_ = std::make_unique<const detail::KeyHash>();
}

LocalStore::~LocalStore() = default;

detail::Hash128 LocalStore::hash_of(std::string_view key) const {
  if (key.size() < kMemoMinBytes) return FlatTable<GcraState>::usable((*hash_)(key));
  // Fibonacci hashing of the address: its top bits depend on all of it.
  const std::uint64_t at = reinterpret_cast<std::uintptr_t>(key.data());
  MemoSet& set = memo[(at * 0x9E3779B97F4A7C15ULL) >> (64 - kMemoSetBits)];
  const auto holds = [&](const MemoEntry& e) { return e.at == key.data() && e.store == id_ && e.key == key; };
  if (holds(set.ways[set.newest])) return set.ways[set.newest].hash;
  set.newest ^= 1;
  MemoEntry& e = set.ways[set.newest];
  if (holds(e)) return e.hash;
  e.hash = FlatTable<GcraState>::usable((*hash_)(key));
  e.store = id_;
  e.at = key.data();
  e.key.assign(key);
  return e.hash;
}

LocalStore::Shard& LocalStore::shard_for(std::uint64_t hash_hi) const {
  // The high bits pick the shard; the table uses the other word, so the two stay independent.
  const std::size_t index = shard_bits_ == 0 ? 0 : static_cast<std::size_t>(hash_hi >> (64 - shard_bits_));
  return shards_[index];
}

Result<Decision> LocalStore::acquire(std::string_view key, const Limit& limit, std::int64_t cost) {
  return acquire_at(clock_->now(), key, limit, cost);
}

Result<Decision> LocalStore::acquire_at(Nanos now, std::string_view key, const Limit& limit,
                                        std::int64_t cost) {
  if (!valid_cost(cost)) [[unlikely]] return bad_cost(cost);
  const Hash128 h = hash_of(key);
  const std::uint64_t lease =
      limit.algorithm() == Algorithm::kConcurrency ? next_lease_.fetch_add(1) : 0;
  Shard& shard = shard_for(h.hi);
  std::lock_guard lock(shard.mu);
  return Result<Decision>(std::in_place, [&] {
    return shard.with_table(limit, [&](auto& table) {
      return shard.decide_key(table, h, limit, now, cost, lease, keys_per_shard_);
    });
  });
}

Status LocalStore::acquire_all(std::span<const LimitRequest> requests,
                               std::span<Decision> decisions) {
  return acquire_all_at(clock_->now(), requests, decisions);
}

// Decides every request in turn, in place, then, when any was rejected, undoes the admitted ones in
// reverse order. Every shard involved stays locked throughout (locked in address order, so two
// calls cannot deadlock), so no other caller sees the intermediate states.
Status LocalStore::acquire_all_at(Nanos now, std::span<const LimitRequest> requests,
                                  std::span<Decision> decisions) {
  if (Status s = validate(requests, decisions); !s) return s;
  struct Step {
    Hash128 h;
    Shard* shard;
    bool existed;
    std::int64_t saved_expiry;
    Fixed saved;  // the fixed-size state before the decision
  };
  // A request rarely has more than a few limits: their bookkeeping stays on the stack then.
  constexpr std::size_t kInline = 8;
  const std::size_t n = requests.size();
  std::array<Step, kInline> inline_steps;
  std::array<Shard*, kInline> inline_shards;
  std::vector<Step> heap_steps;
  std::vector<Shard*> heap_shards;
  if (n > kInline) {
    heap_steps.resize(n);
    heap_shards.resize(n);
  }
  const std::span<Step> steps =
      n > kInline ? std::span(heap_steps) : std::span(inline_steps).first(n);
  std::span<Shard*> locked =
      n > kInline ? std::span(heap_shards) : std::span(inline_shards).first(n);
  for (std::size_t i = 0; i < n; ++i) {
    steps[i] = Step{};
    steps[i].h = hash_of(requests[i].key);
    steps[i].shard = &shard_for(steps[i].h.hi);
    locked[i] = steps[i].shard;
  }
  std::sort(locked.begin(), locked.end());
  locked = locked.first(
      static_cast<std::size_t>(std::unique(locked.begin(), locked.end()) - locked.begin()));
  for (Shard* s : locked) s->mu.lock();
  // Held until the call returns, or throws (a table that cannot grow, a state that cannot be made).
  struct Unlock {
    std::span<Shard*> shards;
    ~Unlock() {
      for (Shard* s : shards) s->mu.unlock();
    }
  } unlock{locked};

  const std::int64_t now_us = to_us(now);
  // Gives back what the first `decided` requests took, last first.
  auto undo_admitted = [&](std::size_t decided) {
    for (std::size_t i = decided; i-- > 0;) {
      if (!decisions[i].allowed) continue;
      const LimitRequest& r = requests[i];
      const Step& step = steps[i];
      step.shard->with_table(*r.limit, [&](auto& table) {
        using P = typename std::decay_t<decltype(table)>::PayloadType;
        auto* slot = table.find(step.h);
        if constexpr (kIsFixed<P>) {
          if (!step.existed) {
            if (slot != nullptr) table.erase(*slot);
            return;
          }
          if (slot == nullptr) slot = &table.insert(step.h);  // evicted meanwhile: put it back
          slot->payload = std::bit_cast<P>(step.saved);
          slot->expires_us = step.saved_expiry;
        } else {
          if (slot == nullptr) return;  // evicted meanwhile: nothing left to give back
          if constexpr (std::is_same_v<P, LogPtr>) {
            undo(*slot->payload, r.cost);
          } else {
            sluice::release(*slot->payload, decisions[i].lease);
          }
          Shard::settle(table, *slot, now_us, run(slot->payload, *r.limit, now, 0, 0));
        }
      });
    }
  };
  bool all_allowed = true;
  std::size_t decided = 0;
  try {
    for (; decided < n; ++decided) {
      const LimitRequest& r = requests[decided];
      Step& step = steps[decided];
      const std::uint64_t lease =
          r.limit->algorithm() == Algorithm::kConcurrency ? next_lease_.fetch_add(1) : 0;
      decisions[decided] = step.shard->with_table(*r.limit, [&](auto& table) {
        using P = typename std::decay_t<decltype(table)>::PayloadType;
        const auto* slot = table.find(step.h);
        step.existed = slot != nullptr;
        if constexpr (kIsFixed<P>) {
          if (slot != nullptr) {
            step.saved = std::bit_cast<Fixed>(slot->payload);
            step.saved_expiry = slot->expires_us;
          }
        }
        return step.shard->decide_key(table, step.h, *r.limit, now, r.cost, lease, keys_per_shard_);
      });
      all_allowed = all_allowed && decisions[decided].allowed;
    }
  } catch (...) {
    undo_admitted(decided);  // all or nothing holds when a step throws too
    throw;
  }
  if (!all_allowed) undo_admitted(n);
  return {};
}

Result<Decision> LocalStore::peek(std::string_view key, const Limit& limit) {
  const Hash128 h = hash_of(key);
  const Nanos now = clock_->now();
  Shard& shard = shard_for(h.hi);
  std::lock_guard lock(shard.mu);
  return shard.with_table(limit, [&](auto& table) {
    return shard.decide_key(table, h, limit, now, 0, 0, keys_per_shard_);
  });
}

Status LocalStore::reset(std::string_view key, const Limit& limit) {
  const Hash128 h = hash_of(key);
  Shard& shard = shard_for(h.hi);
  std::lock_guard lock(shard.mu);
  shard.with_table(limit, [&](auto& table) {
    if (auto* slot = table.find(h)) table.erase(*slot);
  });
  return {};
}

Status LocalStore::release(std::string_view key, const Limit& limit, std::uint64_t lease) {
  const Result<bool> held = release_held(key, limit, lease);
  if (!held.ok()) return held.error();
  return {};
}

Result<bool> LocalStore::release_held(std::string_view key, const Limit& limit, std::uint64_t lease) {
  if (limit.algorithm() != Algorithm::kConcurrency) {
    return invalid_argument("release applies to concurrency limits only, not " +
                            std::string(to_string(limit.algorithm())));
  }
  const Hash128 h = hash_of(key);
  const Nanos now = clock_->now();
  Shard& shard = shard_for(h.hi);
  std::lock_guard lock(shard.mu);
  if (auto* slot = shard.leases.find(h)) {
    if (sluice::release(*slot->payload, lease)) {
      Shard::settle(shard.leases, *slot, to_us(now), run(slot->payload, limit, now, 0, 0));
      return true;
    }
  }
  return false;
}

std::size_t LocalStore::size() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < (std::size_t{1} << shard_bits_); ++i) {
    std::lock_guard lock(shards_[i].mu);
    n += shards_[i].size();
  }
  return n;
}

std::size_t LocalStore::memory_bytes() const {
  std::size_t n = sizeof(Shard) << shard_bits_;
  for (std::size_t i = 0; i < (std::size_t{1} << shard_bits_); ++i) {
    std::lock_guard lock(shards_[i].mu);
    n += shards_[i].memory_bytes();
  }
  return n;
}

}  // namespace sluice
