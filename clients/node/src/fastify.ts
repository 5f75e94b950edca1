/**
 * Fastify plugin (fastify-plugin: its hooks apply to the whole app):
 * `await app.register(fastifyRateLimit, { limiter, policies })`.
 *
 * `onRequest` checks the request against `request.routeOptions.url` (the route's
 * template, e.g. `/items/:id`) and `request.method`; requests matching no route
 * (404) are not limited unless `limitUnmatched`. `onSend` settles the automatic
 * refund (`refundOn`) before the response goes out. The decision is `request.rateLimit`.
 *
 * Registered more than once (the root and a child context, e.g. a stricter limiter on a
 * route group), the registrations compose: a request of the child's routes is checked by
 * each, in registration order (the root's hook first, then the child's, as Fastify runs
 * `onRequest` hooks), and refused if either refuses. A refusal ends the request there:
 * a later registration is not consulted and charges nothing, but an earlier one that
 * admitted the request has charged its buckets (two registrations are two TB calls, not
 * one all-or-nothing TB.MTAKE: put layers that must be all or nothing in one
 * registration's `policies`). The `RateLimit-Policy` / `RateLimit` items of every
 * registration that checked the request are listed together; `request.rateLimit` is the
 * decision of the last one that checked it (the refusing one when refused); each
 * registration's `refundOn` refunds its own decision.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { type RefundOn, excludeSet, headerLines, holdLeaseUntilDone, refundPredicate } from './adapter.js';
import type { Decision, DecisionView, Hold } from './decision.js';
import { PROBLEM_TYPE } from './headers.js';
import type { RateLimiter } from './limiter.js';
import type { Policy } from './policy.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** redis-tb's decision for this request (null: not checked) */
    rateLimit: DecisionView | null;
  }
}

export interface FastifyRateLimitOptions {
  limiter: RateLimiter<FastifyRequest>;
  policies: readonly Policy<FastifyRequest>[];
  limitUnmatched?: boolean;
  exclude?: string | readonly string[];
  refundOn?: RefundOn;
}

function sendProblem(reply: FastifyReply, status: number, payload: string, headers: Array<[string, string]>): FastifyReply {
  for (const [k, v] of headers) reply.header(k, v);
  return reply.code(status).type(PROBLEM_TYPE).send(Buffer.from(payload));
}

const LISTS = new Set(['ratelimit-policy', 'ratelimit']);

/** An earlier registration's structured-field lists joined with this one's items. */
function joined(reply: FastifyReply, headers: Array<[string, string]>): Array<[string, string]> {
  let out = headers;
  for (let i = 0; i < headers.length; i++) {
    const [k, v] = headers[i]!;
    if (!LISTS.has(k.toLowerCase())) continue;
    const before = reply.getHeader(k);
    if (typeof before !== 'string' || before === '') continue;
    if (out === headers) out = headers.slice();
    out[i] = [k, `${before}, ${v}`];
  }
  return out;
}

const plugin: FastifyPluginAsync<FastifyRateLimitOptions> = async (app, options) => {
  const { limiter } = options;
  // SPEC C1, C10, C11; U3: startup() reads the policies the limiter checks
  limiter.register(options.policies);
  const policies = [...options.policies];
  const limitUnmatched = options.limitUnmatched ?? false;
  const exclude = excludeSet(options.exclude);
  const refundOn = refundPredicate(options.refundOn);

  // a second registration (a child context) shares the decorator the first one added
  if (!app.hasRequestDecorator('rateLimit')) app.decorateRequest('rateLimit', null);
  // this registration's own decision (request.rateLimit is the last registration's)
  const OWN = Symbol('redis-tb.fastify.decision');

  app.addHook('onRequest', async (request, reply) => {
    const url = request.routeOptions.url;
    const route = url === undefined ? null : `${request.method.toUpperCase()} ${url}`;
    if ((route === null && !limitUnmatched) || (route !== null && exclude.has(route))) return;
    const decision = await limiter.check(
      {
        request,
        peer: request.raw.socket.remoteAddress,
        header: (name) => headerLines(request.headers, name),
        route,
      },
      policies,
    );
    request.rateLimit = decision;
    (request as unknown as Record<symbol, Decision>)[OWN] = decision;
    const out = limiter.respond(decision);
    if (out.body !== null) return sendProblem(reply, out.status, out.body, out.status === 429 ? joined(reply, out.headers) : out.headers);
    for (const [k, v] of joined(reply, out.headers)) reply.header(k, v);
    // SPEC N4, N5: the lease lives until the raw response is finished (reply.send of a
    // stream included), the client goes away, or the error response of onError is sent
    holdLeaseUntilDone(reply.raw, decision);
    return undefined;
  });

  if (refundOn) {
    app.addHook('onSend', async (request, reply, payload) => {
      const d = (request as unknown as Record<symbol, Decision | undefined>)[OWN];
      if (d && d.charged && !d.refunded && refundOn(reply.statusCode)) await d.refund();
      return payload;
    });
  }
};

/**
 * SPEC G2: answer a refused hold as its 429 (the policy's headers and P1's body); null when
 * the hold was taken.
 *
 *     const hold = await request.rateLimit!.hold('tokens', maxTokens);
 *     if (!hold.allowed) return sendHoldRefusal(reply, hold);
 */
export function sendHoldRefusal(reply: FastifyReply, hold: Hold): FastifyReply | null {
  const out = hold.response;
  if (out === null || out.body === null) return null;
  return sendProblem(reply, out.status, out.body, out.headers);
}

/** The Fastify plugin. */
export const fastifyRateLimit = fp(plugin, { fastify: '>=4', name: 'redis-tb' });
export default fastifyRateLimit;
