-- The Functions build's entry: appended to tb.lua's library part (everything above its
-- "EVAL entry" line) after a `#!lua name=tb` line. One function per command, called without
-- the command word: FCALL tb_take 1 key capacity rate n [now]. tb_peek only reads, so it
-- is flagged no-writes (FCALL_RO, replicas). The library is built on the first call (a
-- library's load has no math or string) and kept.
local lib
local function register(name, word, flags)
    redis.register_function({
        function_name = name,
        callback = function(keys, args)
            lib = lib or library()
            return lib.run(lib.handler(word), keys, args, 0)
        end,
        flags = flags,
    })
end
register('tb_take', 'TAKE')
register('tb_mtake', 'MTAKE')
register('tb_reserve', 'RESERVE')
register('tb_peek', 'PEEK', { 'no-writes' })
register('tb_refund', 'REFUND')
register('tb_window', 'WINDOW')
register('tb_acquire', 'ACQUIRE')
register('tb_release', 'RELEASE')
register('tb_renew', 'RENEW')
register('tb_hold', 'HOLD')
register('tb_settle', 'SETTLE')
