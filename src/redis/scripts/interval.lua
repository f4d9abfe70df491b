---------------------------------------------------------------------------------------------------
-- Token bucket (interval): "missing:tick". ARGV: cost, quota, refill tokens, period_us, refund value
-- (the tick of the take: see interval_refund).

local function interval_params(argv, i, p)
  p = p or {}
  p.cost, p.quota, p.rate, p.period = argv[i] + 0, argv[i + 1] + 0, argv[i + 2] + 0, argv[i + 3] + 0
  return p
end


-- How long until `tokens` more are in the bucket, at tick `tick`.
local function interval_after(p, tick, now, tokens)
  if tokens <= 0 then return 0 end
  return (tick * p.period - now) + ceil_div(tokens, p.rate) * p.period
end

local function interval_decide(keys, p, now)
  local key = keys[1]
  local s = state_get(key)
  local s_missing, s_tick = 0, 0
  if s then s_missing, s_tick = s[1], s[2] end
  if kept_under_another_limit(s_tick, p.period, now) then s_missing, s_tick = 0, 0 end
  local tick = max(idiv(now, p.period), s_tick)
  local missing = s_missing
  if missing > p.quota then missing = p.quota end  -- at most empty: kept under a larger capacity
  if missing > 0 and tick > s_tick then
    local ticks = tick - s_tick
    if ticks >= ceil_div(missing, p.rate) then missing = 0 else missing = missing - ticks * p.rate end
  end
  local d
  if p.cost <= p.quota and p.cost <= p.quota - missing then
    missing = missing + p.cost
    d = decision(true, p.quota - missing, 0, interval_after(p, tick, now, missing), tick)
  else
    d = decision(false, max(0, p.quota - missing), 0, interval_after(p, tick, now, missing))
    if p.cost > p.quota then
      d[2] = 1
    else
      d[4] = interval_after(p, tick, now, p.cost - (p.quota - missing))
    end
  end
  if d[5] > 0 then
    state_set(key, d[5], missing, tick)
  elseif s then
    state_del(key)
  end
  return d
end

-- Gives back a take made at tick p.extra while the state is still at that tick: every decision
-- since then only added to what it holds. Once a tick has refilled it, the take may already be
-- refilled (to full, the state gone), and what is left of it is not known: it stays taken.
local function interval_refund(keys, p, now)
  local key = keys[1]
  local s = state_get(key)
  if not s or s[2] ~= p.extra then return end
  local cost = p.cost
  state_set(key, nil, max(0, s[1] - cost), s[2])
  -- A peek brings the state up to date; p is the limit's, shared with other calls: put back.
  p.cost = 0
  interval_decide(keys, p, now)
  p.cost = cost
end
