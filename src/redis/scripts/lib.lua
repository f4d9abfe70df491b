-- sluice: the limiting algorithms of src/core/algorithms.cpp as Redis Lua, decision for decision.
--
-- Lua numbers are doubles: every integer below 2^53 is exact, and every value this file keeps is
-- such an integer. Where the core multiplies into 128 bits, muldiv() below divides exactly by long
-- division over small digits. docs/algorithms.md ("Redis") gives the ranges that make this hold.

local TWO53 = 9007199254740992

-- An integer as a decimal string (tostring would give "1.7e+15").
local function fmt(n)
  return string.format('%.0f', n)
end

-- floor(a / b) for integers 0 <= a < 2^53, 0 < b < 2^53, with a + b < 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  while r < 0 do q = q - 1; r = r + b end
  while r >= b do q = q + 1; r = r - b end
  return q
end

local function ceil_div(a, b)
  local q = idiv(a, b)
  if q * b < a then return q + 1 end
  return q
end

-- floor((a * b + e) / c) and its remainder, exactly, for integers a, b, e >= 0 and c > 0 below 2^53
-- with b + c <= 2^46 and e < 2^52: the quotient is exact when it is below 2^53.
local function muldiv(a, b, e, c)
  local p = a * b
  if p + e < TWO53 then
    local q = idiv(p + e, c)
    return q, p + e - q * c
  end
  -- Long division over the base-2^k digits of a, with (b + c) * 2^k <= 2^53 so that every partial
  -- sum r * 2^k + digit * b stays exact.
  local base = 2
  while base * 2 * (b + c) <= TWO53 do base = base * 2 end
  local digits = {}
  while a > 0 do
    local high = math.floor(a / base)
    digits[#digits + 1] = a - high * base
    a = high
  end
  local q, r = 0, 0
  for i = #digits, 1, -1 do
    local t = r * base + digits[i] * b
    local qd = idiv(t, c)
    r = t - qd * c
    q = q * base + qd
  end
  local t = r + e
  local qd = idiv(t, c)
  return q + qd, t - qd * c
end

-- Time: Redis TIME (one clock for the fleet), or the time a test pins.
local function now_us(pinned)
  if pinned ~= '' then return tonumber(pinned) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The TTL of a state that is full again after `reset` microseconds: Redis expires keys at
-- millisecond resolution, so the TTL is `reset` rounded up to whole milliseconds. A state past full
-- decides exactly as a missing one, so the sub-millisecond excess never changes a decision. Under a
-- pinned test time, Redis's own clock is unrelated to the decisions' time, so keys live a minute
-- longer, enough for a test to finish.
local PINNED = false
local function ttl_ms(reset)
  local ms = ceil_div(reset, 1000)
  if PINNED then ms = ms + 60000 end
  return ms
end

local function max(a, b)
  if a > b then return a end
  return b
end

-- A decision: allowed, cost_exceeds_limit, remaining, retry_after_us, reset_after_us, and a value
-- that refund() needs to give the cost back (the window, or the log time; 0 when unused).
local function decision(allowed, remaining, retry, reset, extra)
  return {allowed and 1 or 0, 0, remaining, retry, reset, extra or 0}
end

-- Parameters of one limit in ARGV, from position i: algorithm, cost, quota, rate, period_us,
-- units_per_us, units_per_token, capacity as whole us and fraction, cost as whole us and fraction,
-- lease id, and for a refund what the admitting decision returned as its sixth value.
local NPARAMS = 13
local function params(argv, i)
  return {
    alg = argv[i],
    cost = tonumber(argv[i + 1]),
    quota = tonumber(argv[i + 2]),
    rate = tonumber(argv[i + 3]),
    period = tonumber(argv[i + 4]),
    upu = tonumber(argv[i + 5]),
    upt = tonumber(argv[i + 6]),
    cap_us = tonumber(argv[i + 7]),
    cap_f = tonumber(argv[i + 8]),
    cost_us = tonumber(argv[i + 9]),
    cost_f = tonumber(argv[i + 10]),
    lease = argv[i + 11],
    extra = tonumber(argv[i + 12]),
  }
end

-- Keys each algorithm uses: its state, and for the log and the leases a second key in the same slot.
local NKEYS = {tb = 1, gcra = 1, tbi = 1, fw = 1, sw = 1, sl = 2, cc = 2}

-- A state that a decision found full again is forgotten, as the local store forgets it (which
-- matters when time goes backwards: a forgotten state no longer remembers the later time).
local function forget_if_full(key, d, existed)
  if existed and d[5] == 0 then redis.call('DEL', key) end
end

---------------------------------------------------------------------------------------------------
-- Token bucket (continuous) and GCRA: the theoretical arrival time as whole microseconds plus a
-- fraction in units (0 <= f < units_per_us), stored as "us:f". Quantities are (us, f) pairs.

local function meter_load(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0 end
  local us, f = string.match(v, '^(%d+):(%d+)$')
  return tonumber(us), tonumber(f)
end

-- ceil(units / units_per_token) for the quantity (us, f).
local function meter_tokens(p, us, f)
  local q, r = muldiv(us, p.upu, f, p.upt)
  if r > 0 then return q + 1 end
  return q
end

local function meter_ceil_us(us, f)
  if f > 0 then return us + 1 end
  return us
end

local function meter_decide(key, p, now)
  local d = nil
  local tat_us, tat_f = meter_load(key)
  -- base = max(tat, now), as an offset from now
  local b_us, b_f = 0, 0
  if tat_us > now or (tat_us == now and tat_f > 0) then
    b_us, b_f = tat_us - now, tat_f
  end
  if p.cost <= p.quota then
    local n_us, n_f = b_us + p.cost_us, b_f + p.cost_f
    if n_f >= p.upu then n_us, n_f = n_us + 1, n_f - p.upu end
    if n_us < p.cap_us or (n_us == p.cap_us and n_f <= p.cap_f) then
      local reset = meter_ceil_us(n_us, n_f)
      if p.cost > 0 then
        redis.call('SET', key, fmt(now + n_us) .. ':' .. fmt(n_f), 'PX', ttl_ms(reset))
        return decision(true, p.quota - meter_tokens(p, n_us, n_f), 0, reset)
      end
      d = decision(true, p.quota - meter_tokens(p, n_us, n_f), 0, reset)
    else
      d = decision(false, max(0, p.quota - meter_tokens(p, b_us, b_f)), 0, meter_ceil_us(b_us, b_f))
      local r_us, r_f = n_us - p.cap_us, n_f - p.cap_f
      if r_f < 0 then r_us, r_f = r_us - 1, r_f + p.upu end
      d[4] = meter_ceil_us(r_us, r_f)
    end
  else
    d = decision(false, max(0, p.quota - meter_tokens(p, b_us, b_f)), 0, meter_ceil_us(b_us, b_f))
    d[2] = 1
  end
  forget_if_full(key, d, tat_us > 0)
  return d
end

local function meter_refund(key, p, now)
  local tat_us, tat_f = meter_load(key)
  local t_us, t_f = tat_us - p.cost_us, tat_f - p.cost_f
  if t_f < 0 then t_us, t_f = t_us - 1, t_f + p.upu end
  if t_us > now or (t_us == now and t_f > 0) then
    redis.call('SET', key, fmt(t_us) .. ':' .. fmt(t_f), 'PX', ttl_ms(meter_ceil_us(t_us - now, t_f)))
  else
    redis.call('DEL', key)
  end
end

---------------------------------------------------------------------------------------------------
-- Token bucket (interval): "missing:tick".

local function pair_load(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  local a, b = string.match(v, '^(%d+):(%d+)$')
  return tonumber(a), tonumber(b)
end

local function interval_decide(key, p, now)
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
    redis.call('SET', key, fmt(missing) .. ':' .. fmt(tick), 'PX', ttl_ms(d[5]))
  elseif existed then
    redis.call('DEL', key)
  end
  return d
end

local function interval_refund(key, p, now)
  local missing, tick = pair_load(key)
  if not missing then return end
  redis.call('SET', key, fmt(max(0, missing - p.cost)) .. ':' .. fmt(tick), 'KEEPTTL')
  p.cost = 0
  interval_decide(key, p, now)
end

---------------------------------------------------------------------------------------------------
-- Fixed window: "window:count".

local function fixed_decide(key, p, now)
  local s_window, s_count = pair_load(key)
  local existed = s_window ~= nil
  s_window, s_count = s_window or 0, s_count or 0
  local window = max(idiv(now, p.period), s_window)
  local count = 0
  if window == s_window then count = s_count end
  local window_end = (window + 1) * p.period - now
  if p.cost <= p.quota - count then
    count = count + p.cost
    local reset = 0
    if count > 0 then reset = window_end end
    local d = decision(true, p.quota - count, 0, reset, window)
    if p.cost > 0 then
      redis.call('SET', key, fmt(window) .. ':' .. fmt(count), 'PX', ttl_ms(reset))
    else
      forget_if_full(key, d, existed)
    end
    return d
  end
  local reset = 0
  if count > 0 then reset = window_end end
  local d = decision(false, p.quota - count, 0, reset)
  if p.cost > p.quota then d[2] = 1 else d[4] = window_end end
  forget_if_full(key, d, existed)
  return d
end

local function fixed_refund(key, p, now, window)
  local s_window, s_count = pair_load(key)
  if not s_window or s_window ~= window then return end
  local count = max(0, s_count - p.cost)
  if count == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, fmt(s_window) .. ':' .. fmt(count), 'KEEPTTL')
  end
end

---------------------------------------------------------------------------------------------------
-- Sliding window counter: "window:previous:current".

local function sliding_load(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0, 0, false end
  local w, a, b = string.match(v, '^(%d+):(%d+):(%d+)$')
  return tonumber(w), tonumber(a), tonumber(b), true
end

local function sliding_decide(key, p, now)
  local period, quota, cost = p.period, p.quota, p.cost
  local s_window, s_prev, s_cur, existed = sliding_load(key)
  local window = idiv(now, period)
  local elapsed = now - window * period
  if window < s_window then window, elapsed = s_window, 0 end
  local previous, current = 0, 0
  if window == s_window then
    previous, current = s_prev, s_cur
  elseif window == s_window + 1 then
    previous = s_cur
  end
  local q, r = muldiv(previous, period - elapsed, 0, period)
  if r > 0 then q = q + 1 end
  local used = current + q
  local start = window * period
  local function reset_for(cur, prev)
    if cur > 0 then return start + 2 * period - now end
    if prev > 0 then return start + period - now end
    return 0
  end
  if cost <= quota - used then
    local d = decision(true, quota - used - cost, 0, reset_for(current + cost, previous), window)
    if cost > 0 then
      redis.call('SET', key, fmt(window) .. ':' .. fmt(previous) .. ':' .. fmt(current + cost),
                 'PX', ttl_ms(d[5]))
    else
      forget_if_full(key, d, existed)
    end
    return d
  end
  local d = decision(false, max(0, quota - used), 0, reset_for(current, previous))
  forget_if_full(key, d, existed)
  if cost > quota then
    d[2] = 1
    return d
  end
  local room = quota - current - cost
  if room >= 0 and previous > 0 then
    local keep = muldiv(room, period, 0, previous)
    if keep > 0 then
      d[4] = start + period - keep - now
      return d
    end
  end
  local at = 0
  if current > 0 then
    local keep = muldiv(quota - cost, period, 0, current)
    at = max(0, period - keep)
  end
  d[4] = start + period + at - now
  return d
end

local function sliding_refund(key, p, now, window)
  local s_window, s_prev, s_cur = sliding_load(key)
  if s_window == window then
    s_cur = max(0, s_cur - p.cost)
  elseif s_window == window + 1 then
    s_prev = max(0, s_prev - p.cost)
  else
    return
  end
  -- Full again once the current window's count has slid out, or the previous one's.
  local start = s_window * p.period
  local reset = 0
  if s_cur > 0 then
    reset = start + 2 * p.period - now
  elseif s_prev > 0 then
    reset = start + p.period - now
  end
  if reset <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, fmt(s_window) .. ':' .. fmt(s_prev) .. ':' .. fmt(s_cur), 'PX',
               ttl_ms(reset))
  end
end

---------------------------------------------------------------------------------------------------
-- Sliding log: a list of "at:count" runs, oldest first, and a meta key "total:latest".

-- Lists are read in batches: a few first (a decision usually needs only the oldest entry), then
-- more.
local FIRST_BATCH, BATCH = 4, 64

local function log_entry(v)
  local at, n = string.match(v, '^(%d+):(%d+)$')
  return tonumber(at), tonumber(n)
end

-- Saves total and latest with the TTL of the newest entry, or forgets the state when it is empty.
local function log_settle(keys, p, now, total, latest)
  if total == 0 then
    redis.call('DEL', keys[1], keys[2])
    return 0
  end
  local newest = log_entry(redis.call('LINDEX', keys[1], -1))
  local reset = newest + p.period - now
  local ttl = ttl_ms(reset)
  redis.call('SET', keys[2], fmt(total) .. ':' .. fmt(latest), 'PX', ttl)
  redis.call('PEXPIRE', keys[1], ttl)
  return reset
end

local function log_decide(keys, p, now)
  local list = keys[1]
  local total, latest = pair_load(keys[2])
  total, latest = total or 0, latest or 0
  local t = max(now, latest)
  -- Drop the entries that have left the window (at + period <= t).
  local batch = FIRST_BATCH
  while total > 0 do
    local entries = redis.call('LRANGE', list, 0, batch - 1)
    local drop = 0
    for _, v in ipairs(entries) do
      local at, n = log_entry(v)
      if at + p.period > t then break end
      drop = drop + 1
      total = total - n
    end
    if drop > 0 then redis.call('LTRIM', list, drop, -1) end
    if drop < #entries or #entries < batch then break end
    batch = BATCH
  end
  local d
  if p.cost <= p.quota - total then
    if p.cost > 0 then
      local last = redis.call('LINDEX', list, -1)
      local at, n = 0, 0
      if last then at, n = log_entry(last) end
      if last and at == t then
        redis.call('LSET', list, -1, fmt(t) .. ':' .. fmt(n + p.cost))
      else
        redis.call('RPUSH', list, fmt(t) .. ':' .. fmt(p.cost))
      end
      total = total + p.cost
    end
    d = decision(true, p.quota - total, 0, 0, t)
  else
    d = decision(false, p.quota - total, 0, 0)
    if p.cost > p.quota then
      d[2] = 1
    else
      -- Once the oldest entries holding `need` have left the window.
      local need = total + p.cost - p.quota
      local freed, from, batch = 0, 0, FIRST_BATCH
      while d[4] == 0 do
        local entries = redis.call('LRANGE', list, from, from + batch - 1)
        if #entries == 0 then break end
        for _, v in ipairs(entries) do
          local at, n = log_entry(v)
          freed = freed + n
          if freed >= need then
            d[4] = at + p.period - now
            break
          end
        end
        from, batch = from + batch, BATCH
      end
    end
  end
  d[5] = log_settle(keys, p, now, total, t)
  return d
end

-- Takes the cost back off the run at `at` (the time the request was logged at).
local function log_refund(keys, p, now, at)
  local total, latest = pair_load(keys[2])
  if not total then return end
  local list = keys[1]
  local cost = p.cost
  local len = redis.call('LLEN', list)
  local i = len - 1
  while cost > 0 and i >= 0 do
    local e_at, n = log_entry(redis.call('LINDEX', list, i))
    if e_at < at then break end
    if e_at == at then
      local take = math.min(cost, n)
      cost = cost - take
      total = total - take
      if take == n then
        redis.call('LSET', list, i, 'x')
        redis.call('LREM', list, 1, 'x')
      else
        redis.call('LSET', list, i, fmt(e_at) .. ':' .. fmt(n - take))
      end
    end
    i = i - 1
  end
  log_settle(keys, p, now, total, latest)
end

---------------------------------------------------------------------------------------------------
-- Concurrency: a sorted set of lease ids by expiry, and a hash of lease id -> permits with the
-- fields n (permits in flight) and t (latest time seen).

-- Saves in_flight and latest with the TTL of the last lease to expire, or forgets the state.
local function leases_settle(keys, now, in_flight, latest)
  local last = redis.call('ZRANGE', keys[1], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', keys[1], keys[2])
    return 0
  end
  local reset = tonumber(last[2]) - now
  local ttl = ttl_ms(reset)
  redis.call('HSET', keys[2], 'n', fmt(in_flight), 't', fmt(latest))
  redis.call('PEXPIRE', keys[1], ttl)
  redis.call('PEXPIRE', keys[2], ttl)
  return reset
end

local function leases_load(keys, now)
  local meta = redis.call('HMGET', keys[2], 'n', 't')
  local in_flight, latest = tonumber(meta[1] or '0'), tonumber(meta[2] or '0')
  local t = max(now, latest)
  -- In batches, so that unpack() stays within Lua's stack.
  while true do
    local expired = redis.call('ZRANGEBYSCORE', keys[1], '-inf', fmt(t), 'LIMIT', 0, 1000)
    if #expired == 0 then break end
    local permits = redis.call('HMGET', keys[2], unpack(expired))
    for _, n in ipairs(permits) do in_flight = in_flight - tonumber(n) end
    redis.call('ZREM', keys[1], unpack(expired))
    redis.call('HDEL', keys[2], unpack(expired))
  end
  return in_flight, t
end

local function leases_decide(keys, p, now)
  local in_flight, t = leases_load(keys, now)
  local d
  if p.cost <= p.quota - in_flight then
    if p.cost > 0 then
      redis.call('ZADD', keys[1], fmt(t + p.period), p.lease)
      redis.call('HSET', keys[2], p.lease, fmt(p.cost))
      in_flight = in_flight + p.cost
    end
    d = decision(true, p.quota - in_flight, 0, 0)
  else
    d = decision(false, p.quota - in_flight, 0, 0)
    if p.cost > p.quota then
      d[2] = 1
    else
      local need = in_flight + p.cost - p.quota
      local freed, from, batch = 0, 0, FIRST_BATCH
      while d[4] == 0 do
        local leases = redis.call('ZRANGE', keys[1], from, from + batch - 1, 'WITHSCORES')
        if #leases == 0 then break end
        local ids = {}
        for i = 1, #leases, 2 do ids[#ids + 1] = leases[i] end
        local permits = redis.call('HMGET', keys[2], unpack(ids))
        for i, n in ipairs(permits) do
          freed = freed + tonumber(n)
          if freed >= need then
            d[4] = tonumber(leases[2 * i]) - now
            break
          end
        end
        from, batch = from + batch, BATCH
      end
    end
  end
  d[5] = leases_settle(keys, now, in_flight, t)
  return d
end

-- Gives a lease back; 1 when it was held (timed out but not yet dropped counts as held, as in the
-- core). Only then is the state brought up to date, as a peek would.
local function leases_release(keys, now, lease)
  local permits = redis.call('HGET', keys[2], lease)
  if not permits or redis.call('ZREM', keys[1], lease) == 0 then return 0 end
  redis.call('HDEL', keys[2], lease)
  redis.call('HINCRBY', keys[2], 'n', -tonumber(permits))
  local in_flight, t = leases_load(keys, now)
  leases_settle(keys, now, in_flight, t)
  return 1
end

---------------------------------------------------------------------------------------------------

local function decide(keys, p, now)
  local alg = p.alg
  if alg == 'tb' or alg == 'gcra' then return meter_decide(keys[1], p, now) end
  if alg == 'tbi' then return interval_decide(keys[1], p, now) end
  if alg == 'fw' then return fixed_decide(keys[1], p, now) end
  if alg == 'sw' then return sliding_decide(keys[1], p, now) end
  if alg == 'sl' then return log_decide(keys, p, now) end
  if alg == 'cc' then return leases_decide(keys, p, now) end
  error('sluice: unknown algorithm ' .. tostring(alg))
end

-- Gives back what an admitted decision took; `extra` is the decision's sixth value.
local function refund(keys, p, now)
  local extra = p.extra
  local alg = p.alg
  if alg == 'tb' or alg == 'gcra' then return meter_refund(keys[1], p, now) end
  if alg == 'tbi' then return interval_refund(keys[1], p, now) end
  if alg == 'fw' then return fixed_refund(keys[1], p, now, extra) end
  if alg == 'sw' then return sliding_refund(keys[1], p, now, extra) end
  if alg == 'sl' then return log_refund(keys, p, now, extra) end
  if alg == 'cc' then return leases_release(keys, now, p.lease) end
end

-- Calls f(keys, params) for each of the ARGV[2] limits that follow, in order.
local function each_limit(f)
  local n = tonumber(ARGV[2])
  local k, a = 1, 3
  for _ = 1, n do
    local p = params(ARGV, a)
    local nk = NKEYS[p.alg]
    if not nk then error('sluice: unknown algorithm ' .. tostring(p.alg)) end
    local keys = {}
    for j = 1, nk do keys[j] = KEYS[k + j - 1] end
    f(keys, p)
    k, a = k + nk, a + NPARAMS
  end
end
