//! In-flight limit storage: a sorted set whose members are the leases held
//! (`lease:<16 hex digits>`, `algo::lease::member`) and whose scores are their expiries
//! in whole milliseconds on the server's clock, plus one marker member
//! (`algo::lease::MARKER`, score -1, so always first) written with the key's first lease:
//! a sorted set whose first member is not the marker is not one this module made and is
//! refused before anything is written, unless every one of its members is a lease (a key
//! written before the marker existed, adopted and marked by its next write). Every member
//! or score read is checked too, so a sorted set that is not ours (a user's, a LOG
//! window's) is refused before anything is written. Writes go through ZsetRem / ZsetAdd and are replicated as the commands a user
//! would send (`ZREM key member ...`, `ZADD key score member`, `PEXPIREAT`): replicas and
//! AOF replay store the same members and absolute expiries, need no module, and never
//! read a clock or make an id. Removing the last member deletes the key, on the master
//! and on replicas alike.

use std::cell::Cell;
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
/// REDISMODULE_ZADD_NX: add a new member only.
const ZADD_NX: c_int = 1 << 1;
/// REDISMODULE_ZADD_NOP (out flag): nothing was done, because of XX or NX.
const ZADD_NOP: c_int = 1 << 4;

/// An open lease key (or a missing one).
pub struct LeaseKey<'a> {
    key: Key<'a>,
    /// Leases held, live or not (the marker is not one).
    count: Cell<u64>,
    /// The key holds the marker. False for a missing key and for a set of leases written
    /// before the marker existed: the next write adds it.
    marked: Cell<bool>,
}

impl<'a> Deref for LeaseKey<'a> {
    type Target = Key<'a>;
    fn deref(&self) -> &Key<'a> {
        &self.key
    }
}

/// An expired lease read from the key, to reclaim: its member string.
pub struct Held<'a> {
    pub member: OwnedString<'a>,
}

/// What [`LeaseKey::front`] read.
pub struct Front<'a> {
    /// The expired leases, to reclaim.
    pub expired: Vec<Held<'a>>,
    /// The expiries of the first `k` live leases, ascending.
    pub live: Vec<u64>,
    /// The earliest live lease: its member string and expiry.
    pub first_live: Option<(OwnedString<'a>, u64)>,
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
        if !key.exists() {
            return Ok(LeaseKey {
                key,
                count: Cell::new(0),
                marked: Cell::new(false),
            });
        }
        // SAFETY: valid open sorted-set key.
        let members = unsafe { (api.value_length)(key.key) as u64 };
        let marked = first_is_marker(&key);
        if !marked {
            every_member_is_a_lease(&key, members)?;
        }
        Ok(LeaseKey {
            key,
            count: Cell::new(members - u64::from(marked)),
            marked: Cell::new(marked),
        })
    }

    /// Leases held, live or not.
    pub fn count(&self) -> u64 {
        self.count.get()
    }

    /// One pass from the earliest lease: the leases expired at `now_ms` (expiry <= now, to
    /// reclaim), the expiries of the first `k` (at least one) live ones, ascending, and
    /// the earliest live lease itself (its member string and expiry: a release or renewal
    /// of that lease, the usual one on a key with one lease in flight, needs no lookup
    /// and no string of its own). Every member and score read is checked, so a sorted set
    /// that is not ours is refused before anything is written.
    pub fn front(&self, now_ms: u64, k: u64) -> Result<Front<'a>, TbError> {
        let api = self.key.api;
        let key = self.key.key;
        let (mut expired, mut live) = (Vec::new(), Vec::new());
        let mut first_live = None;
        if !self.key.exists() {
            return Ok(Front {
                expired,
                live,
                first_live,
            });
        }
        // At least one live member is read (checked), but only `k` expiries are kept: a
        // release or renewal (k = 0) allocates nothing here.
        let want = k.max(1);
        let mut seen_live: u64 = 0;
        let mut bad = false;
        // SAFETY: valid open sorted-set key with no other iterator active; the iterator is
        // stopped before returning; each element returned is ours to free (OwnedString).
        unsafe {
            // From score 0: every expiry is there, and the marker (-1) is not.
            let empty = (api.zset_first_in_score_range)(key, 0.0, f64::INFINITY, 0, 0) != 0
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
                        (Some(e), true) if !lease::is_live(e, now_ms) => {
                            expired.push(Held { member })
                        }
                        (Some(e), true) => {
                            seen_live += 1;
                            if (live.len() as u64) < k {
                                live.push(e);
                            }
                            if first_live.is_none() {
                                first_live = Some((member, e));
                            }
                        }
                        _ => bad = true,
                    }
                    if bad || seen_live >= want || (api.zset_range_next)(key) == 0 {
                        break;
                    }
                }
            }
            (api.zset_range_stop)(key);
        }
        if bad {
            return Err(TbError::Lease(LeaseError::NotLeases));
        }
        Ok(Front {
            expired,
            live,
            first_live,
        })
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

    /// Removes the `expired` leases and `extra` (a released one), and the marker with the
    /// last lease (the key goes), replicating one `ZREM key member ...`. Up to six members
    /// go through a stack array.
    pub fn remove(&self, expired: &[Held], extra: Option<*mut RedisModuleString>) {
        let leases = expired.len() + usize::from(extra.is_some());
        if leases == 0 || !self.key.writable() {
            return;
        }
        let api = self.key.api;
        self.key.mark_modified();
        let left = self.count.get().saturating_sub(leases as u64);
        self.count.set(left);
        let marker = (left == 0 && self.marked.get()).then(|| self.string(lease::MARKER));
        self.marked.set(self.marked.get() && marker.is_none());
        let count = leases + usize::from(marker.is_some());
        let members = expired
            .iter()
            .map(|h| h.member.ptr)
            .chain(extra)
            .chain(marker.as_ref().map(|m| m.ptr));
        for m in members.clone() {
            let mut deleted: c_int = 0;
            // SAFETY: valid key; the member string lives until the end of the call.
            unsafe { (api.zset_rem)(self.key.key, m, &mut deleted) };
        }
        const STACK: usize = 7;
        let mut small = [std::ptr::null_mut(); STACK];
        let mut large = Vec::new();
        let argv: &mut [*mut RedisModuleString] = if count < STACK {
            for (slot, m) in small
                .iter_mut()
                .zip(std::iter::once(self.key.name).chain(members))
            {
                *slot = m;
            }
            small.get_mut(..=count).unwrap_or(&mut [])
        } else {
            large.reserve_exact(1 + count);
            large.push(self.key.name);
            large.extend(members);
            &mut large
        };
        self.key
            .effect(REDISMODULE_NOTIFY_ZSET, c"zrem", c"ZREM", argv);
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
    ///
    /// A new member is added only if absent (`NX`): false, and nothing written, when the
    /// key already holds it (an id collision: the caller draws another).
    pub fn put(&self, member: &OwnedString, expiry_ms: u64, lease_ms: u64, update: bool) -> bool {
        if !self.key.writable() {
            return false;
        }
        let api = self.key.api;
        let mut flags: c_int = if update { ZADD_XX } else { ZADD_NX };
        // SAFETY: valid key; ZsetAdd copies what it keeps. A u64 expiry below 2^53 is
        // exact as a double.
        unsafe { (api.zset_add)(self.key.key, expiry_ms as f64, member.ptr, &mut flags) };
        if flags & ZADD_NOP != 0 {
            return false;
        }
        self.key.mark_modified();
        if !update {
            self.count.set(self.count.get().saturating_add(1));
        }
        let score = self.string(format_whole(expiry_ms as f64).as_bytes());
        // A key this call made (or one written before the marker existed) gets its marker
        // now: in the grant's own ZADD, or in one of its own before a renewal's ZADD XX.
        let marker = (!self.marked.get()).then(|| self.add_marker());
        match (&marker, update) {
            (Some((mscore, mname)), false) => self.key.effect(
                REDISMODULE_NOTIFY_ZSET,
                c"zadd",
                c"ZADD",
                &mut [self.key.name, mscore.ptr, mname.ptr, score.ptr, member.ptr],
            ),
            (_, false) => self.key.effect(
                REDISMODULE_NOTIFY_ZSET,
                c"zadd",
                c"ZADD",
                &mut [self.key.name, score.ptr, member.ptr],
            ),
            (_, true) => {
                if let Some((mscore, mname)) = &marker {
                    self.key.effect(
                        REDISMODULE_NOTIFY_ZSET,
                        c"zadd",
                        c"ZADD",
                        &mut [self.key.name, mscore.ptr, mname.ptr],
                    );
                }
                let xx = self.string(b"XX");
                self.key.effect(
                    REDISMODULE_NOTIFY_ZSET,
                    c"zadd",
                    c"ZADD",
                    &mut [self.key.name, xx.ptr, score.ptr, member.ptr],
                );
            }
        }
        // SAFETY: valid open key (it holds the member just added).
        let current = unsafe { (api.get_abs_expire)(self.key.key) };
        let current = (current >= 0).then_some(current);
        if let Some(at) = lease::key_expiry(current, expiry_ms, lease_ms) {
            self.key.apply_expiry(ExpiryPlan::SetAt(at));
        }
        true
    }

    /// Adds the marker (score -1) and returns its score and member strings for the
    /// replicated ZADD.
    fn add_marker(&self) -> (OwnedString<'a>, OwnedString<'a>) {
        let name = self.string(lease::MARKER);
        let mut flags: c_int = ZADD_NX;
        // SAFETY: valid writable key; ZsetAdd copies what it keeps.
        unsafe { (self.key.api.zset_add)(self.key.key, lease::MARKER_SCORE, name.ptr, &mut flags) };
        self.marked.set(true);
        (self.string(b"-1"), name)
    }
}

/// Whether the set's first member (lowest score) is the marker.
fn first_is_marker(key: &Key) -> bool {
    let api = key.api;
    let mut found = false;
    // SAFETY: valid open sorted-set key with no other iterator active; the iterator is
    // stopped and the element freed before returning.
    unsafe {
        let started =
            (api.zset_first_in_score_range)(key.key, f64::NEG_INFINITY, f64::INFINITY, 0, 0) == 0
                && (api.zset_range_end_reached)(key.key) == 0;
        if started {
            let mut score = 0.0;
            let element = (api.zset_range_current_element)(key.key, &mut score);
            let member = OwnedString::new(api, key.ctx, element);
            found = member.bytes().is_some_and(|b| lease::is_marker(b, score));
        }
        (api.zset_range_stop)(key.key);
    }
    found
}

/// A set without the marker is ours only if every member is a lease with an expiry this
/// module could have written (a key from before the marker): read whole, once, since its
/// next write marks it. A set of more members than a key can hold is not ours.
fn every_member_is_a_lease(key: &Key, members: u64) -> Result<(), TbError> {
    if members > lease::MAX_LIMIT {
        return Err(TbError::Lease(LeaseError::NotLeases));
    }
    let api = key.api;
    let mut ok = true;
    // SAFETY: valid open sorted-set key with no other iterator active; the iterator is
    // stopped before returning; each element is freed (OwnedString).
    unsafe {
        let started =
            (api.zset_first_in_score_range)(key.key, f64::NEG_INFINITY, f64::INFINITY, 0, 0) == 0
                && (api.zset_range_end_reached)(key.key) == 0;
        if started {
            loop {
                let mut score = 0.0;
                let element = (api.zset_range_current_element)(key.key, &mut score);
                let member = OwnedString::new(api, key.ctx, element);
                ok = lease::valid_expiry(score).is_some()
                    && member.bytes().is_some_and(lease::is_member);
                if !ok || (api.zset_range_next)(key.key) == 0 {
                    break;
                }
            }
        }
        (api.zset_range_stop)(key.key);
    }
    if ok {
        Ok(())
    } else {
        Err(TbError::Lease(LeaseError::NotLeases))
    }
}
