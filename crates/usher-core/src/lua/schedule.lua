-- Schedule a queue's sale for `opens_at` (the admin API), or unschedule it.
-- KEYS: meta, pre, entrants, drawn, draw, drawing, pre_away, absent   (one hash tag: {q:<id>})
-- ARGV: opens_at ms ('' = unschedule), seed (hex), commitment (hex)
-- Rules: while a draw is pending, a new time moves it and keeps the seed (a seed chosen after
-- people joined could be picked to suit them), and unscheduling is refused; once the draw has
-- begun (its steps placed part of the pre-queue: `drawing` exists) its time is fixed; the time the last
-- draw already ran at changes nothing; any other time starts a new sale: a new seed and
-- commitment, and the previous draw's record is forgotten (a voided draw's record too: see
-- restore_pre.lua).
-- Returns {SCHEDULE_SET} or {SCHEDULE_DRAW_PENDING} (unscheduling, or moving a draw under
-- way, refused).
local m = redis.call('HMGET', KEYS[1], 'draw', 'opens_at_ms')
if ARGV[1] == '' then
  if m[1] == 'pending' then return {SCHEDULE_DRAW_PENDING} end
  redis.call('HDEL', KEYS[1], 'opens_at_ms', 'draw', 'draw_seed', 'draw_commitment',
    'draw_beacon_round', 'draw_beacon', 'draw_void', 'draw_void_commitment', 'draw_absent')
  redis.call('DEL', KEYS[4], KEYS[5])
  return {SCHEDULE_SET}
end
if m[1] == 'pending' then
  if redis.call('EXISTS', KEYS[6]) == 1 then return {SCHEDULE_DRAW_PENDING} end
  redis.call('HSET', KEYS[1], 'opens_at_ms', ARGV[1])
  return {SCHEDULE_SET}
end
if m[1] == 'done' and m[2] == ARGV[1] then return {SCHEDULE_SET} end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
redis.call('HDEL', KEYS[1], 'draw_beacon_round', 'draw_beacon', 'draw_void',
  'draw_void_commitment', 'draw_began_ms', 'draw_cutoff', 'draw_absent')
redis.call('HSET', KEYS[1], 'opens_at_ms', ARGV[1], 'draw', 'pending', 'draw_seed', ARGV[2],
  'draw_commitment', ARGV[3])
return {SCHEDULE_SET}
