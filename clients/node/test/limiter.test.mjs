// The core limiter's failure handling with its defaults: a 50 ms timeout per call, one
// attempt, a 1 s cool-down, one log line; the framework-neutral check().
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { RateLimiter, RedisTbTimeoutError, perMinute } from 'redis-tb';
import { CLIENTS, RedisServer, checkCalls, closeClient, memoryLogger, sleep } from './helpers.mjs';

let server;
before(async () => { server = await new RedisServer().start(); });
after(async () => { await server?.stop(); });

const ctx = { request: {}, peer: '198.51.100.7', header: () => [], route: 'GET /x' };

for (const [name, make] of CLIENTS) {
  test(`a paused server: timeout at 50 ms, one attempt, cool-down, one log line (${name})`, async () => {
    const redis = await make(server.port);
    const admin = await make(server.port);
    try {
      const log = memoryLogger();
      const limiter = new RateLimiter(redis, { policies: [perMinute('ip', 10)], logger: log });
      assert.deepEqual([limiter.timeoutMs, limiter.cooldownMs, limiter.failOpen], [50, 1000, true]);
      const calls0 = await checkCalls(admin);
      await (name === 'ioredis' ? admin.call('CLIENT', 'PAUSE', '1500', 'ALL') : admin.sendCommand(['CLIENT', 'PAUSE', '1500', 'ALL']));
      const d = await limiter.check(ctx);
      assert.equal(d.outcome, 'store_error');
      assert.equal(d.allowed, true);
      assert.ok(d.error instanceof RedisTbTimeoutError);
      const skipped = await limiter.check(ctx);
      assert.equal(skipped.outcome, 'store_error');
      assert.equal(skipped.error, undefined, 'skipped during the cool-down: no call made');
      assert.deepEqual([limiter.stats.storeErrors, limiter.stats.degraded], [1, 2]);
      assert.equal(log.lines.length, 1);
      assert.match(log.lines[0], /^redis-tb: TB\.TAKE on 127\.0\.0\.1:\d+ failed \(no answer within 50 ms\); failing open: requests pass unlimited, Redis skipped for 1 s; store errors so far: 1$/);
      let back;
      const until = Date.now() + 10_000;
      do {
        await sleep(200);
        back = await limiter.check(ctx);
      } while (back.outcome !== 'allowed' && Date.now() < until);
      assert.equal(back.outcome, 'allowed');
      assert.equal(back.results[0].key, 'rl:ip:198.51.100.7');
      // the timed-out call ran once when the pause ended: never retried
      const calls = (await checkCalls(admin)) - calls0;
      assert.equal(calls, 1 + limiter.stats.allowed + (limiter.stats.storeErrors - 1));
    } finally {
      await closeClient(redis);
      await closeClient(admin);
    }
  });
}

test('an error reply concerns one request: no cool-down', async () => {
  const redis = await CLIENTS[0][1](server.port);
  try {
    await redis.sendCommand(['SET', 'rl:ip:198.51.100.7', 'not a hash']);
    const limiter = new RateLimiter(redis, { policies: [perMinute('ip', 10)], logger: memoryLogger(), timeoutMs: 5000 });
    const d = await limiter.check(ctx);
    assert.equal(d.outcome, 'store_error');
    assert.match(String(d.error), /TB\.TAKE: WRONGTYPE/);
    const other = await limiter.check({ ...ctx, peer: '198.51.100.8' });
    assert.equal(other.outcome, 'allowed', 'the next request goes to Redis at once');
  } finally {
    await closeClient(redis);
  }
});
