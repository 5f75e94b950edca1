// Real processes for the examples' end-to-end tests: a redis-server with the module on a free
// loopback port (stoppable and restartable on the same port), the example app as its own
// process, and a small HTTP client that can choose its source address (127.0.0.2 is the
// trusted proxy of the app under test).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
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
  constructor(readonly port: number, readonly loadModule = true) {}

  static async start(loadModule = true): Promise<RedisServer> {
    const s = new RedisServer(await freePort(), loadModule);
    await s.start();
    return s;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    if (this.loadModule) args.push('--loadmodule', modulePath);
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
