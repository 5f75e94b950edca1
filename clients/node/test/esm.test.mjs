// import of every entry point (the ESM build).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import * as tbLib from 'redis-tb';
import expressDefault, { rateLimit } from 'redis-tb/express';
import fastifyDefault, { fastifyRateLimit } from 'redis-tb/fastify';
import { PrometheusMetrics } from 'redis-tb/prometheus';

test('import loads the ESM build of every entry point', () => {
  assert.match(import.meta.resolve('redis-tb'), /dist\/esm\/index\.js$/);
  for (const name of ['TbClient', 'RateLimiter', 'RedisTbError', 'ModuleNotLoadedError', 'RedisTbStore', 'Scheduler', 'ClientIpConfig', 'Policy']) {
    assert.equal(typeof tbLib[name], 'function', name);
  }
  assert.equal(expressDefault, rateLimit);
  assert.equal(fastifyDefault, fastifyRateLimit);
  assert.equal(typeof PrometheusMetrics, 'function');
  // both builds exist side by side; each is complete on its own
  const require = createRequire(import.meta.url);
  assert.notEqual(require('redis-tb').TbClient, tbLib.TbClient);
});
