// The Fastify example end to end: the app as its own process against a real redis-server
// with the module; requests from 127.0.0.2 (the trusted proxy) carry X-Forwarded-For.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { AppProcess, RedisServer, type Reply, type RequestOptions, counter, item, request, scrape, sf, sleep } from 'redis-tb-node-test-support';
import { startupExitTests, streamRouteTests } from 'redis-tb-node-test-support';

const PROXY = '127.0.0.2';
const ALICE = { 'x-api-key': 'key-alice' }; // pro
const BOB = { 'x-api-key': 'key-bob' }; // free
const CAROL = { 'x-api-key': 'key-carol' }; // free

// A loaded CI machine can take longer than the default 50 ms bound to answer a TB.MTAKE,
// which would send that request down the fail-open path; the tests check the limits, so
// they give Redis 2 s. (The outage tests stop Redis: refused connections fail at once.)
const SLOW_MACHINE = { REDIS_TB_TIMEOUT_MS: '2000' };

let redis: RedisServer;
let app: AppProcess;

function as(ip: string) {
  return (path: string, opts: RequestOptions = {}): Promise<Reply> =>
    request(app.url, path, { ...opts, localAddress: PROXY, headers: { 'x-forwarded-for': ip, ...(opts.headers ?? {}) } });
}

before(async () => {
  redis = await RedisServer.start();
  app = await new AppProcess('dist/src/server.js', { REDIS_URL: redis.url, TRUSTED_PROXIES: `${PROXY}/32`, ...SLOW_MACHINE }).start();
});

after(async () => {
  await app?.stop();
  await redis?.stop();
});

describe('fastify example, Redis up', () => {
  test('layers and plan tiers in the headers; /metrics and unknown paths are not limited', async () => {
    const c = as('198.51.100.1');
    const pro = await c('/items/1', { headers: ALICE });
    const free = await c('/items/1', { headers: BOB });
    const anonymous = await c('/items/1');
    for (const r of [pro, free, anonymous]) assert.equal(r.status, 200);
    assert.deepEqual(sf(pro.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }], ['user', { q: 5000, w: 3600 }]]);
    assert.deepEqual(sf(free.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }], ['user', { q: 100, w: 3600 }]]);
    assert.deepEqual(sf(anonymous.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }]]);
    assert.deepEqual(item(free.headers.ratelimit, 'user'), { r: 99, t: 36 });
    assert.ok(Number(item(anonymous.headers.ratelimit, 'ip').r) <= 7, 'three requests from one address (10 per second back)');
    const metrics = await c('/metrics');
    assert.equal(metrics.headers['ratelimit-policy'], undefined);
    const missing = await c('/nope');
    assert.equal(missing.status, 404);
    assert.equal(missing.headers['ratelimit-policy'], undefined);
  });

  test('the ip layer refuses with 429 problem+json; the refusal spends nothing on the user layer', async () => {
    const c = as('198.51.100.2');
    const replies = await Promise.all(Array.from({ length: 25 }, () => c('/items/2', { headers: CAROL })));
    const ok = replies.filter((r) => r.status === 200).length;
    const refused = replies.filter((r) => r.status === 429);
    assert.ok(ok >= 10 && refused.length > 0, `${ok} passed, ${refused.length} refused`);
    const r = refused[0]!;
    assert.equal(r.headers['content-type'], 'application/problem+json');
    const body = r.json();
    assert.deepEqual(
      { type: body.type, title: body.title, status: body.status, violated: body.violated_policies },
      { type: 'about:blank', title: 'Too Many Requests', status: 429, violated: ['ip'] },
    );
    assert.equal(r.headers['retry-after'], String(Math.max(1, Math.ceil(body.retry_after))));
    // carol's hourly bucket: charged for the admitted requests only, and this one
    const check = await as('198.51.100.3')('/items/3', { headers: CAROL });
    assert.equal(item(check.headers.ratelimit, 'user').r, 100 - ok - 1);
  });

  test('endpoint policy with a refund in the handler and one for our own 500', async () => {
    const c = as('198.51.100.4');
    assert.equal((await c('/orders', { method: 'POST', body: { item_id: 1, quantity: 0 }, headers: BOB })).status, 422);
    assert.equal((await c('/orders', { method: 'POST', body: { item_id: 13, quantity: 1 }, headers: BOB })).status, 500);
    const left: unknown[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await c('/orders', { method: 'POST', body: { item_id: 1, quantity: 1 }, headers: BOB });
      assert.equal(r.status, 201);
      left.push(item(r.headers.ratelimit, 'orders').r);
    }
    assert.deepEqual(left, [4, 3, 2, 1, 0], 'the 422 and the 500 were refunded');
    const refused = await c('/orders', { method: 'POST', body: { item_id: 1, quantity: 1 }, headers: BOB });
    assert.equal(refused.status, 429);
    assert.deepEqual(refused.json().violated_policies, ['orders']);
    assert.match(refused.json().detail, /^rate limit exceeded for 'orders': retry after \d+ s$/);
  });

  test('the decision in a handler: slow_down when a bucket is nearly empty', async () => {
    const c = as('198.51.100.5');
    const first = await c('/items/4');
    assert.equal(first.json().slow_down, false);
    const burst = await Promise.all(Array.from({ length: 9 }, () => c('/items/4')));
    assert.ok(burst.some((r) => r.status === 429 || r.json().slow_down === true));
  });

  test('the login context has its own limiter: a sliding window of 20 an hour', async () => {
    const c = as('198.51.100.6');
    const left: unknown[] = [];
    for (let i = 0; i < 20; i++) {
      if (i) await sleep(120); // slower than the API's 'ip' (10 a second) refills
      const r = await c('/login', { method: 'POST', body: {} });
      assert.equal(r.status, 200);
      // the API's 'ip' (fail open) then the login limiter's window (SPEC W2: q=20, w=3600)
      assert.deepEqual(sf(r.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }], ['login', { q: 20, w: 3600 }]]);
      left.push(r.json().attempts_left);
    }
    assert.deepEqual(left, Array.from({ length: 20 }, (_, i) => 19 - i));
    const refused = await c('/login', { method: 'POST', body: {} });
    assert.equal(refused.status, 429);
    assert.deepEqual(refused.json().violated_policies, ['login']);
  });

  test('/metrics scraped and parsed: per-policy counters of both limiters', async () => {
    const families = await scrape(app.url);
    assert.ok(counter(families, 'redis_tb_allowed_total', { limiter: 'api', policy: 'ip' }) >= 10);
    assert.ok(counter(families, 'redis_tb_limited_total', { limiter: 'api', policy: 'ip' }) >= 1);
    assert.equal(counter(families, 'redis_tb_limited_total', { limiter: 'api', policy: 'orders' }), 1);
    assert.equal(counter(families, 'redis_tb_refunded_total', { limiter: 'api', policy: 'orders' }), 2);
    assert.equal(counter(families, 'redis_tb_allowed_total', { limiter: 'login', policy: 'login' }), 20);
    assert.equal(counter(families, 'redis_tb_limited_total', { limiter: 'login', policy: 'login' }), 1);
    const hist = families.find((f) => f.name === 'redis_tb_redis_call_duration_seconds');
    assert.equal(hist?.type, 'HISTOGRAM');
  });
});

describe('fastify example, GET /stream and GET /search', () => {
  test('SSE tokens, a streams slot (no w), tokens held and settled; a hold that never fits is a 429', async () => {
    const c = as('198.51.100.30');
    const r = await c('/stream?tokens=3&max_tokens=400');
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /^text\/event-stream/);
    assert.equal(r.body, 'data: token-1\n\ndata: token-2\n\ndata: token-3\n\ndata: [DONE]\n\n');
    assert.deepEqual(item(r.headers['ratelimit-policy'], 'streams'), { q: 2 });
    assert.deepEqual(item(r.headers.ratelimit, 'streams'), { r: 1, t: 0 });
    assert.ok(!sf(r.headers.ratelimit).some(([n]) => n === 'tokens'), "'tokens' is held by the handler (SPEC G1)");
    // four holds of 400 fit in 1000 only because each settled its 3 (SPEC G3)
    for (let i = 0; i < 3; i++) assert.equal((await c('/stream?tokens=3&max_tokens=400')).status, 200);
    const never = await c('/stream?tokens=1&max_tokens=1001');
    assert.equal(never.status, 429);
    assert.deepEqual(never.json().violated_policies, ['tokens']);
    assert.equal(never.json().retry_after, null);
  });

  test('a search costs a token per page; the shadow policy refuses nothing and is in no header', async () => {
    const c = as('198.51.100.31');
    const r = await c('/search?q=x&size=200');
    assert.equal(r.status, 200);
    assert.deepEqual(item(r.headers.ratelimit, 'search'), { r: 56, t: 4 });
    const big = await c('/search?q=x&size=2750');
    assert.equal(big.status, 200);
    assert.ok(!sf(big.headers['ratelimit-policy']).some(([n]) => n === 'search-strict'));
    assert.equal((await c('/healthz')).status, 200);
  });
});

describe('fastify example, Redis stopped and restarted', () => {
  test('API fails open without headers, login fails closed with 503; limiting resumes', async () => {
    const c = as('198.51.100.20');
    await redis.stop();
    const open = await c('/items/5');
    assert.equal(open.status, 200);
    assert.equal(open.headers['ratelimit-policy'], undefined);
    assert.equal(open.headers.ratelimit, undefined);
    const closed = await c('/login', { method: 'POST', body: {} });
    assert.equal(closed.status, 503);
    assert.equal(closed.headers['retry-after'], '1');
    assert.equal(closed.headers['content-type'], 'application/problem+json');
    assert.deepEqual(closed.json(), {
      type: 'about:blank', title: 'Service Unavailable', status: 503,
      detail: "the rate limiter's store is unavailable; retry shortly",
    });
    const families = await scrape(app.url);
    assert.ok(counter(families, 'redis_tb_degraded_total', { limiter: 'api' }) >= 1);
    assert.ok(counter(families, 'redis_tb_store_errors_total', { limiter: 'login' }) >= 1);

    await redis.start();
    const deadline = Date.now() + 20_000;
    let back: Reply | undefined;
    while (Date.now() < deadline) {
      back = await c('/items/6');
      if (back.headers.ratelimit !== undefined) break;
      await sleep(100);
    }
    assert.ok(back?.headers.ratelimit, `limiting resumed: ${app.output.slice(-2000)}`);
    const again = await Promise.all(Array.from({ length: 25 }, () => c('/items/7')));
    assert.ok(again.some((r) => r.status === 429));
    const login = await as('198.51.100.21')('/login', { method: 'POST', body: {} });
    assert.equal(login.status, 200);
  });
});

describe('fastify example, GET /stream (issue 39: L3, L5)', () => {
  streamRouteTests({
    base: () => app.url,
    redisPort: () => redis.port,
    as: (ip) => ({ headers: { 'x-forwarded-for': ip }, localAddress: PROXY }),
  });
});

describe('fastify example, startup (SPEC U1-U4)', () => {
  startupExitTests('dist/src/server.js', ['ip', 'user', 'orders', 'search', 'search-strict', 'streams']);

  test('REDIS_TB_START_DEGRADED=1: an unreachable Redis is U2\'s one line; the app serves, failing open (and closed for login)', async () => {
    const nowhere = await RedisServer.start();
    const url = nowhere.url;
    await nowhere.stop();
    const p = await new AppProcess('dist/src/server.js', { REDIS_URL: url, REDIS_TB_START_DEGRADED: '1' }).start();
    try {
      const r = await request(p.url, '/items/1');
      assert.equal(r.status, 200);
      assert.equal(r.headers.ratelimit, undefined);
      const login = await request(p.url, '/login', { method: 'POST', body: {} });
      assert.equal(login.status, 503);
      assert.match(p.output, /^redis-tb: Redis at 127\.0\.0\.1:\d+ unreachable at startup; starting degraded \(the limiter's failure mode applies until it answers\)$/m);
    } finally {
      await p.stop();
    }
  });
});
