---------------------------------------------------------------------------------------------------
-- Every algorithm, by the code the client sends: its number of keys and of ARGV, its functions,
-- a table its decisions' parameters are read into (see limit_in_argv), and how many of its ARGV
-- are a call's own rather than the limit's (the concurrency limit's lease id; see many.lua).

local ALGORITHMS = {
  tb = {1, 9, meter_params, meter_decide, meter_refund, {}, 0},
  gcra = {1, 9, meter_params, meter_decide, meter_refund, {}, 0},
  tbi = {1, 5, interval_params, interval_decide, interval_refund, {}, 0},
  fw = {1, 4, window_params, fixed_decide, fixed_refund, {}, 0},
  sw = {1, 4, window_params, sliding_decide, sliding_refund, {}, 0},
  sl = {2, 4, window_params, log_decide, log_refund, {}, 0},
  cc = {2, 5, leases_params, leases_decide, leases_refund, {}, 1},
}

local function algorithm(code)
  local alg = ALGORITHMS[code]
  if not alg then error('sluice: unknown algorithm ' .. tostring(code)) end
  return alg
end

-- Calls f(algorithm, keys, params) for each of the n limits whose code and ARGV start at ARGV[a]
-- and whose keys start at KEYS[k], in order: each is its algorithm's code, then its ARGV. Returns
-- the k and a that follow them.
local function each_limit(n, k, a, f)
  for _ = 1, n do
    local alg = algorithm(ARGV[a])
    local keys = {}
    for j = 1, alg[1] do keys[j] = KEYS[k + j - 1] end
    local p = alg[3](ARGV, a + 1)
    p.extra = ARGV[a + alg[2]] + 0  -- each algorithm's last value
    f(alg, keys, p)
    k, a = k + alg[1], a + 1 + alg[2]
  end
  return k, a
end

-- The limit whose code and ARGV start at ARGV[a], its keys at KEYS[k], as acquire.lua has them:
-- its algorithm, its parameters (in the algorithm's reused table), the index of its first key, and
-- the a that follows it.
local function limit_in_argv(a, k)
  local alg = algorithm(ARGV[a])
  return alg, alg[3](ARGV, a + 1, alg[6]), k, a + 1 + alg[2]
end

-- Decides the n limits of one call all or nothing: when any rejects, or raises an error (which is
-- then raised again), gives back what the others took. limit_at(a, k) reads the limit at ARGV[a]
-- (see limit_in_argv), k being where the keys would start if they follow each other in KEYS.
-- Appends six integers per limit (see decision()) to `out`; returns the k and a that follow the
-- call. Written out rather than on each_limit, and
-- with no table made per decision: the keys and parameters go in tables reused from one decision
-- to the next, and what an admitted limit may have to give back is where it was read from (a, k)
-- and its decision's refund value, kept in reused arrays; a rejection reads such a limit again.
-- Allocations, and collecting them, are most of what a decision costs Redis.
local KEYS_OF = {}
local ADMITTED_A, ADMITTED_K, ADMITTED_EXTRA = {}, {}, {}
local function keys_at(key, alg)
  local keys = KEYS_OF
  keys[1] = KEYS[key]
  if alg[1] == 2 then keys[2] = KEYS[key + 1] else keys[2] = nil end
  return keys
end

local function acquire_limits(now, n, k, a, out, limit_at)
  local admitted = 0  -- how many limits of this call (of several) may have to give back
  local all = true
  local failure = nil  -- what a decision raised: the ones before it give back, then it is raised
  for _ = 1, n do
    local alg, p, key, next_a = limit_at(a, k)
    local ok, d = pcall(alg[4], keys_at(key, alg), p, now)
    if not ok then
      failure, all = d, false
      break
    end
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] =
      d[1], d[2], d[3], d[4], d[5], d[6]
    if d[1] ~= 1 then
      all = false
    elseif n > 1 then
      admitted = admitted + 1
      ADMITTED_A[admitted], ADMITTED_K[admitted], ADMITTED_EXTRA[admitted] = a, k, d[6]
    end
    k, a = k + alg[1], next_a
  end
  if not all then
    for i = admitted, 1, -1 do
      local alg, p, key = limit_at(ADMITTED_A[i], ADMITTED_K[i])
      p.extra = ADMITTED_EXTRA[i]
      if p.cost > 0 then alg[5](keys_at(key, alg), p, now) end
    end
  end
  if failure then error(failure, 0) end
  return k, a
end
