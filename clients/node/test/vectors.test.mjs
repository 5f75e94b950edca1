// The shared vectors (clients/vectors/*.json, described in clients/vectors/README.md): every
// file of the folder is run; a file without a handler, or a case of a kind this runner does
// not know, fails. Pure files call the package's pure functions; limiter.json drives the
// framework-neutral RateLimiter with an injected clock (SPEC T1) and a scripted store at
// the level of the typed client (the TB.* calls it sends, with scripted replies, error
// replies, timeouts, connection errors, and calls held until a later step).
// limiter-scripts.json is the same cases on the script backend (SPEC E), run by the same
// handler: the store is below the typed client, so every call (a refund too) goes through
// the client's script backend as in production.
// Each case is a subtest named by its id.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import {
  Backend, ClientIpConfig, luaSources, Decision, Key, Limit, Policy, RateLimiter, TbClient, bodyNumber, bucketKey, checkDistinctNames, checkPolicyKinds, quota,
  remainingUnits, resetSeconds, respond, retryAfterSeconds, tiered, windowSeconds,
} from 'redis-tb';

const here = path.dirname(fileURLToPath(import.meta.url));
const DIR = process.env.REDIS_TB_VECTORS ?? path.resolve(here, '../../vectors');
const WALL_ZERO = 1764456268000;

/** A number field: `"NaN"`, `"Infinity"`, `"-Infinity"` or a JSON number. */
function num(v) {
  if (v === 'NaN') return NaN;
  if (v === 'Infinity') return Infinity;
  if (v === '-Infinity') return -Infinity;
  if (typeof v === 'number') return v;
  throw new Error(`not a number field: ${JSON.stringify(v)}`);
}

const silent = { warn() {} };

/** `[name, value]` pairs -> lowercase name -> value (the first line of each). */
function headerMap(pairs) {
  const out = new Map();
  for (const [k, v] of pairs) if (!out.has(k.toLowerCase())) out.set(k.toLowerCase(), v);
  return out;
}

function checkHeaders(id, got, expected) {
  const map = headerMap(got);
  for (const [name, value] of Object.entries(expected)) {
    assert.equal(map.get(name) ?? null, value, `${id}: header ${name}`);
  }
}

// -- pure files -------------------------------------------------------------------

const NUMBER_FNS = {
  quota: (c) => quota(num(c)),
  window: (c, r) => windowSeconds(num(c), num(r)),
  remaining: (x) => remainingUnits(num(x)),
  reset: (x) => resetSeconds(num(x)),
  retry_after: (x) => retryAfterSeconds(num(x)),
  body_number: (x) => bodyNumber(num(x)),
};

function runNumber(c) {
  const fn = NUMBER_FNS[c.fn];
  assert.ok(fn, `${c.id}: unknown fn ${c.fn}`);
  assert.equal(fn(...c.args), c.expect, `${c.id}: ${c.fn}(${c.args.join(', ')})`);
}

const anyLimit = new Limit(1, 1);
const nullSend = async () => { throw new Error('no Redis in config cases'); };

const CONFIG_SETTINGS = {
  prefix: (v) => new RateLimiter(nullSend, { policies: [], prefix: v }),
  policy_name: (v) => new Policy({ name: v, limit: anyLimit }),
  policy_names: (v) => checkDistinctNames(v.map((name) => new Policy({ name, limit: anyLimit }))),
  limit: (v) => new Limit(num(v.capacity), num(v.rate)),
  cost: (v) => new Policy({ name: 'p', limit: anyLimit, cost: num(v) }),
  trusted_proxy: (v) => new ClientIpConfig({ trustedProxies: [v] }).trustedProxies[0],
  ipv4_prefix: (v) => new ClientIpConfig({ ipv4Prefix: v }),
  ipv6_prefix: (v) => new ClientIpConfig({ ipv6Prefix: v }),
  header: (v) => new ClientIpConfig({ header: v }),
  fixed_key: (v) => Key.fixed(v),
  window: (v) => Limit.window(num(v.limit), num(v.seconds), v.mode),
  in_flight: (v) => {
    const limit = 'max_duration' in v ? Limit.inFlight(num(v.limit), num(v.lease), num(v.max_duration)) : Limit.inFlight(num(v.limit), num(v.lease));
    new Policy({ name: 'p', limit, ...('cost' in v ? { cost: num(v.cost) } : {}) });
    return { limit: limit.limit, lease_ms: limit.leaseMs, max_duration_ms: limit.maxDurationMs };
  },
  policy_kinds: (v) => checkPolicyKinds(v.map((kind, i) => kindPolicy(kind, `p${i}`))),
  // SPEC C7: the limiter's settings
  timeout_ms: (v) => new RateLimiter(nullSend, { policies: [], timeoutMs: num(v) }),
  cooldown_ms: (v) => new RateLimiter(nullSend, { policies: [], cooldownMs: num(v) }),
  deny_cache_max_entries: (v) => new RateLimiter(nullSend, { policies: [], denyCache: { maxEntries: num(v) } }),
  // SPEC W1: Limit.windowPer<Unit>(n, mode)
  window_helper: (v) => {
    const helper = WINDOW_HELPERS[v.unit];
    assert.ok(helper, `unknown window unit ${v.unit}`);
    const w = 'mode' in v ? helper(num(v.n), v.mode) : helper(num(v.n));
    return { limit: w.limit, seconds: w.seconds, mode: w.mode };
  },
};

const WINDOW_HELPERS = {
  second: (n, mode) => Limit.windowPerSecond(n, mode),
  minute: (n, mode) => Limit.windowPerMinute(n, mode),
  hour: (n, mode) => Limit.windowPerHour(n, mode),
  day: (n, mode) => Limit.windowPerDay(n, mode),
};

/** One policy of a kind of SPEC C10. */
function kindPolicy(kind, name) {
  switch (kind) {
    case 'bucket': return new Policy({ name, limit: anyLimit });
    case 'window': return new Policy({ name, limit: Limit.window(5, 60) });
    case 'in_flight': return new Policy({ name, limit: Limit.inFlight(2) });
    case 'settle_later': return new Policy({ name, limit: anyLimit, settleLater: true });
    default: throw new Error(`unknown policy kind ${kind}`);
  }
}

function runConfig(c) {
  const make = CONFIG_SETTINGS[c.setting];
  assert.ok(make, `${c.id}: unknown setting ${c.setting}`);
  let out;
  let error = null;
  try {
    out = make(c.value);
  } catch (err) {
    error = err;
  }
  if (c.expect.valid) {
    assert.equal(error, null, `${c.id}: ${c.setting} ${JSON.stringify(c.value)} is valid, got ${error}`);
    if ('normalized' in c.expect) assert.deepEqual(out, c.expect.normalized, `${c.id}: normalized`);
  } else {
    assert.ok(error instanceof Error, `${c.id}: ${c.setting} ${JSON.stringify(c.value)} must be refused`);
    // a configuration error names the value (SPEC C)
    assert.ok(error instanceof RangeError || error instanceof TypeError, `${c.id}: ${error}`);
  }
}

function addressConfig(cfg) {
  return new ClientIpConfig({
    trustedProxies: cfg.trusted_proxies ?? [],
    header: cfg.header ?? 'x-forwarded-for',
    ipv4Prefix: cfg.ipv4_prefix ?? 32,
    ipv6Prefix: cfg.ipv6_prefix ?? 64,
  });
}

function runAddress(c) {
  const cfg = addressConfig(c.config);
  const lines = c.headers[cfg.header] ?? [];
  const got = cfg.resolve(c.peer, lines);
  assert.equal(got.address, c.expect.client, `${c.id}: client`);
  assert.equal(got.identity, c.expect.identity, `${c.id}: identity`);
  // the fast path the limiter takes gives the same identity
  assert.equal(cfg.identity(c.peer, lines), c.expect.identity, `${c.id}: identity (limiter path)`);
}

// -- a scripted store at the level of the typed client ------------------------------

class ReplyError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ReplyError';
  }
}

function wire(v) {
  if (Array.isArray(v)) return v.map(wire);
  return typeof v === 'number' ? String(v) : v;
}

/**
 * SPEC E (clients/vectors/README.md): `{sha}`, `{script}`, `{functions}` are the library's
 * SHA-1 and texts as the package ships them; `{id:x}` is bound to the first id the client
 * sent there, and every later one must be the same (two names never the same id).
 */
const LUA = luaSources();
const PLACEHOLDERS = { '{sha}': LUA.sha, '{script}': LUA.script, '{functions}': LUA.functions };
const ID = /^\{id:([A-Za-z0-9_]+)\}$/;

/** The scripted store: each step lists the calls it must make, in order. */
class Script {
  constructor() {
    this.expected = [];
    this.unexpected = [];
    this.held = new Map();
    /** `{id:x}` name -> the id the client sent */
    this.ids = new Map();
  }

  /** A reply's placeholders, as the ids were bound. */
  fill(v) {
    if (Array.isArray(v)) return v.map((x) => this.fill(x));
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.fill(x)]));
    if (typeof v !== 'string') return v;
    if (v in PLACEHOLDERS) return PLACEHOLDERS[v];
    const m = ID.exec(v);
    if (m) {
      assert.ok(this.ids.has(m[1]), `${v} in a reply before any call bound it`);
      return this.ids.get(m[1]);
    }
    return v;
  }

  /** Whether `got` is the expected `{id:x}` (binding it on its first appearance). */
  idMatches(name, got) {
    if (!/^[0-9a-f]{16}$/.test(got)) return false;
    if (this.ids.has(name)) return this.ids.get(name) === got;
    if ([...this.ids.values()].includes(got)) return false; // E4: every id fresh
    this.ids.set(name, got);
    return true;
  }

  expect(calls) {
    this.expected = [...calls];
    this.unexpected = [];
  }

  send = (args) => {
    const next = this.expected.shift();
    if (next === undefined) {
      this.unexpected.push(args);
      return Promise.reject(new ReplyError('ERR unexpected call'));
    }
    this.match(next.call, args);
    if ('raw' in next) return Promise.resolve(next.raw);
    if ('reply' in next) return Promise.resolve(wire(this.fill(next.reply)));
    if ('error' in next) return Promise.reject(new ReplyError(next.error));
    if (next.timeout) return new Promise(() => {});
    if (next.connection_error) {
      return Promise.reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' }));
    }
    if (next.hold) {
      return new Promise((resolve, reject) => {
        this.held.set(next.hold, { resolve, reject });
      });
    }
    throw new Error(`unknown call kind: ${JSON.stringify(next)}`);
  };

  match(expected, args) {
    const ok = expected.length === args.length && expected.every((e, i) => {
      if (typeof e === 'number') return Number(args[i]) === e;
      const id = ID.exec(e);
      if (id) return this.idMatches(id[1], String(args[i]));
      return String(args[i]) === (PLACEHOLDERS[e] ?? e);
    });
    if (!ok) this.unexpected.push({ expected, got: args });
  }

  verify(id, what) {
    assert.deepEqual(this.unexpected, [], `${id}: ${what}: calls that do not match the script`);
    assert.deepEqual(this.expected.map((c) => c.call), [], `${id}: ${what}: listed calls not made`);
  }
}

function keySource(k) {
  if (k === undefined || k.kind === 'client_ip') return Key.clientIp();
  if (k.kind === 'header') return Key.header(k.name);
  if (k.kind === 'fixed') return Key.fixed(k.value);
  throw new Error(`unknown key kind ${k.kind}`);
}

const POLICY_FIELDS = new Set([
  'name', 'capacity', 'rate', 'cost', 'shadow', 'key', 'window', 'in_flight', 'settle_later', 'routes', 'per_route', 'tiers', 'default_tier',
]);
const LIMITER_FIELDS = new Set(['backend', 'policies', 'fail_open', 'timeout_ms', 'cooldown_ms', 'deny_cache', 'exclude', 'limit_unmatched', 'refund_on']);
const CHECK_FIELDS = new Set(['peer', 'headers', 'cost', 'limit', 'tier', 'route']);
const STEP_FIELDS = new Set(['at_ms', 'redis', 'expect', 'reply', 'error', 'status']);
const IN_FLIGHT_FIELDS = new Set(['limit', 'lease_ms', 'max_duration_ms']);

/** An unknown field fails the runner (clients/vectors/README.md). */
function knownFields(id, what, obj, known) {
  const unknown = Object.keys(obj).filter((k) => !known.has(k));
  assert.deepEqual(unknown, [], `${id}: unknown ${what} field(s): ${unknown.join(', ')}`);
}

/** SPEC L1, K5: a policy's routes and per-route key. */
function scopeOf(p) {
  return { ...(p.routes !== undefined ? { routes: p.routes } : {}), perRoute: p.per_route ?? false };
}

function buildPolicies(spec, steps) {
  return spec.map((p) => {
    const hasCostFn = typeof p.cost === 'object' || steps.some((s) => s.check?.cost?.[p.name] !== undefined);
    const hasLimitFn = steps.some((s) => s.check?.limit !== undefined && p.name in s.check.limit);
    const common = { name: p.name, shadow: p.shadow ?? false, key: keySource(p.key), ...scopeOf(p) };
    if (p.window || p.in_flight) {
      if (p.in_flight) knownFields(p.name, 'in_flight', p.in_flight, IN_FLIGHT_FIELDS);
      const limit = p.window
        ? Limit.window(p.window.limit, p.window.seconds, p.window.mode)
        : Limit.inFlight(p.in_flight.limit, p.in_flight.lease_ms / 1000, (p.in_flight.max_duration_ms ?? 300000) / 1000);
      assert.ok(!hasLimitFn, `policy ${p.name}: a limit function on a window or in-flight policy`);
      return new Policy({
        ...common, limit,
        ...(p.cost !== undefined || hasCostFn
          ? { cost: hasCostFn ? async (req) => num(req.cost?.[p.name] ?? p.cost ?? 1) : num(p.cost) } : {}),
      });
    }
    const staticCost = typeof p.cost === 'object' ? num(p.cost.invalid) : (p.cost ?? 1);
    const cost = hasCostFn ? async (req) => (req.cost?.[p.name] !== undefined ? num(req.cost[p.name]) : staticCost) : staticCost;
    if (p.tiers) {
      // SPEC L2: tiered(name, {tier: Limit}, tier function, default)
      const tiers = Object.fromEntries(Object.entries(p.tiers).map(([t, l]) => [t, new Limit(num(l.capacity), num(l.rate))]));
      const { name, ...opts } = common;
      return tiered(name, tiers, (req) => req.tier?.[p.name] ?? null, { ...opts, cost, default: p.default_tier });
    }
    const base = new Limit(num(p.capacity), num(p.rate));
    return new Policy({
      ...common,
      settleLater: p.settle_later ?? false,
      limit: hasLimitFn
        ? async (req) => {
          const l = req.limit?.[p.name];
          if (l === null) return null; // SPEC L2: nothing skips the policy
          return l === undefined ? base : { capacity: num(l.capacity), rate: num(l.rate) };
        }
        : base,
      cost,
    });
  });
}

const STAT_NAMES = {
  checks: 'checks', allowed: 'allowed', limited: 'limited', shadow_limited: 'shadowLimited', store_errors: 'storeErrors',
  degraded: 'degraded', deny_cache_hits: 'denyCacheHits', refunds: 'refunds', refund_errors: 'refundErrors',
  invalid_inputs: 'invalidInputs', leases_in_flight: 'leasesInFlight', leases_expired: 'leasesExpired',
  leases_timed_out: 'leasesTimedOut', holds: 'holds', holds_lost: 'holdsLost', settlements: 'settlements',
};

const RESULT_FIELDS = {
  name: 'name', key: 'key', capacity: 'capacity', rate: 'rate', cost: 'cost', allowed: 'allowed', remaining: 'remaining',
  retry_after: 'retryAfter', reset_after: 'resetAfter', shadow: 'shadow',
};

/** SPEC D2: one result per applied policy, in order, each listed field compared (numbers numerically). */
function checkResults(id, results, expected) {
  assert.equal(results.length, expected.length, `${id}: results: ${results.map((r) => r.name).join(', ')}`);
  expected.forEach((want, i) => {
    for (const [k, v] of Object.entries(want)) {
      assert.ok(RESULT_FIELDS[k], `${id}: unknown result field ${k}`);
      assert.equal(results[i][RESULT_FIELDS[k]], v, `${id}: results[${i}].${k}`);
    }
  });
}

function checkDecision(id, limiter, decision, expect) {
  const res = limiter.respond(decision);
  for (const [k, v] of Object.entries(expect)) {
    switch (k) {
      case 'outcome': assert.equal(decision.outcome, v, `${id}: outcome`); break;
      case 'allowed': assert.equal(decision.allowed, v, `${id}: allowed`); break;
      case 'from_cache': assert.equal(decision.fromCache, v, `${id}: from_cache`); break;
      case 'status': assert.equal(res.status, v, `${id}: status`); break;
      case 'headers': checkHeaders(id, res.headers, v); break;
      case 'body': assert.equal(res.body, v, `${id}: body`); break;
      case 'violated': assert.deepEqual(decision.violated, v, `${id}: violated`); break;
      case 'shadow_limited': assert.deepEqual([...decision.shadowLimited], v, `${id}: shadow_limited`); break;
      case 'results': checkResults(id, decision.results, v); break;
      case 'lease': assert.deepEqual(decision.lease === null ? null : { ...decision.lease }, v, `${id}: lease`); break;
      default: assert.fail(`${id}: unknown expectation ${k}`);
    }
  }
}

const BACKEND_FIELDS = new Set(['kind', 'via', 'client_clock']);

/**
 * The client of a case: the module's (TB.* as they are), or SPEC E's scripts as the case's
 * `backend` says (chosen already: a limiter case runs no startup).
 */
function caseClient(id, backend, script, clock) {
  const client = new TbClient(script.send, { server: '127.0.0.1:6379' });
  if (backend === undefined) return client;
  knownFields(id, 'backend', backend, BACKEND_FIELDS);
  assert.equal(backend.kind, 'scripts', `${id}: backend kind`);
  client.useBackend(Backend.scripts(client.server, backend.via, backend.client_clock ?? false, () => clock.wallMs()));
  return client;
}

/** A limiter of a case's configuration (its policies, SPEC L1's scope, F2) over the script, with the case's clock. */
function caseLimiter(cfg, policies, script, clock, id) {
  return new RateLimiter(caseClient(id, cfg.backend, script, clock), {
    policies,
    ...(cfg.exclude !== undefined ? { exclude: cfg.exclude } : {}),
    limitUnmatched: cfg.limit_unmatched ?? false,
    ...(cfg.refund_on !== undefined ? { refundOn: cfg.refund_on } : {}),
    clock,
    logger: silent,
    failOpen: cfg.fail_open ?? true,
    timeoutMs: cfg.timeout_ms ?? 50,
    cooldownMs: cfg.cooldown_ms ?? 1000,
    ...(cfg.deny_cache ? { denyCache: { maxEntries: cfg.deny_cache.max_entries } } : {}),
  });
}

const STEP_KINDS = new Set(['check', 'release', 'cancel', 'refund', 'finish', 'renew', 'take_hold', 'settle', 'renew_hold']);

const HOLD_FIELDS = {
  allowed: 'allowed', id: 'id', remaining: 'remaining', retry_after: 'retryAfter', reset_after: 'resetAfter', key: 'key',
  policy: 'policy',
};
const SETTLEMENT_FIELDS = { settled: 'settled', remaining: 'remaining', charged: 'charged', reset_after: 'resetAfter' };

/**
 * What a take_hold must raise: invalid_input, the application's error (a RangeError);
 * store_error, any other (a failed call, or one the open breaker kept from Redis: SPEC G1, B2).
 */
const HOLD_ERRORS = {
  invalid_input: (e) => e instanceof RangeError,
  store_error: (e) => e instanceof Error && !(e instanceof RangeError),
};

/** A take_hold step's expectation of the Hold (SPEC G2), or of the error (G1). */
function checkHold(id, hold, expect) {
  for (const [k, v] of Object.entries(expect)) {
    if (k === 'status') assert.equal(hold.response?.status ?? 200, v, `${id}: status`);
    else if (k === 'headers') checkHeaders(id, hold.response?.headers ?? [], v);
    else if (k === 'body') assert.equal(hold.response?.body ?? null, v, `${id}: body`);
    else if (HOLD_FIELDS[k]) assert.equal(hold[HOLD_FIELDS[k]], v, `${id}: hold.${HOLD_FIELDS[k]}`);
    else assert.fail(`${id}: unknown hold expectation ${k}`);
  }
}

async function runLimiter(c) {
  const script = new Script();
  let t = 0;
  const clock = { monotonicMs: () => t, wallMs: () => WALL_ZERO + t };
  knownFields(c.id, 'limiter', c.limiter, LIMITER_FIELDS);
  for (const p of c.limiter.policies) knownFields(c.id, 'policy', p, POLICY_FIELDS);
  for (const st of c.steps) knownFields(c.id, 'step', st, new Set([...STEP_FIELDS, ...STEP_KINDS]));
  const limiter = caseLimiter(c.limiter, buildPolicies(c.limiter.policies, c.steps), script, clock, c.id);
  const decisions = [];
  const holds = [];
  const pending = new Map(); // held call's name -> { promise, controller, kind: 'check' | 'hold', index }
  try {
    for (let i = 0; i < c.steps.length; i++) {
      const step = c.steps[i];
      const kinds = Object.keys(step).filter((k) => STEP_KINDS.has(k));
      assert.equal(kinds.length, 1, `${c.id} step ${i}: one of ${[...STEP_KINDS].join(', ')}`);
      const what = `step ${i} (${kinds[0]})`;
      t = step.at_ms;
      if (step.check) {
        const chk = step.check;
        knownFields(c.id, 'check', chk, CHECK_FIELDS);
        const headers = chk.headers ?? {};
        const controller = new AbortController();
        script.expect(step.redis ?? []);
        const promise = limiter.check({
          request: { cost: chk.cost, limit: chk.limit, tier: chk.tier },
          peer: chk.peer,
          header: (name) => headers[name] ?? [],
          // absent: a route no policy lists and no exclude names
          route: 'route' in chk ? chk.route : 'GET /vector',
          signal: controller.signal,
        });
        const hold = (step.redis ?? []).find((r) => r.hold)?.hold;
        if (hold !== undefined) {
          promise.catch(() => {}); // checked at its release (or cancelled)
          await new Promise((r) => setImmediate(r));
          pending.set(hold, { promise, controller, kind: 'check' });
          decisions[i] = promise;
          script.verify(c.id, what);
          assert.equal(step.expect, null, `${c.id}: ${what}: a held check is checked at its release`);
          continue;
        }
        const decision = await promise;
        decisions[i] = decision;
        script.verify(c.id, what);
        if (step.expect) checkDecision(`${c.id} ${what}`, limiter, decision, script.fill(step.expect));
      } else if (step.release !== undefined) {
        const held = script.held.get(step.release);
        const p = pending.get(step.release);
        assert.ok(held && p, `${c.id}: ${what}: nothing held as ${step.release}`);
        script.expect([]);
        // its answer's placeholders filled as a reply's are (a held grant's `{id:x}`)
        if ('reply' in step) held.resolve(wire(script.fill(step.reply)));
        else held.reject(new ReplyError(step.error));
        pending.delete(step.release);
        if (p.kind === 'hold') {
          // a held TB.HOLD: the release's expect is the Hold's (or the error it raises)
          if (step.expect?.error !== undefined) {
            await assert.rejects(p.promise, HOLD_ERRORS[step.expect.error], `${c.id}: ${what}: hold must raise ${step.expect.error}`);
          } else {
            const hold = await p.promise;
            holds[p.index] = hold;
            if (step.expect) checkHold(`${c.id} ${what}`, hold, script.fill(step.expect));
          }
          script.verify(c.id, what);
          continue;
        }
        const decision = await p.promise;
        script.verify(c.id, what);
        if (step.expect) checkDecision(`${c.id} ${what}`, limiter, decision, script.fill(step.expect));
      } else if (step.cancel !== undefined) {
        const p = pending.get(step.cancel);
        assert.ok(p, `${c.id}: ${what}: nothing held as ${step.cancel}`);
        script.expect([]);
        p.controller.abort();
        await assert.rejects(p.promise, `${c.id}: ${what}: a cancelled check rejects`);
        pending.delete(step.cancel);
        script.verify(c.id, what);
      } else if (step.finish !== undefined) {
        const decision = await decisions[step.finish];
        assert.ok(decision instanceof Decision, `${c.id}: ${what}: step ${step.finish} has no decision`);
        script.expect(step.redis ?? []);
        await decision.finish(step.status);
        script.verify(c.id, what);
        for (const [k, v] of Object.entries(step.expect ?? {})) {
          assert.ok(STAT_NAMES[k], `${c.id}: ${what}: unknown counter ${k}`);
          assert.equal(limiter.stats[STAT_NAMES[k]], v, `${c.id}: ${what}: stats.${STAT_NAMES[k]}`);
        }
      } else if (step.renew !== undefined) {
        const decision = await decisions[step.renew];
        assert.ok(decision instanceof Decision, `${c.id}: ${what}: step ${step.renew} has no decision`);
        script.expect(step.redis ?? []);
        const before = decision.timedOut;
        const renewed = await decision.renew();
        script.verify(c.id, what);
        // SPEC N7: whether this tick ended the request at its max_duration
        const timedOut = !before && decision.timedOut;
        for (const [k, v] of Object.entries(step.expect)) {
          if (k === 'renewed') assert.equal(renewed, v, `${c.id}: ${what}: renewed`);
          else if (k === 'timed_out') assert.equal(timedOut, v, `${c.id}: ${what}: timed_out`);
          else assert.fail(`${c.id}: ${what}: unknown expectation ${k}`);
        }
      } else if (step.renew_hold !== undefined) {
        const hold = holds[step.renew_hold];
        assert.ok(hold, `${c.id}: ${what}: step ${step.renew_hold} has no hold`);
        script.expect(step.redis ?? []);
        const renewed = await hold.renew();
        script.verify(c.id, what);
        for (const [k, v] of Object.entries(step.expect)) {
          assert.equal(k, 'renewed', `${c.id}: ${what}: unknown expectation ${k}`);
          assert.equal(renewed, v, `${c.id}: ${what}: renewed`);
        }
      } else if (step.take_hold !== undefined) {
        const h = step.take_hold;
        const decision = await decisions[h.check];
        assert.ok(decision instanceof Decision, `${c.id}: ${what}: step ${h.check} has no decision`);
        script.expect(step.redis ?? []);
        const heldAs = (step.redis ?? []).find((r) => r.hold)?.hold;
        if (heldAs !== undefined) {
          // the TB.HOLD is sent and answered at a later release step
          const promise = decision.hold(h.policy, num(h.estimate), h.ttl_ms / 1000);
          promise.catch(() => {});
          await new Promise((r) => setImmediate(r));
          pending.set(heldAs, { promise, controller: new AbortController(), kind: 'hold', index: i });
          script.verify(c.id, what);
          assert.equal(step.expect, null, `${c.id}: ${what}: a held hold is checked at its release`);
          continue;
        }
        if (step.expect.error !== undefined) {
          const want = HOLD_ERRORS[step.expect.error];
          assert.ok(want !== undefined, `${c.id}: ${what}: unknown error kind ${step.expect.error}`);
          await assert.rejects(decision.hold(h.policy, num(h.estimate), h.ttl_ms / 1000), want, `${c.id}: ${what}: hold must raise ${step.expect.error}`);
          script.verify(c.id, what);
          continue;
        }
        const hold = await decision.hold(h.policy, num(h.estimate), h.ttl_ms / 1000);
        script.verify(c.id, what);
        holds[i] = hold;
        checkHold(`${c.id} ${what}`, hold, script.fill(step.expect));
      } else if (step.settle !== undefined) {
        const hold = holds[step.settle.hold];
        assert.ok(hold, `${c.id}: ${what}: step ${step.settle.hold} has no hold`);
        script.expect(step.redis ?? []);
        const out = await hold.settle(num(step.settle.actual));
        script.verify(c.id, what);
        for (const [k, v] of Object.entries(step.expect)) {
          assert.ok(SETTLEMENT_FIELDS[k], `${c.id}: ${what}: unknown settlement expectation ${k}`);
          assert.equal(out[SETTLEMENT_FIELDS[k]], v, `${c.id}: ${what}: settlement.${SETTLEMENT_FIELDS[k]}`);
        }
      } else {
        const decision = await decisions[step.refund];
        assert.ok(decision instanceof Decision, `${c.id}: ${what}: step ${step.refund} has no decision`);
        script.expect(step.redis ?? []);
        const returns = await decision.refund();
        script.verify(c.id, what);
        assert.equal(returns, step.expect.returns, `${c.id}: ${what}: refund() returns`);
      }
    }
    if (c.expect_stats) {
      for (const [k, v] of Object.entries(c.expect_stats)) {
        assert.ok(STAT_NAMES[k], `${c.id}: unknown counter ${k}`);
        assert.equal(limiter.stats[STAT_NAMES[k]], v, `${c.id}: stats.${STAT_NAMES[k]}`);
      }
    }
  } finally {
    // a held call never released or cancelled is dropped when the case ends
    for (const p of pending.values()) p.controller.abort();
  }
}

/** keys.json: the pure builder, and the limiter's path to the same key (one key builder). */
async function runKey(c) {
  const skip = c.expect.skip === true;
  if (!skip) {
    assert.equal(bucketKey(c.prefix, c.tag, c.policy, c.route, c.identity), c.expect.key, `${c.id}: bucketKey`);
  }
  const script = new Script();
  const policy = new Policy({ name: c.policy, limit: new Limit(2, 1), key: () => c.identity, perRoute: c.route !== null });
  const limiter = new RateLimiter(script.send, {
    policies: [policy], limitUnmatched: true, prefix: c.prefix, logger: silent, hashTag: () => c.tag,
    clock: { monotonicMs: () => 0, wallMs: () => WALL_ZERO },
  });
  script.expect(skip ? [] : [{ call: ['TB.TAKE', c.expect.key, 2, 1, 1], reply: [1, 1, 0, 1] }]);
  const d = await limiter.check({ request: {}, peer: '203.0.113.9', header: () => [], route: c.route });
  script.verify(c.id, 'limiter key');
  assert.equal(d.outcome, skip ? 'not_limited' : 'allowed', `${c.id}: outcome`);
}

/** header_identity.json: Key.header through the limiter (SPEC I2 + K). */
async function runHeaderIdentity(c) {
  const script = new Script();
  const policy = new Policy({ name: 'key', limit: new Limit(2, 1), key: Key.header(c.header) });
  const limiter = new RateLimiter(script.send, { policies: [policy], logger: silent, clock: { monotonicMs: () => 0, wallMs: () => WALL_ZERO } });
  const e = c.expect;
  script.expect(e.key ? [{ call: ['TB.TAKE', e.key, 2, 1, 1], reply: [1, 1, 0, 1] }] : []);
  const d = await limiter.check(
    { request: {}, peer: '203.0.113.9', header: (name) => (name === c.header ? c.lines : []), route: 'GET /h' },
  );
  script.verify(c.id, 'header identity');
  if (e.key) assert.equal(d.outcome, 'allowed', `${c.id}: outcome`);
  else if (e.skip) assert.equal(d.outcome, 'not_limited', `${c.id}: skipped`);
  else if (e.bad_request) {
    assert.equal(d.outcome, 'bad_request', `${c.id}: outcome`);
    assert.equal(limiter.respond(d).status, 400, `${c.id}: status`);
  } else assert.fail(`${c.id}: unknown expectation ${JSON.stringify(e)}`);
}

function runResponse(c) {
  const results = c.results.map((r) => ({
    name: r.name, key: `rl:${r.name}:x`, capacity: num(r.capacity), rate: r.rate === null ? null : num(r.rate), cost: num(r.cost),
    ...(r.kind === undefined || r.kind === 'bucket' ? {} : { kind: r.kind }),
    allowed: r.allowed, remaining: num(r.remaining), retryAfter: num(r.retry_after), resetAfter: num(r.reset_after),
    shadow: r.shadow,
  }));
  const decision = Decision.fromResults(results, { charged: results.every((r) => r.allowed) });
  const e = c.expect;
  const d = e.decision;
  assert.equal(decision.outcome, d.outcome, `${c.id}: outcome`);
  assert.equal(decision.allowed, d.allowed, `${c.id}: allowed`);
  assert.equal(decision.remaining, d.remaining, `${c.id}: remaining`);
  assert.equal(decision.retryAfter, d.retry_after, `${c.id}: retry_after`);
  assert.equal(decision.resetAfter, d.reset_after, `${c.id}: reset_after`);
  assert.deepEqual(decision.violated, d.violated, `${c.id}: violated`);
  assert.deepEqual([...decision.shadowLimited], d.shadow_limited, `${c.id}: shadow_limited`);
  const res = respond(decision, {
    legacyHeaders: c.legacy !== null, legacyReset: c.legacy ?? 'unix', nowMs: c.now_unix * 1000,
  });
  assert.equal(res.status, e.status, `${c.id}: status`);
  checkHeaders(c.id, res.headers, e.headers);
  assert.equal(res.body, e.body, `${c.id}: body`);
}

// -- startup.json (SPEC U1-U4, K6) ----------------------------------------------------

const STARTUP_LIMITER_FIELDS = new Set(['name', 'policies', 'tag', 'start_degraded', 'backend']);
const STARTUP_CASE_FIELDS = new Set(['id', 'rule', 'title', 'limiter', 'redis', 'expect']);

/** `HELLO`'s reply as the client library hands it: RESP2's flat list, or a map (RESP3). */
function helloReply(reply, form) {
  if (reply === null || typeof reply !== 'object' || Array.isArray(reply)) return wire(reply);
  const entries = Object.entries(reply).map(([k, v]) => [k, wire(v)]);
  if (form === 'map') return new Map(entries);
  if (form === 'object') return Object.fromEntries(entries);
  return entries.flat();
}

/** An expected line with `{reason}` and `{start_degraded}` as a whole-line pattern. */
function linePattern(line) {
  const parts = line.split(/(\{reason\}|\{start_degraded\})/);
  const re = parts.map((p) => {
    if (p === '{reason}') return '[^\\n]+';
    if (p === '{start_degraded}') return 'startDegraded';
    return p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  }).join('');
  return new RegExp(`^${re}$`);
}

async function runStartup(c, form) {
  const { backend = null, backend_log: backendLog = null } = c.expect;
  knownFields(c.id, 'case', c, STARTUP_CASE_FIELDS);
  knownFields(c.id, 'limiter', c.limiter, STARTUP_LIMITER_FIELDS);
  for (const p of c.limiter.policies) knownFields(c.id, 'policy', p, POLICY_FIELDS);
  const script = new Script();
  const logged = [];
  const infos = [];
  const cfg = c.limiter;
  const limiter = new RateLimiter(new TbClient(script.send, { server: '127.0.0.1:6379' }), {
    // the policies the limiter checks (SPEC U3 reads them)
    policies: buildPolicies(cfg.policies, []),
    name: cfg.name,
    logger: { warn: (line) => logged.push(line), info: (line) => infos.push(line) },
    startDegraded: cfg.start_degraded ?? false,
    ...(cfg.backend !== undefined ? { backend: cfg.backend } : {}),
    ...(cfg.tag ? { hashTag: () => 'tag' } : {}),
  });
  script.expect(c.redis.map((r) => (r.call[0] === 'HELLO' && 'reply' in r ? { ...r, reply: undefined, raw: helloReply(r.reply, form) } : r)));
  let error = null;
  try {
    await limiter.startup();
  } catch (err) {
    error = err;
  }
  script.verify(c.id, 'startup');
  // SPEC E6: the backend chosen (null until a degraded start's first call) and its one line
  assert.equal(limiter.stats.backend, backend, `${c.id}: stats.backend`);
  assert.deepEqual(infos, backendLog === null ? [] : [backendLog], `${c.id}: the backend's line`);
  if (c.expect.error !== undefined) {
    assert.ok(error instanceof Error, `${c.id}: the start must fail`);
    assert.match(error.message, linePattern(c.expect.error), `${c.id}: the line`);
    assert.deepEqual(logged, [], `${c.id}: a failed start logs nothing`);
  } else {
    assert.equal(error, null, `${c.id}: the start must pass, got ${error}`);
    assert.equal(c.expect.started, true, `${c.id}: unknown expectation ${JSON.stringify(c.expect)}`);
    if (c.expect.log === null) assert.deepEqual(logged, [], `${c.id}: no line logged`);
    else {
      assert.equal(logged.length, 1, `${c.id}: one line logged: ${JSON.stringify(logged)}`);
      assert.match(logged[0], linePattern(c.expect.log), `${c.id}: the line logged`);
    }
  }
}

/** Each startup case with HELLO's reply in every form a Node client hands it. */
async function runStartupForms(c) {
  for (const form of ['list', 'map', 'object']) {
    try {
      await runStartup(c, form);
    } catch (err) {
      err.message = `(HELLO as a ${form}) ${err.message}`;
      throw err;
    }
  }
}

const HANDLERS = {
  'numbers.json': runNumber,
  'config.json': runConfig,
  'address.json': runAddress,
  'keys.json': runKey,
  'header_identity.json': runHeaderIdentity,
  'response.json': runResponse,
  'limiter.json': runLimiter,
  // limiter.json's cases on the script backend (issue 42: the vectors run on both backends)
  'limiter-scripts.json': runLimiter,
  'startup.json': runStartupForms,
};

const files = fs.readdirSync(DIR).filter((f) => f.endsWith('.json')).sort();

test('the vectors folder holds files and every file has a handler', () => {
  assert.ok(files.length > 0, `no vectors in ${DIR}`);
  const unknown = files.filter((f) => !HANDLERS[f]);
  assert.deepEqual(unknown, [], `vector files without a handler: ${unknown.join(', ')}`);
});

/**
 * Cases of a rule Node does not have yet (id -> SPEC rule): each must fail, and one that
 * passes fails the run: take it off the list. Empty since SPEC E (issue 42) is in Node.
 */
const PENDING = new Map([]);

/** A pending case: it must fail. */
async function pending(c, run) {
  let passed = false;
  try {
    await run(c);
    passed = true;
  } catch {
    // the rule is not in Node yet
  }
  assert.ok(!passed, `${c.id} passes: take it off PENDING (SPEC ${PENDING.get(c.id)}, issue 42)`);
}

const seen = new Set();
for (const file of files) {
  const run = HANDLERS[file];
  if (!run) continue;
  const { cases } = JSON.parse(fs.readFileSync(path.join(DIR, file), 'utf8'));
  describe(`vectors ${file}`, () => {
    test('has cases with unique ids', () => {
      assert.ok(Array.isArray(cases) && cases.length > 0, `${file}: no cases`);
    });
    for (const c of cases) {
      test(`${c.id} (${c.rule}): ${c.title}`, async () => {
        assert.ok(!seen.has(c.id), `${c.id}: duplicated id`);
        seen.add(c.id);
        if (PENDING.has(c.id)) await pending(c, run);
        else await run(c);
      });
    }
  });
}
