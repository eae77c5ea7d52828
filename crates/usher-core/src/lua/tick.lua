-- One dispatcher tick for one queue (or one call of a tick, see ARGV[13]), by the replica
-- holding the queue's lease.
--
-- In one atomic step: check the lease (fencing: a stale leader's tick is rejected) and renew
-- it, expire finished sessions, drop places whose browsers stayed away past the grace period
-- (or whose gateway died longer ago than that) without admitting them, admit places from the
-- head of the line into the active set and the outbox, and snapshot the line.
--
-- The admission budget is a token bucket in meta (`bucket`, `bucket_ms`), shared with
-- passthrough joins (join.lua): refilled at ARGV[14] per second (the effective rate the
-- dispatcher decided: admit_per_second, or the adaptive rate) for the time since it was last
-- refilled (so late ticks do not slow the rate), spent one token per admission. While the line
-- is empty (or the queue's capacity holds admission back) it keeps at most one tick's worth
-- (`bucket_burst`, at least one token) for passthrough joins, or nothing when passthrough is
-- off. The state lives in meta, so any replica can continue where another stopped.
-- With `max_active` set, a call admits at most the free slots: sessions are counted in this
-- same script, so the cap holds whatever replicas, joins and releases run around it.
--
-- KEYS: meta, waiting, active, tokens, outbox, gws, away, lease, seq, ended   (one hash tag)
-- Away places (in `away`: their browser disconnected and the grace period is not over) are
-- not admitted: they keep their position in `waiting` and the call admits the present places
-- behind them; a resumed place is no longer away and is admitted at its turn. While any place
-- is away, the head is read with ZRANGEBYSCORE from a cursor (meta `scan`, valid for the calls
-- of one tick) instead of popped, so a tick's next call goes on after the away places its
-- previous call passed over.
--
-- ARGV: 1 now ms, 2 elapsed ms to assume on the first tick, 3 longest elapsed ms to count,
--       4 exact places, 5 largest interpolation error (fraction, e.g. 0.01),
--       6 measured rate to store ('' = keep), 7 prune limit, 8 coarse sample step (fraction),
--       9 lease value ('<owner>|<fence>'), 10 lease ttl ms,
--       11 gateways 'index=alive_until_ms,...' (every registered gateway, live or dead),
--       12 most places admitted in one tick, 13 most places admitted by this call,
--       14 tokens per second the bucket refills at ('' = admit_per_second), 15 tick ms
-- A tick whose budget exceeds ARGV[13] admits in several calls with the same `now`: the first
-- stores the unused budget in the bucket, and the next ones (no time elapsed since
-- `bucket_ms`) spend it, so no single call blocks Redis for long.
-- Returns {TICK_LEASE_LOST} when the lease is not ours, {TICK_CLOSED, outbox length} when the
-- queue is closed (sessions still expire and the outbox is still delivered), else
-- {TICK_TICKED, outcome}: a JSON object (cjson) decoded by field name in store/dispatch/tick.rs,
--   admitted, waiting, active, dropped (this call), outbox_len, admit_per_second,
--   carry (the bucket's level after this call),
--   session_ttl_ms, token_ttl_ms (admission to the token's exp: max_session when sliding, else
--   the TTL), paused (bool),
--   runs    = flat [first seq, count, ...]: the first `exact` places, run-length encoded
--   samples = flat [seq, position, ...]: positions beyond the exact window
--   last_place = the last place id handed out when the snapshot was taken (seq): a place at
--             or below it that the snapshot does not list is no longer waiting
--   (runs and samples are empty when more is set: the tick's last call takes the snapshot)
--   gateways = indexes (text) of gateways holding browsers of this queue
--   fresh   = this call's outbox entries
--   more    = true when this call stopped at its share (ARGV[13] admitted, or ARGV[13] places
--             of dead gateways or away places passed) with budget and places left: call
--             again; never after ARGV[12] away places were passed over in this tick
-- cjson writes an empty list as {} and numbers with 14 significant digits: exact for place ids
-- and millisecond times below 10^14 (a place id never gets there; a time not before 5138).
if redis.call('GET', KEYS[8]) ~= ARGV[9] then return {TICK_LEASE_LOST} end
redis.call('PEXPIRE', KEYS[8], ARGV[10])
local m = redis.call('HMGET', KEYS[1], 'open', 'admit_per_second', 'bucket', 'bucket_ms',
  'grace_seconds', 'paused', 'passthrough', 'draw_began_ms')
-- A scheduled sale's draw under way (draw_begin.lua .. draw.lua): part of the pre-queue is in
-- the line already, its browsers not told yet. Nobody is admitted and no away place expires
-- until the draw is done, whichever replica ticks (the dispatcher also waits for the draw).
local drawing = m[8] and true or false
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[7])

local ttl_ms, sliding, max_ms = session_limits(KEYS[1])

-- Sessions that ended (in chunks: Lua's unpack takes a few thousand values at most), remembered
-- in `ended` so a resume hears `session_ended`; those remembered long enough are forgotten.
local left = limit
while left > 0 do
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, math.min(left, 2000))
  if #expired == 0 then break end
  end_sessions(KEYS[3], KEYS[4], KEYS[10], expired, now, max_ms)
  left = left - #expired
end
local forgotten = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', ARGV[1], 'LIMIT', 0, 2000)
if #forgotten > 0 then redis.call('ZREM', KEYS[10], unpack(forgotten)) end

local token_ttl_ms = ttl_ms
if sliding then token_ttl_ms = max_ms end

if m[1] ~= '1' then return {TICK_CLOSED, redis.call('LLEN', KEYS[5])} end
local aps = tonumber(m[2]) or 0
local rate = tonumber(ARGV[14]) or aps
local burst = math.max(rate * tonumber(ARGV[15]) / 1000, 1)
local grace_ms = (tonumber(m[5]) or 300) * 1000
local max_per_tick = tonumber(ARGV[12])
local last_ms = tonumber(m[4])
local budget
if last_ms then
  budget = refill(tonumber(m[3]) or 0, last_ms, now, rate, tonumber(ARGV[3]), max_per_tick)
else
  budget = math.min(rate * tonumber(ARGV[2]) / 1000, max_per_tick)
  last_ms = now
end
if m[6] == '1' or drawing then budget = 0 end

-- Browsers that did not come back within the grace period: removed, never admitted.
local dropped = 0
local gone = {}
if not drawing then gone = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', ARGV[1], 'LIMIT', 0, 2000) end
for _, p in ipairs(gone) do
  local mem = find_member(KEYS[2], p)
  if mem then
    redis.call('ZREM', KEYS[2], mem)
    dropped = dropped + 1
  end
end
if #gone > 0 then redis.call('ZREM', KEYS[7], unpack(gone)) end

-- Gateways that died longer than the grace period ago: their browsers that did not resume
-- elsewhere are dropped when they reach the head of the line.
local dead_since = {}
for idx, t in string.gmatch(ARGV[11], '([^=,]+)=(%d+)') do
  if tonumber(t) + grace_ms < now then dead_since[idx] = true end
end

local per_call = tonumber(ARGV[13])
local n = math.min(math.floor(budget), per_call)
-- Capacity: never more active sessions than max_active.
local free = free_slots(KEYS[1], KEYS[3], now)
local slot_bound = free ~= nil and free < n
if slot_bound then n = free end
local capped = false
local admitted = 0
-- This call's outbox entries, also returned for immediate delivery.
local fresh = {}
-- Away places (browser disconnected, grace not over) passed over by this tick's calls: they
-- keep their place in `waiting` and are admitted at their turn once their browser is back.
local skipped_tick = 0
local away_capped = false
if n > 0 then
  local exp = fmt(now + ttl_ms)
  local head = ARGV[1] .. '|' .. exp .. '|'
  -- A sliding session's token lasts until its cap, named after the places (old readers of
  -- the three-field form keep working for other queues).
  local tail = ''
  if sliding then tail = '|' .. fmt(now + max_ms) end
  local any_away = redis.call('ZCARD', KEYS[7]) > 0
  -- With away places, the head is read (not popped) from where this tick's previous call
  -- stopped: the away places before that stay where they are.
  local from = '-inf'
  if any_away then
    local cur = redis.call('HGET', KEYS[1], 'scan')
    local t, s, k = string.match(cur or '', '^(%d+)|(%d+)|(%d+)$')
    if t == ARGV[1] then from, skipped_tick = '(' .. s, tonumber(k) end
  end
  local gw_of = {}
  local popped_total = 0
  -- Places of dead gateways and away places: at most ARGV[13] of them per call, and at most
  -- ARGV[12] away places per tick.
  local pop_cap = n + per_call
  local last_seen = nil
  while admitted < n and popped_total < pop_cap and skipped_tick < max_per_tick do
    local popped
    if any_away then
      -- Read ahead, as far as this call may pass over places; stop at its admissions.
      local want = math.min(pop_cap - popped_total, max_per_tick - skipped_tick, 1000)
      popped = redis.call('ZRANGEBYSCORE', KEYS[2], from, '+inf', 'WITHSCORES', 'LIMIT', 0, want)
    else
      popped = redis.call('ZPOPMIN', KEYS[2], math.min(n - admitted, 1000))
    end
    if #popped == 0 then break end
    -- Batched writes: one command per chunk of up to 1,000 places, and one outbox entry
    -- '<admitted at>|<expires>|<place>:<gateway>,...[|<token exp>]' per chunk.
    local zadd, items, taken = {}, {}, {}
    for i = 1, #popped, 2 do
      if admitted >= n then break end
      local member = popped[i]
      local place = popped[i + 1]
      last_seen = place
      popped_total = popped_total + 1
      if any_away and redis.call('ZSCORE', KEYS[7], place) then
        skipped_tick = skipped_tick + 1
      else
        if any_away then taken[#taken + 1] = member end
        local tag = string.sub(member, 5, 6)
        local gw = gw_of[tag]
        if not gw then
          gw = member_gateway(member)
          gw_of[tag] = gw
        end
        if dead_since[gw] then
          dropped = dropped + 1
        else
          zadd[#zadd + 1] = exp; zadd[#zadd + 1] = place
          items[#items + 1] = place .. ':' .. gw
          admitted = admitted + 1
        end
      end
    end
    if #taken > 0 then redis.call('ZREM', KEYS[2], unpack(taken)) end
    if #zadd > 0 then
      redis.call('ZADD', KEYS[3], unpack(zadd))
      local entry = head .. table.concat(items, ',') .. tail
      redis.call('RPUSH', KEYS[5], entry)
      fresh[#fresh + 1] = entry
    end
    from = '(' .. last_seen
  end
  capped = popped_total >= pop_cap
  away_capped = skipped_tick >= max_per_tick
  if any_away and last_seen then
    redis.call('HSET', KEYS[1], 'scan', ARGV[1] .. '|' .. last_seen .. '|' .. fmt(skipped_tick))
  end
  if admitted > 0 then redis.call('HINCRBY', KEYS[1], 'admitted_total', admitted) end
end
if dropped > 0 then redis.call('HINCRBY', KEYS[1], 'dropped_total', dropped) end

local w = redis.call('ZCARD', KEYS[2])
local carry = budget - admitted
if w == 0 and m[7] ~= '1' then
  carry = 0
elseif w == 0 or slot_bound then
  carry = math.min(carry, burst)
end
local more = carry >= 1 and w > 0 and (admitted >= per_call or capped) and not away_capped
redis.call('HSET', KEYS[1], 'bucket', tostring(carry), 'bucket_ms', fmt(math.max(now, last_ms)),
  'bucket_rate', tostring(rate), 'bucket_burst', tostring(burst))
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'rate', ARGV[6]) end
local active = redis.call('ZCOUNT', KEYS[3], ARGV[1], '+inf')

-- The snapshot of the line: for a tick's last call only (the dispatcher publishes that one).
local runs, samples, last_place = {}, {}, 0
if not more then
  last_place = tonumber(redis.call('GET', KEYS[9])) or 0
  local exact = tonumber(ARGV[4])
  local head = redis.call('ZRANGE', KEYS[2], 0, exact - 1, 'WITHSCORES')
  local start, count, last = nil, 0, nil
  for i = 2, #head, 2 do
    local s = tonumber(head[i])
    if last ~= nil and s == last + 1 then
      count = count + 1
    else
      if start ~= nil then runs[#runs + 1] = start; runs[#runs + 1] = count end
      start, count = s, 1
    end
    last = s
  end
  if start ~= nil then runs[#runs + 1] = start; runs[#runs + 1] = count end

  -- Samples beyond the exact window. Between two samples (r1, s1) and (r2, s2), interpolation is
  -- off by at most the number of holes (places that left) in between, (s2 - s1) - (r2 - r1). Start
  -- from coarse geometric samples and bisect only intervals with more holes than `step` x r1 allows,
  -- so a line with few leavers costs a few dozen lookups, and the worst case about log(w/exact)/step.
  if w > exact then
    local step = tonumber(ARGV[5])
    local coarse = tonumber(ARGV[8])
    local function seq_at(r)
      local at = redis.call('ZRANGE', KEYS[2], r - 1, r - 1, 'WITHSCORES')
      return tonumber(at[2])
    end
    local function emit(s, r)
      samples[#samples + 1] = s; samples[#samples + 1] = r
    end
    local function refine(r1, s1, r2, s2)
      if r2 - r1 <= 1 then return end
      if (s2 - s1) - (r2 - r1) <= math.floor(r1 * step) then return end
      local rm = math.floor((r1 + r2) / 2)
      local sm = seq_at(rm)
      refine(r1, s1, rm, sm)
      emit(sm, rm)
      refine(rm, sm, r2, s2)
    end
    local r = exact
    local sr = seq_at(r)
    emit(sr, r)
    while r < w do
      local r2 = math.min(w, r + math.max(1, math.floor(r * coarse)))
      local s2 = seq_at(r2)
      refine(r, sr, r2, s2)
      emit(s2, r2)
      r, sr = r2, s2
    end
  end
end

redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. ARGV[1])
local gws = redis.call('ZRANGEBYSCORE', KEYS[6], ARGV[1], '+inf')
local outbox = redis.call('LLEN', KEYS[5])
return {TICK_TICKED, cjson.encode({
  admitted = admitted, waiting = w, active = active, runs = runs, samples = samples,
  last_place = last_place,
  gateways = gws, outbox_len = outbox, admit_per_second = aps, dropped = dropped, carry = carry,
  session_ttl_ms = ttl_ms, token_ttl_ms = token_ttl_ms, paused = m[6] == '1', fresh = fresh, more = more,
})}
