-- acquire.lua: take the lock KEYS[1] for the owner value ARGV[1] for ARGV[2]
-- milliseconds if no one holds it, and count the grant in the fencing counter
-- KEYS[2] (same hash slot as KEYS[1]).
-- Returns {1, token} when granted and {0, pttl} when held (pttl -1: the holder
-- set no expiry). Nothing is written when the key is held, and the lock is set
-- only after the counter was incremented, so an error leaves no lock behind.
-- Idempotent: run again with the same owner value (a client retrying after a
-- lost reply) it returns the grant it made, unchanged.
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}
