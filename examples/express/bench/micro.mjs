// Where redis-tb's Express middleware spends its JavaScript time: each part of the
// request path timed in-process (best of 7 repetitions of N calls, so other work on the
// machine inflates it least), next to the floor (one awaited promise) and to cheaper
// ways of doing the two largest parts, to tell clients/node what a change would save.
// A fake client answers TB.MTAKE with the reply a real server gave, so no socket is
// involved. Prints a markdown table (bench.mjs puts it in the report).
//
//   node bench/micro.mjs [--redis redis://127.0.0.1:6379] [--n 20000]
import express from 'express';
import { createClient } from 'redis';
import { ClientIp, RateLimiter, perSecond } from 'redis-tb';
import { routeTemplate } from 'redis-tb/express';

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(`--${k}`); return i < 0 ? d : args[i + 1]; };
const N = Number(opt('n', 20000));

// a real TB.MTAKE reply (one bucket, admitted), through node-redis
const redis = await createClient({ url: opt('redis', process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') }).connect();
const reply = await redis.sendCommand(['TB.MTAKE', '1', 'micro:k', '1000000', '1000000', '1']);

const fake = () => Promise.resolve(reply);
const clientIp = new ClientIp({ trustedProxies: ['127.0.0.0/8'] });
const limiter = new RateLimiter(fake, { clientIp, timeoutMs: 1000 });
const policies = [perSecond('ip', 1_000_000)];
const app = express();
app.get('/items/:id', (req, res) => res.json({}));
const req = {
  app, method: 'GET', originalUrl: '/items/42', url: '/items/42',
  headers: { host: 'x', 'x-forwarded-for': '10.0.0.1' }, socket: { remoteAddress: '127.0.0.1' },
};
const xff = Array.from({ length: 4096 }, (_, i) => `10.0.${(i >> 8) & 255}.${i & 255}`);
const header = (name) => { const v = req.headers[name]; return v === undefined ? [] : [v]; };

async function time(fn) {
  for (let i = 0; i < N / 4; i++) await fn(i);
  let best = Infinity;
  for (let rep = 0; rep < 7; rep++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) await fn(i);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / N / 1000);
  }
  return best;
}

// cheaper ways to do the same: an IPv4 fast path for the peer/X-Forwarded-For walk, and
// the RateLimit-Policy item built once per policy shape
const V4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;
const v4int = (s) => {
  const m = V4.exec(s);
  if (!m) return null;
  let n = 0;
  for (let i = 1; i <= 4; i++) {
    const part = m[i];
    if ((part.length > 1 && part[0] === '0') || Number(part) > 255) return null;
    n = n * 256 + Number(part);
  }
  return n;
};
const trusted = [{ net: 0x7f000000, mask: 0xff000000 }];
const isTrustedV4 = (n) => trusted.some((t) => ((n & t.mask) >>> 0) === t.net);
function fastIdentity(peer, lines) {
  const p = v4int(peer);
  if (p === null) return undefined; // not IPv4: the general path
  if (!isTrustedV4(p)) return peer;
  if (lines.length !== 1 || lines[0].includes('"')) return undefined;
  const hops = lines[0].split(',');
  let last = peer;
  for (let i = hops.length - 1; i >= 0; i--) {
    const h = hops[i].trim();
    const n = v4int(h);
    if (n === null) return undefined;
    last = h;
    if (!isTrustedV4(n)) return h;
  }
  return last;
}
const policyCache = new Map();
function fastHeaders(d) {
  const shape = d.results.map((r) => `${r.name}|${r.capacity}|${r.rate}`).join(',');
  let policy = policyCache.get(shape);
  if (policy === undefined) {
    policy = limiter.headers(d).find(([k]) => k === 'RateLimit-Policy')?.[1];
    policyCache.set(shape, policy);
  }
  const rl = d.results.map((r) => `"${r.name}";r=${Math.max(0, Math.floor(r.remaining))};t=${Math.ceil(r.resetAfter)}`).join(', ');
  return [['RateLimit-Policy', policy], ['RateLimit', rl]];
}

let decision = await limiter.check({ request: req, peer: '127.0.0.1', header, route: 'GET /items/:id' }, policies);
const rows = [];
rows.push(['the floor: one awaited promise', await time(async () => { await Promise.resolve(1); })]);
rows.push(['routeTemplate(req): the route walk (1 route)', await time(async () => routeTemplate(req))]);
rows.push(['clientIp.identity(peer, X-Forwarded-For)', await time(async (i) => clientIp.identity('127.0.0.1', [xff[i & 4095]]))]);
rows.push(['  the same with an IPv4 fast path (sketch)', await time(async (i) => fastIdentity('127.0.0.1', [xff[i & 4095]]))]);
rows.push(['limiter.check(...) with a fake client (identity, plan, args, bounded call, parse, decision)', await time(async (i) => {
  req.headers['x-forwarded-for'] = xff[i & 4095];
  decision = await limiter.check({ request: req, peer: '127.0.0.1', header, route: 'GET /items/:id' }, policies);
})]);
rows.push(['limiter.headers(decision): RateLimit-Policy + RateLimit', await time(async () => limiter.headers(decision))]);
rows.push(['  the same with the policy item cached per shape (sketch)', await time(async () => fastHeaders(decision))]);
const fast = fastIdentity('127.0.0.1', ['10.0.0.1']);
if (fast !== clientIp.identity('127.0.0.1', ['10.0.0.1'])) throw new Error('the fast path disagrees');
if (JSON.stringify(fastHeaders(decision)) !== JSON.stringify(limiter.headers(decision))) {
  throw new Error(`the cached headers disagree: ${JSON.stringify(fastHeaders(decision))} ${JSON.stringify(limiter.headers(decision))}`);
}

// Round trips to the real server, one at a time: this process's CPU time per call
// (user + system: encoding, the socket write and read, decoding), best of 5.
async function cpuPerCall(fn, n = Math.min(N, 5000)) {
  for (let i = 0; i < n / 4; i++) await fn(i);
  let best = Infinity;
  for (let rep = 0; rep < 5; rep++) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < n; i++) await fn(i);
    const c = process.cpuUsage(c0);
    best = Math.min(best, (c.user + c.system) / n);
  }
  return best;
}
// node-redis 6 (the newest major) beside the 5.x line the example uses, same commands
const { createClient: createClient6 } = await import('redis6');
const redis6 = await createClient6({ url: opt('redis', process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') }).connect();
const realLimiter = new RateLimiter(redis, { clientIp, timeoutMs: 1000 });
rows.push(['CPU per round trip: node-redis 5.12.1 `client.ping()`', await cpuPerCall(() => redis.ping())]);
rows.push(['CPU per round trip: node-redis 5.12.1 `sendCommand(TB.MTAKE 1 key 1000000 1000000 1)`', await cpuPerCall((i) => redis.sendCommand(['TB.MTAKE', '1', `micro:${xff[i & 4095]}`, '1000000', '1000000', '1']))]);
rows.push(['  the same on node-redis 6.3.1: `client.ping()`', await cpuPerCall(() => redis6.ping())]);
rows.push(['  the same on node-redis 6.3.1: `sendCommand(TB.MTAKE ...)`', await cpuPerCall((i) => redis6.sendCommand(['TB.MTAKE', '1', `micro6:${xff[i & 4095]}`, '1000000', '1000000', '1']))]);
redis6.destroy();
rows.push(['CPU per call: limiter.check(...) on node-redis (the whole check, round trip included)', await cpuPerCall(async (i) => {
  req.headers['x-forwarded-for'] = xff[i & 4095];
  await realLimiter.check({ request: req, peer: '127.0.0.1', header, route: 'GET /items/:id' }, policies);
})]);
redis.destroy();

const out = ['| part of the request path | µs per call |', '|---|---:|', ...rows.map(([k, v]) => `| ${k} | ${v.toFixed(2)} |`)];
console.log(out.join('\n'));
