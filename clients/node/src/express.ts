/**
 * Express middleware: `app.use(rateLimit(limiter, { policies }))`.
 *
 * `app.use` middleware runs before Express routes the request, so `req.route` is not set
 * yet: the middleware resolves the route the way the router will, walking the app's
 * router stack (`app.router` on Express 5, `app._router` on Express 4) with the request's
 * path and method, descending into mounted Routers and joining their mount paths with the
 * matched route's path: `'GET /users/:uid/items/:id'` (Express 4 keeps no mount template: its
 * parameters are put back by name). The first route that matches the
 * path and handles the method is the one Express runs. The same middleware may also be
 * put on a route (`app.get(path, mw, handler)`); a request is checked once.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { type RefundOn, excludeSet, headerLines, holdLeaseUntilDone, refundPredicate } from './adapter.js';
import type { Decision, DecisionView, Hold } from './decision.js';
import { PROBLEM_TYPE } from './headers.js';
import type { RateLimiter } from './limiter.js';
import type { Policy } from './policy.js';

export interface ExpressRateLimitOptions {
  policies: readonly Policy<Request>[];
  /** limit requests that match no route (only route-less policies apply); default false */
  limitUnmatched?: boolean;
  /** `'METHOD /template'` routes never limited, e.g. `['GET /healthz']` */
  exclude?: string | readonly string[];
  /** status codes (or a predicate) whose responses are refunded automatically, e.g. 5xx */
  refundOn?: RefundOn;
}

interface RouteLike {
  path?: unknown;
  _handlesMethod?: (method: string) => boolean;
  _handles_method?: (method: string) => boolean;
}

interface LayerLike {
  route?: RouteLike;
  handle?: { stack?: unknown };
  matchers?: Array<(path: string) => false | { path: string }>;
  rawPath?: unknown;
  slash?: boolean;
  // Express 4
  regexp?: RegExp & { fast_slash?: boolean; fast_star?: boolean };
  keys?: Array<{ name: string | number }>;
}

function pathText(p: unknown): string {
  return typeof p === 'string' ? p : String(p);
}

interface LayerMatch {
  /** the part of the path the layer matched */
  matched: string;
  /** which of the layer's paths matched (Express 5 path arrays) */
  index: number;
  /** Express 4: the matched part with its parameters put back as `:name` */
  template?: string;
}

/** The matched part of `path` for a layer; null: no match. Never writes to the layer. */
function matchLayer(layer: LayerLike, path: string): LayerMatch | null {
  if (Array.isArray(layer.matchers)) {
    // Express 5 (router 2.x): pure matchers
    if (layer.slash) return { matched: '', index: 0 };
    for (let i = 0; i < layer.matchers.length; i++) {
      const m = layer.matchers[i]!(path);
      if (m) return { matched: m.path, index: i };
    }
    return null;
  }
  const re = layer.regexp;
  if (re instanceof RegExp) {
    // Express 4: the layer's regexp, as Layer.prototype.match runs it
    if (re.fast_slash) return { matched: '', index: 0, template: '' };
    if (re.fast_star) return { matched: path, index: 0, template: '*' };
    re.lastIndex = 0;
    const m = re.exec(path);
    if (!m) return null;
    // Express 4 keeps no mount template: put each parameter's name back in place of the
    // segment that holds its value, left to right.
    const segments = m[0].split('/');
    let at = 1;
    const keys = layer.keys ?? [];
    for (let i = 1; i < m.length; i++) {
      const value = m[i];
      const key = keys[i - 1];
      if (value === undefined || key === undefined) continue;
      const found = segments.indexOf(value, at);
      if (found < 0) continue;
      segments[found] = `:${key.name}`;
      at = found + 1;
    }
    return { matched: m[0], index: 0, template: segments.join('/') };
  }
  return null;
}

function handles(route: RouteLike, method: string): boolean {
  if (typeof route._handlesMethod === 'function') return route._handlesMethod(method);
  if (typeof route._handles_method === 'function') return route._handles_method(method);
  return false;
}

function templateOf(raw: unknown, index: number, fallback: string): string {
  if (Array.isArray(raw)) return raw[index] === undefined ? fallback : pathText(raw[index]);
  if (raw === undefined || raw === null) return fallback;
  return pathText(raw);
}

function resolve(stack: readonly LayerLike[], path: string, method: string, prefix: string, depth: number): string | null {
  if (depth > 32) return null;
  for (const layer of stack) {
    const m = matchLayer(layer, path);
    if (m === null) continue;
    if (layer.route) {
      if (!handles(layer.route, method)) continue;
      return prefix + templateOf(layer.rawPath ?? layer.route.path, m.index, m.matched);
    }
    const sub = layer.handle?.stack;
    if (Array.isArray(sub)) {
      let mount = templateOf(layer.rawPath, m.index, m.template ?? m.matched);
      if (mount === '/') mount = '';
      let rest = path.slice(m.matched.length);
      if (!rest.startsWith('/')) rest = `/${rest}`;
      const inner = resolve(sub as LayerLike[], rest, method, prefix + mount.replace(/\/$/, ''), depth + 1);
      if (inner !== null) return inner;
    }
  }
  return null;
}

/** `'METHOD /template'` of the route Express will run for this request, or null. */
export function routeTemplate(req: Request): string | null {
  const app = req.app as unknown as { router?: { stack?: unknown }; _router?: { stack?: unknown } };
  let router: { stack?: unknown } | undefined;
  try {
    router = app.router ?? app._router; // Express 4 throws on app.router
  } catch {
    router = app._router;
  }
  const stack = router?.stack;
  // (Express 4: app._router exists once a route or middleware was added; the stack is read
  // as it is at each request, so routes added later are found too.)
  if (!Array.isArray(stack)) return null;
  const url = req.originalUrl ?? req.url;
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const template = resolve(stack as LayerLike[], path, req.method.toLowerCase(), '', 0);
  return template === null ? null : `${req.method.toUpperCase()} ${template}`;
}

const LISTS = new Set(['ratelimit-policy', 'ratelimit']);

/**
 * An earlier middleware instance's structured-field lists joined with this one's items
 * (two limiters on one route, e.g. the API's and a login's own: SPEC H1 lists every
 * enforced policy that checked the request).
 */
function joined(res: Response, headers: Array<[string, string]>): Array<[string, string]> {
  let out = headers;
  for (let i = 0; i < headers.length; i++) {
    const [k, v] = headers[i]!;
    if (!LISTS.has(k.toLowerCase())) continue;
    const before = res.getHeader(k);
    if (typeof before !== 'string' || before === '') continue;
    if (out === headers) out = headers.slice();
    out[i] = [k, `${before}, ${v}`];
  }
  return out;
}

function sendProblem(res: Response, status: number, payload: string, headers: Array<[string, string]>): void {
  res.statusCode = status;
  for (const [k, v] of headers) res.setHeader(k, v);
  res.setHeader('Content-Type', PROBLEM_TYPE);
  res.setHeader('Content-Length', Buffer.byteLength(payload));
  res.end(payload);
}

declare global {
  namespace Express {
    interface Locals {
      /** redis-tb's decision for this request */
      rateLimit?: DecisionView;
    }
  }
}

/** The Express middleware. The decision is `res.locals.rateLimit`. */
export function rateLimit(limiter: RateLimiter<Request>, options: ExpressRateLimitOptions): RequestHandler {
  // SPEC C1, C10, C11; U3: startup() reads the policies the limiter checks
  limiter.register(options.policies);
  const policies = [...options.policies];
  const limitUnmatched = options.limitUnmatched ?? false;
  const exclude = excludeSet(options.exclude);
  const refundOn = refundPredicate(options.refundOn);
  // This middleware instance checks a request once, however often it is on its path
  // (app-wide and on the route); another instance (other policies) checks it again.
  const CHECKED = Symbol('redis-tb.express.checked');

  return async function redisTbRateLimit(req: Request, res: Response, next: NextFunction): Promise<void> {
    const marked = req as unknown as Record<symbol, boolean>;
    if (marked[CHECKED]) {
      next();
      return;
    }
    marked[CHECKED] = true;
    const route = routeTemplate(req);
    if ((route === null && !limitUnmatched) || (route !== null && exclude.has(route))) {
      next();
      return;
    }
    let decision: Decision;
    try {
      decision = await limiter.check(
        { request: req, peer: req.socket.remoteAddress, header: (name) => headerLines(req.headers, name), route },
        policies,
      );
    } catch (err) {
      next(err);
      return;
    }
    res.locals.rateLimit = decision;
    const out = limiter.respond(decision);
    if (out.body !== null) {
      sendProblem(res, out.status, out.body, out.status === 429 ? joined(res, out.headers) : out.headers);
      return;
    }
    for (const [k, v] of joined(res, out.headers)) res.setHeader(k, v);
    // SPEC N4, N5: the lease lives until the response is finished
    holdLeaseUntilDone(res, decision);
    if (refundOn && decision.charged) {
      // Settle the automatic refund before the response completes: a client that has the
      // response sees the bucket refunded.
      const end = res.end as (...args: unknown[]) => Response;
      (res as unknown as { end: (...args: unknown[]) => Response }).end = function endAfterRefund(...args: unknown[]): Response {
        if (refundOn(res.statusCode) && !decision.refunded) {
          void decision.refund().finally(() => end.apply(res, args));
          return res;
        }
        return end.apply(res, args);
      };
    }
    next();
  };
}

/**
 * SPEC G2: answer a refused hold as its 429 (the policy's headers and P1's body); returns
 * false (and sends nothing) when the hold was taken.
 *
 *     const hold = await res.locals.rateLimit!.hold('tokens', maxTokens);
 *     if (sendHoldRefusal(res, hold)) return;
 */
export function sendHoldRefusal(res: Response, hold: Hold): boolean {
  const out = hold.response;
  if (out === null || out.body === null) return false;
  sendProblem(res, out.status, out.body, out.headers);
  return true;
}

export default rateLimit;
