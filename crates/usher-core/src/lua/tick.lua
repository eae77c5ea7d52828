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
-- Browser binding (meta `bind` = `browser_key`): a place without its browser key in `bound`
-- (put back after a Redis data loss by a gateway that did not know it, or that joined before
-- the queue bound) is dropped when it reaches the head, never admitted: its token would carry
-- no `cnf`, a bearer credential on a queue that promises none.
-- No-shows (meta `arrival_seconds`): a session the booking service has not checked within
-- that many seconds of its admission ends here like an expired one (its slot frees), and
-- counts in the no-show share (prelude.lua `end_no_shows`); admissions get their deadline.
-- KEYS: meta, waiting, active, tokens, outbox, gws, away, lease, seq, ended, parked, bound,
--       unarrived, arrivals (one hash tag)
-- Away places (their browser disconnected and the grace period is not over: an entry in
-- `away`) wait in `parked`, with the same member and score as in `waiting` (away.lua moves
-- them there, resume.lua and back.lua put them back at their exact spot), so the tick never
-- reads them: a call's work grows with its admissions, never with the away places, and a
-- wall of them cannot hold the line. They still count: the line is `waiting` and `parked`
-- together, for `waiting` in the outcome and for the snapshot's positions (a position
-- shown never goes up when a place ahead comes back). A place in `waiting` that has an
-- `away` entry (written by a version before `parked`, or placed by a scheduled sale's
-- draw, which puts its places in line away) is moved to `parked` when it reaches the head:
-- once, so no place is passed over twice.
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
--   admitted, waiting, active, dropped (this call), no_shows (sessions ended by this call
--   for not arriving), outbox_len, admit_per_second,
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
--   inventory = {remaining, held, basket_size, stale} while the booking service reports the
--             inventory (absent otherwise); sold_out = true once the sold-out grace is over
--   more    = true when this call stopped at its share (ARGV[13] admitted, or ARGV[13] places
--             of dead gateways dropped or away places moved to `parked`) with budget and
--             present places left: call again
-- cjson writes an empty list as {} and numbers with 14 significant digits: exact for place ids
-- and millisecond times below 10^14 (a place id never gets there; a time not before 5138).
if redis.call('GET', KEYS[8]) ~= ARGV[9] then return {TICK_LEASE_LOST} end
redis.call('PEXPIRE', KEYS[8], ARGV[10])
local m = redis.call('HMGET', KEYS[1], 'open', 'admit_per_second', 'bucket', 'bucket_ms',
  'grace_seconds', 'paused', 'passthrough', 'draw_began_ms', 'bind')
-- A scheduled sale's draw under way (draw_begin.lua .. draw.lua): part of the pre-queue is in
-- the line already, its browsers not told yet. Nobody is admitted and no away place expires
-- until the draw is done, whichever replica ticks (the dispatcher also waits for the draw).
local drawing = m[8] and true or false
local binds = m[9] == 'browser_key'
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
local no_shows = end_no_shows(KEYS[1], KEYS[3], KEYS[4], KEYS[10], KEYS[13], KEYS[14], now,
  max_ms, 2000)
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

-- Browsers that did not come back within the grace period: removed, never admitted (from
-- `parked`, or from `waiting` for a place that never reached the head since it went away).
local dropped = 0
local gone = {}
if not drawing then gone = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', ARGV[1], 'LIMIT', 0, 2000) end
for _, p in ipairs(gone) do
  local parked = find_member(KEYS[11], p)
  if parked then
    redis.call('ZREM', KEYS[11], parked)
    dropped = dropped + 1
  else
    local mem = find_member(KEYS[2], p)
    if mem then
      redis.call('ZREM', KEYS[2], mem)
      dropped = dropped + 1
    end
  end
end
if #gone > 0 then redis.call('ZREM', KEYS[7], unpack(gone)) end
-- Every parked place has an `away` entry (the scripts write both together). One without
-- (its entry expired by a dispatcher of the version before `parked`, during a rolling
-- upgrade) would count in positions forever: the first few parked places are checked on
-- each call and such a place is dropped. Parked places leave within their grace period, so
-- any such place reaches the head of `parked` in time.
if not drawing then
  local first = redis.call('ZRANGE', KEYS[11], 0, 7, 'WITHSCORES')
  for i = 1, #first, 2 do
    if not redis.call('ZSCORE', KEYS[7], first[i + 1]) then
      redis.call('ZREM', KEYS[11], first[i])
      dropped = dropped + 1
    end
  end
end

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
-- >>> inventory: nor more than the reported inventory allows (prelude.lua inventory_slots)
free = inventory_slots(KEYS[1], KEYS[3], now, free)
-- <<< inventory
local slot_bound = free ~= nil and free < n
if slot_bound then n = free end
local capped = false
local admitted = 0
-- This call's outbox entries, also returned for immediate delivery.
local fresh = {}
if n > 0 then
  local exp = fmt(now + ttl_ms)
  local head = ARGV[1] .. '|' .. exp .. '|'
  -- A sliding session's token lasts until its cap, named after the places (old readers of
  -- the three-field form keep working for other queues).
  local tail = ''
  if sliding then tail = '|' .. fmt(now + max_ms) end
  -- While any place is away, a place at the head may still be away (see the top): the head
  -- is read, checked against `away`, and what the call took (admitted, dropped or moved to
  -- `parked`) removed. Otherwise it is popped.
  local any_away = redis.call('ZCARD', KEYS[7]) > 0
  local gw_of = {}
  local popped_total = 0
  -- Places of dead gateways and away places: at most ARGV[13] of them per call.
  local pop_cap = n + per_call
  while admitted < n and popped_total < pop_cap do
    local popped
    if any_away then
      -- Read a little past what is left to admit, for the away places it may meet.
      local want = math.min(pop_cap - popped_total, 1000, 2 * (n - admitted) + 16)
      popped = redis.call('ZRANGE', KEYS[2], 0, want - 1, 'WITHSCORES')
    else
      popped = redis.call('ZPOPMIN', KEYS[2], math.min(n - admitted, 1000))
    end
    if #popped == 0 then break end
    -- Batched writes: one command per chunk of up to 1,000 places, and one outbox entry
    -- '<admitted at>|<expires>|<place>:<gateway>,...[|<token exp>]' per chunk.
    local zadd, items, taken, park = {}, {}, {}, {}
    for i = 1, #popped, 2 do
      if admitted >= n then break end
      local member = popped[i]
      local place = popped[i + 1]
      popped_total = popped_total + 1
      if any_away then taken[#taken + 1] = member end
      if any_away and redis.call('ZSCORE', KEYS[7], place) then
        park[#park + 1] = place; park[#park + 1] = member
      else
        local tag = string.sub(member, 5, 6)
        local gw = gw_of[tag]
        if not gw then
          gw = member_gateway(member)
          gw_of[tag] = gw
        end
        if dead_since[gw] or (binds and redis.call('HEXISTS', KEYS[12], place) == 0) then
          dropped = dropped + 1
        else
          zadd[#zadd + 1] = exp; zadd[#zadd + 1] = place
          items[#items + 1] = place .. ':' .. gw
          admitted = admitted + 1
        end
      end
    end
    if #taken > 0 then redis.call('ZREM', KEYS[2], unpack(taken)) end
    if #park > 0 then redis.call('ZADD', KEYS[11], unpack(park)) end
    if #zadd > 0 then
      redis.call('ZADD', KEYS[3], unpack(zadd))
      expect_arrival(KEYS[1], KEYS[13], zadd, now)
      local entry = head .. table.concat(items, ',') .. tail
      redis.call('RPUSH', KEYS[5], entry)
      fresh[#fresh + 1] = entry
    end
  end
  capped = popped_total >= pop_cap
  if admitted > 0 then redis.call('HINCRBY', KEYS[1], 'admitted_total', admitted) end
end
if dropped > 0 then redis.call('HINCRBY', KEYS[1], 'dropped_total', dropped) end

-- The line: present places (`waiting`) and away ones (`parked`).
local present = redis.call('ZCARD', KEYS[2])
local parked_n = redis.call('ZCARD', KEYS[11])
local w = present + parked_n
local carry = budget - admitted
if w == 0 and m[7] ~= '1' then
  carry = 0
elseif w == 0 or slot_bound then
  carry = math.min(carry, burst)
end
local more = carry >= 1 and present > 0 and (admitted >= per_call or capped)
-- `scan`: the cursor of the version before `parked` (a tick's calls went on after the away
-- places they passed over); nothing reads it now.
redis.call('HDEL', KEYS[1], 'scan')
redis.call('HSET', KEYS[1], 'bucket', tostring(carry), 'bucket_ms', fmt(math.max(now, last_ms)),
  'bucket_rate', tostring(rate), 'bucket_burst', tostring(burst))
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'rate', ARGV[6]) end
local active = redis.call('ZCOUNT', KEYS[3], ARGV[1], '+inf')

-- The snapshot of the line: for a tick's last call only (the dispatcher publishes that one).
local runs, samples, last_place = {}, {}, 0
if not more then
  last_place = tonumber(redis.call('GET', KEYS[9])) or 0
  local exact = tonumber(ARGV[4])
  -- The exact window: the first `exact` places of the line, present or away (the heads of
  -- `waiting` and `parked`, merged by place id).
  local ids = {}
  local head
  if parked_n > 0 then
    local ph = redis.call('ZRANGE', KEYS[11], 0, exact - 1, 'WITHSCORES')
    -- No present place after the exact-th away one is in the window: read up to it only
    -- (behind a wall of away places, nothing).
    local bound = '+inf'
    if #ph >= 2 * exact then bound = ph[#ph] end
    head = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', bound, 'WITHSCORES', 'LIMIT', 0, exact)
    local i, j = 2, 2
    while #ids < exact and (i <= #head or j <= #ph) do
      local a, b = tonumber(head[i]), tonumber(ph[j])
      if b == nil or (a ~= nil and a < b) then
        ids[#ids + 1] = a; i = i + 2
      else
        ids[#ids + 1] = b; j = j + 2
      end
    end
  else
    head = redis.call('ZRANGE', KEYS[2], 0, exact - 1, 'WITHSCORES')
    for i = 2, #head, 2 do ids[#ids + 1] = tonumber(head[i]) end
  end
  local start, count, last = nil, 0, nil
  for _, s in ipairs(ids) do
    if last ~= nil and s == last + 1 then
      count = count + 1
    else
      if start ~= nil then runs[#runs + 1] = start; runs[#runs + 1] = count end
      start, count = s, 1
    end
    last = s
  end
  if start ~= nil then runs[#runs + 1] = start; runs[#runs + 1] = count end

  -- Samples beyond the exact window: (place, position) pairs, positions counting the away
  -- places. Between two samples (s1, p1) and (s2, p2), interpolation is off by at most the
  -- number of holes (places that left) in between, (s2 - s1) - (p2 - p1). Samples are taken
  -- at present places (the ones whose browsers read positions), by their rank r in
  -- `waiting`; a place's position is r plus the parked places ahead of it (ZCOUNT, O(log n)).
  -- Start from coarse geometric samples and bisect only intervals with more holes than
  -- `step` x p1 allows, so a line with few leavers costs a few dozen lookups, and the worst
  -- case about log(w/exact)/step, however many places are away.
  if w > exact then
    local step = tonumber(ARGV[5])
    local coarse = tonumber(ARGV[8])
    local function ahead_parked(s)
      if parked_n == 0 then return 0 end
      return redis.call('ZCOUNT', KEYS[11], '-inf', '(' .. fmt(s))
    end
    -- The place id and position of the present place of rank r.
    local function at(r)
      local x = redis.call('ZRANGE', KEYS[2], r - 1, r - 1, 'WITHSCORES')
      local s = tonumber(x[2])
      return s, r + ahead_parked(s)
    end
    local function emit(s, p)
      samples[#samples + 1] = s; samples[#samples + 1] = p
    end
    local function refine(r1, s1, p1, r2, s2, p2)
      if r2 - r1 <= 1 then return end
      if (s2 - s1) - (p2 - p1) <= math.floor(p1 * step) then return end
      local rm = math.floor((r1 + r2) / 2)
      local sm, pm = at(rm)
      refine(r1, s1, p1, rm, sm, pm)
      emit(sm, pm)
      refine(rm, sm, pm, r2, s2, p2)
    end
    -- The first sample is the last place of the exact window; r counts the present places
    -- up to it.
    local s, p = ids[exact], exact
    local r = exact
    if parked_n > 0 then r = redis.call('ZCOUNT', KEYS[2], '-inf', fmt(s)) end
    emit(s, p)
    while r < present do
      local r2 = math.min(present, r + math.max(1, math.floor(p * coarse)))
      local s2, p2 = at(r2)
      refine(r, s, p, r2, s2, p2)
      emit(s2, p2)
      r, s, p = r2, s2, p2
    end
    -- The last sample is the tail of the line, which may be an away place.
    if p < w then
      local t = redis.call('ZRANGE', KEYS[11], -1, -1, 'WITHSCORES')
      emit(tonumber(t[2]), w)
    end
  end
end

-- >>> inventory: what `state` tells of it, and whether the sold-out grace is over (the
-- dispatcher then closes the queue with `sold_out`: close.lua checks this again)
local inventory, sold_out = inventory_tick(KEYS[1], KEYS[3], now, m[6] == '1')
-- <<< inventory
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. ARGV[1])
local gws = redis.call('ZRANGEBYSCORE', KEYS[6], ARGV[1], '+inf')
local outbox = redis.call('LLEN', KEYS[5])
return {TICK_TICKED, cjson.encode({
  admitted = admitted, waiting = w, active = active, runs = runs, samples = samples,
  last_place = last_place,
  gateways = gws, outbox_len = outbox, admit_per_second = aps, dropped = dropped, carry = carry,
  session_ttl_ms = ttl_ms, token_ttl_ms = token_ttl_ms, paused = m[6] == '1', fresh = fresh, more = more, no_shows = no_shows,
  inventory = inventory, sold_out = sold_out,
})}
