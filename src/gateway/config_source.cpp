#include "gateway/config_source.h"

#include <boost/json.hpp>
#include <charconv>

#include "config/yaml.h"

namespace sluice::gateway {
namespace {

std::int64_t unix_now(const Clock* clock) {
  const Clock& c = clock != nullptr ? *clock : SystemClock::instance();
  return std::chrono::duration_cast<std::chrono::seconds>(c.now()).count();
}

// The revision in an ETag like "r42"; 0 when it is not one.
std::int64_t revision_of(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() < 4 || !etag.starts_with("\"r") || !etag.ends_with("\"")) return 0;
  std::int64_t r = 0;
  auto [p, ec] = std::from_chars(etag.data() + 2, etag.data() + etag.size() - 1, r);
  return ec == std::errc() && p == etag.data() + etag.size() - 1 ? r : 0;
}

// What an error answer says: its "msg", or the status alone.
std::string answer_error(const FetchResponse& r) {
  std::string why = "the primary answered " + std::to_string(r.status);
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(r.body, ec);
  if (!ec && v.is_object()) {
    if (const auto* msg = v.as_object().if_contains("msg"); msg != nullptr && msg->is_string()) {
      why += ": " + std::string(msg->as_string());
    }
  }
  return why;
}

Result<config::StoredConfig> parse_answer(const FetchResponse& r, const std::string& primary) {
  auto loaded = config::load_yaml(r.body, primary);
  if (auto* problems = std::get_if<std::vector<config::Problem>>(&loaded)) {
    std::string why = "the primary's configuration was refused:";
    for (const config::Problem& p : *problems) why += "\n  " + p.to_string();
    return invalid_argument(why);
  }
  return config::StoredConfig{std::get<std::shared_ptr<const config::Config>>(std::move(loaded)),
                              revision_of(r.header("etag"))};
}

FetchRequest config_request(const Follower::Options& o) {
  FetchRequest r;
  r.url = o.primary + "/admin/v1/config";
  r.headers = {{"Authorization", "Bearer " + o.token}, {"Accept", "application/json"}};
  return r;
}

}  // namespace

// --- DatabaseWatcher ------------------------------------------------------------------------------

DatabaseWatcher::DatabaseWatcher(Options options, std::int64_t revision)
    : options_(std::move(options)), seen_(revision) {
  if (!options_.log) options_.log = [](std::string_view) {};
  health_.revision = revision;
  last_ = WatchedConfig{options_.store->generation(), revision, {}};
  thread_ = std::thread([this] { run(); });
}

DatabaseWatcher::~DatabaseWatcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

SourceHealth DatabaseWatcher::health() const {
  std::lock_guard lock(mu_);
  return health_;
}

WatchedConfig DatabaseWatcher::last() const {
  std::lock_guard lock(mu_);
  return last_;
}

void DatabaseWatcher::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.interval, [&] { return stop_; });
    if (stop_) break;
    lock.unlock();
    look();
    lock.lock();
  }
}

void DatabaseWatcher::look() {
  auto set_error = [&](const std::string& error) {
    std::lock_guard lock(mu_);
    if (health_.ok || health_.error != error) options_.log(error);
    health_.ok = false;
    health_.error = error;
  };
  // The path first: a restore from a backup (mv, or a delete) leaves the connection on the file it
  // opened, which no commit reaches any more. A revision counts commits to one file: the one now
  // there is loaded whatever its revision.
  auto path = options_.store->reopen_if_replaced();
  if (!path.ok()) {
    return set_error(options_.store->path() + " was replaced by a file that cannot be used, still serving revision " +
                     std::to_string(health().revision) + ": " + path.error().message);
  }
  if (*path == config::ConfigStore::PathState::kMissing) {
    path_lost_ = true;
    return set_error(options_.store->path() + " is gone (deleted or moved away): still serving revision " +
                     std::to_string(health().revision) + " until a database is there again");
  }
  if (*path == config::ConfigStore::PathState::kReopened) {
    options_.log(options_.store->path() + " is another file now (replaced): reading it");
    path_lost_ = true;
    replaced_ = true;
  }
  const bool reload = path_lost_;  // back after it was gone (moved back: the same file), or replaced
  auto revision = options_.store->revision();
  if (!revision.ok()) return set_error(revision.error().message);
  // The file there now counts its own commits: at a revision served before, a follower holding
  // that one would keep what it has, so it moves past it (a file that cannot be written is served
  // as it is).
  if (replaced_ && seen_ > 0 && *revision <= seen_) {
    if (auto moved = options_.store->advance_revision_past(seen_, "sluice (database replaced)"); moved.ok()) {
      revision = moved;
    } else {
      options_.log("cannot move the revision of " + options_.store->path() + " past " + std::to_string(seen_) +
                   " (a follower at that revision would not see the change): " + moved.error().message);
    }
  }
  if (*revision == seen_ && !reload) {
    std::lock_guard lock(mu_);
    health_.last_contact = unix_now(nullptr);
    return;
  }
  if (options_.changed) options_.changed();
  const std::uint64_t generation = options_.store->generation();  // this thread alone reopens
  auto loaded = options_.store->load();
  if (!loaded.ok()) {
    // An invalid configuration is not looked at again until the next change; a file that could not
    // be read is, at the next tick.
    if (loaded.error().code == ErrorCode::kInvalidArgument) {
      seen_ = *revision;
      path_lost_ = false;
      replaced_ = false;
      {
        std::lock_guard lock(mu_);
        if (last_.generation != generation) last_ = WatchedConfig{generation, 0, {}};
        last_.looked = *revision;
      }
      if (options_.refused) options_.refused();
    }
    return set_error("configuration refused, still serving revision " + std::to_string(health().revision) + ": " +
                     loaded.error().message);
  }
  seen_ = loaded->revision;
  path_lost_ = false;
  replaced_ = false;
  options_.install(*loaded);
  std::lock_guard lock(mu_);
  health_ = SourceHealth{true, loaded->revision, unix_now(nullptr), ""};
  last_ = WatchedConfig{generation, loaded->revision, *loaded};
}

// --- Follower -------------------------------------------------------------------------------------

Result<config::StoredConfig> Follower::fetch(const Options& options, HttpFetcher& fetcher) {
  auto r = fetcher.send(config_request(options));
  if (!r.ok()) return r.error();
  // A token the primary refuses stays refused: waiting would not help.
  if (r->status == 401 || r->status == 403) {
    return invalid_argument(answer_error(*r) + " (is --token one of its tokens?)");
  }
  if (r->status != 200) return Error{ErrorCode::kStoreUnavailable, answer_error(*r)};
  return parse_answer(*r, options.primary);
}

Result<Follower::Token> Follower::whoami(const Options& options, HttpFetcher& fetcher) {
  FetchRequest req;
  req.url = options.primary + "/admin/v1/whoami";
  req.headers = {{"Authorization", "Bearer " + options.token}};
  auto r = fetcher.send(req);
  if (!r.ok()) return r.error();
  if (r->status != 200) return Error{ErrorCode::kStoreUnavailable, answer_error(*r)};
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(r->body, ec);
  const auto* o = !ec && v.is_object() ? &v.as_object() : nullptr;
  auto text = [&](std::string_view field) -> std::optional<std::string> {
    const auto* value = o != nullptr ? o->if_contains(field) : nullptr;
    if (value == nullptr || !value->is_string()) return std::nullopt;
    return std::string(value->as_string());
  };
  const auto id = text("id");
  const auto name = text("name");
  const auto role = text("role");
  const auto parsed = role ? config::role_from_string(*role) : std::nullopt;
  if (!parsed) return Error{ErrorCode::kProtocol, "the primary's whoami answer names no role"};
  if (!id || !name) return Error{ErrorCode::kProtocol, "the primary's whoami answer names no token id or name"};
  // Its expiry, so that this instance refuses the token from then on without the primary's word
  // (which it may not have, the primary away).
  std::int64_t expires = 0;
  if (const auto when = text("expires")) {
    const auto t = config::parse_time(*when);
    if (!t) return Error{ErrorCode::kProtocol, "the primary's whoami answer has an expiry that is not a time: " + *when};
    expires = *t;
  }
  return Token{*id, *name, *parsed, expires};
}

Follower::Follower(Options options, std::int64_t revision) : options_(std::move(options)), revision_(revision) {
  if (!options_.log) options_.log = [](std::string_view) {};
  health_.revision = revision;
  health_.last_contact = unix_now(options_.clock);
  thread_ = std::thread([this] { run(); });
}

Follower::~Follower() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  fetcher_.cancel();
  thread_.join();
}

SourceHealth Follower::health() const {
  std::lock_guard lock(mu_);
  return health_;
}

void Follower::failed(const std::string& error) {
  std::unique_lock lock(mu_);
  if (stop_) return;  // the request was cancelled to stop
  if (health_.ok || health_.error != error) {
    options_.log("following " + options_.primary + ": " + error + "; still serving revision " +
                 std::to_string(revision_.load()));
  }
  health_.ok = false;
  health_.error = error;
  cv_.wait_for(lock, options_.retry, [&] { return stop_; });
}

void Follower::run() {
  const std::int64_t wait_seconds = std::chrono::duration_cast<std::chrono::seconds>(options_.wait).count();
  while (true) {
    bool reachable = true;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      reachable = health_.ok;
    }
    // After a failure, a poll that does not wait: the primary being back shows at once (in the log
    // and /stats), not only with its next change. Nor does it ask "changed since revision N?": a
    // primary back on another database (a backup, edited since) may be at N with other content.
    FetchRequest req = config_request(options_);
    req.url += "?wait=" + std::to_string(reachable ? wait_seconds : 0) + "s";
    if (reachable) req.headers.emplace_back("If-None-Match", "\"r" + std::to_string(revision_.load()) + "\"");
    req.timeout = options_.wait + std::chrono::seconds(15);
    auto r = fetcher_.send(req);
    if (!r.ok()) {
      failed(r.error().message);
      continue;
    }
    if (r->status == 401 && token_accepted_) {
      token_accepted_ = false;
      // The primary says why (revoked, expired at...).
      options_.log("following " + options_.primary + ": the primary no longer takes this follower's token (" +
                   answer_error(*r) + "); this admin API takes no token until it does");
      if (options_.token_accepted) options_.token_accepted(false);
    }
    if (r->status != 200 && r->status != 304) {
      failed(answer_error(*r));
      continue;
    }
    if (!token_accepted_) {
      token_accepted_ = true;
      if (options_.token_accepted) options_.token_accepted(true);
    }
    if (r->status == 200) {
      auto parsed = parse_answer(*r, options_.primary);
      if (!parsed.ok()) {
        failed(parsed.error().message);
        continue;
      }
      options_.install(*parsed);
      revision_.store(parsed->revision);
    }
    std::lock_guard lock(mu_);
    if (!health_.ok) options_.log("following " + options_.primary + ": reached it again");
    health_ = SourceHealth{true, revision_.load(), unix_now(options_.clock), ""};
  }
}

}  // namespace sluice::gateway
