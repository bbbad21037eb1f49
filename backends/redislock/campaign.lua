-- campaign.lua: make ARGV[1] (owner value followed by the leader's value) the
-- term of the election whose term key is KEYS[1], for ARGV[2] milliseconds, if
-- nobody leads; count the term in KEYS[2] and log it (token, value ARGV[3]) in
-- the stream KEYS[3], trimmed to about ARGV[4] entries and set to expire with
-- the term (ARGV[2] milliseconds after this, its latest entry). All three keys are
-- in one hash slot. The counter never expires: a later term's token must be above
-- every earlier one's, however long ago.
-- Returns {1, token} when elected and {0, pttl} when another leads. Idempotent
-- like acquire.lua: run again with the same ARGV[1] it returns the same term.
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
-- The term is set last: Redis does not undo a script's writes before a command
-- that fails (e.g. XADD refused by the user's ACL), and a term left set by a
-- failed campaign would keep every candidate out until its TTL.
local token = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', 'token', token, 'value', ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}
