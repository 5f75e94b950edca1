/**
 * The `/stream` route's parts (examples/manifest.json's GET /stream): its query, checked
 * against its bounds (a 400 with the manifest's problem body otherwise), and the events
 * written as the client reads them: `res.write` returning false waits for 'drain' (or the
 * client going away), so a client that stops reading stops the writer instead of piling
 * the whole stream up in the process's memory, and the event loop is never held by it.
 */
import type { ServerResponse } from 'node:http';

/** The manifest's stream.bounds: each a whole number in [min, max]. */
export const BOUNDS = {
  tokens: [0, 10_000],
  delay_ms: [0, 10_000],
  max_tokens: [1, 10_000],
} as const;
const DEFAULTS = { tokens: 3, delay_ms: 0, max_tokens: 100 } as const;

export type StreamQuery = Record<keyof typeof BOUNDS, number>;

/** The manifest's bad_query body for a parameter. */
export function badQueryBody(name: keyof typeof BOUNDS): string {
  const [min, max] = BOUNDS[name];
  return JSON.stringify({
    type: 'about:blank', title: 'Bad Request', status: 400,
    detail: `query parameter '${name}' must be a whole number from ${min} to ${max}`,
  });
}

/**
 * The stream's query, or the first parameter (in the manifest's order) that is not a
 * whole number (digits only) within its bounds; absent parameters take their defaults.
 */
export function streamQuery(query: Record<string, unknown>): StreamQuery | { bad: keyof typeof BOUNDS } {
  const out = { ...DEFAULTS } as StreamQuery;
  for (const name of Object.keys(BOUNDS) as (keyof typeof BOUNDS)[]) {
    const raw = query[name];
    if (raw === undefined) continue;
    const [min, max] = BOUNDS[name];
    const n = typeof raw === 'string' && /^[0-9]{1,6}$/.test(raw) ? Number(raw) : NaN;
    if (!(n >= min && n <= max)) return { bad: name };
    out[name] = n;
  }
  return out;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** Resolves when `res` can take more ('drain'), or when `signal` aborts (the client went away). */
export function drained(res: ServerResponse, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    res.once('drain', done);
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Writes `tokens` events `data: token-<i>`, `delayMs` apart, then `data: [DONE]`, as the
 * client reads them; stops as soon as `gone` aborts (the client left, or the limiter ended
 * the request at its max_duration). Returns the number of token events written.
 */
export async function writeEvents(res: ServerResponse, tokens: number, delayMs: number, gone: AbortSignal): Promise<number> {
  let sent = 0;
  for (let i = 1; i <= tokens && !gone.aborted; i++) {
    if (delayMs) await pause(delayMs, gone);
    if (gone.aborted) break;
    const more = res.write(`data: token-${i}\n\n`);
    sent += 1;
    if (!more) await drained(res, gone);
  }
  if (!gone.aborted) res.end('data: [DONE]\n\n');
  return sent;
}
