-- Read-only view of a place, for clients that poll.
-- KEYS: meta, waiting, active, tokens, ended
-- ARGV: place, now ms
-- Returns what resume.lua does ({PLACE_ADMITTED, record}, {PLACE_ADMISSION_PENDING},
-- {PLACE_SESSION_ENDED}, {PLACE_QUEUE_CLOSED, reason or false}, {PLACE_GONE}), but
-- {PLACE_WAITING, position, waiting, rate or false, the bucket's rate} without the previous
-- gateway.
local adm = admitted_state(KEYS[3], KEYS[4], KEYS[5], ARGV[1], tonumber(ARGV[2]))
if adm then return adm end
local closed = closed_reply(KEYS[1])
if closed then return closed end
local found = find_member(KEYS[2], ARGV[1])
if not found then return {PLACE_GONE} end
local rank = redis.call('ZRANK', KEYS[2], found)
local w = redis.call('ZCARD', KEYS[2])
local rate, configured = eta_rates(KEYS[1])
return {PLACE_WAITING, rank + 1, w, rate, configured}
