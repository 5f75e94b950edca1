//! LOG window storage: a sorted set whose members are the admitted requests and whose
//! scores are their times in whole microseconds since the epoch (`window::log_score`;
//! whole numbers stay integers in a small sorted set, which Redis compares without parsing
//! text on every insert). Read lazily from the oldest entry up, only as far as a call
//! asks (see `window::Entries`); written with ZsetRem/ZsetAdd, replicated as the commands
//! a user would send (`ZREM`, `ZADD`, `PEXPIREAT`), so replicas and AOF replay need no
//! module.

use std::cell::{Cell, RefCell};
use std::ops::Deref;
use std::os::raw::c_int;

use redis_module::raw::{REDISMODULE_NOTIFY_ZSET, RedisModuleCtx, RedisModuleString};

use crate::algo::num::{format_f64, format_whole};
use crate::algo::window::{Entries, clamp_entry, is_log_entry, log_time, valid_entry};
use crate::binding::api::Api;
use crate::binding::store::{Access, Key, Kind, OwnedString, string_bytes};
use crate::error::{StateKind, TbError};

/// An open LOG key.
pub struct LogKey<'a> {
    key: Key<'a>,
    count: usize,
    /// The newest entry, as far as a call has needed to know it.
    newest: Cell<Newest>,
    /// The oldest entries read so far, and how far reading has got.
    front: RefCell<Front<'a>>,
}

/// What is known of the newest entry. A call that adds entries only needs to know that
/// none is later than its own time, which a score-range probe tells without reading one.
#[derive(Debug, Clone, Copy)]
enum Newest {
    Unknown,
    /// No entry has a time after this; the newest itself is unread.
    NotAfter(f64),
    /// Read: its score (`None`: the set is empty or missing).
    Read(Option<f64>),
}

/// The oldest entries, read in passes over score ranges: each pass reads the entries in
/// `(read_up_to, hi]` for the `hi` the math asked for, so a call that only needs to know
/// what has left the window never reads (copies) an entry still in it.
struct Front<'a> {
    /// Scores and members read, ascending.
    scores: Vec<f64>,
    members: Vec<OwnedString<'a>>,
    /// Every entry with a score at or below this has been read.
    read_up_to: f64,
    /// A pass is under way (the key's range iterator is active), up to `pass_hi`.
    active: bool,
    pass_hi: f64,
    /// Every entry has been read.
    done: bool,
    /// A score that is not an accepted time (set by hand): the call fails as corrupt.
    corrupt: bool,
    /// A member read that is not a LOG entry (`window::is_log_entry`): the set is someone
    /// else's (a leaderboard), and the call fails without writing.
    foreign: bool,
    /// Some member has been checked by `is_log_entry` (the oldest is checked at the end
    /// when the call read none).
    checked: bool,
    /// A member of TB.ACQUIRE's leases: the key is an in-flight limit, not a window.
    leases: bool,
}

impl Front<'_> {
    /// Records what a member read says about the set: a score that is not a time, or a
    /// member that is not an entry.
    fn check(&mut self, api: &Api, element: *mut RedisModuleString, score: f64) {
        self.checked = true;
        if !valid_entry(log_time(score)) {
            self.corrupt = true;
        }
        let bytes = if element.is_null() {
            &[][..]
        } else {
            string_bytes(api, element)
        };
        if crate::algo::lease::is_member(bytes) || crate::algo::lease::is_marker(bytes, score) {
            self.leases = true;
        } else if element.is_null() || !is_log_entry(bytes, score) {
            self.foreign = true;
        }
    }
}

impl Front<'_> {
    /// A pass up to `hi` has read everything it covers.
    fn passed(&mut self, hi: f64) {
        if hi == f64::INFINITY {
            self.done = true;
        } else {
            self.read_up_to = self.read_up_to.max(hi);
        }
    }
}

impl<'a> Deref for LogKey<'a> {
    type Target = Key<'a>;
    fn deref(&self) -> &Key<'a> {
        &self.key
    }
}

impl<'a> LogKey<'a> {
    /// Opens `name` for writing. Anything but a sorted set or nothing is WRONGTYPE.
    pub fn open(
        api: &'a Api,
        ctx: *mut RedisModuleCtx,
        name: *mut RedisModuleString,
    ) -> Result<Self, TbError> {
        let key = Key::open(api, ctx, name, Access::Write, Kind::SortedSet)?;
        let (count, newest) = if key.exists() {
            // SAFETY: valid open sorted-set key.
            (unsafe { (api.value_length)(key.key) }, Newest::Unknown)
        } else {
            (0, Newest::Read(None))
        };
        Ok(LogKey {
            key,
            count,
            newest: Cell::new(newest),
            front: RefCell::new(Front {
                scores: Vec::new(),
                members: Vec::new(),
                read_up_to: f64::NEG_INFINITY,
                active: false,
                pass_hi: f64::NEG_INFINITY,
                done: false,
                corrupt: false,
                foreign: false,
                checked: false,
                leases: false,
            }),
        })
    }

    /// Reads entries from the oldest up, none with a score above `hi`, until `more` says
    /// stop (given the scores so far). Afterwards `more` is false, or every entry with a
    /// score up to `hi` has been read.
    fn read_while(&self, hi: f64, more: impl Fn(&[f64]) -> bool) {
        let Ok(mut front) = self.front.try_borrow_mut() else {
            return;
        };
        let api = self.key.api;
        let key = self.key.key;
        if !self.key.exists() {
            return;
        }
        while !front.done && more(&front.scores) {
            if !front.active {
                if front.read_up_to >= hi {
                    return;
                }
                // The next pass starts after the last one (all of whose scores were read).
                let lo = front.read_up_to;
                let minex = c_int::from(lo > f64::NEG_INFINITY);
                // SAFETY: valid open sorted-set key; no other iterator is active on it
                // (passes run one at a time, and reading the newest ends them), and an
                // empty one is stopped at once.
                let empty = unsafe {
                    let ok = (api.zset_first_in_score_range)(key, lo, hi, minex, 0);
                    let empty = ok != 0 || (api.zset_range_end_reached)(key) != 0;
                    if empty {
                        (api.zset_range_stop)(key);
                    }
                    empty
                };
                if empty {
                    front.passed(hi);
                    continue;
                }
                if front.scores.capacity() == 0 {
                    // Most calls that read at all read a few entries: one allocation each.
                    let expect = self.count.min(16);
                    front.scores.reserve(expect);
                    front.members.reserve(expect);
                }
                front.active = true;
                front.pass_hi = hi;
            }
            let mut score = 0.0;
            // SAFETY: the pass's iterator is active; the element is ours to free
            // (OwnedString frees it).
            let element = unsafe { (api.zset_range_current_element)(key, &mut score) };
            front.check(api, element, score);
            let member = OwnedString::new(api, self.key.ctx, element);
            front.scores.push(score);
            front.members.push(member);
            // SAFETY: as above; a pass that has ended is stopped.
            if unsafe { (api.zset_range_next)(key) } == 0 {
                unsafe { (api.zset_range_stop)(key) };
                front.active = false;
                let pass_hi = front.pass_hi;
                front.passed(pass_hi);
            }
        }
    }

    /// Ends reading (the iterator must stop before the set is written); fails if any
    /// member read had a score that is not an accepted time (corrupt), or is not a LOG
    /// entry (someone else's set; the oldest is read for this when the call read none, so
    /// every call on an existing set checks at least one member).
    pub fn finish_reading(&self) -> Result<(), TbError> {
        let Ok(mut front) = self.front.try_borrow_mut() else {
            return Err(TbError::Internal);
        };
        let api = self.key.api;
        let key = self.key.key;
        if front.active && self.key.exists() {
            // SAFETY: stopping an iterator (or none) on a valid open key is allowed.
            unsafe { (api.zset_range_stop)(key) };
            front.active = false;
        }
        if !front.checked && self.key.exists() {
            let mut score = 0.0;
            // SAFETY: valid open sorted-set key with no active iterator (stopped above);
            // this one is stopped before returning, and the element is ours to free.
            unsafe {
                let found =
                    (api.zset_first_in_score_range)(key, f64::NEG_INFINITY, f64::INFINITY, 0, 0)
                        == 0
                        && (api.zset_range_end_reached)(key) == 0;
                if found {
                    let element = (api.zset_range_current_element)(key, &mut score);
                    front.check(api, element, score);
                    drop(OwnedString::new(api, self.key.ctx, element));
                }
                (api.zset_range_stop)(key);
            }
        }
        if front.leases {
            Err(TbError::Lease(crate::error::LeaseError::LeasesNotWindow))
        } else if front.corrupt {
            Err(TbError::CorruptLog)
        } else if front.foreign {
            Err(TbError::NotLimiterState(StateKind::Log))
        } else {
            Ok(())
        }
    }

    /// The newest entry's score (whole microseconds), if it has been read: when the call
    /// only learnt that no entry is later than its own time, `None` (its entries go at
    /// its own time, which sorts at or after every entry).
    pub fn newest_score(&self) -> Option<f64> {
        match self.newest.get() {
            Newest::Read(score) => score,
            Newest::Unknown | Newest::NotAfter(_) => None,
        }
    }

    /// Ends an unfinished pass over the oldest entries so the key's one iterator can serve
    /// another range, and forgets what it read: a later read starts again from the oldest
    /// entry. (The math reads the newest entry after the oldest ones it needs, so this is a
    /// fallback that keeps reading right whatever the order, not a path calls take.)
    fn end_front_pass(&self) {
        let Ok(mut front) = self.front.try_borrow_mut() else {
            return;
        };
        if !front.active {
            return;
        }
        // SAFETY: the pass's iterator is active on this valid open key.
        unsafe { (self.key.api.zset_range_stop)(self.key.key) };
        front.active = false;
        front.scores.clear();
        front.members.clear();
        front.read_up_to = f64::NEG_INFINITY;
    }

    /// Reads the newest entry with the range `(lo, +inf]` (`lo` = -inf: any), the key's
    /// iterator taken from any other pass; `None` if the range is empty. A score that is
    /// not an accepted time marks the log corrupt.
    fn read_newest_above(&self, lo: f64) -> Option<f64> {
        self.end_front_pass();
        let api = self.key.api;
        let key = self.key.key;
        let minex = c_int::from(lo > f64::NEG_INFINITY);
        let mut score = 0.0;
        // SAFETY: valid open sorted-set key; no other iterator is active (ended above);
        // this one is stopped before returning, and the element is ours to free.
        let found = unsafe {
            let found = (api.zset_last_in_score_range)(key, lo, f64::INFINITY, minex, 0) == 0
                && (api.zset_range_end_reached)(key) == 0;
            if found {
                let element = (api.zset_range_current_element)(key, &mut score);
                if let Ok(mut front) = self.front.try_borrow_mut() {
                    front.check(api, element, score);
                }
                drop(OwnedString::new(api, self.key.ctx, element));
            }
            (api.zset_range_stop)(key);
            found
        };
        found.then_some(score)
    }

    /// Removes the `removed` oldest entries and adds `add` entries at `score` (whole
    /// microseconds), notifying and replicating `ZREM key member ...` (the removed entries
    /// by name: counting them read their members) and `ZADD key score member ...`.
    /// `finish_reading` must have run.
    ///
    /// Members are `<score>-<k>` for k = `first`, `first + 1`, ...: requests in the same
    /// microsecond are separate members (the notes' script used the time alone, so they
    /// collapsed into one entry and the limit leaked). The caller numbers them by the log's
    /// size once the removed entries are gone: between two calls that add at one score the
    /// cutoff is the same (it follows the newest entry), so nothing is removed and the size
    /// only grows, which keeps every number at that score distinct without reading those
    /// entries back.
    pub fn write(&self, removed: usize, score: f64, first: u64, add: u64) {
        let api = self.key.api;
        let ctx = self.key.ctx;
        let key = self.key.key;
        if !self.key.writable() || (removed == 0 && add == 0) {
            return;
        }
        let Ok(front) = self.front.try_borrow() else {
            return;
        };
        // Counting what leaves the window read those entries already.
        let removed = removed.min(front.members.len());
        // SAFETY: reading has stopped (finish_reading); valid open key.
        unsafe { (api.zset_range_stop)(key) };
        self.key.mark_modified();
        if removed > 0 {
            let gone = front.members.get(..removed).unwrap_or(&[]);
            for member in gone {
                let mut deleted: c_int = 0;
                // SAFETY: valid key; the member string lives until the end of the call.
                unsafe { (api.zset_rem)(key, member.ptr, &mut deleted) };
            }
            // ZREM key member ...: one entry (the usual call) needs no allocation of ours.
            if let [one] = gone {
                self.key.effect(
                    REDISMODULE_NOTIFY_ZSET,
                    c"zrem",
                    c"ZREM",
                    &mut [self.key.name, one.ptr],
                );
            } else {
                let mut argv: Vec<*mut RedisModuleString> = Vec::with_capacity(1 + gone.len());
                argv.push(self.key.name);
                argv.extend(gone.iter().map(|m| m.ptr));
                self.key
                    .effect(REDISMODULE_NOTIFY_ZSET, c"zrem", c"ZREM", &mut argv);
            }
        }
        if add == 0 {
            return;
        }
        let new_string = |bytes: &[u8]| {
            // SAFETY: bytes is valid for its length; the string is freed on drop.
            let ptr = unsafe { (api.create_string)(ctx, bytes.as_ptr().cast(), bytes.len()) };
            OwnedString::new(api, ctx, ptr)
        };
        let score_text = format_whole(score);
        let score_text = score_text.as_bytes();
        let score_string = new_string(score_text);
        let member = |k: u64| {
            // At most 24 bytes of score, the dash and 20 digits.
            let mut text = [0u8; 48];
            let k = format_f64(k as f64);
            let mut len = 0;
            for part in [score_text, b"-", k.as_bytes()] {
                if let Some(dst) = text.get_mut(len..len + part.len()) {
                    dst.copy_from_slice(part);
                    len += part.len();
                }
            }
            let m = new_string(text.get(..len).unwrap_or(&[]));
            let mut flags: c_int = 0;
            // SAFETY: valid key; ZsetAdd copies what it keeps.
            unsafe { (api.zset_add)(key, score, m.ptr, &mut flags) };
            m
        };
        // ZADD key score member [score member ...]: one entry (the usual call) needs no
        // allocation of ours.
        if add == 1 {
            let m = member(first);
            let mut argv = [self.key.name, score_string.ptr, m.ptr];
            self.key
                .effect(REDISMODULE_NOTIFY_ZSET, c"zadd", c"ZADD", &mut argv);
        } else {
            let members: Vec<OwnedString> = (0..add).map(|i| member(first + i)).collect();
            let mut argv: Vec<*mut RedisModuleString> = Vec::with_capacity(1 + 2 * members.len());
            argv.push(self.key.name);
            for m in &members {
                argv.push(score_string.ptr);
                argv.push(m.ptr);
            }
            self.key
                .effect(REDISMODULE_NOTIFY_ZSET, c"zadd", c"ZADD", &mut argv);
        }
    }
}

impl Entries for LogKey<'_> {
    fn count(&self) -> usize {
        self.count
    }

    fn newest(&self) -> Option<f64> {
        if let Newest::Read(score) = self.newest.get() {
            return score.map(log_time);
        }
        let score = self.read_newest_above(f64::NEG_INFINITY);
        self.newest.set(Newest::Read(score));
        score.map(log_time)
    }

    fn newest_after(&self, t: f64) -> Option<f64> {
        match self.newest.get() {
            Newest::Read(score) => return score.map(log_time).filter(|&n| n > t),
            Newest::NotAfter(u) if t >= u => return None,
            Newest::Unknown | Newest::NotAfter(_) => {}
        }
        // Every score whose time is after t is above this: an empty range above it means
        // nothing is after t, without reading an entry (the usual call: its own time is
        // the latest); otherwise its last entry is the newest.
        let lo = crate::algo::window::log_score_at_or_before(t);
        match self.read_newest_above(lo) {
            None => {
                self.newest.set(Newest::NotAfter(t));
                None
            }
            Some(score) => {
                self.newest.set(Newest::Read(Some(score)));
                Some(log_time(score)).filter(|&n| n > t)
            }
        }
    }

    fn count_up_to(&self, t: f64) -> usize {
        let time = |s: f64| clamp_entry(log_time(s));
        // Every score whose time reads as <= t is below this (the margin covers the
        // division's rounding), so the entries past it need not be read; so are negative
        // scores, which are corrupt: read, they are reported.
        let hi = (t * 1e6 * (1.0 + 1e-12) + 1.0).max(-0.5);
        self.read_while(hi, |scores| scores.last().is_none_or(|&s| time(s) <= t));
        self.front
            .try_borrow()
            .map(|f| f.scores.partition_point(|&s| time(s) <= t))
            .unwrap_or(0)
    }

    fn nth(&self, i: usize) -> Option<f64> {
        self.read_while(f64::INFINITY, |scores| scores.len() <= i);
        self.front
            .try_borrow()
            .ok()?
            .scores
            .get(i)
            .copied()
            .map(log_time)
    }
}
