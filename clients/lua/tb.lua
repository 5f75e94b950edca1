-- redis-tb's commands as one Lua script, for servers that cannot load the module (managed
-- Redis and Valkey). Same keys, stored fields, texts, expiries, replies and errors as the
-- module (src/), so a key written by either is read and continued by the other; what cannot
-- match, and by how much, is in clients/lua/README.md.
--
--   EVALSHA <sha> <numkeys> <keys...> <COMMAND> <the command's arguments after its keys>
--
-- COMMAND is TAKE, MTAKE, RESERVE, PEEK, REFUND, WINDOW, ACQUIRE, RELEASE, RENEW, HOLD or
-- SETTLE (any case). The Functions build (README.md) registers the same handlers as tb_take,
-- tb_mtake, ... without the word. TB.ACQUIRE and TB.HOLD take the client's id (`ID <16 hex
-- digits>`) after the module's arguments; where TIME is refused, `NOW <seconds>` follows.
--
-- Every rule here is a port of one in the module, named at each function (`bucket.rs
-- take`), with the same floating-point operations in the same order: Lua numbers are IEEE
-- doubles like Rust's f64, and neither contracts a * b + c, so the same inputs give the same
-- bits. Everything above the "EVAL entry" line is the library; the lines from it on are
-- EVAL's entry.

-- The library is one function, so that a Functions library can build it on its first call
-- (a library's load runs without Lua's standard libraries) and keep it; EVAL builds its core,
-- and the parts the call needs, on every call.
local function library()
    local MAX_AMOUNT = 9007199254740992 -- 2^53: capacity, rate, n (bucket.rs MAX_AMOUNT)
    local MIN_RATE = 1e-9
    local MAX_TIME = 253402300800 -- the year 10000, exclusive
    local MIN_WINDOW, MAX_WINDOW = 1e-6, 1e12
    local LOG_MAX_N, LOG_MAX_LIMIT = 100000, 10000
    -- How far ahead of the server's clock a client's `now` may be: the module's
    -- max-clock-ahead-ms load argument, at its default. Edit here to change it (the script's
    -- SHA changes with it).
    local MAX_AHEAD_MS = 10000
    local MAX_TTL_MS = 1e15 -- expiry.rs: beyond this a key keeps no TTL
    local EXACT_STEPS = 4503599627370496 -- 2^52 (window.rs)
    -- Members per ZADD / ZREM: Lua's stack holds about 8,000 values, and unpack() of a larger
    -- list fails. The module replicates one command; these are split (README.md).
    local CHUNK = 1000

    local INF = math.huge
    local floor, ceil, abs, fmod = math.floor, math.ceil, math.abs, math.fmod
    local frexp, ldexp = math.frexp, math.ldexp
    local sfmt, sfind, sbyte, ssub, smatch, srep = string.format, string.find, string.byte, string.sub,
        string.match, string.rep
    local tonumber, unpack, type = tonumber, unpack, type
    local rcall, rpcall = redis.call, redis.pcall

    -- The library's functions, in one table: a closure that names only this table is cheap
    -- to create, and EVAL creates every one of them on every call.
    local M = {}

    -- Errors (error.rs). A handler fails with M.fail(text); the entry turns it into the
    -- reply. The texts are built only when a call fails.
    function M.errors()
        if M.E then
            return M.E
        end
        local E = {
            wrongtype = 'WRONGTYPE Operation against a key holding the wrong kind of value',
            ahead = 'ERR now is further ahead of the server clock than max-clock-ahead-ms allows (now must be seconds since the Unix epoch)',
            no_time = 'ERR this server refuses TIME in scripts: send now (seconds since the Unix epoch)',
            not_bucket = "ERR key holds a hash that is not a token bucket (it has neither 'tokens' nor 'last_refill_time'): left unchanged",
            not_window = "ERR key holds a hash that is not a TB.WINDOW window (it has none of 'start', 'count', 'counts', 'previous'): left unchanged",
            not_log = "ERR key holds a sorted set that is not a TB.WINDOW LOG (a member is not '<score>-<n>'): left unchanged",
            mixed = "ERR key holds both a token bucket's and a TB.WINDOW window's fields: left unchanged",
            window_not_bucket = 'ERR key holds a TB.WINDOW window, not a token bucket',
            bucket_not_window = 'ERR key holds a token bucket, not a TB.WINDOW window',
            fixed_not_sliding = 'ERR key holds a FIXED window, not a SLIDING one',
            sliding_not_fixed = 'ERR key holds a SLIDING window, not a FIXED one',
            leases_not_window = "ERR key holds TB.ACQUIRE's leases, not a TB.WINDOW LOG window",
            corrupt_log = "ERR window log is corrupt: an entry's score is not a valid time in microseconds",
            corrupt = {
                tokens = "ERR bucket state is corrupt: field 'tokens' is not a valid token count",
                last_refill_time = "ERR bucket state is corrupt: field 'last_refill_time' is not a valid time in seconds",
                start = "ERR window state is corrupt: field 'start' is not a valid time in seconds",
                count = "ERR window state is corrupt: field 'count' is not a valid count",
                counts = "ERR window state is corrupt: field 'counts' is not two valid counts",
                previous = "ERR window state is corrupt: field 'previous' is not a valid count",
            },
            invalid = {}, -- '<arg> is not a valid number', filled below
            range = {
                capacity = 'ERR capacity must be > 0 and <= 9007199254740992',
                rate = 'ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second',
                n = 'ERR n must be >= 0 and <= 9007199254740992',
                now = 'ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800',
                max_wait = 'ERR max_wait must be >= 0 seconds',
                limit = 'ERR limit must be > 0 and <= 9007199254740992',
                window = 'ERR window must be >= 0.000001 and <= 1000000000000 seconds',
            },
            mode = 'ERR mode must be FIXED, SLIDING or LOG',
            log_whole = 'ERR LOG counts whole requests: limit and n must be whole numbers',
            log_limit = 'ERR limit must be <= 10000 with LOG (each request is one entry)',
            log_n = 'ERR n must be <= 100000 with LOG (each request is one entry)',
            numkeys = 'ERR numkeys must be a positive integer',
            numkeys_mismatch = 'ERR numkeys does not match the arguments: tb.mtake takes numkeys keys, then capacity rate n for each key, then an optional now',
            duplicate = 'ERR tb.mtake got the same key more than once',
            too_many_keys = 'ERR numkeys must be at most 64 (the buckets one call may take)',
            lease_limit = 'ERR limit must be a whole number >= 1 and <= 10000',
            lease_ms = 'ERR lease_ms must be a whole number of milliseconds >= 1 and <= 31536000000',
            lease_id = 'ERR lease_id must be the 16 hex digits TB.ACQUIRE replied',
            ttl_ms = 'ERR ttl_ms must be a whole number of milliseconds >= 1 and <= 31536000000',
            estimate = 'ERR estimate must be > 0 and <= 9007199254740992',
            actual = 'ERR actual must be >= 0 and <= 9007199254740992',
            hold_id = 'ERR hold_id must be the 16 hex digits TB.HOLD replied',
            take_syntax = 'ERR syntax: TB.ACQUIRE key limit lease_ms [TAKE numkeys key [key ...] capacity rate n [capacity rate n ...]] (no now: the server\'s clock)',
            take_duplicate = 'ERR tb.acquire got the same key more than once (the lease key and every bucket must differ)',
            peek_leases = 'ERR syntax: TB.PEEK key LEASES takes nothing after LEASES',
            peek_holds = 'ERR syntax: TB.PEEK key HOLDS takes nothing after HOLDS',
            not_leases = "ERR key holds a sorted set that is not TB.ACQUIRE's leases (members lease:<16 hex digits>, scores whole ms)",
            corrupt_holds = "ERR bucket state is corrupt: field 'holds' is not a list of holds",
            -- The script's own (README.md): the id a grant gets comes from the client.
            id = 'ERR the scripts take ID <16 hex digits from the client\'s CSPRNG> after TB.ACQUIRE\'s and TB.HOLD\'s arguments',
            id_taken = 'ERR ID is already held on this key: send a fresh random one',
            no_time_lease = 'ERR this server refuses TIME in scripts and no key tells its clock: send NOW <seconds since the Unix epoch> after the arguments',
        }
        for _, arg in ipairs({ 'capacity', 'rate', 'n', 'now', 'max_wait', 'limit', 'window' }) do
            E.invalid[arg] = 'ERR ' .. arg .. ' is not a valid number'
        end
        M.E = E
        return E
    end

    function M.fail(text)
        error({ tb = text }, 0)
    end

    function M.arity(command)
        M.fail("ERR wrong number of arguments for '" .. command .. "' command")
    end

    ---------------------------------------------------------------------------------------------
    -- Floats (Rust's f64 methods the module uses)

    -- f64::next_up for a finite x: the step of x's binade, or half of it going toward zero from
    -- a power of two.
    function M.next_up(x)
        if x ~= x or x == INF then
            return x
        end
        if x == 0 then
            return 4.9406564584124654e-324
        end
        local m, e = frexp(x) -- x = m * 2^e, 0.5 <= |m| < 1
        local lo = e - 53
        if lo < -1074 then
            lo = -1074
        end
        if x < 0 and m == -0.5 and e - 54 >= -1074 then
            return x + ldexp(1, e - 54)
        end
        return x + ldexp(1, lo)
    end

    function M.next_down(x)
        return -M.next_up(-x)
    end

    -- bucket.rs ulp: the distance to the next larger f64.
    function M.ulp(x)
        local up = M.next_up(x)
        if up == INF then
            return 2.220446049250313e-16
        end
        return up - x
    end

    -- f64::round (half away from zero) for x >= 0 below 2^52, where x - floor(x) is exact.
    function M.round_pos(x)
        local r = floor(x)
        if x - r >= 0.5 then
            r = r + 1
        end
        return r
    end

    ---------------------------------------------------------------------------------------------
    -- Number text (num.rs)

    -- parse_f64: `-? digits (. digits)? ([eE] [+-]? digits)?`, at most 128 bytes, finite. The
    -- grammar is checked here; strtod (Lua's tonumber) then rounds correctly, as Rust's parser
    -- does, so both read the same double from the same text.
    function M.parse_number(s)
        local len = #s
        if len == 0 or len > 128 then
            return nil
        end
        local i = 1
        if sbyte(s, 1) == 45 then
            i = 2
        end
        local _, b = sfind(s, '^%d+', i)
        if not b then
            return nil
        end
        i = b + 1
        local c = sbyte(s, i)
        if c == 46 then
            _, b = sfind(s, '^%d+', i + 1)
            if not b then
                return nil
            end
            i = b + 1
            c = sbyte(s, i)
        end
        if c == 101 or c == 69 then
            i = i + 1
            c = sbyte(s, i)
            if c == 43 or c == 45 then
                i = i + 1
            end
            _, b = sfind(s, '^%d+', i)
            if not b then
                return nil
            end
            i = b + 1
        end
        if i ~= len + 1 then
            return nil
        end
        local v = tonumber(s)
        if v == nil or v ~= v or v == INF or v == -INF then
            return nil
        end
        return v
    end

    -- is_plain_decimal: digits with an optional fraction, no sign, no leading zero, no trailing
    -- fraction zero, at most 24 bytes: a client's `now` stored as sent.
    function M.is_plain(s)
        local n = #s
        if n == 0 or n > 24 then
            return false
        end
        local int, frac = smatch(s, '^(%d+)%.(%d+)$')
        if not int then
            int = smatch(s, '^(%d+)$')
            if not int then
                return false
            end
        end
        if #int > 1 and sbyte(int, 1) == 48 then
            return false
        end
        if frac and sbyte(frac, #frac) == 48 then
            return false
        end
        return true
    end

    -- printf formats with 1 to 17 significant digits.
    local SIG = {
        '%.0e', '%.1e', '%.2e', '%.3e', '%.4e', '%.5e', '%.6e', '%.7e', '%.8e', '%.9e',
        '%.10e', '%.11e', '%.12e', '%.13e', '%.14e', '%.15e', '%.16e',
    }
    local MIN_NORMAL = 2.2250738585072014e-308

    -- The shortest round-trip digits of a > 0 (no trailing zeros) and the decimal exponent
    -- of the first, as Ryu picks them: the fewest significant digits that read back as `a`,
    -- and of those the text nearest to it, which is what %.<p>e prints when any text of
    -- that length reads back. A normal double's 15-digit texts are spaced wider than its
    -- step, so at most one lies within half a step of it: a shortest text of 15 digits or
    -- fewer is found padded by %.14e, and the search starts there (16 digits or 17 are
    -- %.15e or %.16e). Subnormals have fewer bits, so their search starts at one digit.
    -- README.md has the measurement.
    function M.shortest_digits(a)
        local s
        for i = (a < MIN_NORMAL and 1 or 15), 17 do
            s = sfmt(SIG[i], a)
            if i == 17 or tonumber(s) == a then
                break
            end
        end
        local d1, rest, e = smatch(s, '^(%d)%.?(%d*)e([-+]%d+)$')
        local digits = smatch(d1 .. rest, '^(.-)0*$')
        return digits, tonumber(e)
    end

    -- format_f64: integers as `99`, times and waits that are whole microseconds below 2^32 as
    -- `0.000003`-style decimals, the rest as Ryu lays out shortest digits (`1.5e-7`, `1e16`).
    function M.fmt(v)
        if v ~= v or v == INF or v == -INF or v == 0 then
            return '0'
        end
        local a = abs(v)
        if a < 1e16 and v == floor(v) then
            return sfmt('%.0f', v)
        end
        local sign = v < 0 and '-' or ''
        if a < 4294967296 then
            local scaled = M.round_pos(a * 1e6)
            if scaled / 1e6 == a then
                local frac = fmod(scaled, 1e6)
                local text = sign .. sfmt('%.0f', (scaled - frac) / 1e6)
                if frac > 0 then
                    text = text .. '.' .. smatch(sfmt('%06.0f', frac), '^(.-)0*$')
                end
                return text
            end
        end
        local digits, e = M.shortest_digits(a)
        local len = #digits
        local kk = e + 1 -- 10^(kk-1) <= a < 10^kk
        local k = kk - len
        if k >= 0 and kk <= 16 then
            return sign .. digits .. srep('0', kk - len) .. '.0'
        elseif kk > 0 and kk <= 16 then
            return sign .. ssub(digits, 1, kk) .. '.' .. ssub(digits, kk + 1)
        elseif kk > -5 and kk <= 0 then
            return sign .. '0.' .. srep('0', -kk) .. digits
        elseif len == 1 then
            return sign .. digits .. 'e' .. sfmt('%d', kk - 1)
        end
        return sign .. ssub(digits, 1, 1) .. '.' .. ssub(digits, 2) .. 'e' .. sfmt('%d', kk - 1)
    end

    -- format_whole: a whole number below 2^64 as its digits at any magnitude (LOG scores).
    function M.fmt_whole(v)
        if v >= 0 and v < 18446744073709551616 and v == floor(v) then
            return sfmt('%.0f', v)
        end
        return M.fmt(v)
    end

    -- ceil_micros: a server-clock wait rounded up to whole microseconds.
    function M.ceil_micros(s)
        if not (s >= 0 and s < 9e9) then
            return s
        end
        local m = ceil(s * 1e6) / 1e6
        if m >= s then
            return m
        end
        return M.next_up(m)
    end

    ---------------------------------------------------------------------------------------------
    -- Arguments (args.rs)

    function M.number(text, arg)
        local v = M.parse_number(text)
        if v == nil then
            M.fail(M.errors().invalid[arg])
        end
        return v
    end

    function M.parse_limit(capacity, rate)
        local c = M.number(capacity, 'capacity')
        if not (c > 0 and c <= MAX_AMOUNT) then
            M.fail(M.errors().range.capacity)
        end
        local r = M.number(rate, 'rate')
        if not (r >= MIN_RATE and r <= MAX_AMOUNT) then
            M.fail(M.errors().range.rate)
        end
        return c, r
    end

    function M.parse_n(text)
        local n = M.number(text, 'n')
        if not (n >= 0 and n <= MAX_AMOUNT) then
            M.fail(M.errors().range.n)
        end
        return n + 0
    end

    function M.parse_now(text)
        if text == nil then
            return nil
        end
        local t = M.number(text, 'now')
        if not (t >= 0 and t < MAX_TIME) then
            M.fail(M.errors().range.now)
        end
        return t + 0
    end

    ---------------------------------------------------------------------------------------------
    -- The clock (commands/mod.rs Clock, clock.rs)

    -- The server's clock in whole microseconds, or nil when this server refuses TIME in
    -- scripts (ElastiCache Serverless; `rename-command TIME ""`; an ACL without TIME).
    function M.server_micros()
        local t = rpcall('TIME')
        if t.err then
            return nil
        end
        return tonumber(t[1]) * 1000000 + tonumber(t[2]), t
    end

    -- Where TIME is refused, the server's clock in ms from a key's own expiry: PEXPIRETIME is
    -- absolute, PTTL relative to the server's clock (Redis 7.0+). nil for a key without one.
    function M.key_clock_ms(key)
        local at = rpcall('PEXPIRETIME', key)
        if type(at) ~= 'number' or at < 0 then
            return nil
        end
        local left = rpcall('PTTL', key)
        if type(left) ~= 'number' or left < 0 then
            return nil
        end
        return at - left
    end

    -- The call's clock: a client's `now` (bounded as the module bounds it, where the script can
    -- read the server's clock) or the server's. Returns a table:
    --   now      seconds since the epoch
    --   text     the stored text of `now` when it changes a stored time
    --   server   true on the server's clock (waits rounded up to whole microseconds)
    function M.make_clock(now, now_text, keys)
        if now == nil then
            local micros, t = M.server_micros()
            if micros == nil then
                M.fail(M.errors().no_time)
            end
            -- format_micros: fixed width, six fraction digits.
            return { now = micros / 1e6, text = t[1] .. '.' .. sfmt('%06d', tonumber(t[2])), server = true }
        end
        local micros = M.server_micros()
        if micros == nil then
            for i = 1, #keys do
                local ms = M.key_clock_ms(keys[i])
                if ms then
                    micros = ms * 1000
                    break
                end
            end
        end
        -- clock.rs within_bound; with no clock at all (TIME refused, no key with an expiry)
        -- there is nothing to bound against (README.md).
        if micros ~= nil and not (now <= (micros + MAX_AHEAD_MS * 1000) / 1e6) then
            M.fail(M.errors().ahead)
        end
        local text = now_text
        if not M.is_plain(now_text) then
            text = M.fmt(now)
        end
        return { now = now, text = text, server = false }
    end

    ---------------------------------------------------------------------------------------------
    -- Expiry (expiry.rs plan, store.rs expire_in). The module compares the key's absolute
    -- expiry with its clock in ms; PTTL is that difference as the server computes it, and a
    -- relative PEXPIRE is replicated as PEXPIREAT, so no script needs a clock for a TTL.

    function M.expire(key, existed, seconds)
        if seconds ~= seconds or seconds < 0 then
            seconds = 0
        end
        local ttl = ceil(seconds * 1000)
        local current = -1
        if existed then
            current = rcall('PTTL', key)
        end
        if ttl >= MAX_TTL_MS then
            if current >= 0 then
                rcall('PERSIST', key)
            end
            return
        end
        local slack = 1000 + floor(ttl / 4)
        if current >= 0 and current >= ttl and current <= ttl + slack then
            return
        end
        rcall('PEXPIRE', key, sfmt('%.0f', ttl + floor(slack / 2)))
    end

    ---------------------------------------------------------------------------------------------
    -- Stored hash fields (fields.rs, store.rs)

    local HASH_FIELDS = { 'tokens', 'last_refill_time', 'start', 'count', 'counts', 'previous' }

    -- The six fields the module may look at, in one HMGET (a key of another type: WRONGTYPE).
    -- Returns them and whether the key exists.
    function M.read_hash(key)
        local r = rpcall('HMGET', key, unpack(HASH_FIELDS))
        if r.err then
            M.fail(M.errors().wrongtype)
        end
        local exists = true
        if not (r[1] or r[2] or r[3] or r[4] or r[5] or r[6]) then
            -- None of ours: a missing key, or someone else's hash.
            exists = rcall('EXISTS', key) == 1
        end
        return r, exists
    end

    -- check_owner for `wanted` ('bucket' or 'window'). Reading all six fields gives what the
    -- module's HashGet + ValueLength reads tell (it reads the rest exactly when they matter).
    function M.check_owner(wanted, f, exists)
        if not exists then
            return
        end
        local bucket = f[1] or f[2]
        local window = f[3] or f[4] or f[5] or f[6]
        if not bucket and not window then
            M.fail(wanted == 'bucket' and M.errors().not_bucket or M.errors().not_window)
        elseif bucket and window then
            M.fail(M.errors().mixed)
        elseif bucket and wanted ~= 'bucket' then
            M.fail(M.errors().bucket_not_window)
        elseif window and wanted == 'bucket' then
            M.fail(M.errors().window_not_bucket)
        end
    end

    -- Stored values: `v` is a number, or nil / false for a missing or unreadable field.
    function M.valid_tokens(v)
        return type(v) == 'number' and v >= -MAX_AMOUNT
    end

    function M.valid_time(v)
        return type(v) == 'number' and v >= 0 and v < MAX_TIME
    end

    function M.valid_count(v)
        return type(v) == 'number' and v >= 0 and v <= MAX_AMOUNT
    end

    -- fields.rs decode: nil (new bucket) or { t = tokens, l = last_refill_time }.
    function M.decode_bucket(f)
        if not f[1] and not f[2] then
            return nil
        end
        local t = f[1] and M.parse_number(f[1])
        if not M.valid_tokens(t) then
            M.fail(M.errors().corrupt.tokens)
        end
        local l = f[2] and M.parse_number(f[2])
        if not M.valid_time(l) then
            M.fail(M.errors().corrupt.last_refill_time)
        end
        return { t = t, l = l }
    end

    -- A bucket key opened and read: { key, existed, st } (WRONGTYPE, foreign and corrupt
    -- states refused here, before anything is written).
    function M.open_bucket(key)
        local f, exists = M.read_hash(key)
        return { key = key, existed = exists, f = f }
    end

    function M.read_bucket(b)
        M.check_owner('bucket', b.f, b.existed)
        b.st = M.decode_bucket(b.f)
        return b.st
    end

    ---------------------------------------------------------------------------------------------
    -- Shared by the bucket and window commands

    -- settle_wait: the closed-form wait `guess`, nudged up by doubling steps until `ok` holds at
    -- the floating-point time the caller comes back at.
    function M.settle_wait(now, guess, ok)
        local wait = guess
        if not (wait > 0) then
            wait = 0
        end
        local step = M.ulp(now + wait)
        local s2 = M.ulp(wait)
        if s2 > step then
            step = s2
        end
        for _ = 1, 1100 do
            if ok(now + wait) then
                break
            end
            local nxt = wait + step
            if nxt ~= nxt or nxt == INF or nxt == -INF then
                break
            end
            wait = nxt
            step = step * 2
        end
        return wait
    end

    -- Clock::round: a server-clock caller's waits in whole microseconds, rounded up.
    function M.round(clock, d)
        if clock.server then
            d.retry = M.ceil_micros(d.retry)
            d.reset = M.ceil_micros(d.reset)
        end
    end

    function M.decision_reply(d, remaining_text)
        return { d.allowed and 1 or 0, remaining_text or M.fmt(d.remaining), M.fmt(d.retry), M.fmt(d.reset) }
    end

    function M.single_key(keys, name)
        if #keys ~= 1 then
            M.arity(name)
        end
    end

    -- Runs a handler; its refusals (fail) become error replies with the module's texts.
    function M.run(handler, keys, args, o)
        local ok, result = pcall(handler, keys, args, o)
        if ok then
            return result
        end
        if type(result) == 'table' and result.tb then
            return redis.error_reply(result.tb)
        end
        error(result, 0)
    end

    ---------------------------------------------------------------------------------------------
    -- The commands' parts, each defined only when a call needs it: EVAL creates every
    -- function it defines on every call (about 70 ns each), so a TB.TAKE does not pay for
    -- the windows' functions. The Functions build defines every part once.

    function M.bucket_part()
        -- Token bucket (bucket.rs). A decision is { allowed, remaining, retry, reset, new }.

        function M.tokens_at(cap, rate, st, t)
            if st == nil then
                return cap
            end
            local elapsed = t - st.l
            if elapsed < 0 then
                elapsed = 0
            end
            local v = st.t + elapsed * rate
            if v > cap then
                return cap
            end
            return v
        end

        function M.effective_time(st, now)
            if st == nil or now > st.l then
                return now
            end
            return st.l
        end

        function M.wait_until(cap, rate, st, target, now)
            if M.tokens_at(cap, rate, st, now) >= target then
                return 0
            end
            local effective = M.effective_time(st, now)
            local short = target - M.tokens_at(cap, rate, st, effective)
            if short < 0 then
                short = 0
            end
            local guess = (effective - now) + short / rate
            return M.settle_wait(now, guess, function(t)
                return M.tokens_at(cap, rate, st, t) >= target
            end)
        end

        function M.report(cap, rate, n, now, st)
            local current = M.tokens_at(cap, rate, st, M.effective_time(st, now))
            local allowed, retry
            if n > cap then
                allowed, retry = false, -1
            elseif current >= n then
                allowed, retry = true, 0
            else
                allowed, retry = false, M.wait_until(cap, rate, st, n, now)
            end
            return { allowed = allowed, remaining = current, retry = retry, reset = M.wait_until(cap, rate, st, cap, now) }
        end

        function M.take(cap, rate, n, now, st)
            local effective = M.effective_time(st, now)
            local current = M.tokens_at(cap, rate, st, effective)
            if n == 0 or n > cap or current < n then
                return M.report(cap, rate, n, now, st)
            end
            local new = { t = current - n, l = effective }
            return { allowed = true, remaining = new.t, retry = 0, reset = M.wait_until(cap, rate, new, cap, now), new = new }
        end

        function M.refund(cap, rate, n, now, st)
            local effective = M.effective_time(st, now)
            local current = M.tokens_at(cap, rate, st, effective)
            local tokens = current + n
            if tokens > cap then
                tokens = cap
            end
            if st == nil or tokens <= current then
                return { allowed = true, remaining = current, retry = 0, reset = M.wait_until(cap, rate, st, cap, now) }
            end
            local new = { t = tokens, l = effective }
            return { allowed = true, remaining = tokens, retry = 0, reset = M.wait_until(cap, rate, new, cap, now), new = new }
        end

        function M.reservation_wait(cap, rate, n, max_wait, now, st)
            local current = M.tokens_at(cap, rate, st, M.effective_time(st, now))
            local wait = M.wait_until(cap, rate, st, n, now)
            if wait <= max_wait and current - n >= -MAX_AMOUNT then
                return wait
            end
            return nil
        end

        function M.reserve(cap, rate, n, max_wait, now, st)
            local effective = M.effective_time(st, now)
            local current = M.tokens_at(cap, rate, st, effective)
            if n > cap or n == 0 or current >= n then
                return M.take(cap, rate, n, now, st)
            end
            local wait = M.reservation_wait(cap, rate, n, max_wait, now, st)
            if wait ~= nil then
                local new = { t = current - n, l = effective }
                return { allowed = true, remaining = new.t, retry = wait, reset = M.wait_until(cap, rate, new, cap, now), new = new }
            end
            local deepest = n - MAX_AMOUNT
            local guess = M.wait_until(cap, rate, st, n, now) - max_wait
            local floor_wait = M.wait_until(cap, rate, st, deepest, now)
            if floor_wait > guess then
                guess = floor_wait
            end
            local retry = M.settle_wait(now, guess, function(t)
                return M.reservation_wait(cap, rate, n, max_wait, t, st) ~= nil
            end)
            return { allowed = false, remaining = current, retry = retry, reset = M.wait_until(cap, rate, st, cap, now) }
        end

        -- take_all (TB.MTAKE): every bucket or none; parts are { cap, rate, n, st }.
        function M.take_all(parts, now)
            local each = {}
            local allowed = true
            for i, p in ipairs(parts) do
                each[i] = M.take(p.cap, p.rate, p.n, now, p.st)
                allowed = allowed and each[i].allowed
            end
            if not allowed then
                for i, p in ipairs(parts) do
                    if each[i].new then
                        each[i] = M.report(p.cap, p.rate, p.n, now, p.st)
                    end
                end
            end
            local never, retry, reset, remaining = false, 0, 0, nil
            for _, d in ipairs(each) do
                never = never or d.retry < 0
                if d.retry > retry then
                    retry = d.retry
                end
                if d.reset > reset then
                    reset = d.reset
                end
                if remaining == nil or d.remaining < remaining then
                    remaining = d.remaining
                end
            end
            if allowed then
                retry = 0
            elseif never then
                retry = -1
            end
            return { allowed = allowed, remaining = remaining or 0, retry = retry, reset = reset }, each
        end

        -- commands/mod.rs store: the changed fields only (a repeated `now` leaves the stored time's
        -- text as it is), then the expiry. `tokens_text` is fmt(new tokens).
        function M.store_bucket(b, d, tokens_text, clock)
            local new = d.new
            if new == nil then
                return
            end
            local old = b.st
            local args = {}
            if old == nil or old.t ~= new.t then
                args[#args + 1] = 'tokens'
                args[#args + 1] = tokens_text
            end
            if old == nil or old.l ~= new.l then
                args[#args + 1] = 'last_refill_time'
                args[#args + 1] = clock.text
            end
            if #args > 0 then
                rcall('HSET', b.key, unpack(args))
            end
            M.expire(b.key, b.existed, d.reset)
        end

        -- One key, one decision (commands/mod.rs on_bucket): parse, clock, read, decide, store.
        function M.on_bucket(keys, clock_text, now, decide, writes)
            local clock = M.make_clock(now, clock_text, keys)
            local b = M.open_bucket(keys[1])
            local st = M.read_bucket(b)
            local d = decide(clock.now, st)
            M.round(clock, d)
            local text = M.fmt(d.remaining)
            if writes then
                M.store_bucket(b, d, text, clock)
            end
            return M.decision_reply(d, text)
        end

        ---------------------------------------------------------------------------------------------
        -- Bucket commands. Each takes (keys, args, o): args[o + 1] is the first argument after the
        -- keys (o = 1 under EVAL, where args[1] is the command word; 0 under FCALL).

        function M.cmd_take(keys, args, o)
            M.single_key(keys, 'tb.take')
            local count = #args - o
            if count ~= 3 and count ~= 4 then
                M.arity('tb.take')
            end
            local cap, rate = M.parse_limit(args[o + 1], args[o + 2])
            local n = M.parse_n(args[o + 3])
            local now = M.parse_now(args[o + 4])
            return M.on_bucket(keys, args[o + 4], now, function(t, st)
                return M.take(cap, rate, n, t, st)
            end, true)
        end

        function M.cmd_refund(keys, args, o)
            M.single_key(keys, 'tb.refund')
            local count = #args - o
            if count ~= 3 and count ~= 4 then
                M.arity('tb.refund')
            end
            local cap, rate = M.parse_limit(args[o + 1], args[o + 2])
            local n = M.parse_n(args[o + 3])
            local now = M.parse_now(args[o + 4])
            return M.on_bucket(keys, args[o + 4], now, function(t, st)
                return M.refund(cap, rate, n, t, st)
            end, true)
        end

        function M.cmd_reserve(keys, args, o)
            M.single_key(keys, 'tb.reserve')
            local count = #args - o
            if count ~= 4 and count ~= 5 then
                M.arity('tb.reserve')
            end
            local cap, rate = M.parse_limit(args[o + 1], args[o + 2])
            local n = M.parse_n(args[o + 3])
            local max_wait = M.number(args[o + 4], 'max_wait')
            if not (max_wait >= 0) then
                M.fail(M.errors().range.max_wait)
            end
            max_wait = max_wait + 0
            local now = M.parse_now(args[o + 5])
            return M.on_bucket(keys, args[o + 5], now, function(t, st)
                return M.reserve(cap, rate, n, max_wait, t, st)
            end, true)
        end

        function M.cmd_peek(keys, args, o)
            M.single_key(keys, 'tb.peek')
            local count = #args - o
            local word = count >= 1 and string.upper(args[o + 1])
            if word == 'LEASES' or word == 'HOLDS' then
                if not M.lease_part_done then
                    M.lease_part()
                    M.lease_part_done = true
                end
                -- The script's NOW (read only where TIME is refused) may follow the word.
                local last, _, now_text = M.tail(args, o)
                if last - o > 3 then
                    M.arity('tb.peek')
                elseif last - o ~= 1 then
                    M.fail(word == 'LEASES' and M.errors().peek_leases or M.errors().peek_holds)
                end
                if word == 'LEASES' then
                    return M.peek_leases(keys, now_text)
                end
                return M.peek_holds(keys, now_text)
            end
            if count ~= 2 and count ~= 3 then
                M.arity('tb.peek')
            end
            local cap, rate = M.parse_limit(args[o + 1], args[o + 2])
            local now = M.parse_now(args[o + 3])
            return M.on_bucket(keys, args[o + 3], now, function(t, st)
                return M.report(cap, rate, 1, t, st)
            end, false)
        end

        function M.cmd_mtake(keys, args, o)
            local nkeys = #keys
            local rest = #args - o
            -- The module's argv is TB.MTAKE numkeys keys... args...: at least six words.
            if 2 + nkeys + rest < 6 then
                M.arity('tb.mtake')
            end
            if nkeys == 0 then
                M.fail(M.errors().numkeys)
            end
            if nkeys > 64 then
                M.fail(M.errors().too_many_keys)
            end
            local has_now
            if rest == 3 * nkeys then
                has_now = false
            elseif rest == 3 * nkeys + 1 then
                has_now = true
            else
                M.fail(M.errors().numkeys_mismatch)
            end
            local parts = {}
            for i = 1, nkeys do
                local base = o + 3 * (i - 1)
                local cap, rate = M.parse_limit(args[base + 1], args[base + 2])
                parts[i] = { cap = cap, rate = rate, n = M.parse_n(args[base + 3]) }
            end
            local now_text = has_now and args[o + 3 * nkeys + 1] or nil
            local now = M.parse_now(now_text)
            local seen = {}
            for i = 1, nkeys do
                if seen[keys[i]] then
                    M.fail(M.errors().duplicate)
                end
                seen[keys[i]] = true
            end
            local clock = M.make_clock(now, now_text, keys)
            -- Every key opened (WRONGTYPE) before any is read, every one read before any is written.
            local buckets = {}
            for i = 1, nkeys do
                buckets[i] = M.open_bucket(keys[i])
            end
            for i = 1, nkeys do
                parts[i].st = M.read_bucket(buckets[i])
            end
            local total, each = M.take_all(parts, clock.now)
            M.round(clock, total)
            local texts = {}
            for i, d in ipairs(each) do
                M.round(clock, d)
                texts[i] = M.fmt(d.remaining)
            end
            for i, d in ipairs(each) do
                M.store_bucket(buckets[i], d, texts[i], clock)
            end
            local per_key = {}
            for i, d in ipairs(each) do
                per_key[i] = M.decision_reply(d, texts[i])
            end
            local reply = M.decision_reply(total)
            reply[5] = per_key
            return reply
        end
    end

    function M.window_part()
        -- Windows (window.rs)

        function M.whole_above(j)
            if abs(j) < EXACT_STEPS then
                return j + 1
            end
            local a, b = j + 1, M.next_up(j)
            return a > b and a or b
        end

        function M.whole_below(j)
            if abs(j) < EXACT_STEPS then
                return j - 1
            end
            local a, b = j - 1, M.next_down(j)
            return a < b and a or b
        end

        -- bounds: the aligned window holding t, (start, end), every time in exactly one.
        function M.bounds(t, window)
            local j = floor(t / window)
            for _ = 1, 16 do
                if j * window > t then
                    j = M.whole_below(j)
                elseif M.whole_above(j) * window <= t then
                    j = M.whole_above(j)
                else
                    break
                end
            end
            local start = j * window
            if t < start then
                start = t
            end
            local e = M.whole_above(j) * window
            local up = M.next_up(t)
            if up > e then
                e = up
            end
            return start, e
        end

        function M.end_of(start, known_start, known_end, window)
            if start == known_start then
                return known_end
            end
            local _, e = M.bounds(start, window)
            return e
        end

        function M.fixed_view(window, now, st)
            local start, e = M.bounds(now, window)
            if st and st.start >= start then
                return st.start, M.end_of(st.start, start, e, window), st.count
            end
            return start, e, 0
        end

        function M.clamp_remaining(v, limit)
            if v < 0 then
                v = 0
            end
            if v > limit then
                v = limit
            end
            return v
        end

        -- fixed: one counter per aligned window.
        function M.fixed(limit, window, n, now, st)
            local vstart, vend, vcount = M.fixed_view(window, now, st)
            local allowed = n <= limit and vcount + n <= limit
            local write = allowed and n > 0
            local count = vcount
            local kept = st
            if write then
                count = vcount + n
                kept = { start = vstart, count = count }
            end
            local retry
            if allowed then
                retry = 0
            elseif n > limit then
                retry = -1
            else
                retry = M.settle_wait(now, vend - now, function(t)
                    local _, _, c = M.fixed_view(window, t, st)
                    return c + n <= limit
                end)
            end
            local reset = 0
            if count > 0 then
                reset = M.settle_wait(now, vend - now, function(t)
                    local _, _, c = M.fixed_view(window, t, kept)
                    return c <= 0
                end)
            end
            local expires_at = now
            if kept then
                expires_at = M.end_of(kept.start, vstart, vend, window)
            end
            return {
                allowed = allowed,
                remaining = M.clamp_remaining(limit - count, limit),
                retry = retry,
                reset = reset,
                new = write and kept or nil,
                expires_at = expires_at,
            }
        end

        -- sliding_view: start, end, count, previous, weight.
        function M.sliding_view(window, now, st)
            local start, e = M.bounds(now, window)
            local count, previous = 0, 0
            if st and st.start >= start then
                e = M.end_of(st.start, start, e, window)
                start = st.start
                count, previous = st.count, st.previous
            elseif st and st.start >= (M.bounds(M.next_down(start), window)) then
                previous = st.count
            end
            local elapsed = (now - start) / window
            if elapsed < 0 then
                elapsed = 0
            elseif elapsed > 1 then
                elapsed = 1
            end
            return start, e, count, previous, 1 - elapsed
        end

        function M.sliding_estimate(window, now, st)
            local _, _, count, previous, weight = M.sliding_view(window, now, st)
            return previous * weight + count
        end

        -- sliding: two counters, the previous one weighted by its overlap.
        function M.sliding(limit, window, n, now, st)
            local vstart, vend, vcount, vprev, weight = M.sliding_view(window, now, st)
            local estimate = vprev * weight + vcount
            local allowed = n <= limit and estimate + n <= limit
            local write = allowed and n > 0
            local kept = st
            if write then
                kept = { start = vstart, count = vcount + n, previous = vprev }
            end
            local retry
            if allowed then
                retry = 0
            elseif n > limit then
                retry = -1
            else
                local at
                if vcount + n <= limit then
                    local room = limit - n - vcount
                    local t = now
                    if vprev > 0 then
                        t = vstart + window * (1 - room / vprev)
                    end
                    at = t < vend and t or vend
                else
                    at = vend + window * (1 - (limit - n) / vcount)
                end
                retry = M.settle_wait(now, at - now, function(t)
                    return M.sliding_estimate(window, t, st) + n <= limit
                end)
            end
            local expires_at = now
            if kept then
                local e = M.end_of(kept.start, vstart, vend, window)
                if kept.count > 0 then
                    local _, e2 = M.bounds(e, window)
                    expires_at = e2
                else
                    expires_at = e
                end
            end
            local after = estimate + (write and n or 0)
            local reset = 0
            if after > 0 then
                reset = M.settle_wait(now, expires_at - now, function(t)
                    return t >= expires_at or M.sliding_estimate(window, t, kept) <= 0
                end)
            end
            return {
                allowed = allowed,
                remaining = M.clamp_remaining(limit - after, limit),
                retry = retry,
                reset = reset,
                new = write and kept or nil,
                expires_at = expires_at,
            }
        end

        -- fields.rs decode_fixed / decode_sliding over the fields the module reads for the mode:
        -- FIXED reads start, count, previous (counts only without count); SLIDING start, counts
        -- (count and previous only without counts).
        function M.decode_fixed(f)
            local start, count, counts, previous = f[3], f[4], f[5], f[6]
            if count then
                counts = nil
            end
            if counts or previous then
                M.fail(M.errors().sliding_not_fixed)
            end
            if not start and not count then
                return nil
            end
            local s = start and M.parse_number(start)
            if not M.valid_time(s) then
                M.fail(M.errors().corrupt.start)
            end
            local c = count and M.parse_number(count)
            if not M.valid_count(c) then
                M.fail(M.errors().corrupt.count)
            end
            return { start = s, count = c }
        end

        function M.parse_counts(text)
            local space = sfind(text, ' ', 1, true)
            if not space then
                return nil
            end
            local c = M.parse_number(ssub(text, 1, space - 1))
            local p = M.parse_number(ssub(text, space + 1))
            if c and p and M.valid_count(c) and M.valid_count(p) then
                return c, p
            end
            return nil
        end

        -- Returns the state (or nil) and whether it is stored split (start, count, previous).
        function M.decode_sliding(f)
            local start, count, counts, previous = f[3], f[4], f[5], f[6]
            if counts then
                local s = start and M.parse_number(start)
                if not M.valid_time(s) then
                    M.fail(M.errors().corrupt.start)
                end
                local c, p = M.parse_counts(counts)
                if c == nil then
                    M.fail(M.errors().corrupt.counts)
                end
                return { start = s, count = c, previous = p }, false
            end
            if not count and not previous then
                if start then
                    M.fail(M.errors().corrupt.counts)
                end
                return nil, false
            end
            if not start and not count then
                M.fail(M.errors().corrupt.start)
            end
            local s = start and M.parse_number(start)
            if not M.valid_time(s) then
                M.fail(M.errors().corrupt.start)
            end
            local c = count and M.parse_number(count)
            if not M.valid_count(c) then
                M.fail(M.errors().corrupt.count)
            end
            if not previous then
                M.fail(M.errors().fixed_not_sliding)
            end
            local p = M.parse_number(previous)
            if not M.valid_count(p) then
                M.fail(M.errors().corrupt.previous)
            end
            return { start = s, count = c, previous = p }, true
        end

        -- commands/window.rs counter: FIXED and SLIDING, a small hash.
        function M.counter(key, clock, mode, limit, window, n)
            local f, exists = M.read_hash(key)
            M.check_owner('window', f, exists)
            local now = clock.now
            local d, fields, split = nil, {}, false
            if mode == 'FIXED' then
                local old = M.decode_fixed(f)
                d = M.fixed(limit, window, n, now, old)
                if d.new then
                    if old == nil or old.start ~= d.new.start then
                        fields[#fields + 1] = 'start'
                        fields[#fields + 1] = M.fmt(d.new.start)
                    end
                    if old == nil or old.count ~= d.new.count then
                        fields[#fields + 1] = 'count'
                        fields[#fields + 1] = M.fmt(d.new.count)
                    end
                end
            else
                local old
                old, split = M.decode_sliding(f)
                d = M.sliding(limit, window, n, now, old)
                local s = d.new
                if s then
                    if old == nil or old.start ~= s.start then
                        fields[#fields + 1] = 'start'
                        fields[#fields + 1] = M.fmt(s.start)
                    end
                    if split or old == nil or old.count ~= s.count or old.previous ~= s.previous then
                        fields[#fields + 1] = 'counts'
                        fields[#fields + 1] = M.fmt(s.count) .. ' ' .. M.fmt(s.previous)
                    end
                end
            end
            if d.new then
                if #fields > 0 then
                    rcall('HSET', key, unpack(fields))
                end
                if split then
                    rcall('HDEL', key, 'count', 'previous')
                end
                M.expire(key, exists, d.expires_at - now)
            end
            return d
        end

        local MODES = { FIXED = true, SLIDING = true, LOG = true }

        function M.cmd_window(keys, args, o)
            M.single_key(keys, 'tb.window')
            local count = #args - o
            if count < 3 or count > 5 then
                M.arity('tb.window')
            end
            local now_at, mode = nil, 'SLIDING'
            if count == 4 then
                local word = string.upper(args[o + 4])
                if MODES[word] then
                    mode = word
                else
                    now_at = o + 4
                end
            elseif count == 5 then
                now_at = o + 4
                mode = string.upper(args[o + 5])
                if not MODES[mode] then
                    M.fail(M.errors().mode)
                end
            end
            local limit = M.number(args[o + 1], 'limit')
            if not (limit > 0 and limit <= MAX_AMOUNT) then
                M.fail(M.errors().range.limit)
            end
            local window = M.number(args[o + 2], 'window')
            if not (window >= MIN_WINDOW and window <= MAX_WINDOW) then
                M.fail(M.errors().range.window)
            end
            local n = M.number(args[o + 3], 'n')
            if not (n >= 0 and n <= MAX_AMOUNT) then
                M.fail(M.errors().range.n)
            end
            local now_text = now_at and args[now_at] or nil
            local now = M.parse_now(now_text)
            if mode == 'LOG' then
                if limit ~= floor(limit) or n ~= floor(n) then
                    M.fail(M.errors().log_whole)
                end
                if limit > LOG_MAX_LIMIT then
                    M.fail(M.errors().log_limit)
                end
                if n > LOG_MAX_N then
                    M.fail(M.errors().log_n)
                end
            end
            n = n + 0
            local clock = M.make_clock(now, now_text, keys)
            local d
            if mode == 'LOG' then
                if not M.log_part_done then
                    M.log_part()
                    M.log_part_done = true
                end
                d = M.log_command(keys[1], clock, limit, window, n)
            else
                d = M.counter(keys[1], clock, mode, limit, window, n)
            end
            M.round(clock, d)
            return M.decision_reply(d)
        end
    end

    function M.log_part()
        -- LOG (window.rs log, store_log.rs). Scores are whole microseconds; members `<score>-<k>`.

        function M.log_score(t)
            local whole = floor(t)
            return whole * 1e6 + M.round_pos((t - whole) * 1e6)
        end

        function M.log_time(score)
            return score / 1e6
        end

        function M.log_tick(t)
            return M.log_time(M.log_score(t))
        end

        function M.log_score_at_or_before(t)
            local m = M.log_score(t)
            for _ = 1, 4 do
                if M.log_time(m) > t then
                    m = m - 1
                elseif m + 1 ~= m and M.log_time(m + 1) <= t then
                    m = m + 1
                else
                    return m
                end
            end
            return t * 1e6 - (abs(t) * 1e6 * 1e-12 + 1)
        end

        function M.clamp_entry(e)
            if e < 0 then
                return 0
            elseif e > MAX_TIME then
                return MAX_TIME
            end
            return e
        end

        function M.is_log_entry(member, score)
            local prefix = M.fmt_whole(score)
            local plen = #prefix
            if ssub(member, 1, plen) ~= prefix or sbyte(member, plen + 1) ~= 45 then
                return false
            end
            local k = ssub(member, plen + 2)
            return #k > 0 and #k <= 20 and sfind(k, '^%d+$') ~= nil and (#k == 1 or sbyte(k, 1) ~= 48)
        end

        function M.is_lease_member(member)
            return #member == 22 and sfind(member, '^lease:[0-9a-f]+$') ~= nil
        end

        -- A LOG key read as the module reads it: lazily from the oldest entry up, in passes over
        -- score ranges, and the newest on its own. Entries are fetched from Redis in chunks, but a
        -- member is checked (a LOG entry? a valid time? a lease?) only when the module's reading
        -- would have read it, so a sorted set of someone else's is refused exactly when the module
        -- refuses it.
        local Log = {}
        Log.__index = Log

        function M.open_log(key)
            local count = rpcall('ZCARD', key)
            if type(count) == 'table' then
                M.fail(M.errors().wrongtype)
            end
            local L = setmetatable({
                key = key, count = count, exists = count > 0,
                members = {}, scores = {}, fetched = 0,
                nread = 0, read_up_to = -INF, active = false, pass_hi = -INF, done = false,
                newest_known = count == 0, newest = nil, not_after = nil,
                checked = false, corrupt = false, foreign = false, leases = false,
            }, Log)
            return L
        end

        -- The score of the i-th oldest entry (1-based), fetching a chunk when needed.
        function Log:score_at(i)
            if i > self.count then
                return nil
            end
            if i > self.fetched then
                local stop = self.fetched * 2
                if stop < i then
                    stop = i
                end
                if stop < 16 then
                    stop = 16
                end
                local r = rcall('ZRANGE', self.key, self.fetched, stop - 1, 'WITHSCORES')
                for j = 1, #r, 2 do
                    self.fetched = self.fetched + 1
                    self.members[self.fetched] = r[j]
                    self.scores[self.fetched] = tonumber(r[j + 1])
                end
            end
            return self.scores[i]
        end

        function Log:check(member, score)
            self.checked = true
            local t = M.log_time(score)
            if not ((t >= 0 and t < MAX_TIME) or t == MAX_TIME) then
                self.corrupt = true
            end
            if M.is_lease_member(member) or (member == 'redis-tb:leases' and score == -1) then
                self.leases = true
            elseif not M.is_log_entry(member, score) then
                self.foreign = true
            end
        end

        function Log:passed(hi)
            if hi == INF then
                self.done = true
            elseif hi > self.read_up_to then
                self.read_up_to = hi
            end
        end

        -- store_log.rs read_while: entries from the oldest up, none above `hi` unless a pass is
        -- under way, while more(self) holds.
        function Log:read_while(hi, more)
            if not self.exists then
                return
            end
            while not self.done and more(self) do
                if not self.active then
                    if self.read_up_to >= hi then
                        return
                    end
                    local s = self:score_at(self.nread + 1)
                    if s == nil or s > hi then
                        self:passed(hi)
                    else
                        self.active = true
                        self.pass_hi = hi
                    end
                end
                if self.active then
                    local i = self.nread + 1
                    self:score_at(i)
                    self:check(self.members[i], self.scores[i])
                    self.nread = i
                    local nxt = self:score_at(i + 1)
                    if nxt == nil or nxt > self.pass_hi then
                        self.active = false
                        self:passed(self.pass_hi)
                    end
                end
            end
        end

        function Log:end_front_pass()
            if not self.active then
                return
            end
            self.active = false
            self.nread = 0
            self.read_up_to = -INF
        end

        function Log:read_newest_above(lo)
            self:end_front_pass()
            if self.count == 0 then
                return nil
            end
            if not self.last then
                local r = rcall('ZRANGE', self.key, -1, -1, 'WITHSCORES')
                self.last = { r[1], tonumber(r[2]) }
            end
            local score = self.last[2]
            if lo > -INF and not (score > lo) then
                return nil
            end
            self:check(self.last[1], score)
            return score
        end

        function Log:newest_entry()
            if self.newest_known then
                return self.newest and M.log_time(self.newest)
            end
            local s = self:read_newest_above(-INF)
            self.newest_known, self.newest = true, s
            return s and M.log_time(s)
        end

        function Log:newest_after(t)
            if self.newest_known then
                if self.newest and M.log_time(self.newest) > t then
                    return M.log_time(self.newest)
                end
                return nil
            end
            if self.not_after and t >= self.not_after then
                return nil
            end
            local s = self:read_newest_above(M.log_score_at_or_before(t))
            if s == nil then
                self.not_after = t
                return nil
            end
            self.newest_known, self.newest = true, s
            local lt = M.log_time(s)
            return lt > t and lt or nil
        end

        function M.time_of(score)
            return M.clamp_entry(M.log_time(score))
        end

        function Log:count_up_to(t)
            local hi = t * 1e6 * (1 + 1e-12) + 1
            if hi < -0.5 then
                hi = -0.5
            end
            self:read_while(hi, function(L)
                return L.nread == 0 or M.time_of(L.scores[L.nread]) <= t
            end)
            local c = 0
            while c < self.nread and M.time_of(self.scores[c + 1]) <= t do
                c = c + 1
            end
            return c
        end

        function Log:nth(i) -- 0-based, as the module's
            self:read_while(INF, function(L)
                return L.nread <= i
            end)
            if i < self.nread then
                return M.log_time(self.scores[i + 1])
            end
            return nil
        end

        -- finish_reading: the oldest is checked when the call read none; leases, then a corrupt
        -- score, then a foreign member refuse the call.
        function Log:finish()
            if not self.checked and self.exists then
                self:score_at(1)
                self:check(self.members[1], self.scores[1])
            end
            if self.leases then
                M.fail(M.errors().leases_not_window)
            elseif self.corrupt then
                M.fail(M.errors().corrupt_log)
            elseif self.foreign then
                M.fail(M.errors().not_log)
            end
        end

        function M.log_view(window, now, L)
            local at = L:newest_after(now)
            if at == nil then
                at = now
            else
                at = M.clamp_entry(at)
                if now > at then
                    at = now
                end
            end
            local cutoff = at - window
            local first_live = L:count_up_to(cutoff)
            local live = L.count - first_live
            if live < 0 then
                live = 0
            end
            return at, cutoff, first_live, live
        end

        -- window.rs log.
        function M.log(limit, window, n, now, L)
            local cap = floor(limit < 0 and 0 or (limit > MAX_AMOUNT and MAX_AMOUNT or limit))
            local at, _, first_live, live = M.log_view(window, M.log_tick(now), L)
            local allowed = n <= cap and live + n <= cap
            local write = allowed and n > 0
            local add = write and n or 0
            local removed = write and first_live or 0
            local used = live + add
            local retry
            if allowed then
                retry = 0
            elseif n > cap then
                retry = -1
            else
                local k = live + n - cap
                if k < 0 then
                    k = 0
                end
                local leaving = L:nth(first_live + k - 1)
                leaving = leaving and M.clamp_entry(leaving) or at
                retry = M.settle_wait(now, leaving + window - now, function(t)
                    local _, _, _, lv = M.log_view(window, M.log_tick(t), L)
                    return lv + n <= cap
                end)
            end
            local newest = at
            if not write then
                local e = L:newest_entry()
                newest = e and M.clamp_entry(e) or at
            end
            local function out(t)
                local tick = M.log_tick(t)
                if newest > tick then
                    tick = newest
                end
                return newest <= tick - window
            end
            local reset = 0
            if used > 0 then
                reset = M.settle_wait(now, newest + window - now, out)
            end
            local left = L.count - removed > 0 or add > 0
            return {
                allowed = allowed,
                remaining = cap - used > 0 and cap - used or 0,
                retry = retry,
                reset = reset,
                removed = removed,
                add = add,
                expires_at = left and M.settle_wait(0, newest + window, out) or now,
            }
        end

        -- commands/window.rs log + LogKey::write: ZREM the entries that left, ZADD `add` members
        -- `<score>-<k>` numbered from the log's size after the removal.
        function M.log_command(key, clock, limit, window, n)
            local L = M.open_log(key)
            local now = clock.now
            local d = M.log(limit, window, n, now, L)
            L:finish()
            if d.add > 0 or d.removed > 0 then
                local now_score = M.log_score(now)
                local score = now_score
                if L.newest_known and L.newest and L.newest > now_score then
                    score = L.newest
                end
                local removed = d.removed
                if removed > L.nread then
                    removed = L.nread
                end
                for i = 1, removed, CHUNK do
                    local stop = i + CHUNK - 1
                    if stop > removed then
                        stop = removed
                    end
                    rcall('ZREM', key, unpack(L.members, i, stop))
                end
                local first = L.count - d.removed
                local score_text = M.fmt_whole(score)
                local args = {}
                for k = first, first + d.add - 1 do
                    args[#args + 1] = score_text
                    args[#args + 1] = score_text .. '-' .. sfmt('%.0f', k)
                    if #args >= 2 * CHUNK then
                        rcall('ZADD', key, unpack(args))
                        args = {}
                    end
                end
                if #args > 0 then
                    rcall('ZADD', key, unpack(args))
                end
                M.expire(key, L.exists, d.expires_at - now)
            end
            return d
        end
    end

    function M.lease_part()
        -- Leases and holds (lease.rs, hold.rs, store_lease.rs, commands/lease.rs and hold.rs). Times
        -- are the server's whole microseconds (M.lease_clock); expiries whole milliseconds.
        if not M.bucket_part_done then
            M.bucket_part()
            M.bucket_part_done = true
        end
        local MAX_LIMIT, MAX_LEASE_MS, MAX_HOLDS, MAX_KEYS = 10000, 31536000000, 100, 64
        local MARKER = 'redis-tb:leases'
        local MAX_EXPIRY_MS = 253402300800000 + MAX_LEASE_MS

        -- The script's own arguments after the module's: `ID <16 hex digits>` (TB.ACQUIRE and
        -- TB.HOLD: the id a grant gets, drawn by the client from its CSPRNG) and `NOW <seconds>`
        -- (read only where TIME is refused). Returns the index of the module's last argument.
        function M.tail(args, o)
            local last = #args
            local id, now
            if last - 1 > o and string.upper(args[last - 1]) == 'NOW' then
                now, last = args[last], last - 2
            end
            if last - 1 > o and string.upper(args[last - 1]) == 'ID' then
                id, last = args[last], last - 2
            end
            return last, id, now
        end

        -- parse/lease.rs whole: any text of the number grammar whose value is whole, in [1, max].
        function M.whole(text, max)
            local v = M.parse_number(text)
            if v and v == floor(v) and v >= 1 and v <= max then
                return v
            end
            return nil
        end

        -- lease.rs parse_id: 16 hex digits, either case; the member's lowercase text.
        function M.parse_id(text)
            if #text == 16 and sfind(text, '^%x+$') then
                return string.lower(text)
            end
            return nil
        end

        -- The client's id for a grant (checked after the module's own arguments).
        function M.client_id(text)
            local id = text and M.parse_id(text)
            if not id then
                M.fail(M.errors().id)
            end
            return id
        end

        function M.valid_expiry(s)
            if s and s == floor(s) and s >= 0 and s <= MAX_EXPIRY_MS then
                return s
            end
            return nil
        end

        function M.is_lease(member)
            return #member == 22 and sfind(member, '^lease:[0-9a-f]+$') ~= nil
        end

        -- The call's clock (a server-clock Clock of commands/mod.rs) in whole microseconds: TIME;
        -- where TIME is refused, the server's millisecond from the first key with a TTL (the
        -- client's NOW inside it, else its last microsecond); else the client's NOW, unbounded
        -- (README.md). A call that writes nothing on missing keys needs no clock (0).
        function M.lease_clock(keys, now_text, creates)
            local now = M.parse_now(now_text)
            local micros = M.server_micros()
            if micros then
                return micros
            end
            local any = false
            for i = 1, #keys do
                local ms = M.key_clock_ms(keys[i])
                if ms then
                    local lo, hi = ms * 1000, ms * 1000 + 999
                    local us = hi
                    if now then
                        us = floor(now * 1e6)
                        us = us < lo and lo or (us > hi and hi or us)
                    end
                    return us
                end
                any = any or rcall('EXISTS', keys[i]) == 1
            end
            if now then
                return floor(now * 1e6)
            end
            if creates or any then
                M.fail(M.errors().no_time_lease)
            end
            return 0
        end

        -- A server-clock Clock for the bucket functions.
        function M.micros_clock(micros)
            local secs = floor(micros / 1e6)
            return { now = micros / 1e6, text = sfmt('%.0f.%06.0f', secs, micros - secs * 1e6), server = true }
        end

        ---------------------------------------------------------------------------------------------
        -- The lease key (store_lease.rs LeaseKey)

        -- Opens a lease key: WRONGTYPE for another type; a set without the marker first is
        -- refused unless every member is a lease (a key from before the marker, adopted).
        function M.open_leases(key)
            local n = rpcall('ZCARD', key)
            if type(n) ~= 'number' then
                M.fail(M.errors().wrongtype)
            end
            local L = { key = key, exists = n > 0, count = 0, marked = false }
            if n == 0 then
                return L
            end
            -- store_lease.rs has_marker: the marker at its score, looked up by member.
            L.marked = tonumber(rcall('ZSCORE', key, MARKER)) == -1
            if not L.marked then
                if n > MAX_LIMIT then
                    M.fail(M.errors().not_leases)
                end
                local all = rcall('ZRANGE', key, 0, -1, 'WITHSCORES')
                for i = 1, #all, 2 do
                    if not (M.valid_expiry(tonumber(all[i + 1])) and M.is_lease(all[i])) then
                        M.fail(M.errors().not_leases)
                    end
                end
            end
            L.count = n - (L.marked and 1 or 0)
            return L
        end

        -- LeaseKey::front: from score 0 up, the expired leases (members), the expiries of the
        -- first k live ones and the first live one ({member, expiry}); every member read is
        -- checked, and reading stops after max(k, 1) live ones, as the module's does.
        function M.lease_front(L, now_ms, k)
            local F = { expired = {}, live = {}, first = nil }
            if not L.exists then
                return F
            end
            local want = k > 1 and k or 1
            local seen, offset, chunk = 0, 0, 16
            while true do
                local r = rcall('ZRANGE', L.key, 0, '+inf', 'BYSCORE', 'LIMIT', offset, chunk, 'WITHSCORES')
                for i = 1, #r, 2 do
                    local m = r[i]
                    local e = M.valid_expiry(tonumber(r[i + 1]))
                    if not (e and M.is_lease(m)) then
                        M.fail(M.errors().not_leases)
                    end
                    if e <= now_ms then
                        F.expired[#F.expired + 1] = m
                    else
                        seen = seen + 1
                        if #F.live < k then
                            F.live[#F.live + 1] = e
                        end
                        if F.first == nil then
                            F.first = { m, e }
                        end
                        if seen >= want then
                            return F
                        end
                    end
                end
                if #r < 2 * chunk then
                    return F
                end
                offset = offset + chunk
                chunk = chunk * 2
            end
        end

        -- LeaseKey::remove: the expired leases and `extra`. The marker stays when the last
        -- lease goes: the key, then the marker alone, lives out its TTL, as the module's does.
        function M.lease_remove(L, expired, extra)
            local members = {}
            for i = 1, #expired do
                members[i] = expired[i]
            end
            if extra then
                members[#members + 1] = extra
            end
            if #members == 0 then
                return
            end
            local left = L.count - #members
            L.count = left > 0 and left or 0
            for i = 1, #members, CHUNK do
                local stop = i + CHUNK - 1
                rcall('ZREM', L.key, unpack(members, i, stop < #members and stop or #members))
            end
        end

        -- LeaseKey::fit_expiry (lease.rs shrunk_expiry): a TTL more than two slacks beyond the
        -- latest lease left is brought back to one.
        function M.lease_fit(L, now_ms)
            local last = rpcall('ZRANGE', L.key, -1, -1, 'WITHSCORES')
            if type(last) ~= 'table' or last.err or #last == 0 then
                return
            end
            local latest = M.valid_expiry(tonumber(last[2]))
            local at = rcall('PEXPIRETIME', L.key)
            if latest == nil or at < 0 then
                return
            end
            local slack = floor((latest > now_ms and latest - now_ms or 0) / 4) + 1000
            local target = latest + slack
            if at > target + slack then
                rcall('PEXPIREAT', L.key, sfmt('%.0f', target))
            end
        end

        -- lease.rs key_expiry, absolute: the key outlives the lease with a slack.
        function M.cover_expiry(key, current, expiry, ms)
            if current >= 0 and current >= expiry then
                return
            end
            rcall('PEXPIREAT', key, sfmt('%.0f', expiry + floor(ms / 4) + 1000))
        end

        -- LeaseKey::put: the lease (new, or moved when `update`), the marker with a key's first
        -- write, then the key's expiry.
        function M.lease_put(L, member, expiry, lease_ms, update)
            local score = sfmt('%.0f', expiry)
            if update then
                if not L.marked then
                    rcall('ZADD', L.key, 'NX', -1, MARKER)
                end
                rcall('ZADD', L.key, 'XX', score, member)
            else
                if L.marked then
                    rcall('ZADD', L.key, score, member)
                else
                    rcall('ZADD', L.key, -1, MARKER, score, member)
                end
                L.count = L.count + 1
            end
            L.marked = true
            M.cover_expiry(L.key, rcall('PEXPIRETIME', L.key), expiry, lease_ms)
        end

        -- The expiry of lease `member` if it is held and live (a score that is not an expiry:
        -- refused, as LeaseKey::expiry_of refuses it).
        function M.live_lease(L, F, member, now_ms)
            if F.first and F.first[1] == member then
                return F.first[2]
            end
            if not L.exists then
                return nil
            end
            local s = rcall('ZSCORE', L.key, member)
            if not s then
                return nil
            end
            local e = M.valid_expiry(tonumber(s))
            if e == nil then
                M.fail(M.errors().not_leases)
            end
            return e > now_ms and e or nil
        end

        -- Opens a lease key and reads what every writing call needs.
        function M.open_reclaiming(key, now_ms, k_of)
            local L = M.open_leases(key)
            local F = M.lease_front(L, now_ms, k_of(L.count))
            local live = L.count - #F.expired
            return L, F, live > 0 and live or 0
        end

        function M.needed_earliest(limit, live)
            if live < limit then
                return 0
            end
            return live - limit + 1
        end

        -- lease.rs acquire.
        function M.acquire(limit, lease_ms, live, earliest, now_us)
            local now_ms = floor(now_us / 1000)
            if live < limit then
                local expiry = ceil(now_us / 1000) + lease_ms
                return { granted = true, in_flight = live + 1, expiry = expiry, ms = expiry - now_ms }
            end
            local k = M.needed_earliest(limit, live)
            local e = earliest[k > 1 and k or 1] or earliest[#earliest]
            local ms = 0
            if e then
                ms = e > now_ms and e - now_ms or 0
            end
            return { granted = false, in_flight = live, ms = ms }
        end

        -- bucket.rs aggregate.
        function M.aggregate(each)
            local allowed, never, retry, reset, remaining = true, false, 0, 0, nil
            for _, d in ipairs(each) do
                allowed = allowed and d.allowed
                never = never or d.retry < 0
                if d.retry > retry then
                    retry = d.retry
                end
                if d.reset > reset then
                    reset = d.reset
                end
                if remaining == nil or d.remaining < remaining then
                    remaining = d.remaining
                end
            end
            if allowed then
                retry = 0
            elseif never then
                retry = -1
            end
            return { allowed = allowed, remaining = remaining or 0, retry = retry, reset = reset }
        end

        -- lease.rs acquire_with_buckets: the slot and every bucket, all or nothing.
        function M.acquire_with_buckets(limit, lease_ms, live, earliest, now_us, now, parts)
            local slot = M.acquire(limit, lease_ms, live, earliest, now_us)
            local total, each = M.take_all(parts, now)
            if not total.allowed and slot.granted then
                slot = { granted = false, in_flight = live, ms = 0 }
            end
            if not slot.granted and total.allowed then
                for i, p in ipairs(parts) do
                    each[i] = M.report(p.cap, p.rate, p.n, now, p.st)
                end
                total = M.aggregate(each)
            end
            return slot, total, each
        end

        ---------------------------------------------------------------------------------------------
        -- Lease commands

        -- TB.ACQUIRE key limit lease_ms [TAKE numkeys key... capacity rate n...]: KEYS are the
        -- lease key and the buckets; ARGV limit lease_ms [TAKE capacity rate n...] ID id [NOW t].
        function M.cmd_acquire(keys, args, o)
            local last, id_text, now_text = M.tail(args, o)
            local count = last - o
            if #keys < 1 or count < 2 then
                M.arity('tb.acquire')
            end
            local limit = M.whole(args[o + 1], MAX_LIMIT)
            if not limit then
                M.fail(M.errors().lease_limit)
            end
            local lease_ms = M.whole(args[o + 2], MAX_LEASE_MS)
            if not lease_ms then
                M.fail(M.errors().lease_ms)
            end
            local nb = #keys - 1
            local parts = {}
            if count > 2 or nb > 0 then
                if count < 3 or string.upper(args[o + 3]) ~= 'TAKE' or nb == 0 then
                    M.fail(M.errors().take_syntax)
                end
                if nb > MAX_KEYS then
                    M.fail(M.errors().too_many_keys)
                end
                if count - 3 ~= 3 * nb then
                    M.fail(M.errors().take_syntax)
                end
                for i = 1, nb do
                    local base = o + 3 + 3 * (i - 1)
                    local cap, rate = M.parse_limit(args[base + 1], args[base + 2])
                    parts[i] = { cap = cap, rate = rate, n = M.parse_n(args[base + 3]) }
                end
                local seen = {}
                for i = 1, #keys do
                    if seen[keys[i]] then
                        M.fail(M.errors().take_duplicate)
                    end
                    seen[keys[i]] = true
                end
            end
            local id = M.client_id(id_text)
            local now_us = M.lease_clock(keys, now_text, true)
            local now_ms = floor(now_us / 1000)
            local clock = M.micros_clock(now_us)
            local L, F, live = M.open_reclaiming(keys[1], now_ms, function(c)
                return M.needed_earliest(limit, c)
            end)
            local earliest = {}
            for i = 1, M.needed_earliest(limit, live) do
                earliest[i] = F.live[i]
            end
            local buckets = {}
            for i = 1, nb do
                buckets[i] = M.open_bucket(keys[i + 1])
            end
            for i = 1, nb do
                parts[i].st = M.read_bucket(buckets[i])
            end
            local member = 'lease:' .. id
            local slot, total, each = M.acquire_with_buckets(limit, lease_ms, live, earliest, now_us, clock.now,
                parts)
            if slot.granted and L.exists then
                -- The client's id must not be held already (an expired one is reclaimed below).
                local s = rcall('ZSCORE', L.key, member)
                local e = s and M.valid_expiry(tonumber(s))
                if s and not (e and e <= now_ms) then
                    M.fail(M.errors().id_taken)
                end
            end
            M.lease_remove(L, F.expired, nil)
            if slot.granted then
                M.lease_put(L, member, slot.expiry, lease_ms, false)
            elseif #F.expired > 0 then
                M.lease_fit(L, now_ms)
            end
            M.round(clock, total)
            local texts = {}
            for i, d in ipairs(each) do
                M.round(clock, d)
                texts[i] = M.fmt(d.remaining)
            end
            for i, d in ipairs(each) do
                M.store_bucket(buckets[i], d, texts[i], clock)
            end
            local reply = { slot.granted and 1 or 0, slot.in_flight, slot.granted and id or false, slot.ms }
            if nb > 0 then
                reply[5] = M.decision_reply(total)
                local per = {}
                for i, d in ipairs(each) do
                    per[i] = M.decision_reply(d, texts[i])
                end
                reply[6] = per
            end
            return reply
        end

        -- TB.RELEASE key lease_id [NOW t] -> [released, in_flight].
        function M.cmd_release(keys, args, o)
            M.single_key(keys, 'tb.release')
            local last, _, now_text = M.tail(args, o)
            if last - o ~= 1 then
                M.arity('tb.release')
            end
            local id = M.parse_id(args[o + 1])
            if not id then
                M.fail(M.errors().lease_id)
            end
            local now_ms = floor(M.lease_clock(keys, now_text, false) / 1000)
            local L, F, live = M.open_reclaiming(keys[1], now_ms, function()
                return 0
            end)
            local member = 'lease:' .. id
            local held = M.live_lease(L, F, member, now_ms) ~= nil
            if held or #F.expired > 0 then
                M.lease_remove(L, F.expired, held and member or nil)
                M.lease_fit(L, now_ms)
            end
            return { held and 1 or 0, live - (held and 1 or 0) }
        end

        -- TB.RENEW key id ms [NOW t]: a lease on a sorted set, a hold on a bucket's hash.
        function M.cmd_renew(keys, args, o)
            M.single_key(keys, 'tb.renew')
            local last, _, now_text = M.tail(args, o)
            if last - o ~= 2 then
                M.arity('tb.renew')
            end
            local id = M.parse_id(args[o + 1])
            if not id then
                M.fail(M.errors().lease_id)
            end
            local lease_ms = M.whole(args[o + 2], MAX_LEASE_MS)
            if not lease_ms then
                M.fail(M.errors().lease_ms)
            end
            local now_us = M.lease_clock(keys, now_text, false)
            local now_ms = floor(now_us / 1000)
            if type(rpcall('ZCARD', keys[1])) ~= 'number' and rcall('TYPE', keys[1]).ok == 'hash' then
                return M.renew_hold(keys[1], id, lease_ms, now_us)
            end
            local L, F, live = M.open_reclaiming(keys[1], now_ms, function()
                return 0
            end)
            local member = 'lease:' .. id
            local current = M.live_lease(L, F, member, now_ms)
            local renewed = current and ceil(now_us / 1000) + lease_ms
            M.lease_remove(L, F.expired, nil)
            if renewed then
                M.lease_put(L, member, renewed, lease_ms, true)
            elseif #F.expired > 0 then
                M.lease_fit(L, now_ms)
            end
            local ms = 0
            if renewed then
                ms = renewed > now_ms and renewed - now_ms or 0
            end
            return { renewed and 1 or 0, live, ms }
        end

        -- TB.PEEK key LEASES -> [in_flight, ms until the earliest live lease expires]. Reads only.
        function M.peek_leases(keys, now_text)
            local now_ms = floor(M.lease_clock(keys, now_text, false) / 1000)
            local L = M.open_leases(keys[1])
            local F = M.lease_front(L, now_ms, 1)
            local live = L.count - #F.expired
            local ms = 0
            if F.live[1] then
                ms = F.live[1] > now_ms and F.live[1] - now_ms or 0
            end
            return { live > 0 and live or 0, ms }
        end

        ---------------------------------------------------------------------------------------------
        -- Holds (hold.rs): the bucket hash's `holds` field, `<id>:<amount>:<expiry ms>` by spaces.

        -- hold.rs parse_holds: a list of records ({ id, a, e, et }), or nil when corrupt. Ids are
        -- read as u64::from_str_radix reads 16 characters (a leading '+' included) and kept as
        -- format_holds writes them back (16 lowercase digits); expiries as u64 digits.
        function M.parse_holds(text)
            local out = {}
            for item in string.gmatch(text, '[^ ]+') do
                local id, amount, expiry = smatch(item, '^([^:]*):([^:]*):([^:]*)$')
                if not id or #id ~= 16 then
                    return nil
                end
                if sbyte(id, 1) == 43 then
                    id = '0' .. ssub(id, 2)
                end
                if not sfind(id, '^%x+$') then
                    return nil
                end
                local a = M.parse_number(amount)
                if not (a and a > 0 and a <= MAX_AMOUNT) then
                    return nil
                end
                if not sfind(expiry, '^%d+$') then
                    return nil
                end
                local et = smatch(expiry, '^0*(%d-)$')
                if et == '' then
                    et = '0'
                end
                if #et > 20 or (#et == 20 and et > '18446744073709551615') then
                    return nil
                end
                out[#out + 1] = { id = string.lower(id), a = a, e = tonumber(et), et = et }
                if #out > MAX_HOLDS then
                    return nil
                end
            end
            return out
        end

        function M.format_holds(holds)
            local parts = {}
            for i, h in ipairs(holds) do
                parts[i] = h.id .. ':' .. M.fmt(h.a) .. ':' .. h.et
            end
            return table.concat(parts, ' ')
        end

        -- A bucket opened and read (owner and corrupt checks), with its holds.
        function M.open_holds(key)
            local b = M.open_bucket(key)
            local st = M.read_bucket(b)
            local all = {}
            if b.existed then
                local text = rcall('HGET', key, 'holds')
                if text then
                    all = M.parse_holds(text)
                    if all == nil then
                        M.fail(M.errors().corrupt_holds)
                    end
                end
            end
            return b, st, all
        end

        function M.live_holds(all, now_ms)
            local live = {}
            for _, h in ipairs(all) do
                if h.e > now_ms then
                    live[#live + 1] = h
                end
            end
            return live
        end

        -- commands/hold.rs store_all: the holds when they changed, then the bucket's fields as
        -- TB.TAKE stores them, and a TTL that outlives the time to full and every hold.
        function M.store_holds(b, d, text, clock, holds, changed, now_ms)
            local latest = 0
            for _, h in ipairs(holds) do
                if h.e > latest then
                    latest = h.e
                end
            end
            local cover = (latest > now_ms and latest - now_ms or 0) / 1000
            if d.reset > cover then
                cover = d.reset
            end
            if changed then
                if #holds == 0 then
                    rcall('HDEL', b.key, 'holds')
                else
                    rcall('HSET', b.key, 'holds', M.format_holds(holds))
                end
            end
            if d.new then
                M.store_bucket(b, { new = d.new, reset = cover }, text, clock)
            elseif changed then
                M.expire(b.key, b.existed, cover)
            end
        end

        -- TB.HOLD key capacity rate estimate ttl_ms ID id [NOW t]
        --   -> [allowed, remaining, retry_after, reset_after, hold_id | nil].
        function M.cmd_hold(keys, args, o)
            M.single_key(keys, 'tb.hold')
            local last, id_text, now_text = M.tail(args, o)
            if last - o ~= 4 then
                M.arity('tb.hold')
            end
            local cap, rate = M.parse_limit(args[o + 1], args[o + 2])
            local estimate = M.parse_number(args[o + 3])
            if not (estimate and estimate > 0 and estimate <= MAX_AMOUNT) then
                M.fail(M.errors().estimate)
            end
            local ttl_ms = M.whole(args[o + 4], MAX_LEASE_MS)
            if not ttl_ms then
                M.fail(M.errors().ttl_ms)
            end
            local id = M.client_id(id_text)
            local now_us = M.lease_clock(keys, now_text, true)
            local now_ms = floor(now_us / 1000)
            local clock = M.micros_clock(now_us)
            local b, st, all = M.open_holds(keys[1])
            for _, h in ipairs(all) do
                if h.id == id then
                    M.fail(M.errors().id_taken)
                end
            end
            local live = M.live_holds(all, now_ms)
            -- hold.rs hold: at least one place's share of the bucket.
            local amount = estimate
            if cap / MAX_HOLDS > amount then
                amount = cap / MAX_HOLDS
            end
            local d, made
            if #live >= MAX_HOLDS then
                d = M.report(cap, rate, amount, clock.now, st)
                local place = nil
                for _, h in ipairs(live) do
                    if place == nil or h.e < place then
                        place = h.e
                    end
                end
                place = place and (place > now_ms and place - now_ms or 0) / 1000 or 0
                if d.retry >= 0 and place > d.retry then
                    d.retry = place
                end
                d.allowed = false
            else
                d = M.take(cap, rate, amount, clock.now, st)
                if d.new then
                    local e = ceil(now_us / 1000) + ttl_ms
                    made = { id = id, a = amount, e = e, et = sfmt('%.0f', e) }
                end
            end
            M.round(clock, d)
            local changed = made ~= nil or #live ~= #all
            if made then
                live[#live + 1] = made
            end
            local text = M.fmt(d.remaining)
            M.store_holds(b, d, text, clock, live, changed, now_ms)
            local reply = M.decision_reply(d, text)
            reply[5] = made and id or false
            return reply
        end

        -- TB.SETTLE key capacity rate hold_id actual [max_wait] [NOW t]
        --   -> [settled, remaining, charged, reset_after].
        function M.cmd_settle(keys, args, o)
            M.single_key(keys, 'tb.settle')
            local last, _, now_text = M.tail(args, o)
            local count = last - o
            if count ~= 4 and count ~= 5 then
                M.arity('tb.settle')
            end
            local cap, rate = M.parse_limit(args[o + 1], args[o + 2])
            local actual = M.parse_number(args[o + 4])
            if not (actual and actual >= 0 and actual <= MAX_AMOUNT) then
                M.fail(M.errors().actual)
            end
            actual = actual + 0
            local max_debt = MAX_AMOUNT
            if count == 5 then
                local w = M.number(args[o + 5], 'max_wait')
                if not (w >= 0) then
                    M.fail(M.errors().range.max_wait)
                end
                max_debt = (w + 0) * rate
                if max_debt > MAX_AMOUNT then
                    max_debt = MAX_AMOUNT
                end
            end
            local id = M.parse_id(args[o + 3])
            if not id then
                M.fail(M.errors().hold_id)
            end
            local now_us = M.lease_clock(keys, now_text, false)
            local now_ms = floor(now_us / 1000)
            local clock = M.micros_clock(now_us)
            local now = clock.now
            local b, st, all = M.open_holds(keys[1])
            local live = M.live_holds(all, now_ms)
            local found
            for i, h in ipairs(live) do
                if h.id == id then
                    found = i
                    break
                end
            end
            local d, charged
            if not found then
                d = M.report(cap, rate, 1, now, st)
                d.allowed, d.retry, charged = false, 0, 0
            else
                local hold = live[found]
                local effective = M.effective_time(st, now)
                local current = M.tokens_at(cap, rate, st, effective)
                local delta = actual - hold.a
                local floor_ = -(max_debt < 0 and 0 or max_debt)
                local tokens
                if delta < 0 then
                    tokens = current - delta
                    if tokens > cap then
                        tokens = cap
                    end
                    if current > tokens then
                        tokens = current
                    end
                else
                    tokens = current - delta
                    local lowest = floor_ < current and floor_ or current
                    if lowest > tokens then
                        tokens = lowest
                    end
                end
                local new = nil
                if tokens ~= current or st == nil then
                    new = { t = tokens, l = effective }
                end
                d = { allowed = true, remaining = tokens, retry = 0,
                    reset = M.wait_until(cap, rate, new or st, cap, now), new = new }
                charged = current - tokens
                table.remove(live, found)
            end
            M.round(clock, d)
            local text = M.fmt(d.remaining)
            M.store_holds(b, d, text, clock, live, #live ~= #all, now_ms)
            return { d.allowed and 1 or 0, text, M.fmt(charged), M.fmt(d.reset) }
        end

        -- TB.RENEW on a bucket's hash (commands/hold.rs renew) -> [renewed, live holds, ms left].
        function M.renew_hold(key, id, ttl_ms, now_us)
            local now_ms = floor(now_us / 1000)
            local b, _, all = M.open_holds(key)
            local live = M.live_holds(all, now_ms)
            local renewed
            for _, h in ipairs(live) do
                if h.id == id then
                    h.e = ceil(now_us / 1000) + ttl_ms
                    h.et = sfmt('%.0f', h.e)
                    renewed = h.e
                end
            end
            if renewed or #live ~= #all then
                if #live == 0 then
                    rcall('HDEL', key, 'holds')
                else
                    rcall('HSET', key, 'holds', M.format_holds(live))
                end
                local current = rcall('PEXPIRETIME', key)
                if renewed and current >= 0 then
                    M.cover_expiry(key, current, renewed, ttl_ms)
                end
            end
            local ms = 0
            if renewed then
                ms = renewed > now_ms and renewed - now_ms or 0
            end
            return { renewed and 1 or 0, #live, ms }
        end

        -- TB.PEEK key HOLDS -> [holds, amount held, ms until the earliest expires].
        function M.peek_holds(keys, now_text)
            local now_ms = floor(M.lease_clock(keys, now_text, false) / 1000)
            local f, exists = M.read_hash(keys[1])
            local b = { key = keys[1], existed = exists, f = f }
            M.read_bucket(b)
            local all = {}
            if exists then
                local text = rcall('HGET', keys[1], 'holds')
                if text then
                    all = M.parse_holds(text)
                    if all == nil then
                        M.fail(M.errors().corrupt_holds)
                    end
                end
            end
            local live = M.live_holds(all, now_ms)
            local amount, earliest = 0, nil
            for _, h in ipairs(live) do
                amount = amount + h.a
                if earliest == nil or h.e < earliest then
                    earliest = h.e
                end
            end
            local ms = 0
            if earliest then
                ms = earliest > now_ms and earliest - now_ms or 0
            end
            return { #live, M.fmt(amount), ms }
        end
    end

    ---------------------------------------------------------------------------------------------
    -- Entry

    -- Which part defines each command's handler.
    local PARTS = {
        TAKE = 'bucket_part',
        MTAKE = 'bucket_part',
        RESERVE = 'bucket_part',
        PEEK = 'bucket_part',
        REFUND = 'bucket_part',
        WINDOW = 'window_part',
        ACQUIRE = 'lease_part',
        RELEASE = 'lease_part',
        RENEW = 'lease_part',
        HOLD = 'lease_part',
        SETTLE = 'lease_part',
    }

    -- The handler of a command word (any case), its part defined first; nil for an unknown
    -- word.
    function M.handler(word)
        word = string.upper(word)
        local part = PARTS[word]
        if part == nil then
            return nil
        end
        if not M[part .. '_done'] then
            M[part]()
            M[part .. '_done'] = true
        end
        return M['cmd_' .. string.lower(word)]
    end

    return M
end

-- EVAL entry: everything above is the library (the Functions build ends it with functions.lua).
local lib = library()
local handler = lib.handler(ARGV[1] or '')
if handler == nil then
    return redis.error_reply('ERR unknown command word ' .. string.format('%q', ARGV[1] or '') ..
        ': the first argument is TAKE, MTAKE, RESERVE, PEEK, REFUND, WINDOW, ACQUIRE, RELEASE, RENEW, HOLD or SETTLE')
end
return lib.run(handler, KEYS, ARGV, 1)
