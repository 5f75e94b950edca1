// Issue 27's client rules end to end: a real Express server (raw bytes on a socket, so
// headers can hold what clients really send) and a real redis-server with the module.
// Costs out of range (SPEC L3), hash tags (K4, K2), identity length (K3), key ambiguity
// (K2), header identities (I2).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import express from 'express';
import { Key, Limit, Policy, RateLimiter, TbClient, perMinute } from 'redis-tb';
import { rateLimit } from 'redis-tb/express';
import { RedisServer, closeClient, memoryLogger, nodeRedis } from './helpers.mjs';

/** One request as raw bytes (latin1: one character per byte); Connection: close. */
async function raw(port, path, headerLines = []) {
  const head = [`GET ${path} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', ...headerLines, '', ''].join('\r\n');
  const sock = net.connect(port, '127.0.0.1');
  await once(sock, 'connect');
  sock.write(Buffer.from(head, 'latin1'));
  const chunks = [];
  sock.on('data', (d) => chunks.push(d));
  await once(sock, 'close');
  const text = Buffer.concat(chunks).toString('latin1');
  const [top, ...rest] = text.split('\r\n\r\n');
  const [statusLine, ...lines] = top.split('\r\n');
  const headers = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') };
}

const h = (s) => createHash('sha256').update(Buffer.from(s, 'latin1')).digest('hex').slice(0, 32);

let server;
let redis;
let tb;
let app;
let srv;
let port;
let limiter;
let log;

before(async () => {
  server = await new RedisServer().start();
  redis = await nodeRedis(server.port);
  tb = new TbClient(redis);
  log = memoryLogger();
  limiter = new RateLimiter(redis, {
    timeoutMs: 5000,
    logger: log,
    hashTag: (req) => req.get('x-tag') ?? null,
    policies: [
      perMinute('key', 100, { key: Key.header('x-api-key'), routes: ['GET /h'] }),
      new Policy({ name: 'export', limit: Limit.perMinute(10), routes: ['GET /export'], cost: (req) => Number(req.get('x-cost') ?? 1) }),
      perMinute('p', 10, { key: (req) => req.get('x-user') ?? null, perRoute: true, routes: ['* /items/:id', 'GET /items/'] }),
    ],
  });
  app = express();
  app.use(rateLimit(limiter));
  app.get('/h', (req, res) => res.send('ok'));
  app.get('/export', (req, res) => res.send('ok'));
  app.get('/items/', (req, res) => res.send('ok'));
  app.get('/items/:id', (req, res) => res.send('ok'));
  // a 100 KB header must reach the app; the insecure parser lets a control byte reach the
  // limiter (Node's default parser answers such a request 400 itself, before any app code)
  srv = http.createServer({ maxHeaderSize: 256 * 1024, insecureHTTPParser: true }, app);
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  port = srv.address().port;
});
after(async () => {
  srv?.closeAllConnections?.();
  await new Promise((r) => (srv ? srv.close(r) : r()));
  await closeClient(redis);
  await server?.stop();
});
beforeEach(async () => { await tb.send(['FLUSHALL']); });

const keys = async () => (await tb.send(['KEYS', '*'])).map(String).sort();

describe('issue 27 end to end (Express, real redis-server)', () => {
  test('SPEC L3: costs out of range are a 500 naming the policy, never the value; nothing reaches Redis', async () => {
    const before = limiter.stats.invalidInputs;
    const lines = log.lines.length;
    for (const cost of ['abc', '-1', '1e18', 'Infinity']) {
      const r = await raw(port, '/export', [`X-Cost: ${cost}`]);
      assert.equal(r.status, 500, cost);
      assert.equal(r.headers['content-type'], 'application/problem+json');
      assert.equal(r.body, '{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit policy \'export\' got an invalid cost or limit from the application"}');
      assert.ok(!r.body.includes(cost === '-1' ? '-1' : cost), 'the value is never echoed');
      assert.equal(r.headers.ratelimit, undefined);
    }
    assert.deepEqual(await keys(), [], 'no Redis call charged anything');
    assert.equal(limiter.stats.invalidInputs - before, 4);
    assert.equal(log.lines.length - lines, 1, 'logged at most once a second per policy');
    const ok = await raw(port, '/export', ['X-Cost: 2']);
    assert.equal(ok.status, 200);
    assert.deepEqual(await keys(), ['rl:export:127.0.0.1']);
  });

  test('SPEC K4, K2: an empty tag is no tag; braces in a tag never reach the key', async () => {
    assert.equal((await raw(port, '/h', ['X-Api-Key: k1', 'X-Tag: '])).status, 200);
    assert.equal((await raw(port, '/h', ['X-Api-Key: k1', 'X-Tag: {x}'])).status, 200);
    assert.equal((await raw(port, '/h', ['X-Api-Key: k1', 'X-Tag: u42'])).status, 200);
    assert.deepEqual(await keys(), ['rl:key:k1', 'rl:{%7Bx%7D}:key:k1', 'rl:{u42}:key:k1']);
  });

  test('SPEC K3: a 100 KB header identity makes a bounded key', async () => {
    const big = 'z'.repeat(100 * 1024);
    const r = await raw(port, '/h', [`X-Api-Key: ${big}`]);
    assert.equal(r.status, 200);
    const ks = await keys();
    assert.deepEqual(ks, [`rl:key:%h${h(big)}`]);
    assert.ok(ks[0].length <= 'rl:key:'.length + 34);
  });

  test('SPEC K2: route :id with user bob and route / with user id:bob are two keys', async () => {
    assert.equal((await raw(port, '/items/7', ['X-User: bob'])).status, 200);
    assert.equal((await raw(port, '/items/', ['X-User: id:bob'])).status, 200);
    // (the policy names '* /items/:id': the key holds the request's route)
    assert.deepEqual(await keys(), ['rl:p@GET%20/items/%3Aid:bob', 'rl:p@GET%20/items/:id:bob']);
  });

  test('SPEC I2: non-ASCII bytes are kept, duplicated lines are one identity, a control byte is a 400', async () => {
    assert.equal((await raw(port, '/h', ['X-Api-Key: caf\u00e9'])).status, 200);
    assert.equal((await raw(port, '/h', ['X-Api-Key: k', 'X-Api-Key: x1'])).status, 200);
    const bad = await raw(port, '/h', ['X-Api-Key: a\u0001b']);
    assert.equal(bad.status, 400);
    assert.equal(bad.headers['content-type'], 'application/problem+json');
    assert.equal(bad.body, '{"type":"about:blank","title":"Bad Request","status":400,"detail":"header \'x-api-key\' holds a control byte"}');
    assert.deepEqual(await keys(), ['rl:key:caf%E9', 'rl:key:k,%20x1']);
  });
});
