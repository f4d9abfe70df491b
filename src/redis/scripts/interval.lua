---------------------------------------------------------------------------------------------------
-- Token bucket (interval): "missing:tick". ARGV: cost, quota, refill tokens, period_us, refund value.

local function interval_params(argv, i)
  return {cost = argv[i] + 0, quota = argv[i + 1] + 0, rate = argv[i + 2] + 0,
          period = argv[i + 3] + 0}
end


local function interval_decide(keys, p, now)
  local key = keys[1]
  local s_missing, s_tick = pair_load(key)
  local existed = s_missing ~= nil
  s_missing, s_tick = s_missing or 0, s_tick or 0
  local tick = max(idiv(now, p.period), s_tick)
  local missing = s_missing
  if missing > 0 and tick > s_tick then
    local ticks = tick - s_tick
    if ticks >= ceil_div(missing, p.rate) then missing = 0 else missing = missing - ticks * p.rate end
  end
  local function after(tokens)
    if tokens <= 0 then return 0 end
    return (tick * p.period - now) + ceil_div(tokens, p.rate) * p.period
  end
  local d
  if p.cost <= p.quota and p.cost <= p.quota - missing then
    missing = missing + p.cost
    d = decision(true, p.quota - missing, 0, after(missing))
  else
    d = decision(false, p.quota - missing, 0, after(missing))
    if p.cost > p.quota then d[2] = 1 else d[4] = after(p.cost - (p.quota - missing)) end
  end
  if d[5] > 0 then
    state_set(key, pair(missing, tick), ttl_ms(d[5]))
  elseif existed then
    state_del(key)
  end
  return d
end

local function interval_refund(keys, p, now)
  local key = keys[1]
  local missing, tick = pair_load(key)
  if not missing then return end
  state_set(key, pair(max(0, missing - p.cost), tick))
  p.cost = 0
  interval_decide(keys, p, now)
end
