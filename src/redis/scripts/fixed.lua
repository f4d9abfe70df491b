---------------------------------------------------------------------------------------------------
-- Fixed window: "window:count". ARGV: window_params, the refund value being the window.

local function fixed_decide(keys, p, now)
  local key = keys[1]
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
      state_set(key, pair(window, count), ttl_ms(reset))
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

local function fixed_refund(keys, p, now)
  local key, window = keys[1], p.extra
  local s_window, s_count = pair_load(key)
  if not s_window or s_window ~= window then return end
  local count = max(0, s_count - p.cost)
  if count == 0 then
    state_del(key)
  else
    state_set(key, pair(s_window, count))
  end
end
