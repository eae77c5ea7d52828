-- A gateway puts back the places of the browsers it holds after Redis lost the queue (restarted
-- empty, flushed) and the queue was configured again. Places keep their ids (so their tickets,
-- and the order of the line: the score is the place id) and go to this gateway. A place
-- waiting already moves to this gateway; one admitted (or whose session ended) since is left
-- alone. A place parked (away) since is held here again: it goes back to `waiting`. The
-- place counter is raised above every id put back, so no id is handed out twice.
-- Browser binding: each place left in line gets back the browser key the gateway checked at
-- its join or resume (`bound`), in this same call, so the place is never live without its key
-- for the dispatcher to mint by (`cnf.jkt`) or the gateway to check (place_key.lua). A key
-- already there is kept: a place's key never changes.
-- KEYS: meta, seq, waiting, active, ended, tokens, gws, away, parked, bound, then the lane keys
--       (lanes.lua: a place still in a lane other than the default one stays there; a place
--       Redis lost comes back in the default lane, its lane lost with it)
--       (one hash tag: {q:<id>})
-- ARGV: gateway index, now ms, gws ttl ms, then pairs in the line's order: place id, the
--       thumbprint of its browser key ('' = none: the queue binds nothing)
-- Returns {RESTORE_UNKNOWN} when the queue is not configured (yet), {RESTORE_CLOSED, reason or
-- false} when it is closed, else {RESTORE_DONE, places put back, epoch or false}.
if redis.call('EXISTS', KEYS[1]) == 0 then return {RESTORE_UNKNOWN} end
lane_keys_at = 11
local m = redis.call('HMGET', KEYS[1], 'open', 'close_reason', 'epoch')
if m[1] ~= '1' then return {RESTORE_CLOSED, m[2] or false} end
local gw = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local restored, highest = 0, 0
local add, ids, keys = {}, {}, {}
for i = 4, #ARGV, 2 do
  local place = tonumber(ARGV[i])
  ids[#ids + 1] = ARGV[i]
  local live = true
  if place > highest then highest = place end
  local lane_w, lane_p = place_sets(place, KEYS[3], KEYS[9])
  local member = find_member(lane_w, place)
  local parked = find_member(lane_p, place)
  if parked then
    redis.call('ZREM', lane_p, parked)
    redis.call('ZADD', lane_w, place, member_of(place, gw))
  elseif member then
    if member_gateway(member) ~= ARGV[1] then
      redis.call('ZREM', lane_w, member)
      redis.call('ZADD', lane_w, place, member_of(place, gw))
    end
  elseif not admitted_state(KEYS[4], KEYS[6], KEYS[5], ARGV[i], now) then
    add[#add + 1] = place; add[#add + 1] = member_of(place, gw)
    restored = restored + 1
  else
    live = false
  end
  if live and ARGV[i + 1] ~= '' then
    keys[#keys + 1] = ARGV[i]; keys[#keys + 1] = ARGV[i + 1]
  end
end
if #add > 0 then redis.call('ZADD', KEYS[3], unpack(add)) end
for j = 1, #keys, 2 do redis.call('HSETNX', KEYS[10], keys[j], keys[j + 1]) end
if #ids > 0 then redis.call('ZREM', KEYS[8], unpack(ids)) end
if highest > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], fmt(highest))
end
redis.call('ZADD', KEYS[7], now + tonumber(ARGV[3]), ARGV[1])
return {RESTORE_DONE, restored, m[3] or false}
