// Variant (3) of server.mjs: redis-tb's Express middleware with one policy (per client
// address, per second), on a node-redis client, trusting the loopback proxy.
import { createClient } from 'redis';
import { ClientIp, RateLimiter, perSecond } from 'redis-tb';
import { rateLimit } from 'redis-tb/express';

export async function tbMiddleware(redisUrl, limit) {
  const redis = await createClient({ url: redisUrl, disableOfflineQueue: true }).connect();
  // timeoutMs 1000: on a loaded machine a 50 ms bound would send some requests down the
  // fail-open path (no Redis call); the bench measures the work, every request reaching Redis.
  const limiter = new RateLimiter(redis, { clientIp: new ClientIp({ trustedProxies: ['127.0.0.0/8'] }), timeoutMs: 1000 });
  await limiter.startup();
  return rateLimit(limiter, { policies: [perSecond('ip', limit)] });
}
