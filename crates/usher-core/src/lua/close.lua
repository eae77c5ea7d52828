-- Close a queue: nobody new may join, and every waiting place is dropped. Admitted sessions
-- stay valid until they expire. The place counter is kept so old tickets never name new places.
-- KEYS: meta, waiting, gws   ARGV: now ms
-- Returns the gateways holding browsers of this queue, or false when the queue is unknown.
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSET', KEYS[1], 'open', '0')
redis.call('DEL', KEYS[2])
local gws = redis.call('ZRANGEBYSCORE', KEYS[3], ARGV[1], '+inf')
redis.call('DEL', KEYS[3])
return gws
