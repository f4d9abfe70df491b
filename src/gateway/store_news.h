// What the gateway logs about its limit store, or one node of a Redis Cluster: that it stopped
// answering, answers again, or refused a call. A store that fails some calls and answers others
// goes down and up again and again: after the first of each message, the next comes after `every`
// at the earliest, with how many times it happened meanwhile. But the log's last word on whether
// the store answers is never left wrong: a change held back is said once the wait is over (due()),
// if it still holds. Not thread-safe: the gateway locks around it.
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

namespace sluice::gateway {

class StoreNews {
 public:
  using Time = std::chrono::steady_clock::time_point;
  enum Kind { kDown, kUp, kRefused };

  // `subject` names what is said of ("limit store", "redis cluster node 10.0.0.7:6379"), and
  // `whose` the limits it decides.
  explicit StoreNews(std::chrono::steady_clock::duration every, std::string subject = "limit store",
                     std::string whose = "limits")
      : every_(every), subject_(std::move(subject)), whose_(std::move(whose)) {}

  // The line to log for this news at `now`; nothing when it is held back.
  std::optional<std::string> say(Kind kind, const std::string& why, Time now);
  // When due() should be called: a change of availability was held back. Nothing otherwise.
  std::optional<Time> next_due() const;
  // The line saying how the store is now (`down`: not answering), when a change was held back and
  // the log last said otherwise; nothing when it says so already, or when it must wait longer
  // (next_due() then says until when).
  std::optional<std::string> due(bool down, Time now);

 private:
  std::string line(Kind kind, Time now);

  std::chrono::steady_clock::duration every_;
  std::string subject_;
  std::string whose_;
  std::array<std::optional<Time>, 3> said_at_{};  // by Kind
  std::array<int, 3> unsaid_{};
  std::array<std::string, 3> why_{};  // the latest reason given for each
  std::optional<bool> said_down_;     // what the last line on availability said
  bool held_ = false;                 // a change of availability was not said
  Kind held_kind_ = kDown;            // the last one held back
};

}  // namespace sluice::gateway
