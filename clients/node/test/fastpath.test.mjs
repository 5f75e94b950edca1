// The request path's fast paths against the general code they stand in for: the IPv4
// client-address walk (ClientIpConfig.identity against ClientIpConfig.identityGeneral), the headers
// (against the structured-headers library's serializeList of the same items, as headers.ts
// wrote them before), and the shared deadline queue of the limiter's Redis calls.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { serializeList } from 'structured-headers';
import {
  ClientIpConfig, Deadlines, Decision, RateLimiter, RedisTbTimeoutError, parseV4Int, perMinute, quota,
  ratelimit, ratelimitPolicy, remainingUnits, resetSeconds, windowSeconds, SF_INT_MAX,
} from 'redis-tb';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('IPv4 fast path', () => {
  test('parseV4Int: canonical dotted quads only', () => {
    assert.equal(parseV4Int('0.0.0.0'), 0);
    assert.equal(parseV4Int('255.255.255.255'), 0xffffffff);
    assert.equal(parseV4Int('10.1.2.3'), 0x0a010203);
    assert.equal(parseV4Int('203.0.113.7'), (203 * 2 ** 24) + 113 * 256 + 7);
    for (const bad of ['01.2.3.4', '1.02.3.4', '1.2.3.00', '00.0.0.0', '256.1.1.1', '1.1.1.256', '1.2.3.999',
      '1.2.3', '1.2.3.4.5', '1..2.3', '.1.2.3', '1.2.3.', ' 1.2.3.4', '1.2.3.4 ', '1.2.3.4:80',
      '::ffff:1.2.3.4', '1.2.3.-4', '+1.2.3.4', '1.2.3.4a', '0x1.2.3.4', '1.2.3.1234', '', '١.٢.٣.٤']) {
      assert.equal(parseV4Int(bad), -1, bad);
    }
  });

  const cases = [
    // [trusted, peer, header lines, expected]
    [['10.0.0.0/8'], '10.0.0.1', ['1.1.1.1, 2.2.2.2', '10.0.0.9'], '2.2.2.2'],
    [['10.0.0.0/8'], '10.0.0.1', [], '10.0.0.1'],
    [['10.0.0.0/8'], '192.0.2.1', ['1.1.1.1'], '192.0.2.1'],
    [['10.0.0.0/8'], '10.0.0.1', ['1.1.1.1, nonsense, 10.0.0.2'], '10.0.0.2'],
    // leading zeros and out-of-range octets are malformed: the walk stops at the last good one
    [['10.0.0.0/8'], '10.0.0.1', ['203.0.113.9, 010.0.0.5'], '10.0.0.1'],
    [['10.0.0.0/8'], '10.0.0.1', ['203.0.113.9, 10.0.0.7, 256.1.1.1'], '10.0.0.1'],
    [['10.0.0.0/8'], '10.0.0.1', ['256.1.1.1, 10.0.0.7'], '10.0.0.7'],
    [['10.0.0.0/8'], '010.0.0.1', ['1.1.1.1'], null],
    [['10.0.0.0/8'], '10.0.0.1', ['1.1.1.1,'], '10.0.0.1'],
    [['10.0.0.0/8'], '10.0.0.1', [''], '10.0.0.1'],
    [['10.0.0.0/8'], '10.0.0.1', ['  1.1.1.1 ,\t10.0.0.3  '], '1.1.1.1'],
    // every hop trusted: the leftmost
    [['10.0.0.0/8'], '10.0.0.1', ['10.9.9.9, 10.0.0.3'], '10.9.9.9'],
    // IPv4-mapped IPv6, as the peer (a dual-stack listener) and in the header
    [['10.0.0.0/8'], '::ffff:10.0.0.1', ['198.51.100.4'], '198.51.100.4'],
    [['10.0.0.0/8'], '::ffff:198.51.100.4', ['1.1.1.1'], '198.51.100.4'],
    [['10.0.0.0/8'], '::FFFF:10.0.0.1', ['198.51.100.4'], '198.51.100.4'],
    [['10.0.0.0/8'], '10.0.0.1', ['::ffff:198.51.100.4'], '198.51.100.4'],
    [['::ffff:10.0.0.0/104'], '10.1.1.1', ['1.1.1.1'], '1.1.1.1'],
    [['10.0.0.0/8'], '::ffff:010.0.0.1', ['1.1.1.1'], null],
    // ports, IPv6 and quotes in the header: the general path
    [['10.0.0.0/8'], '10.0.0.1', ['1.1.1.1:8080'], '1.1.1.1'],
    [['10.0.0.0/8'], '10.0.0.1', ['2001:db8:1::5'], '2001:db8:1::/64'],
    [['10.0.0.0/8'], '10.0.0.1', ['"1.1.1.1, 2.2.2.2"'], '10.0.0.1'],
    // trusted CIDR boundaries
    [['10.0.0.0/8'], '10.255.255.255', ['1.1.1.1'], '1.1.1.1'],
    [['10.0.0.0/8'], '11.0.0.0', ['1.1.1.1'], '11.0.0.0'],
    [['10.0.0.0/8'], '9.255.255.255', ['1.1.1.1'], '9.255.255.255'],
    [['192.168.1.128/25'], '192.168.1.128', ['1.1.1.1'], '1.1.1.1'],
    [['192.168.1.128/25'], '192.168.1.255', ['1.1.1.1'], '1.1.1.1'],
    [['192.168.1.128/25'], '192.168.1.127', ['1.1.1.1'], '192.168.1.127'],
    [['192.168.1.129/25'], '192.168.1.128', ['1.1.1.1'], '1.1.1.1'],
    [['203.0.113.7'], '203.0.113.7', ['1.1.1.1'], '1.1.1.1'],
    [['203.0.113.7/32'], '203.0.113.8', ['1.1.1.1'], '203.0.113.8'],
    [['203.0.113.6/31'], '203.0.113.7', ['1.1.1.1'], '1.1.1.1'],
    [['0.0.0.0/0'], '255.255.255.255', ['8.8.8.8, 1.1.1.1'], '8.8.8.8'], // all trusted: the leftmost
    [['128.0.0.0/1'], '255.0.0.1', ['127.255.255.255'], '127.255.255.255'],
    [['128.0.0.0/1'], '127.255.255.255', ['1.1.1.1'], '127.255.255.255'],
    [['2001:db8::/32'], '10.0.0.1', ['1.1.1.1'], '10.0.0.1'],
    [[], '10.0.0.1', ['1.1.1.1'], '10.0.0.1'],
  ];

  test('the same identity as the general path, edge cases', () => {
    for (const [trusted, peer, lines, want] of cases) {
      const ip = new ClientIpConfig({ trustedProxies: trusted });
      const what = JSON.stringify([trusted, peer, lines]);
      assert.equal(ip.identityGeneral(peer, lines), want, `general ${what}`);
      assert.equal(ip.identity(peer, lines), want, `fast ${what}`);
    }
  });

  test('other IPv4 prefixes, the Forwarded header', () => {
    const wide = new ClientIpConfig({ trustedProxies: ['10.0.0.0/8'], ipv4Prefix: 24 });
    assert.equal(wide.identity('10.0.0.1', ['203.0.113.77']), '203.0.113.0/24');
    assert.equal(wide.identity('203.0.113.77', []), '203.0.113.0/24');
    assert.equal(new ClientIpConfig({ ipv4Prefix: 0 }).identity('203.0.113.77', []), '0.0.0.0/0');
    assert.equal(new ClientIpConfig({ ipv4Prefix: 1 }).identity('203.0.113.77', []), '128.0.0.0/1');
    assert.equal(new ClientIpConfig({ ipv4Prefix: 31 }).identity('203.0.113.77', []), '203.0.113.76/31');
    const fwd = new ClientIpConfig({ trustedProxies: ['10.0.0.0/8'], header: 'forwarded' });
    assert.equal(fwd.identity('10.0.0.1', ['for=1.1.1.1;proto=http, For="10.0.0.3:80";by=x']), '1.1.1.1');
  });

  test('random addresses, networks and headers: fast == general', () => {
    let seed = 12345;
    const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2 ** 31; return seed % n; };
    const octet = () => [0, 1, 9, 10, 127, 128, 192, 254, 255, rnd(256)][rnd(10)];
    const quad = () => `${octet()}.${octet()}.${octet()}.${octet()}`;
    const hop = () => {
      switch (rnd(12)) {
        case 0: return `0${rnd(10)}.1.2.3`;
        case 1: return `${256 + rnd(100)}.1.2.3`;
        case 2: return `::ffff:${quad()}`;
        case 3: return `${quad()}:${rnd(65536)}`;
        case 4: return '2001:db8::1';
        case 5: return ` ${quad()} `;
        case 6: return 'unknown';
        default: return quad();
      }
    };
    for (let i = 0; i < 5000; i++) {
      const trusted = Array.from({ length: rnd(3) }, () => `${quad()}/${rnd(33)}`);
      const v4p = [32, 32, 24, 16, 0][rnd(5)];
      const ip = new ClientIpConfig({ trustedProxies: trusted, ipv4Prefix: v4p });
      const peer = rnd(5) === 0 ? `::ffff:${quad()}` : rnd(4) === 0 && trusted.length ? trusted[0].split('/')[0] : quad();
      const lines = Array.from({ length: rnd(3) }, () => Array.from({ length: 1 + rnd(4) }, hop).join(rnd(2) ? ', ' : ','));
      assert.equal(ip.identity(peer, lines), ip.identityGeneral(peer, lines), JSON.stringify([trusted, v4p, peer, lines]));
    }
  });
});

describe('headers: byte-identical to the library serialization', () => {
  // headers.ts before the per-shape cache: every item through serializeList
  const item = (name, params) => [name, new Map(Object.entries(params))];
  const refPolicy = (rs) => serializeList(rs.map((r) => item(r.name, { q: quota(r.capacity), w: windowSeconds(r.capacity, r.rate) })));
  const refLimit = (rs) => serializeList(rs.map((r) => item(r.name, { r: remainingUnits(r.remaining), t: resetSeconds(r.resetAfter) })));

  test('many shapes and states', () => {
    let seed = 7;
    const rnd = () => { seed = (seed * 1103515245 + 12345) % 2 ** 31; return seed / 2 ** 31; };
    const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
    const names = ['ip', 'user', 'orders', 'a', 'x-1_y', 'api-key', 'login'];
    const caps = [1, 2, 3, 10, 10.9, 100, 0.5, 1e-3, 2 ** 53, SF_INT_MAX, 1e18, 7.25];
    const rates = [1e-9, 0.01, 0.1, 1, 1 / 3, 100 / 3600, 2, 1e6, 2 ** 53, 10 / 86400];
    const values = () => pick([0, -0, -1, -5.5, 0.4, 0.999, 1, 9, 99.99, 1e15, 1e20, 2 ** 53, rnd() * 1000, -rnd() * 10]);
    for (let i = 0; i < 3000; i++) {
      const n = 1 + Math.floor(rnd() * 4);
      const used = new Set();
      const rs = [];
      for (let k = 0; k < n; k++) {
        let name = pick(names);
        while (used.has(name)) name = `${name}x`;
        used.add(name);
        rs.push({ name, capacity: pick(caps), rate: pick(rates), remaining: values(), resetAfter: values() });
      }
      assert.equal(ratelimitPolicy(rs), refPolicy(rs), JSON.stringify(rs));
      assert.equal(ratelimit(rs), refLimit(rs), JSON.stringify(rs));
    }
  });

  test('the whole header list of decisions, shadow policies left out', () => {
    const limiter = new RateLimiter(async () => null, { policies: [], legacyHeaders: true, legacyReset: 'delta' });
    const r = (name, extra) => ({ name, key: `rl:${name}:x`, capacity: 10, rate: 1, cost: 1, allowed: true, remaining: 9, retryAfter: 0, resetAfter: 1, shadow: false, ...extra });
    const allowed = new Decision({ outcome: 'allowed', allowed: true, results: [r('ip'), r('beta', { shadow: true, remaining: 0 }), r('user', { capacity: 100, rate: 100 / 3600, remaining: 99.5, resetAfter: 35.2 })] });
    assert.deepEqual(limiter.headers(allowed), [
      ['RateLimit-Policy', '"ip";q=10;w=10, "user";q=100;w=3600'],
      ['RateLimit', '"ip";r=9;t=1, "user";r=99;t=36'],
      ['X-RateLimit-Limit', '10'], ['X-RateLimit-Remaining', '9'], ['X-RateLimit-Reset', '1'],
    ]);
    const limited = new Decision({ outcome: 'limited', allowed: false, results: [r('ip', { allowed: false, remaining: 0.5, retryAfter: 0.5, resetAfter: 9.5 })] });
    assert.deepEqual(limiter.headers(limited), [
      ['RateLimit-Policy', '"ip";q=10;w=10'],
      ['RateLimit', '"ip";r=0;t=10'],
      ['X-RateLimit-Limit', '10'], ['X-RateLimit-Remaining', '0'], ['X-RateLimit-Reset', '10'],
      ['Retry-After', '1'],
    ]);
  });
});

describe('deadlines: one timer for the limiter\'s calls', () => {
  test('a call that never answers fails once, at the bound; answered calls are untouched', async () => {
    const d = new Deadlines(50);
    const t0 = performance.now();
    const never = d.bound(new Promise(() => {}), 'TB.TAKE');
    const fast = d.bound(Promise.resolve('ok'), 'TB.TAKE');
    let rejections = 0;
    let failedAt = 0;
    const watched = never.catch((err) => { rejections += 1; failedAt = performance.now(); throw err; });
    assert.equal(await fast, 'ok');
    assert.equal(d.pending, 1);
    await assert.rejects(watched, (err) => err instanceof RedisTbTimeoutError && err.timeoutMs === 50 && /^TB\.TAKE: no answer within 50 ms$/.test(err.message));
    assert.ok(failedAt - t0 >= 49, `failed after ${failedAt - t0} ms, not before the bound`);
    await sleep(120);
    assert.equal(rejections, 1);
    assert.equal(d.pending, 0);
    assert.equal(d.timerState, 'none', 'no timer left once the queue is empty');
    assert.equal(d.queued, 0);
  });

  test('a late answer after the timeout is ignored; a late failure is not unhandled', async () => {
    const d = new Deadlines(20);
    let resolveLate;
    let rejectLate;
    const a = d.bound(new Promise((r) => { resolveLate = r; }), 'A');
    const b = d.bound(new Promise((_, r) => { rejectLate = r; }), 'B');
    await assert.rejects(a, RedisTbTimeoutError);
    await assert.rejects(b, RedisTbTimeoutError);
    resolveLate('late');
    rejectLate(new Error('late failure'));
    await sleep(10);
    assert.equal(d.pending, 0);
  });

  test('staggered calls: each fails at its own deadline, answered ones in between are dropped', async () => {
    const d = new Deadlines(50);
    const t0 = performance.now();
    const first = d.bound(new Promise(() => {}), 'first').catch(() => performance.now() - t0);
    await sleep(30);
    const answered = [];
    for (let i = 0; i < 100; i++) answered.push(d.bound(Promise.resolve(i), 'x'));
    const second = d.bound(new Promise(() => {}), 'second').catch(() => performance.now() - t0);
    const t1 = performance.now() - t0;
    assert.deepEqual(await Promise.all(answered), Array.from({ length: 100 }, (_, i) => i));
    assert.ok((await first) >= 49);
    assert.ok((await second) >= t1 + 49, 'the second waits its own 50 ms');
    await sleep(5);
    assert.equal(d.pending, 0);
    assert.equal(d.timerState, 'none');
  });

  test('the timer keeps the process alive only while a call is outstanding', async () => {
    const d = new Deadlines(1000);
    let done;
    const p = d.bound(new Promise((r) => { done = r; }), 'x');
    assert.equal(d.timerState, 'ref');
    done(1);
    await p;
    assert.equal(d.timerState, 'unref', 'armed, but not holding the process');
    const q = d.bound(new Promise(() => {}), 'y');
    assert.equal(d.timerState, 'ref');
    q.catch(() => {});
  });

  test('the limiter: a paused client fails the request at the bound, one call, one store error', async () => {
    let sent = 0;
    const hang = () => { sent += 1; return new Promise(() => {}); };
    const lines = [];
    const limiter = new RateLimiter(hang, { policies: [perMinute('ip', 10)], logger: { warn: (l) => lines.push(l) } });
    const ctx = { request: {}, peer: '198.51.100.7', header: () => [], route: 'GET /x' };
    const t0 = performance.now();
    const d = await limiter.check(ctx);
    assert.ok(performance.now() - t0 >= 49);
    assert.equal(d.outcome, 'store_error');
    assert.ok(d.error instanceof RedisTbTimeoutError);
    await sleep(100);
    assert.deepEqual([sent, limiter.stats.storeErrors, limiter.stats.degraded, lines.length], [1, 1, 1, 1]);
  });
});
