-- Register a gateway process. Every start gets a new index (1..65535, in members as 16 bits),
-- so places held by an earlier incarnation are recognisably orphaned. Indexes of gateways dead
-- for longer than the registry remembers them are reused.
-- An index is free only when neither the live set nor the owners hash knows it: after Redis
-- lost the registry, a live gateway's heartbeat re-claims its index (and raises `next`), and
-- heartbeat_gateway.lua refuses a process whose index another one owns.
-- KEYS: live, ids, next   (hash tag {gw})
-- ARGV: server id, now ms, ttl ms
for _ = 1, 65535 do
  local idx = fmt(redis.call('INCR', KEYS[3]) % 65535 + 1)
  if not redis.call('ZSCORE', KEYS[1], idx) and redis.call('HEXISTS', KEYS[2], idx) == 0 then
    redis.call('HSET', KEYS[2], idx, ARGV[1])
    redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]), idx)
    return idx
  end
end
return redis.error_reply('no free gateway index: 65535 gateway processes registered')
