-- The browser key a ticket's place is bound to, for the gateway's proof check (browser
-- binding: meta `bind` = `browser_key`; docs/security.md).
-- KEYS: bound, drawn, waiting, parked, pre, active, then the lane keys (lanes.lua)
--       (one hash tag: {q:<id>})
-- ARGV: the ticket's place id
-- A scheduled sale's ticket names the place's pre-queue id; after the draw, `drawn` maps it
-- to its place in line, where the draw moved its key (prelude.lua, place_drawn).
-- Returns {BOUND_KEY, thumbprint}; {BOUND_NONE} for a live place without a key (it joined
-- before the queue bound: it cannot be proven); or {BOUND_OVER} for a place that is over
-- for good (left, dropped, closed, its session ended), whose key lua/prune_bound.lua may have
-- forgotten already: nothing of it can be taken with its ticket any more, so the gateway lets
-- the request through for the place's own scripts to answer (`session_ended`, the close
-- reason, ...), as it would a browser with the key.
lane_keys_at = 7
local place = redis.call('HGET', KEYS[2], ARGV[1]) or ARGV[1]
local key = redis.call('HGET', KEYS[1], place)
if key then return {BOUND_KEY, key} end
if place_live(KEYS[3], KEYS[4], KEYS[5], KEYS[6], place) then return {BOUND_NONE} end
return {BOUND_OVER}
