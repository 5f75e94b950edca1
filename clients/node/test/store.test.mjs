// The express-rate-limit store on TB.WINDOW, next to rate-limit-redis, through real
// express-rate-limit over HTTP and through the Store interface.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { RedisStore } from 'rate-limit-redis';
import { RedisTbStore, TbClient } from 'redis-tb';
import { CLIENTS, RedisServer, closeClient, request, sleep } from './helpers.mjs';
import { listenExpress } from './http-helpers.mjs';

const LIMIT = 5;
const WINDOW_MS = 3000;

let server;
let redis;
let tb;
before(async () => {
  server = await new RedisServer().start();
  redis = await CLIENTS[0][1](server.port);
  tb = new TbClient(redis);
});
after(async () => { await closeClient(redis); await server?.stop(); });
beforeEach(async () => { await tb.send(['FLUSHALL']); });

function appWith(store, extra = {}) {
  const app = express();
  app.set('env', 'test');
  app.use(rateLimit({ windowMs: WINDOW_MS, limit: LIMIT, store, standardHeaders: 'draft-6', legacyHeaders: false, validate: false, ...extra }));
  app.get('/', (req, res) => res.send('ok'));
  app.get('/fail', (req, res) => res.status(500).send('no'));
  return app;
}

/**
 * One hit, then the rest of the limit late in the window, then a burst right after the
 * window of the first hit ended: how many requests each store admits in that stretch,
 * which is shorter than one window.
 */
async function boundaryBurst(url, firstKeyGone) {
  const t0 = Date.now();
  assert.equal((await request(url)).status, 200);
  await sleep(t0 + WINDOW_MS * 0.6 - Date.now());
  const stretchStart = Date.now();
  let admitted = 0;
  for (let i = 0; i < LIMIT - 1; i++) if ((await request(url)).status === 200) admitted += 1;
  await firstKeyGone(t0);
  const statuses = [];
  for (let i = 0; i < LIMIT; i++) statuses.push(await request(url));
  admitted += statuses.filter((r) => r.status === 200).length;
  const stretch = Date.now() - stretchStart;
  return { admitted, stretch, statuses };
}

test('across a window boundary rate-limit-redis admits ~2x the limit, RedisTbStore (LOG) never more than the limit', async () => {
  const theirs = await listenExpress(appWith(new RedisStore({ sendCommand: (...args) => redis.sendCommand(args), prefix: 'rlr:' })));
  const ours = await listenExpress(appWith(new RedisTbStore({ client: redis, prefix: 'rtb:' })));
  try {
    const fixed = await boundaryBurst(`${theirs.url}/`, async () => {
      // rate-limit-redis's window starts at the key's first hit and ends with its TTL
      while (Number(await redis.sendCommand(['PTTL', 'rlr:127.0.0.1'])) > 0) await sleep(10);
    });
    const log = await boundaryBurst(`${ours.url}/`, async () => {
      // the log's first entry has left the window: one slot is free (TB.WINDOW n = 0 writes nothing)
      while ((await tb.window('rtb:127.0.0.1', LIMIT, WINDOW_MS / 1000, 0, { mode: 'LOG' })).remaining < 1) await sleep(10);
    });
    assert.ok(fixed.stretch < WINDOW_MS && log.stretch < WINDOW_MS, `stretches ${fixed.stretch}, ${log.stretch} ms`);
    assert.equal(fixed.admitted, 2 * LIMIT - 1, `rate-limit-redis admitted ${fixed.admitted} in ${fixed.stretch} ms`);
    assert.equal(log.admitted, LIMIT, `RedisTbStore admitted ${log.admitted} in ${log.stretch} ms`);
    // the refused ones carry the exact wait until the late hits' entries leave the window
    // (about 0.6 x 3 s after they were admitted, so 1 or 2 s rounded up)
    const refused = log.statuses.filter((r) => r.status === 429);
    assert.equal(refused.length, LIMIT - 1);
    for (const r of refused) assert.ok(['1', '2', '3'].includes(r.headers['retry-after']), `Retry-After ${r.headers['retry-after']}`);
  } finally {
    await theirs.close();
    await ours.close();
  }
});

describe('RedisTbStore through the Store interface', () => {
  for (const [name, make] of CLIENTS) {
    test(`increment, get, exact resetTime, decrement, resetKey (LOG, ${name})`, async () => {
      const c = await make(server.port);
      try {
        const store = new RedisTbStore({ client: c });
        store.init({ windowMs: 60_000, limit: 3 });
        const before = Date.now();
        const hits = [];
        for (let i = 0; i < 4; i++) hits.push(await store.increment('k'));
        assert.deepEqual(hits.map((h) => h.totalHits), [1, 2, 3, 4]);
        const afterT = Date.now();
        // allowed: the whole limit is back one window after the newest entry
        assert.ok(hits[2].resetTime.getTime() >= before + 59_000 && hits[2].resetTime.getTime() <= afterT + 60_000);
        // refused: a slot frees when the oldest entry leaves, 60 s after it was admitted
        assert.ok(hits[3].resetTime.getTime() >= before + 59_000 && hits[3].resetTime.getTime() <= afterT + 60_000);
        assert.equal(Number(await tb.send(['ZCARD', 'erl:k'])), 3, 'the refusal wrote nothing');
        assert.equal((await store.get('k')).totalHits, 3);
        await store.decrement('k');
        assert.equal(Number(await tb.send(['ZCARD', 'erl:k'])), 2);
        assert.equal((await store.increment('k')).totalHits, 3, 'the decremented slot is usable again');
        await store.resetKey('k');
        assert.equal(await store.get('k'), undefined);
        assert.equal((await store.increment('k')).totalHits, 1);
      } finally {
        await closeClient(c);
      }
    });
  }

  test('SLIDING mode: estimate, and no decrement', async () => {
    const store = new RedisTbStore({ sendCommand: (args) => redis.sendCommand(args), mode: 'SLIDING' });
    assert.throws(() => store.init({ windowMs: 60_000, limit: 3, skipFailedRequests: true }), /SLIDING mode cannot decrement/);
    store.init({ windowMs: 60_000, limit: 3 });
    const hits = [];
    for (let i = 0; i < 4; i++) hits.push((await store.increment('s')).totalHits);
    assert.deepEqual(hits, [1, 2, 3, 4]);
    await assert.rejects(store.decrement('s'), /not possible in SLIDING mode/);
  });

  test('a limit function is refused: TB.WINDOW decides against the limit on the server', () => {
    const store = new RedisTbStore({ client: redis });
    assert.throws(() => store.init({ windowMs: 1000, limit: () => 5 }), /numeric `limit`/);
    return assert.rejects(store.increment('x'), /numeric `limit`/);
  });
});

test('skipFailedRequests over HTTP: express-rate-limit decrements failed requests', async () => {
  const http = await listenExpress(appWith(new RedisTbStore({ client: redis }), { skipFailedRequests: true, windowMs: 60_000 }));
  try {
    for (let i = 0; i < 3; i++) assert.equal((await request(`${http.url}/fail`)).status, 500);
    // express-rate-limit decrements after the response has finished
    const until = Date.now() + 2000;
    while (Number(await tb.send(['ZCARD', 'erl:127.0.0.1'])) > 0 && Date.now() < until) await sleep(10);
    assert.equal(Number(await tb.send(['ZCARD', 'erl:127.0.0.1'])), 0);
    const statuses = [];
    for (let i = 0; i < LIMIT + 1; i++) statuses.push((await request(`${http.url}/`)).status);
    assert.deepEqual(statuses, [...Array(LIMIT).fill(200), 429]);
  } finally {
    await http.close();
  }
});
