// The Express example end to end: the app as its own process (a real HTTP server) against
// a real redis-server with the module, requests over loopback from 127.0.0.2 (the app's
// trusted proxy) carrying X-Forwarded-For, so each test has its own client addresses.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createClient } from 'redis';
import { AppProcess, RedisServer, type Reply, type RequestOptions, counter, item, request, scrape, sf, sleep } from 'redis-tb-node-test-support';
import { startupExitTests, streamRouteTests } from 'redis-tb-node-test-support';

const PROXY = '127.0.0.2';
const ALICE = { 'x-api-key': 'key-alice' }; // pro
const BOB = { 'x-api-key': 'key-bob' }; // free
const OPS = { 'x-api-key': 'key-ops' }; // internal: no per-user limit
const CAROL = { 'x-api-key': 'key-carol' }; // free
const DAVE = { 'x-api-key': 'key-dave' }; // free
const STORE_DOWN = {
  type: 'about:blank', title: 'Service Unavailable', status: 503,
  detail: "the rate limiter's store is unavailable; retry shortly",
};

// A loaded CI machine can take longer than the default 50 ms bound to answer a TB.MTAKE,
// which would send that request down the fail-open path; the tests check the limits, so
// they give Redis 2 s. (The outage tests stop Redis: refused connections fail at once.)
const SLOW_MACHINE = { REDIS_TB_TIMEOUT_MS: '2000' };

let redis: RedisServer;
let app: AppProcess;

/** A client behind the trusted proxy with its own address (its own 'ip' bucket). */
function as(ip: string) {
  return (path: string, opts: RequestOptions = {}): Promise<Reply> =>
    request(app.url, path, { ...opts, localAddress: PROXY, headers: { 'x-forwarded-for': ip, ...(opts.headers ?? {}) } });
}

async function redisKeys(pattern: string): Promise<string[]> {
  const c = await createClient({ url: redis.url }).connect();
  try {
    return (await c.keys(pattern)).sort();
  } finally {
    c.destroy();
  }
}

before(async () => {
  redis = await RedisServer.start();
  app = await new AppProcess('dist/src/server.js', { REDIS_URL: redis.url, TRUSTED_PROXIES: `${PROXY}/32`, ...SLOW_MACHINE }).start();
});

after(async () => {
  await app?.stop();
  await redis?.stop();
});

describe('express example, Redis up', () => {
  test('layers and plan tiers: one item per applied policy, the user limit by plan', async () => {
    const c = as('198.51.100.1');
    const pro = await c('/items/1', { headers: ALICE });
    const free = await c('/items/1', { headers: BOB });
    const internal = await c('/items/1', { headers: OPS });
    const anonymous = await c('/items/1');
    for (const r of [pro, free, internal, anonymous]) assert.equal(r.status, 200);
    assert.deepEqual(sf(pro.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }], ['user', { q: 5000, w: 3600 }]]);
    assert.deepEqual(sf(free.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }], ['user', { q: 100, w: 3600 }]]);
    assert.deepEqual(sf(internal.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }]]);
    assert.deepEqual(sf(anonymous.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }]]);
    // alice's first request: 4999 left of 5000, a full token back in 3600/5000 s -> t=1
    assert.deepEqual(item(pro.headers.ratelimit, 'user'), { r: 4999, t: 1 });
    // bob's: 99 of 100, refilled in 36 s
    assert.deepEqual(item(free.headers.ratelimit, 'user'), { r: 99, t: 36 });
    // the keys: <prefix>:<policy>:<identity>
    const keys = await redisKeys('rl:*');
    for (const k of ['rl:ip:198.51.100.1', 'rl:user:alice', 'rl:user:bob']) assert.ok(keys.includes(k), `${k} in ${keys}`);
    assert.ok(!keys.some((k) => k.includes('ops')), 'the internal plan is not limited per user');
  });

  test('the ip layer refuses with a 429 problem+json, and the refusal spends nothing on the user layer', async () => {
    const c = as('198.51.100.2');
    const replies = await Promise.all(Array.from({ length: 25 }, () => c('/items/2', { headers: CAROL })));
    const ok = replies.filter((r) => r.status === 200).length;
    const refused = replies.filter((r) => r.status === 429);
    assert.ok(ok >= 10, `the burst of 10 passes (${ok} passed)`);
    assert.ok(refused.length > 0, 'some of 25 concurrent requests are refused');
    const r = refused[0]!;
    assert.equal(r.headers['content-type'], 'application/problem+json');
    const body = r.json();
    assert.equal(body.type, 'about:blank');
    assert.equal(body.title, 'Too Many Requests');
    assert.equal(body.status, 429);
    assert.deepEqual(body.violated_policies, ['ip']);
    assert.equal(typeof body.retry_after, 'number');
    assert.match(body.detail, /^rate limit exceeded for 'ip': retry after \d+ s$/);
    assert.equal(r.headers['retry-after'], String(Math.max(1, Math.ceil(body.retry_after))));
    assert.deepEqual(item(r.headers.ratelimit, 'ip'), { r: 0, t: item(r.headers.ratelimit, 'ip').t });
    // All or nothing: carol's hourly bucket was charged once per admitted request only
    // (and once for this /quota), not for the refused ones.
    const quota = await as('198.51.100.3')('/quota', { headers: CAROL });
    const user = quota.json().policies.find((p: { name: string }) => p.name === 'user');
    assert.equal(Math.floor(user.remaining), 100 - ok - 1, `user remaining ${user.remaining} after ${ok} admitted`);
  });

  test('endpoint policy, a refund in the handler, then a refusal naming only that policy', async () => {
    const c = as('198.51.100.4');
    const rejected = await c('/orders', { method: 'POST', body: { item_id: 1, quantity: 0 }, headers: DAVE });
    assert.equal(rejected.status, 422);
    const left: unknown[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await c('/orders', { method: 'POST', body: { item_id: 1, quantity: 1 }, headers: DAVE });
      assert.equal(r.status, 201);
      left.push(item(r.headers.ratelimit, 'orders').r);
      assert.deepEqual(sf(r.headers['ratelimit-policy']).map(([n]) => n), ['ip', 'user', 'orders']);
    }
    // the rejected order was refunded: five real orders fit in the five tokens
    assert.deepEqual(left, [4, 3, 2, 1, 0]);
    const refused = await c('/orders', { method: 'POST', body: { item_id: 1, quantity: 1 }, headers: DAVE });
    assert.equal(refused.status, 429);
    assert.equal(refused.headers['content-type'], 'application/problem+json');
    const body = refused.json();
    assert.deepEqual(body.violated_policies, ['orders']);
    assert.ok(body.retry_after > 0 && body.retry_after <= 12, `one token of 5/min: ${body.retry_after}`);
    assert.equal(refused.headers['retry-after'], String(Math.max(1, Math.ceil(body.retry_after))));
    // the refused order charged nothing (nor did the refunded one): dave's hourly bucket
    // shows the 5 orders and this /quota
    const quota = (await c('/quota', { headers: DAVE })).json();
    const user = quota.policies.find((p: { name: string }) => p.name === 'user');
    assert.equal(Math.floor(user.remaining), 94, `user remaining ${user.remaining}`);
  });

  test("the app's own 5xx is refunded automatically (refundOn)", async () => {
    const c = as('198.51.100.5');
    const failed = await c('/orders', { method: 'POST', body: { item_id: 13, quantity: 1 }, headers: BOB });
    assert.equal(failed.status, 500);
    assert.equal(item(failed.headers.ratelimit, 'orders').r, 4, 'the headers went out before the refund');
    const next = await c('/orders', { method: 'POST', body: { item_id: 1, quantity: 1 }, headers: BOB });
    assert.equal(next.status, 201);
    assert.equal(item(next.headers.ratelimit, 'orders').r, 4, 'the failed order gave its token back');
  });

  test('a cost per request and the decision in handlers', async () => {
    const c = as('198.51.100.6');
    const r = await c('/search?q=x&size=200');
    assert.equal(r.status, 200);
    assert.deepEqual(item(r.headers.ratelimit, 'search'), { r: 56, t: 4 });
    const quota = (await c('/quota')).json();
    assert.equal(quota.outcome, 'allowed');
    assert.deepEqual(quota.policies.map((p: { name: string }) => p.name), ['ip']);
    assert.equal(r.json().slow_down, false);
    // a search of 55 tokens: the shadow 'search-strict' (20) refuses it, so it goes on and
    // nothing is charged anywhere (SPEC S2), and the shadow policy is in no header (H1)
    const big = await c('/search?q=x&size=2750');
    assert.equal(big.status, 200);
    assert.ok(Number(item(big.headers.ratelimit, 'search').r) >= 56);
    assert.ok(!sf(big.headers['ratelimit-policy']).some(([n]) => n === 'search-strict'));
  });

  test('excluded routes and unmatched paths are not limited; an untrusted peer cannot pick its address', async () => {
    const health = await as('198.51.100.8')('/healthz');
    assert.equal(health.status, 200);
    assert.equal(health.headers['ratelimit-policy'], undefined);
    const missing = await as('198.51.100.8')('/no/such/route');
    assert.equal(missing.status, 404);
    assert.equal(missing.headers['ratelimit-policy'], undefined);
    // from 127.0.0.1 (not a trusted proxy) the X-Forwarded-For header is ignored
    const direct = await request(app.url, '/items/4', { headers: { 'x-forwarded-for': '203.0.113.99' } });
    assert.equal(direct.status, 200);
    const keys = await redisKeys('rl:ip:*');
    assert.ok(keys.includes('rl:ip:127.0.0.1'));
    assert.ok(!keys.includes('rl:ip:203.0.113.99'));
  });

  test('the login route has its own limiter: a sliding window of 20 an hour, then a 429 naming login', async () => {
    const c = as('198.51.100.9');
    const left: unknown[] = [];
    for (let i = 0; i < 20; i++) {
      if (i) await sleep(120); // slower than the API's 'ip' (10 a second) refills
      const r = await c('/login', { method: 'POST', body: {} });
      assert.equal(r.status, 200);
      left.push(r.json().attempts_left);
      // the API's 'ip' (fail open) then the login limiter's window (SPEC W2: q=20, w=3600)
      assert.deepEqual(sf(r.headers['ratelimit-policy']), [['ip', { q: 10, w: 1 }], ['login', { q: 20, w: 3600 }]]);
    }
    assert.deepEqual(left, Array.from({ length: 20 }, (_, i) => 19 - i));
    const refused = await c('/login', { method: 'POST', body: {} });
    assert.equal(refused.status, 429);
    assert.deepEqual(refused.json().violated_policies, ['login']);
  });

  test('GET /stream: SSE tokens, a streams slot (no w) held while it runs, tokens held and settled', async () => {
    const c = as('198.51.100.30');
    const r = await c('/stream?tokens=3&max_tokens=400');
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /^text\/event-stream/);
    assert.equal(r.body, 'data: token-1\n\ndata: token-2\n\ndata: token-3\n\ndata: [DONE]\n\n');
    assert.deepEqual(item(r.headers['ratelimit-policy'], 'streams'), { q: 2 });
    assert.deepEqual(item(r.headers.ratelimit, 'streams'), { r: 1, t: 0 });
    // 'tokens' is held by the handler, never in the check's headers (SPEC G1)
    assert.ok(!sf(r.headers.ratelimit).some(([n]) => n === 'tokens'));
    // four holds of 400 fit in 1000 only because each settled its 3 (SPEC G3)
    for (let i = 0; i < 3; i++) assert.equal((await c('/stream?tokens=3&max_tokens=400')).status, 200);
    const never = await c('/stream?tokens=1&max_tokens=1001');
    assert.equal(never.status, 429);
    assert.deepEqual(never.json().violated_policies, ['tokens']);
    assert.equal(never.json().retry_after, null);
  });

  test('/metrics in the Prometheus text format: per-policy counters and the Redis call histogram', async () => {
    const families = await scrape(app.url);
    const api = { limiter: 'api' };
    assert.ok(counter(families, 'redis_tb_allowed_total', { ...api, policy: 'ip' }) >= 20);
    assert.ok(counter(families, 'redis_tb_allowed_total', { ...api, policy: 'user' }) >= 5);
    assert.ok(counter(families, 'redis_tb_limited_total', { ...api, policy: 'ip' }) >= 1);
    assert.equal(counter(families, 'redis_tb_limited_total', { ...api, policy: 'orders' }), 1);
    assert.equal(counter(families, 'redis_tb_limited_total', { limiter: 'login', policy: 'login' }), 1);
    // the handler's refund (orders 422) and refundOn's (the 500) gave back every policy
    assert.equal(counter(families, 'redis_tb_refunded_total', { ...api, policy: 'orders' }), 2);
    assert.equal(counter(families, 'redis_tb_store_errors_total', api), 0);
    const hist = families.find((f) => f.name === 'redis_tb_redis_call_duration_seconds');
    assert.ok(hist && hist.type === 'HISTOGRAM');
    // parse-prometheus-text-format folds a histogram's label sets into one sample (it keeps
    // the bucket bounds, drops the other labels, _count and _sum): read the bounds from it,
    // and each limiter's _count from its exposition line.
    const buckets = hist.metrics[0]?.buckets ?? {};
    assert.deepEqual(Object.keys(buckets).map((b) => (b === '+Inf' ? Infinity : Number(b))), [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, Infinity]);
    const raw = (await request(app.url, '/metrics')).body;
    const calls = /^redis_tb_redis_call_duration_seconds_count\{limiter="api"\} (\d+)$/m.exec(raw);
    assert.ok(calls && Number(calls[1]) >= 20, 'TB.MTAKE and refund calls of the api limiter are timed');
    // labels are limiter and policy only (and SPEC E6's backend word on redis_tb_backend):
    // no client identity in any redis-tb series
    for (const f of families.filter((x) => x.name.startsWith('redis_tb_'))) {
      const allowed = f.name === 'redis_tb_backend' ? ['limiter', 'backend'] : ['limiter', 'policy', 'le'];
      for (const m of f.metrics) {
        for (const k of Object.keys(m.labels ?? {})) assert.ok(allowed.includes(k), `${f.name} label ${k}`);
      }
    }
  });
});

describe('express example, Redis stopped and restarted', () => {
  test('fail-open API without headers, fail-closed login 503; limiting resumes after the restart', async () => {
    const c = as('198.51.100.20');
    assert.ok((await c('/items/5')).headers['ratelimit-policy']);
    await redis.stop();

    const open = await c('/items/5');
    assert.equal(open.status, 200, 'the API fails open');
    assert.equal(open.headers['ratelimit-policy'], undefined);
    assert.equal(open.headers.ratelimit, undefined);
    const closed = await c('/login', { method: 'POST', body: {} });
    assert.equal(closed.status, 503, 'the login fails closed');
    assert.equal(closed.headers['retry-after'], '1');
    assert.equal(closed.headers['content-type'], 'application/problem+json');
    assert.deepEqual(closed.json(), STORE_DOWN);
    // many requests while down: all pass (more than the ip limit of 10 per second)
    const burst = await Promise.all(Array.from({ length: 20 }, () => c('/items/6')));
    assert.deepEqual([...new Set(burst.map((r) => r.status))], [200]);
    const down = await scrape(app.url);
    assert.ok(counter(down, 'redis_tb_degraded_total', { limiter: 'api' }) >= 21);
    assert.ok(counter(down, 'redis_tb_store_errors_total', { limiter: 'api' }) >= 1);
    assert.ok(counter(down, 'redis_tb_degraded_total', { limiter: 'login' }) >= 1);

    await redis.start(); // same port, empty
    // node-redis reconnects by itself; after the 1 s cool-down one request probes Redis
    const deadline = Date.now() + 20_000;
    let back: Reply | undefined;
    while (Date.now() < deadline) {
      back = await c('/items/7');
      if (back.headers.ratelimit !== undefined) break;
      await sleep(100);
    }
    assert.ok(back?.headers.ratelimit, `limiting resumed within 20 s: ${app.output.slice(-2000)}`);
    // limiting really resumes: a burst from one address is refused again
    const again = await Promise.all(Array.from({ length: 25 }, () => c('/items/8')));
    assert.ok(again.some((r) => r.status === 429));
    // and the login limiter admits again, with its headers
    const login = await as('198.51.100.21')('/login', { method: 'POST', body: {} });
    assert.equal(login.status, 200);
    const w = item(login.headers.ratelimit, 'login');
    assert.equal(w.r, 19);
    // a sliding window's whole limit is back past the end of the next window
    assert.ok(Number(w.t) > 3600 && Number(w.t) <= 7200, JSON.stringify(w));
  });
});

describe('express example, GET /stream (issue 39: L3, L5)', () => {
  streamRouteTests({
    base: () => app.url,
    redisPort: () => redis.port,
    as: (ip) => ({ headers: { 'x-forwarded-for': ip }, localAddress: PROXY }),
  });
});

describe('express example, startup (SPEC U1-U4)', () => {
  startupExitTests('dist/src/server.js', ['ip', 'user', 'orders', 'search', 'search-strict', 'streams']);

  test('REDIS_TB_START_DEGRADED=1: an unreachable Redis is logged; the app serves, failing open (and closed for login)', async () => {
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
      assert.match(p.output, /redis-tb: Redis at 127\.0\.0\.1:\d+ unreachable at startup; starting degraded \(the limiter's failure mode applies until it answers\)$/m);
    } finally {
      await p.stop();
    }
  });
});
