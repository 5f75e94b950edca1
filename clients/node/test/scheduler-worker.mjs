// A worker process of the scheduler test: schedules its calls on the shared bucket and
// reports each call's wall-clock time (ms) to the parent.
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { Scheduler, SchedulerWaitTooLongError } from 'redis-tb';

const { port, calls, capacity, rate, maxWait, client } = JSON.parse(process.argv[2]);
const redis = client === 'ioredis'
  ? new Redis({ host: '127.0.0.1', port })
  : await createClient({ socket: { host: '127.0.0.1', port } }).connect();
const scheduler = new Scheduler(redis, { capacity, rate, maxWait });
// connected and loaded: wait for the parent's go, so that no process books while others
// are still starting (their start-up would delay its timers)
await redis.ping();
process.send({ ready: true });
await new Promise((resolve) => process.once('message', resolve));
const times = [];
let tooLong = 0;
await Promise.all(Array.from({ length: calls }, () =>
  scheduler.schedule('partner', () => { times.push(Date.now()); }).catch((err) => {
    if (err instanceof SchedulerWaitTooLongError) tooLong += 1;
    else throw err;
  })));
process.send({ times, tooLong }, () => {
  if (client === 'ioredis') redis.disconnect(); else redis.destroy();
});
