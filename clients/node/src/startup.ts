/**
 * A limiter's startup checks (SPEC U1-U4): the module is there (`COMMAND INFO tb.take`),
 * the user may ask, Redis answers (or the start is degraded on purpose), and a limiter that
 * sends several keys in one call without a tag function is not on a Redis Cluster (U3,
 * K6). Each failure is one line, the whole message, word for word in every language.
 */
import type { TbClient } from './client.js';
import { boundOnce } from './deadline.js';
import {
  ClusterKeysError, ModuleNotLoadedError, NoPermissionError, RedisTbError, RedisTbTimeoutError, RedisUnreachableError,
} from './errors.js';

/** What the checks read of a limiter. */
export interface StartupTarget {
  readonly client: TbClient;
  readonly name: string;
  readonly timeoutMs: number;
  readonly startDegraded: boolean;
  readonly hashTag: unknown;
  readonly logger: { warn(message: string): void };
  /** the policy lists the limiter checks (each adapter's), in registration order */
  readonly policySets: readonly (readonly { name: string; settleLater: boolean }[])[];
}

export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
  return String(err);
}

/**
 * SPEC K6: the policies of a limiter that can send several keys in one call (two or more
 * that are not settleLater in one policy list), in policy order; empty when none can.
 */
export function severalKeys(target: StartupTarget): string[] {
  const out: string[] = [];
  for (const set of target.policySets) {
    const called = set.filter((p) => !p.settleLater);
    if (called.length < 2) continue;
    for (const p of called) if (!out.includes(p.name)) out.push(p.name);
  }
  return out;
}

/** `HELLO`'s `mode` field, whether the client handed the reply as a map, an object or RESP2's flat list. */
export function helloMode(reply: unknown): string | null {
  const text = (v: unknown): string | null => {
    if (typeof v === 'string') return v;
    if (v instanceof Uint8Array) return Buffer.from(v).toString('utf8');
    return null;
  };
  if (reply instanceof Map) {
    for (const [k, v] of reply) if (text(k) === 'mode') return text(v);
    return null;
  }
  if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) if (text(reply[i]) === 'mode') return text(reply[i + 1]);
    return null;
  }
  if (reply !== null && typeof reply === 'object') return text((reply as Record<string, unknown>)['mode']);
  return null;
}

/** SPEC U2: what the start does with an unreachable Redis (fails, or logs one line). */
function unreachable(target: StartupTarget, err: unknown, waitMs: number): void {
  const reason = err instanceof RedisTbTimeoutError ? `no answer within ${waitMs} ms` : describeError(err);
  if (!target.startDegraded) throw new RedisUnreachableError(target.client.server, reason, { cause: err });
  target.logger.warn(
    `redis-tb: Redis at ${target.client.server} unreachable at startup; starting degraded (the limiter's failure mode applies until it answers)`,
  );
}

/** SPEC U1-U4: resolves when the limiter may serve; rejects with the one line otherwise. */
export async function startup(target: StartupTarget): Promise<void> {
  const { client } = target;
  const waitMs = Math.max(target.timeoutMs, 2000);
  try {
    await boundOnce(client.checkModule({ readyWithinMs: waitMs }), waitMs + target.timeoutMs, 'COMMAND INFO');
  } catch (err) {
    if (err instanceof ModuleNotLoadedError || err instanceof NoPermissionError) throw err;
    if (err instanceof RedisTbError) {
      if (/^NOPERM/i.test(err.serverMessage)) throw new NoPermissionError(client.server, { cause: err });
      throw err;
    }
    unreachable(target, err, waitMs);
    return; // degraded: the failure mode answers until Redis does
  }
  // SPEC U3: HELLO (no argument: the protocol is not switched, every user may run it)
  const several = target.hashTag ? [] : severalKeys(target);
  if (several.length === 0) return;
  let hello: unknown;
  try {
    hello = await boundOnce(client.send(['HELLO']), waitMs, 'HELLO');
  } catch (err) {
    if (err instanceof RedisTbError) return; // an error reply passes
    unreachable(target, err, waitMs);
    return;
  }
  if (helloMode(hello) === 'cluster') throw new ClusterKeysError(target.name, several);
}
