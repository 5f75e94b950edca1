// Reading an example's answers: structured-field headers and the Prometheus scrape.
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { parseList, type Item } from 'structured-headers';
import { type Reply, request } from './processes.js';
import type { MetricFamily } from './prometheus.js';

export type { MetricFamily, Sample } from './prometheus.js';

/** A RateLimit / RateLimit-Policy header as [name, {params}] pairs, in order. */
export function sf(value: string | string[] | undefined): Array<[string, Record<string, unknown>]> {
  if (value === undefined) throw new Error('header missing');
  const text = Array.isArray(value) ? value.join(', ') : value;
  return parseList(text).map((member) => {
    const [bare, params] = member as Item;
    if (typeof bare !== 'string') throw new Error(`not a string item: ${String(bare)}`);
    return [bare, Object.fromEntries(params)];
  });
}

/** One policy's parameters from a RateLimit header. */
export function item(value: string | string[] | undefined, name: string): Record<string, unknown> {
  const found = sf(value).find(([n]) => n === name);
  if (!found) throw new Error(`no item ${name} in ${String(value)}`);
  return found[1];
}

export async function scrape(base: string): Promise<MetricFamily[]> {
  const r: Reply = await request(base, '/metrics');
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
  if (!String(r.headers['content-type']).startsWith('text/plain')) throw new Error(`content-type ${r.headers['content-type']}`);
  return parsePrometheusTextFormat(r.body);
}

/** The value of a counter sample with exactly these labels (0 when absent). */
export function counter(families: MetricFamily[], name: string, labels: Record<string, string>): number {
  const fam = families.find((f) => f.name === name);
  if (!fam) return 0;
  const want = JSON.stringify(Object.entries(labels).sort());
  const s = fam.metrics.find((m) => JSON.stringify(Object.entries(m.labels ?? {}).sort()) === want);
  return s?.value === undefined ? 0 : Number(s.value);
}
