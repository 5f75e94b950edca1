// Variants (3) and (6) of server.mjs: redis-tb's Express middleware with one policy (per
// client address) or three (`ip`, a per-route `endpoint`, one `all` bucket shared by every
// request: one TB.MTAKE), on a node-redis client, trusting the loopback proxy. By default `limit` per
// second (the bench: never reached); flood.mjs sets TB_CAPACITY / TB_RATE (a limit that
// refuses) and TB_DENY_CACHE (entries of the local deny cache, 0: off).
// `redis-tb` is this folder's dependency (clients/node), unless TB_PACKAGE_DIR names another
// built copy of clients/node (bench.mjs --baseline: an older revision's), whose `.` and
// `./express` entry points are imported through its own exports map instead. Everything
// else (node-redis, Express, this code) is the same for both; the differences of the API
// used here (at 88fc3cc, the class ClientIp; before issue 40, the policies given to the
// middleware instead of the limiter) are taken care of in loadRedisTb.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createClient } from 'redis';

/** The ESM entry point `sub` ('.', './express') of the package in `dir`, as a file URL. */
function entry(dir, sub) {
  const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const e = pkg.exports?.[sub];
  const file = typeof e === 'string' ? e : e?.import?.default ?? e?.import ?? e?.default;
  if (pkg.name !== 'redis-tb' || typeof file !== 'string') throw new Error(`${dir}: no ESM entry point ${sub} of redis-tb`);
  return pathToFileURL(path.resolve(dir, file)).href;
}

/**
 * What tbMiddleware uses of redis-tb: this folder's (`packageDir` unset) or the package in
 * `packageDir`; `entry` is the file `redis-tb` resolved to. Throws when a part is missing.
 */
export async function loadRedisTb(packageDir) {
  const indexUrl = packageDir ? entry(packageDir, '.') : import.meta.resolve('redis-tb');
  const expressUrl = packageDir ? entry(packageDir, './express') : import.meta.resolve('redis-tb/express');
  const tb = await import(indexUrl);
  const { rateLimit } = await import(expressUrl);
  // Before the client-address configuration was split from its result, the class was
  // ClientIp, with the same options (88fc3cc, the revision issue 24 was filed against).
  const clientIpClass = 'ClientIpConfig' in tb ? 'ClientIpConfig' : 'ClientIp';
  const api = { Limit: tb.Limit, Policy: tb.Policy, RateLimiter: tb.RateLimiter, perSecond: tb.perSecond, ClientIpConfig: tb[clientIpClass], rateLimit };
  const missing = Object.entries(api).filter(([, f]) => typeof f !== 'function').map(([k]) => (k === 'ClientIpConfig' ? clientIpClass : k));
  if (typeof tb.RateLimiter?.prototype?.startup !== 'function') missing.push('RateLimiter.prototype.startup');
  if (missing.length) throw new Error(`redis-tb at ${packageDir ?? 'node_modules'} lacks ${missing.join(', ')}`);
  // Issue 40: a limiter owns its policies (`new RateLimiter(redis, { policies })`, the
  // middleware takes the limiter alone); before it, the middleware took them and the
  // limiter had `register`.
  const ownsPolicies = typeof tb.RateLimiter.prototype.register !== 'function';
  return { ...api, clientIpClass, ownsPolicies, entry: fileURLToPath(indexUrl) };
}

/**
 * `backend` ('scripts': the script backend of SPEC E, on a redis-server without the module)
 * is passed to the limiter only when given (unset: the default, `auto`, as before). The
 * backend's line (E6) the limiter logs is kept as `middleware.backendLine`.
 */
export async function tbMiddleware(redisUrl, limit, policies = 1, backend = undefined) {
  const { ClientIpConfig, Limit, Policy, RateLimiter, perSecond, rateLimit, ownsPolicies, entry: tbEntry } = await loadRedisTb(process.env.TB_PACKAGE_DIR);
  const redis = await createClient({ url: redisUrl, disableOfflineQueue: true }).connect();
  const denyCache = Number(process.env.TB_DENY_CACHE ?? 0);
  // timeoutMs 1000: on a loaded machine a 50 ms bound would send some requests down the
  // fail-open path (no Redis call); the bench measures the work, every request reaching Redis.
  const policy = process.env.TB_CAPACITY
    ? new Policy({ name: 'ip', limit: new Limit(Number(process.env.TB_CAPACITY), Number(process.env.TB_RATE)) })
    : perSecond('ip', limit);
  const all = policies === 3
    ? [policy, perSecond('endpoint', limit, { perRoute: true }), perSecond('all', limit, { key: () => 'everyone' })]
    : [policy];
  const scope = { policies: all, exclude: ['GET /_stats'] };
  let backendLine = null;
  const limiter = new RateLimiter(redis, {
    ...(backend ? { backend } : {}),
    // the default logger (console), with the backend's line kept
    logger: { warn: (m) => console.warn(m), info: (m) => { backendLine = m; console.info(m); } },
    // since issue 40 the limiter owns its policies and scope; before, the middleware took them
    ...(ownsPolicies ? scope : {}),
    clientIp: new ClientIpConfig({ trustedProxies: ['127.0.0.0/8'] }),
    timeoutMs: 1000,
    denyCache: denyCache > 0 ? { maxEntries: denyCache } : undefined,
  });
  await limiter.startup();
  const middleware = ownsPolicies ? rateLimit(limiter) : rateLimit(limiter, scope);
  middleware.limiter = limiter;
  middleware.tbEntry = tbEntry;
  middleware.backendLine = backendLine;
  return middleware;
}
