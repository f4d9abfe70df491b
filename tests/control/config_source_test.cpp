// The database watcher: a committed change is installed, a hand edit that does not validate is
// refused (the last good configuration stays) and reported, and the next good one is installed;
// every new revision is announced, valid or not (tokens live beside the configuration).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <mutex>

#include "control_test.h"
#include "gateway/config_source.h"

namespace sluice::gateway {
namespace {

TEST(DatabaseWatcherTest, InstallsEachValidRevisionAndSkipsAnInvalidOne) {
  const std::string path = testing::temp_dir() + "/sluice.db";
  auto store = control_test::open_store(path);
  ASSERT_TRUE(store->replace("test", "config.import", *control_test::parse(control_test::base_yaml())).ok());
  std::mutex mu;
  std::vector<std::int64_t> installed;  // guarded by mu
  std::vector<std::string> logged;      // guarded by mu
  std::atomic<int> changes{0};
  std::atomic<int> refused{0};
  DatabaseWatcher watcher({.store = store.get(),
                           .interval = std::chrono::milliseconds(10),
                           .install =
                               [&](const config::StoredConfig& c) {
                                 std::lock_guard lock(mu);
                                 installed.push_back(c.revision);
                               },
                           .changed = [&] { ++changes; },
                           .refused = [&] { ++refused; },
                           .log =
                               [&](std::string_view line) {
                                 std::lock_guard lock(mu);
                                 logged.emplace_back(line);
                               }},
                          2);
  auto installed_count = [&] {
    std::lock_guard lock(mu);
    return installed.size();
  };

  config::Config next = *store->load()->config;
  next.systems[0].description = "changed";
  ASSERT_TRUE(store->replace("test", "config.replace", next).ok());
  ASSERT_TRUE(testing::eventually([&] { return installed_count() == 1; }));

  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE interfaces SET upstream = 'gone' WHERE id = 'users'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  ASSERT_TRUE(testing::eventually([&] { return !watcher.health().ok; }));
  EXPECT_EQ(installed_count(), 1u);
  EXPECT_EQ(refused.load(), 1);  // for /metrics' failed reloads
  EXPECT_EQ(watcher.health().revision, 3);
  EXPECT_NE(watcher.health().error.find("interfaces[1].upstream"), std::string::npos) << watcher.health().error;
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(logged.size(), 1u);
    EXPECT_NE(logged[0].find("still serving revision 3"), std::string::npos) << logged[0];
  }
  // A token created meanwhile is still announced (the gateway re-reads its tokens), though the
  // configuration stays refused.
  const int before = changes.load();
  ASSERT_TRUE(store->create_token("test", config::Role::kAdmin, "fixer").ok());
  ASSERT_TRUE(testing::eventually([&] { return changes.load() > before; }));
  // The change is announced before the revision is loaded, so wait for the load's verdict: the
  // configuration at that revision is still the invalid one.
  ASSERT_TRUE(testing::eventually([&] { return refused.load() == 2; }));
  EXPECT_EQ(installed_count(), 1u);

  next.systems[0].description = "fixed";
  ASSERT_TRUE(store->replace("test", "config.replace", next).ok());
  // Installed first, then reported healthy.
  ASSERT_TRUE(testing::eventually([&] { return installed_count() == 2 && watcher.health().ok; }));
}

}  // namespace
}  // namespace sluice::gateway
