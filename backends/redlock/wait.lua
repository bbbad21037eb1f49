-- wait.lua: one master's vote for a waiting Acquire (queue.go). As vote.lua — takes
-- the lock KEYS[1] for the owner value ARGV[1] for ARGV[2] milliseconds if no one
-- holds it (or it already holds ARGV[1]) and returns 1, else returns {holder's
-- value, its remaining milliseconds} — and it also keeps the caller's place in the
-- key's queue of waiters: KEYS[2] (a sorted set: waiter name -> arrival, a score the
-- waiter chose once, the same on every master) and KEYS[3] (waiter name -> the
-- server time in ms after which the waiter counts as gone). ARGV[3] is the waiter's
-- name, ARGV[4] its arrival, ARGV[5] its place's TTL in ms. A refused caller is put
-- in the queue, or its place renewed; a granted one leaves it. The queue only
-- decides whom a release wakes (release.lua): a free lock goes to whoever asks.
local v = redis.call('GET', KEYS[1])
if not v or v == ARGV[1] then
  if not v then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('ZREM', KEYS[2], ARGV[3])
    redis.call('ZREM', KEYS[3], ARGV[3])
  end
  return 1
end
if redis.replicate_commands then
  redis.replicate_commands() -- Redis before 5: writes after TIME need it
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wttl = tonumber(ARGV[5])
redis.call('ZADD', KEYS[2], 'NX', ARGV[4], ARGV[3])
redis.call('ZADD', KEYS[3], now + wttl, ARGV[3])
for k = 2, 3 do
  if redis.call('PTTL', KEYS[k]) < wttl then
    redis.call('PEXPIRE', KEYS[k], wttl)
  end
end
return {v, redis.call('PTTL', KEYS[1])}
