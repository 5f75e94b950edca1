/** Shared bits of the framework adapters. */
import type { IncomingHttpHeaders } from 'node:http';
import { RouteSet } from './policy.js';

export type RefundOn = readonly number[] | ((status: number) => boolean);

export function refundPredicate(refundOn: RefundOn | undefined): ((status: number) => boolean) | null {
  if (refundOn === undefined) return null;
  if (typeof refundOn === 'function') return refundOn;
  const set = new Set(refundOn);
  return set.size ? (status) => set.has(status) : null;
}

/** SPEC L1, K5: routes never limited (`'METHOD /template'` or `'* /template'`). */
export function excludeSet(exclude: string | readonly string[] | undefined): RouteSet {
  return new RouteSet(exclude ?? []);
}

export function headerLines(headers: IncomingHttpHeaders, name: string): string[] {
  const v = headers[name];
  if (v === undefined) return [];
  return Array.isArray(v) ? v : [v];
}
