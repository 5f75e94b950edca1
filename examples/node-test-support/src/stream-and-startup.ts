// The end-to-end checks both Node examples share for issue 39's rows (examples/manifest.json's
// GET /stream and demo.startup): the stream's query bounds (a 400 with bad_query's body), a
// stream that stops within a second of its client leaving and settles what it sent, a
// client that reads nothing cut off at the streams policy's max_duration (6 s) with its
// slot free again, and a limiter that cannot start: one line, exit status 3.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AppProcess, PausedStream, RedisServer, command, request, sleep } from './processes.js';

const BAD_QUERY = (name: string, min: number, max: number): string =>
  `{"type":"about:blank","title":"Bad Request","status":400,"detail":"query parameter '${name}' must be a whole number from ${min} to ${max}"}`;

/** How the tests reach the running app: its URL, Redis's port, a request from a client address. */
export interface StreamContext {
  base(): string;
  redisPort(): number;
  /** headers and source address that make `ip` the client's address (behind the trusted proxy) */
  as(ip: string): { headers: Record<string, string>; localAddress: string };
}

/** TB.PEEK rl:tokens:<ip> HOLDS: the live holds of that client's 'tokens' bucket. */
async function liveHolds(port: number, ip: string): Promise<number> {
  const r = await command(port, ['TB.PEEK', `rl:tokens:${ip}`, 'HOLDS']);
  return Array.isArray(r) ? Number(r[0]) : NaN;
}

/** Polls until `fn` is true or `ms` passed; returns the ms it took, or null. */
async function within(ms: number, fn: () => Promise<boolean>): Promise<number | null> {
  const t0 = Date.now();
  while (Date.now() - t0 <= ms) {
    if (await fn()) return Date.now() - t0;
    await sleep(20);
  }
  return null;
}

export function streamRouteTests(ctx: StreamContext): void {
  test('GET /stream: a query value outside its bounds is a 400 with the manifest\'s problem body, before any hold', async () => {
    const ip = '198.51.100.90';
    const cases: Array<[string, string, number, number]> = [
      ['tokens=10001', 'tokens', 0, 10000], ['tokens=1000000', 'tokens', 0, 10000], ['tokens=-1', 'tokens', 0, 10000],
      ['tokens=1.5', 'tokens', 0, 10000], ['tokens=abc', 'tokens', 0, 10000], ['tokens=', 'tokens', 0, 10000],
      ['delay_ms=10001', 'delay_ms', 0, 10000], ['max_tokens=0', 'max_tokens', 1, 10000], ['max_tokens=1e3', 'max_tokens', 1, 10000],
    ];
    for (const [q, name, min, max] of cases) {
      const { headers, localAddress } = ctx.as(ip);
      const r = await request(ctx.base(), `/stream?${q}`, { headers, localAddress });
      assert.equal(r.status, 400, q);
      assert.equal(r.headers['content-type'], 'application/problem+json', q);
      assert.equal(r.body, BAD_QUERY(name, min, max), q);
    }
    // nothing was held for any of them
    const r = await command(ctx.redisPort(), ['EXISTS', `rl:tokens:${ip}`]);
    assert.equal(r, 0);
    // the bounds themselves pass the query check (another address: the 'ip' policy allows 10 a second)
    const { headers, localAddress } = ctx.as('198.51.100.93');
    const ok = await request(ctx.base(), '/stream?tokens=0&delay_ms=0&max_tokens=1', { headers, localAddress });
    assert.equal(ok.status, 200);
    assert.equal(ok.body, 'data: [DONE]\n\n');
    // (a hold of 10000 never fits the 1000 an hour: a 429 naming 'tokens', not a 400)
    const big = await request(ctx.base(), '/stream?tokens=10000&delay_ms=10000&max_tokens=10000', { headers, localAddress });
    assert.equal(big.status, 429);
    assert.deepEqual(big.json().violated_policies, ['tokens']);
  });

  test('GET /stream: a client that goes away mid-delay stops the stream at once, which settles what it sent', async () => {
    const ip = '198.51.100.91';
    const s = new PausedStream(ctx.base(), '/stream?tokens=5&delay_ms=5000&max_tokens=500', ctx.as(ip));
    // the hold is taken before the first event
    assert.notEqual(await within(5000, async () => (await liveHolds(ctx.redisPort(), ip)) === 1), null, 'the hold taken');
    s.leave();
    // within a second of leaving (a loaded machine gets three), long before the 5 s delay ends
    const took = await within(3000, async () => (await liveHolds(ctx.redisPort(), ip)) === 0);
    assert.notEqual(took, null, 'the hold settled after the client left');
    // settled with what it sent (nothing): the bucket is full again
    const peek = await command(ctx.redisPort(), ['TB.PEEK', `rl:tokens:${ip}`, '1000', String(1000 / 3600)]);
    assert.ok(Array.isArray(peek) && Number(peek[1]) > 999, JSON.stringify(peek));
  });

  test('GET /stream: clients that read nothing are cut off at max_duration (6 s) and their slots are free again', async () => {
    const ip = '198.51.100.92';
    // a long stream whose clients read the head and nothing more, and never leave
    const held = [1, 2].map(() => new PausedStream(ctx.base(), '/stream?tokens=10000&delay_ms=500&max_tokens=100', ctx.as(ip)));
    assert.deepEqual(await Promise.all(held.map((s) => s.head)), [200, 200]);
    const { headers, localAddress } = ctx.as(ip);
    const third = await request(ctx.base(), '/stream?tokens=1', { headers, localAddress });
    assert.equal(third.status, 429, 'both slots taken');
    // at 6 s after their grants the app ends both requests (counted) and closes their
    // connections: the clients, reading again, find them closed
    const timedOut = async (): Promise<number> => {
      const m = /^redis_tb_leases_timed_out_total\{limiter="api",policy="streams"\} (\d+)$/m.exec((await request(ctx.base(), '/metrics')).body);
      return m ? Number(m[1]) : 0;
    };
    const before = await timedOut();
    assert.notEqual(await within(15_000, async () => (await timedOut()) >= before + 2), null, 'both requests ended at max_duration');
    await Promise.all(held.map((s) => s.drainToClose()));
    const again = await request(ctx.base(), '/stream?tokens=1', { headers, localAddress });
    assert.equal(again.status, 200, 'a slot is free again');
    assert.notEqual(await within(3000, async () => (await liveHolds(ctx.redisPort(), ip)) === 0), null, 'both holds settled');
  });
}

/** SPEC U1-U4: an app whose limiter cannot start prints that one line and exits 3. */
export function startupExitTests(script: string, apiPolicies: readonly string[]): void {
  test('a Redis without the module, REDIS_TB_BACKEND=module: U1\'s line, exit status 3 (SPEC E1)', async () => {
    const bare = await RedisServer.start(false);
    try {
      const p = new AppProcess(script, { REDIS_URL: bare.url, REDIS_TB_BACKEND: 'module' }).spawnOnly();
      assert.equal(await p.exited(), 3, p.output);
      const lines = p.output.split('\n').filter((l) => l.includes('redis-tb'));
      assert.deepEqual(lines, [`redis-tb module not loaded on 127.0.0.1:${bare.port}: load libredis_tb.so with loadmodule`]);
    } finally {
      await bare.stop();
    }
  });

  test('a Redis without the module (REDIS_TB_BACKEND unset, auto): the script backend, its line per limiter, the app limits (SPEC E1, E6)', async () => {
    const bare = await RedisServer.start(false);
    const p = new AppProcess(script, { REDIS_URL: bare.url });
    try {
      await p.start();
      const lines = p.output.split('\n').filter((l) => l.startsWith('redis-tb: backend'));
      const line = `redis-tb: backend scripts on 127.0.0.1:${bare.port} (tb.take not found, Functions)`;
      assert.deepEqual(lines, [line, line], p.output);
      const item = await request(p.url, '/items/1');
      assert.equal(item.status, 200, item.body);
      assert.match(String(item.headers['ratelimit']), /^"ip";r=9;t=1/);
      const metrics = (await request(p.url, '/metrics')).body;
      assert.match(metrics, /^redis_tb_backend\{limiter="api",backend="scripts"\} 1$/m);
      assert.match(metrics, /^redis_tb_backend\{limiter="api",backend="module"\} 0$/m);
    } finally {
      await p.stop();
      await bare.stop();
    }
  });

  test('REDIS_TB_BACKEND of no backend: one line naming it, exit status 2', async () => {
    const p = new AppProcess(script, { REDIS_URL: 'redis://127.0.0.1:1', REDIS_TB_BACKEND: 'lua' }).spawnOnly();
    assert.equal(await p.exited(), 2, p.output);
    assert.deepEqual(p.output.trim().split('\n'), ['REDIS_TB_BACKEND: backend must be auto, module or scripts, got "lua"']);
  });

  test('an unreachable Redis: U2\'s line, exit status 3 (degraded only with REDIS_TB_START_DEGRADED=1)', async () => {
    const nowhere = await RedisServer.start();
    const url = nowhere.url;
    await nowhere.stop();
    const p = new AppProcess(script, { REDIS_URL: url }).spawnOnly();
    assert.equal(await p.exited(), 3, p.output);
    const lines = p.output.split('\n').filter((l) => l.startsWith('redis-tb:'));
    assert.equal(lines.length, 1, p.output);
    assert.match(lines[0]!, new RegExp(`^redis-tb: cannot reach Redis at 127\\.0\\.0\\.1:${nowhere.port} \\([^\\n]+\\): start it, or set startDegraded to start failing open$`));
    assert.doesNotMatch(p.output, /Unhandled|    at /, 'no traceback, no unhandled rejection');
    for (const value of ['0', 'true', 'yes']) {
      const q = new AppProcess(script, { REDIS_URL: url, REDIS_TB_START_DEGRADED: value }).spawnOnly();
      assert.equal(await q.exited(), 3, `REDIS_TB_START_DEGRADED=${value}: ${q.output}`);
    }
  });

  test('a Redis Cluster and API policies without a tag function: U3\'s line, exit status 3', async () => {
    const cluster = await RedisServer.startCluster();
    try {
      const p = new AppProcess(script, { REDIS_URL: cluster.url }).spawnOnly();
      assert.equal(await p.exited(), 3, p.output);
      const lines = p.output.split('\n').filter((l) => l.startsWith('redis-tb:'));
      assert.deepEqual(lines, [
        `redis-tb: limiter 'api' sends several keys in one call (policies ${apiPolicies.map((n) => `'${n}'`).join(', ')}), ` +
          'which a Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC K6)',
      ]);
    } finally {
      await cluster.stop();
    }
  });
}
