-- >>> record (the fairness report's record: crate::record, keys.rs `record`; docs/fairness-report.md)
-- A queue with meta `record` = '1' keeps, for each place, one fixed-width entry of
-- record_width bytes in the string `record`, at offset (place - record_seq0 - 1) * width:
-- place ids are handed out one by one from `seq`, so the record is dense, one SETRANGE
-- writes a field, and its memory is width bytes a place (BENCHMARKS.md). The layout (all
-- integers big-endian; times are ms since meta `record_ms0`) is crate::record's:
--   0 kind (1 joined the line, 2 joined a pre-queue, 3 pre-queue place put in line by the
--     draw: superseded by its new entry, 4 drawn into the line)   1 lane slot
--   2 leave reason (record_left ...)   3 session outcome (record_booked ...)
--   4 went away at least once   5 proof-of-work difficulty   6 ETA shown at join (s, u16;
--   65535: none)   8 join (u32)   12 admission + 1 (u32; 0: not admitted)   16 admission
--   ordinal (u32, from meta `record_admitted`)   20 leave + 1 (u32)   24 client network hash
--   (u32)   28 origin: the pre-queue entry index of a drawn place (u32)   32 proof-of-work
--   issue-to-join time (100 ms units, u16; 65535: none)   34 admitted in the join (passthrough)
-- A queue that does not record pays one HMGET where a script records (the join reads
-- `record` with fields it reads anyway where it can), and writes nothing.
-- Lower case: upper-case names are store/reply.rs's statuses. These are crate::record's
-- (RECORD_WIDTH, Kind, LeaveReason and Outcome decode the same numbers; a test compares).
local record_width = 36
-- Most places recorded (360 MB at most); later places are counted in meta `record_overflow`.
local record_max_places = 10000000
local record_left, record_away_expired, record_gateway_gone, record_unbound = 1, 2, 3, 4
local record_door = 5
local record_booked, record_released, record_expired, record_no_show = 1, 2, 3, 4
-- Scripts that take no lane keys set this to the index of `record` in their KEYS.
local record_key_at = nil

local function rfmt(n) return string.format('%d', n) end

local function record_key()
  if record_key_at then return KEYS[record_key_at] end
  if lane_keys_at then return KEYS[lane_keys_at + 15] end
  return nil
end

-- The record's origin {key, seq0, ms0} when `meta` records and its record exists, else nil.
-- Only the join that starts a record creates its key: once the retention has deleted it (meta
-- still names its origin), a late expiry, no-show or session end writes nothing, rather than
-- SETRANGE a zero-filled key, up to its place's offset, with no TTL.
local function record_of(meta)
  local m = redis.call('HMGET', meta, 'record', 'record_seq0', 'record_ms0')
  if m[1] ~= '1' or not m[2] then return nil end
  local key = record_key()
  if not key or redis.call('EXISTS', key) == 0 then return nil end
  return {key, tonumber(m[2]), tonumber(m[3])}
end

-- The byte offset of `place`'s entry, or nil when it is before the record or past its cap.
local function record_at(r, place)
  local i = tonumber(place) - r[2] - 1
  if i < 0 or i >= record_max_places then return nil end
  return i * record_width
end

local function u16(n) return struct.pack('>I2', math.max(math.min(n, 65535), 0)) end
local function u32(n) return struct.pack('>I4', math.max(math.min(n, 4294967295), 0)) end

-- Since the record's origin, in ms.
local function record_ms(r, now) return math.max(now - r[3], 0) end

-- Writes `bytes` at `field` of each of `places`' entries.
local function record_put(r, places, field, bytes)
  for _, p in ipairs(places) do
    local at = record_at(r, p)
    if at then redis.call('SETRANGE', r[1], at + field, bytes) end
  end
end

-- New places first .. first + #notes - 1 joined at `now` (kind 1 or 2) in lane `lane`; each
-- note {eta seconds or nil, network hash or nil, pow difficulty or nil, issue-to-join ms or nil,
-- admitted now}; the ones admitted now are admitted at `admitted_at` (nil: `now`; a join in a
-- tick's lead is admitted at that tick's admission time, after it joined). The first place recorded fixes the record's origin (meta `record_seq0`,
-- `record_ms0`). A record covers one opening: one that expired (retention) starts afresh, and
-- so does one whose queue closed or stopped recording (`record_expiring`) when the queue
-- takes places again: the old record is deleted, not kept going, so a weekly queue's report
-- is of its latest sale and times (u32 ms) restart from 0 (they saturate 49.7 days after the
-- record's start: later events read as happening at that limit).
local function record_join(meta, first, now, kind, lane, notes, admitted_at)
  local m = redis.call('HMGET', meta, 'record', 'record_seq0', 'record_ms0', 'record_expiring')
  if m[1] ~= '1' or #notes == 0 then return end
  local key = record_key()
  if not key then return end
  if m[4] then redis.call('DEL', key) end
  if not m[2] or m[4] or redis.call('EXISTS', key) == 0 then
    m[2], m[3] = rfmt(first - 1), rfmt(now)
    redis.call('HSET', meta, 'record_seq0', m[2], 'record_ms0', m[3], 'record_admitted', 0)
    redis.call('HDEL', meta, 'record_overflow', 'record_expiring')
  end
  local r = {key, tonumber(m[2]), tonumber(m[3])}
  local at = record_at(r, first)
  if not at then
    redis.call('HINCRBY', meta, 'record_overflow', #notes)
    return
  end
  local t = record_ms(r, now)
  -- What every entry of the batch shares, packed once: the join time, and for a waiting
  -- place no admission, ordinal or leave yet.
  local joined, waiting = u32(t), string.rep('\0', 12)
  local out = {}
  for _, n in ipairs(notes) do
    local middle = waiting
    if n[5] then
      middle = u32(record_ms(r, admitted_at or now) + 1)
        .. u32(redis.call('HINCRBY', meta, 'record_admitted', 1)) .. u32(0)
    end
    local solve = 65535
    if n[4] then solve = math.floor(n[4] / 100) end
    out[#out + 1] = string.char(kind, lane, 0, 0, 0, n[3] or 0) .. u16(n[1] or 65535)
      .. joined .. middle .. u32(n[2] or 0) .. '\0\0\0\0' .. u16(solve)
      .. string.char(n[5] and 1 or 0, 0)
  end
  redis.call('SETRANGE', key, at, table.concat(out))
end

-- `places` (in admission order) were admitted at `now`: their admission time and ordinal.
local function record_admit(meta, places, now)
  if #places == 0 then return end
  local r = record_of(meta)
  if not r then return end
  local t = u32(record_ms(r, now) + 1)
  local last = redis.call('HINCRBY', meta, 'record_admitted', #places)
  for i, p in ipairs(places) do
    local at = record_at(r, p)
    if at then redis.call('SETRANGE', r[1], at + 12, t .. u32(last - #places + i)) end
  end
end

-- `places` left the line at `now` without admission, for `reason` (record_left ...).
local function record_leave(meta, places, now, reason)
  if #places == 0 then return end
  local r = record_of(meta)
  if not r then return end
  record_put(r, places, 2, string.char(reason))
  record_put(r, places, 20, u32(record_ms(r, now) + 1))
end

-- `places` went away (their browsers' connections dropped while they waited).
local function record_away(meta, places)
  if #places == 0 then return end
  local r = record_of(meta)
  if r then record_put(r, places, 4, string.char(1)) end
end

-- The sessions of `places` ended with `outcome` (record_booked ...).
local function record_outcome(meta, places, outcome)
  if #places == 0 then return end
  local r = record_of(meta)
  if r then record_put(r, places, 3, string.char(outcome)) end
end

-- The draw put `order` (a list of {pre-queue place id, member}) in line as first, first + 1,
-- ...: each new entry copies its pre-queue entry's join (and proof of work, network) with
-- kind 4 and its origin, and the pre-queue entry becomes kind 3.
local function record_drawn(meta, order, first)
  if #order == 0 then return end
  local r = record_of(meta)
  if not r then return end
  for i, o in ipairs(order) do
    local from, to = record_at(r, o[1]), record_at(r, first + i - 1)
    if from and to then
      local e = redis.call('GETRANGE', r[1], from, from + record_width - 1)
      if #e == record_width and string.byte(e, 1) == 2 then
        redis.call('SETRANGE', r[1], from, string.char(3))
        redis.call('SETRANGE', r[1], to, string.char(4) .. string.sub(e, 2, 28)
          .. u32(from / record_width) .. string.sub(e, 33))
      end
    end
  end
end

-- The queue closed: the record is kept `record_retention_seconds` more (default 7 days),
-- counted from when it first ended (a close, or `record` turned off): a second end before
-- the next recorded join does not push its deletion back.
local function record_closed(meta)
  local m = redis.call('HMGET', meta, 'record_seq0', 'record_retention_seconds', 'record_expiring')
  local key = record_key()
  if not m[1] or m[3] or not key then return end
  redis.call('PEXPIRE', key, (tonumber(m[2]) or 604800) * 1000)
  redis.call('HSET', meta, 'record_expiring', '1')
end

-- Recording was turned off (put_settings.lua, `record` no longer '1'): the record ends as at a
-- close, kept `record_retention_seconds` more unless its queue closed already.
local function record_stopped(meta)
  if redis.call('HGET', meta, 'record') ~= '1' then record_closed(meta) end
end
-- <<< record
