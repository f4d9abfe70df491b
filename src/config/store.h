// ConfigStore: the configuration in SQLite (WAL mode), with admin tokens and an audit log. Every
// change is one transaction that validates the whole resulting configuration first, bumps the
// revision and writes an audit row; a change from any process (or a hand edit of the tables) moves
// the revision, which is what watchers and ETags compare. Thread-safe: one connection behind a mutex;
// several processes may open the same file.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "config/config.h"
#include "sluice/clock.h"
#include "sluice/result.h"

struct sqlite3;

namespace sluice::config {

struct StoreOptions {
  std::string path{};
  // Where audit rows and token creation times get their time from; nullptr: SystemClock.
  const Clock* clock = nullptr;
  // How long a write waits for another process's write to finish.
  Nanos busy_timeout = std::chrono::seconds(5);
  // What opening may do to the file. Whatever it is, a file that holds another application's tables
  // is refused: sluice's are not put beside them.
  enum class Access : std::uint8_t {
    kCreate,    // read and write; a missing or empty file becomes a database with the default configuration
    kExisting,  // read and write a sluice database that exists (an older schema is migrated)
    kReadOnly,  // read a sluice database that exists and write nothing (an older schema is migrated in memory)
  };
  Access access = Access::kCreate;
};

// The configuration as committed, and the revision it was committed at.
struct StoredConfig {
  std::shared_ptr<const Config> config{};
  std::int64_t revision = 0;
};

// One audit row: who changed what and when, with the JSON of the thing before and after (null when
// created or deleted). Secrets never appear: credentials show their id, kind and times only, and the
// limit store's URL no password.
struct AuditEntry {
  std::int64_t id = 0;
  std::int64_t at = 0;  // Unix seconds
  std::string actor{};
  std::string action{};   // e.g. "system.update", "config.replace", "token.create"
  std::string target{};   // e.g. "systems/crm"
  std::int64_t revision = 0;
  std::string before{};   // JSON text; "null" when none
  std::string after{};
};

// What a change says about itself, for the audit row.
struct ChangeRecord {
  std::string action{};
  std::string target{};
  std::string before = "null";  // JSON text (redacted by the store)
  std::string after = "null";
  std::vector<ChangeRecord> along{};  // what it changed with it (the grants a system's delete takes): a row each
};

// Why a change was not made.
struct Refusal {
  // kStoredInvalid: the configuration stored does not validate (the tables were edited by hand),
  // so no part of it can be changed; a replacement of the whole can.
  enum class Kind : std::uint8_t { kNotFound, kConflict, kStale, kInvalid, kStoredInvalid, kFailed };
  Kind kind = Kind::kFailed;
  std::string message{};
  std::vector<Problem> problems;  // kInvalid: the change's; kStoredInvalid: the stored configuration's
};

// A change: edits the configuration in place and describes itself, or refuses. `revision` is the
// configuration's, read in the write's transaction: a precondition on it holds until the commit.
using Change = std::function<std::optional<Refusal>(Config& config, ChangeRecord& record, std::int64_t revision)>;

struct WriteResult {
  std::optional<Refusal> refusal;  // none: committed
  std::int64_t revision = 0;       // committed at (or current, when refused)
  bool ok() const { return !refusal.has_value(); }
};

enum class Role : std::uint8_t { kRead, kAdmin };
const char* to_string(Role role);
std::optional<Role> role_from_string(std::string_view text);

struct TokenInfo {
  std::string id{};
  std::string name{};
  Role role = Role::kRead;
  std::int64_t created = 0;  // Unix seconds
  std::string created_by{};
  std::string token_sha256;  // hex; for checking presented tokens, never shown
  std::int64_t expires = 0;  // Unix seconds from which it is refused; 0: never

  bool expired_at(std::int64_t unix_seconds) const { return expires != 0 && unix_seconds >= expires; }
};

// How long a token may be made to last: from a minute (less could not be used) to ten years.
inline constexpr Nanos kShortestTokenLifetime = std::chrono::minutes(1);
inline constexpr Nanos kLongestTokenLifetime = std::chrono::hours(24 * 3650);

// Whether `name` may name an admin token (create_token refuses others, saying kTokenNameRule).
bool token_name_ok(std::string_view name);
inline constexpr std::string_view kTokenNameRule =
    "a token's name must be at most 128 bytes, without control or invisible characters or parentheses";

class ConfigStore {
 public:
  // Opens (creating when missing, as options.access allows) and migrates the schema to this build's
  // version. kInvalidArgument when the file is missing (and not to be created), empty (and not to be
  // made a database), another application's SQLite database, or from a newer sluice.
  static Result<std::unique_ptr<ConfigStore>> open(StoreOptions options);
  ~ConfigStore();
  ConfigStore(const ConfigStore&) = delete;
  ConfigStore& operator=(const ConfigStore&) = delete;

  const std::string& path() const { return options_.path; }
  // The schema version this build writes (PRAGMA user_version).
  static int schema_version();

  // The revision: changes with every commit, from any process. Cheap.
  Result<std::int64_t> revision();
  // Moves the revision to served + 1 unless it is past `served` already, with an audit row: a
  // database put in place of another (a restore) may be at a revision a follower, or a client's
  // If-Match, holds from the one before, and would be taken for that configuration. The revision.
  Result<std::int64_t> advance_revision_past(std::int64_t served, std::string_view actor);
  // The configuration and its revision, read in one transaction. An error when the rows (edited by
  // hand) do not make a valid configuration: it lists the problems, which go to `problems` too when
  // it is given.
  Result<StoredConfig> load(std::vector<Problem>* problems = nullptr);
  // The rows as the JSON text of a configuration file, whether or not they make a valid one (a value
  // that is not JSON is a string): what an operator exports to repair a hand edit that load() refuses.
  Result<std::string> stored_text();

  // Applies change to the current configuration in one transaction: refused whole when change
  // refuses (a precondition on the revision it is given, say), or when the result does not validate
  // (kInvalid, with every problem); committed with an audit row otherwise.
  WriteResult update(std::string_view actor, const Change& change);
  // Replaces the whole configuration (import, PUT /admin/v1/config), also when the stored one is
  // not valid (rows edited by hand). A system listed without credentials keeps those it has: a file
  // kept in version control holds none.
  WriteResult replace(std::string_view actor, std::string_view action, const Config& config,
                      std::optional<std::int64_t> if_revision = std::nullopt);

  // Admin tokens. create_token returns the token itself: it is stored only as its SHA-256. With a
  // lifetime (kShortestTokenLifetime to kLongestTokenLifetime), it is refused from then on; zero:
  // it lasts until revoked.
  Result<std::pair<TokenInfo, std::string>> create_token(std::string_view actor, Role role, std::string_view name,
                                                         Nanos lifetime = Nanos{0});
  Result<std::vector<TokenInfo>> tokens();
  // false when there is no such token.
  Result<bool> delete_token(std::string_view actor, std::string_view id);

  // An action that changes no configuration (a limit's count reset, a breaker reset) into the audit
  // log, at the revision in effect.
  Status note(std::string_view actor, const ChangeRecord& record);

  // Audit rows, newest first: at most limit of them, older than before_id when given.
  Result<std::vector<AuditEntry>> audit(std::size_t limit, std::optional<std::int64_t> before_id = std::nullopt);

  // PRAGMA quick_check: ok, or what is wrong with the file.
  Status check();

  // Whether the path still names the file this store has open (the same device and inode): a
  // restore from a backup moves another file there, or a file is deleted, while a connection keeps
  // reading the one it opened. kReopened: the path names another file, which the store now reads and
  // writes; kMissing: it names none, and until one is there the store keeps reading the file it has
  // and refuses changes (they would be lost with it). An error when the file now there cannot be
  // used: the store keeps the one it has.
  enum class PathState : std::uint8_t { kSame, kReopened, kMissing };
  Result<PathState> reopen_if_replaced();
  // Moves each time the store reopens its path: a revision counts commits to one file only.
  std::uint64_t generation() const { return generation_.load(); }

 private:
  explicit ConfigStore(StoreOptions options);
  WriteResult write(std::string_view actor, const Change& change, std::optional<std::int64_t> if_revision,
                    bool needs_current);
  Status migrate();
  // The file's schema version (PRAGMA user_version): 0 when it is empty (no tables); an error when
  // its tables are another application's. locked: the caller holds mu_.
  Result<int> read_schema();
  // For a read-only store of an older schema: the file copied into memory, to migrate there.
  Status copy_to_memory();
  Status exec(const char* sql);
  Result<std::int64_t> read_revision();
  // The tables as the JSON form of a configuration file (a value that is not JSON is a string, and
  // named in problems), and that read and validated.
  Result<boost::json::object> read_document(std::vector<Problem>& problems);
  // rows, when given, gets the document the configuration was read from, valid or not; problems, what
  // is wrong with it when it is not valid.
  Result<StoredConfig> read_config(boost::json::object* rows = nullptr, std::vector<Problem>* problems = nullptr);
  // The configuration a document of the rows read at revision makes; `problems` are those found
  // reading the rows. Needs no lock (takes parse_mu_).
  Result<StoredConfig> parse_document(const boost::json::object& doc, std::int64_t revision,
                                      std::vector<Problem> problems, std::vector<Problem>* problems_out) const;
  Result<std::vector<System>> read_credentials();
  Status write_config(const Config& config);
  Status add_audit(std::string_view actor, const ChangeRecord& record, std::int64_t revision);
  Result<std::int64_t> bump_revision();
  std::int64_t now_seconds() const;

  // Why a write transaction could not begin (the caller holds mu_).
  Error cannot_write() const;
  // Why a change is refused while the path names no file, or one that cannot be used; nothing
  // otherwise. The caller holds mu_.
  std::optional<Error> missing_file() const;
  // The device and inode of the file at the path, as now.
  void note_file();

  StoreOptions options_;
  std::mutex mu_;
  sqlite3* db_ = nullptr;  // guarded by mu_
  // The file opened, as stat named it, and whether the path still names one (reopen_if_replaced).
  std::uint64_t device_ = 0;  // guarded by mu_
  std::uint64_t inode_ = 0;   // guarded by mu_
  bool missing_ = false;      // guarded by mu_
  // Why the file now at the path cannot be used, when it was replaced by one (empty otherwise):
  // writes are refused, as while it is missing, rather than go to the file left behind.
  std::string unusable_;  // guarded by mu_
  std::atomic<std::uint64_t> generation_{0};

  // The configuration read last, by its document's text: one revision is read by the admin API, the
  // database watcher and the next write, and parsed once (a large configuration takes a while). A
  // reader of a new document waits for another's parse of it rather than make its own.
  mutable std::mutex parse_mu_;
  mutable std::string parsed_text_;                   // guarded by parse_mu_
  mutable std::shared_ptr<const Config> parsed_{};  // guarded by parse_mu_
};

// A JSON text with the secrets of credentials (API key hashes, sealed secrets) taken out, and the
// password of a "store" URL redacted.
std::string redact_credentials(std::string_view json);

}  // namespace sluice::config
