-- acquire_all.lua: take the locks KEYS[1..n] for the owner value ARGV[1] for
-- ARGV[2] milliseconds if none of them is held, and count each grant in its
-- fencing counter KEYS[n+1..2n] (all in one hash slot). All or nothing.
-- Returns {1, token1, ..., tokenN} when granted and {0, pttl} of a held lock
-- otherwise (nothing written then). Idempotent: run again with the same owner
-- value it returns the grant it made.
local n = #KEYS / 2
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if redis.call('TYPE', KEYS[i]).ok ~= 'string' or redis.call('GET', KEYS[i]) ~= ARGV[1] then
      return {0, redis.call('PTTL', KEYS[i])}
    end
  end
end
local res = {1}
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    res[i + 1] = tonumber(redis.call('GET', KEYS[n + i]))
  else
    res[i + 1] = redis.call('INCR', KEYS[n + i])
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
end
return res
