-- acquire: decides every limit that follows in ARGV, in order, and when any rejects gives back what
-- the others took, all in one atomic call. ARGV[1]: the pinned time ("" in production, which takes
-- Redis TIME); ARGV[2]: how many limits. Returns six integers per limit (see decision()).
PINNED = ARGV[1] ~= ''
local out = {}
acquire_limits(now_us(ARGV[1]), ARGV[2] + 0, 1, 3, out, limit_in_argv)
save_states()
return out
