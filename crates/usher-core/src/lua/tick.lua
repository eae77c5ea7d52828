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
--       unarrived, arrivals, then the lane keys (lanes.lua) (one hash tag)
-- Lanes (meta `lanes`; lanes.lua): each call's admissions are split between the lanes with
-- somebody present by share (`lane_plan`: a credit per lane in meta `lane_credit`), each lane
-- admitted from its own head exactly as the one line is (away places, dead gateways, binding),
-- and what a lane cannot use goes to the others. `waiting` counts every lane; `runs` and
-- `samples` are the default lane's, and `lanes` holds each lane's
-- {name, slot, waiting, admitted, runs, samples} ({} without lanes).
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
--       14 tokens per second the bucket refills at ('' = admit_per_second), 15 tick ms,
--       16 the wall clock's ms when the call is made ('' = ARGV[1])
-- A tick admitting ahead of its admission time (ARGV[1]) is stamped with it, and its bucket
-- refills up to it; what ends by the clock (sessions, no-shows, away places' and dead
-- gateways' grace, capacity, `ended` memories) is judged at ARGV[16], never before its time.
-- A tick whose budget exceeds ARGV[13] admits in several calls with the same `now`: the first
-- stores the unused budget in the bucket, and the next ones (no time elapsed since
-- `bucket_ms`) spend it, so no single call blocks Redis for long.
-- Returns {TICK_LEASE_LOST} when the lease is not ours, {TICK_CLOSED, outbox length} when the
-- queue is closed (sessions still expire and the outbox is still delivered), else
-- {TICK_TICKED, outcome}: a JSON object (cjson) decoded by field name in store/dispatch/tick_reply.rs,
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
lane_keys_at = 15 -- lanes
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
local clock = math.min(tonumber(ARGV[16]) or now, now)
local clock_ms = fmt(clock)
local limit = tonumber(ARGV[7])

local ttl_ms, sliding, max_ms = session_limits(KEYS[1])

-- Sessions that ended (in chunks: Lua's unpack takes a few thousand values at most), remembered
-- in `ended` so a resume hears `session_ended`; those remembered long enough are forgotten.
local left = limit
while left > 0 do
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', clock_ms, 'LIMIT', 0, math.min(left, 2000))
  if #expired == 0 then break end
  end_sessions(KEYS[3], KEYS[4], KEYS[10], expired, clock, max_ms)
  record_outcome(KEYS[1], expired, record_expired) -- record
  left = left - #expired
end
local no_shows = end_no_shows(KEYS[1], KEYS[3], KEYS[4], KEYS[10], KEYS[13], KEYS[14], clock,
  max_ms, 2000)
local forgotten = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', clock_ms, 'LIMIT', 0, 2000)
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
-- The places actually found in line (an `away` entry may outlive its place: one admitted or
-- gone already); only they are recorded as leaving.
local found = {}
if not drawing then gone = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', clock_ms, 'LIMIT', 0, 2000) end
for _, p in ipairs(gone) do
  local lane_w, lane_p = place_sets(p, KEYS[2], KEYS[11]) -- lanes
  local parked = find_member(lane_p, p)
  if parked then
    redis.call('ZREM', lane_p, parked)
    found[#found + 1] = p
  else
    local mem = find_member(lane_w, p)
    if mem then
      redis.call('ZREM', lane_w, mem)
      found[#found + 1] = p
    end
  end
end
dropped = #found
if #gone > 0 then redis.call('ZREM', KEYS[7], unpack(gone)) end
record_leave(KEYS[1], found, clock, record_away_expired) -- record
lane_forget(gone) -- lanes
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
  if tonumber(t) + grace_ms < clock then dead_since[idx] = true end
end

local per_call = tonumber(ARGV[13])
local n = math.min(math.floor(budget), per_call)
-- Capacity: never more active sessions than max_active.
local free = free_slots(KEYS[1], KEYS[3], clock)
-- >>> inventory: nor more than the reported inventory allows (prelude.lua inventory_slots)
free = inventory_slots(KEYS[1], KEYS[3], clock, free)
-- <<< inventory
local slot_bound = free ~= nil and free < n
if slot_bound then n = free end
local capped = false
local admitted = 0
-- This call's outbox entries, also returned for immediate delivery.
local fresh = {}
-- >>> lanes: the block below admits from one lane at a time, up to `n` admissions in all
-- (each plan entry: the lane's quota, or what is left of `n`; lanes.lua `lane_plan`).
local n_all = n
local plan, lanes = lane_plan(KEYS[1], n_all, KEYS[2], KEYS[11])
for _, lane in ipairs(plan) do
local lane_before = admitted
n = n_all
if lane.quota then n = math.min(n_all, admitted + lane.quota) end
local lane_left = {}
-- <<< lanes
if n > admitted then
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
      popped = redis.call('ZRANGE', lane.w, 0, want - 1, 'WITHSCORES')
    else
      popped = redis.call('ZPOPMIN', lane.w, math.min(n - admitted, 1000))
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
        lane_left[#lane_left + 1] = place -- lanes
        local tag = string.sub(member, 5, 6)
        local gw = gw_of[tag]
        if not gw then
          gw = member_gateway(member)
          gw_of[tag] = gw
        end
        if dead_since[gw] or (binds and not redis.call('HGET', KEYS[12], place)) then
          dropped = dropped + 1
          -- >>> record
          local why = record_unbound
          if dead_since[gw] then why = record_gateway_gone end
          record_leave(KEYS[1], {place}, clock, why)
          -- <<< record
        else
          zadd[#zadd + 1] = exp; zadd[#zadd + 1] = place
          items[#items + 1] = place .. ':' .. gw
          admitted = admitted + 1
        end
      end
    end
    if #taken > 0 then redis.call('ZREM', lane.w, unpack(taken)) end
    if #park > 0 then redis.call('ZADD', lane.p, unpack(park)) end
    if #zadd > 0 then
      redis.call('ZADD', KEYS[3], unpack(zadd))
      expect_arrival(KEYS[1], KEYS[13], zadd, now)
      -- >>> record: the places admitted, in order
      local admitted_places = {}
      for i = 2, #zadd, 2 do admitted_places[#admitted_places + 1] = zadd[i] end
      record_admit(KEYS[1], admitted_places, now)
      -- <<< record
      local entry = head .. table.concat(items, ',') .. tail
      redis.call('RPUSH', KEYS[5], entry)
      fresh[#fresh + 1] = entry
    end
  end
  capped = capped or popped_total >= pop_cap
end
-- >>> lanes
if lane.slot ~= 0 then lane_forget(lane_left) end
lane.admitted = admitted - lane_before
end
n = n_all
lane_settle(KEYS[1], plan, lanes)
if admitted > 0 then redis.call('HINCRBY', KEYS[1], 'admitted_total', admitted) end
-- <<< lanes
if dropped > 0 then redis.call('HINCRBY', KEYS[1], 'dropped_total', dropped) end

-- The line: present places (`waiting`) and away ones (`parked`).
local present = redis.call('ZCARD', KEYS[2])
local parked_n = redis.call('ZCARD', KEYS[11])
-- >>> lanes: the other lanes' places are in line too.
-- The default lane's counts are taken before the others are added: it need not be listed
-- first (`default_lane`), and its snapshot must not count the other lanes' places.
local lane_counts = {[0] = {present, parked_n}}
for _, l in ipairs(lanes) do
  if l.slot ~= 0 then
    local lw, lp = lane_sets(l.slot, KEYS[2], KEYS[11])
    lane_counts[l.slot] = {redis.call('ZCARD', lw), redis.call('ZCARD', lp)}
    present = present + lane_counts[l.slot][1]
    parked_n = parked_n + lane_counts[l.slot][2]
  end
end
-- <<< lanes
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
local active = redis.call('ZCOUNT', KEYS[3], clock_ms, '+inf')

-- The snapshot of the line: for a tick's last call only (the dispatcher publishes that one):
-- the default lane's (the whole line without lanes) in `runs` and `samples`, each lane's in
-- `lane_snapshots` (lanes.lua `line_snapshot`).
local runs, samples, last_place = {}, {}, 0
local lane_snapshots = {}
if not more then
  last_place = tonumber(redis.call('GET', KEYS[9])) or 0
  local exact, step, coarse = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[8])
  local c0 = lane_counts[0] or {redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[11])}
  runs, samples = line_snapshot(KEYS[2], KEYS[11], c0[1], c0[2], exact, step, coarse)
end
-- >>> lanes: every call says what each lane admitted; the last one also each lane's snapshot.
for _, l in ipairs(lanes) do
  local c = lane_counts[l.slot]
  local lr, ls = {}, {}
  if not more and l.slot == 0 then
    lr, ls = runs, samples
  elseif not more then
    local lw, lp = lane_sets(l.slot, KEYS[2], KEYS[11])
    lr, ls = line_snapshot(lw, lp, c[1], c[2], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[8]))
  end
  lane_snapshots[#lane_snapshots + 1] = {name = l.name, slot = l.slot, share = l.share,
    waiting = c[1] + c[2], present = c[1], admitted = l.admitted or 0, runs = lr, samples = ls}
end
-- <<< lanes

-- >>> inventory: what `state` tells of it, and whether the sold-out grace is over (the
-- dispatcher then closes the queue with `sold_out`: close.lua checks this again)
local inventory, sold_out = inventory_tick(KEYS[1], KEYS[3], clock, m[6] == '1')
-- <<< inventory
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. clock_ms)
local gws = redis.call('ZRANGEBYSCORE', KEYS[6], clock_ms, '+inf')
local outbox = redis.call('LLEN', KEYS[5])
return {TICK_TICKED, cjson.encode({
  admitted = admitted, waiting = w, active = active, runs = runs, samples = samples,
  last_place = last_place,
  gateways = gws, outbox_len = outbox, admit_per_second = aps, dropped = dropped, carry = carry,
  session_ttl_ms = ttl_ms, token_ttl_ms = token_ttl_ms, paused = m[6] == '1', fresh = fresh, more = more, no_shows = no_shows,
  inventory = inventory, sold_out = sold_out,
  lanes = lane_snapshots, -- lanes
})}
