-- vote.lua: one master's vote on a Redlock acquire. Takes the lock KEYS[1] for the
-- owner value ARGV[1] for ARGV[2] milliseconds if no one holds it, and returns 1;
-- returns 1 too when it already holds ARGV[1] (a request retried after a lost
-- reply). Otherwise returns {holder's value, its remaining milliseconds} (-1: no
-- expiry), so that the contenders of a split vote can tell who holds what.
-- Nothing is written when the key is held. A key that is not a string (another
-- program's) makes GET fail: the master's vote is then an error.
local v = redis.call('GET', KEYS[1])
if v then
  if v == ARGV[1] then
    return 1
  end
  return {v, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
