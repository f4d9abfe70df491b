#!/usr/bin/env python3
"""RedisStore against its peers on one local redis-server, measured in the same run (make bench).

For 1 and 2 client threads with 256 decisions in flight in all:
  - sluice (bench/redis_store_bench.cpp) against redis-benchmark running the very same EVALSHA
    (captured with MONITOR) at the same pipeline depth;
  - sluice's fixed window against rate-limiter-flexible's RateLimiterRedis.consume() through
    ioredis (a fixed window too), in as many Node processes as client threads;
  - INFO commandstats: EVALSHA calls per decision.
The peers take turns for ROUNDS rounds of SECONDS_PER_RUN seconds; figures are medians.
Prints a Markdown table for docs/benchmarks.md and writes bench/results/redis.json.
"""
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
BENCH = os.path.join(BUILD, "bench", "sluice_redis_bench")
PEERS = os.path.join(ROOT, "bench", "peers")
SECONDS = float(os.environ.get("SECONDS_PER_RUN", "3"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
DEPTH = 256


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          check=True).stdout


def commandstats(port):
    stats = {}
    for line in cli(port, "INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
        if m:
            stats[m.group(1)] = int(m.group(2))
    return stats


def sluice(port, threads, algorithm):
    out = subprocess.run([BENCH, "--address", f"redis://127.0.0.1:{port}", "--threads", str(threads),
                          "--depth", str(DEPTH), "--seconds", str(SECONDS), "--algorithm", algorithm,
                          "--key", f"bench:{algorithm}"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def captured_command(port, algorithm):
    """The EVALSHA sluice sends for one decision, as MONITOR shows it."""
    monitor = socket.create_connection(("127.0.0.1", port))
    monitor.sendall(b"MONITOR\r\n")
    monitor.settimeout(5)
    seen = b""
    while b"+OK\r\n" not in seen:
        seen += monitor.recv(4096)
    subprocess.run([BENCH, "--address", f"redis://127.0.0.1:{port}", "--depth", "1", "--seconds",
                    "0.1", "--algorithm", algorithm, "--key", f"bench:{algorithm}"],
                   capture_output=True, check=True)
    seen = b""
    while True:
        seen += monitor.recv(65536)
        for line in seen.decode(errors="replace").split("\r\n"):
            if '"EVALSHA"' in line and "lua]" not in line:
                monitor.close()
                return [bytes(a, "utf-8").decode("unicode_escape")
                        for a in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]


def redis_benchmark(port, threads, command, requests):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(requests), "-c", str(threads),
                          "--threads", str(threads), "-P", str(DEPTH // threads), "-q", "--csv",
                          *command], capture_output=True, text=True, check=True).stdout
    last = [l for l in out.splitlines() if l.strip()][-1]
    return float(last.split(",")[1].strip('"'))


def rate_limiter_flexible(port, processes):
    procs = [subprocess.Popen(["node", os.path.join(PEERS, "rate_limiter_flexible.js"), str(port),
                               str(DEPTH // processes), str(SECONDS)], stdout=subprocess.PIPE, text=True)
             for _ in range(processes)]
    total = 0
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("rate-limiter-flexible run failed")
        total += json.loads(out)["decisions_per_second"]
    return total


def main():
    if not os.path.exists(BENCH):
        sys.exit(f"build first: {BENCH} is missing")
    if not os.path.isdir(os.path.join(PEERS, "node_modules")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PEERS, check=True)
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="sluice-bench-")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", workdir], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                if cli(port, "PING").strip() == "PONG":
                    break
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.05)
        results = {"seconds_per_run": SECONDS, "depth": DEPTH, "rounds": ROUNDS, "runs": []}
        for algorithm in ("fixed_window", "gcra"):
            command = captured_command(port, algorithm)
            for threads in (1, 2):
                # The peers take turns, round after round, so that a change in the machine's load
                # falls on all of them; each figure is the median of its rounds.
                sluices, benchmarks, peers, per_decision = [], [], [], []
                for _ in range(ROUNDS):
                    cli(port, "CONFIG", "RESETSTAT")
                    s = sluice(port, threads, algorithm)
                    per_decision.append(commandstats(port).get("evalsha", 0) / s["decisions"])
                    sluices.append(s["decisions_per_second"])
                    requests = max(50000, int(s["decisions_per_second"] * SECONDS))
                    benchmarks.append(redis_benchmark(port, threads, command, requests))
                    if algorithm == "fixed_window":
                        peers.append(rate_limiter_flexible(port, threads))
                run = {"algorithm": algorithm, "threads": threads,
                       "sluice": statistics.median(sluices), "sluice_rounds": sluices,
                       "redis_benchmark": statistics.median(benchmarks),
                       "redis_benchmark_rounds": benchmarks,
                       "evalsha_per_decision": max(per_decision)}
                run["sluice_over_redis_benchmark"] = run["sluice"] / run["redis_benchmark"]
                if peers:
                    run["rate_limiter_flexible"] = statistics.median(peers)
                    run["rate_limiter_flexible_rounds"] = peers
                    run["sluice_over_rate_limiter_flexible"] = run["sluice"] / run["rate_limiter_flexible"]
                results["runs"].append(run)
                print(json.dumps(run), flush=True)
        os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
        with open(os.path.join(ROOT, "bench", "results", "redis.json"), "w") as f:
            json.dump(results, f, indent=2)
        print("\n| algorithm | client threads | sluice decisions/s | redis-benchmark EVALSHA/s | "
              "ratio | rate-limiter-flexible/s | ratio | EVALSHA per decision |")
        print("|---|---|---|---|---|---|---|---|")
        for r in results["runs"]:
            rl = r.get("rate_limiter_flexible")
            print(f"| {r['algorithm']} | {r['threads']} | {r['sluice']:.0f} | {r['redis_benchmark']:.0f} | "
                  f"{r['sluice_over_redis_benchmark']:.2f} | {rl:.0f} | "
                  f"{r['sluice_over_rate_limiter_flexible']:.2f} | {r['evalsha_per_decision']:.3f} |"
                  if rl else
                  f"| {r['algorithm']} | {r['threads']} | {r['sluice']:.0f} | {r['redis_benchmark']:.0f} | "
                  f"{r['sluice_over_redis_benchmark']:.2f} | – | – | {r['evalsha_per_decision']:.3f} |")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
