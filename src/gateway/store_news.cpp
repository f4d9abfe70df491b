#include "gateway/store_news.h"

namespace sluice::gateway {

std::optional<std::string> StoreNews::say(Kind kind, const std::string& why, Time now) {
  why_[kind] = why;
  if (said_at_[kind] && now - *said_at_[kind] < every_) {
    ++unsaid_[kind];
    if (kind != kRefused) {
      held_ = true;
      held_kind_ = kind;
    }
    return std::nullopt;
  }
  return line(kind, now);
}

std::optional<StoreNews::Time> StoreNews::next_due() const {
  if (!held_) return std::nullopt;
  return *said_at_[held_kind_] + every_;  // held back: said before
}

std::optional<std::string> StoreNews::due(bool down, Time now) {
  if (!held_) return std::nullopt;
  const Kind kind = down ? kDown : kUp;
  if (said_down_ == down) {
    held_ = false;
    return std::nullopt;
  }
  if (said_at_[kind] && now - *said_at_[kind] < every_) return std::nullopt;
  return line(kind, now);
}

std::string StoreNews::line(Kind kind, Time now) {
  said_at_[kind] = now;
  std::string again;
  if (unsaid_[kind] > 0) again = " (" + std::to_string(unsaid_[kind]) + " more times since last said)";
  unsaid_[kind] = 0;
  switch (kind) {
    case kDown:
      said_down_ = true;
      held_ = false;
      return subject_ + " not answering (" + why_[kind] + "): " + whose_ + " follow their on_store_failure until it does" +
             again;
    case kUp:
      said_down_ = false;
      held_ = false;
      return subject_ + " answering again: " + whose_ + " are decided on it again" + again;
    case kRefused:
      break;
  }
  return subject_ + " refused a call (" + why_[kind] + "): its limits followed their on_store_failure" + again;
}

}  // namespace sluice::gateway
