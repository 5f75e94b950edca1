// Where a variant's CPU time goes: runs server.mjs (VARIANT) under `node --cpu-prof`
// against a redis-server with the module, loads it with loadgen.mjs, and sums the
// profile's self time by package/file and by function.
//
//   node bench/integrations/node/profile.mjs [variant=tb] [seconds=8] [connections=16]
import { spawn, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../../..');
const [variant = 'tb', seconds = '8', connections = '16'] = process.argv.slice(2);
const modulePath = path.resolve(process.env.REDIS_TB_MODULE ?? path.join(root, 'target/release/libredis_tb.so'));

const srv = net.createServer().listen(0, '127.0.0.1');
await once(srv, 'listening');
const redisPort = srv.address().port;
srv.close();
const redis = spawn(os.availableParallelism() >= 2 ? 'taskset' : 'redis-server', [...(os.availableParallelism() >= 2 ? ['-c', '1', 'redis-server'] : []), '--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--loadmodule', modulePath], { stdio: ['ignore', 'pipe', 'inherit'] });
process.on('exit', () => redis.kill('SIGKILL'));
await new Promise((r) => redis.stdout.on('data', (d) => { if (/Ready to accept/.test(d)) r(); }));

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tb-prof-'));
const spawned = performance.now();
// the app on CPU 0, redis-server and the load generator on CPU 1, as in bench.mjs
const pinned = os.availableParallelism() >= 2;
const appCmd = pinned ? ['taskset', ['-c', '0', process.execPath]] : [process.execPath, []];
const app = spawn(appCmd[0], [...appCmd[1], '--cpu-prof', '--cpu-prof-dir', dir, path.join(here, 'server.mjs')], {
  stdio: ['ignore', 'pipe', 'inherit'],
  env: { ...process.env, VARIANT: variant, REDIS_URL: `redis://127.0.0.1:${redisPort}`, PORT: '0' },
});
const port = await new Promise((r) => app.stdout.on('data', (d) => { const m = /listening (\d+)/.exec(d); if (m) r(Number(m[1])); }));
// samples before the measured load (startup, module loading, warm-up) are left out
const skipMs = performance.now() - spawned + 1000;
const res = JSON.parse(execFileSync(pinned ? 'taskset' : process.execPath, [...(pinned ? ['-c', '1', process.execPath] : []), path.join(here, 'loadgen.mjs'), String(port), connections, seconds, '1'], { encoding: 'utf8' }));
app.kill('SIGINT');
await once(app, 'exit');
redis.kill('SIGKILL');

const file = fs.readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
const prof = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
const dt = new Map();
let at = 0;
for (let i = 0; i < prof.samples.length; i++) {
  at += prof.timeDeltas[i] ?? 0;
  if (at < skipMs * 1000) continue;
  dt.set(prof.samples[i], (dt.get(prof.samples[i]) ?? 0) + (prof.timeDeltas[i] ?? 0));
}
const total = [...dt.values()].reduce((a, b) => a + b, 0);
const byFile = new Map();
const byFn = new Map();
const where = (url) => {
  if (!url) return '(native/vm)';
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1];
  if (url.startsWith('node:')) return url;
  return path.relative(root, fileURLToPath(url));
};
for (const n of prof.nodes) {
  const t = dt.get(n.id) ?? 0;
  if (!t) continue;
  const f = where(n.callFrame.url);
  byFile.set(f, (byFile.get(f) ?? 0) + t);
  const fn = `${n.callFrame.functionName || '(anonymous)'} ${f}:${n.callFrame.lineNumber + 1}`;
  byFn.set(fn, (byFn.get(fn) ?? 0) + t);
}
const reqs = res.requests + 1;
// inclusive time of the functions of redis-tb (and the middleware of the other variants)
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const inclusive = new Map();
const incl = (n) => {
  let t = dt.get(n.id) ?? 0;
  for (const c of n.children ?? []) t += incl(byId.get(c));
  return t;
};
const seen = new Set();
const walk = (n, stack) => {
  const f = where(n.callFrame.url);
  const name = `${n.callFrame.functionName || '(anonymous)'} ${f}:${n.callFrame.lineNumber + 1}`;
  if (/redis-tb|express-rate-limit|rate-limit-redis|bench\/server\.mjs/.test(f) && !stack.has(name)) {
    inclusive.set(name, (inclusive.get(name) ?? 0) + incl(n));
    stack = new Set(stack).add(name);
  }
  for (const c of n.children ?? []) walk(byId.get(c), stack);
};
walk(prof.nodes[0], new Set());
void seen;
const top = (m, k) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, k)
  .map(([name, t]) => `${(100 * t / total).toFixed(1).padStart(5)}%  ${(t / reqs).toFixed(1).padStart(6)} µs/req  ${name}`).join('\n');
console.log(`variant ${variant}: ${res.rps.toFixed(0)} req/s over ${seconds} s, ${res.requests} requests; profile ${file} in ${dir}`);
console.log('\nself time by package / file:\n' + top(byFile, 25));
console.log('\nself time by function:\n' + top(byFn, 40));
console.log('\ninclusive time of the limiter\'s functions (callees included, async continuations not):\n' + top(inclusive, 30));
