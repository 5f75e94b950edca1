// parse-prometheus-text-format ships no types: the prom2json shape it returns.
export interface Sample {
  labels?: Record<string, string>;
  value?: string;
  buckets?: Record<string, string>;
  quantiles?: Record<string, string>;
  count?: string;
  sum?: string;
}

export interface MetricFamily {
  name: string;
  help: string;
  type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
  metrics: Sample[];
}
