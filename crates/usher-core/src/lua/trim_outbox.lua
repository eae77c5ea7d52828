-- Drop the first N outbox entries once delivered (lease holder only).
-- KEYS: outbox, lease   ARGV: lease value, N
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[2]), -1)
return 1
