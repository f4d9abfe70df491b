// RedisStore on a Redis Cluster of 3 masters and 3 replicas: exact totals for a fleet, acquire_all
// across slots (one call per slot, refunds when one rejects), hash tags, and a slot migrating
// under load (ASK, then MOVED).
#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "cluster_fixture.h"
#include "fleet.h"
#include "redis/client.h"
#include "redis/resp.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using redis::detail::key_slot;

TEST_F(ClusterTest, FourInstancesAdmitExactlyTheLimitForEveryAlgorithm) {
  expect_exactly_500_admitted(cluster_->address());
}

// Calls made before the slot map is known wait for it, as a single Redis's wait for its connection.
TEST_F(ClusterTest, CallsMadeRightAfterOpenWaitForTheSlotMap) {
  expect_calls_right_after_open_to_wait(cluster_->address());
}

// A cluster's node given as redis:// answers MOVED for the keys of other nodes: that is said, with
// what to write instead, and counts as Redis not answering (the breaker, the logs).
TEST_F(ClusterTest, ANodeGivenAsASingleRedisSaysToAddressTheCluster) {
  auto store = open_store("redis://127.0.0.1:" + std::to_string(cluster_->node(0).port()));
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  std::string error;
  for (const char* key : {"a", "b", "c", "d", "e", "f"}) {
    auto d = store->acquire(key, limit);
    if (!d.ok()) {
      EXPECT_EQ(d.error().code, ErrorCode::kStoreUnavailable);
      error = d.error().message;
    }
  }
  EXPECT_NE(error.find("MOVED"), std::string::npos) << error;
  EXPECT_NE(error.find("give its address as redis-cluster://"), std::string::npos) << error;
  // Keys of several slots in one call: CROSSSLOT, said the same way.
  const LimitRequest both[] = {{"a", &limit, 1}, {"b", &limit, 1}};
  Decision d[2];
  const Status s = store->acquire_all(both, d);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(s.error().message.find("give its address as redis-cluster://"), std::string::npos) << s.error().message;
}

TEST_F(ClusterTest, AcquireAllMakesOneCallPerSlotAndRefundsWhenOneRejects) {
  auto store = open_store(cluster_->address());
  ASSERT_NE(store, nullptr);
  const Limit wide = make(Limit::sliding_log({.limit = 10, .period = 1h}));
  const Limit narrow = make(Limit::gcra({.limit = 1, .period = 1h, .burst = 1}));
  const Limit jobs = make(Limit::concurrency({.limit = 10, .lease_timeout = 1h}));
  // Three keys in three slots (and the narrow one with a second limit in its own slot).
  ASSERT_NE(key_slot("a"), key_slot("b"));
  ASSERT_NE(key_slot("b"), key_slot("c"));
  ASSERT_NE(key_slot("a"), key_slot("c"));
  const LimitRequest requests[] = {{"a", &wide, 3}, {"b", &jobs, 2}, {"c", &narrow, 1}};
  Decision d[3];
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  ASSERT_TRUE(d[0].allowed && d[1].allowed && d[2].allowed);
  EXPECT_EQ(calls("evalsha") + calls("fcall"), 3);
  // Now "c" rejects: what "a" and "b" took is given back before the call returns.
  const Status again = store->acquire_all(requests, d);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_FALSE(d[2].allowed);
  EXPECT_EQ(calls("evalsha") + calls("fcall"), 3 + 3 + 2);  // three decisions, two refunds
  EXPECT_EQ(store->peek("a", wide)->remaining, 7);
  EXPECT_EQ(store->peek("b", jobs)->remaining, 8);
}

// A refund that Redis refuses (an error reply: TRYAGAIN while its slot moves, OOM; here NOPERM, for
// a user whose ACL lets it call scripts by EVALSHA but neither by FCALL nor by EVAL) did not run: the
// lease it was to give back goes back as a give-back (by EVALSHA), rather than hold its place, for
// the whole fleet, until the lease times out (an hour here).
TEST_F(ClusterTest, TheLeasesOfARefundRedisRefusedAreGivenBack) {
  const ClusterUser user(*cluster_, "norefund", {"+@all", "-eval", "-fcall"});
  auto store = open_store(user.address());
  ASSERT_NE(store, nullptr);
  const Limit jobs = make(Limit::concurrency({.limit = 5, .lease_timeout = 1h}));
  const Limit narrow = make(Limit::fixed_window({.limit = 1, .period = 1h}));
  ASSERT_NE(key_slot("sluice:{a}:cc"), key_slot("sluice:{c}:fw"));
  ASSERT_TRUE(store->acquire("c", narrow)->allowed);
  // "c" rejects: the lease "a" took is refunded, by FCALL (NOPERM), then by EVAL (NOPERM again).
  const LimitRequest requests[] = {{"a", &jobs, 1}, {"c", &narrow, 1}};
  Decision d[2];
  const Status s = store->acquire_all(requests, d);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_FALSE(d[1].allowed);
  EXPECT_EQ(errors("NOPERM"), 2) << "the refund was not refused as this test means it to be";
  EXPECT_TRUE(eventually(
      [&] {
        const Result<Decision> p = store->peek("a", jobs);
        return p.ok() && p->remaining == 5;
      },
      5s))
      << "the refused refund's lease is still taken";
}

// A refund that fails (here: never sent, the connection to its node lost and not made again before
// it goes) may leave the leases it was to give back taken: they go back as give-backs, sent again
// until the node answers, rather than hold their places until the lease times out (an hour here).
TEST_F(ClusterTest, TheLeasesOfARefundThatFailedAreGivenBack) {
  const ClusterUser user(*cluster_, "refunds");
  auto store = open_store(user.address(), {.reconnect_min = 1ms, .reconnect_max = 20ms});
  ASSERT_NE(store, nullptr);
  const Limit jobs = make(Limit::concurrency({.limit = 5, .lease_timeout = 1h}));
  const Limit narrow = make(Limit::fixed_window({.limit = 1, .period = 1h}));
  // A lease's key and a narrow limit's key on two masters.
  const std::string leased = "leased";
  const std::string leases = "sluice:{leased}:cc";
  RedisServer* a = cluster_->master_of(key_slot(leases));
  ASSERT_NE(a, nullptr);
  std::string full;
  RedisServer* c = nullptr;
  for (int i = 0; c == nullptr || c == a; ++i) {
    full = "full" + std::to_string(i);
    c = cluster_->master_of(key_slot("sluice:{" + full + "}:fw"));
  }
  ASSERT_TRUE(store->acquire(full, narrow)->allowed);

  // The narrow limit's master holds the call's write back while the lease is taken...
  ASSERT_EQ(c->cli({"CLIENT", "PAUSE", "10000", "WRITE"}), "OK");
  struct Unpause {
    RedisServer* server;
    ~Unpause() { server->cli({"CLIENT", "UNPAUSE"}); }
  } unpause{c};
  const LimitRequest requests[] = {{leased, &jobs, 1}, {full, &narrow, 1}};
  auto pending = std::async(std::launch::async, [&] {
    Decision d[2];
    const Status s = store->acquire_all(requests, d);
    return std::pair{s, d[1].allowed};
  });
  ASSERT_TRUE(eventually([&] { return a->cli({"ZCARD", leases}) == "1"; }, 5s));
  // ...and the store's connection to the lease's master is lost, and not made again (its user gone
  // there), before the narrow limit rejects and the refund goes.
  ASSERT_EQ(a->cli({"ACL", "DELUSER", "refunds"}), "1");
  ASSERT_EQ(c->cli({"CLIENT", "UNPAUSE"}), "OK");
  const auto [status, narrow_allowed] = pending.get();
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_FALSE(narrow_allowed);
  EXPECT_EQ(a->cli({"ZCARD", leases}), "1") << "the refund reached the lease's master";

  // Once the master can be reached again, the lease is given back.
  ASSERT_EQ(user.add_to(*a), "OK");
  EXPECT_TRUE(eventually([&] { return a->cli({"ZCARD", leases}) == "0"; }, 10s))
      << "the failed refund's lease is still taken";
}

// The master of the key "mapwait"'s slot, with the ACL user "mapwait" deleted on another master: a
// store of that user waits for its first slot map without every master connected. nullptr if not.
RedisServer* mapwait_master(RedisCluster& cluster) {
  const int slot = key_slot("sluice:{mapwait}:fw");
  RedisServer* master = cluster.master_of(slot);
  RedisServer* refusing = cluster.master_of((slot + 8192) % 16384);
  if (refusing == master) refusing = cluster.master_of((slot + 12000) % 16384);
  if (master == nullptr || refusing == nullptr || refusing == master) return nullptr;
  return refusing->cli({"ACL", "DELUSER", "mapwait"}) == "1" ? master : nullptr;
}

// A call made right after open() waits for the slot map; when that wait ends without every master
// connected (one refuses the store's user: its ACL lacks it), the call still goes to the master of
// its own slot, which answers it, rather than fail with the wait.
TEST_F(ClusterTest, ACallWaitingForTheSlotMapGoesToItsMasterWhenTheWaitEndsWithoutEveryMaster) {
  const ClusterUser user(*cluster_, "mapwait");
  const std::string key = "mapwait";
  RedisServer* master = mapwait_master(*cluster_);
  ASSERT_NE(master, nullptr);
  auto opened = redis::RedisStore::open(
      {.address = user.address(), .connect_timeout = 100ms, .command_timeout = 5s});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  redis::RedisStore& store = **opened;
  const Limit limit = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  const Result<Decision> d = store.acquire(key, limit);  // at once: the first wait is under way
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->allowed);
  EXPECT_FALSE(d->fallback);
  EXPECT_EQ(master->cli({"EXISTS", "sluice:{mapwait}:fw"}), "1");
  // The wait did end without every master.
  const Status connected = store.connect();
  ASSERT_FALSE(connected.ok());
  EXPECT_NE(connected.error().message.find("not connected to every master in time"), std::string::npos)
      << connected.error().message;
  EXPECT_EQ(store.breaker().state(), BreakerState::kClosed);
}

// A call that waited for the slot map past its own deadline fails without being sent: sent, it
// could still take from a limit after its caller was told it failed.
TEST_F(ClusterTest, ACallWaitingForTheSlotMapIsNotSentPastItsDeadline) {
  const ClusterUser user(*cluster_, "mapwait");
  const std::string key = "mapwait";
  RedisServer* master = mapwait_master(*cluster_);
  ASSERT_NE(master, nullptr);
  // The wait ends at 5 connect timeouts (500 ms), the call's deadline at 100 ms.
  auto opened = redis::RedisStore::open(
      {.address = user.address(), .connect_timeout = 100ms, .command_timeout = 100ms});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  const Limit limit = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  const Result<Decision> d = (*opened)->acquire(key, limit);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(d.error().message.find("no slot map within the command's deadline"), std::string::npos)
      << d.error().message;
  // Once the store has answered other calls on that master, the one that was not sent has not run.
  ASSERT_TRUE(eventually([&] { return (*opened)->peek(key, limit).ok(); }, 5s));
  EXPECT_EQ((*opened)->peek(key, limit)->remaining, 10) << "the call that was not sent ran";
}

TEST_F(ClusterTest, APrefixWithAHashTagPutsEveryKeyInOneSlot) {
  auto store = open_store(cluster_->address(), {.prefix = "app{rl}:"});
  ASSERT_NE(store, nullptr);
  const Limit limit = make(Limit::fixed_window({.limit = 1, .period = 1h}));
  const LimitRequest requests[] = {{"a", &limit, 1}, {"b", &limit, 1}, {"c", &limit, 1}};
  Decision d[3];
  ASSERT_TRUE(store->acquire_all(requests, d).ok());
  EXPECT_TRUE(d[0].allowed && d[1].allowed && d[2].allowed);
  EXPECT_EQ(calls("evalsha") + calls("fcall"), 1);
}

// The limits with two keys (a sliding log and its meta key, leases and theirs) need both in one
// slot, also for keys that cannot be a hash tag as they are.
TEST_F(ClusterTest, KeysThatAreNoHashTagAsTheyAreStillKeepTheirStateInOneSlot) {
  auto store = open_store(cluster_->address());
  ASSERT_NE(store, nullptr);
  const Limit log = make(Limit::sliding_log({.limit = 1, .period = 1h}));
  const Limit jobs = make(Limit::concurrency({.limit = 1, .lease_timeout = 1h}));
  for (const std::string key : {"", "}x", "=", "=}", "}"}) {
    for (const Limit* limit : {&log, &jobs}) {
      const auto first = store->acquire(key, *limit);
      ASSERT_TRUE(first.ok()) << "key '" << key << "': " << first.error().message;
      EXPECT_TRUE(first->allowed) << "key '" << key << "'";
      EXPECT_FALSE(first->fallback) << "key '" << key << "'";
      const auto second = store->acquire(key, *limit);
      ASSERT_TRUE(second.ok()) << "key '" << key << "': " << second.error().message;
      EXPECT_FALSE(second->allowed) << "key '" << key << "': its own state, shared with no other key";
    }
  }
}

TEST_F(ClusterTest, FollowsAskAndMovedWhileASlotMigrates) {
  auto store = open_store(cluster_->address());
  ASSERT_NE(store, nullptr);
  const std::string key = "migrating";
  const int slot = key_slot(key);
  const std::optional<SlotMove> move = slot_move(*cluster_, slot);
  ASSERT_TRUE(move.has_value()) << "no other master to move slot " << slot << " to";
  const Limit fixed = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  const Limit sliding = make(Limit::sliding_window({.limit = 10, .period = 1h}));
  ASSERT_EQ(store->acquire(key, fixed)->remaining, 9);

  // Migrating: a key the old master no longer has is answered with ASK, followed to the new one.
  ASSERT_EQ(move->to->cli({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", move->from_id}), "OK");
  ASSERT_EQ(move->from->cli({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", move->to_id}), "OK");
  auto d = store->acquire(key, sliding);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->remaining, 9);
  EXPECT_EQ(move->to->cli({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), "1");

  // Migrated: the old master answers MOVED; the state came along.
  ASSERT_EQ(move->from->cli({"MIGRATE", "127.0.0.1", std::to_string(move->to->port()), "", "0", "5000", "KEYS",
                       "sluice:{migrating}:fw"}),
            "OK");
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    cluster_->node(i).cli({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", move->to_id});
  }
  d = store->acquire(key, fixed);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->remaining, 8);
  EXPECT_EQ(store->acquire(key, fixed)->remaining, 7);
}

// A cluster of its own: a node joins it.
class JoinedNodeTest : public ClusterTest {};

// A call redirected to a node the store has no connection to yet (one that joined the cluster after
// the store read its map) waits for that connection, within its deadline, rather than fail.
TEST_F(JoinedNodeTest, ACallAskedToANodeThatJoinedSinceWaitsForItsConnection) {
  auto store = open_store(cluster_->address());
  ASSERT_NE(store, nullptr);
  const std::string key = "newcomer";
  const int slot = key_slot("sluice:{newcomer}:sw");
  RedisServer* from = cluster_->master_of(slot);
  ASSERT_NE(from, nullptr);
  auto joined = RedisServer::start({.cluster_node = true});
  ASSERT_TRUE(joined.ok()) << joined.error().message;
  RedisServer& to = **joined;
  ASSERT_EQ(from->cli({"CLUSTER", "MEET", "127.0.0.1", std::to_string(to.port())}), "OK");
  ASSERT_TRUE(eventually(
      [&] {
        const std::string info = to.cli({"CLUSTER", "INFO"});
        return info.find("cluster_known_nodes:7") != std::string::npos &&
               info.find("cluster_state:ok") != std::string::npos;
      },
      10s));
  const std::string from_id = from->cli({"CLUSTER", "MYID"});
  const std::string to_id = to.cli({"CLUSTER", "MYID"});
  ASSERT_TRUE(eventually([&] { return from->cli({"CLUSTER", "NODES"}).find(to_id) != std::string::npos; }, 10s));
  ASSERT_EQ(to.cli({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", from_id}), "OK");
  ASSERT_EQ(from->cli({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", to_id}), "OK");
  // The key is not on the old master: ASK, to the node joined since.
  const Limit sliding = make(Limit::sliding_window({.limit = 10, .period = 1h}));
  const Result<Decision> d = store->acquire(key, sliding);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->remaining, 9);
  EXPECT_FALSE(d->fallback);
  EXPECT_EQ(to.cli({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), "1");
}

// A slot handed over with its old master told first: the old master redirects to the new one,
// which, still importing, redirects back, until it is told too. A call in between follows the
// redirections at growing intervals and is decided once the handover is done, rather than fail.
TEST_F(ClusterTest, ACallRedirectedBackAndForthWhileASlotIsHandedOverIsDecidedOnceItIs) {
  auto store = open_store(cluster_->address());
  ASSERT_NE(store, nullptr);
  const std::string key = "handover";
  const int slot = key_slot("sluice:{handover}:fw");
  const std::optional<SlotMove> move = slot_move(*cluster_, slot);
  ASSERT_TRUE(move.has_value()) << "no other master to move slot " << slot << " to";
  const Limit fixed = make(Limit::fixed_window({.limit = 10, .period = 1h}));
  const std::string s = std::to_string(slot);
  ASSERT_EQ(move->to->cli({"CLUSTER", "SETSLOT", s, "IMPORTING", move->from_id}), "OK");
  ASSERT_EQ(move->from->cli({"CLUSTER", "SETSLOT", s, "MIGRATING", move->to_id}), "OK");
  ASSERT_EQ(move->from->cli({"CLUSTER", "SETSLOT", s, "NODE", move->to_id}), "OK");  // the old owner first
  const long long before = moved_answers(*move->to);
  auto pending = std::async(std::launch::async, [&] { return store->acquire(key, fixed); });
  // Being sent back and forth: the new owner has sent it back twice.
  ASSERT_TRUE(eventually([&] { return moved_answers(*move->to) >= before + 2; }, 5s));
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    cluster_->node(i).cli({"CLUSTER", "SETSLOT", s, "NODE", move->to_id});
  }
  const Result<Decision> d = pending.get();
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->remaining, 9);
}

// A concurrency limit's two keys split by a slot moving (one migrated, the other not yet): Redis
// refuses the release with TRYAGAIN and runs nothing. The release is sent again until the slot has
// moved, rather than left to the lease's timeout with its place taken.
TEST_F(ClusterTest, AReleaseRefusedWhileItsKeysAreSplitIsSentAgain) {
  auto store = open_store(cluster_->address());
  ASSERT_NE(store, nullptr);
  const std::string key = "leasing";
  const int slot = key_slot("sluice:{leasing}:cc");
  const std::optional<SlotMove> move = slot_move(*cluster_, slot);
  ASSERT_TRUE(move.has_value()) << "no other master to move slot " << slot << " to";
  const Limit one = make(Limit::concurrency({.limit = 1, .lease_timeout = 1h}));
  auto held = store->acquire(key, one);
  ASSERT_TRUE(held.ok() && held->allowed);
  ASSERT_FALSE(store->acquire(key, one)->allowed);

  const std::string s = std::to_string(slot);
  ASSERT_EQ(move->to->cli({"CLUSTER", "SETSLOT", s, "IMPORTING", move->from_id}), "OK");
  ASSERT_EQ(move->from->cli({"CLUSTER", "SETSLOT", s, "MIGRATING", move->to_id}), "OK");
  const auto migrate = [&](const std::string& k) {
    return move->from->cli({"MIGRATE", "127.0.0.1", std::to_string(move->to->port()), "", "0", "5000", "KEYS", k});
  };
  ASSERT_EQ(migrate("sluice:{leasing}:cc:meta"), "OK");
  const long long refused = errors("TRYAGAIN");
  auto released = std::async(std::launch::async, [&] { return store->release(key, one, held->lease); });
  // Refused (TRYAGAIN) while the keys are split, sent again and refused again, and not done...
  // (Polled for: on a loaded machine the release may take a while to be sent at all.)
  ASSERT_TRUE(eventually([&] { return errors("TRYAGAIN") >= refused + 2; }, 10s))
      << errors("TRYAGAIN") - refused << " TRYAGAIN answers";
  ASSERT_EQ(released.wait_for(0s), std::future_status::timeout);
  // ...and done once the slot has moved whole. (The new owner told first, as redis-cli --cluster
  // does: told after the old one, it would redirect the release back to it until told.)
  ASSERT_EQ(migrate("sluice:{leasing}:cc"), "OK");
  ASSERT_EQ(move->to->cli({"CLUSTER", "SETSLOT", s, "NODE", move->to_id}), "OK");
  for (std::size_t i = 0; i < cluster_->size(); ++i) cluster_->node(i).cli({"CLUSTER", "SETSLOT", s, "NODE", move->to_id});
  ASSERT_EQ(released.wait_for(10s), std::future_status::ready);
  const Status r = released.get();
  EXPECT_TRUE(r.ok()) << r.error().message;
  auto again = store->acquire(key, one);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(again->allowed) << "the place was given back";
}

// A state of two keys (a concurrency limit's, a sliding log's) decided on each side of its slot's
// migration, while the slot is MIGRATING on the old master and IMPORTING on the new one. On the
// node importing it (the keys moved there, the call sent by ASK), Redis refuses a command of
// several keys one of which is missing (a DEL of both); on the node migrating it (the keys still
// there), any access to a key the script has itself emptied. Either stopped the script after what
// it had written: a lease or an entry taken off the set or the list, but not off the count. The
// store's time is pinned, so that leases and entries expire when the test says.
class ClusterMigrationTest : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    store_ = open_store(cluster_->address(), {.pinned_clock = &clock_});
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    if (move_) finish_move();
    ClusterTest::TearDown();
  }
  // Marks the slot of `key`'s state MIGRATING on its master and IMPORTING on another.
  void start_move(const std::string& state_key) {
    slot_ = std::to_string(key_slot(state_key));
    move_ = slot_move(*cluster_, std::stoi(slot_));
    ASSERT_TRUE(move_.has_value()) << "no other master to move slot " << slot_ << " to";
    ASSERT_EQ(move_->to->cli({"CLUSTER", "SETSLOT", slot_, "IMPORTING", move_->from_id}), "OK");
    ASSERT_EQ(move_->from->cli({"CLUSTER", "SETSLOT", slot_, "MIGRATING", move_->to_id}), "OK");
  }
  // Moves the slot's keys still on the old master (all of them at once, so that none is split).
  void migrate_keys() {
    std::istringstream in(move_->from->cli({"CLUSTER", "GETKEYSINSLOT", slot_, "10"}));
    std::vector<std::string> args{"MIGRATE", "127.0.0.1", std::to_string(move_->to->port()), "", "0", "5000", "KEYS"};
    for (std::string key; in >> key;) args.push_back(key);
    if (args.size() > 7) {
      ASSERT_EQ(move_->from->cli(args), "OK");
    }
  }
  // Moves what is left of the slot's keys and gives the slot to its new master, on every node.
  void finish_move() {
    migrate_keys();
    move_->to->cli({"CLUSTER", "SETSLOT", slot_, "NODE", move_->to_id});
    for (std::size_t i = 0; i < cluster_->size(); ++i) cluster_->node(i).cli({"CLUSTER", "SETSLOT", slot_, "NODE", move_->to_id});
  }

  void expect_the_last_lease_given_back(bool keys_moved);
  void expect_admitted_where_everything_expired(const Limit& one, const std::string& state_key);

  ManualClock clock_{std::chrono::seconds(1'700'000'000)};
  std::unique_ptr<redis::RedisStore> store_;
  std::string slot_;
  std::optional<SlotMove> move_;
};

// The last lease given back, on the importing node (`keys_moved`) or the migrating one: the place is
// free once the slot has moved. (While it moves, Redis answers a call on keys that are on neither
// node TRYAGAIN.)
void ClusterMigrationTest::expect_the_last_lease_given_back(bool keys_moved) {
  const Limit one = make(Limit::concurrency({.limit = 1, .lease_timeout = 1h}));
  const auto held = store_->acquire("migrated", one);
  ASSERT_TRUE(held.ok() && held->allowed);
  start_move("sluice:{migrated}:cc");
  if (keys_moved) migrate_keys();
  const Status r = store_->release("migrated", one, held->lease);
  ASSERT_TRUE(r.ok()) << r.error().message;
  finish_move();
  const auto again = store_->acquire("migrated", one);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(again->allowed);
}

// A call admitted where everything the state held (one, of one) has expired, on the node migrating
// the slot: what expired is taken off, what the call takes is held, and the state moves whole.
void ClusterMigrationTest::expect_admitted_where_everything_expired(const Limit& one, const std::string& state_key) {
  ASSERT_TRUE(store_->acquire("migrated", one)->allowed);
  start_move(state_key);
  clock_.advance(std::chrono::seconds(2));
  const auto d = store_->acquire("migrated", one);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->allowed);
  finish_move();
  const auto after = store_->acquire("migrated", one);
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_FALSE(after->allowed) << "what the call took moved with the slot";
  EXPECT_EQ(after->retry_after, std::chrono::seconds(1));
}

TEST_F(ClusterMigrationTest, TheLastLeaseIsGivenBackOnTheImportingNode) {
  expect_the_last_lease_given_back(true);
}

TEST_F(ClusterMigrationTest, TheLastLeaseIsGivenBackOnTheMigratingNode) {
  expect_the_last_lease_given_back(false);
}

TEST_F(ClusterMigrationTest, ALeaseIsTakenWhereEveryLeaseExpiredOnTheMigratingNode) {
  expect_admitted_where_everything_expired(make(Limit::concurrency({.limit = 1, .lease_timeout = 1s})),
                                           "sluice:{migrated}:cc");
}

TEST_F(ClusterMigrationTest, AnEntryIsLoggedWhereEveryEntryLeftTheWindowOnTheMigratingNode) {
  expect_admitted_where_everything_expired(make(Limit::sliding_log({.limit = 1, .period = 1s})),
                                           "sluice:{migrated}:sl");
}

// A state of two keys not seen before, made while its slot moves (MIGRATING on its master, IMPORTING
// on another, its keys on neither): the importing node refuses the script with TRYAGAIN until the
// slot has moved. The call follows its on_store_failure (here: fails), the refusal is told with
// its keys (the gateway logs it), and once the slot has moved the state is made.
TEST_F(ClusterMigrationTest, AStateMadeWhileItsSlotMovesIsRefusedAndTold) {
  const Told told;
  store_->on_refusal([told](const std::string& why) { told.add(why); });
  const Limit one = make(Limit::sliding_log({.limit = 1, .period = 1s}));
  start_move("sluice:{fresh}:sl");
  const auto refused = store_->acquire("fresh", one);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(redis::detail::try_again(refused.error())) << refused.error().message;
  const std::vector<std::string> refusals = told.lines();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_TRUE(refusals[0].starts_with("redis cluster: TRYAGAIN")) << refusals[0];
  EXPECT_NE(refusals[0].find("(keys sluice:{fresh}:sl"), std::string::npos) << refusals[0];
  finish_move();
  const auto made = store_->acquire("fresh", one);
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_TRUE(made->allowed);
}

}  // namespace
}  // namespace sluice::testing
