-- The guarded write of redisfence: the fencing rule and the write in one step.
-- KEYS[1]: the resource's fence, a hash {token, writer}; KEYS[2..]: the keys written.
-- ARGV[1]: the token, 20 decimal digits (zero-padded: equal lengths compare as numbers);
-- ARGV[2]: the writer; ARGV[3]: the write, "check" (none), "set", "hset" or "del";
-- ARGV[4..]: its arguments: set: value, PX milliseconds ("0": no expiry);
-- hset: field, value, ...; del: none (it deletes KEYS[2..]).
-- Returns {1} when the write landed, {0, reason, fence} when the rule refused it.
local function cmp(a, b)
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      if x < y then return -1 end
      return 1
    end
  end
  return 0
end

local cur = redis.call('HMGET', KEYS[1], 'token', 'writer')
local token, writer = ARGV[1], ARGV[2]
local fence, newer = cur[1], true
if fence then
  if #fence ~= #token then
    return redis.error_reply('redisfence: the fence of the resource holds ' .. fence .. ', not a token')
  end
  local c = cmp(token, fence)
  if c < 0 then return {0, 'below-fence', fence} end
  if c == 0 and writer ~= cur[2] then return {0, 'other-writer', fence} end
  newer = c > 0
end

-- The write first: a command that fails (WRONGTYPE) ends the script with nothing
-- changed; then the fence.
local op = ARGV[3]
if op == 'set' then
  if ARGV[5] == '0' then
    redis.call('SET', KEYS[2], ARGV[4])
  else
    redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
  end
elseif op == 'hset' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 4))
elseif op == 'del' then
  redis.call('DEL', unpack(KEYS, 2))
end
if newer then
  redis.call('HSET', KEYS[1], 'token', token, 'writer', writer)
end
return {1}
