/** Shared bits of the framework adapters. */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Decision } from './decision.js';
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

/**
 * SPEC N4, N5, N7, G5: while the response runs the lease is renewed every lease / 2 and the
 * holds the handler takes every ttl / 2 (unref'd timers); when the response is finished
 * ('finish': the body sent, a streamed body included, and the error responses of a
 * handler that threw; or 'close': the client went away mid-response, an aborted request),
 * whichever comes first, the lease is released exactly once and the holds stop renewing.
 * At the in-flight policy's max_duration (N7) the limiter releases the lease and this ends
 * the response: a streamed body stops and its connection is closed; a response not yet
 * started is never sent.
 */
export function holdLeaseUntilDone(res: ServerResponse, decision: Decision): void {
  if (!decision.tracksResponse) return;
  decision.keepAlive();
  const onTimeout = (): void => {
    res.destroy();
  };
  const done = (): void => {
    res.off('finish', done);
    res.off('close', done);
    if (decision.lease !== null) decision.signal.removeEventListener('abort', onTimeout);
    void decision.finish();
  };
  if (res.writableFinished || res.destroyed) {
    done();
    return;
  }
  res.once('finish', done);
  res.once('close', done);
  if (decision.lease !== null) decision.signal.addEventListener('abort', onTimeout, { once: true });
}
