// The typed client over node-redis, ioredis and a sendCommand function, against a real
// redis-server with the module; errors; the startup check.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  ModuleNotLoadedError, NoPermissionError, RateLimiter, RedisTbError, RedisUnreachableError, TbClient, UnexpectedReplyError,
} from 'redis-tb';
import { CLIENTS, RedisServer, closeClient, freePort, memoryLogger, nodeRedis, nodeRedisV4 } from './helpers.mjs';

const NOW = 1764456268.5;

let server;
before(async () => { server = await new RedisServer().start(); });
after(async () => { await server?.stop(); });

const makers = [
  ...CLIENTS,
  ['node-redis RESP3', (port) => nodeRedis(port, { RESP: 3 })],
  ['node-redis v4', nodeRedisV4],
  ['sendCommand function', async (port) => {
    const c = await nodeRedis(port);
    const fn = (args) => c.sendCommand(args);
    fn.close = () => c.destroy();
    return fn;
  }],
];

for (const [name, make] of makers) {
  describe(`TbClient over ${name}`, () => {
    let raw;
    let tb;
    const k = (s) => `${name}:${s}`;
    before(async () => {
      raw = await make(server.port);
      tb = new TbClient(raw, typeof raw === 'function' ? { server: `127.0.0.1:${server.port}` } : {});
    });
    after(async () => { if (typeof raw === 'function') raw.close(); else await closeClient(raw); });

    test('server description', () => {
      assert.equal(tb.server, `127.0.0.1:${server.port}`);
    });

    test('take: typed reply, numbers from RESP2 strings', async () => {
      const r1 = await tb.take(k('t'), 10, 1, 3, { now: NOW });
      assert.deepEqual(r1, { allowed: true, remaining: 7, retryAfter: 0, resetAfter: 3 });
      const r2 = await tb.take(k('t'), 10, 1, 8, { now: NOW });
      assert.deepEqual(r2, { allowed: false, remaining: 7, retryAfter: 1, resetAfter: 3 });
      const never = await tb.take(k('t'), 10, 1, 11, { now: NOW });
      assert.equal(never.retryAfter, -1);
      const half = await tb.take(k('t'), 10, 1, 0.5, { now: NOW + 0.25 });
      assert.equal(half.remaining, 6.75);
    });

    test('mtake: all or nothing, per-key replies', async () => {
      const charges = [
        { key: k('m:ip'), capacity: 20, rate: 2, cost: 1 },
        { key: k('m:user'), capacity: 100, rate: 100 / 3600 },
        { key: k('m:orders'), capacity: 5, rate: 0.1, cost: 1 },
      ];
      const ok = await tb.mtake(charges, { now: NOW });
      assert.equal(ok.allowed, true);
      assert.deepEqual(ok.keys.map((r) => r.remaining), [19, 99, 4]);
      const refused = await tb.mtake(charges.map((b, i) => (i === 2 ? { ...b, cost: 5 } : b)), { now: NOW });
      assert.equal(refused.allowed, false);
      assert.equal(refused.retryAfter, 10);
      assert.deepEqual(refused.keys.map((r) => [r.allowed, r.remaining]), [[true, 19], [true, 99], [false, 4]]);
      const peek = await tb.peek(k('m:ip'), 20, 2, { now: NOW });
      assert.equal(peek.remaining, 19, 'the refused mtake spent nothing');
    });

    test('reserve: waits, refusal, wait field', async () => {
      const a = await tb.reserve(k('q'), 1, 2, 1, 5, { now: NOW });
      const b = await tb.reserve(k('q'), 1, 2, 1, 5, { now: NOW });
      const c = await tb.reserve(k('q'), 1, 2, 1, 0.5, { now: NOW });
      assert.deepEqual([a.allowed, a.wait], [true, 0]);
      assert.deepEqual([b.allowed, b.wait, b.remaining], [true, 0.5, -1]);
      assert.deepEqual([c.allowed, c.wait, c.retryAfter], [false, 0, 0.5]);
    });

    test('peek and refund', async () => {
      await tb.take(k('r'), 5, 1, 4, { now: NOW });
      const r = await tb.refund(k('r'), 5, 1, 2, { now: NOW });
      assert.deepEqual(r, { allowed: true, remaining: 3, retryAfter: 0, resetAfter: 2 });
      const many = await tb.refundMany([{ key: k('r'), capacity: 5, rate: 1, cost: 1 }, { key: k('r2'), capacity: 5, rate: 1 }], { now: NOW });
      assert.deepEqual(many.map((x) => x.remaining), [4, 5]);
      const p = await tb.peek(k('r'), 5, 1, { now: NOW });
      assert.equal(p.remaining, 4);
    });

    test('window: FIXED, SLIDING, LOG', async () => {
      const f1 = await tb.window(k('wf'), 2, 60, 1, { now: 1764456299, mode: 'FIXED' });
      await tb.window(k('wf'), 2, 60, 1, { now: 1764456299, mode: 'FIXED' });
      const f3 = await tb.window(k('wf'), 2, 60, 1, { now: 1764456299, mode: 'FIXED' });
      const f4 = await tb.window(k('wf'), 2, 60, 1, { now: 1764456300, mode: 'FIXED' });
      assert.deepEqual(f1, { allowed: true, remaining: 1, retryAfter: 0, resetAfter: 1 });
      assert.deepEqual(f3, { allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1 });
      assert.deepEqual(f4, { allowed: true, remaining: 1, retryAfter: 0, resetAfter: 60 });
      const s = await tb.window(k('ws'), 100, 60, 1, { now: 1764456330 });
      assert.deepEqual(s, { allowed: true, remaining: 99, retryAfter: 0, resetAfter: 90 });
      await tb.window(k('wl'), 3, 60, 1, { now: 1764456299, mode: 'LOG' });
      await tb.window(k('wl'), 3, 60, 2, { now: 1764456299, mode: 'LOG' });
      const l3 = await tb.window(k('wl'), 3, 60, 1, { now: 1764456300, mode: 'LOG' });
      assert.deepEqual(l3, { allowed: false, remaining: 0, retryAfter: 59, resetAfter: 59 });
    });

    test('throttle: CL.THROTTLE reply', async () => {
      const t = await tb.throttle(k('th'), 15, 30, 60, 1);
      assert.deepEqual(t, { allowed: true, limited: false, limit: 16, remaining: 15, retryAfter: -1, resetAfter: 2 });
      const t2 = await tb.throttle(k('th'), 15, 30, 60, 16);
      assert.equal(t2.limited, true);
      assert.equal(t2.allowed, false);
      assert.equal(t2.retryAfter, 2);
    });

    test('acquire (alone and with TAKE), renew, release and peek LEASES: typed replies', async () => {
      const key = k('conc');
      const first = await tb.acquire(key, 1, 60000);
      assert.equal(first.granted, true);
      assert.match(first.id, /^[0-9a-f]{16}$/);
      assert.deepEqual([first.inFlight, first.take], [1, null]);
      assert.ok(Math.abs(first.ms - 60000) <= 5, `the lease's ms: ${first.ms}`);
      const leases = await tb.peekLeases(key);
      assert.equal(leases.inFlight, 1);
      assert.ok(leases.ms > 0 && leases.ms <= first.ms, `ms until the lease expires: ${leases.ms}`);
      const full = await tb.acquire(key, 1, 60000, [{ key: k('conc:b'), capacity: 5, rate: 1, cost: 1 }]);
      assert.equal(full.granted, false);
      assert.equal(full.id, null);
      assert.ok(full.ms > 0 && full.ms <= 60005, `refused: the wait until the earliest lease expires: ${full.ms}`);
      assert.equal(full.take.keys.length, 1);
      const renewed = await tb.renew(key, first.id, 30000);
      assert.deepEqual([renewed.ok, renewed.inFlight], [true, 1]);
      assert.ok(Math.abs(renewed.ms - 30000) <= 5, `the renewed lease's ms: ${renewed.ms}`);
      const released = await tb.release(key, first.id);
      assert.deepEqual([released.ok, released.inFlight], [true, 0]);
      assert.equal((await tb.release(key, first.id)).ok, false, 'a second release finds nothing');
      const both = await tb.acquire(key, 1, 60000, [{ key: k('conc:b'), capacity: 5, rate: 1, cost: 2 }]);
      assert.equal(both.granted, true);
      assert.deepEqual(both.take.keys.map((r) => [r.allowed, r.remaining]), [[true, 3]]);
    });

    test('hold, renew a hold, peek HOLDS and settle: typed replies', async () => {
      const key = k('llm');
      const none = await tb.peekHolds(key);
      // (the module may write the sum of no hold as -0)
      assert.ok(none.holds === 0 && none.amount === 0 && none.ms === 0, JSON.stringify(none));
      const h = await tb.hold(key, 1000, 1, 300, 60000);
      assert.equal(h.allowed, true);
      assert.match(h.id, /^[0-9a-f]{16}$/);
      assert.ok(Math.abs(h.remaining - 700) < 0.01);
      const peek = await tb.peekHolds(key);
      assert.deepEqual([peek.holds, peek.amount], [1, 300]);
      assert.ok(peek.ms > 0 && peek.ms <= 60005, `ms until the hold expires: ${peek.ms}`);
      const renewed = await tb.renew(key, h.id, 90000);
      assert.equal(renewed.ok, true);
      const s = await tb.settle(key, 1000, 1, h.id, 100, 1000);
      assert.equal(s.settled, true);
      assert.equal(s.charged, -200);
      assert.equal((await tb.settle(key, 1000, 1, h.id, 100)).settled, false, 'settling twice changes nothing');
      const after = await tb.peekHolds(key);
      assert.ok(after.holds === 0 && after.amount === 0 && after.ms === 0, JSON.stringify(after));
    });

    test('module errors come back as RedisTbError naming the command', async () => {
      await assert.rejects(tb.take(k('e'), 0, 1), (err) => {
        assert.ok(err instanceof RedisTbError);
        assert.equal(err.command, 'TB.TAKE');
        assert.equal(err.serverMessage, 'ERR capacity must be > 0 and <= 9007199254740992');
        assert.equal(err.message, 'TB.TAKE: ERR capacity must be > 0 and <= 9007199254740992');
        return true;
      });
      await assert.rejects(tb.window(k('e2'), 2.5, 60, 1, { mode: 'LOG' }), (err) => {
        assert.ok(err instanceof RedisTbError);
        assert.equal(err.command, 'TB.WINDOW');
        assert.match(err.serverMessage, /LOG counts whole requests/);
        return true;
      });
      await tb.send(['SET', k('str'), 'x']);
      await assert.rejects(tb.mtake([{ key: k('str'), capacity: 1, rate: 1 }]), (err) =>
        err instanceof RedisTbError && err.command === 'TB.MTAKE' && err.serverMessage.startsWith('WRONGTYPE'));
    });

    test('a reply of the wrong shape is UnexpectedReplyError', async () => {
      await tb.send(['SET', k('plain'), '1']);
      // TB.* cannot produce one: read a plain GET through the reply parser instead
      const { parseReply } = await import('../dist/esm/replies.js');
      assert.throws(() => parseReply(['1', 'x', '0', '0']), UnexpectedReplyError);
      assert.throws(() => parseReply('OK'), UnexpectedReplyError);
    });

    test('checkModule passes where the module is loaded', async () => {
      await tb.checkModule();
    });
  });
}

describe('startup check', () => {
  let bare;
  before(async () => { bare = await new RedisServer({ withModule: false }).start(); });
  after(async () => { await bare?.stop(); });

  for (const [name, make] of [...CLIENTS, ['node-redis v4', nodeRedisV4]]) {
    test(`a server without the module fails loudly (${name})`, async () => {
      const c = await make(bare.port);
      try {
        const expected = `redis-tb module not loaded on 127.0.0.1:${bare.port}: load libredis_tb.so with loadmodule`;
        await assert.rejects(new TbClient(c).checkModule(), (err) => err instanceof ModuleNotLoadedError && err.message === expected);
        // SPEC E1: the missing module fails the start only when the backend is forced to it
        const limiter = new RateLimiter(c, { policies: [], logger: memoryLogger(), backend: 'module' });
        await assert.rejects(limiter.startup(), { message: expected });
        await assert.rejects(limiter.checkModule(), ModuleNotLoadedError);
        const auto = new RateLimiter(c, { policies: [], logger: memoryLogger() });
        await auto.startup();
        assert.equal(auto.stats.backend, 'scripts');
      } finally {
        await closeClient(c);
      }
    });
  }

  // issue 26: ioredis set up as the README recommends (enableOfflineQueue: false), the
  // limiter built and started at once, before the connection is up: the check must still
  // reach the server (it used to be rejected locally and logged as "unreachable").
  test('ioredis with enableOfflineQueue: false, started before it connects: the missing module fails the start', async () => {
    const { Redis } = await import('ioredis');
    const c = new Redis({ host: '127.0.0.1', port: bare.port, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    c.on('error', () => {});
    try {
      assert.notEqual(c.status, 'ready', 'the test needs a client that is not connected yet');
      const log = memoryLogger();
      const limiter = new RateLimiter(c, { policies: [], logger: log, backend: 'module' });
      await assert.rejects(limiter.startup(), (err) => err instanceof ModuleNotLoadedError
        && err.message === `redis-tb module not loaded on 127.0.0.1:${bare.port}: load libredis_tb.so with loadmodule`);
      assert.deepEqual(log.lines, []);
    } finally {
      c.disconnect();
    }
  });

  test('ioredis with enableOfflineQueue: false and lazyConnect: startup connects it and checks', async () => {
    const { Redis } = await import('ioredis');
    const c = new Redis({ host: '127.0.0.1', port: bare.port, enableOfflineQueue: false, lazyConnect: true, maxRetriesPerRequest: 0 });
    c.on('error', () => {});
    try {
      await assert.rejects(new RateLimiter(c, { policies: [], logger: memoryLogger(), backend: 'module' }).startup(), ModuleNotLoadedError);
    } finally {
      c.disconnect();
    }
  });

  test('NOPERM on COMMAND INFO: one line naming the grant (SPEC U1)', async () => {
    const admin = await nodeRedis(bare.port);
    const user = `u${process.pid}`;
    try {
      await admin.sendCommand(['ACL', 'SETUSER', user, 'on', '>pw', '~*', '+@all', '-command']);
      const { Redis } = await import('ioredis');
      const c = new Redis({ host: '127.0.0.1', port: bare.port, username: user, password: 'pw', enableOfflineQueue: false, maxRetriesPerRequest: 0 });
      c.on('error', () => {});
      try {
        await assert.rejects(new RateLimiter(c, { policies: [], logger: memoryLogger() }).startup(), (err) => err instanceof NoPermissionError
          && err.message === `redis-tb: user cannot run COMMAND INFO on 127.0.0.1:${bare.port}: grant +command|info (see docs/operations.md)`);
      } finally {
        c.disconnect();
      }
    } finally {
      await admin.sendCommand(['ACL', 'DELUSER', user]);
      await closeClient(admin);
    }
  });

  for (const lazy of [true, false]) {
    test(`an unreachable Redis fails the start in one line (SPEC U2, ioredis lazyConnect ${lazy})`, async () => {
      const port = await freePort();
      const { Redis } = await import('ioredis');
      const c = new Redis({ host: '127.0.0.1', port, lazyConnect: lazy, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 100 });
      c.on('error', () => {});
      try {
        const log = memoryLogger();
        const limiter = new RateLimiter(c, { policies: [], logger: log, failOpen: false });
        await assert.rejects(limiter.startup(), (err) => err instanceof RedisUnreachableError && !err.message.includes('\n')
          && new RegExp(`^redis-tb: cannot reach Redis at 127\\.0\\.0\\.1:${port} \\(.*ECONNREFUSED.*\\): start it, or set startDegraded to start failing open$`).test(err.message));
        assert.deepEqual(log.lines, []);
      } finally {
        c.disconnect();
      }
    });
  }

  test('startDegraded: an unreachable Redis is one log line and the start goes on (SPEC U2)', async () => {
    const port = await freePort();
    const { Redis } = await import('ioredis');
    const io = new Redis({ host: '127.0.0.1', port, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    io.on('error', () => {});
    const log = memoryLogger();
    const limiter = new RateLimiter(io, { policies: [], logger: log, failOpen: false, startDegraded: true });
    await limiter.startup();
    // SPEC U2, U4: the same words in every language, whatever the failure mode
    assert.deepEqual(log.lines, [`redis-tb: Redis at 127.0.0.1:${port} unreachable at startup; starting degraded (the limiter's failure mode applies until it answers)`]);
    io.disconnect();
  });
});
