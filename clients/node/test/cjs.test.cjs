// require() of every entry point (the CommonJS build), used against a real server.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

test('require() loads the CommonJS build of every entry point', () => {
  assert.match(require.resolve('redis-tb'), /dist[\\/]cjs[\\/]index\.js$/);
  const tbLib = require('redis-tb');
  for (const name of ['TbClient', 'RateLimiter', 'RedisTbError', 'ModuleNotLoadedError', 'RedisTbStore', 'Scheduler',
    'SchedulerWaitTooLongError', 'ClientIpConfig', 'Limit', 'Policy', 'perMinute', 'tiered', 'decisionHeaders']) {
    assert.equal(typeof tbLib[name], 'function', name);
  }
  assert.equal(typeof require('redis-tb/express').rateLimit, 'function');
  assert.equal(typeof require('redis-tb/fastify').fastifyRateLimit, 'function');
  assert.equal(typeof require('redis-tb/fastify').default, 'function');
  assert.equal(typeof require('redis-tb/prometheus').PrometheusMetrics, 'function');
});

test('require()d client against a real server, errors typed', async () => {
  const { RedisServer, nodeRedis, closeClient } = await import(path.join(__dirname, 'helpers.mjs'));
  const { TbClient, RedisTbError } = require('redis-tb');
  const server = await new RedisServer().start();
  const redis = await nodeRedis(server.port);
  try {
    const tb = new TbClient(redis);
    await tb.checkModule();
    assert.deepEqual(await tb.take('cjs', 2, 1, 1, { now: 1764456268.5 }), { allowed: true, remaining: 1, retryAfter: 0, resetAfter: 1 });
    await assert.rejects(tb.take('cjs', -1, 1), (err) => err instanceof RedisTbError && err.command === 'TB.TAKE');
  } finally {
    await closeClient(redis);
    await server.stop();
  }
});
