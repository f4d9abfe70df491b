#!/usr/bin/env python3
"""Writes the shared test vectors (tests/vectors/*.json) from an independent reference model.

The model follows each algorithm's definition with exact rational arithmetic (fractions.Fraction) on
whole microseconds, and finds retry_after and reset_after by search, not by formula: retry_after is
the least wait after which the same request is admitted, reset_after the least wait after which the
state is full again. The C++ core and the Redis scripts must both reproduce every step.

Run from anywhere: python3 tests/vectors/generate.py   (deterministic; commit the output)
"""

import copy
import json
import math
import os
import random
from fractions import Fraction

T0 = 1_699_995_600_000_000  # 2023-11-14 21:00:00 UTC in microseconds, a multiple of one hour
MAX = 1 << 40
SECOND = 1_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
YEAR = 365 * DAY
LATE = (1 << 53) - 2 * YEAR  # far in the future, still exact in a double


def ceil_frac(x):
    return -((-x.numerator) // x.denominator) if isinstance(x, Fraction) else x


class Meter:
    """Continuous token bucket and GCRA: rate tokens per period, at most quota at once."""

    def __init__(self, quota, rate, period):
        self.quota = quota
        self.T = Fraction(period, rate)  # microseconds per token
        self.tat = Fraction(0)

    def decide(self, now, cost):
        base = max(self.tat, Fraction(now))
        nxt = base + cost * self.T
        tau = self.quota * self.T
        if cost <= self.quota and nxt - now <= tau:
            if cost > 0:
                self.tat = nxt
            return True, self.quota - ceil_frac((nxt - now) / self.T)
        return False, max(0, self.quota - ceil_frac((base - now) / self.T))


class IntervalBucket:
    """capacity tokens; refill tokens at every multiple of interval since the epoch."""

    def __init__(self, quota, refill, interval):
        self.quota, self.refill, self.interval = quota, refill, interval
        self.tokens = quota
        self.tick = 0

    def decide(self, now, cost):
        tick = max(now // self.interval, self.tick)
        if tick > self.tick:
            self.tokens = min(self.quota, self.tokens + (tick - self.tick) * self.refill)
        self.tick = tick
        if cost <= self.tokens:
            self.tokens -= cost
            return True, self.tokens
        return False, self.tokens


class FixedWindow:
    """Only an admission writes the state."""

    def __init__(self, quota, period):
        self.quota, self.period = quota, period
        self.window, self.count = 0, 0

    def decide(self, now, cost):
        window = max(now // self.period, self.window)
        count = self.count if window == self.window else 0
        if count + cost <= self.quota:
            self.window, self.count = window, count + cost
            return True, self.quota - self.count
        return False, self.quota - count


class SlidingWindow:
    """used = current + ceil(previous * (period - elapsed) / period). Only an admission writes."""

    def __init__(self, quota, period):
        self.quota, self.period = quota, period
        self.window, self.prev, self.cur = 0, 0, 0

    def decide(self, now, cost):
        window, elapsed = divmod(now, self.period)
        if window < self.window:
            window, elapsed = self.window, 0
        prev, cur = 0, 0
        if window == self.window:
            prev, cur = self.prev, self.cur
        elif window == self.window + 1:
            prev = self.cur
        used = cur + ceil_frac(Fraction(prev * (self.period - elapsed), self.period))
        if used + cost <= self.quota:
            self.window, self.prev, self.cur = window, prev, cur + cost
            return True, self.quota - used - cost
        return False, max(0, self.quota - used)


class SlidingLog:
    """Exact: at most quota admitted in any (t - period, t]."""

    def __init__(self, quota, period):
        self.quota, self.period = quota, period
        self.log = []  # [time, count] of admissions, oldest first
        self.latest = 0

    def decide(self, now, cost):
        t = max(now, self.latest)
        self.latest = t
        self.log = [e for e in self.log if e[0] > t - self.period]
        held = sum(c for _, c in self.log)
        if held + cost <= self.quota:
            if cost > 0:
                self.log.append([t, cost])
            return True, self.quota - held - cost
        return False, self.quota - held


class Concurrency:
    def __init__(self, quota, lease_timeout):
        self.quota, self.timeout = quota, lease_timeout
        self.leases = {}  # id -> (expires, permits)
        self.latest = 0

    def decide(self, now, cost, lease_id=None):
        t = max(now, self.latest)
        self.latest = t
        self.leases = {k: v for k, v in self.leases.items() if v[0] > t}
        held = sum(p for _, p in self.leases.values())
        if held + cost <= self.quota:
            if cost > 0:
                self.leases[lease_id] = (t + self.timeout, cost)
            return True, self.quota - held - cost
        return False, self.quota - held

    def release(self, lease_id):
        return self.leases.pop(lease_id, None) is not None


def model_for(limit):
    a = limit["algorithm"]
    if a == "token_bucket" and limit["refill"] == "continuous":
        return Meter(limit["capacity"], limit["refill_tokens"], limit["refill_period_us"])
    if a == "token_bucket":
        return IntervalBucket(limit["capacity"], limit["refill_tokens"], limit["refill_period_us"])
    if a == "gcra":
        return Meter(limit["burst"], limit["limit"], limit["period_us"])
    if a == "fixed_window":
        return FixedWindow(limit["limit"], limit["period_us"])
    if a == "sliding_window":
        return SlidingWindow(limit["limit"], limit["period_us"])
    if a == "sliding_log":
        return SlidingLog(limit["limit"], limit["period_us"])
    if a == "concurrency":
        return Concurrency(limit["limit"], limit["lease_timeout_us"])
    raise ValueError(a)


def quota_of(limit):
    return limit.get("capacity", limit.get("burst", limit.get("limit")))


def least(pred, hi=1 << 62):
    """The least d in [0, hi] with pred(d), pred monotone (false ... false true ... true)."""
    if pred(0):
        return 0
    lo, step = 0, 1
    while not pred(step):
        lo = step
        step *= 2
        if step > hi:
            raise AssertionError("no answer below 2^62 us")
    while step - lo > 1:
        mid = (lo + step) // 2
        if pred(mid):
            step = mid
        else:
            lo = mid
    return step


def probe(model, t, cost):
    m = copy.deepcopy(model)
    return m.decide(t, cost, "probe") if isinstance(m, Concurrency) else m.decide(t, cost)


def step(model, limit, t, cost, lease_id):
    quota = quota_of(limit)
    # reset_after, measured from the state before this request, then after it.
    if isinstance(model, Concurrency):
        allowed, remaining = model.decide(t, cost, lease_id)
    else:
        allowed, remaining = model.decide(t, cost)
    exceeds = cost > quota
    retry = 0
    if not allowed and not exceeds:
        retry = least(lambda d: probe(model, t + d, cost)[0])
    reset = least(lambda d: probe(model, t + d, 0)[1] == quota)
    return {
        "t_us": t,
        "cost": cost,
        "allowed": allowed,
        "cost_exceeds_limit": exceeds,
        "remaining": remaining,
        "retry_after_us": retry,
        "reset_after_us": reset,
    }


def run_case(name, limit, ops):
    """ops: (t, cost) acquires, or ("release", t, step_index)."""
    model = model_for(limit)
    steps = []
    for i, op in enumerate(ops):
        if op[0] == "release":
            _, t, of = op
            steps.append({"t_us": t, "op": "release", "of_step": of,
                          "released": model.release(of)})
            continue
        t, cost = op
        steps.append(step(model, limit, t, cost, i))
    return {"name": name, "limit": limit, "steps": steps}


def at(ms):
    return T0 + ms * 1000


def random_ops(rng, limit, period, n, backwards=True, max_cost=None):
    quota = quota_of(limit)
    max_cost = max_cost or max(1, min(quota, 3))
    t = T0 + rng.randrange(period)
    ops = []
    for _ in range(n):
        r = rng.random()
        if r < 0.4:
            t += 0
        elif r < 0.9:
            t += rng.randrange(1, max(2, period // max(1, quota)) * 2)
        elif r < 0.95 or not backwards:
            t += rng.randrange(period * 2)
        else:
            t -= rng.randrange(period)  # an older timestamp or a clock step back
        cost = 0 if rng.random() < 0.05 else rng.randint(1, max_cost)
        if rng.random() < 0.03:
            cost = quota + 1 if quota < MAX else quota
        ops.append((t, cost))
    return ops


def bucket(capacity, tokens, period_us, refill="continuous"):
    return {"algorithm": "token_bucket", "capacity": capacity, "refill_tokens": tokens,
            "refill_period_us": period_us, "refill": refill}


def window(algorithm, limit, period_us):
    return {"algorithm": algorithm, "limit": limit, "period_us": period_us}


def token_bucket_cases(rng):
    cases = [
        run_case("starts full, then one token every 100 ms", bucket(100, 10, SECOND),
                 [(at(0), 1)] * 100 + [(at(0), 1), (at(99), 1), (at(100), 1), (at(150), 0)]),
        run_case("3 per second never admits early", bucket(3, 3, SECOND),
                 [(at(0), 3), (T0 + 333_333, 1), (T0 + 333_334, 1), (T0 + 999_999, 2),
                  (T0 + 1_000_000, 2)]),
        run_case("cost above one waits for all its tokens", bucket(10, 1, SECOND),
                 [(at(0), 8), (at(0), 5), (at(2999), 5), (at(3000), 5)]),
        run_case("cost above capacity is never admitted", bucket(10, 1, SECOND),
                 [(at(0), 11), (at(10_000_000), 11), (at(0), 10)]),
        run_case("earlier time grants nothing", bucket(5, 1, SECOND),
                 [(at(10_000), 5), (at(9_000), 1), (at(10_000) - HOUR, 1), (at(10_999), 1),
                  (at(11_000), 1)]),
        run_case("2^40 tokens refilled per millisecond, late in time",
                 bucket(MAX, MAX, 1000), [(LATE, MAX), (LATE, 1), (LATE + 1, 1), (LATE + 1000, MAX)]),
        run_case("2^40 tokens refilled per year", bucket(MAX, MAX, YEAR),
                 [(T0, MAX), (T0, MAX), (T0 + YEAR - 1, MAX), (T0 + YEAR, MAX),
                  (T0 + 100 * YEAR, 1)]),
        run_case("7 tokens per 3 ms, capacity 1000", bucket(1000, 7, 3000),
                 [(T0, 1000), (T0 + 1, 1), (T0 + 428, 1), (T0 + 429, 1), (T0 + 857, 2),
                  (T0 + 1_000_000, 0)]),
        run_case("interval: ten tokens at every whole second",
                 bucket(100, 10, SECOND, "interval"),
                 [(at(300), 100), (at(300), 1), (at(999), 1), (at(1000), 10), (at(1500), 25),
                  (at(3999), 25), (at(4000), 25)]),
        run_case("interval: never above capacity", bucket(15, 10, SECOND, "interval"),
                 [(at(0), 15), (at(36_000_000), 0), (at(36_000_000), 15), (at(36_000_000), 1)]),
        run_case("interval: earlier time grants nothing", bucket(10, 10, SECOND, "interval"),
                 [(at(5500), 10), (at(4000), 1), (at(5999), 1), (at(6000), 10)]),
        run_case("interval: 2^40 tokens, one per year", bucket(MAX, MAX, YEAR, "interval"),
                 [(T0, MAX), (T0, 1), (T0 + 10 * YEAR, MAX)]),
    ]
    for i in range(6):
        period = rng.choice([1000, 7000, SECOND, 15 * SECOND, MINUTE])
        capacity = rng.choice([1, 3, 10, 50])
        tokens = rng.choice([1, 2, 3, 7, 10, 100])
        refill = "continuous" if i % 2 == 0 else "interval"
        limit = bucket(capacity, tokens, period, refill)
        cases.append(run_case(f"random {refill} #{i}", limit, random_ops(rng, limit, period, 60)))
    return cases


def gcra_cases(rng):
    def gcra(limit, period, burst):
        return {"algorithm": "gcra", "limit": limit, "period_us": period, "burst": burst}

    cases = [
        run_case("5 per minute, burst 5", gcra(5, MINUTE, 5),
                 [(at(0), 1)] * 6 + [(at(12_000), 1), (at(23_999), 1), (at(24_000), 1)]),
        run_case("10 per second, burst 1, evenly spaced", gcra(10, SECOND, 1),
                 [(at(0), 1), (at(50), 1), (at(100), 1), (at(250), 1), (at(300), 1)]),
        run_case("burst above limit", gcra(2, SECOND, 10),
                 [(at(0), 10), (at(0), 1), (at(499), 1), (at(500), 2), (at(1500), 2)]),
        run_case("an earlier time never shows negative room", gcra(10, SECOND, 2),
                 [(at(5000), 2), (at(1000), 1), (at(5000), 0), (at(5100), 1)]),
        run_case("one per year, burst 100", gcra(1, YEAR, 100),
                 [(T0, 100), (T0, 1), (T0 + YEAR, 1), (T0 + 50 * YEAR, 60)]),
        run_case("2^40 per millisecond", gcra(MAX, 1000, MAX),
                 [(LATE, MAX - 1), (LATE, 2), (LATE, 1), (LATE + 1, 1099511628)]),
    ]
    for i in range(5):
        period = rng.choice([1000, SECOND, 15 * SECOND, MINUTE, HOUR])
        limit = gcra(rng.choice([1, 3, 5, 7, 100]), period, rng.choice([1, 2, 5, 20]))
        cases.append(run_case(f"random #{i}", limit, random_ops(rng, limit, period, 60)))
    return cases


def fixed_window_cases(rng):
    cases = [
        run_case("resets at the window boundary", window("fixed_window", 3, SECOND),
                 [(at(999), 1)] * 4 + [(at(1000), 1)] * 4),
        run_case("earlier time stays in the latest window", window("fixed_window", 2, SECOND),
                 [(at(2100), 2), (at(1100), 1), (at(3000), 2)]),
        run_case("2^40 per year", window("fixed_window", MAX, YEAR),
                 [(T0, MAX - 5), (T0, 6), (T0, 5), (LATE, MAX)]),
    ]
    for i in range(5):
        period = rng.choice([1000, SECOND, MINUTE, HOUR])
        limit = window("fixed_window", rng.choice([1, 3, 10, 50]), period)
        cases.append(run_case(f"random #{i}", limit, random_ops(rng, limit, period, 60)))
    return cases


def sliding_window_cases(rng):
    cases = [
        run_case("weighs the previous window by its overlap", window("sliding_window", 10, SECOND),
                 [(at(500), 10), (at(1250), 2), (at(1250), 1), (at(1299), 1), (at(1300), 1)]),
        run_case("retry falls in the next window", window("sliding_window", 4, SECOND),
                 [(at(100), 4), (at(100), 1), (at(1249), 1), (at(1250), 1)]),
        run_case("cost equal to the limit waits two windows", window("sliding_window", 4, SECOND),
                 [(at(100), 1), (at(100), 4), (at(1999), 4), (at(2000), 4)]),
        run_case("earlier time weighs the previous window fully", window("sliding_window", 10, SECOND),
                 [(at(500), 10), (at(1900), 1), (at(800), 1)]),
        run_case("2^40 per millisecond, late", window("sliding_window", MAX, 1000),
                 [(LATE, MAX - 1), (LATE + 1000, 7), (LATE + 1500, MAX // 2), (LATE + 1999, 1)]),
        run_case("2^40 per year", window("sliding_window", MAX, YEAR),
                 [(T0, MAX), (T0 + YEAR + 12345, 1), (T0 + YEAR + YEAR // 2, 3)]),
    ]
    for i in range(6):
        period = rng.choice([1000, 3000, SECOND, 15 * SECOND, MINUTE])
        limit = window("sliding_window", rng.choice([1, 3, 10, 50]), period)
        cases.append(run_case(f"random #{i}", limit, random_ops(rng, limit, period, 60)))
    return cases


def sliding_log_cases(rng):
    cases = [
        run_case("never more than the limit in any window", window("sliding_log", 3, SECOND),
                 [(at(0), 1), (at(400), 1), (at(800), 1), (at(999), 1), (at(1000), 1),
                  (at(1000), 2), (at(1799), 2), (at(1800), 2)]),
        run_case("earlier time is recorded at the latest time", window("sliding_log", 2, SECOND),
                 [(at(1000), 1), (at(500), 1), (at(1999), 1), (at(2000), 2)]),
        run_case("50 per 15 seconds, the users' window", window("sliding_log", 50, 15 * SECOND),
                 [(at(0), 1)] * 51 + [(at(14_999), 1), (at(15_000), 50), (at(15_000), 1)]),
        run_case("2^40 per year", window("sliding_log", MAX, YEAR),
                 [(T0, MAX - 1), (T0 + 1, 2), (T0 + 1, 1), (T0 + YEAR, MAX)]),
    ]
    for i in range(6):
        period = rng.choice([1000, 3000, SECOND, 15 * SECOND])
        limit = window("sliding_log", rng.choice([1, 3, 10, 20]), period)
        cases.append(run_case(f"random #{i}", limit, random_ops(rng, limit, period, 60)))
    return cases


def concurrency_cases(rng):
    def conc(limit, timeout):
        return {"algorithm": "concurrency", "limit": limit, "lease_timeout_us": timeout}

    cases = [
        run_case("at most the limit in flight; release gives back", conc(2, 30 * SECOND),
                 [(at(0), 1), (at(10), 1), (at(20), 1), ("release", at(25), 0),
                  ("release", at(25), 0), (at(30), 1), (at(30), 1)]),
        run_case("expired leases are reclaimed", conc(3, 10 * SECOND),
                 [(at(0), 3), (at(9_999), 1), (at(10_000), 3), ("release", at(10_000), 0)]),
        run_case("cost above the limit is distinct", conc(3, 10 * SECOND), [(at(0), 4), (at(0), 3)]),
        run_case("2^40 permits for a year", conc(MAX, YEAR),
                 [(T0, MAX - 1), (T0, 2), (T0 + 5, 1), (T0 + YEAR + 5, MAX)]),
    ]
    for i in range(4):
        timeout = rng.choice([1000, SECOND, 10 * SECOND])
        limit = conc(rng.choice([1, 2, 5]), timeout)
        ops = random_ops(rng, limit, timeout, 40)
        mixed = []
        for j, op in enumerate(ops):
            mixed.append(op)
            if rng.random() < 0.3:
                mixed.append(("release", op[0], rng.randrange(len(mixed))))
        cases.append(run_case(f"random #{i}", limit, mixed))
    return cases


def dump(doc):
    """JSON with one case header and one step per line, so diffs stay readable."""
    compact = lambda v: json.dumps(v, separators=(", ", ": "))
    lines = ["{", f' "algorithm": {compact(doc["algorithm"])},',
             f' "generated_by": {compact(doc["generated_by"])},', ' "cases": [']
    for i, case in enumerate(doc["cases"]):
        lines.append(f'  {{"name": {compact(case["name"])}, "limit": {compact(case["limit"])}, "steps": [')
        steps = case["steps"]
        for j, st in enumerate(steps):
            lines.append("   " + compact(st) + ("," if j + 1 < len(steps) else ""))
        lines.append("  ]}" + ("," if i + 1 < len(doc["cases"]) else ""))
    lines += [" ]", "}", ""]
    return "\n".join(lines)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(20261129)
    files = {
        "token_bucket": token_bucket_cases,
        "gcra": gcra_cases,
        "fixed_window": fixed_window_cases,
        "sliding_window": sliding_window_cases,
        "sliding_log": sliding_log_cases,
        "concurrency": concurrency_cases,
    }
    for name, make in files.items():
        doc = {"algorithm": name,
               "generated_by": "tests/vectors/generate.py (exact rational reference model)",
               "cases": make(rng)}
        with open(os.path.join(here, name + ".json"), "w") as f:
            f.write(dump(doc))
        steps = sum(len(c["steps"]) for c in doc["cases"])
        print(f"{name}.json: {len(doc['cases'])} cases, {steps} steps")


if __name__ == "__main__":
    main()
