-- The design notes' sliding window log (../shared/seeds/002_*.txt, "2. Sliding Window",
-- the sorted-set script): one sorted set per client holding the times of its admitted
-- requests, in milliseconds. A benchmark fixture: bench/bench.py loads it with SCRIPT
-- LOAD and times it beside TB.WINDOW LOG (issue 11).
--
--   EVALSHA <sha> 1 <key> <now-ms> <window-ms> <limit>
--
-- Each call removes the entries at or before now - window (ZREMRANGEBYSCORE from 0),
-- counts what is left (ZCARD) and, if that is below `limit`, records the request with
-- ZADD, the timestamp serving as both score and member, then sets EXPIRE to the window
-- in whole seconds (rounded up). Reply: 1 allowed, 0 denied (a denied call writes
-- nothing).
--
-- Written as the notes describe it, flaw included: the member is the timestamp itself,
-- so requests in the same millisecond collapse into one entry. All of them are admitted
-- but the set counts them once, and the limit leaks (TB.WINDOW LOG keeps every admitted
-- request as its own member, `<time>-<k>`). `now` comes from the caller's clock.
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
if redis.call('ZCARD', key) < limit then
    redis.call('ZADD', key, now, now)
    redis.call('EXPIRE', key, math.ceil(window / 1000))
    return 1
end
return 0
