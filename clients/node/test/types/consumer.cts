// Compiled (not run) by `npm run typecheck`: the declarations as a CommonJS consumer sees them.
import { RateLimiter, TbClient, type Reply } from 'redis-tb';
import { rateLimit } from 'redis-tb/express';

declare const send: (args: string[]) => Promise<unknown>;
export async function use(): Promise<Reply> {
  const limiter = new RateLimiter(new TbClient(send), { policies: [] });
  void rateLimit(limiter);
  return new TbClient(send).take('k', 1, 1);
}
