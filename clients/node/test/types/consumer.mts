// Compiled (not run) by `npm run typecheck`: the shipped declarations as an ESM
// TypeScript consumer sees them.
import type { Request } from 'express';
import Fastify, { type FastifyRequest } from 'fastify';
import express from 'express';
import {
  type Decision, type MultiReply, type Reply, type Throttle, Limit, Policy, RateLimiter, RedisTbError,
  RedisTbStore, Scheduler, TbClient, perMinute, tiered,
} from 'redis-tb';
import { rateLimit } from 'redis-tb/express';
import { fastifyRateLimit } from 'redis-tb/fastify';
import { PrometheusMetrics } from 'redis-tb/prometheus';

declare const send: (args: string[]) => Promise<unknown>;
const tb = new TbClient(send, { server: 'h:1' });
export async function use(): Promise<void> {
  const r: Reply = await tb.take('k', 10, 1);
  const m: MultiReply = await tb.mtake([{ key: 'a', capacity: 1, rate: 1 }]);
  const t: Throttle = await tb.throttle('k', 1, 1, 1);
  const allowed: boolean = r.allowed && m.keys[0]!.allowed && t.allowed;
  void allowed;
  try { await tb.peek('k', 1, 1); } catch (err) { if (err instanceof RedisTbError) { const c: string = err.command; void c; } }
  const policies = [
    perMinute<Request>('ip', 10),
    new Policy<Request>({ name: 'u', limit: new Limit(1, 1), key: (req) => req.get('x-user') ?? null, shadow: true }),
    tiered<Request>('plan', { free: Limit.perMinute(1) }, (req) => req.get('x-plan'), { default: 'free' }),
  ];
  const limiter = new RateLimiter<Request>(tb, { policies, refundOn: [500], metrics: new PrometheusMetrics(), denyCache: { maxEntries: 10 } });
  const mw = rateLimit(limiter);
  void mw;
  void fastifyRateLimit;
  const fl = new RateLimiter<FastifyRequest>(tb, { policies: [perMinute<FastifyRequest>('ip', 1)], refundOn: (s) => s >= 500 });
  const app = Fastify();
  await app.register(fastifyRateLimit, { limiter: fl });
  app.get('/', async (request) => {
    const refunded: boolean | undefined = await request.rateLimit?.refund();
    return { refunded, shadow: request.rateLimit?.shadowLimited };
  });
  const e = express();
  e.use(mw);
  e.get('/', async (_req, res) => {
    const ok: boolean | undefined = await res.locals.rateLimit?.refund();
    res.json({ ok, outcome: res.locals.rateLimit?.outcome });
  });
  const d: Decision = await limiter.check({ request: {} as Request, peer: '::1', header: () => [], route: null });
  const names: string[] = d.shadowLimited.concat(d.violated);
  void names;
  new RedisTbStore({ sendCommand: send, mode: 'LOG' });
  await new Scheduler(tb, { capacity: 1, rate: 1, maxWait: 1 }).schedule('k', () => 1);
}
