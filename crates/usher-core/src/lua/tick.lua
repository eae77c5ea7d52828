-- One dispatcher tick for one queue: expire sessions, admit places from the head of the line
-- into the active set and the outbox (atomically), and snapshot the line.
-- The admission budget is admit_per_second x the time since this queue's previous tick (so late
-- ticks do not slow the rate), plus the fraction carried from earlier ticks. Unused budget is not
-- banked while the line is empty. Budget state lives in the queue's meta hash, so any dispatcher
-- replica can continue where another stopped.
-- KEYS: meta, waiting, active, tokens, outbox, gws   (one hash tag)
-- ARGV: now ms, elapsed ms to assume on the first tick, longest elapsed ms to count,
--       exact places, largest interpolation error (fraction, e.g. 0.01), measured rate to
--       store ('' = keep), prune limit, coarse sample step (fraction, e.g. 0.1)
-- Returns {0} when the queue is closed, else
-- {1, admitted, waiting, active, runs, samples, gateways, outbox length, admit_per_second}
--   runs    = flat {first place, count, ...}: the first `exact` places, run-length encoded
--   samples = flat {place, position, ...}: positions beyond the exact window, each step <= 1%
local m = redis.call('HMGET', KEYS[1], 'open', 'admit_per_second', 'session_ttl_seconds', 'carry', 'last_tick_ms')
if m[1] ~= '1' then return {0} end
local now = tonumber(ARGV[1])
local aps = tonumber(m[2]) or 0
local ttl_ms = (tonumber(m[3]) or 600) * 1000
local carry = tonumber(m[4]) or 0
local elapsed = tonumber(ARGV[2])
if m[5] then elapsed = math.min(math.max(now - tonumber(m[5]), 0), tonumber(ARGV[3])) end
local budget = carry + aps * elapsed / 1000
local limit = tonumber(ARGV[7])

local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, limit)
if #expired > 0 then
  redis.call('ZREM', KEYS[3], unpack(expired))
  redis.call('HDEL', KEYS[4], unpack(expired))
end

local n = math.floor(budget)
local admitted = 0
if n > 0 then
  local exp = string.format('%d', now + ttl_ms)
  local popped = redis.call('ZPOPMIN', KEYS[2], n)
  for i = 1, #popped, 2 do
    local member, place = popped[i], popped[i + 1]
    redis.call('ZADD', KEYS[3], exp, place)
    redis.call('HSET', KEYS[4], place, ARGV[1] .. '|' .. exp .. '|')
    redis.call('RPUSH', KEYS[5], place .. '|' .. member .. '|' .. ARGV[1] .. '|' .. exp)
    admitted = admitted + 1
  end
  if admitted > 0 then redis.call('HINCRBY', KEYS[1], 'admitted_total', admitted) end
end

local w = redis.call('ZCARD', KEYS[2])
if w == 0 then carry = 0 else carry = budget - admitted end
redis.call('HSET', KEYS[1], 'carry', tostring(carry), 'last_tick_ms', ARGV[1])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'rate', ARGV[6]) end
local active = redis.call('ZCOUNT', KEYS[3], ARGV[1], '+inf')

local runs = {}
local exact = tonumber(ARGV[4])
local head = redis.call('ZRANGE', KEYS[2], 0, exact - 1, 'WITHSCORES')
local start, count, last = nil, 0, nil
for i = 2, #head, 2 do
  local p = tonumber(head[i])
  if last ~= nil and p == last + 1 then
    count = count + 1
  else
    if start ~= nil then runs[#runs + 1] = start; runs[#runs + 1] = count end
    start, count = p, 1
  end
  last = p
end
if start ~= nil then runs[#runs + 1] = start; runs[#runs + 1] = count end

-- Samples beyond the exact window. Between two samples (r1, p1) and (r2, p2), interpolation is
-- off by at most the number of holes (places that left) in between, (p2 - p1) - (r2 - r1). Start
-- from coarse geometric samples and bisect only intervals with more holes than `step` x r1 allows,
-- so a line with few leavers costs a few dozen lookups, and the worst case about log(w/exact)/step.
local samples = {}
if w > exact then
  local step = tonumber(ARGV[5])
  local coarse = tonumber(ARGV[8])
  local function place_at(r)
    local at = redis.call('ZRANGE', KEYS[2], r - 1, r - 1, 'WITHSCORES')
    return tonumber(at[2])
  end
  local function emit(p, r)
    samples[#samples + 1] = p; samples[#samples + 1] = r
  end
  local function refine(r1, p1, r2, p2)
    if r2 - r1 <= 1 then return end
    if (p2 - p1) - (r2 - r1) <= math.floor(r1 * step) then return end
    local rm = math.floor((r1 + r2) / 2)
    local pm = place_at(rm)
    refine(r1, p1, rm, pm)
    emit(pm, rm)
    refine(rm, pm, r2, p2)
  end
  local r = exact
  local pr = place_at(r)
  emit(pr, r)
  while r < w do
    local r2 = math.min(w, r + math.max(1, math.floor(r * coarse)))
    local p2 = place_at(r2)
    refine(r, pr, r2, p2)
    emit(p2, r2)
    r, pr = r2, p2
  end
end

redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. ARGV[1])
local gws = redis.call('ZRANGEBYSCORE', KEYS[6], ARGV[1], '+inf')
local outbox = redis.call('LLEN', KEYS[5])
return {1, admitted, w, active, runs, samples, gws, outbox, m[2]}
