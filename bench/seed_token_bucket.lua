-- The design notes' own token bucket, verbatim: the Lua script of the seed's "Example"
-- section (../shared/seeds/000_*.txt, "-- token_bucket.lua" to the final `end`; its
-- comments are the notes' own, in Korean). A benchmark fixture: bench/bench.py loads it
-- with SCRIPT LOAD and times it as "the seed's own script" (issue 12), beside
-- bench/token_bucket.lua, the heavier script with TB.TAKE's exact semantics. Do not edit
-- below the line: it is measured as the notes have it.
--
--   EVALSHA <sha> 1 <key> <capacity> <refill_rate> <requested> <now>
--
-- Reply: { allowed (1/0), tokens left } (a Lua number in a reply is truncated to an
-- integer). It stores `tokens` and `last_refill_time` with HMSET (Lua numbers, so `now`
-- is stored as Redis formats a double, not as the caller's text) and sets
-- EXPIRE ceil(capacity / refill_rate) + 10 on every allowed call.
-- ------------------------------------------------------------------------------------
-- token_bucket.lua
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])  -- 초당 충전되는 토큰 수
local requested = tonumber(ARGV[3])    -- 소비할 토큰 수
local now = tonumber(ARGV[4])          -- 현재 타임스탬프 (초 단위)

-- Redis Hash 구조에서 이전 상태 조회
local bucket = redis.call('HMGET', key, 'tokens', 'last_refill_time')
local tokens = tonumber(bucket[1])
local last_refill_time = tonumber(bucket[2])

if not tokens then
    -- 최초 요청 시 버킷을 최대 용량으로 초기화
    tokens = capacity
    last_refill_time = now
else
    -- 경과 시간에 따른 토큰 충전 로직 적용
    local delta_time = math.max(0, now - last_refill_time)
    local refilled_tokens = delta_time * refill_rate
    tokens = math.min(capacity, tokens + refilled_tokens)
end

-- 토큰 차감 가능 여부 판별
if tokens >= requested then
    tokens = tokens - requested
    -- 토큰 차감 및 마지막 갱신 시간 저장 (HSET 원자적 실행)
    redis.call('HMSET', key, 'tokens', tokens, 'last_refill_time', now)
    
    -- [핵심] 메모리 낭비 방지를 위한 TTL 설정 (EXPIRE)
    -- 버킷이 완전히 채워지기까지 걸리는 시간 계산 후 여유 있게 만료 설정
    local ttl = math.ceil(capacity / refill_rate) + 10
    redis.call('EXPIRE', key, ttl)
    
    return {1, tokens} -- 1: 허용 (Allowed)
else
    -- 거부 시에는 토큰을 차감하지 않고 현재 남은 토큰만 반환
    return {0, tokens} -- 0: 거부 (Denied)
end
