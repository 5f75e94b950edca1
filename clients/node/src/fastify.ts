/**
 * Fastify plugin (fastify-plugin: its hooks apply to the whole app):
 * `await app.register(fastifyRateLimit, { limiter })`. Thin: `onRequest` hands the limiter
 * the request's peer, header lines and route (`request.routeOptions.url`, the route's
 * template such as `/items/:id`, with `request.method`; null for a request that matched no
 * route, a 404) and sends the decision's response; the limiter owns its policies and
 * applies every scope rule (SPEC L1: routes, exclude, limitUnmatched). `onSend` settles
 * the automatic refund (the limiter's `refundOn`, F2) before the response goes out. The
 * decision is `request.rateLimit`.
 *
 * Registered more than once (the root and a child context, e.g. a stricter limiter on a
 * route group), the registrations compose: a request of the child's routes is checked by
 * each, in registration order (the root's hook first, then the child's, as Fastify runs
 * `onRequest` hooks), and refused if either refuses. A refusal ends the request there:
 * a later registration is not consulted and charges nothing, but an earlier one that
 * admitted the request has charged its buckets (two registrations are two TB calls, not
 * one all-or-nothing TB.MTAKE: put layers that must be all or nothing in one limiter's
 * `policies`). The `RateLimit-Policy` / `RateLimit` items of every registration that
 * checked the request are listed together; `request.rateLimit` is the decision of the
 * last one that checked it (the refusing one when refused); each registration's decision
 * is refunded by its own limiter's `refundOn`.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { headerLines, holdLeaseUntilDone, joinedLists } from './adapter.js';
import type { Decision, DecisionView, Hold } from './decision.js';
import type { RateLimiter } from './limiter.js';
import { PROBLEM_TYPE } from './problem.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** redis-tb's decision for this request (null: not checked) */
    rateLimit: DecisionView | null;
  }
}

export interface FastifyRateLimitOptions {
  limiter: RateLimiter<FastifyRequest>;
}

function sendProblem(reply: FastifyReply, status: number, payload: string, headers: Array<[string, string]>): FastifyReply {
  for (const [k, v] of headers) reply.header(k, v);
  return reply.code(status).type(PROBLEM_TYPE).send(Buffer.from(payload));
}

const plugin: FastifyPluginAsync<FastifyRateLimitOptions> = async (app, options) => {
  const { limiter } = options;
  // a second registration (a child context) shares the decorator the first one added
  if (!app.hasRequestDecorator('rateLimit')) app.decorateRequest('rateLimit', null);
  // this registration's own decision (request.rateLimit is the last registration's)
  const OWN = Symbol('redis-tb.fastify.decision');

  app.addHook('onRequest', async (request, reply) => {
    const url = request.routeOptions.url;
    const decision = await limiter.check({
      request,
      peer: request.raw.socket.remoteAddress,
      header: (name) => headerLines(request.headers, name),
      route: url === undefined ? null : `${request.method.toUpperCase()} ${url}`,
    });
    request.rateLimit = decision;
    (request as unknown as Record<symbol, Decision>)[OWN] = decision;
    const out = limiter.respond(decision);
    const before = (name: string): unknown => reply.getHeader(name);
    if (out.body !== null) return sendProblem(reply, out.status, out.body, out.status === 429 ? joinedLists(before, out.headers) : out.headers);
    for (const [k, v] of joinedLists(before, out.headers)) reply.header(k, v);
    // SPEC N4, N5: the lease lives until the raw response is finished (reply.send of a
    // stream included), the client goes away, or the error response of onError is sent
    holdLeaseUntilDone(reply.raw, decision);
    return undefined;
  });

  // SPEC F2: the automatic refund, before the response goes out
  if (limiter.autoRefunds) app.addHook('onSend', async (request, reply, payload) => {
    const refunding = (request as unknown as Record<symbol, Decision | undefined>)[OWN]?.autoRefund(reply.statusCode);
    if (refunding) await refunding;
    return payload;
  });
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
