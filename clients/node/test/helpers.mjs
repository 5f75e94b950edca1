// Test helpers: real redis-server processes on free loopback ports (with or without the
// module), the two Redis clients, and a plain node:http request function.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { Redis } from 'ioredis';

const here = path.dirname(fileURLToPath(import.meta.url));
export const MODULE = path.resolve(process.env.REDIS_TB_MODULE ?? path.join(here, '../../../target/release/libredis_tb.so'));
export const REDIS_SERVER = process.env.REDIS_SERVER ?? 'redis-server';

export async function freePort() {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

async function waitReady(port, deadlineMs = 10000) {
  const until = Date.now() + deadlineMs;
  for (;;) {
    try {
      await new Promise((resolve, reject) => {
        const s = net.connect(port, '127.0.0.1');
        s.once('connect', () => s.write('PING\r\n'));
        s.once('data', (d) => { s.destroy(); d.toString().startsWith('+PONG') ? resolve() : reject(new Error(d.toString())); });
        s.once('error', reject);
      });
      return;
    } catch (err) {
      if (Date.now() > until) throw new Error(`redis-server on ${port} not ready: ${err}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

/** A redis-server on a free port; `withModule: false` starts one without redis-tb. */
export class RedisServer {
  constructor({ withModule = true, args = [] } = {}) {
    this.withModule = withModule;
    this.args = args;
    this.port = 0;
    this.proc = null;
  }

  async start() {
    if (!this.port) this.port = await freePort();
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--protected-mode', 'no', ...this.args];
    if (this.withModule) args.push('--loadmodule', MODULE);
    this.proc = spawn(REDIS_SERVER, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    this.proc.stdout.on('data', (d) => { output += d; });
    this.proc.stderr.on('data', (d) => { output += d; });
    const exited = once(this.proc, 'exit').then(() => { throw new Error(`redis-server exited: ${output}`); });
    await Promise.race([waitReady(this.port), exited]);
    exited.catch(() => {});
    return this;
  }

  /** SIGKILL, as a crash: clients see the connection drop. */
  async kill() {
    if (!this.proc) return;
    const p = this.proc;
    this.proc = null;
    p.kill('SIGKILL');
    if (p.exitCode === null && p.signalCode === null) await once(p, 'exit');
  }

  async stop() {
    await this.kill();
  }
}

export async function nodeRedis(port, extra = {}) {
  const c = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50 }, disableOfflineQueue: true, ...extra });
  c.on('error', () => {});
  await c.connect();
  return c;
}

export async function ioRedis(port, extra = {}) {
  const c = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: false, maxRetriesPerRequest: 0,
    retryStrategy: () => 50, lazyConnect: true, ...extra });
  c.on('error', () => {});
  await c.connect();
  return c;
}

export async function closeClient(c) {
  try {
    if (typeof c.quit === 'function' && c.options && 'enableOfflineQueue' in c.options) c.disconnect();
    else if (typeof c.destroy === 'function') c.destroy();
    else await c.quit();
  } catch { /* already closed */ }
}

/** The two clients, as `[name, factory]` pairs for parametrised tests. */
export const CLIENTS = [['node-redis', nodeRedis], ['ioredis', ioRedis]];

/** One HTTP request over node:http: { status, headers, body, json }. */
export function request(url, { method = 'GET', headers = {}, body, localAddress } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, localAddress, agent: false }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => {
        let json;
        try { json = JSON.parse(data); } catch { json = undefined; }
        resolve({ status: res.statusCode, headers: res.headers, body: data, json });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** A logger that keeps its lines. */
export function memoryLogger() {
  const lines = [];
  return { lines, warn: (m) => lines.push(m) };
}

/** INFO commandstats calls of one command on a server (0 when never called). */
export async function commandCalls(client, command) {
  const info = 'isCluster' in client ? await client.call('INFO', 'commandstats') : await client.sendCommand(['INFO', 'commandstats']);
  const m = new RegExp(`^cmdstat_${command.toLowerCase().replace('.', '\\.')}:calls=(\\d+)`, 'm').exec(String(info));
  return m ? Number(m[1]) : 0;
}

/** The limiter's checks Redis ran: TB.TAKE (one policy) plus TB.MTAKE (several). */
export async function checkCalls(client) {
  return (await commandCalls(client, 'tb.take')) + (await commandCalls(client, 'tb.mtake'));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** node-redis v4 (the `redis-v4` alias of redis@4), for the tests that cover both majors. */
export async function nodeRedisV4(port, extra = {}) {
  const { createClient: createV4 } = await import('redis-v4');
  const c = createV4({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50 }, disableOfflineQueue: true, ...extra });
  c.on('error', () => {});
  await c.connect();
  return c;
}
