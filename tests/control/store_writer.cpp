// A child process for the kill -9 test: commits configurations into a database in a loop and, after
// each commit has returned, prints "committed REVISION N" (N: the commit's number, which the
// configuration carries in its first system's description), until it is killed.
#include <cstdio>
#include <string>

#include "config/store.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sluice_store_writer DATABASE\n");
    return 2;
  }
  auto store = sluice::config::ConfigStore::open({.path = argv[1]});
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.error().message.c_str());
    return 1;
  }
  sluice::config::Config c;
  sluice::config::Upstream up;
  up.name = "app";
  up.targets.push_back({"127.0.0.1", 9});
  c.upstreams.push_back(up);
  sluice::config::Interface all;
  all.id = "all";
  all.path = "/*";
  all.upstream = "app";
  c.interfaces.push_back(all);
  // Enough rows that a kill often lands inside a commit.
  for (int i = 0; i < 200; ++i) {
    sluice::config::System s;
    s.key = "s" + std::to_string(i);
    s.interfaces = {"all"};
    s.limits.push_back(sluice::config::LimitRule{
        .limit = *sluice::Limit::fixed_window({.limit = 10 + i, .period = std::chrono::seconds(60)})});
    c.systems.push_back(std::move(s));
  }
  for (long n = 1;; ++n) {
    c.systems[0].description = "commit " + std::to_string(n);
    const auto w = (*store)->replace("writer", "config.import", c);
    if (!w.ok()) {
      std::fprintf(stderr, "commit %ld refused: %s\n", n, w.refusal->message.c_str());
      return 1;
    }
    std::printf("committed %lld %ld\n", static_cast<long long>(w.revision), n);
    std::fflush(stdout);
  }
}
