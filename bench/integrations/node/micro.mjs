// Where redis-tb's Express middleware spends its JavaScript time: each part of the
// request path timed in-process (best of 7 repetitions of N calls, so other work on the
// machine inflates it least), next to the floor (one awaited promise) and to the general
// code the fast paths stand in for (the client-address walk without its IPv4 fast path,
// the headers serialized item by item per request, a timer and Promise.race per call), so
// the report shows what each fast path saves. A fake client answers TB.TAKE / TB.MTAKE
// with the replies a real server gave, so no socket is involved. Prints a markdown table
// (bench.mjs puts it in the report).
//
//   node bench/integrations/node/micro.mjs [--redis redis://127.0.0.1:6379] [--n 20000]
import express from 'express';
import { createClient } from 'redis';
import { serializeList } from 'structured-headers';
import { ClientIpConfig, Deadlines, RateLimiter, RedisTbTimeoutError, perSecond, quota, remainingUnits, resetSeconds, windowSeconds } from 'redis-tb';
import { routeTemplate } from 'redis-tb/express';

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(`--${k}`); return i < 0 ? d : args[i + 1]; };
const N = Number(opt('n', 20000));

// real TB.TAKE and TB.MTAKE replies (one bucket, admitted), through node-redis
const redis = await createClient({ url: opt('redis', process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') }).connect();
const takeReply = await redis.sendCommand(['TB.TAKE', 'micro:k', '1000000', '1000000', '1']);
const mtakeReply = await redis.sendCommand(['TB.MTAKE', '1', 'micro:k', '1000000', '1000000', '1']);

const fake = (argv) => Promise.resolve(argv[0] === 'TB.TAKE' ? takeReply : mtakeReply);
const clientIp = new ClientIpConfig({ trustedProxies: ['127.0.0.0/8'] });
const policies = [perSecond('ip', 1_000_000)];
const limiter = new RateLimiter(fake, { policies, clientIp, timeoutMs: 1000 });
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

// the general ways the fast paths replace: headers.ts's serialization before (every item
// through the structured-field library's serializeList, per request), and bounded()'s
// timer and Promise.race per call
const item = (name, params) => [name, new Map(Object.entries(params))];
function listHeaders(d) {
  const rs = d.results.filter((r) => !r.shadow);
  return [
    ['RateLimit-Policy', serializeList(rs.map((r) => item(r.name, { q: quota(r.capacity), w: windowSeconds(r.capacity, r.rate) })))],
    ['RateLimit', serializeList(rs.map((r) => item(r.name, { r: remainingUnits(r.remaining), t: resetSeconds(r.resetAfter) })))],
  ];
}
function raceBounded(call, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new RedisTbTimeoutError(what, ms)), ms); });
  call.catch(() => undefined);
  return Promise.race([call, timeout]).finally(() => clearTimeout(timer));
}
const deadlines = new Deadlines(1000);

let decision = await limiter.check({ request: req, peer: '127.0.0.1', header, route: 'GET /items/:id' });
const rows = [];
rows.push(['the floor: one awaited promise', await time(async () => { await Promise.resolve(1); })]);
rows.push(['routeTemplate(req): the route walk (1 route)', await time(async () => routeTemplate(req))]);
rows.push(['clientIp.identity(peer, X-Forwarded-For)', await time(async (i) => clientIp.identity('127.0.0.1', [xff[i & 4095]]))]);
rows.push(['  the same by the general path (`identityGeneral`: no IPv4 fast path)', await time(async (i) => clientIp.identityGeneral('127.0.0.1', [xff[i & 4095]]))]);
rows.push(['limiter.check(...) with a fake client (identity, plan, args, bounded call, parse, decision)', await time(async (i) => {
  req.headers['x-forwarded-for'] = xff[i & 4095];
  decision = await limiter.check({ request: req, peer: '127.0.0.1', header, route: 'GET /items/:id' });
})]);
rows.push(['limiter.headers(decision): RateLimit-Policy + RateLimit', await time(async () => limiter.headers(decision))]);
rows.push(['  the same through serializeList per request (as before)', await time(async () => listHeaders(decision))]);
rows.push(['one bounded call: the limiter\'s deadline queue (`Deadlines.bound`)', await time(async () => deadlines.bound(Promise.resolve(1), 'x'))]);
rows.push(['  the same with a setTimeout + Promise.race per call (as before)', await time(async () => raceBounded(Promise.resolve(1), 1000, 'x'))]);
for (let i = 0; i < 4096; i += 97) {
  const lines = [xff[i]];
  if (clientIp.identity('127.0.0.1', lines) !== clientIp.identityGeneral('127.0.0.1', lines)) throw new Error('the fast path disagrees');
}
if (JSON.stringify(listHeaders(decision)) !== JSON.stringify(limiter.headers(decision))) {
  throw new Error(`the headers disagree: ${JSON.stringify(listHeaders(decision))} ${JSON.stringify(limiter.headers(decision))}`);
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
const realLimiter = new RateLimiter(redis, { policies, clientIp, timeoutMs: 1000 });
rows.push(['CPU per round trip: node-redis 5.12.1 `client.ping()`', await cpuPerCall(() => redis.ping())]);
rows.push(['CPU per round trip: node-redis 5.12.1 `sendCommand(TB.TAKE key 1000000 1000000 1)`', await cpuPerCall((i) => redis.sendCommand(['TB.TAKE', `micro:${xff[i & 4095]}`, '1000000', '1000000', '1']))]);
rows.push(['CPU per round trip: node-redis 5.12.1 `sendCommand(TB.MTAKE 1 key 1000000 1000000 1)`', await cpuPerCall((i) => redis.sendCommand(['TB.MTAKE', '1', `micro:${xff[i & 4095]}`, '1000000', '1000000', '1']))]);
rows.push(['  the same on node-redis 6.3.1: `client.ping()`', await cpuPerCall(() => redis6.ping())]);
rows.push(['  the same on node-redis 6.3.1: `sendCommand(TB.MTAKE ...)`', await cpuPerCall((i) => redis6.sendCommand(['TB.MTAKE', '1', `micro6:${xff[i & 4095]}`, '1000000', '1000000', '1']))]);
redis6.destroy();
rows.push(['CPU per call: limiter.check(...) on node-redis (the whole check, round trip included)', await cpuPerCall(async (i) => {
  req.headers['x-forwarded-for'] = xff[i & 4095];
  await realLimiter.check({ request: req, peer: '127.0.0.1', header, route: 'GET /items/:id' });
})]);
redis.destroy();

const out = ['| part of the request path | µs per call |', '|---|---:|', ...rows.map(([k, v]) => `| ${k} | ${v.toFixed(2)} |`)];
console.log(out.join('\n'));
