/**
 * A Fastify API rate-limited with redis-tb (`redis-tb/fastify`):
 *
 * - layered policies in ONE TB.MTAKE per request: per client address (10 per second),
 *   per user by plan tier (per hour: free 100, pro 5000), and `POST /orders` (5 per
 *   minute per user);
 * - a refund in a handler (a rejected order is not counted) and of our own 5xx (`refundOn`);
 * - the decision used in a handler (`GET /items/:id` answers `slow_down`);
 * - a cost per request (`GET /search`: one token per page of 50) and a shadow policy
 *   (`search-strict`: charged with the others, never refusing, counted);
 * - a streamed route (`GET /stream`, an LLM proxy's SSE): at most 2 streams in progress
 *   per client address (an in-flight policy: a lease taken in the same call as the
 *   buckets, renewed while the stream runs, released when it ends, and ended at 6 s
 *   whatever the client does, SPEC N), tokens held before the stream (renewed while it
 *   runs) and settled with the count it sent (SPEC G); written as the client reads it
 *   (a pull stream piped with `drain`), stopped when the client goes, its query bounded
 *   (a 400 beyond);
 * - a fail-closed login: `POST /login` lives in a child context of the API with its own
 *   limiter, a sliding window of 20 an hour (SPEC W: a window is alone in its limiter),
 *   which answers 503 when Redis is down (the API, whose 'ip' it also gets, fails open);
 * - `GET /metrics` (prom-client) and `GET /healthz`, outside the limited contexts.
 */
import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { Registry } from 'prom-client';
import { ClientIpConfig, type Hold, Limit, Policy, RateLimiter, type RedisLike, perMinute, perSecond, tiered, type BackendSetting } from 'redis-tb';
import { fastifyRateLimit, sendHoldRefusal } from 'redis-tb/fastify';
import { PrometheusMetrics } from 'redis-tb/prometheus';
import { badQueryBody, pause, streamQuery } from './stream.js';

export interface AppConfig {
  redis: RedisLike;
  trustedProxies?: string[];
  /** the bound on each Redis call (default 50 ms, the library's) */
  timeoutMs?: number;
  /** SPEC U2: start even when Redis is unreachable (one log line, then the failure mode) */
  startDegraded?: boolean;
  /** SPEC E1: the store's backend, `auto` (default: the module where it is loaded, else the script library), `module` or `scripts` */
  backend?: BackendSetting;
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
  // searches cost by page size
  perMinute<FastifyRequest>('search', 60, { cost: searchCost, routes: ['GET /search'] }),
  // a stricter search limit tried out in shadow mode: charged and counted, never refusing (SPEC S)
  perMinute<FastifyRequest>('search-strict', 20, { cost: searchCost, routes: ['GET /search'], shadow: true }),
  // at most 2 streams in progress per client address, each a lease of 2 s (SPEC N), each
  // ended 6 s after its grant whatever its client does (N7: max_duration)
  new Policy<FastifyRequest>({ name: 'streams', limit: Limit.inFlight(2, 2, 6), routes: ['GET /stream'] }),
  // 1000 tokens an hour per client address, held by the handler and settled (SPEC G)
  new Policy<FastifyRequest>({ name: 'tokens', limit: Limit.perHour(1000), settleLater: true, routes: ['GET /stream'] }),
];
// SPEC W, C10: a window is the only policy of its limiter
export const LOGIN_POLICIES = [new Policy<FastifyRequest>({ name: 'login', limit: Limit.window(20, 3600) })];

type Query = Record<string, string | undefined>;

/** A search costs one token per page of 50 results asked for. */
function searchCost(request: FastifyRequest): number {
  const size = Number((request.query as Query).size ?? 50);
  return Number.isFinite(size) && size > 0 ? Math.ceil(size / 50) : 1;
}

export function buildApp(config: AppConfig): { app: FastifyInstance; limiter: RateLimiter<FastifyRequest>; strict: RateLimiter<FastifyRequest> } {
  const registry = new Registry();
  const metrics = new PrometheusMetrics({ registry });
  const clientIp = new ClientIpConfig({ trustedProxies: config.trustedProxies ?? [] });
  const limiter = new RateLimiter<FastifyRequest>(config.redis, {
    policies: POLICIES,
    refundOn: (status) => status >= 500, // our own failures do not count against callers
    clientIp, metrics, name: 'api', timeoutMs: config.timeoutMs, startDegraded: config.startDegraded, backend: config.backend ?? 'auto',
  });
  // Logins fail CLOSED: if Redis is down, refuse (503) rather than allow password guessing.
  const strict = new RateLimiter<FastifyRequest>(config.redis, {
    policies: LOGIN_POLICIES, clientIp, metrics, name: 'login', failOpen: false, timeoutMs: config.timeoutMs, startDegraded: config.startDegraded, backend: config.backend ?? 'auto',
  });

  const app = Fastify();

  app.get('/metrics', async (_request, reply) => {
    reply.type(registry.contentType);
    return registry.metrics();
  });

  app.get('/healthz', async () => ({ status: 'ok' }));

  // The API: its own context, so the plugin's hooks cover these routes only.
  app.register(async (api) => {
    await api.register(fastifyRateLimit, { limiter });

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

    api.get<{ Querystring: Query }>('/search', async (request) => {
      const slowDown = (request.rateLimit?.results ?? []).some((r) => !r.shadow && r.remaining < 2);
      return { q: request.query.q ?? '', size: Number(request.query.size ?? 50), results: [], slow_down: slowDown };
    });

    // An LLM proxy's stream (SSE): the check took a 'streams' slot (released when the
    // response ends, a client that goes away included, and at the policy's max_duration,
    // when the limiter ends the response); the handler checks its query, holds max_tokens
    // on 'tokens' before it streams (renewed while the stream runs), and settles the
    // number of tokens it sent. The events are a pull stream: Fastify pipes it into the
    // response, and pipe() waits for the response's 'drain' before it asks for more, so a
    // client that stops reading stops the generator (at most the stream's 16 events ahead).
    api.get<{ Querystring: Record<string, unknown> }>('/stream', async (request, reply) => {
      const query = streamQuery(request.query);
      if ('bad' in query) {
        // answered before any hold or event (the limiter's check, which ran first, counts it)
        // a Buffer: Fastify adds no charset to the manifest's content type
        return reply.code(400).type('application/problem+json').send(Buffer.from(badQueryBody(query.bad)));
      }
      const decision = request.rateLimit;
      let hold: Hold | null = null;
      if (decision && decision.outcome !== 'store_error') {
        // a store error takes the failure mode (the API fails open): stream without a hold
        hold = await decision.hold('tokens', query.max_tokens, 60).catch(() => null);
        if (hold && !hold.allowed) return sendHoldRefusal(reply, hold); // SPEC G2, G6: a 429 naming 'tokens'
      }
      // the client went away, or the limiter ended the request (SPEC N7): stop at once,
      // also in the middle of a delay
      const gone = new AbortController();
      reply.raw.once('close', () => gone.abort());
      if (reply.raw.destroyed) gone.abort();
      const held = hold;
      const { tokens, delay_ms: delayMs } = query;
      async function* events(): AsyncGenerator<string> {
        let sent = 0;
        try {
          for (let i = 1; i <= tokens && !gone.signal.aborted; i++) {
            if (delayMs) await pause(delayMs, gone.signal);
            if (gone.signal.aborted) return;
            sent += 1;
            yield `data: token-${i}\n\n`;
          }
          if (!gone.signal.aborted) yield 'data: [DONE]\n\n';
        } finally {
          // SPEC G3: the actual count, also when the client went away (the stream is destroyed)
          if (held) await held.settle(sent).catch(() => undefined);
        }
      }
      return reply.type('text/event-stream').header('cache-control', 'no-cache').send(Readable.from(events()));
    });

    // The login: a child context with the fail-closed limiter (the API's hooks run first:
    // its 'ip', then the 'login' window; both lists are in the headers).
    await api.register(async (auth) => {
      await auth.register(fastifyRateLimit, { limiter: strict });
      auth.post('/login', async (request) => {
        const login = request.rateLimit?.results.find((r) => r.name === 'login');
        return { ok: true, attempts_left: login === undefined ? null : Math.floor(login.remaining) };
      });
    });
  });

  return { app, limiter, strict };
}
