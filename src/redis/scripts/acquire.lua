-- acquire: decides every limit that follows in ARGV, in order, and when any rejects gives back what
-- the others took, all in one atomic call. ARGV[1]: the pinned time ("" in production, which takes
-- Redis TIME); ARGV[2]: how many limits. Returns six integers per limit (see decision()).
-- A decision that raises an error (a key holding what sluice did not write) answers that error, the
-- decisions before it having given back what they took, as for a rejection (the caller never learns
-- of a lease taken before the error); what is written stays written, as in a batch (many.lua).
PINNED = ARGV[1] ~= ''
local out = {}
local ok, err = pcall(acquire_limits, now_us(ARGV[1]), ARGV[2] + 0, 1, 3, out, limit_in_argv)
save_states()
if not ok then return redis.error_reply(type(err) == 'table' and err.err or tostring(err)) end
return out
