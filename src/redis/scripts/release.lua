-- release: gives back a concurrency lease. KEYS: the leases' sorted set and hash; ARGV[1]: the
-- pinned time ("" for Redis TIME); ARGV[2]: the lease id. Returns 1 when the lease was held.
PINNED = ARGV[1] ~= ''
local held = leases_release(KEYS, now_us(ARGV[1]), ARGV[2])
save_states()
return held
