/**
 * The `/stream` route's parts (examples/manifest.json's GET /stream): its query, checked
 * against its bounds (a 400 with the manifest's problem body otherwise), and a delay that
 * ends at once when the client goes away. (The events themselves are a generator that
 * Fastify pipes into the response: pipe() waits for 'drain'.)
 */

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
