-- After a Redis data loss, a gateway puts back the pre-queue places of a scheduled sale held
-- by its browsers (they joined before the draw). The draw's published commitment is kept
-- when the queue was configured again with the same seed (USHER_QUEUES_FILE's `draw_seed`);
-- otherwise that draw is void, and the record says so, never silently.
-- Browser binding: each place put back gets back, in this same call, the browser key the
-- gateway checked at its join or resume (`bound`), under the id it is put back with (a new id
-- at the tail of the line included), so no place is live without its key. A key already
-- there is kept.
-- KEYS: meta, seq, pre, entrants, waiting, drawn, gws, away, active, tokens, ended, parked,
--       bound   (one hash tag: {q:<id>})
-- ARGV: gateway index, now ms, gws ttl ms, the commitment the gateway saw published before
--       ('' = unknown), the opens_at ms it saw ('' = unknown), the void reason, then triples:
--       place id, its entrant hash (32 raw bytes), the thumbprint of its browser key ('' =
--       none), in join order
-- By the queue's draw as configured again:
-- * pending, same commitment (or the gateway saw none): the places go back into the pre-queue
--   with their entrant hashes, and the draw verifies against the commitment published before
--   the loss -> {PRE_RESTORE_KEPT, ...};
-- * pending, another commitment (a new seed): the places take part in that new draw, and the
--   commitment seen before is recorded void (`draw_void`, `draw_void_commitment`; the first
--   gateway's record stays) -> {PRE_RESTORE_REDRAWN, ...};
-- * done (the new draw ran before this gateway got to put its places back): each place the
--   draw did not place gets a new id at the tail of the line, mapped in `drawn` ->
--   {PRE_RESTORE_DRAWN, ...};
-- * no draw (the queue was configured again without `opens_at`, or it passed): the places go
--   into the line with their own ids, so in join order and ahead of every later join, and the
--   draw is recorded void (meta `draw` = `void`) -> {PRE_RESTORE_VOID, ...}.
-- The place counter is raised above every id put back, so no id is handed out twice.
-- Returns {PRE_RESTORE_UNKNOWN} (queue not configured yet), {PRE_RESTORE_CLOSED, reason or
-- false}, or {status, places put back, epoch or false}.
if redis.call('EXISTS', KEYS[1]) == 0 then return {PRE_RESTORE_UNKNOWN} end
local m = redis.call('HMGET', KEYS[1], 'open', 'close_reason', 'epoch', 'draw',
  'draw_commitment', 'draw_void', 'opens_at_ms')
if m[1] ~= '1' then return {PRE_RESTORE_CLOSED, m[2] or false} end
local gw = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local known = ARGV[4]
local restored, highest = 0, 0
local ids, key_of = {}, {}
for i = 7, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
  if ARGV[i + 2] ~= '' then key_of[ARGV[i]] = ARGV[i + 2] end
end

-- Gives place `id` the key its gateway checked, under the id `as` it lives by now.
local function bind(id, as)
  local key = key_of[id]
  if key then redis.call('HSETNX', KEYS[13], as, key) end
end

local function void()
  if not m[6] then
    redis.call('HSET', KEYS[1], 'draw_void', ARGV[6])
    if known ~= '' then redis.call('HSET', KEYS[1], 'draw_void_commitment', known) end
  end
end

-- Puts every place into set `key` under its own id, held by this gateway. Into the line, a
-- place admitted since is left out: a restore repeated after a tick admitted some of its
-- places (a gateway retries one that failed half way) must not line them up again. Into the
-- pre-queue, a place a draw under way placed already is left out (a restore repeated after
-- the draw's first steps): it is in line, under the id `drawn` names.
local function put_back(key, skip_admitted, skip_drawn)
  local add = {}
  for _, id in ipairs(ids) do
    local place = tonumber(id)
    if place > highest then highest = place end
    local mine = member_of(place, gw)
    local found = find_member(key, place)
    -- Into the line, a place that went away since a first restore is in `parked`: it is
    -- taken out of there and put back like a resume does, not lined up a second time.
    local was_parked = false
    if skip_admitted and not found then
      local parked = find_member(KEYS[12], place)
      if parked then
        redis.call('ZREM', KEYS[12], parked)
        was_parked = true
      end
    end
    local skip = (skip_admitted and admitted_state(KEYS[9], KEYS[10], KEYS[11], id, now))
      or (skip_drawn and redis.call('HEXISTS', KEYS[6], id) == 1)
    if (found ~= mine or was_parked) and not skip then
      if found then
        redis.call('ZREM', key, found)
      elseif not was_parked then
        restored = restored + 1
      end
      add[#add + 1] = place; add[#add + 1] = mine
    end
    if not skip then bind(id, id) end
  end
  if #add > 0 then redis.call('ZADD', key, unpack(add)) end
end

local status
if m[4] == 'pending' then
  put_back(KEYS[3], false, true)
  if #ids > 0 then
    local hashes = {}
    for i = 7, #ARGV, 3 do hashes[#hashes + 1] = ARGV[i]; hashes[#hashes + 1] = ARGV[i + 1] end
    redis.call('HSET', KEYS[4], unpack(hashes))
  end
  if known ~= '' and known ~= m[5] then
    void()
    status = PRE_RESTORE_REDRAWN
  else
    status = PRE_RESTORE_KEPT
  end
elseif m[4] == 'done' then
  local add, map = {}, {}
  for _, id in ipairs(ids) do
    if redis.call('HEXISTS', KEYS[6], id) == 0 then
      local new = redis.call('INCR', KEYS[2])
      add[#add + 1] = new; add[#add + 1] = member_of(new, gw)
      map[#map + 1] = id; map[#map + 1] = fmt(new)
      bind(id, fmt(new))
      restored = restored + 1
    end
  end
  if #add > 0 then
    redis.call('ZADD', KEYS[5], unpack(add))
    redis.call('HSET', KEYS[6], unpack(map))
  end
  status = PRE_RESTORE_DRAWN
else
  put_back(KEYS[5], true)
  redis.call('HSET', KEYS[1], 'draw', 'void')
  if not m[7] and ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'opens_at_ms', ARGV[5]) end
  void()
  status = PRE_RESTORE_VOID
end
if #ids > 0 then redis.call('ZREM', KEYS[8], unpack(ids)) end
if highest > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], fmt(highest))
end
redis.call('ZADD', KEYS[7], now + tonumber(ARGV[3]), ARGV[1])
return {status, restored, m[3] or false}
