/** redis-tb: typed client, rate limiter, express-rate-limit store and scheduler. */
export {
  Backend, ScriptLoadError, backendSetting, freshId, type BackendName, type BackendSetting, type Chosen, type ScriptsVia,
} from './backend.js';
export { functionsLibrary, luaSources, sha1, type LuaSources } from './lua.js';
export { TbClient, type IoRedisLike, type NodeRedisLike, type NowOption, type RedisLike, type SendCommand, type TbClientOptions } from './client.js';
export {
  ClusterKeysError, ModuleNotLoadedError, NoPermissionError, RedisTbError, RedisTbTimeoutError, RedisUnreachableError, SchedulerWaitTooLongError,
  StoreUnavailableError,
  UnexpectedReplyError,
} from './errors.js';
export type {
  Acquired, Charge, HoldReply, LeaseReply, MultiReply, Reservation, SettleReply, Reply, Throttle, WindowMode,
} from './replies.js';
export {
  Decision, type DecisionView, type Hold, type Lease, type Outcome, type PolicyResult, type SettleTarget, type Settlement,
} from './decision.js';
export { DenyCache, type DenyCacheOptions } from './denyCache.js';
export {
  SF_INT_MAX, decisionHeaders, legacyHeaders, policyWindow, quota, ratelimit, ratelimitPolicy, remainingUnits, resetSeconds,
  retryAfterHeader, retryAfterSeconds, windowSeconds, type HeaderOptions, type LegacyReset,
} from './headers.js';
export {
  PROBLEM_TYPE, badRequestProblem, bodyNumber, crossSlotProblem, invalidInputProblem, problem, respond, storeErrorProblem,
  type ProblemBody, type Response,
} from './problem.js';
export {
  ClientIpConfig, formatAddress, formatNetwork, parseAddress, parseNetwork, parsePeer, parseV4Int, type ClientIp,
  type ClientIpOptions,
} from './address.js';
export { bucketKey, boundedPart, escapePart, headerIdentity, type Bytes } from './keys.js';
export { Deadlines } from './deadline.js';
export {
  RateLimiter, systemClock, validPrefix, type RefundOn, type Clock, type LimiterStats, type Logger,
  type RateLimiterOptions, type RequestContext,
} from './limiter.js';
export type { LimiterMetrics } from './metrics.js';
export {
  DEFAULT_MAX_DURATION, InFlightLimit, Key, Limit, MAX_POLICIES, Policy, RouteSet, WindowLimit, checkDistinctNames, checkPolicyKinds, limitKind, perDay, perHour, perMinute, perSecond, tiered, validCost, validLimit,
  validPolicyName, type CostFunc, type KeyFunc, type KeySource, type AnyLimit, type LimitFunc, type LimitKind, type LimitLike, type PerOptions, type WindowModeName,
  type PolicyOptions,
} from './policy.js';
export { RedisTbStore, type ClientRateLimitInfo, type RedisTbStoreOptions, type StoreInitOptions } from './rateLimitStore.js';
export { Scheduler, type SchedulerOptions } from './scheduler.js';
export type { Store } from './store.js';
