// Issue 21's deny-cache measurement for Node: one client (one X-Forwarded-For identity)
// floods one limited route of the bench's Express app (server.mjs, variant tb) as fast as
// loadgen.mjs manages, for --seconds, once with redis-tb's local deny cache off and once
// with it on (`denyCache: { maxEntries: 10000 }`), one app instance each against the same
// redis-server with the module. For each: the app's requests per second (200s and 429s),
// and Redis commands per second from INFO commandstats deltas (TB.TAKE, every command).
//
// Target: with the cache, Redis sees at most one call per identity per retry window from
// the instance. The policy is capacity C refilled at R per second: after a refusal, one
// token is back within 1/R s, so the retry window is at most 1/R s and the refusals Redis
// may see over T seconds are at most W = ceil(T x R) + 1 (one per window, plus the window
// open at the end). The admitted calls are bounded by the limit (C + T x R). The client is
// flooded over 1 connection (a single client: each request sent when the previous answer
// came) and over several (one identity, requests in flight together): the check is
// refusals that reached Redis (the limiter's limited - denyCacheHits) <= W x connections,
// i.e. exactly the target for one connection, and one per connection per window when
// requests are in flight together (the cache cannot refuse a request that was sent to
// Redis before the refusal that fills it came back); and Redis TB calls = admitted +
// refused by Redis.
//
//   node bench/integrations/node/flood.mjs [--seconds 10] [--connections 1,16] [--capacity 10] [--rate 1] [--out FILE]
// Writes (replaces) the section "Deny cache under a flood" of bench/results/integrations-node.md.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  args, children, commandCounts, here, lineFrom, pin, pinning, redisCli, root, startRedis,
} from './harness.mjs';

const seconds = Number(args.seconds ?? 10);
const connectionList = String(args.connections ?? '1,16').split(',').map(Number);
const capacity = Number(args.capacity ?? 10);
const rate = Number(args.rate ?? 1);
const out = path.resolve(args.out ?? path.join(root, 'bench/results/integrations-node.md'));



const { port: redisPort } = await startRedis();

async function startApp(denyCache) {
  const [cmd, argv] = pin(0, process.execPath, [path.join(here, 'server.mjs')]);
  const child = spawn(cmd, argv, {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: {
      ...process.env, VARIANT: 'tb', REDIS_URL: `redis://127.0.0.1:${redisPort}`, PORT: '0', NODE_ENV: 'production',
      TB_CAPACITY: String(capacity), TB_RATE: String(rate), TB_DENY_CACHE: String(denyCache), TB_STATS: '1',
    },
  });
  children.push(child);
  const m = await lineFrom(child, /listening (\d+)/, 'app');
  return { port: Number(m[1]), child };
}

async function stats(port) {
  const res = await fetch(`http://127.0.0.1:${port}/_stats`);
  return res.json();
}

const loadBefore = os.loadavg();
const started = new Date();
const runs = [];
for (const connections of connectionList) {
  for (const [name, entries] of [['off', 0], ['on', 10000]]) {
    const app = await startApp(entries);
    redisCli(redisPort, 'FLUSHALL');
    const s0 = await stats(app.port);
    const c0 = commandCounts(redisPort);
    // one identity (loadgen's ring of 1 address: X-Forwarded-For 10.0.0.0), /items/0, no warm-up
    const [lcmd, largv] = pin(1, process.execPath, [path.join(here, 'loadgen.mjs'), String(app.port), String(connections), String(seconds), '0', '1', '/items/']);
    const load = JSON.parse(execFileSync(lcmd, largv, { encoding: 'utf8' }));
    const c1 = commandCounts(redisPort);
    const s1 = await stats(app.port);
    const delta = {};
    for (const [k, n] of Object.entries(c1)) {
      const d = n - (c0[k] ?? 0);
      if (d > 0 && k !== 'info' && k !== 'flushall') delta[k] = d;
    }
    const ds = Object.fromEntries(Object.keys(s1).map((k) => [k, s1[k] - s0[k]]));
    const tbCalls = (delta['tb.take'] ?? 0) + (delta['tb.mtake'] ?? 0);
    const allCalls = Object.values(delta).reduce((a, b) => a + b, 0);
    runs.push({
      connections, name, load, delta, stats: ds, tbCalls, allCalls,
      rps: load.rps, redisPerSec: allCalls / load.seconds, tbPerSec: tbCalls / load.seconds,
      refusedByRedis: ds.limited - ds.denyCacheHits,
    });
    process.stderr.write(`${connections} conn, deny cache ${name}: ${load.rps.toFixed(0)} req/s ${JSON.stringify(load.statuses)}; Redis ${JSON.stringify(delta)} = ${(allCalls / load.seconds).toFixed(1)} commands/s; limiter ${JSON.stringify(ds)}\n`);
    app.child.kill('SIGKILL');
  }
}
const loadAfter = os.loadavg();

// the target, per connection count
const checks = [];
for (const on of runs.filter((r) => r.name === 'on')) {
  const T = on.load.seconds;
  const windows = Math.ceil(T * rate) + 1;
  const admittedMax = capacity + Math.ceil(T * rate) + 1;
  const c = on.connections;
  checks.push(
    [`${c} connection${c > 1 ? 's' : ''}: refusals that reached Redis with the cache: ${on.refusedByRedis} <= ${c > 1 ? `${c} x ` : ''}(ceil(T x R) + 1) = ${windows * c} (${c > 1 ? 'one per connection' : 'one'} per identity per retry window)`, on.refusedByRedis <= windows * c, c === 1],
    [`${c} connection${c > 1 ? 's' : ''}: Redis TB calls with the cache = admitted + refused by Redis: ${on.tbCalls} = ${on.stats.allowed} + ${on.refusedByRedis}`, on.tbCalls === on.stats.allowed + on.refusedByRedis, false],
    [`${c} connection${c > 1 ? 's' : ''}: admitted with the cache within the limit: ${on.stats.allowed} <= C + ceil(T x R) + 1 = ${admittedMax}`, on.stats.allowed <= admittedMax, false],
    [`${c} connection${c > 1 ? 's' : ''}: every other request answered from the cache: ${on.stats.denyCacheHits} deny-cache hits of ${on.stats.checks} checks`, on.stats.denyCacheHits === on.stats.checks - on.tbCalls, false],
  );
}
const pass = checks.every(([, ok]) => ok);
const targetOne = checks.filter(([, , target]) => target).every(([, ok]) => ok);
for (const [text, ok] of checks) process.stderr.write(`${ok ? 'PASS' : 'FAIL'} ${text}\n`);

const f0 = (x) => x.toFixed(0);
const f1 = (x) => x.toFixed(1);
const L = [];
L.push('<!-- flood:begin (written by bench/integrations/node/flood.mjs; bench.mjs keeps it) -->');
L.push('## Deny cache under a flood (issue 21)');
L.push('');
L.push(`Written by \`bench/integrations/node/flood.mjs\` on ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC:`);
L.push('');
L.push('```');
L.push(`node bench/integrations/node/flood.mjs ${process.argv.slice(2).join(' ')}`.trim());
L.push('```');
L.push('');
L.push(`One client identity (X-Forwarded-For \`10.0.0.0\`, behind the trusted loopback proxy) floods \`GET /items/0\` as fast as \`bench/integrations/node/loadgen.mjs\` manages for ${seconds} s, starting from a full bucket: over one keep-alive connection (a single client: each request sent when the previous answer came) and over ${connectionList.filter((c) => c > 1).join(', ') || '–'} (the same identity with requests in flight together). The app is the bench's Express app with redis-tb's middleware and one policy, capacity ${capacity} refilled at ${rate} per second (a refusal's retry window is at most ${f1(1 / rate)} s); one app instance with the deny cache off, then one with \`denyCache: { maxEntries: 10000 }\`, against the same redis-server. Redis commands from \`INFO commandstats\` deltas around each flood.`);
L.push('');
L.push('| connections | deny cache | app req/s | 200 | 429 | Redis commands/s (all) | TB.TAKE calls | admitted | refused by Redis | refused by the cache |');
L.push('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|');
for (const r of runs) {
  L.push(`| ${r.connections} | ${r.name} | ${f0(r.rps)} | ${r.load.statuses['200'] ?? 0} | ${r.load.statuses['429'] ?? 0} | ${f1(r.redisPerSec)} | ${r.tbCalls} | ${r.stats.allowed} | ${r.refusedByRedis} | ${r.stats.denyCacheHits} |`);
}
L.push('');
L.push(`(The 200/429 columns count the measured ${seconds} s; the other counts include the requests in flight at its edges. Redis commands/s = every command Redis ran during the flood but the script's INFO/FLUSHALL, over the measured time. The Redis counts are exact; the app's requests per second are one run each on a shared 2-core machine, where back-to-back runs of the same case were seen to differ by 2-3x: read them as an indication.)`);
L.push('');
const one = runs.filter((r) => r.connections === 1);
if (one.length === 2) {
  L.push(`**Target (one client: with the cache, Redis sees at most one call per identity per retry window from the instance): ${targetOne ? 'PASS' : 'FAIL'}.** Over one connection Redis went from ${f1(one[0].redisPerSec)} to ${f1(one[1].redisPerSec)} commands per second for this client, and the app answered ${f0(one[0].rps)} → ${f0(one[1].rps)} requests per second (${(one[1].rps / one[0].rps).toFixed(2)}x).`);
  L.push('');
}
for (const c of connectionList.filter((x) => x > 1)) {
  const [off, on] = runs.filter((r) => r.connections === c);
  L.push(`Over ${c} connections Redis went from ${f1(off.redisPerSec)} to ${f1(on.redisPerSec)} commands per second and the app from ${f0(off.rps)} to ${f0(on.rps)} requests per second (${(on.rps / off.rps).toFixed(2)}x). With the cache, once a cached refusal expires, one request probes Redis and the requests arriving while it is in flight get the cached 429 (Retry-After 1) without a Redis call; when Redis admits a request and leaves the bucket with fewer tokens than its cost (the probe that takes the token just refilled, or the admission that spends the last token), the limiter caches the refusal Redis would give until (cost - remaining) / rate has passed, so the next requests are refused locally and about one admitted probe per token reaches Redis. Refusals still reach Redis only from requests already sent before an entry existed (the start of the flood) or when a probe is refused.`);
  L.push('');
}
for (const [text, ok] of checks) L.push(`- ${ok ? 'PASS' : 'FAIL'}: ${text}`);
L.push('');
L.push(`Load average (1 min) before and after: ${loadBefore[0].toFixed(2)} and ${loadAfter[0].toFixed(2)}; ${pinning ? 'the app on CPU 0, redis-server and the load generator on CPU 1' : 'nothing pinned'}.`);
L.push('<!-- flood:end -->');
const section = L.join('\n');

let text = fs.existsSync(out) ? fs.readFileSync(out, 'utf8') : '';
const begin = text.indexOf('<!-- flood:begin');
const end = text.indexOf('<!-- flood:end -->');
if (begin >= 0 && end > begin) text = text.slice(0, begin) + section + text.slice(end + '<!-- flood:end -->'.length);
else text = `${text.replace(/\s*$/, '')}\n\n${section}\n`;
fs.writeFileSync(out, text);
process.stderr.write(`wrote ${path.relative(process.cwd(), out)}\n`);
process.exit(pass ? 0 : 1);
