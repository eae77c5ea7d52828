-- Acquire or renew a queue's lease. A new holder gets a new fencing token.
-- KEYS: lease, meta   ARGV: owner, ttl ms
-- Returns the fencing token, or 0 when another replica holds the lease.
local cur = redis.call('GET', KEYS[1])
if cur then
  local owner, fence = string.match(cur, '^(.*)|(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(fence)
  end
  return 0
end
local fence = redis.call('HINCRBY', KEYS[2], 'fence', 1)
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. fence, 'PX', ARGV[2])
return fence
