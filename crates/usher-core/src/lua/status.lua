-- Read-only view of a place, for clients that poll.
-- KEYS: meta, waiting, active, tokens
-- ARGV: place, now ms
-- Returns {2, record} | {3} | {0} | {4} | {1, position, waiting, rate or false, admit_per_second}
local now = tonumber(ARGV[2])
local exp = redis.call('ZSCORE', KEYS[3], ARGV[1])
if exp and tonumber(exp) > now then
  local rec = redis.call('HGET', KEYS[4], ARGV[1])
  if rec and string.sub(rec, -1) ~= '|' then return {2, rec} end
  return {3}
end
if redis.call('HGET', KEYS[1], 'open') ~= '1' then return {0} end
local found = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[1], ARGV[1])
if #found == 0 then return {4} end
local rank = redis.call('ZRANK', KEYS[2], found[1])
local w = redis.call('ZCARD', KEYS[2])
local m = redis.call('HMGET', KEYS[1], 'rate', 'admit_per_second')
return {1, rank + 1, w, m[1], m[2]}
