// Where a running gateway's configuration comes from besides a file: a database it watches
// (DatabaseWatcher) or a primary it follows (Follower). Each runs a thread of its own and hands every
// new valid configuration to a callback; an invalid one, or a source that cannot be reached, leaves
// the last good configuration serving. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "config/store.h"
#include "gateway/http_fetch.h"

namespace sluice::gateway {

using InstallConfig = std::function<void(const config::StoredConfig&)>;
using LogLine = std::function<void(std::string_view)>;

// What a source last said, for /admin/v1/stats.
struct SourceHealth {
  bool ok = true;
  std::int64_t revision = 0;      // installed
  std::int64_t last_contact = 0;  // Unix seconds of the last successful look at the source
  std::string error{};            // why the last look failed, or why its configuration was refused
};

// What a database watcher last read: the configuration it installed last and the revision it looked
// at last (the installed one, or a newer one it refused), both in the store's generation (the file).
struct WatchedConfig {
  std::uint64_t generation = 0;
  std::int64_t looked = 0;
  config::StoredConfig installed{};  // no config: none read here yet (the first was read by the caller)
};

class DatabaseWatcher {
 public:
  struct Options {
    config::ConfigStore* store = nullptr;
    Nanos interval = std::chrono::milliseconds(200);
    InstallConfig install{};  // each new revision's configuration, once valid
    // Each new revision, before its configuration is loaded, valid or not: the admin tokens, which
    // move the revision too, are read again here (a broken configuration must not lock them out).
    std::function<void()> changed{};
    // Each new revision whose configuration is refused as invalid (once: it is not looked at again
    // until the next change), so that /metrics counts it as a failed reload.
    std::function<void()> refused{};
    LogLine log{};
  };
  // Starts watching; revision: the one installed already.
  DatabaseWatcher(Options options, std::int64_t revision);
  ~DatabaseWatcher();  // stops watching
  DatabaseWatcher(const DatabaseWatcher&) = delete;
  DatabaseWatcher& operator=(const DatabaseWatcher&) = delete;

  SourceHealth health() const;
  // What it read last, for others to answer from rather than read the database again.
  WatchedConfig last() const;

 private:
  void run();
  void look();

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;         // guarded by mu_
  SourceHealth health_;       // guarded by mu_
  WatchedConfig last_;        // guarded by mu_
  std::int64_t seen_ = 0;     // the revision last looked at (only the thread touches it)
  // The path named no file, or another file, since the last configuration was loaded: the next
  // one is loaded whatever its revision (only the thread touches it).
  bool path_lost_ = false;
  bool replaced_ = false;     // another file is at the path since the last load
  std::thread thread_;
};

class Follower {
 public:
  struct Options {
    std::string primary{};  // http://host:port of the primary's admin listener
    std::string token{};    // an admin token of the primary (the read role suffices)
    Nanos wait = std::chrono::seconds(30);  // how long the primary holds a poll with no news
    Nanos retry = std::chrono::seconds(1);  // after a failed poll
    InstallConfig install{};
    LogLine log{};
    const Clock* clock = nullptr;  // wall clock for last_contact; nullptr: SystemClock
    // Whether the primary still takes the token: called with false when it answers a poll 401 (the
    // token was revoked there), with true when a poll goes through again.
    std::function<void(bool)> token_accepted{};
  };

  // One request for the primary's current configuration (the one to start with). kInvalidArgument
  // when the primary refuses the token or answers what is not a configuration: waiting would not
  // help.
  static Result<config::StoredConfig> fetch(const Options& options, HttpFetcher& fetcher);
  // The token as the primary knows it (GET /admin/v1/whoami): its id, name and role, which the
  // follower's admin API gives it too.
  struct Token {
    std::string id;
    std::string name;
    config::Role role = config::Role::kRead;
    std::int64_t expires = 0;  // Unix seconds; 0: never (or a primary that does not say)
  };
  static Result<Token> whoami(const Options& options, HttpFetcher& fetcher);

  // Starts long-polling; revision: the one installed already.
  Follower(Options options, std::int64_t revision);
  ~Follower();  // stops
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  SourceHealth health() const;
  std::int64_t revision() const { return revision_.load(); }

 private:
  void run();
  void failed(const std::string& error);

  Options options_;
  HttpFetcher fetcher_;
  std::atomic<std::int64_t> revision_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;    // guarded by mu_
  SourceHealth health_;  // guarded by mu_
  bool token_accepted_ = true;  // run()'s thread only
  std::thread thread_;
};

}  // namespace sluice::gateway
