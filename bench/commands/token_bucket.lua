-- A token bucket in Lua with the semantics of TB.TAKE, as the baseline the module is
-- benchmarked against (bench/commands/bench.py loads it with SCRIPT LOAD and calls EVALSHA).
--
--   EVALSHA <sha> 1 <key> <capacity> <rate> <n> [now]
--
-- Reply: { allowed (1/0), remaining, retry_after, reset_after }, the three numbers as
-- strings (a Lua number would be truncated to an integer in the reply).
--
-- Same state and rules as the module: a hash with fields `tokens` and `last_refill_time`
-- (seconds); a missing key is a full bucket; tokens = min(capacity, stored +
-- max(0, now - last) * rate); the bucket's clock never runs backwards (effective time =
-- max(now, last)); n > capacity is refused (retry_after -1); n = 0 is a query that writes
-- nothing; a denied call writes nothing. An allowed call stores both fields and sets the
-- key's TTL to ceil(time-to-full) plus a one-second margin, every time (the usual way such
-- scripts are written).
--
-- Numbers are stored as the shortest of %.15g / %.17g that reads back exactly (Lua's own
-- tostring uses %.14g and would lose the microseconds of an epoch time); a `now` given by
-- the caller is stored as the caller's text.

local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if not capacity or not rate or not n or capacity <= 0 or rate <= 0 or n < 0 then
    return redis.error_reply('ERR capacity and rate must be positive numbers, n >= 0')
end

local now, now_text
if ARGV[4] then
    now = tonumber(ARGV[4])
    if not now or now < 0 then
        return redis.error_reply('ERR now must be a non-negative number of seconds')
    end
    now_text = ARGV[4]
else
    local t = redis.call('TIME')
    now = tonumber(t[1]) + tonumber(t[2]) / 1e6
    now_text = string.format('%s.%06d', t[1], tonumber(t[2]))
end

local function fmt(x)
    local s = string.format('%.15g', x)
    if tonumber(s) ~= x then
        s = string.format('%.17g', x)
    end
    return s
end

local key = KEYS[1]
local stored = redis.call('HMGET', key, 'tokens', 'last_refill_time')
local tokens = capacity
local effective, effective_text = now, now_text
if stored[1] or stored[2] then
    local stored_tokens = tonumber(stored[1])
    local stored_last = tonumber(stored[2])
    if not stored_tokens or not stored_last then
        return redis.error_reply('ERR corrupt token bucket state')
    end
    if stored_last > now then
        effective, effective_text = stored_last, stored[2]
    end
    tokens = math.min(capacity, stored_tokens + (effective - stored_last) * rate)
end

-- Seconds from `now` until the bucket holds `target` tokens, starting from `have` at the
-- effective time.
local function wait_for(target, have)
    if have >= target then
        return 0
    end
    return (effective - now) + (target - have) / rate
end

if n > capacity then
    return { 0, fmt(tokens), '-1', fmt(wait_for(capacity, tokens)) }
end
if tokens < n then
    return { 0, fmt(tokens), fmt(wait_for(n, tokens)), fmt(wait_for(capacity, tokens)) }
end
if n == 0 then
    return { 1, fmt(tokens), '0', fmt(wait_for(capacity, tokens)) }
end

local remaining = tokens - n
local reset_after = wait_for(capacity, remaining)
redis.call('HSET', key, 'tokens', fmt(remaining), 'last_refill_time', effective_text)
local ttl_ms = math.ceil(reset_after * 1000) + 1000
if ttl_ms < 1e15 then
    redis.call('PEXPIRE', key, ttl_ms)
else
    redis.call('PERSIST', key)
end
return { 1, fmt(remaining), '0', fmt(reset_after) }
