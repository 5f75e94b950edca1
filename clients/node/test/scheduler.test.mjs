// The outbound scheduler: several processes (child_process.fork) on one TB.RESERVE bucket;
// the calls over time never exceed the bucket.
import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { Scheduler, SchedulerWaitTooLongError, TbClient } from 'redis-tb';
import { RedisServer, closeClient, nodeRedis } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
let server;
before(async () => { server = await new RedisServer().start(); });
after(async () => { await server?.stop(); });

/**
 * Timer lateness (a loaded machine delays a process's timers) can only bunch calls
 * together, so `slackMs` (100) widens each interval by that much.
 *
 * The largest excess of any interval [t_i, t_j] over what the bucket allows:
 * count - (capacity + rate * (t_j - t_i)). <= 0 means within the bucket. `slackMs`
 * widens each interval for timer and clock jitter between processes.
 */
function worstExcess(times, capacity, rate, slackMs) {
  const t = [...times].sort((a, b) => a - b);
  let worst = -Infinity;
  for (let i = 0; i < t.length; i++) {
    for (let j = i; j < t.length; j++) {
      const allowed = capacity + (rate * (t[j] - t[i] + slackMs)) / 1000;
      worst = Math.max(worst, j - i + 1 - allowed);
    }
  }
  return worst;
}

async function runWorkers({ workers, calls, capacity, rate, maxWait }) {
  const children = Array.from({ length: workers }, (_, i) => fork(path.join(here, 'scheduler-worker.mjs'), [JSON.stringify({
    port: server.port, calls, capacity, rate, maxWait, client: i % 2 ? 'ioredis' : 'node-redis',
  })]));
  await Promise.all(children.map((child) => once(child, 'message')));
  for (const child of children) child.send('go');
  const results = await Promise.all(children.map(async (child) => {
    const [msg] = await once(child, 'message');
    const [code] = await once(child, 'exit');
    assert.equal(code, 0);
    return msg;
  }));
  return { times: results.flatMap((r) => r.times), tooLong: results.reduce((s, r) => s + r.tooLong, 0) };
}

test('4 processes on one bucket: the calls never exceed capacity + rate x interval', async () => {
  const capacity = 2;
  const rate = 5;
  const { times, tooLong } = await runWorkers({ workers: 4, calls: 4, capacity, rate, maxWait: 30 });
  assert.equal(times.length, 16);
  assert.equal(tooLong, 0);
  const excess = worstExcess(times, capacity, rate, 100);
  assert.ok(excess <= 0, `the calls exceeded the bucket by ${excess}`);
  // the bucket was the bottleneck: 16 calls at 5/s after a burst of 2 take >= 2.8 s
  const span = Math.max(...times) - Math.min(...times);
  assert.ok(span >= 2700, `span ${span} ms`);
  // and the same check catches calls made without the scheduler (all at once)
  assert.ok(worstExcess(Array(16).fill(times[0]), capacity, rate, 100) > 0);
});

test('a wait beyond maxWait rejects with SchedulerWaitTooLongError and books nothing', async () => {
  const redis = await nodeRedis(server.port);
  try {
    const scheduler = new Scheduler(redis, { capacity: 1, rate: 1, maxWait: 1.5, prefix: 'mw:' });
    const ran = [];
    const results = await Promise.allSettled([1, 2, 3].map((i) => scheduler.schedule('k', () => { ran.push(i); return i; })));
    const rejected = results.filter((r) => r.status === 'rejected');
    assert.equal(rejected.length, 1);
    assert.ok(rejected[0].reason instanceof SchedulerWaitTooLongError);
    assert.ok(rejected[0].reason.retryAfter > 0);
    assert.equal(ran.length, 2);
    // booking directly: 0 s, 1 s, then 2 s > maxWait is refused and takes nothing
    assert.equal(await scheduler.book('b'), 0);
    const second = await scheduler.book('b');
    assert.ok(second > 0.9 && second <= 1, `second wait ${second}`);
    await assert.rejects(scheduler.book('b'), SchedulerWaitTooLongError);
    const peek = await new TbClient(redis).peek('mw:b', 1, 1);
    assert.ok(peek.remaining > -1.01 && peek.remaining < -0.9, `the refused booking took nothing: ${peek.remaining}`);
    await assert.rejects(scheduler.schedule('k', () => 0, { cost: 2 }), (err) => err instanceof SchedulerWaitTooLongError && err.retryAfter === -1);
  } finally {
    await closeClient(redis);
  }
});
