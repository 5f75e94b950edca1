/**
 * The store's backend (SPEC E): the module's TB.* commands, or the same calls to the script
 * library (clients/lua) where the module cannot be loaded.
 *
 * - E1: chosen once, at startup, by `COMMAND INFO tb.take` (or forced by `backend`); a
 *   degraded start chooses before its first call that reaches Redis ({@link Backend.ready});
 * - E2: `FUNCTION LOAD REPLACE` of the Functions build, else `SCRIPT LOAD` of tb.lua with the
 *   SHA-1 checked; a failed load is {@link ScriptLoadError};
 * - E3: `NOSCRIPT` / `ERR Function not found`: one reload and one retry per call;
 * - E4: a grant's `ID` from `crypto.randomBytes`, one retry with a fresh one on a collision;
 * - E5: `now` / `NOW` from the client's clock where the server refuses TIME in scripts;
 * - E6: the one line of the choice ({@link Backend.line}).
 */
import { randomBytes } from 'node:crypto';
import { ModuleNotLoadedError, RedisTbError } from './errors.js';
import { type LuaSources, luaSources } from './lua.js';
import { arg } from './replies.js';

/** SPEC E1: the setting (`auto`, the default, chooses by `COMMAND INFO tb.take`). */
export type BackendSetting = 'auto' | 'module' | 'scripts';
/** SPEC E6: the backend in use. */
export type BackendName = 'module' | 'scripts';
/** SPEC E2: how the scripts are called. */
export type ScriptsVia = 'functions' | 'evalsha';

const SETTINGS: readonly string[] = ['auto', 'module', 'scripts'];

/** SPEC E1: a `backend` setting, checked (a configuration error names the value). */
export function backendSetting(value: unknown): BackendSetting {
  if (typeof value === 'string' && SETTINGS.includes(value)) return value as BackendSetting;
  throw new RangeError(`backend must be auto, module or scripts, got ${JSON.stringify(value)}`);
}

/** SPEC E2: neither load was taken. */
export class ScriptLoadError extends Error {
  override readonly name = 'ScriptLoadError';
  constructor(where: string, reason: string, options?: { cause?: unknown }) {
    super(
      `redis-tb: cannot load the script backend on ${where} (${reason}): allow FUNCTION LOAD or SCRIPT LOAD, or load the module`,
      options,
    );
  }
}

/** What the backend sends through: one raw command (error replies reject with RedisTbError). */
export type Send = (args: string[]) => Promise<unknown>;

const TIME_PROBE = ['EVAL', "return redis.call('TIME')", '0'];

function replied(err: unknown, pattern: RegExp): boolean {
  return err instanceof RedisTbError && pattern.test(err.serverMessage);
}

/** SPEC E3: the library is gone from the server. */
const GONE = /^(NOSCRIPT\b|ERR Function not found)/;
/** SPEC E4: the grant's id is taken on the key. */
const ID_HELD = /^ERR ID is already held on this key/;

/** SPEC E4: 8 bytes of the CSPRNG, 16 lowercase hex digits, fresh for every call. */
export function freshId(): string {
  return randomBytes(8).toString('hex');
}

/** The calls that carry `NOW` (E5) rather than a positional `now`: leases and holds. */
const LEASE_WORDS = new Set(['ACQUIRE', 'RELEASE', 'RENEW', 'HOLD', 'SETTLE']);

/** How a chosen backend calls the server. */
export interface Chosen {
  readonly name: BackendName;
  readonly via: ScriptsVia | null;
  /** E5: the server refuses TIME in scripts; the client's clock goes with every call */
  readonly clientClock: boolean;
  /** E6's line */
  readonly line: string;
}

/** The backend of one TbClient: chosen (E1), then every TB.* call goes through {@link call}. */
export class Backend {
  readonly setting: BackendSetting;
  readonly server: string;
  /** the client's clock, ms since the epoch (SPEC T1: the limiter's) */
  wallMs: () => number;
  private chosen: Chosen | null = null;
  private choosing: Promise<Chosen> | null = null;
  private lua: LuaSources | null = null;
  private readonly listeners: ((c: Chosen) => void)[] = [];

  constructor(setting: BackendSetting, server: string, wallMs: () => number = Date.now) {
    this.setting = setting;
    this.server = server;
    this.wallMs = wallMs;
  }

  /** A backend already chosen as the scripts (a test's scripted store, or a caller that knows). */
  static scripts(server: string, via: ScriptsVia, clientClock: boolean, wallMs: () => number = Date.now): Backend {
    const b = new Backend('scripts', server, wallMs);
    b.chosen = { name: 'scripts', via, clientClock, line: b.lineFor('forced by backend=scripts', via, clientClock) };
    return b;
  }

  /** The choice, or null until it is made. */
  get current(): Chosen | null {
    return this.chosen;
  }

  /** `listener` is told of the choice once, now if it is made, else when it is. */
  onChosen(listener: (c: Chosen) => void): void {
    if (this.chosen) listener(this.chosen);
    else this.listeners.push(listener);
  }

  /** The script library's texts (read on first use). */
  sources(): LuaSources {
    return (this.lua ??= luaSources());
  }

  /**
   * SPEC E1, E2, E5: choose (once; concurrent callers share it; a failure lets the next
   * call try again) and tell the listeners. `moduleInfo` is U1's `COMMAND INFO tb.take`:
   * true when the server has the command.
   */
  ready(send: Send, moduleInfo: () => Promise<boolean>): Promise<Chosen> {
    if (this.chosen) return Promise.resolve(this.chosen);
    this.choosing ??= this.choose(send, moduleInfo).then(
      (c) => {
        this.chosen = c;
        for (const l of this.listeners.splice(0)) l(c);
        return c;
      },
      (err: unknown) => {
        this.choosing = null;
        throw err;
      },
    );
    return this.choosing;
  }

  private async choose(send: Send, moduleInfo: () => Promise<boolean>): Promise<Chosen> {
    let why: string;
    if (this.setting === 'scripts') {
      why = 'forced by backend=scripts';
    } else {
      const found = await moduleInfo();
      if (found) {
        why = this.setting === 'module' ? 'forced by backend=module' : 'tb.take found';
        return { name: 'module', via: null, clientClock: false, line: `redis-tb: backend module on ${this.server} (${why})` };
      }
      if (this.setting === 'module') throw new ModuleNotLoadedError(this.server);
      why = 'tb.take not found';
    }
    const via = await this.load(send, null);
    let clientClock = false;
    try {
      await send(TIME_PROBE);
    } catch (err) {
      if (!(err instanceof RedisTbError)) throw err;
      clientClock = true; // SPEC E5: the server refuses TIME in scripts
    }
    return { name: 'scripts', via, clientClock, line: this.lineFor(why, via, clientClock) };
  }

  private lineFor(why: string, via: ScriptsVia, clientClock: boolean): string {
    return `redis-tb: backend scripts on ${this.server} (${why}, ${via === 'functions' ? 'Functions' : 'EVALSHA'}${clientClock ? ', client clock' : ''})`;
  }

  /**
   * SPEC E2: load the library; `via` the way already chosen (a reload, E3), or null at the
   * choice (FUNCTION LOAD REPLACE where accepted, else SCRIPT LOAD). An error reply to the
   * last load is {@link ScriptLoadError}; a connection error is passed through.
   */
  async load(send: Send, via: ScriptsVia | null): Promise<ScriptsVia> {
    const lua = this.sources();
    if (via !== 'evalsha') {
      try {
        await send(['FUNCTION', 'LOAD', 'REPLACE', lua.functions]);
        return 'functions';
      } catch (err) {
        if (!(err instanceof RedisTbError)) throw err;
        if (via === 'functions') throw new ScriptLoadError(this.server, err.serverMessage, { cause: err });
      }
    }
    let sha: unknown;
    try {
      sha = await send(['SCRIPT', 'LOAD', lua.script]);
    } catch (err) {
      if (err instanceof RedisTbError) throw new ScriptLoadError(this.server, err.serverMessage, { cause: err });
      throw err;
    }
    const got = sha instanceof Uint8Array ? Buffer.from(sha).toString('ascii') : String(sha);
    if (got.toLowerCase() !== lua.sha) {
      throw new ScriptLoadError(this.server, `SCRIPT LOAD answered ${got}, not tb.lua's SHA-1 ${lua.sha}`);
    }
    return 'evalsha';
  }

  /** SPEC E5: the client's clock, seconds since the epoch, where the server refuses TIME. */
  clientNow(): number | undefined {
    return this.chosen?.clientClock ? this.wallMs() / 1000 : undefined;
  }

  /**
   * One TB.* call (the module's words) through the chosen backend: the module's as it is,
   * the scripts' translated (E2), with E3's reload and E4's fresh id, each retried once.
   */
  async call(send: Send, command: readonly string[], moduleInfo: () => Promise<boolean>): Promise<unknown> {
    const chosen = this.chosen ?? (await this.ready(send, moduleInfo));
    if (chosen.name === 'module' || chosen.via === null) return send([...command]);
    const word = command[0]!.toUpperCase().replace(/^TB\./, '');
    const granted = word === 'ACQUIRE' || word === 'HOLD';
    let argv = this.scriptArgv(chosen, word, command, granted ? freshId() : null);
    let reloaded = false;
    let redrawn = false;
    for (;;) {
      try {
        return await send(argv);
      } catch (err) {
        if (!reloaded && replied(err, GONE)) {
          reloaded = true; // SPEC E3: once, never a loop
          await this.load(send, chosen.via);
          continue;
        }
        if (granted && !redrawn && replied(err, ID_HELD)) {
          redrawn = true; // SPEC E4: once, with a fresh id
          argv = this.scriptArgv(chosen, word, command, freshId());
          continue;
        }
        throw err;
      }
    }
  }

  /** clients/lua/README.md's calling convention for `command` (the module's words). */
  private scriptArgv(chosen: Chosen, word: string, command: readonly string[], id: string | null): string[] {
    let keys: string[];
    let rest: string[];
    const takeAt = word === 'ACQUIRE' && command[4]?.toUpperCase() === 'TAKE' ? Number(command[5]) : 0;
    if (takeAt > 0) {
      // TB.ACQUIRE key limit lease_ms TAKE numkeys bucket... triples: the buckets are keys
      keys = [command[1]!, ...command.slice(6, 6 + takeAt)];
      rest = [...command.slice(2, 5), ...command.slice(6 + takeAt)];
    } else if (word === 'MTAKE') {
      const n = Number(command[1]);
      keys = command.slice(2, 2 + n);
      rest = command.slice(2 + n);
    } else {
      keys = [command[1]!];
      rest = command.slice(2);
    }
    if (id !== null) rest.push('ID', id);
    const peekOf = word === 'PEEK' && (rest[0]?.toUpperCase() === 'LEASES' || rest[0]?.toUpperCase() === 'HOLDS');
    if (chosen.clientClock && (LEASE_WORDS.has(word) || peekOf)) rest.push('NOW', arg(this.wallMs() / 1000));
    if (chosen.via === 'functions') {
      return [word === 'PEEK' ? 'FCALL_RO' : 'FCALL', `tb_${word.toLowerCase()}`, String(keys.length), ...keys, ...rest];
    }
    return ['EVALSHA', this.sources().sha, String(keys.length), ...keys, word, ...rest];
  }
}
