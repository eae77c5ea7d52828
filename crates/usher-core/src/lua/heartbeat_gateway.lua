-- A gateway's heartbeat, which checks that the process still owns its index. It repairs the
-- registry if Redis lost it (restarted empty): the entry is written again and `next` is raised
-- to at least this index, so a gateway registering later never takes it.
-- A process whose index another one owns (it registered while Redis had lost the entry) is
-- refused and overwrites nothing: it must register again.
-- KEYS: live, ids, next   ARGV: index, server id, now ms, ttl ms
-- Returns {HEARTBEAT_KEPT} or {HEARTBEAT_NOT_OWNER}.
local owner = redis.call('HGET', KEYS[2], ARGV[1])
if owner and owner ~= ARGV[2] then return {HEARTBEAT_NOT_OWNER} end
if not owner then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  local next = tonumber(redis.call('GET', KEYS[3]) or '0')
  if next < tonumber(ARGV[1]) then redis.call('SET', KEYS[3], ARGV[1]) end
end
redis.call('ZADD', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[1])
return {HEARTBEAT_KEPT}
