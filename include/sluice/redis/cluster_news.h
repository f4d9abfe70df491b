// What a Redis Cluster store tells besides its decisions: how one master's calls go (NodeState, see
// RedisStore::on_node_change) and what the slot map says of the addresses the store was opened
// with (Notice, see RedisStore::on_notice).
#pragma once

namespace sluice::redis {

enum class NodeState {
  kNotAnswering,  // its breaker opened: its slots' calls fail at once
  kAnswering,     // its breaker closed again
  kGone,          // it left the slot map while not answering: no call goes to it any more
};

enum class Notice {
  kSeedsGone,  // none of the addresses the store was opened with is a node of the cluster any more
  kSeedsBack,  // one of them is a node of the cluster again
};

}  // namespace sluice::redis
