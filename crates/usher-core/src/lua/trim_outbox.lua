-- Drop the first N outbox entries once delivered (lease holder only).
-- KEYS: outbox, lease   ARGV: lease value, N
-- Returns TRIM_TRIMMED, or TRIM_LEASE_LOST when the lease is not ours (nothing dropped).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return TRIM_LEASE_LOST end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[2]), -1)
return TRIM_TRIMMED
