// NodeState: how a Redis Cluster master's calls go, as the breaker of its own calls sees them (see
// RedisStore::on_node_change).
#pragma once

namespace sluice::redis {

enum class NodeState {
  kNotAnswering,  // its breaker opened: its slots' calls fail at once
  kAnswering,     // its breaker closed again
  kGone,          // it left the slot map while not answering: no call goes to it any more
};

}  // namespace sluice::redis
