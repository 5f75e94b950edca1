-- The design notes' fixed window counter (../shared/seeds/002_*.txt, "1. Fixed Window",
-- and its note on atomicity), as a script: the notes have the application send INCR and,
-- when INCR returned 1, EXPIRE for the window's length, and suggest wrapping the pair in
-- Lua so a crash between the two cannot leave a counter without a TTL. This is that
-- script and nothing more. A benchmark fixture: bench/commands/bench.py loads it with SCRIPT LOAD
-- and times it beside TB.WINDOW FIXED (issue 11).
--
--   EVALSHA <sha> 1 <key-of-this-window> <limit> <window-seconds>
--
-- The window is part of the key name, computed by the caller (the notes'
-- rate:{user}:{window}, e.g. the current minute), so the script never reads a clock.
-- Reply: 1 allowed (the count, this call included, is <= limit), 0 denied.
--
-- The approach as the notes describe it, flaws included: a denied call is counted too
-- (INCR comes first), the key lives `window` seconds from its first hit rather than until
-- the window's end, and at a window boundary up to 2 x limit pass (the end of one window
-- and the start of the next: the boundary problem the notes themselves point out).
local count = redis.call('INCR', KEYS[1])
if count == 1 then
    redis.call('EXPIRE', KEYS[1], ARGV[2])
end
if count <= tonumber(ARGV[1]) then
    return 1
end
return 0
