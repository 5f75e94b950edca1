// Shared pieces of the HTTP tests: servers on 127.0.0.1:0 and header parsing with the
// structured-field parser.
import { once } from 'node:events';
import parsePrometheus from 'parse-prometheus-text-format';
import { parseList } from 'structured-headers';

export async function listenExpress(app, host = '127.0.0.1') {
  const server = app.listen(0, host);
  await once(server, 'listening');
  const { port } = server.address();
  const h = host.includes(':') ? `[${host}]` : host;
  return { url: `http://${h}:${port}`, close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }) };
}

export async function listenFastify(app) {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address();
  return { url: `http://127.0.0.1:${port}`, close: () => app.close() };
}

/** `RateLimit-Policy` / `RateLimit` parsed: { name: { q, w } } in order. */
export function sfItems(value) {
  if (value === undefined) return undefined;
  return parseList(value).map(([name, params]) => [name, Object.fromEntries(params)]);
}

/**
 * Prometheus text -> { 'name{l=v,...}': value } for counters; for a histogram (this parser
 * drops a histogram's labels: use one limiter per registry) `name_count` from its +Inf
 * bucket and `name_buckets`, its bucket bounds.
 */
export function scrape(text) {
  const out = {};
  for (const fam of parsePrometheus(text)) {
    for (const m of fam.metrics) {
      const labels = Object.entries(m.labels ?? {}).map(([k, v]) => `${k}=${v}`).join(',');
      if (fam.type === 'HISTOGRAM') {
        out[`${fam.name}_count`] = Number(m.count ?? m.buckets['+Inf']);
        out[`${fam.name}_buckets`] = Object.keys(m.buckets);
      } else out[`${fam.name}{${labels}}`] = Number(m.value);
    }
  }
  return out;
}
