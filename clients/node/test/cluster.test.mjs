// SPEC K6, L5, U3 against a real single-node Redis Cluster with the module (cluster-enabled,
// every slot on the one node, so a plain client reaches every key and the server answers
// CROSSSLOT for a call whose keys are in different slots): a limiter that sends several
// keys in one call without a tag function is refused at startup; with a tag function it
// starts and limits; started degraded (Redis down at its start), its calls get 500s, never
// the failure mode's unlimited admissions.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { ClusterKeysError, Key, Limit, Policy, RateLimiter } from 'redis-tb';
import { rateLimit } from 'redis-tb/express';
import { RedisServer, closeClient, freePort, memoryLogger, nodeRedis, request, sleep } from './helpers.mjs';
import { listenExpress } from './http-helpers.mjs';

const U3_LINE = "redis-tb: limiter 'api' sends several keys in one call (policies 'ip', 'user'), which a Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC K6)";
const K6_BODY = '{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit policies \'ip\', \'user\' have keys in different cluster slots: give the limiter a hash tag"}';

function apiPolicies() {
  return [
    new Policy({ name: 'ip', limit: new Limit(3, 1e-9) }),
    new Policy({ name: 'user', limit: new Limit(100, 1e-9), key: Key.header('x-user') }),
  ];
}

/** A one-node cluster owning every slot, on `port` (a free one when not given). */
async function clusterServer(dir, port) {
  const server = new RedisServer({ args: ['--cluster-enabled', 'yes', '--cluster-config-file', path.join(dir, `nodes-${Date.now()}.conf`)] });
  if (port) server.port = port;
  await server.start();
  const c = await nodeRedis(server.port);
  try {
    await c.sendCommand(['CLUSTER', 'ADDSLOTSRANGE', '0', '16383']);
    for (let i = 0; i < 500; i++) {
      if (/cluster_state:ok/.test(String(await c.sendCommand(['CLUSTER', 'INFO'])))) return server;
      await sleep(10);
    }
    throw new Error('the cluster never came up');
  } finally {
    await closeClient(c);
  }
}

async function serve(limiter) {
  const app = express();
  app.use(rateLimit(limiter, { policies: apiPolicies() }));
  app.get('/x', (req, res) => { res.json({ ok: true }); });
  return listenExpress(app);
}

describe('on a Redis Cluster (SPEC K6, U3)', () => {
  let dir;
  let server;
  let redis;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redis-tb-cluster-'));
    server = await clusterServer(dir);
    redis = await nodeRedis(server.port);
  });
  after(async () => {
    await closeClient(redis);
    await server?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('HELLO says cluster: a limiter sending several keys without a tag function fails its start with U3\'s line', async () => {
    const log = memoryLogger();
    const limiter = new RateLimiter(redis, { name: 'api', logger: log });
    limiter.register(apiPolicies());
    await assert.rejects(limiter.startup(), (err) => err instanceof ClusterKeysError && err.message === U3_LINE);
    assert.deepEqual(log.lines, []);
  });

  test('with a tag function it starts and limits: the keys of one call share the tag\'s slot', async () => {
    const limiter = new RateLimiter(redis, { name: 'api', logger: memoryLogger(), hashTag: (req) => req.get('x-user') ?? 'anonymous' });
    const web = await serve(limiter);
    try {
      await limiter.startup();
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push((await request(`${web.url}/x`, { headers: { 'x-user': 'alice' } })).status);
      assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
      const keys = (await redis.sendCommand(['KEYS', 'rl:*'])).sort();
      assert.deepEqual(keys, ['rl:{alice}:ip:127.0.0.1', 'rl:{alice}:user:alice']);
      assert.equal(limiter.stats.invalidInputs, 0);
      assert.equal(limiter.stats.storeErrors, 0);
    } finally {
      await web.close();
    }
  });

  test('started degraded without a tag function: every call is a 500 naming the policies, none admitted (K6)', async () => {
    const port = await freePort();
    // Redis is down when the limiter starts: a degraded start, the cluster check skipped
    const client = await import('redis').then(({ createClient }) => createClient({
      socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50 }, disableOfflineQueue: true,
    }));
    client.on('error', () => {});
    const connecting = client.connect().catch(() => undefined);
    const log = memoryLogger();
    const limiter = new RateLimiter(client, { name: 'api', logger: log, startDegraded: true, timeoutMs: 2000 });
    const web = await serve(limiter);
    let late;
    try {
      await limiter.startup();
      assert.equal(log.lines.length, 1);
      assert.match(log.lines[0], /unreachable at startup; starting degraded \(the limiter's failure mode applies until it answers\)$/);
      // then Redis comes up, as a cluster
      late = await clusterServer(dir, port);
      await connecting;
      for (let i = 0; i < 500 && !client.isReady; i++) await sleep(10);
      assert.ok(client.isReady, 'the client reconnected');
      const replies = [];
      for (let i = 0; i < 6; i++) replies.push(await request(`${web.url}/x`, { headers: { 'x-user': 'bob' } }));
      assert.deepEqual(replies.map((r) => r.status), [500, 500, 500, 500, 500, 500]);
      for (const r of replies) {
        assert.equal(r.body, K6_BODY);
        assert.equal(r.headers['content-type'], 'application/problem+json');
      }
      assert.equal(limiter.stats.invalidInputs, 6);
      assert.equal(limiter.stats.storeErrors, 0);
      assert.equal(limiter.stats.degraded, 0);
      // logged at most once a second per limiter
      assert.equal(log.lines.filter((l) => l.includes('CROSSSLOT')).length, 1);
    } finally {
      await web.close();
      await closeClient(client);
      await late?.stop();
    }
  });
});
