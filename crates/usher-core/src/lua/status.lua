-- Read-only view of a place, for clients that poll.
-- KEYS: meta, waiting, active, tokens
-- ARGV: place, now ms
-- Returns {2, record} | {3} | {0} | {4} | {1, position, waiting, rate or false, admit_per_second}
local adm = admitted_state(KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[2]))
if adm then return adm end
if redis.call('HGET', KEYS[1], 'open') ~= '1' then return {0} end
local found = find_member(KEYS[2], ARGV[1])
if not found then return {4} end
local rank = redis.call('ZRANK', KEYS[2], found)
local w = redis.call('ZCARD', KEYS[2])
local m = redis.call('HMGET', KEYS[1], 'rate', 'admit_per_second')
return {1, rank + 1, w, m[1], m[2]}
