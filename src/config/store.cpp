#include "config/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <algorithm>
#include <boost/json.hpp>
#include <map>
#include <tuple>

#include "config/crypto.h"
#include "config/json.h"
#include "config/yaml.h"
#include "core/duration.h"

namespace sluice::config {
namespace {

// Every credential, by system: read_config and read_credentials read them alike.
constexpr const char* kSelectCredentials =
    "SELECT system, id, kind, api_key_sha256, sealed_secret, created, expires FROM credentials "
    "ORDER BY system, position";

namespace json = boost::json;

// The tables that hold the configuration and the tokens: any change to them moves the revision.
constexpr const char* kWatchedTables[] = {"settings", "upstreams", "interfaces", "systems",
                                          "credentials", "grants", "limits", "admin_tokens"};

// Schema version 1. Lists and nested settings are JSON text in the YAML file's shape; the limits of
// systems, interfaces and grants are rows of their own (scope, system, interface, position).
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO meta (name, value) VALUES ('revision', 1), ('writing', 0);
CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE upstreams (
  name TEXT PRIMARY KEY, position INTEGER NOT NULL, targets TEXT NOT NULL,
  connect_timeout TEXT NOT NULL, timeout TEXT NOT NULL, max_idle_connections INTEGER NOT NULL,
  failure_statuses TEXT NOT NULL, breaker TEXT NOT NULL);
CREATE TABLE interfaces (
  id TEXT PRIMARY KEY, position INTEGER NOT NULL, description TEXT NOT NULL, methods TEXT NOT NULL,
  path TEXT NOT NULL, upstream TEXT NOT NULL, enabled INTEGER NOT NULL, public INTEGER NOT NULL,
  concurrency INTEGER, timeout TEXT);
CREATE TABLE systems (
  key TEXT PRIMARY KEY, position INTEGER NOT NULL, description TEXT NOT NULL,
  enabled INTEGER NOT NULL, auth TEXT NOT NULL, interfaces TEXT NOT NULL);
CREATE TABLE credentials (
  system TEXT NOT NULL, id TEXT NOT NULL, position INTEGER NOT NULL, kind TEXT NOT NULL,
  api_key_sha256 TEXT, sealed_secret TEXT, created TEXT NOT NULL, expires TEXT,
  PRIMARY KEY (system, id));
CREATE TABLE grants (
  system TEXT NOT NULL, interface TEXT NOT NULL, position INTEGER NOT NULL,
  PRIMARY KEY (system, interface));
CREATE TABLE limits (
  scope TEXT NOT NULL CHECK (scope IN ('system', 'interface', 'grant')),
  system TEXT NOT NULL DEFAULT '', interface TEXT NOT NULL DEFAULT '', position INTEGER NOT NULL,
  spec TEXT NOT NULL, PRIMARY KEY (scope, system, interface, position));
CREATE TABLE admin_tokens (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL CHECK (role IN ('admin', 'read')),
  token_sha256 TEXT NOT NULL UNIQUE, created INTEGER NOT NULL, created_by TEXT NOT NULL);
CREATE TABLE audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, actor TEXT NOT NULL,
  action TEXT NOT NULL, target TEXT NOT NULL, revision INTEGER NOT NULL,
  before TEXT NOT NULL, after TEXT NOT NULL);
)sql";

// Triggers that move the revision on any change sluice itself does not make (a hand edit with the
// sqlite3 shell); sluice's own writes set meta.writing and move it once per commit.
std::string revision_triggers() {
  std::string sql;
  for (const char* table : kWatchedTables) {
    for (const char* op : {"INSERT", "UPDATE", "DELETE"}) {
      sql += std::string("CREATE TRIGGER ") + table + "_" + op + " AFTER " + op + " ON " + table +
             " WHEN (SELECT value FROM meta WHERE name = 'writing') = 0 BEGIN UPDATE meta SET value = "
             "value + 1 WHERE name = 'revision'; END;\n";
    }
  }
  return sql;
}

// Version 2: an interface's concurrency_lease_timeout (NULL: the default).
constexpr const char* kSchemaV2 = "ALTER TABLE interfaces ADD COLUMN concurrency_lease_timeout TEXT;";

// Version 3: an admin token's expiry (Unix seconds; NULL: never).
constexpr const char* kSchemaV3 = "ALTER TABLE admin_tokens ADD COLUMN expires INTEGER;";

// The migrations, in order: migration i takes the schema from version i to i + 1.
std::vector<std::string> migrations() {
  return {std::string(kSchemaV1) + revision_triggers(), kSchemaV2, kSchemaV3};
}

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool prepared() const { return rc_ == SQLITE_OK; }
  Stmt& bind(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind_null(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return last_ = prepared() ? sqlite3_step(s_) : rc_; }
  // After a loop over the rows: whether it ended because there were no more (not on an error,
  // which would otherwise pass for fewer rows).
  bool finished() const { return last_ == SQLITE_DONE; }
  // Runs a statement that returns no rows, then readies it for new bindings.
  bool run() {
    const int rc = step();
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    return rc == SQLITE_DONE;
  }
  std::string text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p == nullptr ? std::string() : std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col)));
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(s_, col); }
  bool null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  // An INTEGER column as JSON: the number, or what else a hand edit stored there as a string, for
  // the configuration's reader to refuse or read as a file's would ("abc" is no whole number).
  json::value number(int col) const {
    if (sqlite3_column_type(s_, col) == SQLITE_INTEGER) return integer(col);
    return json::string(text(col));
  }
  // A flag kept as 0 or 1, likewise (a hand edit's "true" reads as true, "yes" is refused).
  json::value flag(int col) const {
    if (sqlite3_column_type(s_, col) == SQLITE_INTEGER && (integer(col) == 0 || integer(col) == 1)) return integer(col) == 1;
    return json::string(text(col));
  }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_ERROR;
  int last_ = SQLITE_OK;
};

Error db_error(sqlite3* db, std::string_view what) {
  return Error{ErrorCode::kStoreUnavailable, std::string(what) + ": " + sqlite3_errmsg(db)};
}

// A transaction rolled back unless committed.
class Transaction {
 public:
  Transaction(sqlite3* db, bool write) : db_(db) {
    ok_ = sqlite3_exec(db, write ? "BEGIN IMMEDIATE" : "BEGIN", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~Transaction() {
    if (ok_ && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  bool ok() const { return ok_; }
  Status commit() {
    done_ = true;
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      Error e = db_error(db_, "commit");
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return e;
    }
    return {};
  }

 private:
  sqlite3* db_;
  bool ok_ = false;
  bool done_ = false;
};

std::string text_of(const json::value& v) { return json::serialize(v); }

// Every string in v read as a store URL, its password redacted: a "store" setting of the wrong type
// (rows edited by hand) may still hold one.
void redact_store_strings(json::value& v) {
  if (v.is_string()) {
    v = redact_store_password(v.as_string());
  } else if (v.is_object()) {
    for (auto& kv : v.as_object()) redact_store_strings(kv.value());
  } else if (v.is_array()) {
    for (json::value& e : v.as_array()) redact_store_strings(e);
  }
}

void redact(json::value& v) {
  if (v.is_object()) {
    json::object& o = v.as_object();
    o.erase("api_key_sha256");
    o.erase("sealed_secret");
    if (auto* store = o.if_contains("store")) redact_store_strings(*store);
    for (auto& kv : o) redact(kv.value());
  } else if (v.is_array()) {
    for (json::value& e : v.as_array()) redact(e);
  }
}

// Why a store whose password is the placeholder was refused: it stands for the stored password only
// in the stored address, which is named here (without its password) when it has one.
std::string redacted_store_message(const std::string& stored) {
  std::string why = "the password " + std::string(kRedactedPassword) +
                    " is the placeholder shown in place of the stored one, and keeps it only in the same address";
  why += has_redacted_password(redact_store_password(stored)) ? " (" + redact_store_password(stored) + ")"
                                                              : " (the stored store, " + stored + ", has no password)";
  return why + ": give the password itself";
}

Error newer_schema(const std::string& path, int version) {
  return Error{ErrorCode::kInvalidArgument, path + " has schema version " + std::to_string(version) +
                                                ", newer than this sluice knows (" +
                                                std::to_string(migrations().size()) + "): use a newer sluice"};
}

WriteResult refused(Refusal::Kind kind, std::string message, std::int64_t revision) {
  return WriteResult{Refusal{kind, std::move(message), {}}, revision};
}

}  // namespace

const char* to_string(Role role) { return role == Role::kAdmin ? "admin" : "read"; }

std::optional<Role> role_from_string(std::string_view text) {
  if (text == "admin") return Role::kAdmin;
  if (text == "read") return Role::kRead;
  return std::nullopt;
}

std::string redact_credentials(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return "null";
  redact(v);
  return text_of(v);
}

ConfigStore::ConfigStore(StoreOptions options) : options_(std::move(options)) {}

ConfigStore::~ConfigStore() { sqlite3_close(db_); }

int ConfigStore::schema_version() { return static_cast<int>(migrations().size()); }

std::int64_t ConfigStore::now_seconds() const {
  const Clock& clock = options_.clock != nullptr ? *options_.clock : SystemClock::instance();
  return std::chrono::duration_cast<std::chrono::seconds>(clock.now()).count();
}

namespace {

// Why SQLite could not open the database at `path` ("unable to open database file" says nothing
// of it): what an operator can mend; empty when nothing here is found wrong.
std::string why_cannot_open(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return "it is a directory: give the database file's path, such as " +
                                         (fs::path(path) / "sluice.db").string();
  const fs::path dir = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(dir, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
      return "cannot look into " + dir.string() + ": " + ec.message();
    }
    return "there is no directory " + dir.string();
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return "the directory " + dir.string() + " is not writable (" + std::strerror(errno) +
           "), and SQLite makes the database's -wal and -shm files beside it, even to read it";
  }
  if (::access(path.c_str(), F_OK) == 0 && ::access(path.c_str(), R_OK | W_OK) != 0) {
    return "no permission to read and write it (" + std::string(std::strerror(errno)) + ")";
  }
  return "";
}

// e, with why_cannot_open(path) when SQLite could not open the file.
Error explained(Error e, const std::string& path) {
  if (e.message.find("unable to open database file") == std::string::npos) return e;
  if (const std::string why = why_cannot_open(path); !why.empty()) e.message += ": " + why;
  return e;
}

// What `path` points at when it is a symbolic link to nothing (the link's text, and the file it
// comes to when that differs, as for a relative link or a chain of them); empty otherwise.
std::string dangling_link_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec)) || fs::exists(fs::status(path, ec)) ||
      ec != std::errc::no_such_file_or_directory) {
    return "";
  }
  const fs::path target = fs::read_symlink(path, ec);
  if (ec) return "";
  fs::path end = fs::absolute(path, ec);
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(end, ec)); ++hops) {
    const fs::path next = fs::read_symlink(end, ec);
    if (ec) break;
    end = next.is_absolute() ? next : end.parent_path() / next;
  }
  end = fs::weakly_canonical(end, ec);
  return ec || end == target ? target.string() : target.string() + " (" + end.string() + ")";
}

}  // namespace

Result<std::unique_ptr<ConfigStore>> ConfigStore::open(StoreOptions options) {
  using Access = StoreOptions::Access;
  std::unique_ptr<ConfigStore> store(new ConfigStore(std::move(options)));
  const std::string& path = store->options_.path;
  const Access mode = store->options_.access;
  // A link to nothing: SQLite says only "unable to open database file", or, where it may create,
  // makes the file at the link's end with the umask's mode rather than its owner's alone (the
  // 0600 file below is not made through a link: O_EXCL does not follow one).
  if (const std::string target = dangling_link_target(path); !target.empty()) {
    return Error{ErrorCode::kInvalidArgument,
                 path + " is a symbolic link to " + target +
                     ", which does not exist: point the link at the database, or give the database's own path"};
  }
  if (mode != Access::kCreate && ::access(path.c_str(), F_OK) != 0) {
    return Error{ErrorCode::kInvalidArgument, "there is no database at " + path};
  }
  const int flags = SQLITE_OPEN_NOMUTEX | (mode == Access::kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) |
                    (mode == Access::kCreate ? SQLITE_OPEN_CREATE : 0);
  // A new database is its owner's alone (0600), whatever the umask: it holds the Redis password, the
  // sealed signing secrets and the hashes of the tokens. SQLite gives its -wal and -shm files the
  // database's mode.
  if (mode == Access::kCreate) {
    if (const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600); fd >= 0) ::close(fd);
  }
  if (sqlite3_open_v2(path.c_str(), &store->db_, flags, nullptr) != SQLITE_OK) {
    return explained(Error{ErrorCode::kStoreUnavailable, "cannot open " + path + ": " +
                                                             (store->db_ != nullptr ? sqlite3_errmsg(store->db_)
                                                                                    : "out of memory")},
                     path);
  }
  sqlite3_busy_timeout(store->db_, static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(store->options_.busy_timeout).count()));
  // Looked at before anything is written (WAL mode goes into the file's header): a file that is
  // another application's is left as it was.
  Result<int> version = [&] {
    std::lock_guard lock(store->mu_);
    return store->read_schema();
  }();
  if (!version.ok()) return explained(version.error(), path);
  if (*version == 0 && mode != Access::kCreate) {
    return Error{ErrorCode::kInvalidArgument,
                 path + " is empty: it holds no sluice database (sluice config import or sluice token create makes one)"};
  }
  if (*version > schema_version()) return newer_schema(path, *version);
  if (mode == Access::kReadOnly) {
    // Nothing is written to the file: an older schema is migrated in a copy in memory.
    if (*version < schema_version()) {
      if (Status s = store->copy_to_memory(); !s) return s.error();
      if (Status s = store->migrate(); !s) return s.error();
    }
    return store;
  }
  // WAL: readers (every gateway's watcher) never block the writer, nor it them. FULL: a commit is
  // on disk before it is reported, so neither a crash nor a power cut loses it.
  if (Status s = store->exec("PRAGMA journal_mode=WAL"); !s) return s.error();
  if (Status s = store->exec("PRAGMA synchronous=FULL"); !s) return s.error();
  // Only when there is something to migrate: the write lock it takes would make a command that
  // waited for another process's long write say it could not migrate, not what it was doing.
  if (*version < schema_version()) {
    if (Status s = store->migrate(); !s) return s.error();
  }
  store->note_file();
  return store;
}

void ConfigStore::note_file() {
  struct stat st {};
  if (::stat(options_.path.c_str(), &st) != 0) return;
  std::lock_guard lock(mu_);
  device_ = static_cast<std::uint64_t>(st.st_dev);
  inode_ = static_cast<std::uint64_t>(st.st_ino);
}

Result<ConfigStore::PathState> ConfigStore::reopen_if_replaced() {
  struct stat st {};
  if (::stat(options_.path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Error{ErrorCode::kStoreUnavailable, "cannot look at " + options_.path + ": " + std::strerror(errno)};
    std::lock_guard lock(mu_);
    missing_ = true;
    unusable_.clear();
    return PathState::kMissing;
  }
  {
    std::lock_guard lock(mu_);
    if (static_cast<std::uint64_t>(st.st_dev) == device_ && static_cast<std::uint64_t>(st.st_ino) == inode_) {
      missing_ = false;  // moved back
      unusable_.clear();
      return PathState::kSame;
    }
  }
  // The file there now, opened as this one was; it exists, so nothing is created.
  StoreOptions options = options_;
  if (options.access == StoreOptions::Access::kCreate) options.access = StoreOptions::Access::kExisting;
  auto fresh = open(std::move(options));
  if (!fresh.ok()) {
    std::lock_guard lock(mu_);
    unusable_ = fresh.error().message;
    return fresh.error();
  }
  std::lock_guard lock(mu_);
  unusable_.clear();
  std::swap(db_, (*fresh)->db_);  // the file left behind is closed with `fresh`, after the lock
  // As stat named it before the open: when it was replaced again in between, the next look reopens.
  device_ = static_cast<std::uint64_t>(st.st_dev);
  inode_ = static_cast<std::uint64_t>(st.st_ino);
  missing_ = false;
  generation_.fetch_add(1);
  return PathState::kReopened;
}

Error ConfigStore::cannot_write() const {
  if (sqlite3_errcode(db_) != SQLITE_BUSY) return db_error(db_, "cannot write " + options_.path);
  // Another process's write (or a shell's open transaction) outlasted the wait: say so, not just
  // "database is locked".
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(options_.busy_timeout).count();
  return Error{ErrorCode::kStoreUnavailable,
               "cannot write " + options_.path + ": another process has held its write lock for longer than " +
                   (waited % 1000 == 0 ? std::to_string(waited / 1000) + " s" : std::to_string(waited) + " ms") +
                   " (a long write, or a transaction left open in a sqlite3 shell)"};
}

std::optional<Error> ConfigStore::missing_file() const {
  if (!unusable_.empty()) {
    return Error{ErrorCode::kStoreUnavailable,
                 options_.path + " was replaced by a file that cannot be used (" + unusable_ +
                     "): a change would be lost with the file left behind. Put a usable database there"};
  }
  if (!missing_) return std::nullopt;
  return Error{ErrorCode::kStoreUnavailable,
               options_.path + " is gone (deleted or moved away): a change would be lost with it. Put the database "
                               "back; it is read again once it is there"};
}

Result<int> ConfigStore::read_schema() {
  Stmt version(db_, "PRAGMA user_version");
  if (version.step() != SQLITE_ROW) return db_error(db_, "cannot read " + options_.path);
  const int have = static_cast<int>(version.integer(0));
  std::vector<std::string> tables;
  Stmt s(db_, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
              "ORDER BY name");
  while (s.step() == SQLITE_ROW) tables.push_back(s.text(0));
  if (!s.finished()) return db_error(db_, "cannot read the tables of " + options_.path);
  if (tables.empty() && have == 0) return 0;
  // Sluice's: the schema version it sets, and the table of the revision every reader starts from.
  if (have >= 1 && std::find(tables.begin(), tables.end(), "meta") != tables.end()) return have;
  std::string holds;
  for (std::size_t i = 0; i < tables.size() && i < 5; ++i) holds += (i == 0 ? "" : ", ") + tables[i];
  if (tables.size() > 5) holds += ", ...";
  return Error{ErrorCode::kInvalidArgument,
               options_.path + " is an SQLite database but not sluice's (" +
                   (tables.empty() ? "it has no tables but schema version " + std::to_string(have)
                                   : "it holds tables sluice does not make: " + holds) +
                   "): sluice leaves it alone. Give the path of a sluice database, or of a new file"};
}

Status ConfigStore::copy_to_memory() {
  sqlite3* memory = nullptr;
  if (sqlite3_open_v2(":memory:", &memory, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    sqlite3_close(memory);
    return Error{ErrorCode::kStoreUnavailable, "cannot read " + options_.path + ": out of memory"};
  }
  sqlite3_backup* backup = sqlite3_backup_init(memory, "main", db_, "main");
  const int rc = backup != nullptr ? sqlite3_backup_step(backup, -1) : SQLITE_ERROR;
  sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) {
    Error e = db_error(memory, "cannot read " + options_.path);
    sqlite3_close(memory);
    return e;
  }
  sqlite3_close(db_);
  db_ = memory;
  return {};
}

Status ConfigStore::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    Error e{ErrorCode::kStoreUnavailable, options_.path + ": " + (message != nullptr ? message : "error")};
    sqlite3_free(message);
    return e;
  }
  return {};
}

Status ConfigStore::migrate() {
  std::lock_guard lock(mu_);
  Transaction tx(db_, true);  // one process migrates; the others wait, then find it done
  if (!tx.ok()) return db_error(db_, "cannot lock " + options_.path + " to migrate it");
  // Again inside the transaction: another application may have made tables in it meanwhile.
  const Result<int> version = read_schema();
  if (!version.ok()) return version.error();
  const int have = *version;
  const std::vector<std::string> steps = migrations();
  if (have > static_cast<int>(steps.size())) return newer_schema(options_.path, have);
  for (int v = have; v < static_cast<int>(steps.size()); ++v) {
    if (Status s = exec(steps[static_cast<std::size_t>(v)].c_str()); !s) return s;
    if (Status s = exec(("PRAGMA user_version=" + std::to_string(v + 1)).c_str()); !s) return s;
  }
  return tx.commit();
}

Result<std::int64_t> ConfigStore::read_revision() {
  Stmt s(db_, "SELECT value FROM meta WHERE name = 'revision'");
  if (s.step() != SQLITE_ROW) return db_error(db_, "cannot read the revision");
  return s.integer(0);
}

Result<std::int64_t> ConfigStore::revision() {
  std::lock_guard lock(mu_);
  return read_revision();
}

Result<std::int64_t> ConfigStore::advance_revision_past(std::int64_t served, std::string_view actor) {
  std::lock_guard lock(mu_);
  if (auto gone = missing_file()) return *gone;
  Transaction tx(db_, true);
  if (!tx.ok()) return cannot_write();
  auto revision = read_revision();
  if (!revision.ok() || *revision > served) return revision;
  Status s = exec("UPDATE meta SET value = 1 WHERE name = 'writing'");
  if (s) {
    Stmt set(db_, "UPDATE meta SET value = ?1 WHERE name = 'revision'");
    if (!set.bind(1, served + 1).run()) s = db_error(db_, "cannot move the revision");
  }
  if (s) s = exec("UPDATE meta SET value = 0 WHERE name = 'writing'");
  if (s) s = add_audit(actor, ChangeRecord{"database.replaced", "config", "null", "null"}, served + 1);
  if (s) s = tx.commit();
  if (!s) return s.error();
  return served + 1;
}

Result<std::int64_t> ConfigStore::bump_revision() {
  if (Status s = exec("UPDATE meta SET value = value + 1 WHERE name = 'revision'"); !s) return s.error();
  return read_revision();
}

Result<json::object> ConfigStore::read_document(std::vector<Problem>& problems) {
  auto parse = [&](const std::string& text, const std::string& path) -> json::value {
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (!ec) return v;
    // Not quoted: the value may hold the limit store's password, and read tokens see this message.
    // The document keeps it as a string, for an export of the rows as they are.
    problems.push_back(Problem{path, "is not valid JSON"});
    return json::string(text);
  };
  json::object doc;
  {
    Stmt s(db_, "SELECT name, value FROM settings ORDER BY name");
    while (s.step() == SQLITE_ROW) doc[s.text(0)] = parse(s.text(1), s.text(0));
    if (!s.finished()) return db_error(db_, "cannot read the settings of " + options_.path);
  }
  // Limits by (scope, system, interface), in order.
  std::map<std::tuple<std::string, std::string, std::string>, json::array> limits;
  {
    Stmt s(db_, "SELECT scope, system, interface, spec FROM limits ORDER BY scope, system, interface, position");
    while (s.step() == SQLITE_ROW) {
      limits[{s.text(0), s.text(1), s.text(2)}].push_back(
          parse(s.text(3), s.text(0) + " limit of " + s.text(1) + s.text(2)));
    }
    if (!s.finished()) return db_error(db_, "cannot read the limits of " + options_.path);
  }
  auto limits_of = [&](const char* scope, const std::string& system, const std::string& interface) {
    auto it = limits.find({scope, system, interface});
    return it == limits.end() ? json::array() : it->second;
  };
  std::map<std::string, json::array> credentials;
  {
    Stmt s(db_, kSelectCredentials);
    while (s.step() == SQLITE_ROW) {
      json::object c;
      c["id"] = s.text(1);
      c["kind"] = s.text(2);
      if (!s.null(3)) c["api_key_sha256"] = s.text(3);
      if (!s.null(4)) c["sealed_secret"] = s.text(4);
      c["created"] = s.text(5);
      if (!s.null(6)) c["expires"] = s.text(6);
      credentials[s.text(0)].push_back(std::move(c));
    }
    if (!s.finished()) return db_error(db_, "cannot read the credentials of " + options_.path);
  }
  json::array upstreams;
  {
    Stmt s(db_, "SELECT name, targets, connect_timeout, timeout, max_idle_connections, failure_statuses, breaker "
                "FROM upstreams ORDER BY position");
    while (s.step() == SQLITE_ROW) {
      const std::string at = "upstreams[" + std::to_string(upstreams.size()) + "]";
      json::object u;
      u["name"] = s.text(0);
      u["targets"] = parse(s.text(1), at + ".targets");
      u["connect_timeout"] = s.text(2);
      u["timeout"] = s.text(3);
      u["max_idle_connections"] = s.number(4);
      u["failure_statuses"] = parse(s.text(5), at + ".failure_statuses");
      u["breaker"] = parse(s.text(6), at + ".breaker");
      upstreams.push_back(std::move(u));
    }
    if (!s.finished()) return db_error(db_, "cannot read the upstreams of " + options_.path);
  }
  json::array systems;
  {
    Stmt s(db_, "SELECT key, description, enabled, auth, interfaces FROM systems ORDER BY position");
    while (s.step() == SQLITE_ROW) {
      const std::string key = s.text(0);
      json::object o;
      o["key"] = key;
      o["description"] = s.text(1);
      o["enabled"] = s.flag(2);
      o["auth"] = s.text(3);
      o["interfaces"] = parse(s.text(4), "systems[" + std::to_string(systems.size()) + "].interfaces");
      o["credentials"] = credentials[key];
      o["limits"] = limits_of("system", key, "");
      systems.push_back(std::move(o));
    }
    if (!s.finished()) return db_error(db_, "cannot read the systems of " + options_.path);
  }
  json::array interfaces;
  {
    Stmt s(db_, "SELECT id, description, methods, path, upstream, enabled, public, concurrency, timeout, "
                "concurrency_lease_timeout FROM interfaces ORDER BY position");
    while (s.step() == SQLITE_ROW) {
      const std::string id = s.text(0);
      json::object o;
      o["id"] = id;
      o["description"] = s.text(1);
      o["methods"] = parse(s.text(2), "interfaces[" + std::to_string(interfaces.size()) + "].methods");
      o["path"] = s.text(3);
      o["upstream"] = s.text(4);
      o["enabled"] = s.flag(5);
      o["public"] = s.flag(6);
      if (!s.null(7)) o["concurrency"] = s.number(7);
      if (!s.null(8)) o["timeout"] = s.text(8);
      if (!s.null(9)) o["concurrency_lease_timeout"] = s.text(9);
      o["limits"] = limits_of("interface", "", id);
      interfaces.push_back(std::move(o));
    }
    if (!s.finished()) return db_error(db_, "cannot read the interfaces of " + options_.path);
  }
  json::array grants;
  {
    Stmt s(db_, "SELECT system, interface FROM grants ORDER BY position");
    while (s.step() == SQLITE_ROW) {
      json::object o;
      o["system"] = s.text(0);
      o["interface"] = s.text(1);
      o["limits"] = limits_of("grant", s.text(0), s.text(1));
      grants.push_back(std::move(o));
    }
    if (!s.finished()) return db_error(db_, "cannot read the grants of " + options_.path);
  }
  doc["upstreams"] = std::move(upstreams);
  doc["systems"] = std::move(systems);
  doc["interfaces"] = std::move(interfaces);
  doc["grants"] = std::move(grants);
  return doc;
}

Result<StoredConfig> ConfigStore::read_config(boost::json::object* rows, std::vector<Problem>* problems_out) {
  auto revision = read_revision();
  if (!revision.ok()) return revision.error();
  std::vector<Problem> problems;
  auto doc = read_document(problems);
  if (!doc.ok()) return doc.error();
  if (rows != nullptr) *rows = *doc;
  return parse_document(*doc, *revision, std::move(problems), problems_out);
}

Result<StoredConfig> ConfigStore::parse_document(const json::object& doc, std::int64_t revision,
                                                 std::vector<Problem> problems,
                                                 std::vector<Problem>* problems_out) const {
  // The rows as the JSON form of the file, read by the file's reader: the same checks and messages
  // for a hand edit of the tables as for a typo in a file, reported with the values that are not
  // JSON (read as strings).
  std::string text = text_of(doc);
  std::unique_lock lock(parse_mu_);
  if (problems.empty() && parsed_ != nullptr && text == parsed_text_) return StoredConfig{parsed_, revision};
  LoadResult loaded = load_yaml(text, "");
  if (auto* config = std::get_if<std::shared_ptr<const Config>>(&loaded)) {
    if (problems.empty()) {
      parsed_text_ = std::move(text);
      parsed_ = *config;
      return StoredConfig{std::move(*config), revision};
    }
  } else {
    for (Problem& p : std::get<std::vector<Problem>>(loaded)) problems.push_back(std::move(p));
  }
  lock.unlock();
  std::string message = "the configuration in " + options_.path + " is not valid:";
  for (Problem& p : problems) {
    p.line = 0;
    p.column = 0;
    message += "\n  " + p.to_string();
  }
  if (problems_out != nullptr) *problems_out = std::move(problems);
  return Error{ErrorCode::kInvalidArgument, message};
}

// Each system's credentials as stored, in systems that have nothing else: for a replacement of a
// configuration that does not read as a whole. A row that does not read is left out.
Result<std::vector<System>> ConfigStore::read_credentials() {
  std::vector<System> systems;
  Stmt s(db_, kSelectCredentials);
  while (s.step() == SQLITE_ROW) {
    Credential c;
    c.id = s.text(1);
    const std::string kind = s.text(2);
    if (kind != to_string(Auth::kApiKey) && kind != to_string(Auth::kHmac)) continue;
    c.kind = kind == to_string(Auth::kHmac) ? Auth::kHmac : Auth::kApiKey;
    if (!s.null(3)) c.api_key_sha256 = s.text(3);
    if (!s.null(4)) c.sealed_secret = s.text(4);
    const auto created = parse_time(s.text(5));
    if (!created) continue;
    c.created = *created;
    if (!s.null(6)) {
      c.expires = parse_time(s.text(6));
      if (!c.expires) continue;  // never read as "does not expire"
    }
    if (systems.empty() || systems.back().key != s.text(0)) {
      systems.emplace_back();
      systems.back().key = s.text(0);
    }
    systems.back().credentials.push_back(std::move(c));
  }
  if (!s.finished()) return db_error(db_, "cannot read the credentials of " + options_.path);
  return systems;
}

Result<std::string> ConfigStore::stored_text() {
  std::lock_guard lock(mu_);
  Transaction tx(db_, false);
  if (!tx.ok()) return db_error(db_, "cannot read " + options_.path);
  std::vector<Problem> ignored;  // a value that is not JSON is a string here, and named by load()
  auto doc = read_document(ignored);
  if (!doc.ok()) return doc.error();
  return text_of(*doc);
}

Result<StoredConfig> ConfigStore::load(std::vector<Problem>* problems) {
  json::object doc;
  std::int64_t revision = 0;
  std::vector<Problem> found;
  {
    std::lock_guard lock(mu_);
    Transaction tx(db_, false);  // one snapshot of the file for the revision and every table
    if (!tx.ok()) return db_error(db_, "cannot read " + options_.path);
    auto r = read_revision();
    if (!r.ok()) return r.error();
    revision = *r;
    auto read = read_document(found);
    if (!read.ok()) return read.error();
    doc = std::move(*read);
  }
  // Parsed without the lock: a large configuration takes a while, and revision() (each long poll's
  // look) need not wait for it. A writer may, holding the lock: it parses the configuration it
  // changes, and waits for a parse in progress (mostly of the same rows) rather than make its own.
  return parse_document(doc, revision, std::move(found), problems);
}

Status ConfigStore::write_config(const Config& c) {
  for (const char* table : {"settings", "upstreams", "interfaces", "systems", "credentials", "grants", "limits"}) {
    if (Status s = exec((std::string("DELETE FROM ") + table).c_str()); !s) return s;
  }
  bool ok = true;
  {
    Stmt s(db_, "INSERT INTO settings (name, value) VALUES (?1, ?2)");
    for (const auto& kv : settings_json(c)) ok = ok && s.bind(1, kv.key()).bind(2, text_of(kv.value())).run();
  }
  Stmt limit(db_, "INSERT INTO limits (scope, system, interface, position, spec) VALUES (?1, ?2, ?3, ?4, ?5)");
  auto add_limits = [&](const char* scope, const std::string& system, const std::string& interface,
                        const std::vector<LimitRule>& rules) {
    for (std::size_t i = 0; i < rules.size(); ++i) {
      ok = ok && limit.bind(1, std::string_view(scope)).bind(2, system).bind(3, interface)
                     .bind(4, static_cast<std::int64_t>(i)).bind(5, text_of(to_json(rules[i]))).run();
    }
  };
  {
    Stmt s(db_, "INSERT INTO upstreams (name, position, targets, connect_timeout, timeout, max_idle_connections, "
                "failure_statuses, breaker) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    for (std::size_t i = 0; i < c.upstreams.size(); ++i) {
      const json::object u = to_json(c.upstreams[i]);
      ok = ok && s.bind(1, c.upstreams[i].name).bind(2, static_cast<std::int64_t>(i))
                     .bind(3, text_of(u.at("targets"))).bind(4, u.at("connect_timeout").as_string())
                     .bind(5, u.at("timeout").as_string()).bind(6, std::int64_t{c.upstreams[i].max_idle_connections})
                     .bind(7, text_of(u.at("failure_statuses"))).bind(8, text_of(u.at("breaker"))).run();
    }
  }
  {
    Stmt s(db_, "INSERT INTO interfaces (id, position, description, methods, path, upstream, enabled, public, "
                "concurrency, timeout, concurrency_lease_timeout) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
    for (std::size_t i = 0; i < c.interfaces.size(); ++i) {
      const Interface& f = c.interfaces[i];
      const json::object o = to_json(f);
      s.bind(1, f.id).bind(2, static_cast<std::int64_t>(i)).bind(3, f.description).bind(4, text_of(o.at("methods")))
          .bind(5, f.path).bind(6, f.upstream).bind(7, std::int64_t{f.enabled}).bind(8, std::int64_t{f.is_public});
      if (f.concurrency) {
        s.bind(9, *f.concurrency);
      } else {
        s.bind_null(9);
      }
      if (f.timeout) {
        s.bind(10, o.at("timeout").as_string());
      } else {
        s.bind_null(10);
      }
      if (f.concurrency_lease_timeout) {
        s.bind(11, o.at("concurrency_lease_timeout").as_string());
      } else {
        s.bind_null(11);
      }
      ok = ok && s.run();
      add_limits("interface", "", f.id, f.limits);
    }
  }
  {
    Stmt s(db_, "INSERT INTO systems (key, position, description, enabled, auth, interfaces) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    Stmt cred(db_, "INSERT INTO credentials (system, id, position, kind, api_key_sha256, sealed_secret, created, "
                   "expires) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    for (std::size_t i = 0; i < c.systems.size(); ++i) {
      const System& sys = c.systems[i];
      ok = ok && s.bind(1, sys.key).bind(2, static_cast<std::int64_t>(i)).bind(3, sys.description)
                     .bind(4, std::int64_t{sys.enabled}).bind(5, std::string_view(to_string(sys.auth)))
                     .bind(6, text_of(to_json(sys).at("interfaces"))).run();
      for (std::size_t j = 0; j < sys.credentials.size(); ++j) {
        const Credential& k = sys.credentials[j];
        cred.bind(1, sys.key).bind(2, k.id).bind(3, static_cast<std::int64_t>(j))
            .bind(4, std::string_view(to_string(k.kind))).bind(7, format_time(k.created));
        if (k.kind == Auth::kApiKey) {
          cred.bind(5, k.api_key_sha256).bind_null(6);
        } else {
          cred.bind_null(5).bind(6, k.sealed_secret);
        }
        if (k.expires) {
          cred.bind(8, format_time(*k.expires));
        } else {
          cred.bind_null(8);
        }
        ok = ok && cred.run();
      }
      add_limits("system", sys.key, "", sys.limits);
    }
  }
  {
    Stmt s(db_, "INSERT INTO grants (system, interface, position) VALUES (?1, ?2, ?3)");
    for (std::size_t i = 0; i < c.grants.size(); ++i) {
      const Grant& g = c.grants[i];
      ok = ok && s.bind(1, g.system).bind(2, g.interface).bind(3, static_cast<std::int64_t>(i)).run();
      add_limits("grant", g.system, g.interface, g.limits);
    }
  }
  if (!ok) return db_error(db_, "cannot write the configuration to " + options_.path);
  return {};
}

Status ConfigStore::add_audit(std::string_view actor, const ChangeRecord& record, std::int64_t revision) {
  Stmt s(db_, "INSERT INTO audit (at, actor, action, target, revision, before, after) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!s.bind(1, now_seconds()).bind(2, actor).bind(3, record.action).bind(4, record.target).bind(5, revision)
           .bind(6, redact_credentials(record.before)).bind(7, redact_credentials(record.after)).run()) {
    return db_error(db_, "cannot write the audit log");
  }
  for (const ChangeRecord& with : record.along) {
    if (Status st = add_audit(actor, with, revision); !st) return st;
  }
  return {};
}

WriteResult ConfigStore::update(std::string_view actor, const Change& change) {
  return write(actor, change, std::nullopt, true);
}

WriteResult ConfigStore::write(std::string_view actor, const Change& change, std::optional<std::int64_t> if_revision,
                               bool needs_current) {
  std::lock_guard lock(mu_);
  if (auto gone = missing_file()) return refused(Refusal::Kind::kFailed, gone->message, 0);
  Transaction tx(db_, true);
  if (!tx.ok()) return refused(Refusal::Kind::kFailed, cannot_write().message, 0);
  auto revision = read_revision();
  if (!revision.ok()) return refused(Refusal::Kind::kFailed, revision.error().message, 0);
  if (if_revision && *if_revision != *revision) {
    return refused(Refusal::Kind::kStale,
                   "the configuration changed since revision " + std::to_string(*if_revision) + " (it is at " +
                       std::to_string(*revision) + "): read it again and redo the change",
                   *revision);
  }
  // A replacement does not need what it replaces to be valid: it is how rows broken by hand get
  // fixed. It does need it read, though, to carry credentials over.
  json::object rows;  // as read, for the audit row when they are not valid
  std::vector<Problem> stored_problems;
  auto current = read_config(&rows, &stored_problems);
  if (!current.ok() && (needs_current || current.error().code != ErrorCode::kInvalidArgument)) {
    const bool invalid = current.error().code == ErrorCode::kInvalidArgument;
    return WriteResult{Refusal{invalid ? Refusal::Kind::kStoredInvalid : Refusal::Kind::kFailed,
                               current.error().message, std::move(stored_problems)},
                       *revision};
  }
  Config next = current.ok() ? *current->config : Config{};
  if (!current.ok()) {
    // The credentials have a table of their own, and only hashes and sealed secrets in it: nothing
    // could restore them, so they are carried over even when the rest does not read.
    auto kept = read_credentials();
    if (!kept.ok()) return refused(Refusal::Kind::kFailed, kept.error().message, *revision);
    next.systems = std::move(*kept);
  }
  ChangeRecord record;
  if (std::optional<Refusal> r = change(next, record, *revision)) return WriteResult{std::move(r), *revision};
  // What is replaced did not read: the audit row keeps the rows as they were, not the empty
  // configuration the change started from.
  if (!current.ok()) record.before = text_of(rows);
  std::vector<Problem> problems = validate(next);
  for (Problem& p : write_problems(next, current.ok() ? current->config.get() : nullptr)) problems.push_back(std::move(p));
  if (!problems.empty()) {
    return WriteResult{Refusal{Refusal::Kind::kInvalid, "the change would make the configuration invalid",
                               std::move(problems)},
                       *revision};
  }
  if (current.ok() && text_of(to_json(next)) == text_of(to_json(*current->config))) {
    return WriteResult{std::nullopt, *revision};
  }
  Status s = exec("UPDATE meta SET value = 1 WHERE name = 'writing'");
  if (s) s = write_config(next);
  Result<std::int64_t> committed = s ? bump_revision() : Result<std::int64_t>(s.error());
  if (committed.ok()) s = exec("UPDATE meta SET value = 0 WHERE name = 'writing'");
  if (committed.ok() && s) s = add_audit(actor, record, *committed);
  if (!committed.ok()) s = committed.error();
  if (s) s = tx.commit();
  if (!s) return refused(Refusal::Kind::kFailed, s.error().message, *revision);
  return WriteResult{std::nullopt, *committed};
}

WriteResult ConfigStore::replace(std::string_view actor, std::string_view action, const Config& config,
                                 std::optional<std::int64_t> if_revision) {
  return write(
      actor,
      [&](Config& c, ChangeRecord& record, std::int64_t) -> std::optional<Refusal> {
        record.action = std::string(action);
        record.target = "config";
        record.before = text_of(to_json(c));
        Config next = config;
        // The store as a read token is shown it (what it may read, edit and send back): its
        // password placeholder keeps the stored password, and stands for no other address's.
        if (has_redacted_password(next.store)) {
          if (redact_store_password(c.store) != next.store) {
            return Refusal{Refusal::Kind::kInvalid, "the change would make the configuration invalid",
                           {Problem{"store", redacted_store_message(c.store)}}};
          }
          next.store = c.store;
        }
        for (System& s : next.systems) {
          if (s.credentials_listed || !s.credentials.empty()) continue;
          for (const System& old : c.systems) {
            if (old.key == s.key) s.credentials = old.credentials;
          }
        }
        c = std::move(next);
        record.after = text_of(to_json(c));
        return std::nullopt;
      },
      if_revision, false);
}

// A token's name is shown in the audit log's actors, "token:<name> (<id>)", and in the console: it
// cannot pass for another token (no parentheses, nothing invisible or reordering), nor fill a screen.
bool token_name_ok(std::string_view name) {
  return !has_control_characters(name) && !has_invisible_characters(name) &&
         name.find_first_of("()") == std::string_view::npos && name.size() <= 128;
}

Result<std::pair<TokenInfo, std::string>> ConfigStore::create_token(std::string_view actor, Role role,
                                                                     std::string_view name, Nanos lifetime) {
  if (lifetime != Nanos{0} && (lifetime < kShortestTokenLifetime || lifetime > kLongestTokenLifetime)) {
    return Error{ErrorCode::kInvalidArgument, "a token's lifetime must be from 1m to 3650d, got " +
                                                  format_duration(lifetime)};
  }
  if (!token_name_ok(name)) return Error{ErrorCode::kInvalidArgument, std::string(kTokenNameRule)};
  TokenInfo info;
  info.id = random_id("at_");
  info.name = std::string(name);
  info.role = role;
  info.created = now_seconds();
  info.created_by = std::string(actor);
  if (lifetime != Nanos{0}) {  // rounded up to a whole second: it lasts at least as long as asked
    info.expires = info.created + (lifetime.count() + 999'999'999) / 1'000'000'000;
  }
  const std::string token = random_token("sluice_at_");
  info.token_sha256 = sha256_hex(token);
  std::lock_guard lock(mu_);
  if (auto gone = missing_file()) return *gone;
  Transaction tx(db_, true);
  if (!tx.ok()) return cannot_write();
  Status s = exec("UPDATE meta SET value = 1 WHERE name = 'writing'");
  if (s) {
    Stmt insert(db_, "INSERT INTO admin_tokens (id, name, role, token_sha256, created, created_by, expires) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULLIF(?7, 0))");
    if (!insert.bind(1, info.id).bind(2, info.name).bind(3, std::string_view(to_string(role)))
             .bind(4, info.token_sha256).bind(5, info.created).bind(6, info.created_by).bind(7, info.expires).run()) {
      s = db_error(db_, "cannot add the token");
    }
  }
  Result<std::int64_t> revision = s ? bump_revision() : Result<std::int64_t>(s.error());
  if (!revision.ok()) return revision.error();
  if (s = exec("UPDATE meta SET value = 0 WHERE name = 'writing'"); !s) return s.error();
  json::object after{{"id", info.id}, {"name", info.name}, {"role", to_string(role)}};
  if (info.expires != 0) after["expires"] = format_time(info.expires);
  if (s = add_audit(actor, ChangeRecord{"token.create", "tokens/" + info.id, "null", text_of(after)}, *revision); !s) {
    return s.error();
  }
  if (s = tx.commit(); !s) return s.error();
  return std::pair{info, token};
}

Result<std::vector<TokenInfo>> ConfigStore::tokens() {
  std::lock_guard lock(mu_);
  Stmt s(db_, "SELECT id, name, role, created, created_by, token_sha256, IFNULL(expires, 0) FROM admin_tokens "
              "ORDER BY created, id");
  std::vector<TokenInfo> out;
  int rc = 0;
  while ((rc = s.step()) == SQLITE_ROW) {
    out.push_back(TokenInfo{s.text(0), s.text(1), role_from_string(s.text(2)).value_or(Role::kRead), s.integer(3),
                            s.text(4), s.text(5), s.integer(6)});
  }
  if (rc != SQLITE_DONE) return db_error(db_, "cannot read the tokens");
  return out;
}

Result<bool> ConfigStore::delete_token(std::string_view actor, std::string_view id) {
  std::lock_guard lock(mu_);
  if (auto gone = missing_file()) return *gone;
  Transaction tx(db_, true);
  if (!tx.ok()) return cannot_write();
  std::string before;
  {
    Stmt s(db_, "SELECT name, role FROM admin_tokens WHERE id = ?1");
    s.bind(1, id);
    const int rc = s.step();
    if (rc == SQLITE_DONE) return false;
    if (rc != SQLITE_ROW) return db_error(db_, "cannot read the tokens");
    before = text_of(json::object{{"id", id}, {"name", s.text(0)}, {"role", s.text(1)}});
  }
  Status s = exec("UPDATE meta SET value = 1 WHERE name = 'writing'");
  if (s) {
    Stmt del(db_, "DELETE FROM admin_tokens WHERE id = ?1");
    if (!del.bind(1, id).run()) s = db_error(db_, "cannot delete the token");
  }
  Result<std::int64_t> revision = s ? bump_revision() : Result<std::int64_t>(s.error());
  if (!revision.ok()) return revision.error();
  if (s = exec("UPDATE meta SET value = 0 WHERE name = 'writing'"); !s) return s.error();
  if (s = add_audit(actor, ChangeRecord{"token.delete", "tokens/" + std::string(id), before, "null"}, *revision); !s) {
    return s.error();
  }
  if (s = tx.commit(); !s) return s.error();
  return true;
}

Status ConfigStore::note(std::string_view actor, const ChangeRecord& record) {
  std::lock_guard lock(mu_);
  if (auto gone = missing_file()) return *gone;
  Transaction tx(db_, true);
  if (!tx.ok()) return cannot_write();
  const Result<std::int64_t> revision = read_revision();
  if (!revision.ok()) return revision.error();
  if (Status s = add_audit(actor, record, *revision); !s) return s;
  return tx.commit();
}

Result<std::vector<AuditEntry>> ConfigStore::audit(std::size_t limit, std::optional<std::int64_t> before_id) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "SELECT id, at, actor, action, target, revision, before, after FROM audit "
              "WHERE ?1 IS NULL OR id < ?1 ORDER BY id DESC LIMIT ?2");
  if (before_id) {
    s.bind(1, *before_id);
  } else {
    s.bind_null(1);
  }
  s.bind(2, static_cast<std::int64_t>(limit));
  std::vector<AuditEntry> out;
  int rc = 0;
  while ((rc = s.step()) == SQLITE_ROW) {
    out.push_back(AuditEntry{s.integer(0), s.integer(1), s.text(2), s.text(3), s.text(4), s.integer(5), s.text(6),
                             s.text(7)});
  }
  if (rc != SQLITE_DONE) return db_error(db_, "cannot read the audit log");
  return out;
}

Status ConfigStore::check() {
  std::lock_guard lock(mu_);
  Stmt s(db_, "PRAGMA quick_check");
  if (s.step() != SQLITE_ROW) return db_error(db_, "cannot check " + options_.path);
  const std::string result = s.text(0);
  if (result != "ok") return Error{ErrorCode::kStoreUnavailable, options_.path + ": " + result};
  return {};
}

}  // namespace sluice::config
