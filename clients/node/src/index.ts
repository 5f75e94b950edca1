/** redis-tb: typed client, rate limiter, express-rate-limit store and scheduler. */
export { TbClient, type IoRedisLike, type NodeRedisLike, type NowOption, type RedisLike, type SendCommand, type TbClientOptions } from './client.js';
export {
  ClusterKeysError, ModuleNotLoadedError, NoPermissionError, RedisTbError, RedisTbTimeoutError, RedisUnreachableError, SchedulerWaitTooLongError,
  StoreUnavailableError,
  UnexpectedReplyError,
} from './errors.js';
export type {
  AcquireReply, Bucket, HoldReply, LeaseReply, MultiReply, ReserveReply, SettleReply, TbReply, ThrottleReply, WindowMode,
} from './replies.js';
export {
  Decision, type DecisionView, type Hold, type Lease, type Outcome, type PolicyResult, type SettleTarget, type Settlement,
} from './decision.js';
export { DenyCache, type DenyCacheOptions } from './denycache.js';
export {
  PROBLEM_TYPE, SF_INT_MAX, badRequestProblem, bodyNumber, crossSlotProblem, decisionHeaders, invalidInputProblem, legacyHeaders, problem,
  policyWindow, quota, ratelimit, ratelimitPolicy, remainingUnits, resetSeconds, respond, retryAfterHeader, retryAfterSeconds,
  storeErrorProblem, windowSeconds, type HeaderOptions, type LegacyReset, type ProblemBody, type Response,
} from './headers.js';
export {
  ClientIpConfig, formatAddress, formatNetwork, parseAddress, parseNetwork, parsePeer, parseV4Int, type ClientIp,
  type ClientIpOptions,
} from './ip.js';
export { bucketKey, boundedPart, escapePart, type Bytes } from './keys.js';
export { Deadlines } from './deadline.js';
export {
  RateLimiter, headerIdentity, systemClock, validPrefix, type Clock, type LimiterStats, type Logger,
  type RateLimiterOptions, type RequestContext,
} from './limiter.js';
export type { LimiterMetrics } from './metrics.js';
export {
  DEFAULT_MAX_DURATION, InFlightLimit, Key, Limit, MAX_POLICIES, Policy, RouteSet, WindowLimit, checkDistinctNames, checkPolicyKinds, limitKind, perDay, perHour, perMinute, perSecond, tiered, validCost, validLimit,
  validPolicyName, type CostFunc, type KeyFunc, type KeySource, type AnyLimit, type LimitFunc, type LimitKind, type LimitLike, type PerOptions, type WindowModeName,
  type PolicyOptions,
} from './policy.js';
export { RedisTbStore, type ClientRateLimitInfo, type RedisTbStoreOptions, type StoreInitOptions } from './store.js';
export { Scheduler, type SchedulerOptions } from './scheduler.js';
export type { RefundOn } from './adapter.js';
