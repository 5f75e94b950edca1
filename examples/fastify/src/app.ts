/**
 * A Fastify API rate-limited with redis-tb (`redis-tb/fastify`):
 *
 * - layered policies in ONE TB.MTAKE per request: per client address (10 per second),
 *   per user by plan tier (per hour: free 100, pro 5000), and `POST /orders` (5 per
 *   minute per user);
 * - a refund in a handler (a rejected order is not counted) and of our own 5xx (`refundOn`);
 * - the decision used in a handler (`GET /items/:id` answers `slow_down`);
 * - a fail-closed login: `POST /login` lives in its own encapsulated context with its own
 *   limiter, which answers 503 when Redis is down (the API fails open);
 * - `GET /metrics` (prom-client), outside both limited contexts.
 */
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { Registry } from 'prom-client';
import { ClientIpConfig, Limit, RateLimiter, type RedisLike, perMinute, perSecond, tiered } from 'redis-tb';
import { fastifyRateLimit } from 'redis-tb/fastify';
import { PromMetrics } from 'redis-tb/prometheus';

export interface AppConfig {
  redis: RedisLike;
  trustedProxies?: string[];
  /** the bound on each Redis call (default 50 ms, the library's) */
  timeoutMs?: number;
  /** SPEC U2: start even when Redis is unreachable (one log line, then the failure mode) */
  startDegraded?: boolean;
}

// A stand-in for your auth: API key -> user and plan.
const API_KEYS: Record<string, { user: string; plan: 'free' | 'pro' }> = {
  'key-alice': { user: 'alice', plan: 'pro' },
  'key-bob': { user: 'bob', plan: 'free' },
  'key-carol': { user: 'carol', plan: 'free' },
};
function account(request: FastifyRequest) {
  const key = request.headers['x-api-key'];
  return typeof key === 'string' ? (API_KEYS[key] ?? null) : null;
}
const userId = (request: FastifyRequest): string | null => account(request)?.user ?? null;

export const POLICIES = [
  perSecond<FastifyRequest>('ip', 10),
  tiered<FastifyRequest>('user', { free: Limit.perHour(100), pro: Limit.perHour(5000) },
    (request) => account(request)?.plan ?? null, { default: 'free', key: userId }),
  perMinute<FastifyRequest>('orders', 5, { key: userId, routes: ['POST /orders'] }),
];
export const LOGIN_POLICIES = [perSecond<FastifyRequest>('ip', 10), perMinute<FastifyRequest>('login', 5)];

export function buildApp(config: AppConfig): { app: FastifyInstance; limiter: RateLimiter<FastifyRequest>; strict: RateLimiter<FastifyRequest> } {
  const registry = new Registry();
  const metrics = new PromMetrics({ registry });
  const clientIp = new ClientIpConfig({ trustedProxies: config.trustedProxies ?? [] });
  const limiter = new RateLimiter<FastifyRequest>(config.redis, { clientIp, metrics, name: 'api', timeoutMs: config.timeoutMs, startDegraded: config.startDegraded });
  // Logins fail CLOSED: if Redis is down, refuse (503) rather than allow password guessing.
  const strict = new RateLimiter<FastifyRequest>(config.redis, { clientIp, metrics, name: 'login', failOpen: false, timeoutMs: config.timeoutMs, startDegraded: config.startDegraded });

  const app = Fastify();

  app.get('/metrics', async (_request, reply) => {
    reply.type(registry.contentType);
    return registry.metrics();
  });

  // The API: its own context, so the plugin's hooks cover these routes only.
  app.register(async (api) => {
    await api.register(fastifyRateLimit, { limiter, policies: POLICIES, refundOn: (status) => status >= 500 });

    api.get<{ Params: { id: string } }>('/items/:id', async (request) => {
      // The decision in a handler: tell a client running low to slow down.
      const slowDown = (request.rateLimit?.results ?? []).some((r) => r.remaining < 2);
      return { id: request.params.id, slow_down: slowDown };
    });

    api.post<{ Body: { item_id?: unknown; quantity?: unknown } | null }>('/orders', async (request, reply) => {
      const { item_id: itemId, quantity } = request.body ?? {};
      if (typeof itemId !== 'number' || typeof quantity !== 'number' || quantity <= 0) {
        await request.rateLimit?.refund(); // a request we reject ourselves is not counted
        return reply.code(422).send({ error: 'item_id and a positive quantity are required' });
      }
      if (itemId === 13) throw new Error('inventory service unavailable'); // 500, refunded by refundOn
      return reply.code(201).send({ item_id: itemId, quantity });
    });
  });

  // The login: a sibling context with the fail-closed limiter.
  app.register(async (auth) => {
    await auth.register(fastifyRateLimit, { limiter: strict, policies: LOGIN_POLICIES });
    auth.post('/login', async (request) => {
      const login = request.rateLimit?.results.find((r) => r.name === 'login');
      return { ok: true, attempts_left: login === undefined ? null : Math.floor(login.remaining) };
    });
  });

  return { app, limiter, strict };
}
