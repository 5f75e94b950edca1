// The Express app under measurement, one variant per process (VARIANT):
//   none  no limiter
//   erl   express-rate-limit + rate-limit-redis on node-redis (one policy, per client IP)
//   tb    redis-tb's Express middleware (one policy, per client IP)
//   ping  one bare Redis PING per request on node-redis (the client library's floor)
//   rawping  one pre-encoded PING per request written on a raw socket, +PONG read back
//         (persistent connections, one per request in flight, no client library: the
//         round trip's own floor)
//   tb3   redis-tb's Express middleware with three policies (one TB.MTAKE)
//   tbs, tbs3  tb and tb3 on the script backend (`backend: 'scripts'`; REDIS_URL: a
//         redis-server without the module): Functions where FUNCTION LOAD works
//   tbse, tbse3  the same, where bench.mjs's REDIS_URL names a user refused FUNCTION LOAD:
//         the backend falls back to SCRIPT LOAD and EVALSHA
//   tb@base, tb3@base  tb and tb3 with the `redis-tb` of TB_PACKAGE_DIR (bench.mjs --baseline:
//         an older revision's clients/node, built), the rest of the app unchanged
// Every variant is the same app: trust the loopback proxy (the client address is the
// X-Forwarded-For the load generator sends), one JSON route. Limits are set high enough
// that every response is a 200: the handler runs on every request of every variant.
// Prints "listening <port>" when ready, followed by " redis-tb <file>" (the entry point
// `redis-tb` resolved to) for the redis-tb variants, and " backend <line>" (the limiter's
// backend line, SPEC E6) when it logged one.
import express from 'express';

const variant = process.env.VARIANT ?? 'none';
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const LIMIT = 1_000_000; // per second per address: never reached, so every answer is a 200

const app = express();
let limiter = null;
let tbEntry = null;
let backendLine = null;
app.disable('x-powered-by');
app.set('trust proxy', 'loopback');

if (variant === 'erl') {
  const { rateLimit } = await import('express-rate-limit');
  const { RedisStore } = await import('rate-limit-redis');
  const { createClient } = await import('redis');
  const client = createClient({ url: redisUrl });
  await client.connect();
  app.use(rateLimit({
    windowMs: 1000,
    limit: LIMIT,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    store: new RedisStore({ sendCommand: (...args) => client.sendCommand(args), prefix: 'erl:' }),
  }));
} else if (variant === 'ping') {
  const { createClient } = await import('redis');
  const client = createClient({ url: redisUrl });
  await client.connect();
  app.use((req, res, next) => { client.ping().then(() => next(), next); });
} else if (variant === 'rawping') {
  const net = await import('node:net');
  const PING = Buffer.from('*1\r\n$4\r\nPING\r\n');
  const { hostname, port } = new URL(redisUrl);
  const idle = [];
  // One raw round trip: an idle connection (or a new one), PING written, exactly
  // `+PONG\r\n` read back (Redis answers a connection's commands in order, one at a time here).
  const connect = () => new Promise((resolve, reject) => {
    const sock = net.connect({ host: hostname, port: Number(port || 6379), noDelay: true }, () => resolve(sock));
    sock.once('error', reject);
  });
  const ping = async () => {
    const sock = idle.pop() ?? await connect();
    await new Promise((resolve, reject) => {
      let got = '';
      const onData = (chunk) => {
        got += chunk.toString('latin1');
        if (got.length < 7) return;
        sock.off('data', onData);
        if (got === '+PONG\r\n') resolve(); else reject(new Error(`PING answered ${JSON.stringify(got)}`));
      };
      sock.on('data', onData);
      sock.write(PING);
    });
    idle.push(sock);
  };
  app.use((req, res, next) => { ping().then(() => next(), next); });
} else if (['tb', 'tb3', 'tb@base', 'tb3@base'].includes(variant)) {
  const [kind, at] = variant.split('@');
  if ((at === 'base') !== Boolean(process.env.TB_PACKAGE_DIR)) {
    throw new Error(`VARIANT ${variant} ${at ? 'needs' : 'is this folder\'s redis-tb: unset'} TB_PACKAGE_DIR`);
  }
  const { tbMiddleware } = await import('./tb-variant.mjs');
  const middleware = await tbMiddleware(redisUrl, LIMIT, kind === 'tb3' ? 3 : 1);
  app.use(middleware);
  limiter = middleware.limiter;
  tbEntry = middleware.tbEntry;
  backendLine = middleware.backendLine;
} else if (['tbs', 'tbs3', 'tbse', 'tbse3'].includes(variant)) {
  if (process.env.TB_PACKAGE_DIR) throw new Error(`VARIANT ${variant} is this folder's redis-tb: unset TB_PACKAGE_DIR`);
  const { tbMiddleware } = await import('./tb-variant.mjs');
  const middleware = await tbMiddleware(redisUrl, LIMIT, variant.endsWith('3') ? 3 : 1, 'scripts');
  app.use(middleware);
  limiter = middleware.limiter;
  tbEntry = middleware.tbEntry;
  backendLine = middleware.backendLine;
} else if (variant !== 'none') {
  throw new Error(`unknown VARIANT ${variant}`);
}

app.get('/items/:id', (req, res) => {
  res.json({ id: req.params.id, name: `item ${req.params.id}` });
});
// flood.mjs reads the limiter's counters (not limited: excluded in tb-variant.mjs)
if (process.env.TB_STATS && limiter) app.get('/_stats', (req, res) => res.json(limiter.stats));

const server = app.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}${tbEntry ? ` redis-tb ${tbEntry}` : ''}${backendLine ? ` backend ${backendLine}` : ''}\n`);
});
server.keepAliveTimeout = 60_000;
// exit normally on SIGINT, so `node --cpu-prof` (bench/integrations/node/profile.mjs) writes its profile
process.on('SIGINT', () => process.exit(0));
