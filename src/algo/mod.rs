//! The pure algorithms: plain Rust with time passed in, no Redis types, nothing imported
//! from above this folder (only `num` and each other). Every rule here is unit- and
//! property-tested without a server.
//!
//! - `bucket`: the token bucket of TB.TAKE, TB.MTAKE, TB.RESERVE, TB.PEEK, TB.REFUND
//! - `window`: TB.WINDOW's FIXED, SLIDING and LOG windows
//! - `throttle`: redis-cell's CL.THROTTLE mapped onto a bucket
//! - `hold`: TB.HOLD / TB.SETTLE: an estimate taken now, settled with the actual cost
//! - `lease`: the in-flight limits of TB.ACQUIRE, TB.RELEASE, TB.RENEW
//! - `ids`: lease and hold ids, a ChaCha20 stream keyed by the OS's randomness
//! - `expiry`: when a key's TTL is set, kept or dropped
//! - `clock`: how far ahead of the server's clock a client's `now` may be
//! - `num`: strict number parsing and shortest round-trip formatting

pub mod bucket;
pub mod clock;
pub mod expiry;
pub mod hold;
pub mod ids;
pub mod lease;
pub mod num;
pub mod throttle;
pub mod window;
