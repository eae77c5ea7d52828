-- A scheduled sale's public randomness beacon (a drand round named in advance): name the
-- round, or record its randomness once it is published. Only while the draw is pending; once
-- its steps began (`drawing` exists) the order's key is fixed, so the round can no longer
-- change.
-- KEYS: meta, drawing   (one hash tag: {q:<id>})
-- ARGV: 'round' and the round ('' = none), or 'randomness' and its hex
-- Naming a new round forgets any randomness recorded for the previous one; randomness is
-- recorded once (the same value again is accepted) and only for a named round.
-- Returns {BEACON_SET}, {BEACON_NOT_PENDING}, {BEACON_NO_ROUND} or {BEACON_CONFLICT} (another
-- randomness is already recorded).
local m = redis.call('HMGET', KEYS[1], 'draw', 'draw_beacon_round', 'draw_beacon')
-- Naming the round already named changes nothing, before, during or after the draw: a
-- settings push that repeats it must not forget the randomness recorded for it.
if ARGV[1] == 'round' and (m[2] or '') == ARGV[2] then return {BEACON_SET} end
if m[1] ~= 'pending' then return {BEACON_NOT_PENDING} end
if ARGV[1] == 'round' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {BEACON_NOT_PENDING} end
  redis.call('HDEL', KEYS[1], 'draw_beacon')
  if ARGV[2] == '' then
    redis.call('HDEL', KEYS[1], 'draw_beacon_round')
  else
    redis.call('HSET', KEYS[1], 'draw_beacon_round', ARGV[2])
  end
  return {BEACON_SET}
end
if not m[2] then return {BEACON_NO_ROUND} end
if m[3] and m[3] ~= ARGV[2] then return {BEACON_CONFLICT} end
redis.call('HSET', KEYS[1], 'draw_beacon', ARGV[2])
return {BEACON_SET}
