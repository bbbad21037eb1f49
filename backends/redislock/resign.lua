-- resign.lua (after lib.lua): end the term KEYS[1] of an election if it still holds ARGV[1] (owner
-- value followed by the leader's value), and take the candidate ARGV[3] (the owner
-- value) out of the waiting candidates KEYS[3] and KEYS[4] (see campaign.lua: a wait
-- that ended). When the term is then free and candidates wait, tell the first of
-- them on its own channel (ARGV[2] .. '#' .. candidate), so that a resignation wakes
-- one candidate however many wait; a resignation also publishes '' on ARGV[2] (for
-- candidates that look at every release). Returns 1 if it ended the term, else 0.
-- Idempotent as release.lua is: the term's end leaves a tombstone, KEYS[2], for as
-- long as the term had left, and the same resignation run again returns 1 again.
if redis.replicate_commands then
  redis.replicate_commands() -- Redis before 5: before the first write, for TIME below
end
local held = redis.call('GET', KEYS[1]) == ARGV[1]
local left = leaveQueue(KEYS[3], KEYS[4], ARGV[3])
if held then
  endLease(KEYS[1], KEYS[2])
  redis.call('PUBLISH', ARGV[2], '')
end
if (held or left) and redis.call('EXISTS', KEYS[1]) == 0 then
  local t, now = clock()
  dropGone(KEYS[3], KEYS[4], now)
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if first then
    redis.call('PUBLISH', ARGV[2] .. '#' .. first, '')
  end
end
if held then
  return 1
end
return redis.call('EXISTS', KEYS[2])
