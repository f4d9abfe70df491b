// The SQLite configuration store: migrations, whole-configuration commits that validate first, the
// revision, hand edits of the tables, the audit log, tokens, and several stores on one file.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <boost/json/serialize.hpp>
#include <thread>

#include "config/crypto.h"
#include "config/json.h"
#include "control_test.h"

namespace sluice::config {
namespace {

using control_test::base_yaml;
using control_test::open_store;
using control_test::parse;
using control_test::yaml_of;

// Runs SQL on the file with the sqlite3 library directly, as a person with the sqlite3 shell would.
void hand_edit(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

std::string query_one(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* s = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    out = text != nullptr ? text : "";
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::temp_dir() + "/sluice.db";
    store_ = open_store(path_);
    ASSERT_NE(store_, nullptr);
  }

  std::string path_;
  std::unique_ptr<ConfigStore> store_;
};

TEST_F(StoreTest, AFreshDatabaseHoldsTheDefaultConfigurationAtRevisionOne) {
  auto loaded = store_->load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->revision, 1);
  EXPECT_EQ(yaml_of(*loaded->config), yaml_of(Config{}));
  EXPECT_EQ(query_one(path_, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(query_one(path_, "PRAGMA user_version"), std::to_string(ConfigStore::schema_version()));
}

// It holds the Redis password, sealed secrets and token hashes: its owner's alone, as are its -wal
// and -shm files, whatever the umask (022 would leave them readable by every user).
// SQLite says only "unable to open database file": the store says what to mend.
TEST_F(StoreTest, ADatabaseThatCannotBeOpenedSaysWhy) {
  const std::string dir = testing::temp_dir();
  auto at_a_directory = ConfigStore::open({.path = dir});
  ASSERT_FALSE(at_a_directory.ok());
  EXPECT_NE(at_a_directory.error().message.find("it is a directory: give the database file's path, such as " + dir +
                                                "/sluice.db"),
            std::string::npos)
      << at_a_directory.error().message;
  auto in_no_directory = ConfigStore::open({.path = dir + "/none/sluice.db"});
  ASSERT_FALSE(in_no_directory.ok());
  EXPECT_NE(in_no_directory.error().message.find("there is no directory " + dir + "/none"), std::string::npos)
      << in_no_directory.error().message;
}

// A --db that is a symbolic link to nothing is said to be one, naming where it points (and the file
// that comes to, for a relative link), in every mode: SQLite said only "unable to open database
// file", or made the file at the link's end with the umask's mode.
TEST_F(StoreTest, ADanglingSymbolicLinkIsSaidToBeOneNamingItsTarget) {
  namespace fs = std::filesystem;
  const std::string dir = fs::canonical(testing::temp_dir()).string();
  const std::string tail = ", which does not exist: point the link at the database, or give the database's own path";
  ASSERT_EQ(::symlink("gone.db", (dir + "/relative.db").c_str()), 0);
  ASSERT_EQ(::symlink((dir + "/none/sluice.db").c_str(), (dir + "/absolute.db").c_str()), 0);
  ASSERT_EQ(::symlink("relative.db", (dir + "/chain.db").c_str()), 0);
  const std::pair<std::string, std::string> cases[] = {
      {dir + "/relative.db", dir + "/relative.db is a symbolic link to gone.db (" + dir + "/gone.db)" + tail},
      {dir + "/absolute.db", dir + "/absolute.db is a symbolic link to " + dir + "/none/sluice.db" + tail},
      {dir + "/chain.db", dir + "/chain.db is a symbolic link to relative.db (" + dir + "/gone.db)" + tail},
  };
  for (const auto& [path, message] : cases) {
    for (const auto access : {StoreOptions::Access::kCreate, StoreOptions::Access::kExisting,
                              StoreOptions::Access::kReadOnly}) {
      auto store = ConfigStore::open({.path = path, .access = access});
      ASSERT_FALSE(store.ok()) << path;
      EXPECT_EQ(store.error().message, message);
    }
  }
  EXPECT_FALSE(fs::exists(dir + "/gone.db")) << "nothing is made at the link's end";
}

TEST_F(StoreTest, ANewDatabaseAndItsLogAreItsOwnersAlone) {
  const std::string path = testing::temp_dir() + "/private.db";
  const mode_t before = ::umask(022);
  auto store = open_store(path);
  ::umask(before);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->replace("test", "config.import", *parse(base_yaml())).ok());
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << file;
  }
}

TEST_F(StoreTest, ReopeningMigratesNothingAndKeepsWhatWasCommitted) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  store_.reset();
  auto again = open_store(path_);
  auto loaded = again->load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->revision, 2);
  EXPECT_EQ(yaml_of(*loaded->config), yaml_of(*parse(base_yaml())));
}

// Schema version 1 had no concurrency_lease_timeout column: such a database is migrated as it is
// opened, and keeps what it held.
TEST_F(StoreTest, AVersionOneDatabaseIsMigratedKeepingItsConfiguration) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  ASSERT_TRUE(store_->create_token("test", Role::kAdmin, "ops").ok());
  store_.reset();
  hand_edit(path_, "ALTER TABLE interfaces DROP COLUMN concurrency_lease_timeout; "
                   "ALTER TABLE admin_tokens DROP COLUMN expires; PRAGMA user_version = 1");
  auto again = open_store(path_);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(query_one(path_, "PRAGMA user_version"), std::to_string(ConfigStore::schema_version()));
  auto loaded = again->load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(yaml_of(*loaded->config), yaml_of(*parse(base_yaml())));
  auto tokens = again->tokens();
  ASSERT_TRUE(tokens.ok()) << tokens.error().message;
  ASSERT_EQ(tokens->size(), 1u);
  EXPECT_EQ((*tokens)[0].expires, 0) << "a token from before expiries never expires";
}

// A token made with a lifetime keeps its expiry (whole seconds, rounded up); one too short to be
// used or past ten years is refused.
TEST_F(StoreTest, ATokensExpiryIsKept) {
  ManualClock clock(std::chrono::seconds(1'800'000'000));
  store_.reset();
  auto store = open_store(path_, &clock);
  auto created = store->create_token("test", Role::kRead, "grafana", std::chrono::hours(24 * 90) + std::chrono::milliseconds(1));
  ASSERT_TRUE(created.ok()) << created.error().message;
  const std::int64_t expires = 1'800'000'000 + 90 * 86'400 + 1;
  EXPECT_EQ(created->first.expires, expires);
  EXPECT_EQ((*store->tokens())[0].expires, expires);
  EXPECT_FALSE((*store->tokens())[0].expired_at(expires - 1));
  EXPECT_TRUE((*store->tokens())[0].expired_at(expires));
  EXPECT_NE((*store->audit(1))[0].after.find("\"expires\":\"" + format_time(expires) + "\""), std::string::npos);
  for (const Nanos lifetime : {Nanos{std::chrono::seconds(59)}, Nanos{-std::chrono::hours(1)},
                               Nanos{std::chrono::hours(24 * 3651)}}) {
    const auto refused = store->create_token("test", Role::kRead, "x", lifetime);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(store->tokens()->size(), 1u);
}

// What an earlier version took and today's rules refuse when written (here a description over
// 4096 bytes) is still read, so a gateway on the file starts; and a change to something else is
// not refused for it.
TEST_F(StoreTest, AValueAnEarlierVersionTookIsReadAndDoesNotBlockOtherChanges) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  hand_edit(path_, "UPDATE systems SET description = '" + std::string(5000, 'd') + "' WHERE position = 0");
  auto loaded = store_->load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->config->systems[0].description.size(), 5000u);
  Config next = *loaded->config;
  next.systems[1].enabled = !next.systems[1].enabled;
  const WriteResult changed = store_->replace("test", "config.import", next);
  EXPECT_TRUE(changed.ok()) << (changed.refusal ? changed.refusal->message : "");
  next.systems[0].description += "more";
  const WriteResult longer = store_->replace("test", "config.import", next);
  ASSERT_FALSE(longer.ok());
  ASSERT_EQ(longer.refusal->problems.size(), 1u);
  EXPECT_EQ(longer.refusal->problems[0].path, "systems[0].description");
}

TEST_F(StoreTest, AnInterfacesConcurrencyLeaseTimeoutIsKept) {
  std::string text = base_yaml();
  const std::string line = "    concurrency: 10\n";
  text.insert(text.find(line) + line.size(), "    concurrency_lease_timeout: 2m\n");
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(text)).ok());
  auto loaded = store_->load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->config->interfaces[0].concurrency_lease_timeout, std::chrono::minutes(2));
  EXPECT_NE(yaml_of(*loaded->config).find("    concurrency_lease_timeout: 2m\n"), std::string::npos);
}

TEST_F(StoreTest, ADatabaseFromANewerSluiceIsRefused) {
  store_.reset();
  hand_edit(path_, "PRAGMA user_version = 99");
  auto store = ConfigStore::open({.path = path_});
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("schema version 99"), std::string::npos) << store.error().message;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// sluice's tables are not put beside another application's, whatever the store may do to a file.
TEST_F(StoreTest, AnotherApplicationsDatabaseIsRefusedAndLeftAsItWas) {
  const std::string other = testing::temp_dir() + "/other.db";
  hand_edit(other, "CREATE TABLE foo (x); INSERT INTO foo VALUES (1)");
  const std::string before = bytes_of(other);
  for (const auto access : {StoreOptions::Access::kCreate, StoreOptions::Access::kExisting,
                            StoreOptions::Access::kReadOnly}) {
    SCOPED_TRACE(static_cast<int>(access));
    auto store = ConfigStore::open({.path = other, .access = access});
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(store.error().message, other + " is an SQLite database but not sluice's (it holds tables sluice does "
                                             "not make: foo): sluice leaves it alone. Give the path of a sluice "
                                             "database, or of a new file");
    EXPECT_EQ(bytes_of(other), before);
    EXPECT_EQ(query_one(other, "PRAGMA journal_mode"), "delete");
  }
  EXPECT_EQ(query_one(other, "SELECT count(*) FROM sqlite_master"), "1");
}

// An empty file is a database to be: made one where the store may create, refused elsewhere.
TEST_F(StoreTest, AnEmptyFileBecomesADatabaseOnlyWhereOneMayBeCreated) {
  const std::string empty = testing::temp_dir() + "/empty.db";
  testing::write_file(empty, "");
  for (const auto access : {StoreOptions::Access::kExisting, StoreOptions::Access::kReadOnly}) {
    auto store = ConfigStore::open({.path = empty, .access = access});
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.error().message,
              empty + " is empty: it holds no sluice database (sluice config import or sluice token create makes one)");
    EXPECT_EQ(bytes_of(empty), "");
  }
  EXPECT_NE(open_store(empty), nullptr);
  EXPECT_EQ(query_one(empty, "PRAGMA user_version"), std::to_string(ConfigStore::schema_version()));
}

// Read-only, an older schema is read as migrated (in memory) and the file keeps its version; and
// nothing can be written through it.
TEST_F(StoreTest, AReadOnlyStoreWritesNothingAndReadsAnOlderSchemaAsMigrated) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  store_.reset();
  hand_edit(path_, "ALTER TABLE interfaces DROP COLUMN concurrency_lease_timeout; "
                   "ALTER TABLE admin_tokens DROP COLUMN expires; PRAGMA user_version = 1");
  auto store = ConfigStore::open({.path = path_, .access = StoreOptions::Access::kReadOnly});
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto loaded = (*store)->load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->revision, 2);
  EXPECT_EQ(yaml_of(*loaded->config), yaml_of(*parse(base_yaml())));
  EXPECT_EQ(query_one(path_, "PRAGMA user_version"), "1");
  store->reset();
  auto current = ConfigStore::open({.path = path_});  // migrated, then opened read-only as it is
  ASSERT_TRUE(current.ok());
  current->reset();
  const std::string before = bytes_of(path_);
  auto read_only = ConfigStore::open({.path = path_, .access = StoreOptions::Access::kReadOnly});
  ASSERT_TRUE(read_only.ok()) << read_only.error().message;
  EXPECT_FALSE((*read_only)->replace("test", "config.import", Config{}).ok());
  EXPECT_FALSE((*read_only)->create_token("test", Role::kAdmin, "x").ok());
  EXPECT_EQ(*(*read_only)->revision(), 2);
  read_only->reset();
  EXPECT_EQ(bytes_of(path_), before);
}

TEST_F(StoreTest, EveryCommitMovesTheRevisionAndAnUnchangedConfigurationCommitsNothing) {
  const auto cfg = parse(base_yaml());
  const WriteResult first = store_->replace("test", "config.import", *cfg);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first.revision, 2);
  EXPECT_EQ(store_->replace("test", "config.import", *cfg).revision, 2);
  Config changed = *cfg;
  changed.systems[0].description = "changed";
  EXPECT_EQ(store_->replace("test", "config.import", changed).revision, 3);
  EXPECT_EQ(*store_->revision(), 3);
}

TEST_F(StoreTest, AnInvalidChangeIsRefusedWholeWithEveryProblemAndChangesNothing) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  const WriteResult w = store_->update("test", [](Config& c, ChangeRecord& r, std::int64_t) -> std::optional<Refusal> {
    r.action = "test";
    c.systems[0].description = "this part alone would be fine";
    c.interfaces[0].upstream = "nowhere";
    c.grants[0].interface = "nothing";
    return std::nullopt;
  });
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.refusal->kind, Refusal::Kind::kInvalid);
  ASSERT_EQ(w.refusal->problems.size(), 2u);
  EXPECT_EQ(w.refusal->problems[0].path, "interfaces[0].upstream");
  EXPECT_EQ(w.refusal->problems[1].path, "grants[0].interface");
  EXPECT_EQ(*store_->revision(), 2);
  EXPECT_EQ(store_->load()->config->systems[0].description, "");
}

TEST_F(StoreTest, AChangeThatRefusesCommitsNothingOfWhatItDid) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  const WriteResult w = store_->update("test", [](Config& c, ChangeRecord&, std::int64_t) -> std::optional<Refusal> {
    c.systems.clear();
    return Refusal{Refusal::Kind::kConflict, "no", {}};
  });
  EXPECT_EQ(w.refusal->kind, Refusal::Kind::kConflict);
  EXPECT_EQ(store_->load()->config->systems.size(), 2u);
}

// A change is given the revision it applies to, read in its own transaction, with what another
// writer (another process) committed since this one last read: a precondition the change checks on
// it (the admin API's If-Match) holds until the commit.
TEST_F(StoreTest, AChangeIsGivenTheRevisionItAppliesTo) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  ASSERT_EQ(*store_->revision(), 2);
  auto other = open_store(path_);
  Config changed = *store_->load()->config;
  changed.systems[0].description = "by the other writer";
  ASSERT_EQ(other->replace("other", "config.replace", changed).revision, 3);
  std::int64_t given = 0;
  const WriteResult w =
      store_->update("test", [&](Config& c, ChangeRecord& r, std::int64_t revision) -> std::optional<Refusal> {
        given = revision;
        r.action = "test";
        c.systems[0].description = "then by this one";
        return std::nullopt;
      });
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(given, 3);
  EXPECT_EQ(w.revision, 4);
}

// A large configuration takes a while to parse (5,000 systems: about a quarter of a second): rows
// read again unchanged — by the admin API, the database watcher and the next write, or after a
// commit that moved only the tokens — are parsed once, and rows that changed are parsed anew.
// A token's name as `sluice token create --name` passes it, bytes as they are: a stray lead byte
// does not hide the invisible character after it.
TEST_F(StoreTest, ATokenNameThatIsNotUtf8IsRefused) {
  EXPECT_FALSE(store_->create_token("test", Role::kRead, "a\xc3\u200b").ok());
  EXPECT_FALSE(store_->create_token("test", Role::kRead, "a\xf0\u200bb").ok());
  EXPECT_TRUE(store_->create_token("test", Role::kRead, "ops é 运维").ok());
}

TEST_F(StoreTest, RowsReadAgainUnchangedAreNotParsedAgain) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  const auto first = store_->load();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(store_->load()->config, first->config);  // the very same configuration
  ASSERT_TRUE(store_->create_token("test", Role::kRead, "grafana").ok());
  const auto after_token = store_->load();
  EXPECT_GT(after_token->revision, first->revision);
  EXPECT_EQ(after_token->config, first->config);

  const std::string description = first->config->systems[0].description;
  hand_edit(path_, "UPDATE systems SET description = 'by hand' WHERE key = 'crm'");
  const auto edited = store_->load();
  ASSERT_TRUE(edited.ok());
  EXPECT_NE(edited->config, first->config);
  EXPECT_EQ(edited->config->systems[0].description, "by hand");
  EXPECT_EQ(first->config->systems[0].description, description);  // what was read stays as it was
}

TEST_F(StoreTest, AStaleExpectedRevisionIsRefused) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  const WriteResult w = store_->replace("test", "config.replace", Config{}, 1);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.refusal->kind, Refusal::Kind::kStale);
  EXPECT_EQ(w.revision, 2);
  EXPECT_TRUE(store_->replace("test", "config.replace", Config{}, 2).ok());
}

TEST_F(StoreTest, AHandEditMovesTheRevisionAndAnInvalidOneIsReportedWithItsPath) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  hand_edit(path_, "UPDATE systems SET description = 'by hand' WHERE key = 'crm'");
  EXPECT_GT(*store_->revision(), 2);
  EXPECT_EQ(store_->load()->config->systems[0].description, "by hand");
  const std::int64_t before = *store_->revision();
  hand_edit(path_, "UPDATE limits SET spec = '{\"algorithm\":\"fixed_window\",\"limit\":100,\"period\":\"forever\"}' "
                   "WHERE scope = 'system' AND system = 'crm'");
  EXPECT_GT(*store_->revision(), before);
  auto loaded = store_->load();
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message.find("systems[0].limits[0].period: must be a duration"), std::string::npos)
      << loaded.error().message;
}

TEST_F(StoreTest, ATableThatCannotBeReadIsAnErrorNotAShorterConfiguration) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  hand_edit(path_, "DROP TABLE grants");
  auto loaded = store_->load();
  ASSERT_FALSE(loaded.ok()) << "loaded " << loaded->config->grants.size() << " grants";
  EXPECT_EQ(loaded.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(loaded.error().message.find("cannot read the grants"), std::string::npos) << loaded.error().message;
  EXPECT_NE(loaded.error().message.find("no such table: grants"), std::string::npos) << loaded.error().message;
  const std::int64_t revision = *store_->revision();
  const WriteResult w = store_->replace("test", "config.replace", *parse(base_yaml()));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.refusal->kind, Refusal::Kind::kFailed);
  EXPECT_EQ(*store_->revision(), revision);
}

// A number or flag column a hand edit filled with text is read as a file's value would be: "true"
// is true, and what is no flag or no number is a problem, never a silent 0.
TEST_F(StoreTest, AHandEditsTextInANumberColumnIsReadAsAFilesValueWouldBe) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  hand_edit(path_, "UPDATE systems SET enabled = 'true' WHERE key = 'erp'");
  hand_edit(path_, "UPDATE systems SET enabled = 0 WHERE key = 'crm'");
  auto loaded = store_->load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(loaded->config->systems[1].enabled);
  EXPECT_FALSE(loaded->config->systems[0].enabled);
  hand_edit(path_, "UPDATE systems SET enabled = 'yes' WHERE key = 'erp'");
  hand_edit(path_, "UPDATE interfaces SET concurrency = 'abc' WHERE id = 'orders'");
  hand_edit(path_, "UPDATE interfaces SET public = 2 WHERE id = 'users'");
  std::vector<Problem> problems;
  loaded = store_->load(&problems);
  ASSERT_FALSE(loaded.ok());
  std::vector<std::string> paths;
  for (const Problem& p : problems) paths.push_back(p.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"systems[1].enabled", "interfaces[0].concurrency", "interfaces[1].public"}))
      << loaded.error().message;
}

TEST_F(StoreTest, AuditRowsSayWhoDidWhatWhenWithBeforeAndAfterButNoSecrets) {
  ManualClock clock(std::chrono::seconds(1'800'000'000));
  auto store = open_store(path_, &clock);
  ASSERT_TRUE(store->replace("alice", "config.import", *parse(base_yaml())).ok());
  const WriteResult w = store->update("bob", [](Config& c, ChangeRecord& r, std::int64_t) -> std::optional<Refusal> {
    r = {"credential.create", "systems/crm/credentials/ak_1", "null", ""};
    Credential k;
    k.id = "ak_1";
    k.api_key_sha256 = sha256_hex("sluice_ak_secret");
    c.systems[0].auth = Auth::kApiKey;
    c.systems[0].credentials.push_back(k);
    r.after = boost::json::serialize(to_json(c.systems[0]));
    return std::nullopt;
  });
  ASSERT_TRUE(w.ok());
  auto entries = store->audit(10);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 2u);
  const AuditEntry& last = (*entries)[0];
  EXPECT_EQ(last.actor, "bob");
  EXPECT_EQ(last.action, "credential.create");
  EXPECT_EQ(last.target, "systems/crm/credentials/ak_1");
  EXPECT_EQ(last.revision, w.revision);
  EXPECT_EQ(last.at, 1'800'000'000);
  EXPECT_EQ(last.before, "null");
  EXPECT_NE(last.after.find("\"ak_1\""), std::string::npos);
  EXPECT_EQ(last.after.find(sha256_hex("sluice_ak_secret")), std::string::npos) << last.after;
  EXPECT_EQ((*entries)[1].actor, "alice");
  EXPECT_EQ((*store->audit(10, last.id)).size(), 1u);
}

TEST_F(StoreTest, TokensAreKeptOnlyAsHashesAndCanBeDeleted) {
  auto created = store_->create_token("test", Role::kRead, "grafana");
  ASSERT_TRUE(created.ok());
  const auto& [info, token] = *created;
  EXPECT_TRUE(token.starts_with("sluice_at_"));
  EXPECT_EQ(info.token_sha256, sha256_hex(token));
  EXPECT_EQ(query_one(path_, "SELECT token_sha256 FROM admin_tokens"), sha256_hex(token));
  EXPECT_EQ(query_one(path_, "SELECT count(*) FROM admin_tokens WHERE token_sha256 LIKE '%" + token + "%'"), "0");
  EXPECT_EQ(store_->tokens()->size(), 1u);
  EXPECT_TRUE(*store_->delete_token("test", info.id));
  EXPECT_FALSE(*store_->delete_token("test", info.id));
  EXPECT_TRUE(store_->tokens()->empty());
  EXPECT_EQ((*store_->audit(10))[0].action, "token.delete");
}

TEST_F(StoreTest, TwoStoresOnOneFileSeeEachOthersCommits) {
  auto other = open_store(path_);
  ASSERT_TRUE(other->replace("other", "config.import", *parse(base_yaml())).ok());
  EXPECT_EQ(*store_->revision(), 2);
  EXPECT_EQ(store_->load()->config->systems.size(), 2u);
}

// Each checks, in its change, that the configuration is at the revision it read (as the admin API's
// If-Match does).
TEST_F(StoreTest, OfConcurrentWritersExpectingTheSameRevisionExactlyOneCommits) {
  ASSERT_TRUE(store_->replace("test", "config.import", *parse(base_yaml())).ok());
  constexpr int kWriters = 6;
  std::atomic<int> committed{0};
  std::atomic<int> stale{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      auto mine = open_store(path_);  // one connection each, as separate processes would have
      const WriteResult w = mine->update(
          "writer" + std::to_string(i),
          [i](Config& c, ChangeRecord& r, std::int64_t revision) -> std::optional<Refusal> {
            if (revision != 2) return Refusal{Refusal::Kind::kStale, "at revision " + std::to_string(revision), {}};
            r.action = "test";
            c.systems[0].description = "writer " + std::to_string(i);
            return std::nullopt;
          });
      (w.ok() ? committed : stale).fetch_add(1);
      if (!w.ok()) {
        EXPECT_EQ(w.refusal->kind, Refusal::Kind::kStale) << w.refusal->message;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(committed.load(), 1);
  EXPECT_EQ(stale.load(), kWriters - 1);
  EXPECT_EQ(*store_->revision(), 3);
}

// The base configuration with an API key (ak_1) for its first system.
Config with_an_api_key() {
  Config with = *parse(base_yaml());
  Credential k;
  k.id = "ak_1";
  k.api_key_sha256 = sha256_hex("key");
  with.systems[0].credentials.push_back(k);
  return with;
}

TEST_F(StoreTest, ReplacingKeepsTheCredentialsOfSystemsListedWithoutAny) {
  ASSERT_TRUE(store_->replace("test", "config.import", with_an_api_key()).ok());
  Config without = *parse(base_yaml());
  without.systems[0].description = "re-imported from a file";
  ASSERT_TRUE(store_->replace("test", "config.import", without).ok());
  const auto loaded = store_->load();
  ASSERT_EQ(loaded->config->systems[0].credentials.size(), 1u);
  EXPECT_EQ(loaded->config->systems[0].credentials[0].id, "ak_1");
}

// `credentials: []` says there are none: how a leaked key is revoked from a file.
TEST_F(StoreTest, ReplacingWithAnEmptyListOfCredentialsRemovesThem) {
  const Config with = with_an_api_key();
  ASSERT_TRUE(store_->replace("test", "config.import", with).ok());
  std::string text = base_yaml();
  const std::string key = "  - key: " + with.systems[0].key + "\n";
  ASSERT_NE(text.find(key), std::string::npos) << text;
  text.insert(text.find(key) + key.size(), "    credentials: []\n");
  const auto emptied = parse(text);
  ASSERT_TRUE(emptied->systems[0].credentials_listed) << text;
  ASSERT_TRUE(store_->replace("test", "config.import", *emptied).ok());
  EXPECT_TRUE(store_->load()->config->systems[0].credentials.empty());
}

// An import is how rows broken by hand get fixed; it must not also lose the credentials, which are
// kept only as hashes and sealed secrets and so could not be given again.
TEST_F(StoreTest, ReplacingAConfigurationBrokenByHandKeepsTheCredentialsToo) {
  Config with = *parse(base_yaml());
  Credential k;
  k.id = "ak_1";
  k.api_key_sha256 = sha256_hex("key");
  k.created = 1'800'000'000;
  k.expires = 1'900'000'000;
  with.systems[0].credentials.push_back(k);
  ASSERT_TRUE(store_->replace("test", "config.import", with).ok());
  hand_edit(path_, "UPDATE limits SET spec = 'not json' WHERE scope = 'system' AND system = 'crm'");
  ASSERT_FALSE(store_->load().ok());
  const WriteResult fixed = store_->replace("test", "config.import", *parse(base_yaml()));
  ASSERT_TRUE(fixed.ok());
  const auto loaded = store_->load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ASSERT_EQ(loaded->config->systems[0].credentials.size(), 1u);
  EXPECT_EQ(loaded->config->systems[0].credentials[0], k);
}

TEST_F(StoreTest, AQuickCheckOfAHealthyFileSaysOk) { EXPECT_TRUE(store_->check().ok()); }

}  // namespace
}  // namespace sluice::config
