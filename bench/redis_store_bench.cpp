// Decisions per second of RedisStore against one Redis: `threads` instances (each its own
// io_context thread and connection), `depth` decisions in flight in all, closed loop, for
// `seconds`. Prints one line of JSON. Used by bench/redis_compare.py (make bench).
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sluice/redis/redis_store.h"

namespace {

struct Args {
  std::string address = "redis://127.0.0.1:6379";
  std::string algorithm = "gcra";
  int threads = 1;
  int depth = 256;
  double seconds = 3;
  std::string key = "bench";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--address") a.address = v;
    else if (k == "--algorithm") a.algorithm = v;
    else if (k == "--threads") a.threads = std::atoi(v);
    else if (k == "--depth") a.depth = std::atoi(v);
    else if (k == "--seconds") a.seconds = std::atof(v);
    else if (k == "--key") a.key = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

// A limit that admits everything the benchmark sends, so that every decision writes.
sluice::Limit limit_for(const std::string& algorithm) {
  using namespace std::chrono_literals;
  constexpr std::int64_t kHuge = std::int64_t{1} << 40;
  sluice::Result<sluice::Limit> r = sluice::Limit::gcra({.limit = kHuge, .period = 1s, .burst = kHuge});
  if (algorithm == "token_bucket") {
    r = sluice::Limit::token_bucket({.capacity = kHuge, .refill_tokens = kHuge, .refill_period = 1s});
  } else if (algorithm == "fixed_window") {
    r = sluice::Limit::fixed_window({.limit = kHuge, .period = 1s});
  } else if (algorithm == "sliding_window") {
    r = sluice::Limit::sliding_window({.limit = kHuge, .period = 1s});
  }
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    std::exit(2);
  }
  return *r;
}

// One instance: its own io_context on this thread, `depth` acquisitions kept in flight.
struct Instance {
  boost::asio::io_context io{1};
  std::unique_ptr<sluice::redis::RedisStore> store;
  const sluice::Limit* limit = nullptr;
  std::string key;
  std::atomic<bool>* stop = nullptr;
  std::atomic<long long> done{0};  // read by the main thread while the io thread counts
  long long errors = 0;
  int in_flight = 0;

  void next() {
    ++in_flight;
    store->async_acquire(key, *limit, 1, [this](sluice::Result<sluice::Decision> d) {
      --in_flight;
      done.fetch_add(1, std::memory_order_relaxed);
      if (!d.ok()) ++errors;
      if (!stop->load(std::memory_order_relaxed)) next();
      else if (in_flight == 0) store.reset();
    });
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const sluice::Limit limit = limit_for(args.algorithm);
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<Instance>> instances;
  for (int t = 0; t < args.threads; ++t) {
    auto in = std::make_unique<Instance>();
    auto store = sluice::redis::RedisStore::open(in->io.get_executor(), {.address = args.address,
                                                  .command_timeout = std::chrono::seconds(5)});
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.error().message.c_str());
      return 1;
    }
    in->store = std::move(*store);
    in->limit = &limit;
    in->key = args.key;
    in->stop = &stop;
    instances.push_back(std::move(in));
  }
  std::vector<std::thread> threads;
  const int per = std::max(1, args.depth / args.threads);
  for (auto& in : instances) {
    threads.emplace_back([&in, per] {
      in->store->async_connect([&in, per](sluice::Status s) {
        if (!s.ok()) {
          std::fprintf(stderr, "connect: %s\n", s.error().message.c_str());
          std::exit(1);
        }
        for (int i = 0; i < per; ++i) in->next();
      });
      in->io.run();
    });
  }
  // A short warm-up, then the measured interval.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  long long before = 0;
  for (auto& in : instances) before += in->done.load(std::memory_order_relaxed);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(args.seconds));
  long long after = 0;
  for (auto& in : instances) after += in->done.load(std::memory_order_relaxed);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop = true;
  for (auto& t : threads) t.join();
  long long total = 0, errors = 0;
  for (auto& in : instances) {
    total += in->done;
    errors += in->errors;
  }
  std::printf("{\"threads\": %d, \"depth\": %d, \"algorithm\": \"%s\", \"decisions_per_second\": %.0f, "
              "\"decisions\": %lld, \"errors\": %lld}\n",
              args.threads, per * args.threads, args.algorithm.c_str(),
              static_cast<double>(after - before) / elapsed, total, errors);
  return errors == 0 ? 0 : 1;
}
