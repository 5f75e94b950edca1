// The deny cache's single flight: when a cached refusal expires, one request (the probe)
// goes to Redis and the others are refused locally until its answer arrives. Against a real
// redis-server with the module; Redis calls counted with INFO commandstats.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import express from 'express';
import { Limit, Policy, RateLimiter, TbClient } from 'redis-tb';
import { rateLimit } from 'redis-tb/express';
import { RedisServer, checkCalls, closeClient, memoryLogger, nodeRedis, request, sleep } from './helpers.mjs';
import { listenExpress, sfItems } from './http-helpers.mjs';

const NOW = 1764456268.5;
const TIMEOUT_MS = 5000; // answers, not speed, are checked (a loaded machine)
// capacity 1 refilled at 0.01 per s: a refusal is cached for about 100 s, and the tests end
// that wait by moving the entry's deny-until into the past; Redis runs on the limiter's clock
// (`t` below), so Redis's answers do not depend on timing either
const policy = new Policy({ name: 'ip', limit: new Limit(1, 0.01) });
const KEY = 'rl:ip:127.0.0.1';
const ctx = { request: {}, peer: '127.0.0.1', header: () => [], route: 'GET /x' };

let server;
let redis;
let tb;
before(async () => {
  server = await new RedisServer().start();
  redis = await nodeRedis(server.port);
  tb = new TbClient(redis);
});
after(async () => {
  await closeClient(redis);
  await server.stop();
});

describe('deny cache single flight', () => {
  let t;
  let limiter;
  beforeEach(async () => {
    await tb.send(['FLUSHALL']);
    t = NOW;
    limiter = limiterOf(policy);
  });

  /** A limiter of one policy, with the deny cache, on the test's clock. */
  function limiterOf(p) {
    return new RateLimiter(redis, { policies: [p], timeoutMs: TIMEOUT_MS, redisNow: () => t, logger: memoryLogger(), denyCache: { maxEntries: 10 } });
  }

  /** The cached refusal's wait is over (the entry stays, expired). */
  function expire() {
    const e = limiter.denyCache.lookup(KEY, 1, 0.01, 1, performance.now());
    assert.ok(e);
    e.denyUntil = performance.now() - 1;
  }

  /**
   * Admit once (the last token: the refusal Redis would now give is cached), be refused by
   * the cache, then let the entry expire.
   */
  async function refusedAndExpired() {
    const calls0 = await checkCalls(redis);
    assert.equal((await limiter.check(ctx)).outcome, 'allowed');
    assert.equal(limiter.denyCache.size, 1);
    const refused = await limiter.check(ctx);
    assert.equal(refused.outcome, 'limited');
    assert.equal(refused.fromCache, true);
    assert.equal(await checkCalls(redis), calls0 + 1);
    expire();
  }

  test('concurrent requests after expiry: one Redis call, the rest refused by the cache (Retry-After 1); a refusal renews the entry', async () => {
    await refusedAndExpired();
    const calls0 = await checkCalls(redis);
    const hits0 = limiter.stats.denyCacheHits;
    const decisions = await Promise.all(Array.from({ length: 20 }, () => limiter.check(ctx)));
    assert.equal(await checkCalls(redis), calls0 + 1, 'exactly one Redis call');
    const fromRedis = decisions.filter((d) => !d.fromCache);
    const fromCache = decisions.filter((d) => d.fromCache);
    assert.equal(fromRedis.length, 1);
    assert.equal(fromRedis[0].outcome, 'limited', 'Redis (clock unchanged) still refuses');
    assert.equal(fromCache.length, 19);
    assert.equal(limiter.stats.denyCacheHits, hits0 + 19);
    for (const d of fromCache) {
      assert.equal(d.outcome, 'limited');
      assert.equal(d.allowed, false);
      assert.equal(d.retryAfter, 0, 'while probing: retry after 0, rendered Retry-After 1');
      assert.deepEqual(d.violated, ['ip']);
    }
    // the refusal renewed the entry: the next request is a cache hit counting down again
    const next = await limiter.check(ctx);
    assert.equal(next.fromCache, true);
    assert.ok(next.retryAfter > 0);
    assert.equal(await checkCalls(redis), calls0 + 1);
  });

  test('probe admitted with enough tokens left: the entry is gone, and the cache admitted nothing itself', async () => {
    // capacity 3, cost 1: the third admission spends the last token and caches a refusal
    const wide = new Policy({ name: 'ip', limit: new Limit(3, 0.01) });
    limiter = limiterOf(wide);
    for (let i = 0; i < 3; i++) assert.equal((await limiter.check(ctx)).outcome, 'allowed');
    const e = limiter.denyCache.lookup(KEY, 3, 0.01, 1, performance.now());
    assert.ok(e, 'the last token spent: refusal cached');
    e.denyUntil = performance.now() - 1;
    t = NOW + 300; // Redis has refilled the bucket (3 tokens)
    const calls0 = await checkCalls(redis);
    const decisions = await Promise.all(Array.from({ length: 10 }, () => limiter.check(ctx)));
    assert.equal(await checkCalls(redis), calls0 + 1);
    assert.equal(decisions.filter((d) => d.allowed).length, 1, 'only the probe, admitted by Redis');
    assert.equal(decisions.find((d) => d.allowed).remaining, 2);
    assert.ok(decisions.filter((d) => !d.allowed).every((d) => d.fromCache && d.retryAfter === 0));
    assert.equal(limiter.denyCache.size, 0, 'admitted with 2 >= 1 tokens left: entry removed');
    // no entry: the next request goes to Redis (admitted, one token left: still nothing cached)
    const next = await limiter.check(ctx);
    assert.equal(next.fromCache, false);
    assert.equal(next.outcome, 'allowed');
    assert.equal(limiter.denyCache.size, 0);
    assert.equal(await checkCalls(redis), calls0 + 2);
  });

  test('probe admitted leaving fewer tokens than the cost: the entry is renewed until the cost is back', async () => {
    await refusedAndExpired();
    const old = limiter.denyCache.lookup(KEY, 1, 0.01, 1, -Infinity);
    assert.ok(old);
    t = NOW + 100; // Redis has refilled the bucket (1 token)
    const calls0 = await checkCalls(redis);
    const before = performance.now();
    const decisions = await Promise.all(Array.from({ length: 10 }, () => limiter.check(ctx)));
    const after = performance.now();
    assert.equal(await checkCalls(redis), calls0 + 1);
    const admitted = decisions.filter((d) => d.allowed);
    assert.equal(admitted.length, 1, 'only the probe, admitted by Redis');
    assert.equal(admitted[0].remaining, 0);
    assert.ok(decisions.filter((d) => !d.allowed).every((d) => d.fromCache));
    // renewed: a new entry whose deny-until is (cost - remaining) / rate = 100 s after the answer
    const e = limiter.denyCache.lookup(KEY, 1, 0.01, 1, performance.now());
    assert.ok(e, 'renewed, not removed');
    assert.notEqual(e, old);
    assert.equal(e.probingSince, undefined);
    assert.ok(e.denyUntil >= before + 100_000 && e.denyUntil <= after + 100_000, `${e.denyUntil - before}`);
    assert.equal(limiter.denyCache.size, 1);
    // the next request is a cache hit counting down from 100 s; Redis is not called
    const next = await limiter.check(ctx);
    assert.equal(next.fromCache, true);
    assert.ok(next.retryAfter > 99 && next.retryAfter <= 100, `${next.retryAfter}`);
    assert.equal(await checkCalls(redis), calls0 + 1);
    // and Redis agrees: a request of that cost would be refused for 100 s
    const peek = await tb.send(['TB.TAKE', KEY, '1', '0.01', '1', String(t)]);
    assert.equal(Number(peek[0]), 0);
    assert.equal(Number(peek[2]), 100);
  });

  test('probe failed (store error): the entry is removed', async () => {
    await refusedAndExpired();
    await server.stop();
    try {
      const d = await limiter.check(ctx);
      assert.equal(d.outcome, 'store_error');
      assert.equal(limiter.denyCache.size, 0);
    } finally {
      await server.start();
      // wait for the client to reconnect
      for (;;) {
        try { await tb.send(['PING']); break; } catch { await sleep(50); }
      }
    }
  });

  test('a stale probing mark (a lost probe) lets the next request probe; a fresh one refuses', async () => {
    await refusedAndExpired();
    const stale = 2 * TIMEOUT_MS;
    assert.equal(limiter.denyCache.probeStaleMs, stale);
    // a probe claimed just now and never answered: requests are refused locally
    const lost = limiter.denyCache.claimProbe(KEY, 1, 0.01, 1, performance.now());
    assert.ok(lost);
    const calls0 = await checkCalls(redis);
    const hit = await limiter.check(ctx);
    assert.equal(hit.fromCache, true);
    assert.equal(hit.retryAfter, 0);
    assert.equal(await checkCalls(redis), calls0);
    // the same lost probe, marked longer ago than 2x the call timeout: the next request probes
    const lostLongAgo = limiter.denyCache.claimProbe(KEY, 1, 0.01, 1, performance.now() + stale);
    assert.ok(lostLongAgo, 'a stale mark can be claimed again');
    lostLongAgo.entry.probingSince = performance.now() - stale - 1; // as if claimed 2x timeout + 1 ms ago
    lostLongAgo.since = lostLongAgo.entry.probingSince;
    const probe = await limiter.check(ctx);
    assert.equal(probe.fromCache, false, 'went to Redis');
    assert.equal(await checkCalls(redis), calls0 + 1);
    assert.equal(probe.outcome, 'limited');
    // the late answer of the lost probe does not remove the renewed entry
    limiter.denyCache.endProbe(lostLongAgo);
    assert.equal((await limiter.check(ctx)).fromCache, true);
  });

  test('over HTTP, 16 connections after expiry: one Redis call, every other 429 from the cache with the cache-hit headers and body', async () => {
    const app = express();
    app.use(rateLimit(limiter));
    app.get('/x', (req, res) => res.send('ok'));
    const http = await listenExpress(app);
    try {
      assert.equal((await request(`${http.url}/x`)).status, 200);
      const first = await request(`${http.url}/x`);
      assert.equal(first.status, 429);
      const cached = await request(`${http.url}/x`);
      assert.equal(cached.status, 429);
      expire();
      const calls0 = await checkCalls(redis);
      const hits0 = limiter.stats.denyCacheHits;
      // hold write commands (TB.TAKE) for up to 0.5 s, so that the requests meet the probe
      // in flight (if they came later, the renewed entry refuses them: one call either way)
      await tb.send(['CLIENT', 'PAUSE', '500', 'WRITE']);
      const rs = await Promise.all(Array.from({ length: 16 }, () => request(`${http.url}/x`)));
      assert.equal(await checkCalls(redis), calls0 + 1, 'exactly one Redis call for 16 connections');
      assert.equal(limiter.stats.denyCacheHits, hits0 + 15);
      for (const r of rs) {
        assert.equal(r.status, 429);
        // the body of a cache hit; the wait in it is the entry's (0 while probing: 1 s)
        const wait = Number(r.headers['retry-after']);
        const same = (j, w) => ({ ...j, retry_after: 0, detail: j.detail.replace(/retry after \d+ s/, `retry after ${w} s`) });
        assert.deepEqual(same(r.json, wait), same(cached.json, wait));
        assert.ok(r.json.detail.endsWith(`retry after ${wait} s`), r.json.detail);
        assert.ok(r.json.retry_after >= 0);
        assert.deepEqual(sfItems(r.headers['ratelimit-policy']), sfItems(cached.headers['ratelimit-policy']));
        assert.equal(sfItems(r.headers['ratelimit'])[0][1].r, 0);
        assert.ok(Number(r.headers['retry-after']) >= 1);
      }
    } finally {
      await http.close();
    }
  });

  test('an admission spending the last tokens: the next request is a cache hit, no Redis call, with the Retry-After Redis would give', async () => {
    // capacity 5 refilled at 0.1 per s, cost 2: 5 -> 3 -> 1 token; 1 < 2, so Redis would
    // refuse a cost of 2 for (2 - 1) / 0.1 = 10 s (the clock is the limiter's: exact)
    const costly = new Policy({ name: 'ip', limit: new Limit(5, 0.1), cost: 2 });
    limiter = limiterOf(costly);
    const app = express();
    app.use(rateLimit(limiter));
    app.get('/x', (req, res) => res.send('ok'));
    const http = await listenExpress(app);
    // the same policy without a cache, on the same clock: what Redis answers
    const plain = new RateLimiter(redis, { policies: [costly], timeoutMs: TIMEOUT_MS, redisNow: () => t, logger: memoryLogger() });
    const plainApp = express();
    plainApp.use(rateLimit(plain));
    plainApp.get('/x', (req, res) => res.send('ok'));
    const plainHttp = await listenExpress(plainApp);
    try {
      const calls0 = await checkCalls(redis);
      assert.equal((await request(`${http.url}/x`)).status, 200);
      assert.equal(limiter.denyCache.size, 0, '3 tokens left: nothing cached');
      const last = await request(`${http.url}/x`);
      assert.equal(last.status, 200);
      assert.equal(await checkCalls(redis), calls0 + 2);
      assert.equal(limiter.denyCache.size, 1, '1 token left, cost 2: the refusal is cached');
      const hits0 = limiter.stats.denyCacheHits;
      const hit = await request(`${http.url}/x`);
      assert.equal(hit.status, 429);
      assert.equal(await checkCalls(redis), calls0 + 2, 'no Redis call');
      assert.equal(limiter.stats.denyCacheHits, hits0 + 1);
      assert.equal(hit.headers['retry-after'], '10', 'ceil((cost - remaining) / rate) = ceil((2 - 1) / 0.1)');
      assert.deepEqual(hit.json.violated_policies, ['ip']);
      // Redis itself refuses the same request with the same Retry-After
      const byRedis = await request(`${plainHttp.url}/x`);
      assert.equal(byRedis.status, 429);
      assert.equal(byRedis.headers['retry-after'], '10');
      assert.equal(await checkCalls(redis), calls0 + 3);
    } finally {
      await plainHttp.close();
      await http.close();
    }
  });
});
