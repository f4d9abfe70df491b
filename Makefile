# sluice — the two set-up commands are `make run` and `make test`.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE   ?= cmake
CONFIG  ?= -DCMAKE_BUILD_TYPE=Release -DSLUICE_WERROR=ON

.PHONY: all bootstrap build run test test-asan test-tsan bench clean

all: build

bootstrap:
	@scripts/bootstrap

build: bootstrap
	$(CMAKE) -S . -B $(BUILD) $(CONFIG)
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# The gateway on its demo configuration, kept in an SQLite file, in front of a built-in echo upstream;
# it prints curl lines to try and an admin token for the web console.
run: build
	$(BUILD)/sluice serve --demo --db $(BUILD)/sluice.db

# Every test: unit, shared vectors, Redis, gateway, browser, and the installed-package example.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The tests again under AddressSanitizer + UndefinedBehaviorSanitizer, at -O0: the largest files
# compile in about 55% of -O1's time (UBSan's checks give the optimizer much to do), which keeps CI
# within its 30 minutes, and the tests run a little slower. Without inlining, the one copy the
# linker keeps of each template instance is what runs: a file compiled with Asio settings of its
# own crashed the tests at -O0 and passed them at -O1.
ASAN_FLAGS ?= -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O0 -DNDEBUG"
test-asan: bootstrap
	$(CMAKE) -S . -B $(BUILD)-asan $(CONFIG) $(ASAN_FLAGS) -DSLUICE_SANITIZE=address,undefined -DSLUICE_BUILD_BENCHMARKS=OFF
	$(CMAKE) --build $(BUILD)-asan -j $(JOBS)
	ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) -LE no-sanitizer

# The concurrency tests under ThreadSanitizer: only their executable is built (the unit tests, built
# too, ran nowhere and took a minute of CI).
test-tsan: bootstrap
	$(CMAKE) -S . -B $(BUILD)-tsan $(CONFIG) -DSLUICE_SANITIZE=thread -DSLUICE_BUILD_BENCHMARKS=OFF -DSLUICE_BUILD_SERVER=OFF
	$(CMAKE) --build $(BUILD)-tsan -j $(JOBS) --target sluice_concurrency_tests
	ctest --test-dir $(BUILD)-tsan --output-on-failure -j $(JOBS) -L concurrency

# Benchmarks (see docs/benchmarks.md): the core's micro-benchmarks, then the peer comparisons.
bench: build
	scripts/bootstrap --bench
	$(BUILD)/bench/sluice_core_bench
	bench/core_vs_go.sh $(BUILD)
	bench/loadtest_vs_wrk.sh $(BUILD)
	bench/gateway_vs_nginx.sh
	bench/gateway_instructions.sh
	BUILD=$(BUILD) bench/redis_compare.py

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
