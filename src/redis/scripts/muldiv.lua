---------------------------------------------------------------------------------------------------
-- Exact products beyond 2^53, for the meter and the sliding window.

local TWO53 = 9007199254740992

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
