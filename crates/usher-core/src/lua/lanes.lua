-- Lanes with guaranteed shares (crate::lanes; keys.rs), prepended to every script before
-- prelude.lua (what each script uses of it: store/script_text.rs).
--
-- Meta `lanes` lists a queue's lanes as '<name>:<share>:<slot>,...' (absent: no lanes). Slot
-- 0 is the default lane: the queue's own `waiting` and `parked`, so a script that does not
-- care about lanes sees the default lane's line exactly as before lanes existed. Slots 1..7
-- are the other lanes' zsets, and `lane_of` maps each place in line outside the default lane
-- to its slot. A lane-aware script receives `lane_of` and the slots' zsets as 15 consecutive
-- KEYS (QueueKeys::lane_keys) and says where they start by setting `lane_keys_at` first;
-- in other scripts it stays nil and every place is in the default lane.
local lane_keys_at = nil

-- The slot of `place`'s lane (0: the default lane, or a script without lane keys).
local function lane_slot(place)
  if not lane_keys_at then return 0 end
  return tonumber(redis.call('HGET', KEYS[lane_keys_at], place)) or 0
end

-- The waiting and parked zsets of lane slot `slot` (`waiting`, `parked`: the default lane's).
local function lane_sets(slot, waiting, parked)
  if slot == 0 or not lane_keys_at then return waiting, parked end
  return KEYS[lane_keys_at + 2 * slot - 1], KEYS[lane_keys_at + 2 * slot]
end

-- The waiting and parked zsets of the lane `place` is in.
local function place_sets(place, waiting, parked)
  return lane_sets(lane_slot(place), waiting, parked)
end

-- `places` left the line (admitted, dropped, left): they are in no lane any more.
local function lane_forget(places)
  if lane_keys_at and #places > 0 then redis.call('HDEL', KEYS[lane_keys_at], unpack(places)) end
end

-- Whether `place` is in line in a lane other than the default one.
local function in_a_lane(place)
  return lane_keys_at ~= nil and redis.call('HGET', KEYS[lane_keys_at], place) ~= false
end

-- Every zset of the lanes other than the default one (for scripts that clear or count the line).
local function extra_lane_sets()
  local out = {}
  if not lane_keys_at then return out end
  for i = lane_keys_at + 1, lane_keys_at + 14 do out[#out + 1] = KEYS[i] end
  return out
end

-- The queue's lanes: a list of {name, share, slot} in the order configured ({} without lanes).
-- `spec`: meta `lanes` when the caller read it already with other fields (false: the field is
-- absent), saving a call; nil reads it here.
local function lanes_of(meta, spec)
  local out = {}
  if spec == nil then spec = redis.call('HGET', meta, 'lanes') end
  if not spec then return out end
  for name, share, slot in string.gmatch(spec, '([%w_-]+):(%d+):(%d+)') do
    out[#out + 1] = {name = name, share = tonumber(share), slot = tonumber(slot)}
  end
  return out
end

-- The slot of the lane named `name` ('' = the default lane, slot 0), or nil when the queue has
-- no such lane.
local function lane_slot_named(lanes, name)
  if name == '' then return 0 end
  for _, l in ipairs(lanes) do
    if l.name == name then return l.slot end
  end
  return nil
end

-- The tick's split of `n` admissions between the lanes (tick.lua): a list of {slot, w, p,
-- quota} in the order to admit, each lane with somebody present once with its quota, then
-- once more with quota nil ("whatever is left of n"), so a share a lane cannot use (its
-- head is away, dropped, or it empties) flows to the others: admission is work-conserving.
-- Quotas follow a credit per lane (meta `lane_credit`, '<slot>:<credit>,...'): each call adds
-- n x share / (sum of the shares of lanes with somebody present) to each such lane's credit,
-- and a lane's quota is its credit's whole part (the leftover units go to the largest
-- fractions), so shares hold over many ticks even when each admits one place.
-- `lane_settle` takes what each lane admitted off its credit.
local function lane_plan(meta, n, waiting, parked)
  local lanes = lanes_of(meta)
  if #lanes == 0 then return {{slot = 0, w = waiting, p = parked, quota = nil}}, lanes end
  local credit = {}
  for slot, c in string.gmatch(redis.call('HGET', meta, 'lane_credit') or '', '(%d+):([-%d.e]+)') do
    credit[tonumber(slot)] = tonumber(c)
  end
  local busy, sum = {}, 0
  for _, l in ipairs(lanes) do
    l.w, l.p = lane_sets(l.slot, waiting, parked)
    l.credit = 0
    if redis.call('ZCARD', l.w) > 0 then
      busy[#busy + 1] = l
      sum = sum + l.share
    end
  end
  local plan = {}
  for _, l in ipairs(busy) do l.credit = credit[l.slot] or 0 end
  if #busy == 0 or n <= 0 then return plan, lanes end
  local given = 0
  for _, l in ipairs(busy) do
    l.credit = l.credit + n * l.share / sum
    l.quota = math.max(math.floor(l.credit), 0)
    given = given + l.quota
  end
  -- The most owed first: too many units (credits carried over) come off the least owed,
  -- too few go to the largest fractions.
  table.sort(busy, function(a, b) return a.credit - a.quota > b.credit - b.quota end)
  local i = #busy
  while given > n and i >= 1 do
    if busy[i].quota > 0 then busy[i].quota = busy[i].quota - 1; given = given - 1 else i = i - 1 end
  end
  i = 1
  while given < n do
    busy[i].quota = busy[i].quota + 1; given = given + 1
    i = i % #busy + 1
  end
  for _, l in ipairs(busy) do plan[#plan + 1] = {slot = l.slot, w = l.w, p = l.p, quota = l.quota, lane = l} end
  for _, l in ipairs(busy) do plan[#plan + 1] = {slot = l.slot, w = l.w, p = l.p, quota = nil, lane = l} end
  return plan, lanes
end

-- After the admissions of `lane_plan`'s plan (each entry's `admitted` set): each lane's credit
-- less what it admitted, kept within [-1, 1] (a lane that could not use its share does not
-- hoard it, one that used another's is not punished for it later), and 0 for a lane nobody
-- was present in.
local function lane_settle(meta, plan, lanes)
  if #lanes == 0 then return end
  for _, e in ipairs(plan) do
    if e.lane then e.lane.admitted = (e.lane.admitted or 0) + (e.admitted or 0) end
  end
  local out = {}
  for _, l in ipairs(lanes) do
    local c = (l.credit or 0) - (l.admitted or 0)
    c = math.max(-1, math.min(1, c))
    out[#out + 1] = l.slot .. ':' .. string.format('%.6f', c)
  end
  redis.call('HSET', meta, 'lane_credit', table.concat(out, ','))
end

-- The snapshot of one lane's line (tick.lua): `waiting` and `parked` are its zsets, `present`
-- and `parked_n` their sizes. Returns runs and samples as tick.lua describes them.
-- Moved here from tick.lua (unchanged but for its inputs) so every lane gets one.
local function line_snapshot(waiting, parked, present, parked_n, exact, step, coarse)
  local runs, samples = {}, {}
  local w = present + parked_n
  -- The exact window: the first `exact` places of the line, present or away (the heads of
  -- `waiting` and `parked`, merged by place id).
  local ids = {}
  local head
  if parked_n > 0 then
    local ph = redis.call('ZRANGE', parked, 0, exact - 1, 'WITHSCORES')
    -- No present place after the exact-th away one is in the window: read up to it only
    -- (behind a wall of away places, nothing).
    local bound = '+inf'
    if #ph >= 2 * exact then bound = ph[#ph] end
    head = redis.call('ZRANGEBYSCORE', waiting, '-inf', bound, 'WITHSCORES', 'LIMIT', 0, exact)
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
    head = redis.call('ZRANGE', waiting, 0, exact - 1, 'WITHSCORES')
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
    local function ahead_parked(s)
      if parked_n == 0 then return 0 end
      return redis.call('ZCOUNT', parked, '-inf', '(' .. string.format('%d', s))
    end
    -- The place id and position of the present place of rank r.
    local function at(r)
      local x = redis.call('ZRANGE', waiting, r - 1, r - 1, 'WITHSCORES')
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
    if parked_n > 0 then r = redis.call('ZCOUNT', waiting, '-inf', string.format('%d', s)) end
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
      local t = redis.call('ZRANGE', parked, -1, -1, 'WITHSCORES')
      emit(tonumber(t[2]), w)
    end
  end
  return runs, samples
end

-- The name of the lane in slot `slot`, or false for the default lane (slot 0: a reader
-- without lanes sees the place's reply as before; the default lane's name is in the settings).
local function lane_name(meta, slot)
  if slot == 0 then return false end
  for _, l in ipairs(lanes_of(meta)) do
    if l.slot == slot then return l.name end
  end
  return false
end

-- Whether nobody is in line in any lane other than the default one.
local function extra_lanes_empty()
  for _, key in ipairs(extra_lane_sets()) do
    if redis.call('ZCARD', key) > 0 then return false end
  end
  return true
end

-- A lane's part of the queue's rate, for the ETA a join, resume or status answers with: its
-- share ÷ the shares of the lanes with somebody present, itself included (as the tick splits
-- admissions, and as the dispatcher's `state` tells the gateways: crate::lanes::lane_rate).
-- 1 without lanes. `waiting`, `parked`: the default lane's zsets. `lanes`: lanes_of(meta) when
-- the caller has it already (nil: read here).
local function lane_part(meta, slot, waiting, parked, lanes)
  lanes = lanes or lanes_of(meta)
  if #lanes == 0 then return 1 end
  local mine, sum = 0, 0
  for _, l in ipairs(lanes) do
    if l.slot == slot then
      mine = l.share
      sum = sum + l.share
    elseif redis.call('ZCARD', (lane_sets(l.slot, waiting, parked))) > 0 then
      sum = sum + l.share
    end
  end
  if sum == 0 then return 1 end
  return mine / sum
end

-- `rate` (a meta field's text, or false) scaled by `part`.
local function lane_scaled(rate, part)
  if not rate or part == 1 then return rate end
  local r = tonumber(rate)
  if not r then return rate end
  return tostring(r * part)
end
