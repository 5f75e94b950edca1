// The Express middleware through real HTTP servers, against a real redis-server with the
// module, for node-redis and ioredis.
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import express from 'express';
import { Registry } from 'prom-client';
import {
  ClientIpConfig, Limit, Policy, RateLimiter, TbClient, perMinute, perSecond, tiered,
} from 'redis-tb';
import { rateLimit } from 'redis-tb/express';
import { PrometheusMetrics } from 'redis-tb/prometheus';
import { CLIENTS, RedisServer, checkCalls, closeClient, commandCalls, memoryLogger, nodeRedisV4, request, sleep } from './helpers.mjs';
import { listenExpress, scrape, sfItems } from './http-helpers.mjs';

const NOW = 1764456268.5;
const fixedClock = () => NOW;
// These tests check answers, not speed: on a loaded machine (2 cores shared, load 14 seen)
// a TB.MTAKE can take longer than the default 50 ms and would be decided by the failure
// mode. The 50 ms default itself is tested in limiter.test.mjs with a paused server.
const ANSWER_TIMEOUT_MS = 5000;

function buildApp(limiter, { metricsRegistry, expressLib = express } = {}) {
  const app = expressLib();
  app.set('env', 'test'); // the default error handler does not print the thrown test error
  app.use(rateLimit(limiter));
  const summary = (res) => {
    const d = res.locals.rateLimit;
    return d ? { outcome: d.outcome, shadowLimited: d.shadowLimited, violated: d.violated } : null;
  };
  app.get('/items/:id', (req, res) => res.json(summary(res)));
  app.post('/orders', (req, res) => res.json(summary(res)));
  app.get('/healthz', (req, res) => res.send('ok'));
  app.get('/fail', (req, res) => res.status(500).json(summary(res)));
  app.get('/throw', () => { throw new Error('boom'); });
  app.get('/refund', async (req, res) => {
    const first = await res.locals.rateLimit.refund();
    const second = await res.locals.rateLimit.refund();
    res.json({ first, second, ...summary(res) });
  });
  const users = expressLib.Router({ mergeParams: true });
  users.get('/posts/:pid', (req, res) => res.json(summary(res)));
  app.use('/users/:uid', users);
  if (metricsRegistry) {
    app.get('/metrics', async (req, res) => res.type(metricsRegistry.contentType).send(await metricsRegistry.metrics()));
  }
  return app;
}

let server;
before(async () => { server = await new RedisServer().start(); });
after(async () => { await server?.stop(); });

for (const [clientName, makeClient] of CLIENTS) {
  describe(`express over ${clientName}`, () => {
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

    const start = async (limiterOpts, mwOpts, extra) => {
      const limiter = new RateLimiter(redis, { timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger(), ...limiterOpts, ...mwOpts });
      http = await listenExpress(buildApp(limiter, extra));
      return limiter;
    };

    test('headers: exact values, parsed with the structured-field parser', async () => {
      await start({}, { policies: [perMinute('ip', 5), new Policy({ name: 'user', limit: new Limit(100, 100 / 3600), key: (req) => req.get('x-user') ?? null })] });
      const r = await request(`${http.url}/items/1`, { headers: { 'x-user': 'u1' } });
      assert.equal(r.status, 200);
      assert.deepEqual(sfItems(r.headers['ratelimit-policy']), [['ip', { q: 5, w: 60 }], ['user', { q: 100, w: 3600 }]]);
      assert.deepEqual(sfItems(r.headers['ratelimit']), [['ip', { r: 4, t: 12 }], ['user', { r: 99, t: 36 }]]);
      assert.equal(r.headers['ratelimit-policy'], '"ip";q=5;w=60, "user";q=100;w=3600');
      assert.equal(r.headers['retry-after'], undefined);
      assert.equal(r.headers['x-ratelimit-limit'], undefined, 'legacy headers are off by default');
      // the user policy is skipped (key null) without the header
      const anon = await request(`${http.url}/items/1`);
      assert.deepEqual(sfItems(anon.headers['ratelimit-policy']), [['ip', { q: 5, w: 60 }]]);
    });

    test('layered refusal spends nothing; 429 problem+json names the violated policy', async () => {
      const limiter = await start({}, {
        policies: [perMinute('ip', 5), new Policy({ name: 'user', limit: new Limit(2, 1 / 18), key: (req) => req.get('x-user') ?? null })],
      });
      for (let i = 0; i < 2; i++) assert.equal((await request(`${http.url}/items/1`, { headers: { 'x-user': 'u1' } })).status, 200);
      const r = await request(`${http.url}/items/1`, { headers: { 'x-user': 'u1' } });
      assert.equal(r.status, 429);
      assert.equal(r.headers['content-type'], 'application/problem+json');
      assert.equal(r.headers['retry-after'], '18');
      assert.deepEqual(r.json, {
        type: 'about:blank', title: 'Too Many Requests', status: 429,
        detail: "rate limit exceeded for 'user': retry after 18 s",
        violated_policies: ['user'], retry_after: 18,
      });
      assert.deepEqual(sfItems(r.headers['ratelimit']), [['ip', { r: 3, t: 24 }], ['user', { r: 0, t: 36 }]]);
      const ip = await tb.peek('rl:ip:127.0.0.1', 5, 5 / 60, { now: NOW });
      assert.equal(ip.remaining, 3, 'the refused request took nothing from the ip bucket');
      assert.deepEqual([limiter.stats.allowed, limiter.stats.limited, limiter.stats.checks], [2, 1, 3]);
    });

    test('a cost above the capacity can never succeed: no Retry-After, retry_after null', async () => {
      await start({}, { policies: [perMinute('ip', 5, { cost: (req) => Number(req.get('x-cost') ?? 1) })] });
      const r = await request(`${http.url}/items/1`, { headers: { 'x-cost': '7' } });
      assert.equal(r.status, 429);
      assert.equal(r.headers['retry-after'], undefined);
      assert.deepEqual(r.json, {
        type: 'about:blank', title: 'Too Many Requests', status: 429,
        detail: "this request costs 7 but policy 'ip' allows at most 5 at once: it can never succeed",
        violated_policies: ['ip'], retry_after: null,
      });
    });

    test('per-request costs', async () => {
      await start({}, { policies: [perMinute('ip', 10, { cost: (req) => Number(req.get('x-cost') ?? 1) })] });
      const a = await request(`${http.url}/items/1`, { headers: { 'x-cost': '3' } });
      assert.deepEqual(sfItems(a.headers['ratelimit']), [['ip', { r: 7, t: 18 }]]);
      const b = await request(`${http.url}/items/1`, { headers: { 'x-cost': '0' } });
      assert.deepEqual(sfItems(b.headers['ratelimit']), [['ip', { r: 7, t: 18 }]]);
      const c = await request(`${http.url}/items/1`, { headers: { 'x-cost': '8' } });
      assert.equal(c.status, 429);
      assert.equal(c.headers['retry-after'], '6');
    });

    test('plan tiers: the limit per request', async () => {
      await start({}, {
        policies: [tiered('plan', { free: Limit.perMinute(2), pro: Limit.perMinute(50), internal: null },
          (req) => req.get('x-plan') ?? null, { default: 'free', key: (req) => req.get('x-user') ?? null })],
      });
      const free = await request(`${http.url}/items/1`, { headers: { 'x-user': 'a' } });
      assert.deepEqual(sfItems(free.headers['ratelimit-policy']), [['plan', { q: 2, w: 60 }]]);
      const pro = await request(`${http.url}/items/1`, { headers: { 'x-user': 'b', 'x-plan': 'pro' } });
      assert.deepEqual(sfItems(pro.headers['ratelimit-policy']), [['plan', { q: 50, w: 60 }]]);
      assert.deepEqual(sfItems(pro.headers['ratelimit']), [['plan', { r: 49, t: 2 }]]);
      const internal = await request(`${http.url}/items/1`, { headers: { 'x-user': 'c', 'x-plan': 'internal' } });
      assert.equal(internal.headers['ratelimit-policy'], undefined, 'a plan mapped to null is not limited');
      await request(`${http.url}/items/1`, { headers: { 'x-user': 'a' } });
      assert.equal((await request(`${http.url}/items/1`, { headers: { 'x-user': 'a' } })).status, 429);
      const upgraded = await request(`${http.url}/items/1`, { headers: { 'x-user': 'a', 'x-plan': 'pro' } });
      assert.deepEqual(sfItems(upgraded.headers['ratelimit-policy']), [['plan', { q: 50, w: 60 }]], 'an upgrade applies its limit at once, on the same bucket');
    });

    test('route templates: per route, mounted routers, unmatched and excluded routes', async () => {
      await start({}, {
        policies: [
          perMinute('item', 3, { routes: ['GET /items/:id'], perRoute: true }),
          perMinute('posts', 3, { routes: 'GET /users/:uid/posts/:pid', perRoute: true }),
          perMinute('all', 100),
        ],
        exclude: ['GET /healthz'],
      });
      await request(`${http.url}/items/1`);
      const two = await request(`${http.url}/items/2?x=1`);
      assert.deepEqual(sfItems(two.headers['ratelimit']), [['item', { r: 1, t: 40 }], ['all', { r: 98, t: 2 }]]);
      const keys = (await tb.send(['KEYS', 'rl:*'])).map(String).sort();
      assert.deepEqual(keys, ['rl:all:127.0.0.1', 'rl:item@GET%20/items/%3Aid:127.0.0.1']);
      const post = await request(`${http.url}/users/42/posts/7`);
      assert.deepEqual(sfItems(post.headers['ratelimit']), [['posts', { r: 2, t: 20 }], ['all', { r: 97, t: 2 }]]);
      assert.equal(await tb.send(['EXISTS', 'rl:posts@GET%20/users/%3Auid/posts/%3Apid:127.0.0.1']), 1);
      const missing = await request(`${http.url}/nope`);
      assert.equal(missing.status, 404);
      assert.equal(missing.headers['ratelimit'], undefined, 'requests matching no route are not limited');
      const wrongMethod = await request(`${http.url}/items/1`, { method: 'DELETE' });
      assert.equal(wrongMethod.headers['ratelimit'], undefined);
      const health = await request(`${http.url}/healthz`);
      assert.equal(health.headers['ratelimit'], undefined);
      const head = await request(`${http.url}/items/9`, { method: 'HEAD' });
      assert.equal(head.status, 200);
      assert.equal(await tb.send(['EXISTS', 'rl:all:127.0.0.1']), 1);
      assert.deepEqual(sfItems(head.headers['ratelimit']), [['all', { r: 96, t: 3 }]], 'HEAD /items/:id is its own route, not GET');
    });

    test('hash tag: <prefix>:{<tag>}:<policy>@<route>:<identity>, escaped (SPEC K1, K2)', async () => {
      await start({ prefix: 'api', hashTag: (req) => req.get('x-user') ?? null }, {
        policies: [perMinute('ip', 10), perMinute('item', 5, { routes: ['GET /items/:id'], perRoute: true })],
      });
      await request(`${http.url}/items/1`, { headers: { 'x-user': 'u42' } });
      await request(`${http.url}/items/1`);
      const keys = (await tb.send(['KEYS', 'api:*'])).map(String).sort();
      assert.deepEqual(keys, ['api:ip:127.0.0.1', 'api:item@GET%20/items/%3Aid:127.0.0.1', 'api:{u42}:ip:127.0.0.1', 'api:{u42}:item@GET%20/items/%3Aid:127.0.0.1']);
      const limiter = new RateLimiter(redis, { policies: [] });
      // SPEC K1, K2: the one key builder, escaping route braces and the tag's
      assert.equal(limiter.key('p', 'id', { route: 'GET /items/{id}', tag: 't' }), 'rl:{t}:p@GET%20/items/%7Bid%7D:id');
      assert.equal(limiter.key('p', 'a b', { tag: '{x}' }), 'rl:{%7Bx%7D}:p:a%20b');
      assert.equal(limiter.key('p', 'id', { tag: '' }), 'rl:p:id', 'an empty tag is no tag (SPEC K4)');
    });

    test('limitUnmatched: route-less policies apply to unmatched requests', async () => {
      await start({}, { policies: [perMinute('all', 10), perMinute('item', 3, { routes: ['GET /items/:id'] })], limitUnmatched: true });
      const r = await request(`${http.url}/nope`);
      assert.equal(r.status, 404);
      assert.deepEqual(sfItems(r.headers['ratelimit-policy']), [['all', { q: 10, w: 60 }]]);
    });

    test('the middleware on a route too: a request is checked once', async () => {
      const limiter = new RateLimiter(redis, { policies: [perMinute('ip', 10)], timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger() });
      const mw = rateLimit(limiter);
      const app = express();
      app.use(mw);
      app.get('/once/:id', mw, (req, res) => res.json({ ok: true }));
      http = await listenExpress(app);
      const r = await request(`${http.url}/once/1`);
      assert.deepEqual(sfItems(r.headers['ratelimit']), [['ip', { r: 9, t: 6 }]]);
      assert.equal(limiter.stats.checks, 1);
    });

    test('trusted proxies: X-Forwarded-For walked right to left; untrusted peers ignored', async () => {
      await start({ clientIp: new ClientIpConfig({ trustedProxies: ['127.0.0.1/32', '10.0.0.0/8'] }) }, { policies: [perMinute('ip', 10)] });
      await request(`${http.url}/items/1`, { headers: { 'x-forwarded-for': '198.51.100.9, 203.0.113.5, 10.1.2.3' } });
      await request(`${http.url}/items/1`, { headers: { 'x-forwarded-for': '::ffff:203.0.113.5' } });
      let keys = (await tb.send(['KEYS', 'rl:*'])).map(String).sort();
      assert.deepEqual(keys, ['rl:ip:203.0.113.5']);
      assert.equal((await tb.peek('rl:ip:203.0.113.5', 10, 10 / 60, { now: NOW })).remaining, 8);
      await request(`${http.url}/items/1`, { headers: { 'x-forwarded-for': '10.0.0.1, 10.0.0.2' } });
      await request(`${http.url}/items/1`, { headers: { 'x-forwarded-for': '198.51.100.1, garbage, 10.9.9.9' } });
      keys = (await tb.send(['KEYS', 'rl:*'])).map(String).sort();
      assert.deepEqual(keys, ['rl:ip:10.0.0.1', 'rl:ip:10.9.9.9', 'rl:ip:203.0.113.5'], 'all trusted: the leftmost; malformed: the last good hop');
      await http.close();
      await tb.send(['FLUSHALL']);
      // the same header from an untrusted peer is ignored
      await start({ clientIp: new ClientIpConfig({ trustedProxies: ['10.0.0.0/8'] }) }, { policies: [perMinute('ip', 10)] });
      await request(`${http.url}/items/1`, { headers: { 'x-forwarded-for': '203.0.113.5' } });
      assert.deepEqual((await tb.send(['KEYS', 'rl:*'])).map(String), ['rl:ip:127.0.0.1']);
    });

    test('Forwarded header (RFC 7239) and IPv6 grouped by /64', async () => {
      await start({ clientIp: new ClientIpConfig({ trustedProxies: ['127.0.0.1'], header: 'forwarded' }) }, { policies: [perMinute('ip', 10)] });
      await request(`${http.url}/items/1`, { headers: { forwarded: 'for=198.51.100.1, for="[2001:db8:1:2::7]:4711";proto=https' } });
      await request(`${http.url}/items/1`, { headers: { forwarded: 'for="[2001:db8:1:2:ffff::1]"' } });
      await request(`${http.url}/items/1`, { headers: { forwarded: 'for="[2001:db8:1:3::1]"' } });
      const keys = (await tb.send(['KEYS', 'rl:*'])).map(String).sort();
      assert.deepEqual(keys, ['rl:ip:2001:db8:1:2::/64', 'rl:ip:2001:db8:1:3::/64']);
      assert.equal((await tb.peek('rl:ip:2001:db8:1:2::/64', 10, 10 / 60, { now: NOW })).remaining, 8, 'one /64, one bucket');
    });

    test('refund from the handler, and automatically for the app\'s 5xx (refundOn)', async () => {
      const limiter = await start({}, { policies: [perMinute('ip', 10)], refundOn: [500] });
      const r = await request(`${http.url}/refund`);
      assert.equal(r.status, 200);
      assert.deepEqual([r.json.first, r.json.second], [true, false], 'refund is idempotent');
      assert.equal((await tb.peek('rl:ip:127.0.0.1', 10, 10 / 60, { now: NOW })).remaining, 10);
      assert.equal((await request(`${http.url}/fail`)).status, 500);
      assert.equal((await tb.peek('rl:ip:127.0.0.1', 10, 10 / 60, { now: NOW })).remaining, 10, 'a 500 is refunded before the response completes');
      assert.equal((await request(`${http.url}/throw`)).status, 500);
      assert.equal((await tb.peek('rl:ip:127.0.0.1', 10, 10 / 60, { now: NOW })).remaining, 10, 'a thrown error (500) too');
      await request(`${http.url}/items/1`);
      assert.equal((await tb.peek('rl:ip:127.0.0.1', 10, 10 / 60, { now: NOW })).remaining, 9, 'a 200 is not refunded');
      assert.equal(limiter.stats.refunds, 3);
    });

    test('legacy X-RateLimit-* headers: Unix reset by default, delta on request', async () => {
      await start({ legacyHeaders: true }, { policies: [perMinute('ip', 10), perMinute('burst', 3)] });
      const before = Date.now() / 1000;
      const r = await request(`${http.url}/items/1`);
      const afterT = Date.now() / 1000;
      assert.equal(r.headers['x-ratelimit-limit'], '3', 'the policy with the smallest remaining');
      assert.equal(r.headers['x-ratelimit-remaining'], '2');
      const reset = Number(r.headers['x-ratelimit-reset']);
      assert.ok(reset >= Math.ceil(before + 20) && reset <= Math.ceil(afterT + 20), `reset ${reset}`);
      await http.close();
      await tb.send(['FLUSHALL']);
      await start({ legacyHeaders: true, legacyReset: 'delta' }, { policies: [perMinute('ip', 10)] });
      const d = await request(`${http.url}/items/1`);
      assert.deepEqual([d.headers['x-ratelimit-limit'], d.headers['x-ratelimit-remaining'], d.headers['x-ratelimit-reset']], ['10', '9', '6']);
    });
  });
}

describe('express: shadow mode, metrics, deny cache (node-redis)', () => {
  let redis;
  let tb;
  let http;
  before(async () => {
    redis = await CLIENTS[0][1](server.port);
    tb = new TbClient(redis);
  });
  after(async () => { await closeClient(redis); });
  beforeEach(async () => { await tb.send(['FLUSHALL']); });
  afterEach(async () => { await http?.close(); http = undefined; });

  test('shadow policy refuses: the request goes on, nothing is charged, headers leave it out', async () => {
    const log = memoryLogger();
    const registry = new Registry();
    const limiter = new RateLimiter(redis, { policies: [perMinute('ip', 10), new Policy({ name: 'beta', limit: new Limit(1, 1 / 60), shadow: true })],
      exclude: ['GET /metrics'], timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: log, metrics: new PrometheusMetrics({ registry }), name: 'api' });
    http = await listenExpress(buildApp(limiter, { metricsRegistry: registry }));
    const a = await request(`${http.url}/items/1`);
    assert.deepEqual(sfItems(a.headers['ratelimit-policy']), [['ip', { q: 10, w: 60 }]]);
    assert.deepEqual(a.json, { outcome: 'allowed', shadowLimited: [], violated: [] });
    const b = await request(`${http.url}/items/1`);
    assert.equal(b.status, 200);
    assert.deepEqual(b.json, { outcome: 'allowed', shadowLimited: ['beta'], violated: [] });
    assert.deepEqual(sfItems(b.headers['ratelimit']), [['ip', { r: 9, t: 6 }]], 'the enforced policy keeps its item; nothing was charged');
    assert.equal((await tb.peek('rl:ip:127.0.0.1', 10, 10 / 60, { now: NOW })).remaining, 9);
    await request(`${http.url}/items/1`);
    assert.deepEqual(log.lines, ["redis-tb: shadow policy 'beta' would have limited a request (1 since the last line)"]);
    assert.equal(limiter.stats.shadowLimited, 2);
    assert.equal(limiter.stats.allowed, 1, "a shadow-limited request was not admitted by Redis");
    const refund = await request(`${http.url}/refund`);
    assert.deepEqual([refund.json.first, refund.json.shadowLimited], [false, ['beta']], 'refund of a shadow-limited request is a no-op');
    const m = scrape((await request(`${http.url}/metrics`)).body);
    assert.equal(m['redis_tb_allowed_total{limiter=api,policy=ip}'], 1);
    assert.equal(m['redis_tb_allowed_total{limiter=api,policy=beta}'], 1);
    assert.equal(m['redis_tb_shadow_limited_total{limiter=api,policy=beta}'], 3);
    assert.equal(m['redis_tb_redis_call_duration_seconds_count'], 4);
    assert.deepEqual(m['redis_tb_redis_call_duration_seconds_buckets'], ['0.0005', '0.001', '0.0025', '0.005', '0.01', '0.025', '0.05', '0.1', '0.25', '+Inf']);
  });

  test('enforced policy refuses next to a passing shadow one: 429 names only the enforced', async () => {
    const limiter = new RateLimiter(redis, { policies: [perMinute('ip', 1), new Policy({ name: 'beta', limit: new Limit(1, 1 / 60), shadow: true })], timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger() });
    http = await listenExpress(buildApp(limiter));
    await request(`${http.url}/items/1`);
    const r = await request(`${http.url}/items/1`);
    assert.equal(r.status, 429);
    assert.deepEqual(r.json.violated_policies, ['ip']);
    assert.equal(r.json.detail, "rate limit exceeded for 'ip': retry after 60 s");
    assert.deepEqual(sfItems(r.headers['ratelimit-policy']), [['ip', { q: 1, w: 60 }]]);
  });

  test('limiter-wide shadow: never a 429, no headers; moving to enforced is configuration only', async () => {
    const policies = [perMinute('ip', 1)];
    const shadow = new RateLimiter(redis, { policies, timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger(), shadow: true });
    http = await listenExpress(buildApp(shadow));
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await request(`${http.url}/items/1`)).status);
    assert.deepEqual(codes, [200, 200, 200]);
    const last = await request(`${http.url}/items/1`);
    assert.equal(last.headers['ratelimit'], undefined);
    assert.deepEqual(last.json.shadowLimited, ['ip']);
    await http.close();
    const enforced = new RateLimiter(redis, { policies, timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger() });
    http = await listenExpress(buildApp(enforced));
    assert.equal((await request(`${http.url}/items/1`)).status, 429, 'the same bucket, now enforced');
  });

  test('metrics: limited, refunded, store errors and degraded, parsed from /metrics', async () => {
    const registry = new Registry();
    const metrics = new PrometheusMetrics({ registry });
    const limiter = new RateLimiter(redis, { policies: [perMinute('ip', 2), perMinute('user', 5)], exclude: ['GET /metrics'], refundOn: [500], timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger(), metrics, name: 'api' });
    http = await listenExpress(buildApp(limiter, { metricsRegistry: registry }));
    await request(`${http.url}/fail`);
    await request(`${http.url}/items/1`);
    await request(`${http.url}/items/1`);
    assert.equal((await request(`${http.url}/items/1`)).status, 429);
    const downRegistry = new Registry();
    const broken = new RateLimiter(async () => { throw new Error('connection refused'); }, { policies: [perMinute('ip', 2)], logger: memoryLogger(), metrics: new PrometheusMetrics({ registry: downRegistry }), name: 'down' });
    await broken.check({ request: {}, peer: '127.0.0.1', header: () => [], route: 'GET /x' });
    const m = scrape((await request(`${http.url}/metrics`)).body);
    assert.equal(m['redis_tb_allowed_total{limiter=api,policy=ip}'], 3);
    assert.equal(m['redis_tb_allowed_total{limiter=api,policy=user}'], 3);
    assert.equal(m['redis_tb_limited_total{limiter=api,policy=ip}'], 1);
    assert.equal(m['redis_tb_limited_total{limiter=api,policy=user}'], undefined);
    assert.equal(m['redis_tb_refunded_total{limiter=api,policy=ip}'], 1);
    const down = scrape(await downRegistry.metrics());
    assert.equal(down['redis_tb_store_errors_total{limiter=down}'], 1);
    assert.equal(down['redis_tb_degraded_total{limiter=down}'], 1);
    assert.equal(down['redis_tb_redis_call_duration_seconds_count'], 1, 'a failed call is observed too');
    assert.equal(m['redis_tb_store_errors_total{limiter=api}'], undefined);
    assert.equal(m['redis_tb_redis_call_duration_seconds_count'], 5, 'four checks (TB.MTAKE) and one refund');
    const labels = Object.keys(m).join(' ');
    assert.ok(!labels.includes('127.0.0.1'), 'no client identity in any label');
  });

  test('deny cache: refusals answered locally, counting down, no Redis call', async () => {
    const registry = new Registry();
    const limiter = new RateLimiter(redis, { policies: [new Policy({ name: 'ip', limit: new Limit(3, 0.1), cost: (req) => Number(req.get('x-cost') ?? 3) }), perMinute('wide', 100)], timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger(), denyCache: { maxEntries: 100 }, metrics: new PrometheusMetrics({ registry }), name: 'dc' });
    // capacity 3, refilled at 0.1 per s: a refused cost of 3 waits about 30 s; cost from a header
    http = await listenExpress(buildApp(limiter, { metricsRegistry: registry }));
    assert.equal((await request(`${http.url}/items/1`)).status, 200);
    // that admission spent all 3 tokens of 'ip': Redis would refuse a cost of 3 for 30 s,
    // and that refusal is cached
    const calls0 = await checkCalls(redis);
    const first = await request(`${http.url}/items/1`);
    assert.equal(first.status, 429);
    assert.equal(await checkCalls(redis), calls0, 'refused by the cache after the admission');
    assert.equal(first.headers['retry-after'], '30');
    const hits = [];
    for (let i = 0; i < 3; i++) hits.push(await request(`${http.url}/items/1`));
    assert.equal(await checkCalls(redis), calls0, 'cache hits do not call Redis');
    for (const h of hits) {
      assert.equal(h.status, 429);
      assert.deepEqual(h.json.violated_policies, ['ip']);
      assert.deepEqual(sfItems(h.headers['ratelimit-policy']), [['ip', { q: 3, w: 30 }]], 'only the cached violated policy');
      assert.equal(sfItems(h.headers['ratelimit'])[0][1].r, 0);
      assert.ok(Number(h.headers['retry-after']) <= Number(first.headers['retry-after']));
    }
    assert.equal(limiter.stats.denyCacheHits, 4);
    await sleep(1100);
    const later = await request(`${http.url}/items/1`);
    assert.equal(later.status, 429);
    const [was, now] = [Number(first.headers['retry-after']), Number(later.headers['retry-after'])];
    assert.ok(now < was && now >= was - 5, `Retry-After counts down: ${was} then ${now}`);
    assert.equal(await checkCalls(redis), calls0);
    // a smaller cost goes to Redis (which refuses it: about 0.1-0.2 tokens are back)
    const small = await request(`${http.url}/items/1`, { headers: { 'x-cost': '1' } });
    assert.equal(small.status, 429);
    assert.equal(await checkCalls(redis), calls0 + 1);
    const m = scrape(await registry.metrics());
    assert.equal(m['redis_tb_deny_cache_hits_total{limiter=dc,policy=ip}'], 5);
    assert.equal(m['redis_tb_limited_total{limiter=dc,policy=ip}'], 6, 'one refusal by Redis, five by the cache');
  });

  test('deny cache: a refund by another instance is not seen; a refund through this one drops the entry', async () => {
    const policy = new Policy({ name: 'ip', limit: new Limit(2, 0.01), cost: (req) => Number(req.get('x-cost') ?? 2) });
    const a = new RateLimiter(redis, { policies: [policy], timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger(), denyCache: { maxEntries: 10 } });
    const b = new RateLimiter(redis, { policies: [policy], timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger() });
    http = await listenExpress(buildApp(a));
    const httpB = await listenExpress(buildApp(b));
    try {
      const admitted = await b.check({ request: { get: () => undefined }, peer: '127.0.0.1', header: () => [], route: 'GET /items/:id' });
      assert.equal(admitted.outcome, 'allowed');
      assert.equal((await request(`${http.url}/items/1`)).status, 429, 'A: refused by Redis, cached');
      assert.equal(await admitted.refund(), true, 'B refunds: Redis has the tokens again');
      const calls = await checkCalls(redis);
      assert.equal((await request(`${http.url}/items/1`)).status, 429, 'A still refuses from its cache');
      assert.equal(await checkCalls(redis), calls);
      assert.equal((await request(`${httpB.url}/items/1`)).status, 200, 'B (no cache) is admitted: Redis would admit');
      // through A itself: a cost-1 request reaches Redis... refused there (B took the tokens)
      await tb.send(['DEL', 'rl:ip:127.0.0.1']);
      const one = await request(`${http.url}/refund`, { headers: { 'x-cost': '1' } });
      assert.equal(one.json.first, true, 'A admitted a smaller cost and refunded it');
      assert.equal((await request(`${http.url}/items/1`)).status, 200, 'the refund through A dropped the cached refusal');
    } finally {
      await httpB.close();
    }
  });

  test('an IPv6 TCP peer is grouped by /64', async (t) => {
    const limiter = new RateLimiter(redis, { policies: [perMinute('ip', 10)], timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger() });
    try {
      http = await listenExpress(buildApp(limiter), '::1');
    } catch (err) {
      t.skip(`no IPv6 loopback here: ${err.message}`);
      return;
    }
    const r = await request(`${http.url}/items/1`);
    assert.equal(r.status, 200);
    assert.deepEqual((await tb.send(['KEYS', 'rl:*'])).map(String), ['rl:ip:::/64']);
  });

  test('deny cache never holds shadow refusals', async () => {
    const limiter = new RateLimiter(redis, { policies: [new Policy({ name: 'beta', limit: new Limit(1, 0.01), shadow: true })], timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger(), denyCache: { maxEntries: 10 } });
    http = await listenExpress(buildApp(limiter));
    const calls = await checkCalls(redis);
    for (let i = 0; i < 3; i++) assert.equal((await request(`${http.url}/items/1`)).status, 200);
    assert.equal(await checkCalls(redis), calls + 3);
    assert.equal(limiter.stats.denyCacheHits, 0);
  });
});

for (const [clientName, makeClient] of [...CLIENTS, ['node-redis v4', nodeRedisV4]]) {
  test(`express fail-open and fail-closed with Redis killed and restarted (${clientName})`, async () => {
    const own = await new RedisServer().start();
    const redis = await makeClient(own.port);
    const openLog = memoryLogger();
    const policies = [perSecond('ip', 100)];
    // a 3 s cool-down, so that the burst below stays inside it on a loaded machine (the 1 s
    // default is tested in limiter.test.mjs)
    const open = new RateLimiter(redis, { policies, timeoutMs: ANSWER_TIMEOUT_MS, cooldownMs: 3000, logger: openLog });
    const closed = new RateLimiter(redis, { policies, timeoutMs: ANSWER_TIMEOUT_MS, logger: memoryLogger(), failOpen: false });
    const httpOpen = await listenExpress(buildApp(open));
    const httpClosed = await listenExpress(buildApp(closed));
    try {
      assert.ok((await request(`${httpOpen.url}/items/1`)).headers['ratelimit']);
      await own.kill();
      const o = await request(`${httpOpen.url}/items/1`);
      assert.equal(o.status, 200);
      assert.equal(o.headers['ratelimit'], undefined, 'fail-open: no rate-limit headers');
      assert.equal(o.json.outcome, 'store_error');
      const c = await request(`${httpClosed.url}/items/1`);
      assert.equal(c.status, 503);
      assert.equal(c.headers['retry-after'], '1');
      assert.equal(c.headers['content-type'], 'application/problem+json');
      assert.deepEqual(c.json, {
        type: 'about:blank', title: 'Service Unavailable', status: 503,
        detail: "the rate limiter's store is unavailable; retry shortly",
      });
      for (let i = 0; i < 5; i++) await request(`${httpOpen.url}/items/1`);
      assert.equal(open.stats.storeErrors, 1, 'one failed call, then the cool-down skips Redis');
      assert.equal(open.stats.degraded, 6);
      assert.equal(openLog.lines.length, 1, 'one log line');
      assert.match(openLog.lines[0], new RegExp(`^redis-tb: TB\\.TAKE on 127\\.0\\.0\\.1:${own.port} failed \\(.*\\); failing open: requests pass unlimited, Redis skipped for 3 s; store errors so far: 1$`));
      await own.start();
      let back = false;
      const until = Date.now() + 15_000;
      while (!back && Date.now() < until) {
        await sleep(100);
        back = Boolean((await request(`${httpOpen.url}/items/1`)).headers['ratelimit']);
      }
      assert.ok(back, 'limits apply again once Redis is back');
      let closedBack = false;
      while (!closedBack && Date.now() < until) {
        closedBack = (await request(`${httpClosed.url}/items/1`)).status === 200;
        if (!closedBack) await sleep(100);
      }
      assert.ok(closedBack);
    } finally {
      await httpOpen.close();
      await httpClosed.close();
      await closeClient(redis);
      await own.stop();
    }
  });
}

test('Express 4: the route template from app._router, mount parameters put back', async () => {
  const { default: express4 } = await import('express-v4');
  const redis = await CLIENTS[1][1](server.port);
  const tb = new TbClient(redis);
  await tb.send(['FLUSHALL']);
  const limiter = new RateLimiter(redis, { policies: [
      perMinute('item', 3, { routes: ['GET /items/:id'], perRoute: true }),
      perMinute('posts', 3, { routes: ['GET /users/:uid/posts/:pid'], perRoute: true }),
      perMinute('fail', 5, { routes: ['GET /fail', 'GET /throw'] }),
    ],
    refundOn: [500], timeoutMs: ANSWER_TIMEOUT_MS, redisNow: fixedClock, logger: memoryLogger() });
  const http = await listenExpress(buildApp(limiter, { expressLib: express4 }));
  try {
    const a = await request(`${http.url}/items/1`);
    assert.deepEqual(sfItems(a.headers['ratelimit']), [['item', { r: 2, t: 20 }]]);
    const b = await request(`${http.url}/users/42/posts/42`);
    assert.deepEqual(sfItems(b.headers['ratelimit']), [['posts', { r: 2, t: 20 }]]);
    assert.deepEqual((await tb.send(['KEYS', 'rl:*'])).map(String).sort(),
      ['rl:item@GET%20/items/%3Aid:127.0.0.1', 'rl:posts@GET%20/users/%3Auid/posts/%3Apid:127.0.0.1']);
    assert.equal((await request(`${http.url}/nope`)).headers['ratelimit'], undefined);
    assert.equal((await request(`${http.url}/fail`)).status, 500);
    assert.equal((await request(`${http.url}/throw`)).status, 500);
    assert.equal((await tb.peek('rl:fail:127.0.0.1', 5, 5 / 60, { now: NOW })).remaining, 5, '5xx refunded under Express 4 too');
    assert.equal(limiter.stats.refunds, 2);
  } finally {
    await http.close();
    await closeClient(redis);
  }
});
