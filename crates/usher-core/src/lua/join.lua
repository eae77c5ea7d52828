-- Take new places at the tail of a queue: one for each of a batch of joins (a gateway sends
-- the joins that arrived while its previous call for the queue was under way as one call).
-- KEYS: meta, seq, waiting, gws, active, passed, away, pre, spent, bound, parked,
--       unarrived (one hash tag: {q:<id>}; a passthrough admission must arrive in time too),
--       then the lane keys (lanes.lua)
-- ARGV: gateway index, now ms, gws ttl ms, n (joins in the batch, 1..JOIN_BATCH_MAX),
--       the joins' proofs of work: n entries joined by ',', each '' (none) or
--       '<puzzle id>:<difficulty>:<expires ms>' (checked by the gateway: MAC, expiry, hash),
--       the joins' browser-key thumbprints: n entries joined by ',', each '' (none) or the
--       43-character RFC 7638 thumbprint (checked by the gateway); '' when none has one,
--       the lane every join of the batch goes to ('' = the default lane; lanes.lua),
--       for a recording queue (record.lua) what each join brought: n entries joined by ',',
--       each '' or '<client network hash>:<proof-of-work solve ms>' (either part may be empty)
-- Returns {PLACE_QUEUE_CLOSED} when the queue is closed or unknown, else
-- {PLACE_WAITING, last place, waiting, rate or false, bucket rate, admitted now}: the places
-- taken are last - n + 1 .. last, in the order of the batch; the first `admitted now` of them
-- were admitted in this call (passthrough), the others wait, and the last is at position
-- `waiting` (the line: `waiting` and the away places in `parked`); or {PLACE_SCHEDULED, last, opens_at ms, taken, max_entrants or 0} when they went
-- to a scheduled sale's pre-queue: the first `taken` joins of the batch took a place, the
-- others found the pre-queue full (meta `max_entrants`); or {PLACE_PRE_QUEUE_FULL,
-- max_entrants} when none did.
--
-- Proof of work (meta `challenge` = `pow`): a join takes a place only with a proof whose
-- difficulty is at least `pow_difficulty` and whose puzzle id is not in `spent` yet (added
-- now, kept 60 s past the puzzle's expiry: one solution, one place, however many gateways
-- see it at once). The places then go to the accepted joins only, in batch order, and
-- `n` above counts those; every reply gets one more element, the verdict of each join
-- (POW_*), or is {PLACE_CHALLENGED, verdicts} when no join was accepted. Other queues
-- ignore the proofs and their replies have no verdicts.
--
-- Passthrough: when the queue has `passthrough` on, is not paused, and nobody waits (no
-- waiting and no away places), the first places of the batch are admitted at once, as many
-- as the token bucket shared with the tick has whole tokens (refilled at `bucket_rate`, capped
-- at `bucket_burst`: see tick.lua) and free slots allow. They go to `active` and to the
-- `passed` list (entries as the tick's outbox), for the dispatcher to mint and deliver:
-- the gateway wakes it after this call. Only the dispatcher holds the signing key.
--
-- Every meta field a join reads, in one HMGET: Redis' cost per call is what bounds a hot
-- queue's joins (one slot, one thread), and each redis.call costs about as much as the
-- command it runs. Nothing below writes these fields before reading them (the passthrough
-- block writes `bucket` and `bucket_ms` after reading them, and reads no field it wrote).
local m = redis.call('HMGET', KEYS[1], 'open', 'close_reason', 'lanes', 'challenge',
  'pow_difficulty', 'record', 'draw', 'passthrough', 'paused', 'bucket', 'bucket_ms',
  'bucket_rate', 'bucket_burst', 'rate', 'admit_per_second')
local closed = closed_reply(KEYS[1], {m[1], m[2]})
if closed then return {PLACE_QUEUE_CLOSED} end
-- >>> lanes (lanes.lua): a batch's places go to one lane, named by ARGV[7]; a lane the queue
-- does not have takes no place (checked before any proof of work is spent).
lane_keys_at = 13
local lanes = lanes_of(KEYS[1], m[3])
local lane_slot_of_batch = lane_slot_named(lanes, ARGV[7] or '')
if not lane_slot_of_batch then return {PLACE_NO_SUCH_LANE} end
local lane_waiting, lane_parked = lane_sets(lane_slot_of_batch, KEYS[3], KEYS[11])
-- <<< lanes
local n = tonumber(ARGV[4])
local gw = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local verdicts = nil
local challenge = {m[4], m[5], m[6]}
if challenge[1] == 'pow' then
  local need = tonumber(challenge[2]) or 0
  redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', '(' .. fmt(now))
  verdicts = {}
  local accepted = 0
  for entry in string.gmatch((ARGV[5] or '') .. ',', '([^,]*),') do
    local id, d, exp = string.match(entry, '^([%w_-]+):(%d+):(%d+)$')
    local v = POW_ACCEPTED
    if not id then
      v = POW_MISSING
    elseif tonumber(d) < need then
      v = POW_INSUFFICIENT
    elseif redis.call('ZADD', KEYS[9], 'NX', fmt(tonumber(exp) + 60000), id) == 0 then
      v = POW_SPENT
    else
      accepted = accepted + 1
    end
    verdicts[#verdicts + 1] = v
  end
  if #verdicts ~= n then return redis.error_reply('join: ' .. #verdicts .. ' proofs for ' .. n .. ' joins') end
  if accepted == 0 then return {PLACE_CHALLENGED, verdicts} end
  n = accepted
end
-- >>> browser binding (meta `bind` = `browser_key`; docs/security.md)
-- Each place taken (the accepted joins', in batch order, from `first`) records its browser
-- key's thumbprint in `bound` in this very call, before passthrough below or any tick can
-- admit it: no entry token is ever minted for a bound place without its key (`cnf.jkt`).
-- A pre-queue place records it under its pre-queue id, which its ticket keeps naming.
local function bind_keys(first, n)
  if (ARGV[6] or '') == '' then return end
  local taken, i = {}, 0
  for t in string.gmatch(ARGV[6] .. ',', '([^,]*),') do
    i = i + 1
    if not verdicts or verdicts[i] == POW_ACCEPTED then taken[#taken + 1] = t end
  end
  local fields = {}
  for j = 1, n do
    if taken[j] and taken[j] ~= '' then
      fields[#fields + 1] = fmt(first + j - 1)
      fields[#fields + 1] = taken[j]
    end
  end
  if #fields > 0 then redis.call('HSET', KEYS[10], unpack(fields)) end
end
-- <<< browser binding
-- >>> record (record.lua): a recording queue's new places, first .. first + count - 1, each
-- with what its join brought (ARGV[5], ARGV[8]: the accepted joins', in batch order), whether
-- it was admitted now (the first `admitted` of them) and the ETA a waiting one is shown: its
-- position (the last is at `w`) at `rate` (nil: no ETA). Nothing for other queues.
local function record_places(first, count, kind, lane, admitted, w, rate, admitted_at)
  if challenge[3] ~= '1' then return end
  local proofs, extras, notes = {}, {}, {}
  for e in string.gmatch((ARGV[5] or '') .. ',', '([^,]*),') do proofs[#proofs + 1] = e end
  for e in string.gmatch((ARGV[8] or '') .. ',', '([^,]*),') do extras[#extras + 1] = e end
  for i = 1, tonumber(ARGV[4]) do
    if #notes < count and (not verdicts or verdicts[i] == POW_ACCEPTED) then
      local j = #notes
      local d = string.match(proofs[i] or '', '^[%w_-]+:(%d+):%d+$')
      local net, solve = string.match(extras[i] or '', '^(%d*):(%d*)$')
      net, solve, d = tonumber(net or ''), tonumber(solve or ''), tonumber(d or '')
      local eta = nil
      if j >= admitted and rate and rate > 0 then eta = math.ceil((w - (count - 1 - j)) / rate) end
      notes[#notes + 1] = {eta, net, d, solve, j < admitted}
    end
  end
  record_join(KEYS[1], first, now, kind, lane, notes, admitted_at)
end
-- <<< record
-- Scheduled sale: while its draw is pending, places go to the pre-queue, which the draw puts
-- in line in a random order (draw.lua); nobody joins `waiting` ahead of it, and passthrough
-- (below) admits nobody: this block comes first and returns.
if m[7] == 'pending' then
  -- A cap on entrants (meta `max_entrants`): the joins beyond it take no place.
  local cap = tonumber(redis.call('HGET', KEYS[1], 'max_entrants'))
  local taken = n
  if cap then taken = math.max(math.min(n, cap - redis.call('ZCARD', KEYS[8])), 0) end
  if taken == 0 then return {PLACE_PRE_QUEUE_FULL, cap, verdicts} end
  local last = redis.call('INCRBY', KEYS[2], taken)
  bind_keys(last - taken + 1, taken)
  local pre = {}
  for seq = last - taken + 1, last do
    pre[#pre + 1] = seq
    pre[#pre + 1] = member_of(seq, gw)
  end
  redis.call('ZADD', KEYS[8], unpack(pre))
  record_places(last - taken + 1, taken, 2, 0, 0, 0, nil) -- record
  return {PLACE_SCHEDULED, last, (redis.call('HGET', KEYS[1], 'opens_at_ms') or '0'), taken,
    cap or 0, verdicts}
end
local last = redis.call('INCRBY', KEYS[2], n)
local first = last - n + 1
bind_keys(first, n)


local now_admitted = 0
-- When the places admitted now are admitted (the passthrough block below sets it).
local admitted_at = now
local p = {m[8], m[9], m[10], m[11], m[12], m[13]}
-- bucket_ms is set by the first tick: until then there is no bucket to spend. A queue without
-- lanes has nobody in the other lanes' fourteen zsets (put_lanes.lua drops a lane only once
-- it is empty), so only a queue with lanes counts them: a passthrough queue whose line stays
-- empty takes this path on every join call.
if p[1] == '1' and p[2] ~= '1' and p[4] and redis.call('ZCARD', KEYS[3]) == 0
    and redis.call('ZCARD', KEYS[7]) == 0 and redis.call('ZCARD', KEYS[11]) == 0
    and (#lanes == 0 or extra_lanes_empty()) then
  local last_ms = tonumber(p[4])
  -- A tick made ahead of its admission time refilled the bucket up to that time and holds its
  -- admissions until then: a join before it is admitted at that time (`at`), never ahead of
  -- the ones held (the dispatcher sends it then too).
  -- (No later than the longest lead, 250 ms, the dispatcher's `timing::admit_lead_cap`: a
  -- bucket_ms left far ahead by a wall clock stepped back must not stamp joins in the future.)
  local at = math.max(now, math.min(last_ms, now + 250))
  admitted_at = at
  local burst = tonumber(p[6]) or 1
  local level = refill(tonumber(p[3]) or 0, last_ms, now, tonumber(p[5]) or 0, math.huge, burst)
  local k = math.min(n, math.floor(level))
  local free = free_slots(KEYS[1], KEYS[5], now)
  -- >>> inventory: nor more than the reported inventory allows (prelude.lua inventory_slots)
  free = inventory_slots(KEYS[1], KEYS[5], now, free)
  -- <<< inventory
  if free and free < k then k = free end
  if k > 0 then
    local ttl_ms, sliding, max_ms = session_limits(KEYS[1])
    local exp = fmt(at + ttl_ms)
    local zadd, items = {}, {}
    for seq = first, first + k - 1 do
      zadd[#zadd + 1] = exp; zadd[#zadd + 1] = seq
      items[#items + 1] = fmt(seq) .. ':' .. fmt(gw)
    end
    redis.call('ZADD', KEYS[5], unpack(zadd))
    expect_arrival(KEYS[1], KEYS[12], zadd, at)
    local entry = fmt(at) .. '|' .. exp .. '|' .. table.concat(items, ',')
    if sliding then entry = entry .. '|' .. fmt(at + max_ms) end
    redis.call('RPUSH', KEYS[6], entry)
    redis.call('HINCRBY', KEYS[1], 'admitted_total', k)
    now_admitted = k
  end
  redis.call('HSET', KEYS[1], 'bucket', tostring(level - now_admitted),
    'bucket_ms', fmt(at))
end

if now_admitted < n then
  local args, lane_of = {}, {}
  for seq = first + now_admitted, last do
    args[#args + 1] = seq
    args[#args + 1] = member_of(seq, gw)
    lane_of[#lane_of + 1] = seq; lane_of[#lane_of + 1] = lane_slot_of_batch
  end
  redis.call('ZADD', lane_waiting, unpack(args))
  if lane_slot_of_batch ~= 0 then redis.call('HSET', KEYS[lane_keys_at], unpack(lane_of)) end
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), ARGV[1])
local w = redis.call('ZCARD', lane_waiting) + redis.call('ZCARD', lane_parked)
local rate, configured = eta_rates(KEYS[1], {m[14], m[12], m[15]})
-- >>> lanes: the ETA is at the lane's part of the rate.
local part = lane_part(KEYS[1], lane_slot_of_batch, KEYS[3], KEYS[11], lanes)
rate, configured = lane_scaled(rate, part), lane_scaled(configured, part)
-- <<< lanes
-- >>> record: at the rate the gateway's ETA uses (the measured one, else the configured one)
local eta_rate = tonumber(rate)
if not eta_rate or eta_rate <= 0 then eta_rate = tonumber(configured) end
record_places(first, n, 1, lane_slot_of_batch, now_admitted, w, eta_rate, admitted_at)
-- <<< record
return {PLACE_WAITING, last, w, rate, configured, now_admitted, verdicts}
