-- Live gateways as a flat {index, id, ...}; forgets expired heartbeats.
-- KEYS: live, index   ARGV: now ms
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf')
local out = {}
for _, id in ipairs(ids) do
  local idx = redis.call('HGET', KEYS[2], id)
  if idx then out[#out + 1] = idx; out[#out + 1] = id end
end
return out
