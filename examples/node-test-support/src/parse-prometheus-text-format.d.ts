// Build-time only: the untyped package's one function, returning the shape in prometheus.ts.
declare module 'parse-prometheus-text-format' {
  export default function parsePrometheusTextFormat(text: string): import('./prometheus.js').MetricFamily[];
}
