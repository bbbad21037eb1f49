-- wait.lua (after lib.lua): one master's vote for a waiting Acquire (queue.go). As vote.lua — takes
-- the lock KEYS[1] for the owner value ARGV[1] for ARGV[2] milliseconds if no one
-- holds it (or it already holds ARGV[1]) and returns 1, else returns {holder's
-- value, its remaining milliseconds} — and it also keeps the caller's place in the
-- key's queue of waiters: KEYS[2] (a sorted set: waiter name -> arrival, a score the
-- waiter chose once, the same on every master) and KEYS[3] (waiter name -> the
-- server time in ms after which the waiter counts as gone); KEYS[4] names the
-- waiter the last release woke (release.lua), kept as long as the caller's place
-- when it is the caller, and deleted when the caller is granted. ARGV[3] is the waiter's
-- name, ARGV[4] its arrival, ARGV[5] its place's TTL in ms. A refused caller is put
-- in the queue, or its place renewed; a granted one leaves it. The queue
-- decides whom a release wakes (release.lua): a free lock goes to whoever asks,
-- except that a lock reserved for the caller (a release woke it after it had been
-- passed over: '\255woken ' .. ARGV[3]) counts as free for it alone.
local v = redis.call('GET', KEYS[1])
local noted = redis.call('GET', KEYS[4]) == ARGV[3]
if not v or v == ARGV[1] or v == '\255woken ' .. ARGV[3] then
  if v ~= ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    leaveQueue(KEYS[2], KEYS[3], ARGV[3])
  end
  if noted then
    redis.call('DEL', KEYS[4])
  end
  return 1
end
local t, now = clock()
joinQueue(KEYS[2], KEYS[3], ARGV[3], ARGV[4], now, tonumber(ARGV[5]))
if noted then
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
end
return {v, redis.call('PTTL', KEYS[1])}
