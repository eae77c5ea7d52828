-- Every registered gateway as a flat {index, alive_until ms, server id, ...}; entries dead for
-- longer than `keep` ms are forgotten.
-- KEYS: live, ids   ARGV: now ms, keep ms
local cutoff = tonumber(ARGV[1]) - tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(cutoff))
if #old > 0 then
  redis.call('ZREM', KEYS[1], unpack(old))
  redis.call('HDEL', KEYS[2], unpack(old))
end
local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {}
for i = 1, #all, 2 do
  local id = redis.call('HGET', KEYS[2], all[i])
  if id then
    out[#out + 1] = all[i]; out[#out + 1] = all[i + 1]; out[#out + 1] = id
  end
end
return out
