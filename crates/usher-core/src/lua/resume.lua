-- Resume the place a ticket names, for a browser now held by this gateway.
-- KEYS: meta, seq, waiting, active, tokens, gws, away   (one hash tag)
-- ARGV: place, gateway index, now ms, gws ttl ms
-- Returns
--   {2, record}   admitted and the session still valid (record = tokens value)
--   {3}           admitted a moment ago, token being minted (ask again shortly)
--   {0}           queue closed or unknown
--   {4}           the place no longer exists (left, grace expired, session over)
--   {1, position, waiting, gateway that held it before or false, rate or false, admit_per_second}
local now = tonumber(ARGV[3])
local adm = admitted_state(KEYS[4], KEYS[5], ARGV[1], now)
if adm then return adm end
if redis.call('HGET', KEYS[1], 'open') ~= '1' then return {0} end
local seq = tonumber(ARGV[1])
local mine = member_of(seq, tonumber(ARGV[2]))
local found = find_member(KEYS[3], seq)
local before = false
if not found then
  -- A ticket is signed, so its place existed. If it is past the counter, Redis lost it
  -- (restarted from an AOF that ended before this join): restore it where it stood.
  local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
  if seq <= counter then return {4} end
  redis.call('SET', KEYS[2], fmt(seq))
  redis.call('ZADD', KEYS[3], seq, mine)
elseif found ~= mine then
  before = member_gateway(found)
  redis.call('ZREM', KEYS[3], found)
  redis.call('ZADD', KEYS[3], seq, mine)
end
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZADD', KEYS[6], now + tonumber(ARGV[4]), ARGV[2])
local rank = redis.call('ZRANK', KEYS[3], mine)
local w = redis.call('ZCARD', KEYS[3])
local m = redis.call('HMGET', KEYS[1], 'rate', 'admit_per_second')
return {1, rank + 1, w, before, m[1], m[2]}
