// What the gateway logs about its limit store (or one node of a cluster): each message at most once per interval, with how
// many times it happened meanwhile, and never a last word on the store's availability that is wrong.
#include "gateway/store_news.h"

#include <gtest/gtest.h>

namespace sluice::gateway {
namespace {

using namespace std::chrono_literals;
using Time = StoreNews::Time;

const Time kT0 = Time{} + 1000s;

TEST(StoreNews, EachMessageAtMostOncePerIntervalWithHowManyTimesItHappened) {
  StoreNews news(30s);
  EXPECT_EQ(news.say(StoreNews::kDown, "timeout", kT0),
            "limit store not answering (timeout): limits follow their on_store_failure until it does");
  EXPECT_EQ(news.say(StoreNews::kUp, "", kT0 + 1s), "limit store answering again: limits are decided on it again");
  EXPECT_FALSE(news.say(StoreNews::kDown, "timeout", kT0 + 2s));
  EXPECT_FALSE(news.say(StoreNews::kUp, "", kT0 + 3s));
  EXPECT_EQ(news.say(StoreNews::kDown, "reset", kT0 + 31s),
            "limit store not answering (reset): limits follow their on_store_failure until it does (1 more times "
            "since last said)");
  EXPECT_EQ(news.say(StoreNews::kRefused, "OOM", kT0 + 31s),
            "limit store refused a call (OOM): its limits followed their on_store_failure");
  EXPECT_FALSE(news.say(StoreNews::kRefused, "OOM", kT0 + 32s));
}

// Down, up, and down again within the interval: the second "not answering" is held back, then said
// when the interval is over, if the store is still down; the log does not end on "answering again".
TEST(StoreNews, AChangeHeldBackIsSaidOnceTheIntervalIsOverIfItStillHolds) {
  StoreNews news(30s);
  ASSERT_TRUE(news.say(StoreNews::kDown, "timeout", kT0));
  ASSERT_TRUE(news.say(StoreNews::kUp, "", kT0 + 2s));
  EXPECT_FALSE(news.next_due());
  EXPECT_FALSE(news.say(StoreNews::kDown, "timeout", kT0 + 5s));
  ASSERT_EQ(news.next_due(), kT0 + 30s);  // the interval since "not answering" was said
  EXPECT_FALSE(news.due(true, kT0 + 29s));  // not yet
  EXPECT_EQ(news.due(true, kT0 + 30s),
            "limit store not answering (timeout): limits follow their on_store_failure until it does (1 more times "
            "since last said)");
  EXPECT_FALSE(news.next_due());
}

TEST(StoreNews, AChangeUndoneBeforeItsTimeIsNotSaid) {
  StoreNews news(30s);
  ASSERT_TRUE(news.say(StoreNews::kDown, "timeout", kT0));
  ASSERT_TRUE(news.say(StoreNews::kUp, "", kT0 + 1s));
  EXPECT_FALSE(news.say(StoreNews::kDown, "timeout", kT0 + 2s));
  EXPECT_FALSE(news.say(StoreNews::kUp, "", kT0 + 3s));
  ASSERT_TRUE(news.next_due());
  EXPECT_FALSE(news.due(false, kT0 + 40s));  // the last line said "answering again": still true
  EXPECT_FALSE(news.next_due());
}

// One master of a Redis Cluster: the same messages, of it and of the limits whose keys it serves.
TEST(StoreNews, ANodeIsSaidOfByName) {
  StoreNews news(30s, "redis cluster node 10.0.0.7:6379", "limits whose keys it serves");
  EXPECT_EQ(news.say(StoreNews::kDown, "timeout", kT0),
            "redis cluster node 10.0.0.7:6379 not answering (timeout): limits whose keys it serves follow their "
            "on_store_failure until it does");
  EXPECT_EQ(news.say(StoreNews::kUp, "", kT0 + 1s),
            "redis cluster node 10.0.0.7:6379 answering again: limits whose keys it serves are decided on it again");
  EXPECT_FALSE(news.say(StoreNews::kDown, "timeout", kT0 + 2s));
  EXPECT_EQ(news.due(true, kT0 + 30s),
            "redis cluster node 10.0.0.7:6379 not answering (timeout): limits whose keys it serves follow their "
            "on_store_failure until it does (1 more times since last said)");
}

}  // namespace
}  // namespace sluice::gateway
