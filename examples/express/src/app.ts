/**
 * An API rate-limited with redis-tb (npm `redis-tb`, Express middleware `redis-tb/express`):
 *
 * - layered policies, owned by the limiter, checked in ONE TB.MTAKE per request (all or nothing: a refusal by
 *   one layer spends nothing on the others): per client address (10 per second), per user
 *   by plan tier (per hour: free 100, pro 5000, internal unlimited), and an endpoint
 *   policy on `POST /orders` (5 per minute per user);
 * - a cost per request: `GET /search` costs one token per page of 50 results;
 * - a refund in a handler (an order the handler rejects is not counted) and the
 *   automatic refund of the app's own 5xx (`refundOn`);
 * - the decision used in handlers (`GET /items/:id`, `GET /quota`);
 * - a shadow policy (`search-strict`): charged with the others, never refusing, counted;
 * - a streamed route (`GET /stream`, an LLM proxy's SSE): at most 2 streams in progress
 *   per client address (an in-flight policy: a lease taken in the same call as the
 *   buckets, renewed while the stream runs, released when it ends, and ended at 6 s
 *   whatever the client does, SPEC N), tokens held before the stream (renewed while it
 *   runs) and settled with the count it sent (SPEC G); written as the client reads it
 *   (`drain`), stopped when the client goes, its query bounded (a 400 beyond);
 * - a fail-closed login: `POST /login` has its own limiter, a sliding window of 20 an
 *   hour (SPEC W: a window is alone in its limiter), that answers 503 when Redis is down
 *   (the rest of the API fails open);
 * - `GET /metrics`: prom-client's text format, redis-tb's per-policy counters included.
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import { Registry } from 'prom-client';
import { ClientIpConfig, type Hold, Limit, Policy, RateLimiter, type RedisLike, perHour, perMinute, perSecond, tiered, type BackendSetting } from 'redis-tb';
import { rateLimit, sendHoldRefusal } from 'redis-tb/express';
import { PrometheusMetrics } from 'redis-tb/prometheus';
import { badQueryBody, streamQuery, writeEvents } from './stream.js';

export interface AppConfig {
  /** a connected node-redis (or ioredis) client */
  redis: RedisLike;
  /** CIDRs of your load balancers; only their X-Forwarded-For is believed */
  trustedProxies?: string[];
  /** the bound on each Redis call (default 50 ms, the library's) */
  timeoutMs?: number;
  /** SPEC U2: start even when Redis is unreachable (one log line, then the failure mode) */
  startDegraded?: boolean;
  /** SPEC E1: the store's backend, `auto` (default: the module where it is loaded, else the script library), `module` or `scripts` */
  backend?: BackendSetting;
}

// -- who is calling ----------------------------------------------------------------
// A stand-in for your auth: API key -> user and plan.
interface Account {
  user: string;
  plan: 'free' | 'pro' | 'internal';
}
const API_KEYS: Record<string, Account> = {
  'key-alice': { user: 'alice', plan: 'pro' },
  'key-bob': { user: 'bob', plan: 'free' },
  'key-carol': { user: 'carol', plan: 'free' },
  'key-dave': { user: 'dave', plan: 'free' },
  'key-ops': { user: 'ops', plan: 'internal' },
};

function account(req: Request): Account | null {
  return API_KEYS[req.get('x-api-key') ?? ''] ?? null;
}
/** Key function: the user behind the API key; null (skip the policy) when anonymous. */
const userId = (req: Request): string | null => account(req)?.user ?? null;

/** A search costs one token per page of 50 results asked for. */
function searchCost(req: Request): number {
  const size = Number(req.query.size ?? 50);
  return Number.isFinite(size) && size > 0 ? Math.ceil(size / 50) : 1;
}

// -- policies ------------------------------------------------------------------------
// All of a request's policies are checked together in one TB.MTAKE.
export const POLICIES = [
  // every caller, by client address (IPv6 grouped by /64): 10 per second
  perSecond<Request>('ip', 10),
  // signed-in users, by plan: free 100 per hour, pro 5000 per hour, internal not limited
  tiered<Request>(
    'user',
    { free: Limit.perHour(100), pro: Limit.perHour(5000), internal: null },
    (req) => account(req)?.plan ?? null,
    { default: 'free', key: userId },
  ),
  // an endpoint policy: 5 orders per minute per user
  perMinute<Request>('orders', 5, { key: userId, routes: ['POST /orders'] }),
  // searches cost by page size
  perMinute<Request>('search', 60, { cost: searchCost, routes: ['GET /search'] }),
  // a stricter search limit tried out in shadow mode: charged and counted, never refusing (SPEC S)
  perMinute<Request>('search-strict', 20, { cost: searchCost, routes: ['GET /search'], shadow: true }),
  // at most 2 streams in progress per client address, each a lease of 2 s (SPEC N), each
  // ended 6 s after its grant whatever its client does (N7: max_duration)
  new Policy<Request>({ name: 'streams', limit: Limit.inFlight(2, 2, 6), routes: ['GET /stream'] }),
  // 1000 tokens an hour per client address, held by the handler and settled (SPEC G)
  new Policy<Request>({ name: 'tokens', limit: Limit.perHour(1000), settleLater: true, routes: ['GET /stream'] }),
];
// SPEC W, C10: a window is the only policy of its limiter
export const LOGIN_POLICIES = [new Policy<Request>({ name: 'login', limit: Limit.window(20, 3600) })];

/** The decision in a handler: tell a client running low (under 2 tokens left anywhere) to slow down. */
function slowDown(res: Response): boolean {
  const results = res.locals.rateLimit?.results ?? [];
  return results.some((r) => r.remaining < 2);
}

export function buildApp(config: AppConfig) {
  const registry = new Registry();
  const metrics = new PrometheusMetrics({ registry });
  const clientIp = new ClientIpConfig({ trustedProxies: config.trustedProxies ?? [] });
  const limiter = new RateLimiter<Request>(config.redis, {
    policies: POLICIES,
    exclude: ['GET /healthz', 'GET /metrics'],
    refundOn: (status) => status >= 500, // our own failures do not count against callers
    clientIp, metrics, name: 'api', timeoutMs: config.timeoutMs, startDegraded: config.startDegraded, backend: config.backend ?? 'auto',
  });
  // Logins fail CLOSED: if Redis is down, refuse (503) rather than allow password guessing.
  const strict = new RateLimiter<Request>(config.redis, {
    policies: LOGIN_POLICIES, clientIp, metrics, name: 'login', failOpen: false, timeoutMs: config.timeoutMs, startDegraded: config.startDegraded, backend: config.backend ?? 'auto',
  });

  const app = express();
  app.disable('x-powered-by');

  app.use(rateLimit(limiter));
  // Bodies are parsed after the limiter: a refused request is not read.
  app.use(express.json());

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  app.get('/metrics', async (_req, res) => {
    res.type(registry.contentType).send(await registry.metrics());
  });

  // The login: its own fail-closed limiter (the 'login' window), put on the route, after
  // the API-wide middleware (its 'ip'): both lists are in the headers.
  app.post('/login', rateLimit(strict), (req: Request, res: Response) => {
    const decision = res.locals.rateLimit;
    const login = decision?.results.find((r) => r.name === 'login');
    res.json({ ok: true, attempts_left: login === undefined ? null : Math.floor(login.remaining) });
  });

  app.get('/items/:id', (req: Request, res: Response) => {
    res.json({ id: req.params.id, name: `item ${req.params.id}`, slow_down: slowDown(res) });
  });

  app.get('/quota', (_req: Request, res: Response) => {
    // This request's view of every bucket it was charged on.
    const decision = res.locals.rateLimit;
    res.json({
      outcome: decision?.outcome ?? 'not_limited',
      policies: (decision?.results ?? []).map((r) => ({
        name: r.name, remaining: r.remaining, capacity: r.capacity, reset_after: r.resetAfter,
      })),
    });
  });

  app.post('/orders', async (req: Request, res: Response) => {
    const { item_id: itemId, quantity } = (req.body ?? {}) as { item_id?: unknown; quantity?: unknown };
    if (typeof itemId !== 'number' || typeof quantity !== 'number' || quantity <= 0) {
      // The app decides not to count a request it rejects itself.
      await res.locals.rateLimit?.refund();
      res.status(422).json({ error: 'item_id and a positive quantity are required' });
      return;
    }
    if (itemId === 13) {
      // Our own failure: answered 500 by the error handler, refunded by `refundOn`.
      throw new Error('inventory service unavailable');
    }
    res.status(201).json({ item_id: itemId, quantity });
  });

  app.get('/search', (req: Request, res: Response) => {
    res.json({ q: req.query.q ?? '', size: Number(req.query.size ?? 50), results: [], slow_down: slowDown(res) });
  });

  // An LLM proxy's stream (SSE): the check took a 'streams' slot (released when the
  // response ends, a client that goes away included, and at the policy's max_duration,
  // when the limiter ends the response); the handler checks its query, holds max_tokens on
  // 'tokens' before it streams (renewed while the stream runs), writes the events as the
  // client reads them, and settles the number of tokens it sent.
  app.get('/stream', async (req: Request, res: Response) => {
    const query = streamQuery(req.query as Record<string, unknown>);
    if ('bad' in query) {
      // answered before any hold or event (the limiter's check, which ran first, counts it)
      const body = badQueryBody(query.bad);
      res.status(400).set({ 'Content-Type': 'application/problem+json', 'Content-Length': String(Buffer.byteLength(body)) }).end(body);
      return;
    }
    const decision = res.locals.rateLimit;
    let hold: Hold | null = null;
    if (decision && decision.outcome !== 'store_error') {
      // a store error takes the failure mode (the API fails open): stream without a hold
      hold = await decision.hold('tokens', query.max_tokens, 60).catch(() => null);
      if (hold && sendHoldRefusal(res, hold)) return; // SPEC G2, G6: a 429 naming 'tokens'
    }
    // the client went away, or the limiter ended the request (SPEC N7): stop writing
    const gone = new AbortController();
    res.once('close', () => gone.abort());
    if (res.destroyed) gone.abort();
    let sent = 0;
    try {
      if (!gone.signal.aborted) {
        res.status(200).set({ 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
        res.flushHeaders();
        sent = await writeEvents(res, query.tokens, query.delay_ms, gone.signal);
      }
    } finally {
      // SPEC G3: the actual count, also when the client went away mid-stream
      if (hold) await hold.settle(sent).catch(() => undefined);
    }
  });

  app.get('/stats', (_req, res) => {
    res.json({ api: limiter.stats, login: strict.stats });
  });

  app.use((err: Error, _req: Request, res: Response, _next: NextFunction) => {
    res.status(500).json({ error: err.message });
  });

  return { app, limiter, strict, registry };
}
