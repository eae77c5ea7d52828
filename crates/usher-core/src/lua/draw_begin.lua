-- The start of a scheduled sale's draw, by the replica holding the queue's lease, before it
-- reads the pre-queue: from here on the sale's time and beacon round are fixed
-- (schedule.lua and beacon.lua refuse changes while `drawing` exists), so the order the
-- replica computes is the one the steps apply, and every tick waits for the draw's end.
-- KEYS: meta, drawing, lease, seq, pre_away, absent   (one hash tag)
-- ARGV: lease value, lease ttl ms, now ms, the `opens_at_ms` and the beacon randomness ('' =
--       none) the replica read
-- Returns {DRAW_LEASE_LOST}, {DRAW_NOT_PENDING} (drawn, unscheduled or closed), {DRAW_STALE}
-- (the schedule changed since it was read: read it again), or {DRAW_DONE, 0, 0}.
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {DRAW_LEASE_LOST} end
redis.call('PEXPIRE', KEYS[3], ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'draw', 'open', 'opens_at_ms', 'draw_beacon')
if m[1] ~= 'pending' or m[2] ~= '1' then return {DRAW_NOT_PENDING} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {DRAW_DONE, 0, 0} end
if m[3] ~= ARGV[4] or (m[4] or '') ~= ARGV[5] then return {DRAW_STALE} end
redis.call('SET', KEYS[2], '')
-- The absent entrants are those away now (pre_away.lua), fixed for the whole draw: a draw
-- taken up again by another replica splits the entrants into the same two groups, whatever
-- browsers come and go meanwhile. (RENAME is O(1) whatever the set's size.)
redis.call('DEL', KEYS[6])
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('RENAME', KEYS[5], KEYS[6]) end
redis.call('HDEL', KEYS[1], 'draw_absent')
-- The entrants are the pre-queue places taken so far (ids up to the counter now): later ones
-- go FIFO behind the drawn ones, even when the draw is interrupted and read again.
redis.call('HSET', KEYS[1], 'draw_began_ms', ARGV[3], 'draw_cutoff',
  redis.call('GET', KEYS[4]) or '0')
return {DRAW_DONE, 0, 0}
