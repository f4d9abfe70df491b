#!/usr/bin/env python3
"""Instructions Redis spends per EVALSHA of a sluice script, counted by callgrind (needs valgrind).

Timings on a shared machine swing by 2x between runs; instruction counts do not, so this is how a
change to src/redis/scripts/*.lua is measured. For each script it starts redis-server under
callgrind, loads the script, sends N calls with redis-benchmark (pipeline 128) and stops; the count
of a run with no calls is subtracted. The scripts are read from the build's generated scripts.cpp.

  python3 bench/redis_script_cost.py                    # the fixed-window script and `return 1`
  python3 bench/redis_script_cost.py kAcquireFixedScript # one script by its C++ name
  N=50000 python3 bench/redis_script_cost.py             # more calls
  OTHER_BUILD=/path/build python3 bench/redis_script_cost.py  # also another build's, to compare

The calls are a fixed-window decision that admits (key bench:{k}:fw, cost 1, quota 2^40, 1 s), so
every call reads and writes its key, as in bench/redis_compare.py.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
N = int(os.environ.get("N", "20000"))
ARGS = ["1", "bench:{k}:fw", "", "1", "1099511627776", "1000000"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scripts(build):
    with open(os.path.join(build, "src", "redis", "scripts.cpp")) as f:
        text = f.read()
    return {name: body for name, body in
            re.findall(r'const Script (\w+)\{"[0-9a-f]+", R"sluice_lua\((.*?)\)sluice_lua"', text, re.S)}


def instructions(source, calls):
    """Instructions redis-server executes in a run that loads `source` and makes `calls` calls."""
    port = free_port()
    cli = lambda *a: subprocess.run(["redis-cli", "-p", str(port), *a], capture_output=True,
                                    text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
                                   "redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                                   "--dir", tmp],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(300):
            if cli("PING") == "PONG":
                break
            time.sleep(0.1)
        sha = cli("SCRIPT", "LOAD", source)
        if calls:
            subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(calls), "-c", "1", "-P", "128",
                            "-q", "EVALSHA", sha, *ARGS], capture_output=True, check=True)
        cli("SHUTDOWN", "NOSAVE")
        err = server.communicate()[1]
    return int(re.search(r"Collected : (\d+)", err).group(1))


def main():
    names = sys.argv[1:] or ["kAcquireFixedScript"]
    runs = [("", scripts(BUILD))]
    if os.environ.get("OTHER_BUILD"):
        runs.append((os.environ["OTHER_BUILD"] + ": ", scripts(os.environ["OTHER_BUILD"])))
    base = instructions("return 1", 0)
    print(f"return 1: {(instructions('return 1', N) - base) / N:,.0f} instructions per call")
    for label, found in runs:
        for name in names:
            cost = (instructions(found[name], N) - base) / N
            print(f"{label}{name}: {cost:,.0f} instructions per call")


if __name__ == "__main__":
    main()
