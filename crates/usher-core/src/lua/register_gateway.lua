-- Register a gateway process. Every start gets a new index (1..65535, in members as 16 bits),
-- so places held by an earlier incarnation are recognisably orphaned. Indexes of gateways dead
-- for longer than the registry remembers them are reused.
-- KEYS: live, ids, next   (hash tag {gw})
-- ARGV: server id, now ms, ttl ms
for _ = 1, 65535 do
  local idx = fmt(redis.call('INCR', KEYS[3]) % 65535 + 1)
  if not redis.call('ZSCORE', KEYS[1], idx) then
    redis.call('HSET', KEYS[2], idx, ARGV[1])
    redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]), idx)
    return idx
  end
end
return redis.error_reply('no free gateway index: 65535 gateway processes registered')
