//! In-flight limit storage: a sorted set whose members are the leases held
//! (`lease:<16 hex digits>`, `algo::lease::member`) and whose scores are their expiries
//! in whole milliseconds on the server's clock. Every member or score read is checked, so
//! a sorted set that is not ours (a user's, a LOG window's) is refused before anything is
//! written. Writes go through ZsetRem / ZsetAdd and are replicated as the commands a user
//! would send (`ZREM key member ...`, `ZADD key score member`, `PEXPIREAT`): replicas and
//! AOF replay store the same members and absolute expiries, need no module, and never
//! read a clock or make an id. Removing the last member deletes the key, on the master
//! and on replicas alike.

use std::ops::Deref;
use std::os::raw::c_int;

use redis_module::raw::{REDISMODULE_NOTIFY_ZSET, RedisModuleCtx, RedisModuleString};

use crate::algo::expiry::ExpiryPlan;
use crate::algo::lease;
use crate::algo::num::format_whole;
use crate::binding::api::Api;
use crate::binding::store::{Access, Key, Kind, OwnedString};
use crate::error::{LeaseError, TbError};

/// REDISMODULE_ZADD_XX: update an existing member only.
const ZADD_XX: c_int = 1;

/// An open lease key (or a missing one).
pub struct LeaseKey<'a> {
    key: Key<'a>,
    count: u64,
}

impl<'a> Deref for LeaseKey<'a> {
    type Target = Key<'a>;
    fn deref(&self) -> &Key<'a> {
        &self.key
    }
}

/// A lease read from the key: its member string and expiry.
pub struct Held<'a> {
    pub member: OwnedString<'a>,
    pub expiry_ms: u64,
}

impl<'a> LeaseKey<'a> {
    /// Opens `name`. Anything but a sorted set or nothing is WRONGTYPE.
    pub fn open(
        api: &'a Api,
        ctx: *mut RedisModuleCtx,
        name: *mut RedisModuleString,
        access: Access,
    ) -> Result<Self, TbError> {
        let key = Key::open(api, ctx, name, access, Kind::SortedSet)?;
        let count = if key.exists() {
            // SAFETY: valid open sorted-set key.
            unsafe { (api.value_length)(key.key) as u64 }
        } else {
            0
        };
        Ok(LeaseKey { key, count })
    }

    /// Members held, live or not.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The leases with an expiry in `(lo, hi]` (`lo` = -inf: from the first), ascending,
    /// at most `max` of them; any member or score that is not a lease is an error.
    fn range(&self, lo: f64, hi: f64, max: u64) -> Result<Vec<Held<'a>>, TbError> {
        let api = self.key.api;
        let key = self.key.key;
        let mut out = Vec::new();
        if !self.key.exists() || max == 0 {
            return Ok(out);
        }
        let minex = c_int::from(lo > f64::NEG_INFINITY);
        let mut bad = false;
        // SAFETY: valid open sorted-set key with no other iterator active; the iterator is
        // stopped before returning; each element returned is ours to free (OwnedString).
        unsafe {
            let empty = (api.zset_first_in_score_range)(key, lo, hi, minex, 0) != 0
                || (api.zset_range_end_reached)(key) != 0;
            if !empty {
                loop {
                    let mut score = 0.0;
                    let element = (api.zset_range_current_element)(key, &mut score);
                    let member = OwnedString::new(api, self.key.ctx, element);
                    match (
                        lease::valid_expiry(score),
                        member.bytes().is_some_and(lease::is_member),
                    ) {
                        (Some(expiry_ms), true) => out.push(Held { member, expiry_ms }),
                        _ => bad = true,
                    }
                    if bad || out.len() as u64 >= max || (api.zset_range_next)(key) == 0 {
                        break;
                    }
                }
            }
            (api.zset_range_stop)(key);
        }
        if bad {
            return Err(TbError::Lease(LeaseError::NotLeases));
        }
        Ok(out)
    }

    /// The leases that have expired at `now_ms` (expiry <= now), to reclaim.
    pub fn expired(&self, now_ms: u64) -> Result<Vec<Held<'a>>, TbError> {
        self.range(f64::NEG_INFINITY, now_ms as f64, u64::MAX)
    }

    /// The expiries of the first `k` live leases at `now_ms`, ascending (at least the first
    /// one is read, so a key whose live members are not leases is refused).
    pub fn earliest_live(&self, now_ms: u64, k: u64) -> Result<Vec<u64>, TbError> {
        let held = self.range(now_ms as f64, f64::INFINITY, k.max(1))?;
        let mut v: Vec<u64> = held.iter().map(|h| h.expiry_ms).collect();
        v.truncate(usize::try_from(k).unwrap_or(usize::MAX));
        Ok(v)
    }

    /// A string for `member` (freed on drop).
    pub fn string(&self, bytes: &[u8]) -> OwnedString<'a> {
        let api = self.key.api;
        // SAFETY: bytes is valid for its length; the string is freed on drop.
        let ptr = unsafe { (api.create_string)(self.key.ctx, bytes.as_ptr().cast(), bytes.len()) };
        OwnedString::new(api, self.key.ctx, ptr)
    }

    /// The expiry of `member`, if the key holds it (a score that is not an expiry: error).
    pub fn expiry_of(&self, member: &OwnedString) -> Result<Option<u64>, TbError> {
        if !self.key.exists() {
            return Ok(None);
        }
        let mut score = 0.0;
        // SAFETY: valid open sorted-set key; the member string lives for the call.
        let found = unsafe { (self.key.api.zset_score)(self.key.key, member.ptr, &mut score) };
        if found != 0 {
            return Ok(None);
        }
        lease::valid_expiry(score)
            .map(Some)
            .ok_or(TbError::Lease(LeaseError::NotLeases))
    }

    /// Removes `members`, replicating one `ZREM key member ...`.
    pub fn remove(&self, members: &[*mut RedisModuleString]) {
        if members.is_empty() || !self.key.writable() {
            return;
        }
        let api = self.key.api;
        self.key.mark_modified();
        for &m in members {
            let mut deleted: c_int = 0;
            // SAFETY: valid key; the member string lives until the end of the call.
            unsafe { (api.zset_rem)(self.key.key, m, &mut deleted) };
        }
        let mut argv: Vec<*mut RedisModuleString> = Vec::with_capacity(1 + members.len());
        argv.push(self.key.name);
        argv.extend_from_slice(members);
        self.key
            .effect(REDISMODULE_NOTIFY_ZSET, c"zrem", c"ZREM", &mut argv);
    }

    /// After removals: brings a TTL far beyond the latest lease left back
    /// (`lease::shrunk_expiry`); nothing when the key is gone (its last lease removed).
    pub fn fit_expiry(&self, now_ms: u64) {
        let api = self.key.api;
        let key = self.key.key;
        if !self.key.writable() {
            return;
        }
        let mut latest = None;
        // SAFETY: valid open key, no iterator active; a key emptied by ZsetRem reads as
        // empty; the iterator is stopped and the element freed before returning.
        unsafe {
            if (api.key_type)(key) as isize != redis_module::raw::REDISMODULE_KEYTYPE_ZSET {
                return;
            }
            let found = (api.zset_last_in_score_range)(key, f64::NEG_INFINITY, f64::INFINITY, 0, 0)
                == 0
                && (api.zset_range_end_reached)(key) == 0;
            if found {
                let mut score = 0.0;
                let element = (api.zset_range_current_element)(key, &mut score);
                drop(OwnedString::new(api, self.key.ctx, element));
                latest = lease::valid_expiry(score);
            }
            (api.zset_range_stop)(key);
        }
        // SAFETY: valid open key.
        let current = unsafe { (api.get_abs_expire)(key) };
        let current = (current >= 0).then_some(current);
        if let Some(at) = latest.and_then(|l| lease::shrunk_expiry(current, l, now_ms)) {
            self.key.apply_expiry(ExpiryPlan::SetAt(at));
        }
    }

    /// Adds `member` (or, `update`, moves an existing one) at `expiry_ms`, replicating
    /// `ZADD key expiry member` (`ZADD key XX expiry member` for an update), then keeps the
    /// key alive at least as long as the lease (`lease::key_expiry`).
    pub fn put(&self, member: &OwnedString, expiry_ms: u64, lease_ms: u64, update: bool) {
        if !self.key.writable() {
            return;
        }
        let api = self.key.api;
        self.key.mark_modified();
        let mut flags: c_int = if update { ZADD_XX } else { 0 };
        // SAFETY: valid key; ZsetAdd copies what it keeps. A u64 expiry below 2^53 is
        // exact as a double.
        unsafe { (api.zset_add)(self.key.key, expiry_ms as f64, member.ptr, &mut flags) };
        let score = self.string(format_whole(expiry_ms as f64).as_bytes());
        if update {
            let xx = self.string(b"XX");
            self.key.effect(
                REDISMODULE_NOTIFY_ZSET,
                c"zadd",
                c"ZADD",
                &mut [self.key.name, xx.ptr, score.ptr, member.ptr],
            );
        } else {
            self.key.effect(
                REDISMODULE_NOTIFY_ZSET,
                c"zadd",
                c"ZADD",
                &mut [self.key.name, score.ptr, member.ptr],
            );
        }
        // SAFETY: valid open key (it holds the member just added).
        let current = unsafe { (api.get_abs_expire)(self.key.key) };
        let current = (current >= 0).then_some(current);
        if let Some(at) = lease::key_expiry(current, expiry_ms, lease_ms) {
            self.key.apply_expiry(ExpiryPlan::SetAt(at));
        }
    }
}
