-- The end of a scheduled sale's draw, by the replica holding the queue's lease, after its
-- steps (draw_step.lua) placed the drawn order, in calls of a bounded size (the replica
-- calls again while the reply is DRAW_MORE):
-- 1. If the draw took over half the grace period (a replica stopped between steps and the
--    next took over late), the drawn places still away are stamped again from now, 1,000
--    `drawn` entries a call (HSCAN from the cursor ARGV[5]), so none is dropped before its
--    browser heard of the draw. (A step stamped its places when it ran.)
-- 2. The pre-queue places no step named (they joined after the draw began, or their browser
--    never got its ticket: no entrant hash) follow, FIFO, 1,000 a call.
-- 3. When none are left, the draw is published and done.
-- KEYS: meta, seq, pre, waiting, away, drawn, drawing, lease, draw, entrants, pre_away,
--       absent, bound, record (record.lua)   (one hash tag)
-- ARGV: lease value, lease ttl ms, now ms, the record's length in bytes the replica expects,
--       the stamping cursor ('0' to start; 'done' once stamped or not needed)
-- The gateways end the pre-queue streams at the draw (their browsers resume at once and see
-- their position), so every placed place starts away, for the grace period.
-- Returns {DRAW_LEASE_LOST}, {DRAW_NOT_PENDING} (drawn, unscheduled or closed), {DRAW_STALE},
-- {DRAW_MORE, next cursor, placed FIFO, first of their place ids}, or {DRAW_DONE, placed
-- FIFO, first of their place ids}.
if redis.call('GET', KEYS[8]) ~= ARGV[1] then return {DRAW_LEASE_LOST} end
redis.call('PEXPIRE', KEYS[8], ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'draw', 'open', 'grace_seconds', 'draw_began_ms')
if m[1] ~= 'pending' or m[2] ~= '1' then return {DRAW_NOT_PENDING} end
if redis.call('EXISTS', KEYS[7]) == 0
  or redis.call('STRLEN', KEYS[7]) ~= tonumber(ARGV[4]) then
  return {DRAW_STALE}
end
local now = tonumber(ARGV[3])
local grace_ms = (tonumber(m[3]) or 300) * 1000
local slow = grace_ms > 0 and now - (tonumber(m[4]) or now) > grace_ms / 2
if slow and ARGV[5] ~= 'done' then
  local scan = redis.call('HSCAN', KEYS[6], ARGV[5], 'COUNT', 1000)
  local again = {}
  for i = 2, #scan[2], 2 do
    again[#again + 1] = now + grace_ms; again[#again + 1] = scan[2][i]
  end
  if #again > 0 then redis.call('ZADD', KEYS[5], 'XX', unpack(again)) end
  local next = scan[1]
  if next == '0' then next = 'done' end
  return {DRAW_MORE, next, 0, 0}
end
local pre = redis.call('ZRANGE', KEYS[3], 0, 999, 'WITHSCORES')
local order = {}
for i = 1, #pre, 2 do order[#order + 1] = {pre[i + 1], pre[i]} end
local first = place_drawn(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[13], order, now,
  grace_ms)
record_key_at = 14 -- record
record_drawn(KEYS[1], order, first)
if redis.call('ZCARD', KEYS[3]) > 0 then return {DRAW_MORE, 'done', #order, first} end
-- UNLINK: the entrants hash (one field per entrant) is freed in the background, not while
-- this script holds Redis.
redis.call('UNLINK', KEYS[3], KEYS[10], KEYS[11], KEYS[12])
redis.call('RENAME', KEYS[7], KEYS[9])
redis.call('HDEL', KEYS[1], 'draw_began_ms', 'draw_cutoff')
redis.call('HSET', KEYS[1], 'draw', 'done')
return {DRAW_DONE, #order, first}
