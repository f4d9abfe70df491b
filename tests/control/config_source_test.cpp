// The database watcher: a committed change is installed, a hand edit that does not validate is
// refused (the last good configuration stays) and reported, and the next good one is installed;
// every new revision is announced, valid or not (tokens live beside the configuration).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
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

// A restore from a backup moves another file to the path (or deletes it first): the watcher sees
// the path name another file, says so once, and serves the file there, whatever its revision, moved
// past the one served before (a follower holding that one kept the configuration it had); while no
// file is there it says so once, keeps serving the last configuration, and refuses changes.
TEST(DatabaseWatcherTest, ADatabaseReplacedOrDeletedIsNoticedAndTheFileThereIsServed) {
  const std::string dir = testing::temp_dir();
  const std::string path = dir + "/sluice.db";
  auto store = control_test::open_store(path);
  ASSERT_TRUE(store->replace("test", "config.import", *control_test::parse(control_test::base_yaml())).ok());
  std::mutex mu;
  std::vector<std::string> installed;  // the first system's description, guarded by mu
  std::vector<std::string> logged;     // guarded by mu
  std::atomic<int> changes{0};
  DatabaseWatcher watcher({.store = store.get(),
                           .interval = std::chrono::milliseconds(10),
                           .install =
                               [&](const config::StoredConfig& c) {
                                 std::lock_guard lock(mu);
                                 installed.push_back(c.config->systems.at(0).description);
                               },
                           .changed = [&] { ++changes; },
                           .log =
                               [&](std::string_view line) {
                                 std::lock_guard lock(mu);
                                 logged.emplace_back(line);
                               }},
                          2);
  auto seen = [&] {
    std::lock_guard lock(mu);
    return std::pair{installed, logged};
  };

  // Another database, at the same revision, moved over the path.
  const std::string backup = dir + "/backup.db";
  config::Config other = *control_test::parse(control_test::base_yaml());
  other.systems.at(0).description = "restored";
  {
    auto restored = control_test::open_store(backup);
    ASSERT_TRUE(restored->replace("test", "config.import", other).ok());
    ASSERT_EQ(*restored->revision(), 2);
  }
  // As an operator restores one: the file alone, without the write-ahead log of the one it replaces
  // (which SQLite would otherwise read as the new file's).
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  std::filesystem::rename(backup, path);
  const int before = changes.load();
  ASSERT_TRUE(testing::eventually([&] { return seen().first == std::vector<std::string>{"restored"}; }));
  EXPECT_GT(changes.load(), before);  // its tokens are read too
  EXPECT_TRUE(watcher.health().ok);
  EXPECT_EQ(seen().second, std::vector<std::string>{path + " is another file now (replaced): reading it"});
  // At revision 2, as the one it replaced was: moved to 3, and said so in the audit log.
  EXPECT_EQ(*store->revision(), 3);
  EXPECT_EQ(watcher.health().revision, 3);
  const auto audit = store->audit(1);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ(audit->front().action, "database.replaced");
  EXPECT_EQ(audit->front().revision, 3);
  // The store reads and writes the file now there.
  EXPECT_EQ(store->load()->config->systems.at(0).description, "restored");
  other.systems.at(0).description = "written";
  ASSERT_TRUE(store->replace("test", "config.replace", other).ok());
  EXPECT_EQ(control_test::open_store(path)->load()->config->systems.at(0).description, "written");
  ASSERT_TRUE(testing::eventually([&] { return seen().first.size() == 2; }));

  // Gone: said once, the last configuration kept, changes refused rather than lost with the file.
  std::filesystem::rename(path, dir + "/moved.db");
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  ASSERT_TRUE(testing::eventually([&] { return !watcher.health().ok; }));
  const std::string gone = path + " is gone (deleted or moved away): still serving revision 4 until a database is there again";
  EXPECT_EQ(watcher.health().error, gone);
  other.systems.at(0).description = "lost";
  const config::WriteResult refused = store->replace("test", "config.replace", other);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.refusal->message, path + " is gone (deleted or moved away): a change would be lost with it. Put "
                                             "the database back; it is read again once it is there");
  EXPECT_EQ(store->load()->config->systems.at(0).description, "written");

  // A database there again is served, and the store writes to it.
  {
    auto again = control_test::open_store(backup);
    other.systems.at(0).description = "back";
    ASSERT_TRUE(again->replace("test", "config.import", other).ok());
  }
  std::filesystem::rename(backup, path);
  ASSERT_TRUE(testing::eventually([&] { return seen().first.size() == 3 && watcher.health().ok; }));
  EXPECT_EQ(seen().first.back(), "back");
  EXPECT_EQ(*store->revision(), 5);  // at 2, past the 4 served
  const auto log = seen().second;
  EXPECT_EQ(std::count(log.begin(), log.end(), gone), 1);
  EXPECT_EQ(log.back(), path + " is another file now (replaced): reading it");
  EXPECT_TRUE(store->replace("test", "config.replace", other).ok());

  // Replaced by a file that cannot be used: the last configuration kept, and changes refused rather
  // than written to the file left behind, which nobody would read again.
  testing::write_file(dir + "/junk.db", "not a database, though its name says so");
  std::filesystem::rename(dir + "/junk.db", path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  ASSERT_TRUE(testing::eventually([&] { return !watcher.health().ok; }));
  EXPECT_NE(watcher.health().error.find(path + " was replaced by a file that cannot be used"), std::string::npos)
      << watcher.health().error;
  other.systems.at(0).description = "orphaned";
  const config::WriteResult orphaned = store->replace("test", "config.replace", other);
  ASSERT_FALSE(orphaned.ok());
  EXPECT_NE(orphaned.refusal->message.find(path + " was replaced by a file that cannot be used"), std::string::npos)
      << orphaned.refusal->message;
}

}  // namespace
}  // namespace sluice::gateway
