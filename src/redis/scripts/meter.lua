---------------------------------------------------------------------------------------------------
-- Token bucket (continuous) and GCRA: the theoretical arrival time as whole microseconds plus a
-- fraction in units (0 <= f < units_per_us), stored as "us:f". Quantities are (us, f) pairs.
-- ARGV: cost, quota, units_per_us, units_per_token, the capacity (quota tokens) and the cost as
-- whole us and fraction (computed exactly by the client), and the refund value (the time of the
-- take: see meter_refund).

local function meter_params(argv, i, p)
  p = p or {}
  p.cost, p.quota, p.upu, p.upt = argv[i] + 0, argv[i + 1] + 0, argv[i + 2] + 0, argv[i + 3] + 0
  p.cap_us, p.cap_f, p.cost_us, p.cost_f = argv[i + 4] + 0, argv[i + 5] + 0, argv[i + 6] + 0,
                                           argv[i + 7] + 0
  return p
end

local function meter_load(key)
  local s = state_get(key)
  if not s then return 0, 0 end
  return s[1], s[2]
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

local function meter_decide(keys, p, now)
  local key = keys[1]
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
        state_set(key, reset, now + n_us, n_f)
        return decision(true, p.quota - meter_tokens(p, n_us, n_f), 0, reset, now)
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
  if tat_us > 0 and d[5] == 0 then state_del(key) end
  return d
end

-- Gives back a take made at time p.extra. A decision since that found the bucket full (its time
-- past the TAT) would have found it so sooner without the take, and kept less of it: the take then
-- holds less than its cost, by at most how far that decision's time, at most now, is past the
-- take's own. So the TAT moves back by the cost less the time since the take, never more (measured
-- from the take's time, not from the TAT it was based on, which takes refunded since may have
-- moved back).
local function meter_refund(keys, p, now)
  local r_us, r_f = p.cost_us - max(0, now - p.extra), p.cost_f
  if r_us < 0 then return end
  local key = keys[1]
  local tat_us, tat_f = meter_load(key)
  local t_us, t_f = tat_us - r_us, tat_f - r_f
  if t_f < 0 then t_us, t_f = t_us - 1, t_f + p.upu end
  if t_us > now or (t_us == now and t_f > 0) then
    state_set(key, meter_ceil_us(t_us - now, t_f), t_us, t_f)
  else
    state_del(key)
  end
end
