/**
 * Serves the example: `node dist/src/server.js`. Environment: REDIS_URL (default
 * redis://127.0.0.1:6379), TRUSTED_PROXIES (comma-separated CIDRs of your load balancers),
 * REDIS_TB_TIMEOUT_MS (the bound on each Redis call, default 50), PORT (default 3000; 0 picks a free one), HOST (default 127.0.0.1),
 * REDIS_TB_START_DEGRADED=1 (start even when Redis is unreachable, failing open; by default
 * that stops the start with exit status 3).
 */
import { createClient } from 'redis';
import { type BackendSetting, backendSetting } from 'redis-tb';
import { buildApp } from './app.js';

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const timeoutMs = process.env.REDIS_TB_TIMEOUT_MS ? Number(process.env.REDIS_TB_TIMEOUT_MS) : undefined;
const startDegraded = process.env.REDIS_TB_START_DEGRADED === '1';
let backend: BackendSetting;
try {
  backend = backendSetting(process.env.REDIS_TB_BACKEND ?? 'auto');
} catch (err) {
  console.error(`REDIS_TB_BACKEND: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(2);
}
const trustedProxies = (process.env.TRUSTED_PROXIES ?? '').split(',').map((s) => s.trim()).filter(Boolean);

// No offline queue: while Redis is down a command fails at once and the limiter's
// failure mode answers, instead of the command being sent (and charged) later.
const redis = createClient({ url: redisUrl, disableOfflineQueue: true });
let lastErrorLog = 0;
redis.on('error', (err: Error) => {
  if (Date.now() - lastErrorLog >= 1000) {
    lastErrorLog = Date.now();
    console.warn(`redis: ${err.message || err.name} (reconnecting)`);
  }
});
// Wait a moment for the connection; startup() decides what an unreachable Redis means.
const connected = redis.connect().catch(() => undefined);
await Promise.race([connected, new Promise((r) => setTimeout(r, 1000))]);

const { app, limiter, strict } = buildApp({ redis, trustedProxies, timeoutMs, startDegraded, backend });
// the plugins register their policies with the limiters as the app loads (SPEC U3 reads them)
await app.ready();
try {
  // SPEC U1-U4, E1-E2: the module forced and missing, the script library not loadable, no permission, a Redis Cluster that would refuse the API's
  // calls, or (without REDIS_TB_START_DEGRADED=1) an unreachable Redis stops the app here
  // with one line and exit status 3 (what uvicorn and gunicorn give a failed start)
  await limiter.startup();
  await strict.startup();
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  redis.destroy();
  process.exit(3);
}

const address = await app.listen({ port: Number(process.env.PORT ?? 3000), host: process.env.HOST ?? '127.0.0.1' });
console.log(`listening on ${address}`);
const stop = (): void => {
  void app.close().finally(() => {
    redis.destroy();
    process.exit(0);
  });
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
