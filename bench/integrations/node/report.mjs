// Writes the markdown report of one bench.mjs run (also usable on a saved last-run.json).
import fs from 'node:fs';

const NAMES = {
  none: '(1) no limiter',
  erl: '(2) express-rate-limit + rate-limit-redis',
  tb: "(3) redis-tb's Express middleware",
  ping: '(4) floor: one bare Redis PING per request (node-redis)',
  rawping: '(5) floor: one pre-encoded PING per request on a raw socket',
  tb3: "(6) redis-tb's Express middleware, three policies",
  tbs: '(7) (3) on the script backend (Functions, a redis-server without the module)',
  tbs3: '(8) (6) on the script backend (Functions, a redis-server without the module)',
  tbse: '(9) (3) on the script backend (EVALSHA, a redis-server without the module)',
  tbse3: '(10) (6) on the script backend (EVALSHA, a redis-server without the module)',
};
/** The variants' names; with a baseline (bench.mjs --baseline), (3) and (6) at that revision too. */
const namesOf = (run) => (run.baseline
  ? { ...NAMES, 'tb@base': `(3b) (3) with redis-tb at ${run.baseline.short}`, 'tb3@base': `(6b) (6) with redis-tb at ${run.baseline.short}` }
  : NAMES);

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const f0 = (x) => (Number.isFinite(x) ? x.toFixed(0) : '–');
const f2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : '–');
const signed = (x) => (Number.isFinite(x) ? `${x >= 0 ? '+' : ''}${x.toFixed(0)}` : '–');

/** Per-round ratio of a's and b's throughput, then the median and range over rounds. */
export function ratio(results, a, b) {
  if (!results[a] || !results[b]) return null;
  const rs = results[a].map((m, i) => m.tput.rps / results[b][i].tput.rps);
  return { median: median(rs), min: Math.min(...rs), max: Math.max(...rs), rounds: rs };
}

/** Per-round ratio of b's and a's app CPU time per request (a is cheaper when > 1), median and range. */
export function cpuRatio(results, a, b) {
  if (!results[a] || !results[b]) return null;
  const rs = results[a].map((m, i) => results[b][i].appCpuUs / m.appCpuUs);
  return { median: median(rs), min: Math.min(...rs), max: Math.max(...rs), rounds: rs };
}

export function summary(results) {
  const s = {};
  for (const [v, ms] of Object.entries(results)) {
    s[v] = {
      rps: median(ms.map((m) => m.tput.rps)),
      p50: median(ms.map((m) => m.tput.p50_us)),
      p99: median(ms.map((m) => m.tput.p99_us)),
      l50: median(ms.map((m) => m.latency.p50_us)),
      l99: median(ms.map((m) => m.latency.p99_us)),
      cpu: median(ms.map((m) => m.appCpuUs)),
      rcpu: median(ms.map((m) => m.redisCpuUs)),
      non200: ms.reduce((n, m) => n + Object.entries(m.tput.statuses).filter(([k]) => k !== '200').reduce((a, [, c]) => a + c, 0), 0),
      requests: ms.reduce((n, m) => n + m.tput.requests + m.latency.requests, 0),
      completed: ms.reduce((n, m) => n + (m.completed ?? 0), 0),
      calls: ms.reduce((acc, m) => { for (const [k, c] of Object.entries(m.calls)) acc[k] = (acc[k] ?? 0) + c; return acc; }, {}),
    };
  }
  return s;
}

/** Per-round difference of a's and b's app CPU time per request (µs), median and range. */
function cpuDiff(results, a, b) {
  const ds = results[a].map((m, i) => m.appCpuUs - results[b][i].appCpuUs);
  return { median: median(ds), min: Math.min(...ds), max: Math.max(...ds) };
}

/** Per-round ratio `f(a's round) / f(b's round)`, then the median and range over rounds. */
function perRound(results, a, b, f) {
  const rs = results[a].map((m, i) => f(m) / f(results[b][i]));
  return { median: median(rs), min: Math.min(...rs), max: Math.max(...rs), rounds: rs };
}

/** The script backend's variants measured beside the module's: [module, scripts, label]. */
const backendPairs = (run) => [['tb', 'tbs', 'one policy, Functions'], ['tb3', 'tbs3', 'three policies, Functions'], ['tb', 'tbse', 'one policy, EVALSHA'], ['tb3', 'tbse3', 'three policies, EVALSHA']]
  .filter(([a, b]) => run.results[a] && run.results[b]);

/** "The two backends end to end": each backend's variants against the raw round trip and against each other. */
function twoBackends(run, NAMES) {
  const { results } = run;
  const pairs = backendPairs(run);
  if (!pairs.length) return [];
  const s = summary(results);
  const range = (r) => `${f2(r.median)}x (${f2(r.min)}-${f2(r.max)})`;
  const rps = (m) => m.tput.rps, cpu = (m) => m.appCpuUs, rcpu = (m) => m.redisCpuUs;
  const raw = results.rawping ? 'rawping' : null;
  const L = [];
  L.push('## The two backends end to end');
  L.push('');
  L.push(`The same app and middleware with the limiter on the module ((3), (6): \`TB.TAKE\` / \`TB.MTAKE\` on the redis-server with the module) and on the script backend (SPEC E, \`clients/lua\`: \`backend: 'scripts'\` on a second redis-server started without the module, pinned to the same CPU as the first): Functions ((7), (8): \`FCALL\`), and EVALSHA ((9), (10): the same client through an ACL user refused \`FUNCTION LOAD\`, so the backend's load falls back to \`SCRIPT LOAD\`; the client package is unchanged). Each app's backend line (SPEC E6) was checked: ${Object.entries(run.backendLines ?? {}).map(([v, l]) => `${v} \`${l.replace(/ on \S+ /, ' ')}\``).join('; ')}. Medians over ${run.rounds} rounds of the per-round ratios (the variants measured back to back in each round, the order alternating), the rounds' range in parentheses. req/s: the variant's over the other's (above 1: faster); CPU: the variant's CPU per request over the other's (above 1: costs more; app: the Node process; server: the redis-server the variant talks to, its whole process${raw ? ", against (5)'s, whose PINGs go to the module's server" : ''}).`);
  L.push('');
  if (raw) {
    L.push('Each against the raw round trip, (5) a pre-encoded PING on a raw socket:');
    L.push('');
    L.push('| variant | req/s | / (5) req/s | app CPU per request (µs) | / (5) app CPU | server CPU per request (µs) | / (5) server CPU |');
    L.push('|---|---:|---:|---:|---:|---:|---:|');
    const seen = new Set();
    for (const v of pairs.flatMap(([a, b]) => [a, b])) {
      if (seen.has(v)) continue;
      seen.add(v);
      L.push(`| ${NAMES[v]} | ${f0(s[v].rps)} | ${range(perRound(results, v, raw, rps))} | ${f0(s[v].cpu)} | ${range(perRound(results, v, raw, cpu))} | ${f0(s[v].rcpu)} | ${range(perRound(results, v, raw, rcpu))} |`);
    }
    L.push(`| ${NAMES[raw]} | ${f0(s[raw].rps)} | | ${f0(s[raw].cpu)} | | ${f0(s[raw].rcpu)} | |`);
    L.push('');
    L.push("(5)'s server CPU per request is that of one connection per request in flight, each PING read and answered on its own; node-redis (every other variant) writes the commands of one tick together on one connection, which the server reads and answers together: a server CPU ratio under 1 against (5) is that, not a command cheaper than PING.");
    L.push('');
  }
  L.push('Scripts / module, the same policies:');
  L.push('');
  L.push('| policies, scripts via | req/s module | req/s scripts | scripts / module, req/s | scripts / module, app CPU | scripts − module, app CPU (µs) | server CPU module (µs) | server CPU scripts (µs) | scripts / module, server CPU | 1 conn p50 module (µs) | scripts (µs) |');
  L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const [a, b, label] of pairs) {
    const d = cpuDiff(results, b, a);
    L.push(`| ${label}: ${NAMES[b].split(' ')[0]} / ${NAMES[a].split(' ')[0]} | ${f0(s[a].rps)} | ${f0(s[b].rps)} | ${range(perRound(results, b, a, rps))} | ${range(perRound(results, b, a, cpu))} | ${signed(d.median)} (${signed(d.min)} to ${signed(d.max)}) | ${f0(s[a].rcpu)} | ${f0(s[b].rcpu)} | ${range(perRound(results, b, a, rcpu))} | ${f0(s[a].l50)} | ${f0(s[b].l50)} |`);
  }
  L.push('');
  L.push('The script backend\'s extra work is on the server (its CPU column); the app sends one command either way (`FCALL` or `EVALSHA` for `TB.TAKE` / `TB.MTAKE`). Where requests per second fall by more than the app CPU per request rises, the app\'s core was not the only limit: the servers share CPU 1 with the load generator, and other work on the machine takes time from both cores. Single rounds move by more than some of these differences: the ranges say how much.');
  L.push('');
  return L;
}

/** The redis-tb variants measured both at the baseline and now: [now, base, label]. */
const baselinePairs = (run) => (run.baseline
  ? [['tb', 'tb@base', 'one policy'], ['tb3', 'tb3@base', 'three policies']].filter(([a, b]) => run.results[a] && run.results[b])
  : []);

/** The before / after section: redis-tb at the baseline and now, against each other and against both floors. */
function beforeAfter(run, NAMES) {
  const { results, baseline } = run;
  const pairs = baselinePairs(run);
  if (!pairs.length) return [];
  const s = summary(results);
  const L = [];
  const range = (r) => `${f2(r.median)}x (rounds ${f2(r.min)}-${f2(r.max)})`;
  L.push(`## Before / after: redis-tb at ${baseline.short} and now`);
  L.push('');
  L.push(`(3b) and (6b) are (3) and (6), the same app and the same \`tb-variant.mjs\`, with \`redis-tb\` imported from \`clients/node\` as it was at ${baseline.short} (${baseline.date.slice(0, 10)}, "${baseline.subject.length > 100 ? `${baseline.subject.slice(0, 100)}…` : baseline.subject}"): extracted with \`git archive\`, installed with \`npm ci\` and built with its own \`npm run build\` in a scratch directory, loaded in the same rounds as every other variant (each next to its counterpart, the order alternating), on the same node-redis client, against the same redis-server and the same floors. Each redis-tb app printed the file it imported \`redis-tb\` from (checked by bench.mjs: ${Object.entries(run.tbEntries ?? {}).map(([v, f]) => `${v} \`${f}\``).join(', ')}); ${baseline.code === run.packages?.current?.code ? `**the built JavaScript of the two is the same** (sha256 ${baseline.code})` : `the built JavaScript of the two differs (sha256 of \`dist/esm/**/*.js\` ${baseline.code} at ${baseline.short}, ${run.packages?.current?.code ?? '–'} now)`}.`);
  L.push('');
  L.push('Now against before, medians of the per-round ratios (the two measured back to back in each round); app CPU per request is the steadier measure on a shared machine:');
  L.push('');
  L.push(`| policies | req/s at ${baseline.short} | req/s now | now / before, req/s | app CPU per request at ${baseline.short} (µs) | now (µs) | before / now, app CPU (above 1: now is cheaper) | now − before, app CPU (µs) | 1 conn p50 at ${baseline.short} (µs) | now (µs) |`);
  L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const [now, base, label] of pairs) {
    const d = cpuDiff(results, now, base);
    L.push(`| ${label}: ${NAMES[base].split(' ')[0]} → ${NAMES[now].split(' ')[0]} | ${f0(s[base].rps)} | ${f0(s[now].rps)} | ${range(ratio(results, now, base))} | ${f0(s[base].cpu)} | ${f0(s[now].cpu)} | ${range(cpuRatio(results, now, base))} | ${signed(d.median)} (rounds ${signed(d.min)} to ${signed(d.max)}) | ${f0(s[base].l50)} | ${f0(s[now].l50)} |`);
  }
  L.push('');
  const floors = [['ping', "(4) node-redis's PING"], ['rawping', '(5) raw-socket PING']].filter(([f]) => results[f]);
  if (floors.length) {
    L.push(`Each against both floors (medians of per-round ratios; req/s: the variant's over the floor's, above 1 faster than the floor; CPU: the floor's app CPU per request over the variant's, 1 would be the floor's cost). Against the same floor in the same round, now / before is the row above.`);
    L.push('');
    L.push('| policies | ' + floors.map(([, n]) => `/ ${n}, req/s at ${baseline.short} | now | ${n} CPU / its CPU at ${baseline.short} | now`).join(' | ') + ' |');
    L.push('|---|' + floors.map(() => '---:|---:|---:|---:').join('|') + '|');
    for (const [now, base, label] of pairs) {
      L.push(`| ${label} | ` + floors.map(([f]) => [ratio(results, base, f), ratio(results, now, f), cpuRatio(results, base, f), cpuRatio(results, now, f)].map((r) => `${f2(r.median)}x`).join(' | ')).join(' | ') + ' |');
    }
    L.push('');
  }
  return L;
}

export function writeReport(run) {
  const { out, results, variants } = run;
  const NAMES = namesOf(run);
  const s = summary(results);
  const base = s.none;
  const tbErl = ratio(results, 'tb', 'erl');
  const tbPing = ratio(results, 'tb', 'ping');
  const tbRaw = ratio(results, 'tb', 'rawping');
  const L = [];
  L.push('# Node integration: the rate limiter\'s cost per request in an Express app');
  L.push('');
  L.push(`Written by \`bench/integrations/node/bench.mjs\` on ${run.started.toISOString().slice(0, 16).replace('T', ' ')} UTC. Command (from the repository root, after \`cd bench/integrations/node && npm ci\`):`);
  L.push('');
  L.push('```');
  L.push(run.command);
  L.push('```');
  L.push('');
  const verdict = (r, target) => (r ? `${f2(r.median)}x (rounds ${f2(r.min)}-${f2(r.max)}; target >= ${target}: ${r.median >= target ? 'PASS' : 'FAIL'})` : 'not measured');
  L.push(`**(3)/(2), redis-tb against express-rate-limit + rate-limit-redis: ${verdict(tbErl, 1.0)}.**`);
  L.push('');
  L.push(`**(3)/(4), redis-tb against one bare PING per request: ${verdict(tbPing, 0.85)}.**`);
  L.push('');
  if (baselinePairs(run).length) {
    L.push(`**Before / after, app CPU per request at ${run.baseline.short} over now (above 1: now is cheaper): ${baselinePairs(run).map(([now, base, label]) => { const r = cpuRatio(results, now, base); return `${label} ${f2(r.median)}x (rounds ${f2(r.min)}-${f2(r.max)})`; }).join(', ')}; requests per second now over at ${run.baseline.short}: ${baselinePairs(run).map(([now, base, label]) => `${label} ${f2(ratio(results, now, base).median)}x`).join(', ')} (section "Before / after" below).**`);
    L.push('');
  }
  // every redis-tb variant against each floor, by req/s and by app CPU per request
  const floors = [['ping', '(4)'], ['rawping', '(5)']].filter(([f]) => results[f]);
  const tbs = [['tb', '(3) one policy'], ['tb@base', `(3b) one policy at ${run.baseline?.short}`], ['tb3', '(6) three policies'], ['tb3@base', `(6b) three policies at ${run.baseline?.short}`],
    ['tbs', '(7) one policy, scripts (Functions)'], ['tbs3', '(8) three policies, scripts (Functions)'], ['tbse', '(9) one policy, scripts (EVALSHA)'], ['tbse3', '(10) three policies, scripts (EVALSHA)']].filter(([v]) => results[v]);
  if (floors.length && tbs.length) {
    L.push('| redis-tb against each floor (median over rounds) | ' + floors.map(([f, n]) => `/ ${n} req/s | ${n} CPU / its CPU`).join(' | ') + ' |');
    L.push('|---|' + floors.map(() => '---:|---:').join('|') + '|');
    for (const [v, n] of tbs) {
      L.push(`| ${n} | ` + floors.map(([f]) => `${f2(ratio(results, v, f).median)}x | ${f2(cpuRatio(results, v, f).median)}x`).join(' | ') + ' |');
    }
    if (results.ping && results.rawping) {
      L.push(`| (4) itself: node-redis's PING against the raw one | ${f2(ratio(results, 'ping', 'rawping').median)}x | ${f2(cpuRatio(results, 'ping', 'rawping').median)}x | | |`);
    }
    L.push('');
  }
  if (tbErl && tbPing) {
    const cE = cpuRatio(results, 'tb', 'erl'), cP = cpuRatio(results, 'tb', 'ping');
    L.push(`The same comparisons by the app's CPU time per request (the steadier measure on a shared machine; a ratio above 1 means (3) is cheaper): (2)/(3) ${f2(cE.median)}x (target >= 1: ${cE.median >= 1 ? 'PASS' : 'FAIL'}), (4)/(3) ${f2(cP.median)}x (target >= 0.85: ${cP.median >= 0.85 ? 'PASS' : 'FAIL'}). Per-round ratios of requests per second spread from ${f2(Math.min(tbErl.min, tbPing.min))} to ${f2(Math.max(tbErl.max, tbPing.max))} in this run: other work on the same two cores moves single rounds by more than the differences measured, so read the medians.`);
    L.push('');
  }
  L.push(`Throughput with ${run.connections} keep-alive connections (medians over ${run.rounds} rounds); "added" is against (1), the same app without a limiter. "Server time added" is 1/rps − 1/rps(1): what the variant costs the app's one core per request. Latency at one connection is the time one request takes when nothing queues.`);
  L.push('');
  L.push(`| variant | req/s | vs (1) | server time added per request (µs) | p50 (µs) | p99 (µs) | added p50 | added p99 | 1 conn p50 (µs) | 1 conn p99 (µs) | added p50 | added p99 |`);
  L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const v of variants) {
    const x = s[v];
    const isBase = v === 'none';
    L.push(`| ${NAMES[v]} | ${f0(x.rps)} | ${f2(x.rps / base.rps)}x | ${isBase ? '' : f0(1e6 / x.rps - 1e6 / base.rps)} | ${f0(x.p50)} | ${f0(x.p99)} | ${isBase ? '' : signed(x.p50 - base.p50)} | ${isBase ? '' : signed(x.p99 - base.p99)} | ${f0(x.l50)} | ${f0(x.l99)} | ${isBase ? '' : signed(x.l50 - base.l50)} | ${isBase ? '' : signed(x.l99 - base.l99)} |`);
  }
  L.push('');
  const cErl = cpuRatio(results, 'tb', 'erl');
  const cPing = cpuRatio(results, 'tb', 'ping');
  L.push(`CPU time of the app process per request (user + system from /proc over each throughput run; medians over rounds). Other work on the machine moves this much less than it moves requests per second, so it is the steadier view of what each variant costs the app; redis-server's CPU per request beside it.`);
  L.push('');
  L.push('| variant | app CPU per request (µs) | added vs (1) (µs) | redis-server CPU per request (µs) |');
  L.push('|---|---:|---:|---:|');
  for (const v of variants) {
    const x = s[v];
    L.push(`| ${NAMES[v]} | ${f0(x.cpu)} | ${v === 'none' ? '' : signed(x.cpu - base.cpu)} | ${f0(x.rcpu)} |`);
  }
  L.push('');
  if (cErl) L.push(`App CPU per request, (2)/(3): ${f2(cErl.median)}x (rounds ${f2(cErl.min)}-${f2(cErl.max)}): above 1, redis-tb costs the app less CPU than express-rate-limit + rate-limit-redis.`);
  if (cPing) L.push(`App CPU per request, (4)/(3): ${f2(cPing.median)}x (rounds ${f2(cPing.min)}-${f2(cPing.max)}): 1 would be the bare PING's cost.`);
  L.push('');
  L.push('Requests per second in each round (the order of the variants alternates from round to round):');
  L.push('');
  L.push(`| round | ${variants.map((v) => NAMES[v].split(' ')[0]).join(' | ')} |${tbErl ? ' (3)/(2) |' : ''}${tbPing ? ' (3)/(4) |' : ''}${tbRaw ? ' (3)/(5) |' : ''}`);
  L.push(`|---:|${variants.map(() => '---:').join('|')}|${tbErl ? '---:|' : ''}${tbPing ? '---:|' : ''}${tbRaw ? '---:|' : ''}`);
  for (let r = 0; r < run.rounds; r++) {
    L.push(`| ${r + 1} | ${variants.map((v) => f0(results[v][r].tput.rps)).join(' | ')} |${tbErl ? ` ${f2(tbErl.rounds[r])} |` : ''}${tbPing ? ` ${f2(tbPing.rounds[r])} |` : ''}${tbRaw ? ` ${f2(tbRaw.rounds[r])} |` : ''}`);
  }
  L.push('');
  L.push(...beforeAfter(run, NAMES));
  L.push(...twoBackends(run, NAMES));
  if (run.micro) {
    L.push("## Where redis-tb's time goes");
    L.push('');
    L.push("`bench/integrations/node/micro.mjs`, run right after the rounds on the app's CPU: each part of the middleware's request path timed in-process (best of 7 repetitions), with a fake client answering TB.TAKE / TB.MTAKE with a real server's replies, then whole round trips on node-redis measured as this process's CPU time per call. The indented rows do the same work the way clients/node did it before its fast paths (checked to give the same identity and the same header bytes), to show what each fast path saves; `node bench/integrations/node/profile.mjs tb` gives the `--cpu-prof` view of the running server.");
    L.push('');
    L.push(run.micro);
    L.push('');
  }
  if (run.micro) {
    const val = (prefix) => {
      const line = run.micro.split('\n').find((l) => l.startsWith(`| ${prefix}`));
      return line ? Number(line.split('|').at(-2)) : NaN;
    };
    const id = val('clientIp.identity'), idGen = val('  the same by the general path');
    const hd = val('limiter.headers'), hdList = val('  the same through serializeList');
    const bd = val('one bounded call'), bdRace = val('  the same with a setTimeout');
    const route = val('routeTemplate'), check = val('limiter.check(...) with a fake client');
    const take = val('CPU per round trip: node-redis 5.12.1 `sendCommand(TB.TAKE'), ping = val('CPU per round trip: node-redis 5.12.1 `client.ping()`');
    const whole = val('CPU per call: limiter.check');
    const gap = s.tb && s.ping ? s.tb.cpu - s.ping.cpu : NaN;
    L.push(`Reading it: the middleware's own JavaScript is now about ${f0(route + check + hd)} µs per request (route walk ${f2(route)}, check ${f2(check)} of which the client-address walk is ${f2(id)} and the bounded call ${f2(bd)}, headers ${f2(hd)}). The fast paths in \`clients/node\` against the general code they replace: \`ClientIpConfig.identity\` (IPv4 as a 32-bit integer, trusted CIDRs as integer masks, the text kept as the identity at /32, \`split(',')\` when no quote) ${f2(id)} µs against ${f2(idGen)}; \`decisionHeaders\` (items serialized by the library once per policy shape and name) ${f2(hd)} against ${f2(hdList)}; one deadline timer per limiter ${f2(bd)} against ${f2(bdRace)} for a timer and \`Promise.race\` per call; and a single policy is checked with TB.TAKE (a 4-value reply). On node-redis, a TB.TAKE round trip costs ${f2(take)} µs of CPU against ${f2(ping)} for \`client.ping()\`, and the whole check ${f2(whole)} µs. App CPU (3) − (4) in this run: ${f0(gap)} µs per request.`);
    L.push('');
    // the same comparison from the parts, which other work on the machine moves much less
    const est = (take - ping) + route + check + hd;
    if (Number.isFinite(est) && s.ping && s.erl) {
      L.push(`From the parts instead of the rounds: redis-tb should cost the app about (TB.TAKE − PING round trip) + route walk + check + headers = ${f2(take - ping)} + ${f2(route)} + ${f2(check)} + ${f2(hd)} ≈ ${f0(est)} µs per request more than the bare PING (writing two more response headers aside), so with (4)'s app CPU of ${f0(s.ping.cpu)} µs per request, (4)/(3) ≈ ${f2(s.ping.cpu / (s.ping.cpu + est))} (target >= 0.85), and against (2)'s ${f0(s.erl.cpu)} µs, (2)/(3) ≈ ${f2(s.erl.cpu / (s.ping.cpu + est))}.`);
      L.push('');
    }
  }
  if (run.profile) {
    L.push("`node bench/integrations/node/profile.mjs tb` right after (the running server under the same load, `node --cpu-prof`, startup and warm-up left out; µs per request):");
    L.push('');
    L.push('```');
    L.push(run.profile);
    L.push('```');
    L.push('');
  }
  L.push('## What was checked');
  L.push('');
  for (const v of variants) {
    const calls = Object.entries(s[v].calls).map(([k, n]) => `${(n / s[v].completed).toFixed(2)} ${k.toUpperCase()}`).join(', ') || 'no Redis command';
    const from = run.baseline && run.tbEntries?.[v] ? ` The app imported \`redis-tb\` from \`${run.tbEntries[v]}\`.` : '';
    L.push(`- ${NAMES[v]}: ${s[v].requests} requests measured, ${s[v].non200 === 0 ? 'every one a 200' : `${s[v].non200} not 200`}; per request (${s[v].completed}, warm-up included) Redis ran ${calls} (INFO commandstats around each measurement; commands a script runs count too).${from}`);
  }
  L.push('');
  L.push('## Setup');
  L.push('');
  L.push('- The app (`bench/integrations/node/server.mjs`): Express, `trust proxy` = loopback, one route `GET /items/:id` answering JSON. Variant (2) is `rateLimit({ windowMs: 1000, limit, standardHeaders: \'draft-8\', store: new RedisStore({ sendCommand }) })` on a node-redis client (what express-rate-limit\'s documentation shows for Redis); (3) is redis-tb\'s `redis-tb/express` middleware with one policy (`ip`, per client address, per second); (4) awaits `client.ping()` of node-redis before the route; (5) writes the pre-encoded `*1\\r\\n$4\\r\\nPING\\r\\n` on a raw \`net\` socket and reads `+PONG\\r\\n` before the route (persistent connections, one per request in flight, no client library); (6) is (3) with three policies (`ip`, a per-route `endpoint`, one `all` bucket), one TB.MTAKE.' + (run.scriptsServer ? " (7)-(10) are (3) and (6) with `backend: 'scripts'` on a second redis-server without the module (section \"The two backends end to end\")." : '') + ' Limits are high enough that every request is admitted: each variant does its full work (one Redis round trip for (2)-(4)) and the handler runs.');
  L.push('- Requests: `GET /items/<n>` with a distinct `X-Forwarded-For` per request (65,536 client addresses in a ring), so the limiters work on a real spread of keys.');
  L.push(`- Load: \`bench/integrations/node/loadgen.mjs\`, a closed-loop HTTP/1.1 keep-alive generator on raw sockets timing each request with hrtime; per variant and round ${run.seconds} s at ${run.connections} connections after 1 s of warm-up, then ${run.latSeconds} s at one connection.`);
  if (run.baseline) {
    L.push(`- Baseline (\`--baseline ${run.baseline.rev}\`, commit ${run.baseline.sha}): \`git archive\` of its \`clients/node\` into \`${run.baseline.dir.replace(/\/clients\/node$/, '')}\`, \`npm ci\` and \`npm run build\` there; (3b) and (6b) import its \`dist/esm\` entry points of \`.\` and \`./express\` (its exports map) through \`TB_PACKAGE_DIR\`. ${run.baseline.clientIpClass === 'ClientIp' ? `At ${run.baseline.short} the client-address configuration class is \`ClientIp\` (now \`ClientIpConfig\`, the same options): \`tb-variant.mjs\` takes whichever the package exports; the rest of the code the variants run is the same.` : 'The variants run the same code on both.'}`);
  }
  L.push(`- Machine: ${run.cpus} CPUs; ${run.pinning ? `the app on CPU 0, ${run.scriptsServer ? 'both redis-servers' : 'redis-server'} and the load generator on CPU 1 (taskset)` : 'nothing pinned'}. Node ${run.node}, redis-server ${run.redisVersion}; ${Object.entries(run.versions).map(([k, v]) => `${k} ${v}`).join(', ')}. Load average (1 min) before and after the run: ${run.loadBefore[0].toFixed(2)} and ${run.loadAfter[0].toFixed(2)} (other work on the same cores makes rounds vary: read the medians and the per-round ratios, measured back to back).`);
  L.push('');
  // keep the deny-cache flood section (bench/integrations/node/flood.mjs) of the report being replaced
  let flood = '';
  if (fs.existsSync(out)) {
    const prev = fs.readFileSync(out, 'utf8');
    const begin = prev.indexOf('<!-- flood:begin');
    const end = prev.indexOf('<!-- flood:end -->');
    if (begin >= 0 && end > begin) flood = prev.slice(begin, end + '<!-- flood:end -->'.length);
  }
  if (flood) L.push(flood, '');
  fs.writeFileSync(out, L.join('\n'));
}

// `node bench/integrations/node/report.mjs bench/integrations/node/last-run.json [out]`: write the report again from a saved run.
if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  const run = JSON.parse(fs.readFileSync(process.argv[2] ?? new URL('./last-run.json', import.meta.url), 'utf8'));
  run.started = new Date(run.started);
  if (process.argv[3]) run.out = process.argv[3];
  writeReport(run);
}
