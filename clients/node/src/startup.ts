/**
 * A limiter's startup checks (SPEC U1-U4, E1): the backend is chosen (`COMMAND INFO tb.take`,
 * the script library loaded where the module is not, backend.ts),
 * the user may ask, Redis answers (or the start is degraded on purpose), and a limiter that
 * sends several keys in one call without a tag function is not on a Redis Cluster (U3,
 * K6). Each failure is one line, the whole message, word for word in every language.
 */
import { Backend, type BackendSetting, type Chosen, ScriptLoadError } from './backend.js';
import type { TbClient } from './client.js';
import { boundOnce } from './deadline.js';
import {
  ClusterKeysError, ModuleNotLoadedError, NoPermissionError, RedisTbError, RedisTbTimeoutError, RedisUnreachableError, describeError,
} from './errors.js';

/** What the checks read of a limiter. */
export interface StartupTarget {
  readonly client: TbClient;
  readonly name: string;
  readonly timeoutMs: number;
  readonly startDegraded: boolean;
  readonly hashTag: unknown;
  readonly logger: { warn(message: string): void };
  /** the limiter's policies, in policy order */
  readonly policies: readonly { name: string; settleLater: boolean }[];
  /** SPEC E1: the backend setting */
  readonly backend: BackendSetting;
  /** the limiter's wall clock, ms (SPEC E5: the scripts' `now` where TIME is refused) */
  readonly wallMs: () => number;
  /** SPEC E6: told of the choice once, when it is made (at startup, or at a degraded start's first call) */
  readonly chosen: (c: Chosen) => void;
}

/**
 * SPEC K6: the policies of a limiter that can send several keys in one call (two or more
 * that are not settleLater), in policy order; empty when it cannot.
 */
export function severalKeys(target: StartupTarget): string[] {
  const called = target.policies.filter((p) => !p.settleLater).map((p) => p.name);
  return called.length < 2 ? [] : called;
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

/**
 * SPEC U1-U4, E1: resolves when the limiter may serve; rejects with the one line otherwise.
 * The backend's line (E6) is told only of a start that passes (a failed one prints its own
 * line alone), and by a degraded start when its first call chooses.
 */
export async function startup(target: StartupTarget): Promise<void> {
  const backend = await checks(target);
  backend.onChosen(target.chosen);
}

async function checks(target: StartupTarget): Promise<Backend> {
  const { client } = target;
  const waitMs = Math.max(target.timeoutMs, 2000);
  // SPEC E1: one backend per client and setting; a degraded start chooses at its first call
  let backend = client.backend;
  if (backend === null || backend.setting !== target.backend || backend.server !== client.server) {
    backend = new Backend(target.backend, client.server, target.wallMs);
    client.useBackend(backend);
  }
  try {
    const send = (args: string[]): Promise<unknown> => client.send(args);
    await boundOnce(backend.ready(send, () => client.hasModule({ readyWithinMs: waitMs })), waitMs + target.timeoutMs, 'COMMAND INFO');
  } catch (err) {
    if (err instanceof ModuleNotLoadedError || err instanceof NoPermissionError || err instanceof ScriptLoadError) throw err;
    if (err instanceof RedisTbError) {
      if (/^NOPERM/i.test(err.serverMessage)) throw new NoPermissionError(client.server, { cause: err });
      throw err;
    }
    unreachable(target, err, waitMs);
    return backend; // degraded: the failure mode answers until Redis does
  }
  // SPEC U3: HELLO (no argument: the protocol is not switched, every user may run it)
  const several = target.hashTag ? [] : severalKeys(target);
  if (several.length === 0) return backend;
  let hello: unknown;
  try {
    hello = await boundOnce(client.send(['HELLO']), waitMs, 'HELLO');
  } catch (err) {
    if (err instanceof RedisTbError) return backend; // an error reply passes
    unreachable(target, err, waitMs);
    return backend;
  }
  if (helloMode(hello) === 'cluster') throw new ClusterKeysError(target.name, several);
  return backend;
}
