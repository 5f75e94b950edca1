// What bench.mjs and flood.mjs share: their command-line arguments, CPU pinning, free
// ports, waiting for a child's ready line, INFO commandstats, and one redis-server with
// the module whose children are killed when the script exits.
import { spawn, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '../../..');
export const modulePath = path.resolve(process.env.REDIS_TB_MODULE ?? path.join(root, 'target/release/libredis_tb.so'));

/** `--name value` pairs of the command line. */
export const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  // a flag with no value (`--no-profile` last, or before another `--name`) is 'true'
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] === undefined || all[i + 1].startsWith('--') ? 'true' : all[i + 1]]);
  return acc;
}, []));

function hasTaskset() {
  try { execFileSync('taskset', ['-V'], { stdio: 'ignore' }); return true; } catch { return false; }
}
export const pinning = os.availableParallelism() >= 2 && hasTaskset();
/** `[command, argv]` running `cmd` on CPU `cpu` when the machine has two or more. */
export const pin = (cpu, cmd, argv) => (pinning ? ['taskset', ['-c', String(cpu), cmd, ...argv]] : [cmd, argv]);

export async function freePort() {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address();
  srv.close();
  await once(srv, 'close');
  return port;
}

/** The first match of `re` in `child`'s stdout; rejects if it exits first. */
export function lineFrom(child, re, what) {
  return new Promise((resolve, reject) => {
    let acc = '';
    const onData = (d) => {
      acc += d;
      const m = re.exec(acc);
      if (m) { child.stdout.off('data', onData); resolve(m); }
    };
    child.stdout.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before it was ready:\n${acc}`)));
  });
}

export function redisCli(port, ...argv) {
  return execFileSync('redis-cli', ['-p', String(port), ...argv], { encoding: 'utf8' });
}

/** Calls per command so far, from INFO commandstats. */
export function commandCounts(port) {
  const counts = {};
  for (const line of redisCli(port, 'INFO', 'commandstats').split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    if (m) counts[m[1]] = Number(m[2]);
  }
  return counts;
}

/** Child processes, killed when this script exits. */
export const children = [];
process.on('exit', () => { for (const c of children) c.kill('SIGKILL'); });
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130));

/**
 * A redis-server with the module (without it: `{ module: false }`, for the script backend)
 * on a free port, pinned to CPU 1: its port and process.
 */
export async function startRedis({ module = true } = {}) {
  const port = await freePort();
  const [rcmd, rargs] = pin(1, 'redis-server', ['--port', String(port), '--bind', '127.0.0.1',
    '--save', '', '--appendonly', 'no', ...(module ? ['--loadmodule', modulePath] : [])]);
  const redis = spawn(rcmd, rargs, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(redis);
  await lineFrom(redis, /Ready to accept connections/, `redis-server${module ? '' : ' (no module)'}`);
  return { port, redis };
}
