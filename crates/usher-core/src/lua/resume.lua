-- Resume a place named by a ticket.
-- KEYS: meta, waiting, active, tokens, gws   (one hash tag)
-- ARGV: place, member for this gateway, gateway index, now ms, gws ttl ms
-- Returns
--   {2, record}                      admitted and the session still valid (record = tokens value)
--   {3}                              admitted, token being minted (ask again shortly)
--   {0}                              queue closed or unknown
--   {4}                              the place no longer exists
--   {1, position, waiting, previous member, rate or false, admit_per_second}
local now = tonumber(ARGV[4])
local exp = redis.call('ZSCORE', KEYS[3], ARGV[1])
if exp and tonumber(exp) > now then
  local rec = redis.call('HGET', KEYS[4], ARGV[1])
  if rec and string.sub(rec, -1) ~= '|' then return {2, rec} end
  return {3}
end
if redis.call('HGET', KEYS[1], 'open') ~= '1' then return {0} end
local found = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[1], ARGV[1])
if #found == 0 then return {4} end
local old = found[1]
if old ~= ARGV[2] then
  redis.call('ZREM', KEYS[2], old)
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
end
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[5]), ARGV[3])
local rank = redis.call('ZRANK', KEYS[2], ARGV[2])
local w = redis.call('ZCARD', KEYS[2])
local m = redis.call('HMGET', KEYS[1], 'rate', 'admit_per_second')
return {1, rank + 1, w, old, m[1], m[2]}
