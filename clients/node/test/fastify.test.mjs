// The Fastify plugin through real HTTP servers, against a real redis-server with the module.
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import Fastify from 'fastify';
import { ClientIpConfig, Limit, Policy, RateLimiter, TbClient, perMinute, perSecond } from 'redis-tb';
import { fastifyRateLimit } from 'redis-tb/fastify';
import { CLIENTS, RedisServer, closeClient, memoryLogger, request, sleep } from './helpers.mjs';
import { listenFastify, sfItems } from './http-helpers.mjs';

const NOW = 1764456268.5;
const fixedClock = () => NOW;
// These tests check answers, not speed: on a loaded machine (2 cores shared, load 14 seen)
// a TB.MTAKE can take longer than the default 50 ms and would be decided by the failure
// mode. The 50 ms default itself is tested in limiter.test.mjs with a paused server.
const ANSWER_TIMEOUT_MS = 5000;

async function buildApp(limiter) {
  const app = Fastify();
  await app.register(fastifyRateLimit, { limiter });
  const summary = (request) => {
    const d = request.rateLimit;
    return d ? { outcome: d.outcome, shadowLimited: d.shadowLimited, violated: d.violated } : null;
  };
  app.get('/items/:id', async (request) => summary(request));
  app.post('/orders', async (request) => summary(request));
  app.get('/healthz', async () => 'ok');
  app.get('/fail', async (request, reply) => reply.code(500).send(summary(request)));
  app.get('/throw', async () => { throw new Error('boom'); });
  app.get('/refund', async (request) => {
    const first = await request.rateLimit.refund();
    const second = await request.rateLimit.refund();
    return { first, second, ...summary(request) };
  });
  await app.register(async (users) => {
    users.get('/posts/:pid', async (request) => summary(request));
  }, { prefix: '/users/:uid' });
  return app;
}

let server;
before(async () => { server = await new RedisServer().start(); });
after(async () => { await server?.stop(); });

for (const [clientName, makeClient] of CLIENTS) {
  describe(`fastify over ${clientName}`, () => {
    let redis;
    let tb;
    let http;
    before(async () => {
      redis = await makeClient(server.port);
      tb = new TbClient(redis);
    });
    after(async () => { await closeClient(redis); });
    beforeEach(async () => { await tb.send(['FLUSHALL']); });
    afterEach(async () => { await http?.close(); http = undefined; });

    const start = async (limiterOpts, pluginOpts) => {
      const limiter = new RateLimiter(redis, { timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger(), ...limiterOpts, ...pluginOpts });
      http = await listenFastify(await buildApp(limiter));
      return limiter;
    };

    test('headers and layered refusal that spends nothing; 429 problem+json', async () => {
      await start({}, {
        policies: [perMinute('ip', 5), new Policy({ name: 'user', limit: new Limit(2, 1 / 18), key: (req) => req.headers['x-user'] ?? null })],
      });
      const a = await request(`${http.url}/items/1`, { headers: { 'x-user': 'u1' } });
      assert.equal(a.status, 200);
      assert.deepEqual(sfItems(a.headers['ratelimit-policy']), [['ip', { q: 5, w: 60 }], ['user', { q: 2, w: 36 }]]);
      assert.deepEqual(sfItems(a.headers['ratelimit']), [['ip', { r: 4, t: 12 }], ['user', { r: 1, t: 18 }]]);
      await request(`${http.url}/items/1`, { headers: { 'x-user': 'u1' } });
      const r = await request(`${http.url}/items/1`, { headers: { 'x-user': 'u1' } });
      assert.equal(r.status, 429);
      assert.equal(r.headers['content-type'], 'application/problem+json');
      assert.equal(r.headers['retry-after'], '18');
      assert.deepEqual(r.json, {
        type: 'about:blank', title: 'Too Many Requests', status: 429,
        detail: "rate limit exceeded for 'user': retry after 18 s",
        violated_policies: ['user'], retry_after: 18,
      });
      assert.equal((await tb.peek('rl:ip:127.0.0.1', 5, 5 / 60, { now: NOW })).remaining, 3);
    });

    test('route templates from routeOptions.url with the method; unmatched and excluded not limited', async () => {
      await start({}, {
        policies: [
          perMinute('item', 3, { routes: ['GET /items/:id'], perRoute: true }),
          perMinute('posts', 3, { routes: ['GET /users/:uid/posts/:pid'], perRoute: true }),
          perMinute('all', 100),
        ],
        exclude: ['GET /healthz'],
      });
      await request(`${http.url}/items/1`);
      const two = await request(`${http.url}/items/2`);
      assert.deepEqual(sfItems(two.headers['ratelimit']), [['item', { r: 1, t: 40 }], ['all', { r: 98, t: 2 }]]);
      await request(`${http.url}/users/42/posts/7`);
      const keys = (await tb.send(['KEYS', 'rl:*'])).map(String).sort();
      assert.deepEqual(keys, ['rl:all:127.0.0.1', 'rl:item@GET%20/items/%3Aid:127.0.0.1', 'rl:posts@GET%20/users/%3Auid/posts/%3Apid:127.0.0.1']);
      const missing = await request(`${http.url}/nope`);
      assert.equal(missing.status, 404);
      assert.equal(missing.headers['ratelimit'], undefined);
      assert.equal((await request(`${http.url}/healthz`)).headers['ratelimit'], undefined);
      const post = await request(`${http.url}/orders`, { method: 'POST' });
      assert.deepEqual(sfItems(post.headers['ratelimit']), [['all', { r: 96, t: 3 }]]);
    });

    test('trusted proxy walk and IPv6 /64', async () => {
      await start({ clientIp: new ClientIpConfig({ trustedProxies: ['127.0.0.0/8'] }) }, { policies: [perMinute('ip', 10)] });
      await request(`${http.url}/items/1`, { headers: { 'x-forwarded-for': '203.0.113.9, 2001:db8:aa:bb:1::2, 127.0.0.2' } });
      await request(`${http.url}/items/1`, { headers: { 'x-forwarded-for': '2001:db8:aa:bb::99' } });
      assert.deepEqual((await tb.send(['KEYS', 'rl:*'])).map(String), ['rl:ip:2001:db8:aa:bb::/64']);
      assert.equal((await tb.peek('rl:ip:2001:db8:aa:bb::/64', 10, 10 / 60, { now: NOW })).remaining, 8);
    });

    test('costs and refunds: the handler\'s, and automatic for 5xx', async () => {
      const limiter = await start({}, { policies: [perMinute('ip', 10, { cost: (req) => Number(req.headers['x-cost'] ?? 1) })], refundOn: (s) => s >= 500 });
      const r = await request(`${http.url}/refund`, { headers: { 'x-cost': '4' } });
      assert.deepEqual([r.json.first, r.json.second], [true, false]);
      assert.equal((await tb.peek('rl:ip:127.0.0.1', 10, 10 / 60, { now: NOW })).remaining, 10);
      assert.equal((await request(`${http.url}/fail`, { headers: { 'x-cost': '3' } })).status, 500);
      assert.equal((await request(`${http.url}/throw`, { headers: { 'x-cost': '3' } })).status, 500);
      assert.equal((await tb.peek('rl:ip:127.0.0.1', 10, 10 / 60, { now: NOW })).remaining, 10, '5xx refunded before the response is sent');
      const ok = await request(`${http.url}/items/1`, { headers: { 'x-cost': '3' } });
      assert.deepEqual(sfItems(ok.headers['ratelimit']), [['ip', { r: 7, t: 18 }]]);
      assert.equal(limiter.stats.refunds, 3);
    });

    test('shadow policy: the request goes on, headers leave it out', async () => {
      await start({}, { policies: [perMinute('ip', 10), new Policy({ name: 'beta', limit: new Limit(1, 0.01), shadow: true })] });
      await request(`${http.url}/items/1`);
      const b = await request(`${http.url}/items/1`);
      assert.equal(b.status, 200);
      assert.deepEqual(b.json, { outcome: 'allowed', shadowLimited: ['beta'], violated: [] });
      assert.equal(b.headers['ratelimit-policy'], '"ip";q=10;w=60');
    });

    test('legacy headers (delta)', async () => {
      await start({ legacyHeaders: true, legacyReset: 'delta' }, { policies: [perMinute('ip', 10)] });
      const d = await request(`${http.url}/items/1`);
      assert.deepEqual([d.headers['x-ratelimit-limit'], d.headers['x-ratelimit-remaining'], d.headers['x-ratelimit-reset']], ['10', '9', '6']);
    });
  });
}

test('fastify: registered at the root and again in a child context, the two limiters compose', async () => {
  const redis = await CLIENTS[0][1](server.port);
  const tb = new TbClient(redis);
  let http;
  try {
    await tb.send(['FLUSHALL']);
    const opts = { timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger() };
    const wide = new RateLimiter(redis, { ...opts, prefix: 'wide', policies: [perMinute('ip', 3)] });
    const strict = new RateLimiter(redis, { ...opts, prefix: 'strict', policies: [perMinute('admin', 2)], refundOn: [500] });
    const app = Fastify();
    // the root: 3 per minute on every route; the /admin group: 2 per minute more, refunding 5xx
    await app.register(fastifyRateLimit, { limiter: wide });
    app.get('/items/:id', async (request) => ({ outcome: request.rateLimit?.outcome }));
    await app.register(async (admin) => {
      await admin.register(fastifyRateLimit, { limiter: strict });
      admin.get('/stats', async (request) => ({ outcome: request.rateLimit?.outcome }));
      admin.get('/fail', async (request, reply) => reply.code(500).send({}));
    }, { prefix: '/admin' });
    http = await listenFastify(app);
    const peek = async (key, cap) => (await tb.peek(key, cap, cap / 60, { now: NOW })).remaining;

    // a route of the group: both checked, both items listed (the root's first)
    const a = await request(`${http.url}/admin/stats`);
    assert.equal(a.status, 200);
    assert.deepEqual(sfItems(a.headers['ratelimit-policy']), [['ip', { q: 3, w: 60 }], ['admin', { q: 2, w: 60 }]]);
    assert.deepEqual(sfItems(a.headers['ratelimit']), [['ip', { r: 2, t: 20 }], ['admin', { r: 1, t: 30 }]]);
    // a root route: only the root's limiter
    const i = await request(`${http.url}/items/1`);
    assert.deepEqual(sfItems(i.headers['ratelimit']), [['ip', { r: 1, t: 40 }]]);
    assert.deepEqual([await peek('wide:ip:127.0.0.1', 3), await peek('strict:admin:127.0.0.1', 2)], [1, 1]);

    // the child's own refund on a 5xx gives back its token, not the root's
    assert.equal((await request(`${http.url}/admin/fail`)).status, 500);
    assert.deepEqual([await peek('wide:ip:127.0.0.1', 3), await peek('strict:admin:127.0.0.1', 2)], [0, 1]);

    // the root refuses: 429 from the root, the child is not consulted (nothing charged there)
    const r = await request(`${http.url}/admin/stats`);
    assert.equal(r.status, 429);
    assert.deepEqual(r.json.violated_policies, ['ip']);
    assert.deepEqual(sfItems(r.headers['ratelimit-policy']), [['ip', { q: 3, w: 60 }]]);
    assert.equal(await peek('strict:admin:127.0.0.1', 2), 1, 'the child limiter was not called');
    assert.equal(strict.stats.checks, 2);

    // the child refuses while the root admits: 429 from the child, the root's token spent
    await tb.send(['DEL', 'wide:ip:127.0.0.1']);
    assert.equal((await request(`${http.url}/admin/stats`)).status, 200);
    const c = await request(`${http.url}/admin/stats`);
    assert.equal(c.status, 429);
    assert.deepEqual(c.json.violated_policies, ['admin']);
    assert.deepEqual(sfItems(c.headers['ratelimit-policy']), [['ip', { q: 3, w: 60 }], ['admin', { q: 2, w: 60 }]]);
    assert.equal(await peek('wide:ip:127.0.0.1', 3), 1, 'the root admitted and charged both requests');
  } finally {
    await http?.close();
    await closeClient(redis);
  }
});

test('fastify fail-open and fail-closed with Redis killed and restarted', async () => {
  const own = await new RedisServer().start();
  const redis = await CLIENTS[1][1](own.port);
  const open = new RateLimiter(redis, { policies: [perSecond('ip', 100)], timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger() });
  const closed = new RateLimiter(redis, { policies: [perSecond('ip', 100)], timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger(), failOpen: false });
  const httpOpen = await listenFastify(await buildApp(open));
  const httpClosed = await listenFastify(await buildApp(closed));
  try {
    await own.kill();
    const o = await request(`${httpOpen.url}/items/1`);
    assert.equal(o.status, 200);
    assert.equal(o.headers['ratelimit'], undefined);
    const c = await request(`${httpClosed.url}/items/1`);
    assert.equal(c.status, 503);
    assert.equal(c.headers['retry-after'], '1');
    assert.equal(c.json.title, 'Service Unavailable');
    await own.start();
    let back = false;
    const until = Date.now() + 8000;
    while (!back && Date.now() < until) {
      await sleep(100);
      back = (await request(`${httpClosed.url}/items/1`)).status === 200;
    }
    assert.ok(back);
  } finally {
    await httpOpen.close();
    await httpClosed.close();
    await closeClient(redis);
    await own.stop();
  }
});
