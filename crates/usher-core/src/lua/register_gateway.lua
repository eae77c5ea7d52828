-- Register (or heartbeat) a gateway and return its index (base 36).
-- KEYS: live, index, ids, next   (hash tag {gw})
-- ARGV: gateway id, now ms, ttl ms
local idx = redis.call('HGET', KEYS[2], ARGV[1])
if not idx then
  local n = redis.call('INCR', KEYS[4])
  local digits = '0123456789abcdefghijklmnopqrstuvwxyz'
  idx = ''
  repeat
    local r = n % 36
    idx = string.sub(digits, r + 1, r + 1) .. idx
    n = math.floor(n / 36)
  until n == 0
  redis.call('HSET', KEYS[2], ARGV[1], idx)
  redis.call('HSET', KEYS[3], idx, ARGV[1])
end
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
return idx
