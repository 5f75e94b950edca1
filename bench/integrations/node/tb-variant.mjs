// Variants (3) and (6) of server.mjs: redis-tb's Express middleware with one policy (per
// client address) or three (`ip`, a per-route `endpoint`, one `all` bucket shared by every
// request: one TB.MTAKE), on a node-redis client, trusting the loopback proxy. By default `limit` per
// second (the bench: never reached); flood.mjs sets TB_CAPACITY / TB_RATE (a limit that
// refuses) and TB_DENY_CACHE (entries of the local deny cache, 0: off).
import { createClient } from 'redis';
import { ClientIpConfig, Limit, Policy, RateLimiter, perSecond } from 'redis-tb';
import { rateLimit } from 'redis-tb/express';

export async function tbMiddleware(redisUrl, limit, policies = 1) {
  const redis = await createClient({ url: redisUrl, disableOfflineQueue: true }).connect();
  const denyCache = Number(process.env.TB_DENY_CACHE ?? 0);
  // timeoutMs 1000: on a loaded machine a 50 ms bound would send some requests down the
  // fail-open path (no Redis call); the bench measures the work, every request reaching Redis.
  const limiter = new RateLimiter(redis, {
    clientIp: new ClientIpConfig({ trustedProxies: ['127.0.0.0/8'] }),
    timeoutMs: 1000,
    denyCache: denyCache > 0 ? { maxEntries: denyCache } : undefined,
  });
  await limiter.startup();
  const policy = process.env.TB_CAPACITY
    ? new Policy({ name: 'ip', limit: new Limit(Number(process.env.TB_CAPACITY), Number(process.env.TB_RATE)) })
    : perSecond('ip', limit);
  const all = policies === 3
    ? [policy, perSecond('endpoint', limit, { perRoute: true }), perSecond('all', limit, { key: () => 'everyone' })]
    : [policy];
  const middleware = rateLimit(limiter, { policies: all, exclude: ['GET /_stats'] });
  middleware.limiter = limiter;
  return middleware;
}
