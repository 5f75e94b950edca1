// SPEC E (issue 42): the script backend against real redis-server processes WITHOUT the
// module (clients/lua loaded by the limiter's startup), beside one with it: the same
// decisions for the same calls, leases and holds, a flushed library reloaded once, a server
// that refuses TIME in scripts, and a forced module on a server without it.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { createClient } from 'redis';
import { Limit, ModuleNotLoadedError, Policy, RateLimiter, ScriptLoadError, TbClient, luaSources } from 'redis-tb';
import { PrometheusMetrics } from 'redis-tb/prometheus';
import { RedisServer, closeClient, freePort, nodeRedis, sleep } from './helpers.mjs';

const NOW = 1764456268.25; // a fixed `now` (seconds) so both backends decide at the same time

/** A logger keeping its warnings and its info lines apart. */
function logger() {
  const warn = [];
  const info = [];
  return { warn: (m) => warn.push(m), info: (m) => info.push(m), lines: { warn, info } };
}

function ctx(peer = '203.0.113.9') {
  return { request: {}, peer, header: () => [], route: 'GET /x' };
}

/** What a decision says, comparable across backends. */
function view(d) {
  return {
    outcome: d.outcome,
    results: d.results.map((r) => ({ name: r.name, allowed: r.allowed, remaining: r.remaining, retryAfter: r.retryAfter, resetAfter: r.resetAfter })),
  };
}

/**
 * `got` is `want`, the waits within `slack` seconds: a window's waits are measured on each
 * server's own clock, read as far apart as the two calls were.
 */
function sameDecision(got, want, what, slack) {
  const [g, w] = [view(got), view(want)];
  const waits = (v) => v.results.map((r) => [r.retryAfter, r.resetAfter]);
  const [gw, ww] = [waits(g), waits(w)];
  gw.forEach((pair, i) => pair.forEach((x, j) => assert.ok(Math.abs(x - ww[i][j]) <= slack, `${what}: wait ${x} vs ${ww[i][j]} (slack ${slack})`)));
  const strip = (v) => ({ ...v, results: v.results.map(({ retryAfter, resetAfter, ...rest }) => rest) });
  assert.deepEqual(strip(g), strip(w), what);
}

/** `INFO commandstats` calls of a subcommand (`script|load`) or command. */
async function calls(client, name) {
  const info = String(await client.sendCommand(['INFO', 'commandstats']));
  const line = info.split(/\r?\n/).find((l) => l.startsWith(`cmdstat_${name}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

describe('SPEC E: the script backend on servers without the module', () => {
  const servers = {};
  const clients = {};

  before(async () => {
    servers.module = await new RedisServer().start();
    servers.plain = await new RedisServer({ withModule: false }).start();
    // no Functions: the library goes in by SCRIPT LOAD and calls are EVALSHA (E2)
    servers.evalsha = await new RedisServer({ withModule: false, args: ['--rename-command', 'FUNCTION', ''] }).start();
    servers.noTime = await new RedisServer({ withModule: false, args: ['--rename-command', 'TIME', ''] }).start();
    for (const [k, s] of Object.entries(servers)) clients[k] = await nodeRedis(s.port);
  });

  after(async () => {
    for (const c of Object.values(clients)) await closeClient(c);
    for (const s of Object.values(servers)) await s.stop();
  });

  const limiterOn = (which, policies, extra = {}) => new RateLimiter(clients[which], {
    policies, name: which, timeoutMs: 2000, logger: logger(), ...extra,
  });

  test('E1, E6: auto chooses the module where tb.take is, else the scripts (Functions or EVALSHA); one line, stats, gauge', async () => {
    const cases = [
      ['module', 'module', `redis-tb: backend module on 127.0.0.1:${servers.module.port} (tb.take found)`],
      ['plain', 'scripts', `redis-tb: backend scripts on 127.0.0.1:${servers.plain.port} (tb.take not found, Functions)`],
      ['evalsha', 'scripts', `redis-tb: backend scripts on 127.0.0.1:${servers.evalsha.port} (tb.take not found, EVALSHA)`],
    ];
    for (const [which, backend, line] of cases) {
      const registry = new Registry();
      const log = logger();
      const limiter = limiterOn(which, [new Policy({ name: 'ip', limit: new Limit(10, 1) })], { logger: log, metrics: new PrometheusMetrics({ registry }) });
      await limiter.startup();
      assert.equal(limiter.stats.backend, backend, which);
      assert.deepEqual(log.lines.info, [line], which);
      assert.deepEqual(log.lines.warn, [], which);
      const gauge = (await registry.getSingleMetric('redis_tb_backend').get()).values;
      const value = (b) => gauge.find((v) => v.labels.limiter === which && v.labels.backend === b)?.value;
      assert.equal(value(backend), 1, which);
      assert.equal(value(backend === 'module' ? 'scripts' : 'module'), 0, which);
    }
  });

  test('E2: the library loaded is the package\'s tb.lua, its SHA-1 the server\'s', async () => {
    const limiter = limiterOn('evalsha', [new Policy({ name: 'ip', limit: new Limit(10, 1) })]);
    await limiter.startup();
    const { sha } = luaSources();
    assert.deepEqual(await clients.evalsha.sendCommand(['SCRIPT', 'EXISTS', sha]), [1]);
  });

  for (const which of ['plain', 'evalsha']) {
    test(`a limiter on the scripts (${which}) takes and denies exactly as on the module`, async () => {
      const kinds = [
        () => [new Policy({ name: 'ip', limit: new Limit(5, 0.5) }), new Policy({ name: 'all', limit: new Limit(7, 0.25), key: () => 'all' })],
        () => [new Policy({ name: 'win', limit: Limit.window(4, 60, 'sliding') })],
        () => [new Policy({ name: 'fixed', limit: Limit.window(3, 10, 'fixed') })],
      ];
      for (const [k, policies] of kinds.entries()) {
        const opts = { redisNow: () => NOW, prefix: `cmp${which}${k}`, hashTag: () => 't' };
        const mod = limiterOn('module', policies(), opts);
        const scr = limiterOn(which, policies(), opts);
        await mod.startup();
        await scr.startup();
        assert.equal(scr.stats.backend, 'scripts');
        for (let i = 0; i < 9; i++) {
          const started = performance.now();
          const [a, b] = await Promise.all([mod.check(ctx()), scr.check(ctx())]);
          sameDecision(b, a, `kind ${k}, call ${i}`, (performance.now() - started) / 1000 + 0.001);
        }
        assert.equal(scr.stats.allowed, mod.stats.allowed);
        assert.equal(scr.stats.limited, mod.stats.limited);
        assert.ok(scr.stats.limited > 0 && scr.stats.allowed > 0);
        assert.equal(scr.stats.storeErrors, 0);
      }
    });
  }

  test('leases and holds through the scripts', async () => {
    const limiter = limiterOn('plain', [
      new Policy({ name: 'conc', limit: Limit.inFlight(1, 30) }),
    ]);
    await limiter.startup();
    const first = await limiter.check(ctx('198.51.100.1'));
    assert.equal(first.outcome, 'allowed');
    assert.match(first.lease.id, /^[0-9a-f]{16}$/);
    assert.equal((await limiter.check(ctx('198.51.100.1'))).outcome, 'limited');
    await first.finish(200);
    assert.equal(limiter.stats.leasesInFlight, 0);
    const again = await limiter.check(ctx('198.51.100.1'));
    assert.equal(again.outcome, 'allowed');
    assert.notEqual(again.lease.id, first.lease.id);
    await again.finish(200);

    const holds = limiterOn('plain', [new Policy({ name: 'llm', limit: new Limit(100000, 50), settleLater: true })]);
    await holds.startup();
    const d = await holds.check(ctx('198.51.100.2'));
    const hold = await d.hold('llm', 4000, 60);
    assert.equal(hold.allowed, true);
    assert.match(hold.id, /^[0-9a-f]{16}$/);
    assert.ok(hold.remaining <= 96000 && hold.remaining > 95000);
    const settled = await hold.settle(2500);
    assert.equal(settled.settled, true);
    assert.equal(settled.charged, -1500);
    assert.equal(holds.stats.storeErrors, 0);
  });

  for (const [which, flush, load] of [['evalsha', ['SCRIPT', 'FLUSH'], 'script|load'], ['plain', ['FUNCTION', 'FLUSH'], 'function|load']]) {
    test(`E3: ${flush.join(' ')} mid-run: the next call reloads once and succeeds, no store error (${which})`, async () => {
      const limiter = limiterOn(which, [new Policy({ name: 'ip', limit: new Limit(10, 1) })], { prefix: `flush${which}` });
      await limiter.startup();
      assert.equal((await limiter.check(ctx())).outcome, 'allowed');
      const loads = await calls(clients[which], load);
      await clients[which].sendCommand(flush);
      const d = await limiter.check(ctx());
      assert.equal(d.outcome, 'allowed');
      assert.equal(Math.floor(d.results[0].remaining), 8);
      assert.equal(await calls(clients[which], load), loads + 1, 'one reload');
      assert.equal((await limiter.check(ctx())).outcome, 'allowed');
      assert.equal(await calls(clients[which], load), loads + 1, 'no more');
      assert.equal(limiter.stats.storeErrors, 0);
      assert.equal(limiter.stats.degraded, 0);
    });
  }

  test('E5: a server that refuses TIME in scripts: the client clock is used and logged', async () => {
    const log = logger();
    let wall = Date.now();
    const clock = { monotonicMs: () => performance.now(), wallMs: () => wall };
    const limiter = limiterOn('noTime', [new Policy({ name: 'ip', limit: new Limit(3, 1) })], { logger: log, clock, hashTag: () => 'a' });
    await limiter.startup();
    assert.deepEqual(log.lines.info, [`redis-tb: backend scripts on 127.0.0.1:${servers.noTime.port} (tb.take not found, Functions, client clock)`]);
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push((await limiter.check(ctx())).outcome);
    assert.deepEqual(outcomes, ['allowed', 'allowed', 'allowed', 'limited']);
    const stored = await clients.noTime.sendCommand(['HGET', 'rl:{a}:ip:203.0.113.9', 'last_refill_time']);
    assert.ok(Math.abs(Number(stored) - wall / 1000) < 0.001, `stored ${stored}, client clock ${wall / 1000}`);
    wall += 2000; // two tokens back by the client's clock
    assert.equal((await limiter.check(ctx())).outcome, 'allowed');
    assert.equal(limiter.stats.storeErrors, 0);
    // leases: NOW from the client's clock (the server's millisecond where a key tells it)
    const leases = limiterOn('noTime', [new Policy({ name: 'conc', limit: Limit.inFlight(1, 30) })], { clock });
    await leases.startup();
    const first = await leases.check(ctx());
    assert.equal(first.outcome, 'allowed');
    assert.equal((await leases.check(ctx())).outcome, 'limited');
    await first.finish(200);
    assert.equal(leases.stats.leasesExpired, 0);
    assert.equal((await leases.check(ctx())).outcome, 'allowed');
    assert.equal(leases.stats.storeErrors, 0);
  });

  test('E1: forced to the module, a server without it fails the start with U1\'s line', async () => {
    const log = logger();
    const limiter = limiterOn('plain', [new Policy({ name: 'ip', limit: new Limit(10, 1) })], { backend: 'module', logger: log });
    await assert.rejects(limiter.startup(), (err) => err instanceof ModuleNotLoadedError
      && err.message === `redis-tb module not loaded on 127.0.0.1:${servers.plain.port}: load libredis_tb.so with loadmodule`);
    assert.deepEqual(log.lines, { warn: [], info: [] });
  });

  test('E1: forced to the scripts on a server with the module: the scripts are used', async () => {
    const log = logger();
    const limiter = limiterOn('module', [new Policy({ name: 'ip', limit: new Limit(10, 1) })], { backend: 'scripts', logger: log, prefix: 'forced' });
    await limiter.startup();
    assert.deepEqual(log.lines.info, [`redis-tb: backend scripts on 127.0.0.1:${servers.module.port} (forced by backend=scripts, Functions)`]);
    const before = await calls(clients.module, 'fcall');
    assert.equal((await limiter.check(ctx())).outcome, 'allowed');
    assert.equal(await calls(clients.module, 'fcall'), before + 1);
  });

  test('E2: a server that refuses both loads fails the start in one line', async () => {
    const server = await new RedisServer({ withModule: false, args: ['--rename-command', 'FUNCTION', '', '--rename-command', 'SCRIPT', ''] }).start();
    const client = await nodeRedis(server.port);
    try {
      const limiter = new RateLimiter(client, { policies: [new Policy({ name: 'ip', limit: new Limit(1, 1) })], logger: logger() });
      await assert.rejects(limiter.startup(), (err) => err instanceof ScriptLoadError
        && /^redis-tb: cannot load the script backend on 127\.0\.0\.1:\d+ \(ERR unknown command 'SCRIPT'[^\n]*\): allow FUNCTION LOAD or SCRIPT LOAD, or load the module$/.test(err.message));
    } finally {
      await closeClient(client);
      await server.stop();
    }
  });

  test('E1: the setting is checked', () => {
    assert.throws(() => new RateLimiter(clients.plain, { policies: [], backend: 'lua' }), RangeError);
  });

  test('E1: a degraded start chooses before its first call that reaches Redis, with the same calls', async () => {
    const port = await freePort();
    const c = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50 }, disableOfflineQueue: true });
    c.on('error', () => {});
    c.connect().catch(() => {});
    const server = new RedisServer({ withModule: false });
    try {
      const log = logger();
      const limiter = new RateLimiter(c, { policies: [new Policy({ name: 'ip', limit: new Limit(10, 1) })], startDegraded: true, logger: log, timeoutMs: 2000 });
      await limiter.startup();
      assert.equal(limiter.stats.backend, null, 'not chosen yet');
      assert.equal(log.lines.info.length, 0);
      assert.equal(log.lines.warn.length, 1, 'U2\'s line');
      server.port = port;
      await server.start();
      for (let i = 0; i < 200 && !c.isReady; i++) await sleep(10);
      const d = await limiter.check(ctx());
      assert.equal(d.outcome, 'allowed');
      assert.equal(limiter.stats.backend, 'scripts');
      assert.deepEqual(log.lines.info, [`redis-tb: backend scripts on 127.0.0.1:${port} (tb.take not found, Functions)`]);
      assert.equal((await limiter.check(ctx())).results[0].remaining < 9, true);
      assert.equal(log.lines.info.length, 1, 'logged once');
    } finally {
      await c.disconnect().catch(() => {});
      await server.stop();
    }
  });
});

describe('SPEC E2: the load, against a scripted server', () => {
  const scripted = (answers) => {
    const sent = [];
    const send = async (args) => {
      sent.push(args[0] === 'SCRIPT' || args[0] === 'FUNCTION' ? args.slice(0, -1) : args);
      const a = answers.shift();
      if (a instanceof Error) throw a;
      return a;
    };
    return { sent, send };
  };
  const replyError = (m) => Object.assign(new Error(m), { name: 'ReplyError' });

  test('a SCRIPT LOAD that answers another SHA-1 fails the start in one line', async () => {
    const { send, sent } = scripted([[null], replyError("ERR unknown command 'FUNCTION'"), '0123456789abcdef0123456789abcdef01234567']);
    const limiter = new RateLimiter(new TbClient(send, { server: 'h:1' }), { policies: [new Policy({ name: 'ip', limit: new Limit(1, 1) })], logger: logger() });
    await assert.rejects(limiter.startup(), (err) => err instanceof ScriptLoadError
      && err.message === `redis-tb: cannot load the script backend on h:1 (SCRIPT LOAD answered 0123456789abcdef0123456789abcdef01234567, not tb.lua's SHA-1 ${luaSources().sha}): allow FUNCTION LOAD or SCRIPT LOAD, or load the module`);
    assert.deepEqual(sent, [['COMMAND', 'INFO', 'tb.take'], ['FUNCTION', 'LOAD', 'REPLACE'], ['SCRIPT', 'LOAD']]);
  });

  test('E4: every grant\'s id is 16 hex digits from the CSPRNG, never the same twice', async () => {
    const ids = new Set();
    const send = async (args) => {
      const i = args.indexOf('ID');
      ids.add(args[i + 1]);
      return [1, 1, args[i + 1], 30000];
    };
    const { Backend } = await import('redis-tb');
    const client = new TbClient(send, { server: 'h:1' });
    client.useBackend(Backend.scripts('h:1', 'functions', false));
    for (let n = 0; n < 200; n++) await client.acquire('k', 10, 30000);
    assert.equal(ids.size, 200);
    for (const id of ids) assert.match(id, /^[0-9a-f]{16}$/);
  });
});
