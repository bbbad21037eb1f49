-- campaign.lua (after lib.lua): make ARGV[1] (owner value followed by the leader's value) the
-- term of the election whose term key is KEYS[1], for ARGV[2] milliseconds, if
-- nobody leads and no candidate comes first; count the term in KEYS[2] and log it
-- (token, value ARGV[3]) in the stream KEYS[3], trimmed to about ARGV[4] entries
-- and set to expire with the term (ARGV[2] milliseconds after this, its latest
-- entry). KEYS[4] and KEYS[5] are the waiting candidates (sorted sets: candidate ->
-- arrival in µs, and candidate -> the server time in ms after which it counts as
-- gone); ARGV[5] is the caller's name among them (its owner value), ARGV[6] 'wait'
-- for a candidate that waits, ARGV[7] the barging window in µs. All keys are in
-- one hash slot. The counter never expires: a later term's token must be above
-- every earlier one's, however long ago.
-- A free term goes to the caller unless a candidate that has waited ARGV[7] µs or
-- longer comes before it (as fair.lua's default mode does for the mutex). A waiting
-- candidate that is not elected joins the candidates (or renews its place there)
-- for ARGV[2] ms; its election takes it out.
-- Returns {1, token} when elected and {0, ms} when another leads (its PTTL) or
-- comes first (until that candidate's place expires). Idempotent like acquire.lua:
-- run again with the same ARGV[1] it returns the same term.
local term = redis.call('GET', KEYS[1])
if term == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
local queued = redis.call('EXISTS', KEYS[4]) == 1
if term and ARGV[6] ~= 'wait' then
  return {0, redis.call('PTTL', KEYS[1])}
end
local wait
if term then
  wait = redis.call('PTTL', KEYS[1])
end
if queued or (term and ARGV[6] == 'wait') then
  local t, now = clock()
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  dropGone(KEYS[4], KEYS[5], now)
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if not term and first[1] and first[1] ~= ARGV[5] and tonumber(first[2]) + tonumber(ARGV[7]) <= us then
    wait = math.max(tonumber(redis.call('ZSCORE', KEYS[5], first[1]) or now + 1) - now, 1)
  end
  if wait and ARGV[6] == 'wait' then
    joinQueue(KEYS[4], KEYS[5], ARGV[5], us, now, tonumber(ARGV[2]))
  end
end
if wait then
  return {0, wait}
end
if queued then
  leaveQueue(KEYS[4], KEYS[5], ARGV[5])
end
-- The term is set last: Redis does not undo a script's writes before a command
-- that fails (e.g. XADD refused by the user's ACL), and a term left set by a
-- failed campaign would keep every candidate out until its TTL.
local token = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', 'token', token, 'value', ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}
