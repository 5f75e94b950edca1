/**
 * The RFC 9457 problem bodies (`application/problem+json`, SPEC P1-P6) and {@link respond}:
 * the status, headers and body every adapter sends for a decision (SPEC H, P, B4).
 */
import type { Decision, Response } from './decision.js';
import { type HeaderOptions, decisionHeaders, retryAfterSeconds } from './headers.js';

export type { Response } from './decision.js';

export const PROBLEM_TYPE = 'application/problem+json';

const BODY_MAX = 999_999_999_999;

/**
 * SPEC P5: the one number format of problem bodies and details: clamped to
 * 0..999999999999, rounded up to the millisecond (a product within 1e-9 relative of a
 * whole number of milliseconds is that number), written without exponent or trailing
 * zeros: `35.99`, `999999.5`, `0.001`, `36`.
 */
export function bodyNumber(x: number): string {
  const v = Number.isNaN(x) ? 0 : Math.min(Math.max(x, 0), BODY_MAX);
  const t = v * 1000;
  const near = Math.round(t);
  const m = Math.abs(t - near) <= 1e-9 * Math.max(1, t) ? near : Math.ceil(t);
  const whole = Math.floor(m / 1000);
  const frac = m - whole * 1000;
  if (frac === 0) return String(whole);
  return `${whole}.${String(frac).padStart(3, '0').replace(/0+$/, '')}`;
}

export interface ProblemBody {
  type: 'about:blank';
  title: string;
  status: number;
  detail: string;
  violated_policies?: string[];
  retry_after?: number | null;
}

/** SPEC P1, P2: the RFC 9457 body of a 429, naming the same policies and wait as the headers. */
export function problem(decision: Decision): ProblemBody {
  const violated = decision.violated;
  const wait = decision.retryAfter;
  const never = decision.results.filter((r) => !r.allowed && !r.shadow && r.retryAfter < 0);
  let detail: string;
  let retry: number | null;
  if (never.length || wait === null) {
    detail = never
      .map((r) => `this request costs ${bodyNumber(r.cost)} but policy '${r.name}' allows at most ${bodyNumber(r.capacity)} at once: it can never succeed`)
      .join('; ');
    retry = null;
  } else {
    detail = `rate limit exceeded for ${violated.map((n) => `'${n}'`).join(', ')}: retry after ${retryAfterSeconds(wait)} s`;
    // the P5 text is the JSON number's text (no exponent: at least 0.001, at most 999999999999)
    retry = Number(bodyNumber(wait));
  }
  return {
    type: 'about:blank',
    title: 'Too Many Requests',
    status: 429,
    detail,
    violated_policies: violated,
    retry_after: retry,
  };
}

/** SPEC P3: the RFC 9457 body of the 503 a fail-closed limiter answers when Redis fails. */
export function storeErrorProblem(): ProblemBody {
  return {
    type: 'about:blank',
    title: 'Service Unavailable',
    status: 503,
    detail: "the rate limiter's store is unavailable; retry shortly",
  };
}

/** SPEC P4: the 400 of a header identity with a control byte (I2). */
export function badRequestProblem(header: string): ProblemBody {
  return { type: 'about:blank', title: 'Bad Request', status: 400, detail: `header '${header}' holds a control byte` };
}

/** SPEC P4: the 500 of an out-of-range cost or limit from the application (L3); never the value. */
export function invalidInputProblem(policy: string): ProblemBody {
  return {
    type: 'about:blank',
    title: 'Internal Server Error',
    status: 500,
    detail: `rate limit policy '${policy}' got an invalid cost or limit from the application`,
  };
}

/**
 * SPEC P4, K6: the 500 of a call a Redis Cluster refused (CROSSSLOT): the policies of the
 * call, in policy order.
 */
export function crossSlotProblem(policies: readonly string[]): ProblemBody {
  return {
    type: 'about:blank',
    title: 'Internal Server Error',
    status: 500,
    detail: `rate limit policies ${policies.map((p) => `'${p}'`).join(', ')} have keys in different cluster slots: give the limiter a hash tag`,
  };
}

/**
 * The response for a decision (SPEC H, P, B4): 200 (go on, with the rate-limit headers),
 * 429, 503 (fail-closed), 500 (L3, K6), 400 (I2).
 */
export function respond(decision: Decision, opts: HeaderOptions = {}): Response {
  switch (decision.outcome) {
    case 'limited':
      return { status: 429, headers: decisionHeaders(decision, opts), body: JSON.stringify(problem(decision)) };
    case 'invalid_input':
      if (decision.crossSlot !== null) return { status: 500, headers: [], body: JSON.stringify(crossSlotProblem(decision.crossSlot)) };
      return { status: 500, headers: [], body: JSON.stringify(invalidInputProblem(decision.culprit ?? '')) };
    case 'bad_request':
      return { status: 400, headers: [], body: JSON.stringify(badRequestProblem(decision.culprit ?? '')) };
    case 'store_error':
      if (!decision.allowed) return { status: 503, headers: [['Retry-After', '1']], body: JSON.stringify(storeErrorProblem()) };
      return { status: 200, headers: [], body: null };
    default:
      return { status: 200, headers: decisionHeaders(decision, opts), body: null };
  }
}
