//! The Redis binding: everything that touches the module API, and all of the `unsafe`.
//!
//! - `api`: the module API functions, resolved once at load
//! - `store`: key access (open, type check, expiry, the one modified-key signal) and the
//!   bucket / window hash; `Key::effect` notifies and replicates every write
//! - `store_log`: the LOG window's sorted set
//! - `store_lease`: the in-flight limit's sorted set of leases
//! - `random`: the OS's randomness that keys the lease and hold ids
//! - `reply`: RESP2 / RESP3 replies and error replies
//! - `stats`: the per-command counters of `INFO tb`

pub mod api;
pub mod random;
pub mod reply;
pub mod stats;
pub mod store;
pub mod store_lease;
pub mod store_log;
