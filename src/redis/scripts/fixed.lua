---------------------------------------------------------------------------------------------------
-- Fixed window: "window:count". ARGV: window_params, the refund value being the window.

local function fixed_decide(keys, p, now)
  local key = keys[1]
  local s = state_get(key)
  local s_window, s_count = 0, 0
  if s then s_window, s_count = s[1], s[2] end
  if kept_under_another_limit(s_window, p.period, now) then s_window, s_count = 0, 0 end
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
      state_set(key, reset, window, count)
    elseif s and reset == 0 then
      state_del(key)
    end
    return d
  end
  local reset = 0
  if count > 0 then reset = window_end end
  local d = decision(false, max(0, p.quota - count), 0, reset)
  if p.cost > p.quota then d[2] = 1 else d[4] = window_end end
  if s and reset == 0 then state_del(key) end
  return d
end

local function fixed_refund(keys, p, now)
  local key, window = keys[1], p.extra
  local s = state_get(key)
  if not s or s[1] ~= window then return end
  local count = max(0, s[2] - p.cost)
  if count == 0 then
    state_del(key)
  else
    state_set(key, nil, window, count)
  end
end
