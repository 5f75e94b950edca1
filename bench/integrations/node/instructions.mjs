// Instructions per request of the Express app (server.mjs), counted by callgrind: today's
// redis-tb (this folder's node_modules copy of clients/node) against an older revision's
// (baseline.mjs), one policy (tb) and three (tb3), with the two floors (ping, rawping).
//
// Wall time on a shared machine swings from phase to phase; the instructions callgrind
// counts do not depend on the machine's load. Each measurement is one server.mjs process
// (VARIANT; node flags below) under `valgrind --tool=callgrind --instr-atstart=no`:
// it is sent --requests N sequential keep-alive requests with instrumentation off (the
// warm-up: start-up, connection set-up, V8's tiering up to optimized code, at the speed of
// an uninstrumented valgrind), then `callgrind_control -i on`, then --window more
// requests in blocks of 1000 with a `callgrind_control --dump` after each. The count per
// request is the sum of the blocks over the window: count(N + window) - count(N) of the
// process, as bench/integrations/rust/instructions.py gets from two processes, here in
// one (start-up is never counted, and the warm-up runs 2-3x faster uninstrumented).
// The whole process is counted: Node, V8 (its compilers and GC included), Express,
// node-redis and the middleware. Every variant and build is measured --reps times (the
// order of now and base alternating), and the table gives the median and the spread.
//
// Node runs with --single-threaded (no background compiler or GC threads: tiering and GC
// happen on the main thread, at points set by the work done, not by timing) and a fixed
// 64 MB young generation (--min/--max-semi-space-size=64): with the default, growing one,
// the same process counted 725k-766k instructions a request from run to run; with it,
// two runs at the same N agree within 0.2%. What remains is where a window falls in
// the GC cycle (a scavenge every ~2000 requests, a major GC now and then: blocks of 1000
// requests range about ±8%), which the reps sample by starting --stagger requests apart.
// The count stops moving after ~3000 requests of warm-up (N = 3000, 10000, 20000 gave
// the same within that noise); 5000 is the default.
// Under callgrind a request takes ~6 ms, so a TB.TAKE can miss the middleware's 1000 ms
// timeout when the machine is busy, and redis-tb fails open for a second (it says so on
// stderr): such a measurement is run again (three tries).
//
// The requests are the ones loadgen.mjs sends: `GET /items/<i % 1000>` with
// `Host: 127.0.0.1` and `X-Forwarded-For: 10.x.y.z` (address i of the same ring of
// 65536, from 0 here instead of a random start), so every request is a new bucket and
// the window's mix of paths is the same for any N.
//
//   node bench/integrations/node/instructions.mjs --baseline 88fc3cc [--requests 5000]
//        [--window 5000] [--variants tb,tb3,ping,rawping] [--reps 3] [--stagger 500]
//        [--jobs 2] [--node-flags=--single-threaded,--max-semi-space-size=64,--min-semi-space-size=64]
//        [--diff 15] [--perf-map] [--keep DIR]
//
// --diff K: the K functions whose instructions per request differ most between now and
// base (all reps' windows summed, callgrind_annotate of each dump), per redis-tb variant.
// V8's generated code has no symbols for valgrind: it is one row, `(JIT code)`, unless
// --perf-map runs node with --perf-basic-prof and names it from /tmp/perf-<pid>.map
// (JS function and file; this changes the counts a little: use it for the diff, not for
// the table). --keep DIR keeps the callgrind files (else a scratch directory, removed).
// redis-server (with the module, REDIS_TB_MODULE or target/release) and valgrind must be
// installed, `npm ci` run in this folder and `npm run build` in clients/node.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { codeHash, prepareBaseline } from './baseline.mjs';
import { args, children, here, lineFrom, root, startRedis } from './harness.mjs';

const int = (name, dflt, min = 1) => {
  const v = Number(args[name] ?? dflt);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer >= ${min} (got ${args[name]})`);
  return v;
};
const BLOCK = 1000;
const warmup = int('requests', 5000, 0);
const window = int('window', 5000);
if (window % BLOCK) throw new Error(`--window must be a multiple of ${BLOCK}`);
const reps = int('reps', 3);
// rep r warms up with N + (r - 1) * stagger requests: a scavenge comes every ~2000
// requests, so a window starting at one point of that cycle always holds the same number
// of them; staggered reps sample the cycle instead of repeating one phase of it
const stagger = int('stagger', 500, 0);
const jobs = int('jobs', 2);
const diffTop = args.diff === undefined ? 0 : args.diff === 'true' ? 15 : int('diff', 15);
const perfMap = args['perf-map'] === 'true';
// `--node-flags=a,b` (an `=`, since the value starts with --); default --single-threaded
const nodeFlagsArg = process.argv.slice(2).find((a) => a.startsWith('--node-flags='));
const nodeFlags = (nodeFlagsArg ? nodeFlagsArg.slice('--node-flags='.length) : '--single-threaded,--max-semi-space-size=64,--min-semi-space-size=64').split(',').filter(Boolean);
if (perfMap) nodeFlags.push('--perf-basic-prof');
const listed = (args.variants ?? 'tb,tb3,ping,rawping').split(',');
for (const v of listed) {
  if (!['none', 'ping', 'rawping', 'tb', 'tb3', 'erl'].includes(v)) throw new Error(`unknown variant ${v} (the @base twins come with --baseline)`);
}
const tbKinds = listed.filter((v) => v === 'tb' || v === 'tb3');
const baseline = args.baseline && args.baseline !== 'true' ? prepareBaseline(root, args.baseline) : null;
if (!baseline && tbKinds.length) process.stderr.write('no --baseline REV: today\'s package only\n');

for (const tool of ['valgrind', 'callgrind_control', 'callgrind_annotate']) {
  // (callgrind_annotate --version exits 255: only a missing program counts)
  if (spawnSync(tool, ['--version'], { stdio: 'ignore' }).error) throw new Error(`${tool} is not installed`);
}

// the redis-tb of the tb variants: this folder's copy of clients/node (npm ci packs it)
const currentPackage = fs.realpathSync(path.join(here, 'node_modules', 'redis-tb'));
const currentCode = codeHash(path.join(currentPackage, 'dist', 'esm'));
const built = path.join(root, 'clients', 'node', 'dist', 'esm');
if (fs.existsSync(built) && codeHash(built) !== currentCode) {
  process.stderr.write(`warning: ${path.relative(root, currentPackage)} is not clients/node's current build: run npm ci in bench/integrations/node again\n`);
}
if (baseline && baseline.code === currentCode) process.stderr.write(`warning: the baseline's built code is the same as the current one (${currentCode})\n`);
const within = (file, dir) => !path.relative(fs.realpathSync(dir), fs.realpathSync(file)).startsWith('..');

const work = args.keep ? path.resolve(args.keep) : fs.mkdtempSync(path.join(os.tmpdir(), 'redis-tb-node-callgrind-'));
fs.mkdirSync(work, { recursive: true });
const { port: redisPort } = await startRedis();
const { TB_PACKAGE_DIR: _unset, ...environment } = process.env;

const REQS = Array.from({ length: 65536 }, (_, a) => Buffer.from(
  `GET /items/${a % 1000} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 10.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}\r\n\r\n`, 'latin1'));
const HDR_END = Buffer.from('\r\n\r\n');

/** One keep-alive connection sending requests one at a time; send(i) resolves on response i's last byte. */
async function connection(port) {
  const sock = net.connect({ port, host: '127.0.0.1', noDelay: true });
  await once(sock, 'connect');
  let buf = Buffer.alloc(0);
  let pending = null;
  const settle = () => {
    const end = buf.indexOf(HDR_END);
    if (end < 0 || !pending) return;
    const head = buf.toString('latin1', 0, end);
    const len = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
    if (buf.length < end + 4 + len) return;
    buf = buf.subarray(end + 4 + len);
    const p = pending;
    pending = null;
    if (head.startsWith('HTTP/1.1 200')) p.resolve(); else p.reject(new Error(`not a 200: ${head.slice(0, 80)}`));
  };
  sock.on('data', (chunk) => { buf = buf.length ? Buffer.concat([buf, chunk]) : chunk; settle(); });
  sock.on('error', (e) => pending?.reject(e));
  sock.on('close', () => pending?.reject(new Error('the app closed the connection')));
  return {
    send: (i) => new Promise((resolve, reject) => { pending = { resolve, reject }; sock.write(REQS[i & 65535]); }),
    close: () => sock.destroy(),
  };
}

const callgrindControl = (pid, ...argv) => execFileSync('callgrind_control', [...argv, String(pid)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const totalOf = (file) => {
  const m = /^(?:summary|totals): *(\d+)/m.exec(fs.readFileSync(file, 'utf8'));
  if (!m) throw new Error(`no totals in ${file}`);
  return Number(m[1]);
};

/** One measurement: instructions of each block of BLOCK requests after the warm-up. */
async function measure(variant, rep) {
  const atBase = variant.endsWith('@base');
  const tag = `${variant.replace('@', '-')}.r${rep}`;
  const env = { ...environment, VARIANT: variant, REDIS_URL: `redis://127.0.0.1:${redisPort}`, PORT: '0', NODE_ENV: 'production' };
  if (atBase) env.TB_PACKAGE_DIR = baseline.dir;
  const out = path.join(work, `callgrind.${tag}`);
  const log = path.join(work, `valgrind.${tag}.log`);
  const child = spawn('valgrind', ['--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${out}`, `--log-file=${log}`,
    process.execPath, ...nodeFlags, path.join(here, 'server.mjs')], { stdio: ['ignore', 'pipe', 'pipe'], env, cwd: work });
  // (cwd: the scratch directory, where --perf-basic-prof also writes V8's isolate-*-v8.log)
  children.push(child);
  // the app's stderr: redis-tb says when it fails open (a TB.TAKE unanswered within the
  // middleware's 1000 ms, as a slow moment under valgrind can make it), and then the
  // requests skip Redis: such a measurement is not the one wanted, and is run again
  let appErr = '';
  child.stderr.on('data', (d) => { appErr += d; });
  const started = Date.now();
  try {
    const m = await lineFrom(child, /listening (\d+)(?: redis-tb (.+?))?(?: backend .+)?\n/, `app (${variant}) under callgrind (log ${log})`);
    if (variant.startsWith('tb')) {
      const want = atBase ? baseline.dir : currentPackage;
      if (!m[2] || !within(m[2], want)) throw new Error(`app (${variant}) imported redis-tb from ${m[2] ?? '(not said)'}, not from ${want}`);
    }
    const conn = await connection(Number(m[1]));
    let i = 0;
    for (; i < warmup + (rep - 1) * stagger; i++) await conn.send(i);
    const warmed = Date.now();
    callgrindControl(child.pid, '--instr=on');
    const files = [];
    for (let b = 0; b < window / BLOCK; b++) {
      for (let j = 0; j < BLOCK; j++, i++) await conn.send(i);
      callgrindControl(child.pid, `--dump=block${b}`);
      files.push(`${out}.${b + 1}`);
    }
    conn.close();
    const exited = once(child, 'exit');
    child.kill('SIGINT');
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    await exited;
    clearTimeout(timer);
    if (appErr.trim()) {
      fs.rmSync(path.join('/tmp', `perf-${child.pid}.map`), { force: true });
      return { variant, rep, failed: appErr.trim().split('\n')[0] };
    }
    const blocks = files.map((f) => totalOf(f) / BLOCK);
    const perRequest = blocks.reduce((a, b) => a + b, 0) / blocks.length;
    process.stderr.write(`${variant.padEnd(9)} rep ${rep}: ${fmt(perRequest)} instructions/request (blocks of ${BLOCK}: ${blocks.map(fmt).join(', ')}) | start-up + warm-up ${((warmed - started) / 1000).toFixed(0)} s, window ${((Date.now() - warmed) / 1000).toFixed(0)} s\n`);
    return { variant, rep, perRequest, blocks, files, pid: child.pid };
  } catch (e) {
    child.kill('SIGKILL');
    if (fs.existsSync(log)) process.stderr.write(fs.readFileSync(log, 'utf8').split('\n').slice(-20).join('\n'));
    throw e;
  }
}

const fmt = (n) => Math.round(n).toLocaleString('en-US');
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const h = s.length >> 1; return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2; };

// The queue: rep by rep, each redis-tb variant's now and base next to each other (base
// first on odd reps), the floors once per rep; `jobs` measurements at a time.
const queue = [];
for (let r = 1; r <= reps; r++) {
  for (const v of listed) {
    if (tbKinds.includes(v) && baseline) queue.push(...(r % 2 ? [v, `${v}@base`] : [`${v}@base`, v]).map((x) => [x, r]));
    else queue.push([v, r]);
  }
}
const t0 = Date.now();
process.stderr.write(`${queue.length} measurements, ${jobs} at a time: node ${nodeFlags.join(' ')}, ${warmup} requests of warm-up, ${window} counted; callgrind files in ${work}\n`);
const results = [];
let retries = 0;
await Promise.all(Array.from({ length: Math.min(jobs, queue.length) }, async () => {
  while (queue.length) {
    const [v, r] = queue.shift();
    for (let attempt = 1; ; attempt++) {
      const res = await measure(v, r);
      if (!res.failed) { results.push(res); break; }
      process.stderr.write(`${v} rep ${r}: the app wrote to stderr (${res.failed}): ${attempt < 3 ? 'measuring again' : 'giving up'}\n`);
      retries++;
      if (attempt === 3) throw new Error(`${v}: three failed measurements`);
    }
  }
}));
const minutes = ((Date.now() - t0) / 60000).toFixed(1);

const stats = (v) => {
  const xs = results.filter((r) => r.variant === v).map((r) => r.perRequest);
  const med = median(xs);
  return { med, xs, spread: ((Math.max(...xs) - Math.min(...xs)) / med) * 100 };
};
const cell = (s) => `${fmt(s.med)} (${s.xs.length > 1 ? `±${(s.spread / 2).toFixed(1)}%` : 'one rep'})`;
const nodeVersion = process.version;
const lines = [];
lines.push(`Instructions per request (callgrind, whole app process), node ${nodeVersion} ${nodeFlags.join(' ')}, `
  + `${warmup} requests of warm-up (+${stagger} a rep) then ${window} counted, median of ${reps} rep${reps > 1 ? 's' : ''} `
  + `(± half the max-min range over reps, of the median)${baseline ? `; base = ${baseline.short} (${baseline.date.slice(0, 10)})` : ''}. ${minutes} min`
  + `${retries ? `, ${retries} measurement${retries > 1 ? 's' : ''} run again (the app failed open)` : ''}.`);
lines.push('');
if (tbKinds.length) {
  lines.push(`| variant | now | ${baseline ? `${baseline.short} | now / ${baseline.short} |` : ''}`);
  lines.push(`|---|---:|${baseline ? '---:|---:|' : ''}`);
  for (const v of tbKinds) {
    const now = stats(v);
    const name = v === 'tb' ? 'tb (one policy)' : 'tb3 (three policies)';
    if (!baseline) { lines.push(`| ${name} | ${cell(now)} |`); continue; }
    const base = stats(`${v}@base`);
    lines.push(`| ${name} | ${cell(now)} | ${cell(base)} | ${(now.med / base.med).toFixed(3)} (${(((now.med - base.med) / base.med) * 100).toFixed(1)}%) |`);
  }
  lines.push('');
}
const floors = listed.filter((v) => !tbKinds.includes(v));
if (floors.length) {
  lines.push('| floor | instructions/request |');
  lines.push('|---|---:|');
  for (const v of floors) lines.push(`| ${v} | ${cell(stats(v))} |`);
  lines.push('');
}
if (tbKinds.length && floors.length) {
  lines.push('Over the floors (now / base, medians): '
    + tbKinds.flatMap((v) => floors.map((f) => `${v} - ${f}: ${fmt(stats(v).med - stats(f).med)}${baseline ? ` / ${fmt(stats(`${v}@base`).med - stats(f).med)}` : ''}`)).join('; '));
  lines.push('');
}
process.stdout.write(`${lines.join('\n')}\n`);

// --diff: per-function instructions per request, now minus base, over all reps' blocks
if (diffTop && baseline) {
  const perfMaps = new Map();
  const jitName = (pid, addr) => {
    if (!perfMap) return '(JIT code)';
    if (!perfMaps.has(pid)) {
      const file = path.join('/tmp', `perf-${pid}.map`);
      const entries = fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => {
        const [start, size, ...name] = l.split(' ');
        return [parseInt(start, 16), parseInt(size, 16), name.join(' ')];
      }).sort((a, b) => a[0] - b[0]) : [];
      perfMaps.set(pid, entries);
    }
    const entries = perfMaps.get(pid);
    let lo = 0;
    let hi = entries.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (entries[mid][0] <= addr) lo = mid + 1; else hi = mid - 1;
    }
    const e = entries[hi];
    // one row per JS function, whatever its tier (V8 marks them ~ ^ + *)
    if (!e || addr >= e[0] + e[1]) return '(JIT code, not in the perf map)';
    // one row per JS function and file, whatever its tier (V8 marks them ~ ^ + *) and line,
    // and the two builds' copies of redis-tb under one name, so that now and base pair up
    let name = e[2].replace(/^(JS:|LazyCompile:|Function:)?\s*[~^+*]?/, '').replace(/:\d+:\d+$/, '');
    for (const dir of [currentPackage, baseline.dir]) name = name.replace(`file://${dir}/`, 'redis-tb/');
    return `JS ${name.replace(`file://${here}/node_modules/`, '').replace(`${here}/node_modules/`, '')}`;
  };
  const profile = (variant) => {
    const sums = new Map();
    let requests = 0;
    for (const r of results.filter((x) => x.variant === variant)) {
      for (const f of r.files) {
        requests += BLOCK;
        const text = execFileSync('callgrind_annotate', ['--inclusive=no', '--threshold=100', f], { encoding: 'utf8', maxBuffer: 1 << 28 });
        for (const line of text.split('\n')) {
          const m = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$/.exec(line);
          if (!m || m[2].includes('PROGRAM TOTALS')) continue;
          let name = m[2].replace(/^\?\?\?:/, '').replace(/ \[\/usr\/bin\/node\]$/, '');
          // (callgrind marks a function's further contexts 'N)
          const jit = /^0x([0-9a-f]+)(?:'\d+)? \[\?\?\?\]$/.exec(name);
          if (jit) name = jitName(r.pid, parseInt(jit[1], 16));
          sums.set(name, (sums.get(name) ?? 0) + Number(m[1].replaceAll(',', '')));
        }
      }
    }
    return new Map([...sums].map(([k, n]) => [k, n / requests]));
  };
  for (const v of tbKinds) {
    const now = profile(v);
    const base = profile(`${v}@base`);
    const rows = [...new Set([...now.keys(), ...base.keys()])]
      .map((k) => [k, now.get(k) ?? 0, base.get(k) ?? 0])
      .sort((a, b) => Math.abs(b[1] - b[2]) - Math.abs(a[1] - a[2]))
      .slice(0, diffTop);
    process.stdout.write(`\n${v}: the ${diffTop} functions whose self instructions per request differ most, now - ${baseline.short}\n\n`
      + `| now | ${baseline.short} | difference | function |\n|---:|---:|---:|---|\n`
      + rows.map(([k, a, b]) => `| ${fmt(a)} | ${fmt(b)} | ${b <= a ? '+' : ''}${fmt(a - b)} | \`${k.slice(0, 140).replaceAll('|', '\\|')}\` |`).join('\n') + '\n');
  }
}
if (perfMap) for (const r of results) fs.rmSync(path.join('/tmp', `perf-${r.pid}.map`), { force: true });
if (!args.keep) fs.rmSync(work, { recursive: true, force: true });
process.exit(0);
