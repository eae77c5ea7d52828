-- Resume the place a ticket names, for a browser now held by this gateway.
-- KEYS: meta, seq, waiting, active, tokens, gws, away, ended, pre, drawn, pre_away, parked,
--       bound, then the lane keys (lanes.lua: a place's position and `waiting` count its own
--       lane only)   (one hash tag)
-- ARGV: place, gateway index, now ms, gws ttl ms, the thumbprint of the place's browser key as
--       the gateway knows it ('' = none: from `bound`, or from the stream it held the place
--       with; never merely the key of the request's proof)
--       then '1' for a browser's request ('' for the gateway's own) and the key its proof was
--       made with ('' = none): prelude.lua, wrong_key
-- Returns
--   {PLACE_ADMITTED, record}     admitted, the session still valid (record = tokens value)
--   {PLACE_ADMISSION_PENDING}    admitted a moment ago, token being minted (ask again shortly)
--   {PLACE_SESSION_ENDED}        admitted, and the session ended (released or expired)
--   {PLACE_QUEUE_CLOSED, reason or false}  queue closed (for reason) or unknown
--   {PLACE_GONE}                 the place no longer exists (left, grace expired, session over)
--   {PLACE_WAITING, position, waiting, gateway that held it before or false, rate or false,
--    the bucket's rate (see eta_rates in prelude.lua), place id, its lane's name or false}
--   {PLACE_SCHEDULED, opens_at ms, gateway that held it before or false}   in a pre-queue
--   {PLACE_WRONG_KEY}            a binding queue's place that is not the requester's: nothing
--                                done (checked here, with the resume, not only by the gateway)
-- An away place comes back from `parked` to its spot in `waiting` (same score); its position
-- counts the places ahead of it in both sets.
-- A scheduled sale's ticket names the place's pre-queue id; after the draw, `drawn` maps it
-- to the place's id in the line (the id returned).
-- Browser binding (meta `bind` = `browser_key`): a place resumed live gets the key the gateway
-- names if it has none (a place put back without it); a place Redis lost is put back only
-- with its key, else it is gone: its key is lost with it, and a place in line without a key
-- could be resumed with a copied ticket and minted a token without `cnf`.
lane_keys_at = 14
local key = ARGV[5] or ''
local function bind(id)
  if key ~= '' then redis.call('HSETNX', KEYS[13], id, key) end
end
local now = tonumber(ARGV[3])
local place = redis.call('HGET', KEYS[10], ARGV[1]) or ARGV[1]
if wrong_key(KEYS[1], KEYS[13], KEYS[3], KEYS[12], KEYS[9], KEYS[4], place,
    ARGV[6] or '', ARGV[7] or '', key) then
  return {PLACE_WRONG_KEY}
end
local adm = admitted_state(KEYS[4], KEYS[5], KEYS[8], place, now)
if adm then return adm end
local closed = closed_reply(KEYS[1])
if closed then return closed end
local seq = tonumber(place)
local pre = find_member(KEYS[9], seq)
if pre then
  local mine_pre = member_of(seq, tonumber(ARGV[2]))
  local held_by = false
  if pre ~= mine_pre then
    held_by = member_gateway(pre)
    redis.call('ZREM', KEYS[9], pre)
    redis.call('ZADD', KEYS[9], seq, mine_pre)
  end
  -- Its browser is back: present at the draw (pre_away.lua).
  redis.call('SREM', KEYS[11], ARGV[1])
  bind(place)
  return {PLACE_SCHEDULED, (redis.call('HGET', KEYS[1], 'opens_at_ms') or '0'), held_by}
end
local mine = member_of(seq, tonumber(ARGV[2]))
local slot = lane_slot(place)
local waiting, parked_set = lane_sets(slot, KEYS[3], KEYS[12])
local found = find_member(waiting, seq)
local before = false
if not found then
  local parked = find_member(parked_set, seq)
  if parked then
    if parked ~= mine then before = member_gateway(parked) end
    redis.call('ZREM', parked_set, parked)
    redis.call('ZADD', waiting, seq, mine)
  else
    -- A ticket is signed, so its place existed. If it is past the counter, Redis lost it
    -- (restarted from an AOF that ended before this join): restore it where it stood.
    local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
    if seq <= counter then return {PLACE_GONE} end
    if key == '' and redis.call('HGET', KEYS[1], 'bind') == 'browser_key' then
      return {PLACE_GONE}
    end
    redis.call('SET', KEYS[2], fmt(seq))
    redis.call('ZADD', KEYS[3], seq, mine)
  end
elseif found ~= mine then
  before = member_gateway(found)
  redis.call('ZREM', waiting, found)
  redis.call('ZADD', waiting, seq, mine)
end
bind(place)
redis.call('ZREM', KEYS[7], place)
redis.call('ZADD', KEYS[6], now + tonumber(ARGV[4]), ARGV[2])
local rank = redis.call('ZRANK', waiting, mine) + redis.call('ZCOUNT', parked_set, '-inf', '(' .. fmt(seq))
local w = redis.call('ZCARD', waiting) + redis.call('ZCARD', parked_set)
local rate, configured = eta_rates(KEYS[1])
local part = lane_part(KEYS[1], slot, KEYS[3], KEYS[12])
rate, configured = lane_scaled(rate, part), lane_scaled(configured, part)
return {PLACE_WAITING, rank + 1, w, before, rate, configured, place, lane_name(KEYS[1], slot)}
