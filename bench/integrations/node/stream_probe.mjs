// Issue 39's probes of an example's `GET /stream` (rows L3, L5): one client asks for a long
// stream, reads the response's head and then nothing more (its socket paused: the kernel's
// buffers fill, then the app's writes must wait), and leaves after --leave-after seconds
// (or never). Meanwhile a second client asks GET /healthz one request after another; its
// slowest answer is how long the app's event loop was blocked. From /proc, every 50 ms, the
// app's resident memory and CPU time. After the client left (or for --seconds when it never
// does), how long until the stream's lease was released (the metrics gauge
// redis_tb_leases_in_flight{policy="streams"} back to 0), how long until its 'tokens' hold
// was settled (TB.PEEK rl:tokens:<ip> HOLDS back to 0 holds), and the CPU the app spent
// meanwhile. And the bytes the app logged.
//
//   node bench/integrations/node/stream_probe.mjs --example express|fastify [--app-dir DIR]
//        [--query 'tokens=1000000'] [--leave-after 3|never] [--seconds 10]
//
// The example must be built (npm ci && npm run build in examples/<name>); --app-dir runs
// another copy of it (e.g. an older commit's, for a before/after). Prints one JSON line.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { args, children, redisCli, root, startRedis } from './harness.mjs';

const example = args.example ?? 'express';
const appDir = path.resolve(args['app-dir'] ?? path.join(root, 'examples', example));
const query = args.query ?? 'tokens=1000000';
const leaveAfter = (args['leave-after'] ?? '3') === 'never' ? null : Number(args['leave-after'] ?? 3);
const seconds = Number(args.seconds ?? 10);
const TICK = 100; // clock ticks a second (/proc/<pid>/stat), Linux's USER_HZ

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function memory(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
}

function cpuSeconds(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICK; // utime + stime
}

function get(base, pathname) {
  return new Promise((resolve, reject) => {
    const req = http.get(new URL(pathname, base), { agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.setTimeout(30_000, () => req.destroy(new Error(`timeout ${pathname}`)));
  });
}

async function streamsInFlight(base) {
  const { body } = await get(base, '/metrics');
  const m = /^redis_tb_leases_in_flight\{[^}]*policy="streams"[^}]*\} (\S+)$/m.exec(body);
  return m ? Number(m[1]) : 0;
}

const { port: redisPort } = await startRedis();
const app = spawn(process.execPath, ['dist/src/server.js'], {
  cwd: appDir,
  env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${redisPort}`, PORT: '0', HOST: '127.0.0.1', REDIS_TB_TIMEOUT_MS: '2000' },
  stdio: ['ignore', 'pipe', 'pipe'],
});
children.push(app);
let logged = 0;
let output = '';
const base = await new Promise((resolve, reject) => {
  const onData = (d) => {
    output += d;
    const m = /listening on (http:\/\/\S+)/.exec(output);
    if (m) resolve(m[1]);
  };
  app.stdout.on('data', onData);
  app.stderr.on('data', onData);
  app.once('exit', (code) => reject(new Error(`the app exited (${code}):\n${output}`)));
});
let log = '';
const onLog = (d) => {
  logged += d.length;
  if (log.length < 2000) log += d;
};
app.stdout.on('data', onLog);
app.stderr.on('data', onLog);
await get(base, '/healthz');
const before = memory(app.pid);
const cpu0 = cpuSeconds(app.pid);

// the client that stops reading after the head
const url = new URL(base);
const client = net.connect(Number(url.port), url.hostname);
let head = '';
let status = null;
const started = performance.now();
const gotHead = new Promise((resolve) => {
  client.on('data', (d) => {
    if (status !== null) return;
    head += d.toString('latin1');
    const line = /^HTTP\/1\.1 (\d{3})/.exec(head);
    if (line && head.includes('\r\n\r\n')) {
      status = Number(line[1]);
      client.pause(); // reads nothing more
      resolve();
    }
  });
  client.on('close', resolve);
});
client.on('error', () => {});
client.write(`GET /stream?${query} HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`);

// the event loop: the slowest of sequential GET /healthz
let slowest = 0;
let probes = 0;
let stop = false;
const loop = (async () => {
  while (!stop) {
    const t0 = performance.now();
    await get(base, '/healthz');
    slowest = Math.max(slowest, performance.now() - t0);
    probes += 1;
    await sleep(10);
  }
})();

let peak = before.rss;
const sampler = setInterval(() => {
  try {
    peak = Math.max(peak, memory(app.pid).rss);
  } catch { /* exited */ }
}, 50);

await Promise.race([gotHead, sleep(seconds * 1000)]);
const headMs = performance.now() - started;
let leftAt = null;
let cpuAtLeave = null;
if (leaveAfter !== null) {
  await sleep(Math.max(0, leaveAfter * 1000 - (performance.now() - started)));
  client.destroy();
  leftAt = performance.now();
  cpuAtLeave = cpuSeconds(app.pid);
}
// until the lease is released and the hold settled, or the end of the probe
let releasedAt = null;
let settledAt = null;
const holds = () => Number(redisCli(redisPort, 'TB.PEEK', 'rl:tokens:127.0.0.1', 'HOLDS').split('\n')[0]);
const until = started + seconds * 1000;
while (performance.now() < until && status === 200) {
  if (releasedAt === null && (await streamsInFlight(base)) === 0) releasedAt = performance.now();
  if (settledAt === null && holds() === 0) settledAt = performance.now();
  if (releasedAt !== null && settledAt !== null) break;
  await sleep(50);
}
if (releasedAt === null || settledAt === null) await sleep(Math.max(0, until - performance.now()));
stop = true;
await loop;
clearInterval(sampler);
const after = memory(app.pid);
const cpu1 = cpuSeconds(app.pid);
client.destroy();
const timedOut = /redis_tb_leases_timed_out_total\{[^}]*policy="streams"[^}]*\} (\S+)/.exec((await get(base, '/metrics')).body);
app.kill('SIGTERM');

const r2 = (x) => (x === null ? null : Math.round(x * 100) / 100);
console.log(JSON.stringify({
  example, appDir: path.relative(root, appDir) || appDir, query, leaveAfter, seconds,
  status, headMs: Math.round(headMs),
  eventLoopBlockedMaxMs: Math.round(slowest), healthzProbes: probes,
  rssBeforeMB: r2(before.rss), rssPeakMB: r2(Math.max(peak, after.hwm)), rssAfterMB: r2(after.rss),
  cpuSeconds: r2(cpu1 - cpu0),
  cpuAfterLeaveSeconds: cpuAtLeave === null ? null : r2(cpu1 - cpuAtLeave),
  leaseReleasedAfterLeaveMs: releasedAt === null || leftAt === null ? null : Math.round(releasedAt - leftAt),
  leaseReleasedAfterStartMs: releasedAt === null ? null : Math.round(releasedAt - started),
  holdSettledAfterLeaveMs: settledAt === null || leftAt === null ? null : Math.round(settledAt - leftAt),
  holdSettledAfterStartMs: settledAt === null ? null : Math.round(settledAt - started),
  leasesTimedOut: timedOut ? Number(timedOut[1]) : null,
  loggedBytes: logged,
  logHead: log.slice(0, 300),
}));
process.exit(0);
