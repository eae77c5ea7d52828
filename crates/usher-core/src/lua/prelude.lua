-- Shared helpers, prepended to every script (after the status constants of store/reply.rs,
-- such as PLACE_WAITING: scripts return statuses by those names, never as bare numbers); each
-- script gets only the definitions it uses (store/script_text.rs): at the top level, only
-- comments, one-line `local` definitions and `local function` blocks ending in a bare `end`.
--
-- A waiting-set member is 6 bytes: the place's sequence number (low 32 bits, big-endian) and
-- the index of the gateway holding the browser (16 bits). The score is the full sequence
-- number, which is also the place id. Six bytes keep a member in Redis' smallest string
-- allocation, which keeps a waiting place small (see keys.rs).

-- Decimal text of an integer, without Lua's %.14g rounding.
local function fmt(n)
  return string.format('%d', n)
end

local function member_of(seq, gw)
  local s = seq % 4294967296
  return string.char(math.floor(s / 16777216) % 256, math.floor(s / 65536) % 256,
    math.floor(s / 256) % 256, s % 256, math.floor(gw / 256) % 256, gw % 256)
end

-- The gateway index (decimal text) in a member.
local function member_gateway(m)
  local a, b = string.byte(m, 5, 6)
  return fmt(a * 256 + b)
end

-- The waiting-set member of place `seq`, or nil.
local function find_member(waiting, seq)
  local found = redis.call('ZRANGEBYSCORE', waiting, seq, seq)
  return found[1]
end

-- A queue's session settings from its meta hash: TTL (ms), whether touches slide the session,
-- and the longest a session may last after admission (ms; default 3 x TTL).
local function session_limits(meta)
  local m = redis.call('HMGET', meta, 'session_ttl_seconds', 'sliding_session', 'max_session_seconds')
  local ttl_ms = (tonumber(m[1]) or 600) * 1000
  local max_ms = (tonumber(m[3]) or 0) * 1000
  if max_ms < ttl_ms then max_ms = 3 * ttl_ms end
  return ttl_ms, m[2] == '1', max_ms
end

-- The queue's session record for `place` if it was admitted and the session is still valid:
-- {PLACE_ADMITTED, record} when the token is stored, {PLACE_ADMISSION_PENDING} while it is
-- being minted, {PLACE_SESSION_ENDED} when its session ended (released or expired, see the
-- `ended` zset in keys.rs), nil otherwise.
local function admitted_state(active, tokens, ended, place, now)
  local exp = redis.call('ZSCORE', active, place)
  if exp and tonumber(exp) > now then
    local rec = redis.call('HGET', tokens, place)
    if rec then return {PLACE_ADMITTED, rec} end
    return {PLACE_ADMISSION_PENDING}
  end
  if exp or redis.call('ZSCORE', ended, place) then return {PLACE_SESSION_ENDED} end
  return nil
end

-- Ends the session of `place` (released or expired) and remembers it in `ended` for
-- max_ms after `now`, so a resume is told its session ended (the token's cap has passed by
-- then: it is at most admission + max_ms).
local function end_sessions(active, tokens, ended, places, now, max_ms)
  redis.call('ZREM', active, unpack(places))
  redis.call('HDEL', tokens, unpack(places))
  local z = {}
  for _, p in ipairs(places) do
    z[#z + 1] = now + max_ms; z[#z + 1] = p
  end
  redis.call('ZADD', ended, unpack(z))
end

-- No-shows (meta `arrival_seconds`; keys.rs `unarrived`, `arrivals`): the share of sessions
-- that never arrived is measured over the last arrival_window outcomes, a list of `1`
-- (arrived) and `0` (no-show) whose counts meta keeps (`arrivals_n`, `no_shows_n`), so
-- reading the share is one HMGET and recording an outcome is O(1).
local arrival_window = 200

local function record_arrival(meta, arrivals, arrived)
  local x = arrived and '1' or '0'
  redis.call('RPUSH', arrivals, x)
  redis.call('HINCRBY', meta, 'arrivals_n', 1)
  if not arrived then
    redis.call('HINCRBY', meta, 'no_shows_n', 1)
    redis.call('HINCRBY', meta, 'no_shows_total', 1)
  end
  if redis.call('LLEN', arrivals) > arrival_window then
    -- LRANGE and LTRIM rather than LPOP: the dispatcher's ACL user has those (managed-redis.md).
    local old = redis.call('LRANGE', arrivals, 0, 0)[1]
    redis.call('LTRIM', arrivals, 1, -1)
    redis.call('HINCRBY', meta, 'arrivals_n', -1)
    if old == '0' then redis.call('HINCRBY', meta, 'no_shows_n', -1) end
  end
end

-- The booking service checked, touched or consumed `place`'s active session: the first time,
-- it arrived (it leaves `unarrived` and counts in the window). Nothing for other queues.
local function arrive(meta, unarrived, arrivals, place)
  if redis.call('ZREM', unarrived, place) == 1 then record_arrival(meta, arrivals, true) end
end

-- Newly admitted sessions (`zadd`: the flat score/place list written to `active`) must
-- arrive within meta `arrival_seconds` of `now`, when it is set.
local function expect_arrival(meta, unarrived, zadd, now)
  local secs = tonumber(redis.call('HGET', meta, 'arrival_seconds'))
  if not secs then return end
  local due, z = fmt(now + secs * 1000), {}
  for i = 2, #zadd, 2 do
    z[#z + 1] = due; z[#z + 1] = zadd[i]
  end
  redis.call('ZADD', unarrived, unpack(z))
end

-- Sessions whose arrival deadline passed by `now` (at most `limit`): no-shows. An active one
-- ends at once (its slot frees, a resume hears `session_ended`); one that ended otherwise
-- before arriving (expired, or its browser left) counts as a no-show too. Returns how many.
local function end_no_shows(meta, active, tokens, ended, unarrived, arrivals, now, max_ms, limit)
  -- Deadlines set while the setting was on mean nothing once it is off: an operator who
  -- turns it off mid-sale (real buyers being ended) stops every pending deadline at once.
  if not redis.call('HGET', meta, 'arrival_seconds') then
    redis.call('DEL', unarrived)
    return 0
  end
  local due = redis.call('ZRANGEBYSCORE', unarrived, '-inf', now, 'LIMIT', 0, limit)
  if #due == 0 then return 0 end
  local live = {}
  for _, p in ipairs(due) do
    if redis.call('ZSCORE', active, p) then live[#live + 1] = p end
    record_arrival(meta, arrivals, false)
  end
  record_outcome(meta, due, record_no_show) -- record.lua
  if #live > 0 then end_sessions(active, tokens, ended, live, now, max_ms) end
  redis.call('ZREM', unarrived, unpack(due))
  return #due
end

-- nil while the queue is open, else {PLACE_QUEUE_CLOSED, close reason or false} (no reason:
-- the queue is unknown, or was closed before reasons were kept). `m`: meta {open, close_reason}
-- when the caller read them already with other fields (nil: read here).
local function closed_reply(meta, m)
  m = m or redis.call('HMGET', meta, 'open', 'close_reason')
  if m[1] == '1' then return nil end
  return {PLACE_QUEUE_CLOSED, m[2] or false}
end

-- The admission token bucket shared by the tick and passthrough joins (meta `bucket`,
-- `bucket_ms`; see keys.rs): the level at `now` after refilling at `rate` per second for the
-- time since `last_ms` (at most `max_elapsed` ms; time never runs backwards), capped at `cap`.
local function refill(level, last_ms, now, rate, max_elapsed, cap)
  local elapsed = math.min(math.max(now - last_ms, 0), max_elapsed)
  return math.min(level + rate * elapsed / 1000, cap)
end

-- Free capacity slots at `now` (meta `max_active`), or nil when the queue has no cap. Counts
-- sessions whose expiry is after `now` (those being minted included).
local function free_slots(meta, active, now)
  local cap = tonumber(redis.call('HGET', meta, 'max_active'))
  if not cap then return nil end
  return math.max(cap - redis.call('ZCOUNT', active, '(' .. fmt(now), '+inf'), 0)
end

-- >>> inventory (src/inventory.rs; meta `inventory_remaining`, `inventory_at_ms`,
-- `inventory_consumed`, `inventory_idle_ms`, `basket_size`, `sold_out_grace_seconds`,
-- `inventory_stale_after_seconds`: keys.rs)
-- A queue's inventory at `now`: nil without a report (the queue admits as before), else
-- {net, held, basket}: `net` is the report less a basket for each session consumed since it
-- (sold), `held` the baskets of the active sessions (what they may still buy).
local function inventory_of(meta, active, now)
  local m = redis.call('HMGET', meta, 'inventory_remaining', 'inventory_consumed', 'basket_size')
  local remaining = tonumber(m[1])
  if not remaining then return nil end
  local basket = tonumber(m[3]) or 1
  local net = remaining - (tonumber(m[2]) or 0) * basket
  local held = redis.call('ZCOUNT', active, '(' .. fmt(now), '+inf') * basket
  return {net, held, basket}
end

-- `free` (free_slots' answer, nil = no cap) lowered to the admissions the inventory allows:
-- admission goes on while anything is left beyond the active sessions' baskets, each
-- admission taking a basket (the last may find less than a full one), so
-- ceil((net - held) / basket), at least 0. The tick and passthrough joins call this where
-- they apply free_slots, in the same script that admits: no report can be overrun by races.
local function inventory_slots(meta, active, now, free)
  local inv = inventory_of(meta, active, now)
  if not inv then return free end
  local allowed = math.max(math.ceil((inv[1] - inv[2]) / inv[3]), 0)
  if free == nil or allowed < free then return allowed end
  return free
end

-- Whether the queue has been sold out (nothing left, no active session) since
-- `inventory_idle_ms` for `sold_out_grace_seconds` at `now`: close.lua's condition for the
-- tick's `sold_out` close.
local function sold_out_due(meta, now)
  local m = redis.call('HMGET', meta, 'inventory_idle_ms', 'sold_out_grace_seconds')
  local idle = tonumber(m[1])
  return idle ~= nil and now - idle >= (tonumber(m[2]) or 120) * 1000
end

-- The tick's word on the inventory: nil without a report, else the fields of
-- `InventoryState` for `state` (remaining never below 0; stale once the report is older than
-- `inventory_stale_after_seconds`, default 300); and whether the queue is sold out past its
-- grace. The grace starts (`inventory_idle_ms`) at the first tick that finds nothing left
-- and no active session, unless the queue is paused; anything else clears it, and so does a
-- report above 0 (inventory.lua): carts abandoned meanwhile, or new stock, resume admission.
local function inventory_tick(meta, active, now, paused)
  local inv = inventory_of(meta, active, now)
  if not inv then return nil, false end
  local m = redis.call('HMGET', meta, 'inventory_at_ms', 'inventory_stale_after_seconds',
    'inventory_idle_ms')
  local state = {
    remaining = math.max(inv[1], 0), held = inv[2], basket_size = inv[3],
    stale = now - (tonumber(m[1]) or 0) > (tonumber(m[2]) or 300) * 1000,
  }
  if inv[1] <= 0 and inv[2] == 0 and not paused then
    if not m[3] then redis.call('HSET', meta, 'inventory_idle_ms', fmt(now)) end
    return state, sold_out_due(meta, now)
  end
  if m[3] then redis.call('HDEL', meta, 'inventory_idle_ms') end
  return state, false
end
-- <<< inventory

-- The rates a waiting place's ETA is computed from: the measured rate (meta `rate`) and the
-- rate the bucket refills at (`bucket_rate`, set by each tick; `admit_per_second` before the
-- first tick). Both 0 while an adaptive queue's backend is silent: no ETA. `m`: meta {rate,
-- bucket_rate, admit_per_second} when the caller read them already (nil: read here).
local function eta_rates(meta, m)
  m = m or redis.call('HMGET', meta, 'rate', 'bucket_rate', 'admit_per_second')
  return m[1], m[2] or m[3]
end

-- Puts `order` (a list of {pre-queue place id, its pre-queue member}) at the tail of the line
-- of a scheduled sale, in that order: each gets a new place id `seq + 1 ..` (INCRBY, so later
-- joins come after every one of them), `drawn` maps its pre-queue id to the new id, it starts
-- away for `grace_ms` (its browser still holds a pre-queue stream; one gone for good is
-- dropped, never admitted) and leaves the pre-queue. Returns the first new id.
-- Browser binding: a place's key in `bound` moves from its pre-queue id to its new id, in the
-- same call, so the dispatcher, which mints by the new id, puts it in the token (`cnf.jkt`);
-- the gateway finds it from the ticket's pre-queue id through `drawn` (lua/place_key.lua).
local function place_drawn(seq, pre, waiting, away, drawn, bound, order, now, grace_ms)
  local n = #order
  local first = tonumber(redis.call('GET', seq) or '0') + 1
  if n == 0 then return first end
  first = redis.call('INCRBY', seq, n) - n + 1
  -- In chunks: Lua's unpack takes a few thousand values at most.
  for c = 1, n, 1000 do
    local zadd, map, gone, left, olds = {}, {}, {}, {}, {}
    for i = c, math.min(c + 999, n) do
      olds[#olds + 1] = order[i][1]
      local new = first + i - 1
      local gw = tonumber(member_gateway(order[i][2]))
      zadd[#zadd + 1] = new; zadd[#zadd + 1] = member_of(new, gw)
      map[#map + 1] = order[i][1]; map[#map + 1] = fmt(new)
      gone[#gone + 1] = now + grace_ms; gone[#gone + 1] = fmt(new)
      left[#left + 1] = order[i][2]
    end
    redis.call('ZADD', waiting, unpack(zadd))
    redis.call('HSET', drawn, unpack(map))
    if grace_ms > 0 then redis.call('ZADD', away, unpack(gone)) end
    redis.call('ZREM', pre, unpack(left))
    local keys, moved = redis.call('HMGET', bound, unpack(olds)), {}
    for j, key in ipairs(keys) do
      if key then moved[#moved + 1] = fmt(first + c + j - 2); moved[#moved + 1] = key end
    end
    if #moved > 0 then
      redis.call('HSET', bound, unpack(moved))
      redis.call('HDEL', bound, unpack(olds))
    end
  end
  return first
end

-- Takes `place` out of the line: from its lane's `waiting`, or its `parked` when it is away
-- (`waiting`, `parked`: the default lane's; lanes.lua finds its own). Returns the member it
-- had (its gateway is in it), or nil when the place was not in line.
local function take_from_line(place, waiting, parked)
  local w, p = place_sets(place, waiting, parked)
  local from = w
  local found = find_member(w, place)
  if not found then
    found = find_member(p, place)
    from = p
  end
  if found then
    redis.call('ZREM', from, found)
    lane_forget({place})
  end
  return found
end

-- Whether `place` (an id in line, not a pre-queue ticket's id) is still live: in the
-- pre-queue, in line (`waiting` or away in `parked`, or another lane's: lanes.lua), or admitted (`active`: a session
-- being minted, valid, or expired and not yet ended by the tick). Any other place is over
-- for good (left, dropped, closed, its session ended): lua/prune_bound.lua forgets its
-- browser key and lua/place_key.lua tells the gateway so; the two agree by using this.
local function place_live(waiting, parked, pre, active, place)
  return redis.call('ZSCORE', active, place) ~= false
    or redis.call('ZCOUNT', waiting, place, place) > 0
    or redis.call('ZCOUNT', parked, place, place) > 0
    or redis.call('ZCOUNT', pre, place, place) > 0
    or in_a_lane(place)
end

-- Browser binding (meta `bind` = `browser_key`; docs/security.md): whether a request that
-- names `place` (mapped through `drawn` already) is refused for its key. The place's own
-- scripts (leave.lua, resume.lua, status.lua) ask this in the same call as what they do, so
-- no data loss, restore or stale setting between the gateway's proof check and the script
-- lets a copied ticket act on the place.
-- `asked` is '1' for a browser's request naming a ticket ('' for the gateway's own calls,
-- never refused); `proven` the key its proof of possession was made with ('' = none);
-- `known` the place's key as the gateway knows it besides `bound` (the stream it holds the
-- place with; '' = none). Refused on a binding queue when the place's key (`bound`, else
-- `known`) is not `proven` (nothing proven included), or when the place has none and is live
-- (it cannot be proven). A place over for good without a key is not refused: its answer
-- (gone, its close reason, its session ended) is the same for anyone.
local function wrong_key(meta, bound, waiting, parked, pre, active, place, asked, proven, known)
  if asked ~= '1' or redis.call('HGET', meta, 'bind') ~= 'browser_key' then return false end
  local key = redis.call('HGET', bound, place)
  if not key and known ~= '' then key = known end
  if key then return key ~= proven end
  return place_live(waiting, parked, pre, active, place)
end
