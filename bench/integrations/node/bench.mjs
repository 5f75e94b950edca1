// Side-by-side measurement of the same Express app (server.mjs) with:
//   none (no limiter), erl (express-rate-limit + rate-limit-redis), tb (redis-tb's
//   Express middleware, one policy), tb3 (the same, three policies), and two floors: ping
//   (one bare Redis PING per request on node-redis: the client library's one-round-trip
//   floor) and rawping (one pre-encoded PING on a raw socket, no client library).
// The script backend (SPEC E, clients/lua) beside the module, when listed: tbs and tbs3 (tb
// and tb3 with `backend: 'scripts'`, Functions) and tbse and tbse3 (the same through a
// user refused FUNCTION LOAD: SCRIPT LOAD and EVALSHA), on a second redis-server started
// without the module (pinned as the first); the report gains "the two backends end to end".
// One redis-server with the module; one app process per variant (all started up front,
// only one loaded at a time); several rounds alternating the variants' order; each
// measurement is a throughput run (`--connections` keep-alive connections) and a latency
// run (one connection: the time a request takes when nothing queues). redis-server and
// the load generator are pinned to one core and the app to the other when the machine
// has two or more (taskset). Writes bench/results/integrations-node.md (report.mjs).
//
// --baseline REV (a git revision whose clients/node is the package): before / after in
// the same run. baseline.mjs extracts REV's clients/node into a scratch directory
// (os.tmpdir(); `npm ci` and its own build there, reused for the same commit), and the
// variants tb@base and tb3@base (the same server.mjs and tb-variant.mjs with `redis-tb`
// imported from that build) are measured in the same rounds beside tb and tb3 (each
// listed tb / tb3 gets its @base twin right after it), against the same floors and the
// same redis-server; each redis-tb app reports the file `redis-tb` resolved to, checked
// here. The report gains a before / after section.
//
//   node bench/integrations/node/bench.mjs [--rounds 5] [--seconds 3] [--latency-seconds 2]
//                        [--connections 16] [--variants none,erl,tb,tb3,ping,rawping]
//                        (also tbs,tbs3,tbse,tbse3: the script backend)
//                        [--baseline REV] [--no-profile] [--no-micro] [--out FILE]
import { spawn, execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs';
import { writeReport } from './report.mjs';
import { codeHash, prepareBaseline } from './baseline.mjs';
import {
  args, children, commandCounts, here, lineFrom, pin, pinning, redisCli, root, startRedis,
} from './harness.mjs';

const rounds = Number(args.rounds ?? 5);
const seconds = Number(args.seconds ?? 3);
const latSeconds = Number(args['latency-seconds'] ?? 2);
const connections = Number(args.connections ?? 16);
// The report is medians over rounds and a rate over the phase: nothing to report without
// a round, a phase or a connection.
for (const [name, value] of [['--rounds', rounds], ['--seconds', seconds], ['--latency-seconds', latSeconds], ['--connections', connections]]) {
  if (!(value > 0) || (name !== '--seconds' && name !== '--latency-seconds' && !Number.isInteger(value))) {
    throw new Error(`${name} must be a positive ${name.endsWith('seconds') ? 'number' : 'integer'} (got ${value})`);
  }
}
const listed = (args.variants ?? 'none,erl,tb,tb3,ping,rawping').split(',');
const out = path.resolve(args.out ?? path.join(root, 'bench/results/integrations-node.md'));
const baseline = args.baseline ? prepareBaseline(root, args.baseline) : null;
if (baseline) {
  // what tb-variant.mjs uses, as the baseline exports it (ClientIp before ClientIpConfig)
  const { loadRedisTb } = await import('./tb-variant.mjs');
  baseline.clientIpClass = (await loadRedisTb(baseline.dir)).clientIpClass;
}
if (!baseline && listed.some((v) => v.endsWith('@base'))) throw new Error('the @base variants need --baseline REV');
// with --baseline, each redis-tb variant is followed by its @base twin (unless listed already)
const variants = baseline
  ? listed.flatMap((v) => (['tb', 'tb3'].includes(v) && !listed.includes(`${v}@base`) ? [v, `${v}@base`] : [v]))
  : listed;

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
/** CPU seconds (user + system) a process has used so far, from /proc. */
function cpuSeconds(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK; // utime, stime
}

const { port: redisPort, redis } = await startRedis();
// The script backend's variants: their app's server (without the module), the way the
// backend calls the scripts (checked against the limiter's backend line, SPEC E6).
const SCRIPTS = { tbs: 'Functions', tbs3: 'Functions', tbse: 'EVALSHA', tbse3: 'EVALSHA' };
const scripted = variants.filter((v) => v in SCRIPTS);
// A user with every command but FUNCTION LOAD: the backend's E2 falls back to SCRIPT LOAD.
const EVALSHA_USER = 'tbevalsha:benchpw';
let scriptsServer = null;
if (scripted.length) {
  scriptsServer = await startRedis({ module: false });
  redisCli(scriptsServer.port, 'ACL', 'SETUSER', 'tbevalsha', 'on', '>benchpw', '~*', '&*', '+@all', '-function|load');
}
const serverOf = (v) => (v in SCRIPTS
  ? { port: scriptsServer.port, pid: scriptsServer.redis.pid, url: `redis://${SCRIPTS[v] === 'EVALSHA' ? `${EVALSHA_USER}@` : ''}127.0.0.1:${scriptsServer.port}` }
  : { port: redisPort, pid: redis.pid, url: `redis://127.0.0.1:${redisPort}` });
const redisVersion = /v=(\S+)/.exec(execFileSync('redis-server', ['--version'], { encoding: 'utf8' }))[1];

// The redis-tb the tb variants use: this folder's copy of clients/node (npm ci packs it);
// the @base ones, the baseline's build. Each app says which file it imported.
const currentPackage = fs.realpathSync(path.join(here, 'node_modules', 'redis-tb'));
const within = (file, dir) => !path.relative(fs.realpathSync(dir), fs.realpathSync(file)).startsWith('..');
const shown = (p) => (within(p, root) ? path.relative(root, p) : p);
const packages = { current: { dir: shown(currentPackage), code: codeHash(path.join(currentPackage, 'dist', 'esm')) } };
const built = path.join(root, 'clients', 'node', 'dist', 'esm');
if (fs.existsSync(built) && codeHash(built) !== packages.current.code) {
  process.stderr.write(`warning: ${path.relative(root, currentPackage)} is not clients/node's current build: run npm ci in bench/integrations/node again\n`);
}
if (baseline && baseline.code === packages.current.code) {
  process.stderr.write(`warning: the baseline's built code is the same as the current one (${baseline.code})\n`);
}
const { TB_PACKAGE_DIR: _unset, ...environment } = process.env;
const apps = {};
for (const v of variants) {
  const [cmd, argv] = pin(0, process.execPath, [path.join(here, 'server.mjs')]);
  const atBase = v.endsWith('@base');
  const env = { ...environment, VARIANT: v, REDIS_URL: serverOf(v).url, PORT: '0', NODE_ENV: 'production' };
  if (atBase) env.TB_PACKAGE_DIR = baseline.dir;
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit'], env });
  children.push(child);
  const m = await lineFrom(child, /listening (\d+)(?: redis-tb (.+?))?(?: backend (.+))?\n/, `app (${v})`);
  apps[v] = { port: Number(m[1]), child, tbEntry: m[2] ?? null, backendLine: m[3] ?? null };
  // the backend each app's limiter chose (SPEC E6's line): the module, or the scripts as listed
  if (v in SCRIPTS || v === 'tb' || v === 'tb3') {
    const want = v in SCRIPTS ? new RegExp(`^redis-tb: backend scripts on .*, ${SCRIPTS[v]}\\)$`) : /^redis-tb: backend module on /;
    if (!want.test(m[3] ?? '')) throw new Error(`app (${v}): backend line ${JSON.stringify(m[3] ?? null)}, not ${want}`);
    process.stderr.write(`app (${v}): ${m[3]}\n`);
  }
  if (v.startsWith('tb')) {
    const want = atBase ? baseline.dir : currentPackage;
    if (!m[2] || !within(m[2], want) || (atBase && within(m[2], currentPackage)) || (!atBase && baseline && within(m[2], baseline.dir))) {
      throw new Error(`app (${v}) imported redis-tb from ${m[2] ?? '(not said)'}, not from ${want}`);
    }
    process.stderr.write(`app (${v}): redis-tb ${m[2]}\n`);
  }
}

function load(port, conns, secs, warm) {
  const [cmd, argv] = pin(1, process.execPath, [path.join(here, 'loadgen.mjs'), String(port), String(conns), String(secs), String(warm)]);
  return JSON.parse(execFileSync(cmd, argv, { encoding: 'utf8' }));
}

const loadBefore = os.loadavg();
const started = new Date();
const results = Object.fromEntries(variants.map((v) => [v, []]));
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? variants : [...variants].reverse();
  for (const v of order) {
    const srv = serverOf(v);
    const before = commandCounts(srv.port);
    const cpu0 = cpuSeconds(apps[v].child.pid);
    const rcpu0 = cpuSeconds(srv.pid);
    const tput = load(apps[v].port, connections, seconds, 1);
    // CPU time per request of the app and of redis-server over the throughput run
    // (warm-up included, as in tput.all): less sensitive to other work on the machine
    // than requests per second are.
    const appCpuUs = ((cpuSeconds(apps[v].child.pid) - cpu0) * 1e6) / tput.all;
    const redisCpuUs = ((cpuSeconds(srv.pid) - rcpu0) * 1e6) / tput.all;
    const latency = load(apps[v].port, 1, latSeconds, 0.5);
    const after = commandCounts(srv.port);
    const calls = {};
    for (const [k, n] of Object.entries(after)) if (n - (before[k] ?? 0) > 0 && k !== 'info') calls[k] = n - (before[k] ?? 0);
    results[v].push({ round: r + 1, tput, latency, calls, completed: tput.all + latency.all, appCpuUs, redisCpuUs });
    process.stderr.write(`round ${r + 1} ${v.padEnd(8)} ${tput.rps.toFixed(0).padStart(6)} req/s  p50 ${tput.p50_us.toFixed(0)} µs p99 ${tput.p99_us.toFixed(0)} µs | app CPU ${appCpuUs.toFixed(0)} µs/req, redis ${redisCpuUs.toFixed(0)} | 1 conn p50 ${latency.p50_us.toFixed(0)} µs p99 ${latency.p99_us.toFixed(0)} µs | ${JSON.stringify(tput.statuses)} ${JSON.stringify(calls)}\n`);
  }
}
const loadAfter = os.loadavg();

// Where redis-tb's middleware spends its time, in-process (bench/integrations/node/micro.mjs), on the app's CPU.
let micro = null;
if (variants.includes('tb') && !args['no-micro']) {
  const [mcmd, margv] = pin(0, process.execPath, [path.join(here, 'micro.mjs'), '--redis', `redis://127.0.0.1:${redisPort}`]);
  micro = execFileSync(mcmd, margv, { encoding: 'utf8' }).trim();
}
// and the --cpu-prof view of variant (3) under the same load (bench/integrations/node/profile.mjs)
let profile = null;
if (variants.includes('tb') && !args['no-profile']) {
  const text = execFileSync(process.execPath, [path.join(here, 'profile.mjs'), 'tb', String(seconds), String(connections)], { encoding: 'utf8' });
  const lines = text.split('\n');
  const pick = (title, n) => {
    const i = lines.findIndex((l) => l.startsWith(title));
    return i < 0 ? [] : lines.slice(i, i + 1 + n);
  };
  profile = [lines[0].replace(/; profile .*$/, ''), '', ...pick('self time by package', 12), '', ...pick('inclusive time', 16)].join('\n');
}

const versions = {};
for (const p of ['express', 'express-rate-limit', 'rate-limit-redis', 'redis', '@redis/client', 'redis-tb']) {
  try {
    versions[p] = JSON.parse(fs.readFileSync(path.join(here, 'node_modules', p, 'package.json'), 'utf8')).version;
  } catch { /* not installed */ }
}
if (baseline) versions['redis-tb@base'] = baseline.version;
const run = {
  out, started, results, variants, rounds, seconds, latSeconds, connections, pinning, baseline,
  packages, scriptsServer: Boolean(scriptsServer),
  backendLines: Object.fromEntries(variants.filter((v) => apps[v].backendLine).map((v) => [v, apps[v].backendLine])),
  tbEntries: Object.fromEntries(variants.filter((v) => apps[v].tbEntry).map((v) => [v, shown(apps[v].tbEntry)])),
  loadBefore, loadAfter, micro, profile, node: process.version, redisVersion, versions, cpus: os.cpus().length,
  command: `node bench/integrations/node/bench.mjs ${process.argv.slice(2).join(' ')}`.trim(),
};
fs.writeFileSync(path.join(here, 'last-run.json'), JSON.stringify(run, null, 1));
writeReport(run);
process.stderr.write(`wrote ${path.relative(process.cwd(), out)}\n`);
process.exit(0);
