// Window policies (SPEC W) through the Express middleware and the Fastify plugin, against a
// real redis-server with the module: TB.WINDOW's answers in the headers, a refusal after
// `n`, and a window limiter on a route after the API's (C10), whose lists are joined (H1).
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import express from 'express';
import Fastify from 'fastify';
import { Limit, Policy, RateLimiter, TbClient, perMinute } from 'redis-tb';
import { rateLimit } from 'redis-tb/express';
import { fastifyRateLimit } from 'redis-tb/fastify';
import { RedisServer, closeClient, memoryLogger, nodeRedis, request } from './helpers.mjs';
import { listenExpress, listenFastify, sfItems } from './http-helpers.mjs';

const ANSWER_TIMEOUT_MS = 5000; // answers, not speed (see fastify.test.mjs)

const api = () => [perMinute('ip', 100)];
const login = () => [new Policy({ name: 'login', limit: Limit.window(3, 60, 'fixed') })];

async function expressApp(redis) {
  const app = express();
  const a = new RateLimiter(redis, { policies: api(), timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger() });
  const l = new RateLimiter(redis, { policies: login(), timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger(), failOpen: false });
  app.use(rateLimit(a));
  app.post('/login', rateLimit(l), (req, res) => { res.json({ ok: true }); });
  return listenExpress(app);
}

async function fastifyApp(redis) {
  const app = Fastify();
  const a = new RateLimiter(redis, { policies: api(), timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger() });
  const l = new RateLimiter(redis, { policies: login(), timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger(), failOpen: false });
  await app.register(fastifyRateLimit, { limiter: a });
  await app.register(async (auth) => {
    await auth.register(fastifyRateLimit, { limiter: l });
    auth.post('/login', async () => ({ ok: true }));
  });
  return listenFastify(app);
}

let server;
before(async () => { server = await new RedisServer().start(); });
after(async () => { await server?.stop(); });

for (const [framework, listen] of [['express', expressApp], ['fastify', fastifyApp]]) {
  describe(`window policies through ${framework}`, () => {
    let redis;
    let web;
    before(async () => {
      redis = await nodeRedis(server.port);
      web = await listen(redis);
    });
    after(async () => {
      await web?.close();
      await closeClient(redis);
    });
    beforeEach(async () => { await new TbClient(redis).send(['FLUSHALL']); });

    test('a fixed window admits n, then refuses naming it; both limiters in the lists (SPEC W2, H1)', async () => {
      const rs = [];
      for (let i = 0; i < 3; i++) rs.push(await request(`${web.url}/login`, { method: 'POST' }));
      assert.deepEqual(rs.map((r) => r.status), [200, 200, 200]);
      for (const [i, r] of rs.entries()) {
        assert.deepEqual(sfItems(r.headers['ratelimit-policy']), [['ip', { q: 100, w: 60 }], ['login', { q: 3, w: 60 }]]);
        const items = Object.fromEntries(sfItems(r.headers.ratelimit));
        assert.equal(items.login.r, 2 - i);
        assert.ok(items.login.t >= 1 && items.login.t <= 60, JSON.stringify(items.login));
      }
      const refused = await request(`${web.url}/login`, { method: 'POST' });
      assert.equal(refused.status, 429);
      assert.deepEqual(refused.json.violated_policies, ['login']);
      const wait = Number(refused.headers['retry-after']);
      assert.ok(wait >= 1 && wait <= 60, String(wait));
      // TB.WINDOW wrote nothing for the refusal: the window still counts 3
      const peek = await new TbClient(redis).window('rl:login:127.0.0.1', 3, 60, 0, { mode: 'FIXED' });
      assert.equal(peek.remaining, 0);
    });

    test('a window policy beside another in one limiter is refused at build (SPEC C10)', () => {
      const policies = [...api(), ...login()];
      assert.throws(() => new RateLimiter(redis, { policies, logger: memoryLogger() }), /only policy of its limiter/);
    });
  });
}
