/** redis-tb: typed client, rate limiter, express-rate-limit store and scheduler. */
export { TbClient, type IoRedisLike, type NodeRedisLike, type NowOption, type RedisLike, type SendCommand, type TbClientOptions } from './client.js';
export {
  ModuleNotLoadedError, RedisTbError, RedisTbTimeoutError, SchedulerWaitTooLongError, UnexpectedReplyError,
} from './errors.js';
export type { Bucket, MultiReply, ReserveReply, TbReply, ThrottleReply, WindowMode } from './replies.js';
export { Decision, type DecisionView, type Outcome, type PolicyResult } from './decision.js';
export { DenyCache, type DenyCacheOptions } from './denycache.js';
export {
  PROBLEM_TYPE, SF_INT_MAX, decisionHeaders, legacyHeaders, problem, quota, ratelimit, ratelimitPolicy,
  remainingUnits, resetSeconds, retryAfterHeader, retryAfterSeconds, storeErrorProblem, windowSeconds,
  type HeaderOptions, type LegacyReset, type ProblemBody,
} from './headers.js';
export { ClientIp, formatAddress, parseAddress, parseV4Int, type ClientIpOptions } from './ip.js';
export { Deadlines } from './deadline.js';
export { RateLimiter, type LimiterStats, type Logger, type RateLimiterOptions, type RequestContext } from './limiter.js';
export type { LimiterMetrics } from './metrics.js';
export {
  Limit, Policy, perDay, perHour, perMinute, perSecond, tiered,
  type CostFunc, type KeyFunc, type LimitFunc, type PerOptions, type PolicyOptions,
} from './policy.js';
export { RedisTbStore, type ClientRateLimitInfo, type RedisTbStoreOptions, type StoreInitOptions } from './store.js';
export { Scheduler, type SchedulerOptions } from './scheduler.js';
export type { RefundOn } from './adapter.js';
