-- A gateway's heartbeat. Also repairs the registry if Redis lost it (restart without the data).
-- KEYS: live, ids, next   ARGV: index, server id, now ms, ttl ms
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[1])
return 1
