-- Read-only view of a place, for clients that poll.
-- KEYS: meta, waiting, active, tokens, ended, pre, drawn, parked, bound, then the lane keys
--       (lanes.lua: a place's position and `waiting` count its own lane only)
--       (one hash tag: {q:<id>})
-- ARGV: place, now ms, then for browser binding (prelude.lua, wrong_key): '1' for a browser's
--       request ('' for the gateway's own), the key its proof was made with, the place's key
--       as the gateway knows it besides `bound` ('' = none)
-- Returns what resume.lua does ({PLACE_ADMITTED, record}, {PLACE_ADMISSION_PENDING},
-- {PLACE_SESSION_ENDED}, {PLACE_QUEUE_CLOSED, reason or false}, {PLACE_GONE}), but
-- {PLACE_WAITING, position, waiting, rate or false, the bucket's rate} without the previous
-- gateway, and {PLACE_SCHEDULED, opens_at ms} in a pre-queue (a pre-queue ticket maps to its
-- drawn place through `drawn`, as in resume.lua). An away place (in `parked`) is waiting; a
-- position counts the places ahead in `waiting` and `parked` (ZCOUNT: O(log n)).
-- {PLACE_WRONG_KEY} when a binding queue's place is not the requester's: its token (or where
-- it stands) is told to nobody else.
lane_keys_at = 10
local place = redis.call('HGET', KEYS[7], ARGV[1]) or ARGV[1]
if wrong_key(KEYS[1], KEYS[9], KEYS[2], KEYS[8], KEYS[6], KEYS[3], place,
    ARGV[3] or '', ARGV[4] or '', ARGV[5] or '') then
  return {PLACE_WRONG_KEY}
end
local adm = admitted_state(KEYS[3], KEYS[4], KEYS[5], place, tonumber(ARGV[2]))
if adm then return adm end
local closed = closed_reply(KEYS[1])
if closed then return closed end
if find_member(KEYS[6], place) then
  return {PLACE_SCHEDULED, (redis.call('HGET', KEYS[1], 'opens_at_ms') or '0')}
end
local slot = lane_slot(place)
local waiting, parked = lane_sets(slot, KEYS[2], KEYS[8])
if not (find_member(waiting, place) or find_member(parked, place)) then return {PLACE_GONE} end
local ahead = '(' .. place
local rank = redis.call('ZCOUNT', waiting, '-inf', ahead) + redis.call('ZCOUNT', parked, '-inf', ahead)
local w = redis.call('ZCARD', waiting) + redis.call('ZCARD', parked)
local rate, configured = eta_rates(KEYS[1])
local part = lane_part(KEYS[1], slot, KEYS[2], KEYS[8])
rate, configured = lane_scaled(rate, part), lane_scaled(configured, part)
return {PLACE_WAITING, rank + 1, w, rate, configured, lane_name(KEYS[1], slot)}
