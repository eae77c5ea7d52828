-- Take a new place at the tail of a queue.
-- KEYS: meta, seq, waiting, gws   (one hash tag: {q:<id>})
-- ARGV: gateway index, now ms, gws ttl ms
-- Returns {0} when the queue is closed or unknown, else
-- {1, place, waiting, rate or false, admit_per_second}.
if redis.call('HGET', KEYS[1], 'open') ~= '1' then return {0} end
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[3], seq, member_of(seq, tonumber(ARGV[1])))
redis.call('ZADD', KEYS[4], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
local w = redis.call('ZCARD', KEYS[3])
local m = redis.call('HMGET', KEYS[1], 'rate', 'admit_per_second')
return {1, seq, w, m[1], m[2]}
