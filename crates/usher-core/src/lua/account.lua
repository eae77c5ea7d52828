-- Invitations: the live place an invited account holds, for a new device of the account to
-- take over (docs/sale-day.md, "Invitations"; store/invitations.rs).
-- KEYS: account, meta, waiting, parked, pre, drawn, active, bound   (one hash tag), then the
--       lane keys (lanes.lua: a place waits in its invitation's lane)
-- ARGV: the thumbprint of the new device's browser key ('' = none), now ms
-- Returns {'none'} when the account holds no place (never joined, or its place is over:
-- left, dropped, its session ended); {'live', place} when it waits (in line, away, or in a
-- scheduled sale's pre-queue: `place` as recorded, a pre-queue id included); {'admitted',
-- place} when its place was admitted and its session is not over yet.
-- Browser binding (meta `bind` = `browser_key`): a live place is bound to the new device's
-- key in this call, before the gateway resumes it for that device: the newest device holds
-- the place, and the older one's key no longer proves it. An admitted place keeps its key:
-- its entry token names it (`cnf.jkt`).
lane_keys_at = 9
local rec = redis.call('GET', KEYS[1])
if not rec then return {'none'} end
local place = redis.call('HGET', KEYS[6], rec) or rec
local in_pre = redis.call('ZCOUNT', KEYS[5], rec, rec) > 0
local waiting, parked = place_sets(place, KEYS[3], KEYS[4])
local live = in_pre
  or redis.call('ZCOUNT', waiting, place, place) > 0
  or redis.call('ZCOUNT', parked, place, place) > 0
if live then
  if (ARGV[1] or '') ~= '' and redis.call('HGET', KEYS[2], 'bind') == 'browser_key' then
    -- A pre-queue place's key is kept under its pre-queue id until the draw moves it.
    local id = place
    if in_pre then id = rec end
    redis.call('HSET', KEYS[8], id, ARGV[1])
  end
  return {'live', rec}
end
-- A session past its expiry that the tick has not ended yet is over too.
local expires = tonumber(redis.call('ZSCORE', KEYS[7], place))
if expires and expires > tonumber(ARGV[2]) then return {'admitted', rec} end
return {'none'}
