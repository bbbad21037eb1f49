-- describe.lua: read, in one step, everything this backend keeps for the name
-- whose keys are KEYS (all in the name's hash slot): KEYS[1] the lock, KEYS[2] its
-- fencing counter, KEYS[3] and KEYS[4] the fair mode's queue and deadlines, KEYS[5]
-- to KEYS[7] the semaphore's or read-write lock's holders, settings and fencing
-- counter, KEYS[8] and KEYS[9] the election's term and term counter. Writes
-- nothing.
-- Returns {server time ms, the lock key's type, the lock's value ('' if none), its
-- PTTL, the fencing counter ('' if none), the queue (waiter, arrival µs, ...), the
-- deadlines (waiter, ms, ...), the live holders (owner, expiry ms, ...), the
-- settings' kind, limit and writer ('' for each missing), the term ('' if none),
-- its PTTL, the term counter ('' if none)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function str(v)
  if v then
    return v
  end
  return ''
end
local kind = redis.call('TYPE', KEYS[1]).ok
local value, pttl = '', -2
if kind == 'string' then
  value = redis.call('GET', KEYS[1])
  pttl = redis.call('PTTL', KEYS[1])
end
local settings = redis.call('HMGET', KEYS[6], 'kind', 'limit', 'writer')
local term = redis.call('GET', KEYS[8])
local tpttl = -2
if term then
  tpttl = redis.call('PTTL', KEYS[8])
end
return {now, kind, value, pttl, str(redis.call('GET', KEYS[2])),
  redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'),
  redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES'),
  redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf', 'WITHSCORES'),
  str(settings[1]), str(settings[2]), str(settings[3]),
  str(term), tpttl, str(redis.call('GET', KEYS[9]))}
