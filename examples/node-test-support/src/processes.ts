// Real processes for the examples' end-to-end tests: a redis-server with the module on a free
// loopback port (stoppable and restartable on the same port), the example app as its own
// process, and a small HTTP client that can choose its source address (127.0.0.2 is the
// trusted proxy of the app under test).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/**
 * The example under test: the working directory, as `npm test` and run-example-tests.sh
 * run the tests from the example's folder (this package is a copy in its node_modules).
 */
export const exampleDir = process.cwd();
/** The module redis-server loads: REDIS_TB_MODULE, relative to the example's folder. */
export const modulePath = path.resolve(exampleDir, process.env.REDIS_TB_MODULE ?? '../../target/release/libredis_tb.so');

export async function freePort(): Promise<number> {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const addr = srv.address();
  srv.close();
  await once(srv, 'close');
  if (addr === null || typeof addr === 'string') throw new Error('no port');
  return addr.port;
}

/** Resolves with the first match of `re` in the child's stdout+stderr; rejects if it exits first. */
function waitFor(child: ChildProcess, re: RegExp, what: string, timeoutMs = 20_000): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    let acc = '';
    const done = (err: Error | null, m?: RegExpExecArray): void => {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.stderr?.off('data', onData);
      child.off('exit', onExit);
      if (err) reject(err);
      else resolve(m as RegExpExecArray);
    };
    const onData = (d: Buffer): void => {
      acc += d.toString();
      const m = re.exec(acc);
      if (m) done(null, m);
    };
    const onExit = (code: number | null): void => done(new Error(`${what} exited (${code}) before it was ready:\n${acc}`));
    const timer = setTimeout(() => done(new Error(`${what} not ready after ${timeoutMs} ms:\n${acc}`)), timeoutMs);
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.on('exit', onExit);
  });
}

async function stopChild(child: ChildProcess | undefined, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill(signal);
  const t = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(t);
}

export class RedisServer {
  private child: ChildProcess | undefined;
  constructor(readonly port: number, readonly loadModule = true, readonly cluster = false) {}

  static async start(loadModule = true): Promise<RedisServer> {
    const s = new RedisServer(await freePort(), loadModule);
    await s.start();
    return s;
  }

  /** A one-node Redis Cluster with the module, owning every slot (a plain client reaches every key). */
  static async startCluster(): Promise<RedisServer> {
    const s = new RedisServer(await freePort(), true, true);
    await s.start();
    await command(s.port, ['CLUSTER', 'ADDSLOTSRANGE', '0', '16383']);
    for (let i = 0; i < 500; i++) {
      if (/cluster_state:ok/.test(String(await command(s.port, ['CLUSTER', 'INFO'])))) return s;
      await sleep(10);
    }
    throw new Error('the cluster never came up');
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    if (this.loadModule) args.push('--loadmodule', modulePath);
    if (this.cluster) {
      args.push('--cluster-enabled', 'yes', '--cluster-config-file', path.join(os.tmpdir(), `redis-tb-example-nodes-${this.port}-${process.pid}.conf`));
    }
    this.child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    await waitFor(this.child, /Ready to accept connections/, 'redis-server');
  }

  /** Stops the server (its data goes with it: nothing is saved). */
  async stop(): Promise<void> {
    await stopChild(this.child);
    this.child = undefined;
  }
}

export class AppProcess {
  private child: ChildProcess | undefined;
  url = '';
  output = '';
  constructor(readonly script: string, readonly env: Record<string, string>) {}

  /** Starts the app and waits for its `listening on <url>` line. */
  async start(): Promise<this> {
    const child = this.spawnOnly().child as ChildProcess;
    const m = await waitFor(child, /listening on (http:\/\/\S+)/, this.script);
    this.url = m[1] as string;
    return this;
  }

  /** Waits for the process to exit by itself (for startup failures). */
  async exited(timeoutMs = 20_000): Promise<number | null> {
    const child = this.child;
    if (child === undefined) throw new Error('not started');
    if (child.exitCode !== null) return child.exitCode;
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const [code] = (await once(child, 'exit')) as [number | null];
    clearTimeout(t);
    return code;
  }

  /** Starts the app without waiting for it (its output collects in `output`). */
  spawnOnly(): this {
    this.child = spawn(process.execPath, [path.join(exampleDir, this.script)], {
      cwd: exampleDir,
      env: { ...process.env, PORT: '0', HOST: '127.0.0.1', ...this.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout?.on('data', (d: Buffer) => { this.output += d.toString(); });
    this.child.stderr?.on('data', (d: Buffer) => { this.output += d.toString(); });
    return this;
  }

  async stop(): Promise<void> {
    await stopChild(this.child);
    this.child = undefined;
  }
}

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  json(): any;
}

export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: unknown;
  /** The source address: the app trusts 127.0.0.2 as its proxy. */
  localAddress?: string;
}

/** One HTTP request on a fresh connection (so each can choose its source address). */
export function request(base: string, pathname: string, opts: RequestOptions = {}): Promise<Reply> {
  const url = new URL(pathname, base);
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  let payload: string | undefined;
  if (opts.body !== undefined) {
    payload = JSON.stringify(opts.body);
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(payload));
  }
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: url.hostname,
      port: url.port,
      path: url.pathname + url.search,
      method: opts.method ?? 'GET',
      headers,
      agent: false,
      localAddress: opts.localAddress,
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body, json: () => JSON.parse(body) });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error(`timeout: ${pathname}`)));
    req.end(payload);
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type RespValue = string | number | null | RespValue[];

/** Parses one RESP2 reply at `at`: [value, next offset], or null when incomplete. */
function parseResp(buf: string, at: number): [RespValue, number] | null {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return null;
  const kind = buf[at];
  const line = buf.slice(at + 1, eol);
  if (kind === '+') return [line, eol + 2];
  if (kind === '-') throw new Error(line);
  if (kind === ':') return [Number(line), eol + 2];
  if (kind === '$') {
    const n = Number(line);
    if (n < 0) return [null, eol + 2];
    if (buf.length < eol + 2 + n + 2) return null;
    return [buf.slice(eol + 2, eol + 2 + n), eol + 2 + n + 2];
  }
  if (kind === '*') {
    const n = Number(line);
    if (n < 0) return [null, eol + 2];
    const out: RespValue[] = [];
    let next = eol + 2;
    for (let i = 0; i < n; i++) {
      const item = parseResp(buf, next);
      if (item === null) return null;
      out.push(item[0]);
      next = item[1];
    }
    return [out, next];
  }
  throw new Error(`unexpected RESP reply: ${buf.slice(at, at + 40)}`);
}

/** One Redis command on its own connection (RESP2), for reading what the app left in Redis. */
export function command(port: number, args: string[]): Promise<RespValue> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let acc = '';
    s.setEncoding('latin1');
    s.on('data', (d: string) => {
      acc += d;
      try {
        const r = parseResp(acc, 0);
        if (r !== null) {
          s.destroy();
          resolve(r[0]);
        }
      } catch (err) {
        s.destroy();
        reject(err);
      }
    });
    s.on('error', reject);
    s.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`);
  });
}

/** A GET that reads the response's head and nothing more, and can leave at any time. */
export class PausedStream {
  readonly socket: net.Socket;
  /** resolves with the status when the head arrived (or null when the connection closed first) */
  readonly head: Promise<number | null>;
  /** resolves when the connection closed (by either side; a paused client sees the app's close once it reads: {@link drainToClose}) */
  readonly closed: Promise<void>;

  constructor(base: string, pathname: string, opts: { headers?: Record<string, string>; localAddress?: string } = {}) {
    const url = new URL(pathname, base);
    this.socket = net.connect({ host: url.hostname, port: Number(url.port), localAddress: opts.localAddress });
    this.socket.on('error', () => {});
    let acc = '';
    this.head = new Promise((resolve) => {
      const onData = (d: Buffer): void => {
        acc += d.toString('latin1');
        const m = /^HTTP\/1\.1 (\d{3})/.exec(acc);
        if (m && acc.includes('\r\n\r\n')) {
          this.socket.off('data', onData);
          this.socket.pause(); // reads nothing more
          resolve(Number(m[1]));
        }
      };
      this.socket.on('data', onData);
      this.socket.once('close', () => resolve(null));
    });
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
    const headers = Object.entries(opts.headers ?? {}).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    this.socket.write(`GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n${headers}\r\n`);
  }

  /** Reads (and drops) what arrived, so the app's close, queued behind it, is seen: resolves at the close. */
  drainToClose(): Promise<void> {
    this.socket.on('data', () => {});
    this.socket.resume();
    return this.closed;
  }

  /** The client goes away. */
  leave(): void {
    this.socket.destroy();
  }
}
