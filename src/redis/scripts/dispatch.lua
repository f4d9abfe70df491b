---------------------------------------------------------------------------------------------------
-- Every algorithm, by the code the client sends: its number of keys and of ARGV, and its functions.

local ALGORITHMS = {
  tb = {1, 9, meter_params, meter_decide, meter_refund},
  gcra = {1, 9, meter_params, meter_decide, meter_refund},
  tbi = {1, 5, interval_params, interval_decide, interval_refund},
  fw = {1, 4, window_params, fixed_decide, fixed_refund},
  sw = {1, 4, window_params, sliding_decide, sliding_refund},
  sl = {2, 4, window_params, log_decide, log_refund},
  cc = {2, 5, leases_params, leases_decide, leases_refund},
}

-- Calls f(algorithm, keys, params) for each of the ARGV[2] limits that follow, in order: each is
-- its algorithm's code, then its ARGV.
local function each_limit(f)
  local n = ARGV[2] + 0
  local k, a = 1, 3
  for _ = 1, n do
    local alg = ALGORITHMS[ARGV[a]]
    if not alg then error('sluice: unknown algorithm ' .. tostring(ARGV[a])) end
    local keys = {}
    for j = 1, alg[1] do keys[j] = KEYS[k + j - 1] end
    local p = alg[3](ARGV, a + 1)
    p.extra = ARGV[a + alg[2]] + 0  -- each algorithm's last value
    f(alg, keys, p)
    k, a = k + alg[1], a + 1 + alg[2]
  end
end
