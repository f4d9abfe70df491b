// FlatTable against a std::unordered_map model: inserts, finds and erases (including runs that wrap
// around the end and collide on one home slot), sweeping and eviction.
#include "core/flat_table.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace sluice::detail {
namespace {

using Table = FlatTable<std::int64_t>;

struct HashOf {
  std::size_t operator()(const Hash128& h) const { return h.lo ^ h.hi; }
};

TEST(FlatTable, MatchesAMapUnderRandomOperations) {
  Table table;
  std::unordered_map<Hash128, std::int64_t, HashOf> model;
  std::mt19937_64 rng(7);
  // Few distinct home slots (top bits drawn from a small set) to force long, wrapping probe runs.
  auto key = [&] {
    Hash128 h{(rng() % 64) << 58 | (rng() % 4), rng() % 500};
    return Table::usable(h);
  };
  for (int step = 0; step < 200'000; ++step) {
    const Hash128 k = key();
    auto* slot = table.find(k);
    auto it = model.find(k);
    ASSERT_EQ(slot != nullptr, it != model.end()) << step;
    if (slot == nullptr) {
      table.insert(k).payload = static_cast<std::int64_t>(step);
      model[k] = step;
    } else {
      ASSERT_EQ(slot->payload, it->second);
      if (rng() % 2 == 0) {
        table.erase(*slot);
        model.erase(it);
      }
    }
    ASSERT_EQ(table.size(), model.size());
  }
  for (const auto& [k, v] : model) {
    auto* slot = table.find(k);
    ASSERT_NE(slot, nullptr);
    EXPECT_EQ(slot->payload, v);
  }
}

TEST(FlatTable, StaysAtMostSevenEighthsFull) {
  Table table;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 10'000; ++i) table.insert(Table::usable({rng(), rng()}));
  EXPECT_EQ(table.size(), 10'000u);
  EXPECT_EQ(table.capacity(), 16384u);
  EXPECT_EQ(table.memory_bytes(), 16384u * sizeof(Table::Slot));
}

TEST(FlatTable, SweepDropsExpiredSlotsOnly) {
  Table table;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    auto& slot = table.insert(Table::usable({rng(), rng()}));
    slot.expires_us = i % 2 == 0 ? 100 : 200;
  }
  table.sweep(150, 1'000'000);
  EXPECT_EQ(table.size(), 500u);
  table.sweep(199, 1'000'000);
  EXPECT_EQ(table.size(), 500u);
  table.sweep(200, 1'000'000);
  EXPECT_EQ(table.size(), 0u);
}

TEST(FlatTable, EvictsTheSampledSlotThatExpiresFirst) {
  Table table;
  std::mt19937_64 rng(5);
  Hash128 soonest;
  for (int i = 0; i < 8; ++i) {
    const Hash128 k = Table::usable({rng(), rng()});
    auto& slot = table.insert(k);
    slot.expires_us = i == 5 ? 10 : 1000 + i;
    if (i == 5) soonest = k;
  }
  table.evict(16);
  EXPECT_EQ(table.size(), 7u);
  EXPECT_EQ(table.find(soonest), nullptr);
}

}  // namespace
}  // namespace sluice::detail
