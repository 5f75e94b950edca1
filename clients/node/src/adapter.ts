/**
 * What every HTTP adapter shares: a request's header lines for the core, the rate-limit
 * header lists of two limiters joined (SPEC H1), and the end of the response that ends
 * the request's lease and stops its holds' renewals (N4, N7, G5). No scope rule is here:
 * the limiter applies them (L1).
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Decision } from './decision.js';

/** The lines of a header (lower-case name) as the core reads them, in the order received (SPEC A3, I2). */
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

const LISTS = new Set(['ratelimit-policy', 'ratelimit']);

/**
 * SPEC H1: an earlier limiter's structured-field lists (already on the response, read with
 * `before`) joined with this one's items: two limiters on one route (the API's and a
 * login's own) list every enforced policy that checked the request, the outer one's first.
 */
export function joinedLists(before: (name: string) => unknown, headers: Array<[string, string]>): Array<[string, string]> {
  let out = headers;
  for (let i = 0; i < headers.length; i++) {
    const [k, v] = headers[i]!;
    if (!LISTS.has(k.toLowerCase())) continue;
    const earlier = before(k);
    if (typeof earlier !== 'string' || earlier === '') continue;
    if (out === headers) out = headers.slice();
    out[i] = [k, `${earlier}, ${v}`];
  }
  return out;
}
