// redis-tb's Fastify plugin registered at the root and again in a child context (a stricter
// limiter on a route group): no FST_ERR_DEC_ALREADY_PRESENT, both limiters checked in
// registration order, a request refused if either refuses, the child not consulted after
// the root refuses. A real redis-server with the module, a real HTTP server on loopback.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { createClient } from 'redis';
import { RateLimiter, TbClient, perMinute } from 'redis-tb';
import { fastifyRateLimit } from 'redis-tb/fastify';
import { RedisServer, request, sf } from 'redis-tb-node-test-support';

let server: RedisServer;
let redis: ReturnType<typeof createClient>;
let app: FastifyInstance;
let base: string;

before(async () => {
  server = await RedisServer.start();
  redis = await createClient({ url: server.url }).connect();
  // timeouts: these tests check answers, not speed (the 50 ms default is tested in clients/node)
  const root = new RateLimiter(redis, { policies: [perMinute('ip', 3)], prefix: 'root', timeoutMs: 5000 });
  const group = new RateLimiter(redis, { policies: [perMinute('admin', 2)], prefix: 'group', timeoutMs: 5000 });
  app = Fastify();
  await app.register(fastifyRateLimit, { limiter: root });
  app.get('/open', async () => ({ ok: true }));
  await app.register(async (admin) => {
    await admin.register(fastifyRateLimit, { limiter: group });
    admin.get('/stats', async (request) => ({ outcome: request.rateLimit?.outcome }));
  }, { prefix: '/admin' });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
});

after(async () => {
  await app?.close();
  await redis?.close();
  await server?.stop();
});

test('root + child registration: both limiters, either refuses, the root first', async () => {
  const tb = new TbClient(redis);
  const tokens = async (key: string, cap: number) => (await tb.peek(key, cap, cap / 60)).remaining;
  const a = await request(base, '/admin/stats');
  assert.equal(a.status, 200);
  assert.deepEqual(sf(a.headers['ratelimit-policy']).map(([n]) => n), ['ip', 'admin'], 'both limiters, the root first');
  assert.equal((await request(base, '/open')).status, 200);
  assert.deepEqual(sf((await request(base, '/open')).headers['ratelimit-policy']).map(([n]) => n), ['ip'], 'outside the group: the root only');
  // the root's 3 are spent: the next group request is refused by the root, the child not called
  const before = await tokens('group:admin:127.0.0.1', 2);
  const r = await request(base, '/admin/stats');
  assert.equal(r.status, 429);
  assert.deepEqual(r.json().violated_policies, ['ip']);
  assert.ok(Math.abs((await tokens('group:admin:127.0.0.1', 2)) - before) < 0.1, 'nothing charged on the child');
  // the root's bucket back: the child's 2 run out (one spent above) and the child refuses
  await tb.send(['DEL', 'root:ip:127.0.0.1']);
  assert.equal((await request(base, '/admin/stats')).status, 200);
  const c = await request(base, '/admin/stats');
  assert.equal(c.status, 429);
  assert.deepEqual(c.json().violated_policies, ['admin']);
});
