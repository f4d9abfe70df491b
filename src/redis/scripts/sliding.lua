---------------------------------------------------------------------------------------------------
-- Sliding window counter: "window:previous:current". ARGV: window_params.

local function sliding_load(key)
  local s = state_get(key)
  if not s then return 0, 0, 0, false end
  return s[1], s[2], s[3], true
end

-- When a state of window `start` holding these counts is full again.
local function sliding_reset(start, period, now, current, previous)
  if current > 0 then return start + 2 * period - now end
  if previous > 0 then return start + period - now end
  return 0
end

local function sliding_decide(keys, p, now)
  local key = keys[1]
  local period, quota, cost = p.period, p.quota, p.cost
  local s_window, s_prev, s_cur, existed = sliding_load(key)
  if kept_under_another_limit(s_window, period, now) then s_window, s_prev, s_cur = 0, 0, 0 end
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
  if cost <= quota - used then
    local d = decision(true, quota - used - cost, 0,
                       sliding_reset(start, period, now, current + cost, previous), window)
    if cost > 0 then
      state_set(key, d[5], window, previous, current + cost)
    elseif existed and d[5] == 0 then
      state_del(key)
    end
    return d
  end
  local d = decision(false, max(0, quota - used), 0, sliding_reset(start, period, now, current, previous))
  if existed and d[5] == 0 then state_del(key) end
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

local function sliding_refund(keys, p, now)
  local key, window = keys[1], p.extra
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
    state_del(key)
  else
    state_set(key, reset, s_window, s_prev, s_cur)
  end
end
