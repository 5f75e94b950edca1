// Pure functions: addresses, the proxy walk, header arithmetic, the deny cache's bound.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ClientIpConfig, DenyCache, Limit, Policy, formatAddress, parseAddress, quota, remainingUnits, resetSeconds,
  retryAfterSeconds, windowSeconds, perMinute,
} from 'redis-tb';

const fmt = (s) => { const a = parseAddress(s); return a && formatAddress(a); };

describe('addresses', () => {
  test('forms proxies write', () => {
    assert.equal(fmt('1.2.3.4'), '1.2.3.4');
    assert.equal(fmt(' 1.2.3.4:80 '), '1.2.3.4');
    assert.equal(fmt('2001:DB8::1'), '2001:db8::1');
    assert.equal(fmt('[2001:db8::1]'), '2001:db8::1');
    assert.equal(fmt('[2001:db8::1]:443'), '2001:db8::1');
    assert.equal(fmt('::ffff:203.0.113.5'), '203.0.113.5');
    assert.equal(fmt('[::ffff:cb00:7105]:1'), '203.0.113.5');
    assert.equal(fmt('2001:db8:0:1:0:0:0:1'), '2001:db8:0:1::1');
    assert.equal(fmt('2001:0:0:1:0:0:0:1'), '2001:0:0:1::1', 'the first of equal zero runs');
    assert.equal(fmt('2001:db8:1:0:1:1:1:1'), '2001:db8:1:0:1:1:1:1', 'a single zero group is not compressed');
    for (const bad of ['unknown', '_hidden', '', '1.2.3', '01.2.3.4', 'fe80::1%eth0', '[1.2.3.4]', '1.2.3.4:x', '[::1]x', '1:2:3:4:5:6:7:8:9']) {
      assert.equal(parseAddress(bad), null, bad);
    }
  });

  test('grouping: IPv6 /64, IPv4 /32, other prefixes', () => {
    const ip = new ClientIpConfig();
    assert.equal(ip.identity('2001:db8:1:2:3:4:5:6', []), '2001:db8:1:2::/64');
    assert.equal(ip.identity('::1', []), '::/64');
    assert.equal(ip.identity('::ffff:127.0.0.1', []), '127.0.0.1');
    const wide = new ClientIpConfig({ ipv4Prefix: 24, ipv6Prefix: 48 });
    assert.equal(wide.identity('203.0.113.77', []), '203.0.113.0/24');
    assert.equal(wide.identity('2001:db8:1:2::1', []), '2001:db8:1::/48');
    assert.equal(new ClientIpConfig().identity(undefined, []), null);
  });

  test('the proxy walk', () => {
    const ip = new ClientIpConfig({ trustedProxies: ['10.0.0.0/8', '2001:db8:ffff::/48'] });
    assert.equal(ip.identity('10.0.0.1', ['1.1.1.1, 2.2.2.2', '10.0.0.9']), '2.2.2.2', 'several header lines are one list');
    assert.equal(ip.identity('10.0.0.1', []), '10.0.0.1');
    assert.equal(ip.identity('2001:db8:ffff::1', ['2001:db8:1::5']), '2001:db8:1::/64');
    assert.equal(ip.identity('192.0.2.1', ['1.1.1.1']), '192.0.2.1', 'an untrusted peer is the client');
    assert.equal(ip.identity('10.0.0.1', ['1.1.1.1, nonsense, 10.0.0.2']), '10.0.0.2');
    const fwd = new ClientIpConfig({ trustedProxies: ['10.0.0.0/8'], header: 'forwarded' });
    assert.equal(fwd.identity('10.0.0.1', ['for=1.1.1.1;proto=http, For="10.0.0.3:80";by=x']), '1.1.1.1');
    assert.equal(fwd.identity('10.0.0.1', ['for="_gazonk"']), '10.0.0.1');
    assert.equal(fwd.identity('10.0.0.1', ['proto=https;for="[2001:db8::1]:80", for=unknown']), '10.0.0.1');
    assert.throws(() => new ClientIpConfig({ trustedProxies: ['nope'] }), RangeError);
    assert.throws(() => new ClientIpConfig({ trustedProxies: ['10.0.0.0/33'] }), RangeError);
    assert.throws(() => new ClientIpConfig({ trustedProxies: ['10.0.0.0/'] }), RangeError);
    const mapped = new ClientIpConfig({ trustedProxies: ['::ffff:10.0.0.0/104'] });
    assert.equal(mapped.identity('10.1.1.1', ['1.1.1.1']), '1.1.1.1', 'a mapped CIDR is its IPv4 network');
  });
});

describe('header arithmetic', () => {
  test('q, w, r, t, Retry-After', () => {
    assert.equal(quota(10.9), 10);
    assert.equal(windowSeconds(11, 11 / 60), 60, 'snapped to the integer within 1e-9');
    assert.equal(windowSeconds(100, 100 / 3600), 3600);
    assert.equal(windowSeconds(1, 3), 1, 'at least 1');
    assert.equal(windowSeconds(10, 3), 4);
    assert.equal(windowSeconds(2 ** 53, 1e-9), 999_999_999_999_999, 'capped');
    assert.equal(remainingUnits(-2.5), 0);
    assert.equal(remainingUnits(4.99), 4);
    assert.equal(resetSeconds(0), 0);
    assert.equal(resetSeconds(0.01), 1);
    assert.equal(retryAfterSeconds(0.2), 1);
    assert.equal(retryAfterSeconds(35.99), 36);
    assert.equal(retryAfterSeconds(-1), null);
  });

  test('policies check their inputs', () => {
    assert.throws(() => new Limit(0, 1), RangeError);
    assert.throws(() => new Limit(1, 1e-10), RangeError);
    assert.throws(() => perMinute('Bad Name', 1), RangeError);
    assert.throws(() => new Policy({ name: 'x', limit: new Limit(1, 1), routes: ['/no-method'] }), RangeError);
    const p = new Policy({ name: 'x', limit: new Limit(1, 1), routes: 'get /a/:b' });
    assert.ok(p.appliesTo('GET /a/:b'));
    assert.ok(!p.appliesTo(null));
  });
});

describe('deny cache', () => {
  test('bounded: expired entries go first, then the one expiring soonest', () => {
    const cache = new DenyCache({ maxEntries: 3 });
    const e = (until) => ({ policy: 'p', capacity: 1, rate: 1, cost: 1, denyUntil: until, resetAt: until });
    cache.remember('a', e(300), 0);
    cache.remember('b', e(10), 0);
    cache.remember('c', e(200), 0);
    cache.remember('d', e(400), 50); // b expired at 10: it goes
    assert.equal(cache.size, 3);
    assert.equal(cache.lookup('b', 1, 1, 1, 50), null);
    cache.remember('e', e(500), 60); // none expired: c (200) expires soonest
    assert.equal(cache.size, 3);
    assert.equal(cache.lookup('c', 1, 1, 1, 60), null);
    for (const k of ['a', 'd', 'e']) assert.ok(cache.lookup(k, 1, 1, 1, 60), k);
    cache.remember('a', e(900), 70); // replacing an entry evicts nothing
    cache.remember('f', e(600), 70); // the stale heap item of a (300) is skipped: d (400) goes
    assert.deepEqual(['a', 'd', 'e', 'f'].map((k) => Boolean(cache.lookup(k, 1, 1, 1, 70))), [true, false, true, true]);
    for (let i = 0; i < 1000; i++) cache.remember(`k${i}`, e(1000 + i), 80);
    assert.equal(cache.size, 3, 'never above maxEntries');
    assert.ok(cache.lookup('k999', 1, 1, 1, 80));
  });

  test('only the same limit and a cost at least as large', () => {
    const cache = new DenyCache({ maxEntries: 10 });
    cache.remember('k', { policy: 'p', capacity: 5, rate: 1, cost: 2, denyUntil: 100, resetAt: 100 }, 0);
    assert.ok(cache.lookup('k', 5, 1, 2, 1));
    assert.ok(cache.lookup('k', 5, 1, 3, 1));
    assert.equal(cache.lookup('k', 5, 1, 1, 1), null, 'a smaller cost goes to Redis');
    assert.equal(cache.lookup('k', 6, 1, 2, 1), null, 'a plan change goes to Redis');
    assert.equal(cache.lookup('k', 5, 1, 2, 100), null, 'expired');
    assert.throws(() => new DenyCache({ maxEntries: 0 }), RangeError);
  });
});

describe('holds while the breaker is open (SPEC B2, G1)', () => {
  test('a hold after a connection error is refused without a call, and sent again once Redis may be called', async () => {
    const { RateLimiter, StoreUnavailableError } = await import('redis-tb');
    let t = 0;
    const sent = [];
    let fail = true;
    const send = async (args) => {
      sent.push(args[0]);
      if (fail) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      if (args[0] === 'TB.HOLD') return [1, '900', '0', '360', '11e70fc6b3c562ab'];
      return [1, '9', '0', '1'];
    };
    const policies = [perMinute('ip', 10), new Policy({ name: 'tokens', limit: Limit.perHour(1000), settleLater: true })];
    const limiter = new RateLimiter(send, { policies, logger: { warn() {} }, clock: { monotonicMs: () => t, wallMs: () => t } });
    const ctx = { request: {}, peer: '203.0.113.9', header: () => [], route: 'GET /x' };
    const d = await limiter.check(ctx);
    assert.equal(d.outcome, 'store_error');
    await assert.rejects(d.hold('tokens', 100), StoreUnavailableError);
    assert.deepEqual(sent, ['TB.TAKE'], 'the hold was not sent while the breaker is open');
    t = 1000; // the cool-down is over: the hold may be the probe
    fail = false;
    const hold = await d.hold('tokens', 100);
    assert.equal(hold.allowed, true);
    assert.deepEqual(sent, ['TB.TAKE', 'TB.HOLD']);
  });
});
