//! Key storage: all unsafe key access. An open key of the kind a command expects (a hash
//! for the token bucket and the FIXED and SLIDING windows, a sorted set for the LOG
//! window, in `store_log.rs`), its expiry, and the one modified-key signal; the hash
//! fields read and written with their effects replicated (HSET, PEXPIREAT) so replicas
//! and AOF replay store exactly the same bytes, need no module, and never recompute
//! anything with another clock.

use std::cell::Cell;
use std::ffi::CStr;
use std::ops::Deref;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::OnceLock;

use redis_module::raw::{
    REDISMODULE_KEYTYPE_EMPTY, REDISMODULE_KEYTYPE_HASH, REDISMODULE_KEYTYPE_ZSET,
    REDISMODULE_NOTIFY_GENERIC, REDISMODULE_NOTIFY_HASH, REDISMODULE_READ, REDISMODULE_WRITE,
    RedisModuleCtx, RedisModuleKey, RedisModuleString,
};

use crate::algo::bucket::State;
use crate::algo::expiry::ExpiryPlan;
use crate::algo::window::Mode;
use crate::binding::api::Api;
use crate::error::{Field, StateKind, TbError};
use crate::parse::fields::{self, Held, WindowFields};

const HASH_NONE: c_int = 0;
const NO_EXPIRE: i64 = -1;
/// REDISMODULE_HASH_DELETE: the value HashSet takes as "delete this field".
const HASH_DELETE: *mut RedisModuleString = std::ptr::without_provenance_mut(1);

/// The field-name strings, created once: building them per call is measurable.
struct FieldNames([*mut RedisModuleString; 7]);

// SAFETY: the strings are created at load and only ever read (never mutated or freed)
// by commands, which Redis runs on its main thread.
unsafe impl Send for FieldNames {}
unsafe impl Sync for FieldNames {}

impl FieldNames {
    fn get(&self, field: Field) -> *mut RedisModuleString {
        let i = match field {
            Field::Tokens => 0,
            Field::LastRefillTime => 1,
            Field::Start => 2,
            Field::Count => 3,
            Field::Previous => 4,
            Field::Counts => 5,
            Field::Holds => 6,
        };
        self.0.get(i).copied().unwrap_or(null_mut())
    }
}

static FIELDS: OnceLock<FieldNames> = OnceLock::new();

/// Creates the field-name strings. Called once from module init.
pub fn init(api: &Api) {
    let make = |name: &str| {
        // SAFETY: a NULL context creates a string owned by us, valid until freed; we
        // never free it (it lives as long as the module).
        unsafe { (api.create_string)(null_mut(), name.as_ptr().cast(), name.len()) }
    };
    FIELDS.get_or_init(|| {
        FieldNames(
            [
                "tokens",
                "last_refill_time",
                "start",
                "count",
                "previous",
                "counts",
                "holds",
            ]
            .map(make),
        )
    });
}

/// Frees the field-name strings. Called from module deinit (MODULE UNLOAD), after which no
/// command of ours can run.
pub fn deinit(api: &Api) {
    if let Some(fields) = FIELDS.get() {
        for &s in &fields.0 {
            // SAFETY: created by `init` with a NULL context and never freed before; nothing
            // uses them after unload.
            unsafe { (api.free_string)(null_mut(), s) };
        }
    }
}

/// How a command opens its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and write (every command that may take or give back tokens).
    Write,
    /// Read only (TB.PEEK): a missing key stays missing, and the command may run on a
    /// replica, where a logically expired key reads as empty.
    Read,
}

/// The type of value a command keeps at its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Hash,
    SortedSet,
}

/// An open key of the expected kind, or a missing one. Closed on drop, also on an early
/// error return; opened read-only, `key` is NULL for a missing key and nothing is ever
/// written through it.
pub struct Key<'a> {
    pub(crate) api: &'a Api,
    pub(crate) ctx: *mut RedisModuleCtx,
    pub(crate) name: *mut RedisModuleString,
    pub(crate) key: *mut RedisModuleKey,
    exists: bool,
    /// Set by a write or an expiry change: the key is signalled as modified (WATCH,
    /// client-side caching) once, when it is closed. The module sets
    /// NO_IMPLICIT_SIGNAL_MODIFIED, so a call that writes nothing signals nothing.
    modified: Cell<bool>,
}

impl<'a> Key<'a> {
    /// Opens `name`. Anything but `kind` or nothing is WRONGTYPE.
    pub fn open(
        api: &'a Api,
        ctx: *mut RedisModuleCtx,
        name: *mut RedisModuleString,
        access: Access,
        kind: Kind,
    ) -> Result<Self, TbError> {
        let mode = match access {
            Access::Write => REDISMODULE_READ | REDISMODULE_WRITE,
            Access::Read => REDISMODULE_READ,
        };
        // SAFETY: ctx and name come from Redis for this command call.
        let key = unsafe { (api.open_key)(ctx, name, mode as c_int) };
        // Read-only opening of a missing key gives NULL: an empty bucket. For writing,
        // Redis always returns a key.
        if key.is_null() && access == Access::Write {
            return Err(TbError::Internal);
        }
        // Owned from here on, so every return below closes it.
        let mut open = Key {
            api,
            ctx,
            name,
            key,
            exists: false,
            modified: Cell::new(false),
        };
        if key.is_null() {
            return Ok(open);
        }
        // SAFETY: key is a valid open key.
        let found = unsafe { (api.key_type)(key) } as isize;
        let expected = match kind {
            Kind::Hash => REDISMODULE_KEYTYPE_HASH,
            Kind::SortedSet => REDISMODULE_KEYTYPE_ZSET,
        };
        if found == REDISMODULE_KEYTYPE_EMPTY {
            Ok(open)
        } else if found == expected {
            open.exists = true;
            Ok(open)
        } else {
            Err(TbError::WrongType)
        }
    }

    /// Whether `name` holds a hash now (a command whose key may be of either kind, such as
    /// TB.RENEW's lease or hold, looks before it opens the key as one of them).
    pub fn holds_hash(
        api: &'a Api,
        ctx: *mut RedisModuleCtx,
        name: *mut RedisModuleString,
    ) -> bool {
        Key::open(api, ctx, name, Access::Read, Kind::Hash).is_ok_and(|k| k.exists)
    }

    /// Whether the key held a value when opened.
    pub fn exists(&self) -> bool {
        self.exists
    }

    /// Whether the key can be written (opened for writing).
    pub(crate) fn writable(&self) -> bool {
        !self.key.is_null()
    }

    /// Records that this call wrote the key: it is signalled once, when closed.
    pub(crate) fn mark_modified(&self) {
        self.modified.set(true);
    }

    /// The key's absolute expiry in Unix ms, if it has one. A key that did not exist when
    /// opened has none (no lookup in the expires table).
    pub fn expiry(&self) -> Option<i64> {
        if !self.exists {
            return None;
        }
        // SAFETY: valid open key.
        let at = unsafe { (self.api.get_abs_expire)(self.key) };
        (at != NO_EXPIRE).then_some(at)
    }

    /// Keeps the key at least `seconds` longer on the server's clock (`server_ms`), and not
    /// wildly longer: `expiry::plan` against the current expiry, then `apply_expiry`.
    pub fn expire_in(&self, server_ms: i64, seconds: f64) {
        self.apply_expiry(crate::algo::expiry::plan(self.expiry(), server_ms, seconds));
    }

    /// Applies an expiry plan, with the notification and replication EXPIRE-family
    /// commands produce (an absolute time, so a replica or an AOF replay gets the same one).
    pub fn apply_expiry(&self, plan: ExpiryPlan) {
        let api = self.api;
        let (at, event, command, format): (i64, &CStr, &CStr, &CStr) = match plan {
            ExpiryPlan::Keep => return,
            ExpiryPlan::SetAt(at) => (at, c"expire", c"PEXPIREAT", c"sl"),
            ExpiryPlan::Persist => (NO_EXPIRE, c"persist", c"PERSIST", c"s"),
        };
        if !self.writable() {
            return;
        }
        self.mark_modified();
        // SAFETY: valid open key and context; the format matches the arguments given
        // ("s": string, "l": long long; extra varargs are ignored for "s").
        unsafe {
            (api.set_abs_expire)(self.key, at);
            (api.notify_keyspace_event)(
                self.ctx,
                REDISMODULE_NOTIFY_GENERIC,
                event.as_ptr(),
                self.name,
            );
            (api.replicate)(
                self.ctx,
                command.as_ptr(),
                format.as_ptr(),
                self.name,
                at as std::os::raw::c_longlong,
            );
        }
    }

    /// A write's effect outside the key: notifies keyspace listeners of `event` (of
    /// `class`) and replicates `command` with `argv` (the key name first), as the command
    /// a user would send.
    pub(crate) fn effect(
        &self,
        class: c_int,
        event: &CStr,
        command: &CStr,
        argv: &mut [*mut RedisModuleString],
    ) {
        // Up to seven strings go as varargs ("s" each): the "v" format makes Replicate
        // reallocate its argument vector, about 500 instructions a call (callgrind).
        const FORMATS: [&CStr; 7] = [
            c"s", c"ss", c"sss", c"ssss", c"sssss", c"ssssss", c"sssssss",
        ];
        let format = argv.len().checked_sub(1).and_then(|i| FORMATS.get(i));
        let arg = |i: usize| argv.get(i).copied().unwrap_or(null_mut());
        // SAFETY: valid context. Replicate reads only as many arguments as its format
        // names (the NULLs past the end are never read); "s" takes a RedisModuleString
        // pointer, "v" an array of them and its length; all are alive for the call
        // (Replicate retains what it keeps).
        unsafe {
            (self.api.notify_keyspace_event)(self.ctx, class, event.as_ptr(), self.name);
            match format {
                Some(format) => (self.api.replicate)(
                    self.ctx,
                    command.as_ptr(),
                    format.as_ptr(),
                    arg(0),
                    arg(1),
                    arg(2),
                    arg(3),
                    arg(4),
                    arg(5),
                    arg(6),
                ),
                None => (self.api.replicate)(
                    self.ctx,
                    command.as_ptr(),
                    c"v".as_ptr(),
                    argv.as_mut_ptr(),
                    argv.len(),
                ),
            };
        }
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        // SAFETY: ctx and name are this call's; key was opened by us and is closed exactly
        // once.
        unsafe {
            if self.modified.get() {
                (self.api.signal_modified_key)(self.ctx, self.name);
            }
            if !self.key.is_null() {
                (self.api.close_key)(self.key)
            }
        }
    }
}

/// A hash key: a token bucket, or a FIXED or SLIDING window.
pub struct BucketKey<'a> {
    key: Key<'a>,
    fields: &'static FieldNames,
}

impl<'a> Deref for BucketKey<'a> {
    type Target = Key<'a>;
    fn deref(&self) -> &Key<'a> {
        &self.key
    }
}

impl<'a> BucketKey<'a> {
    /// Opens `name`. Anything but a hash or nothing is WRONGTYPE.
    pub fn open(
        api: &'a Api,
        ctx: *mut RedisModuleCtx,
        name: *mut RedisModuleString,
        access: Access,
    ) -> Result<Self, TbError> {
        let fields = FIELDS.get().ok_or(TbError::Internal)?;
        Ok(BucketKey {
            key: Key::open(api, ctx, name, access, Kind::Hash)?,
            fields,
        })
    }

    /// Reads up to three fields with one HashGet: `None` for a missing field.
    fn get<const N: usize>(&self, names: [Field; N]) -> [OwnedString<'a>; N] {
        self.get_if(true, names)
    }

    /// `get` when `read`, else every field as missing, without a HashGet.
    fn get_if<const N: usize>(&self, read: bool, names: [Field; N]) -> [OwnedString<'a>; N] {
        let api = self.key.api;
        let mut out = [null_mut::<RedisModuleString>(); 3];
        let name = |i: usize| names.get(i).map_or(null_mut(), |&f| self.fields.get(f));
        if read && N > 0 && self.key.exists() {
            let [o0, o1, o2] = &mut out;
            // SAFETY: varargs are (field, *mut out) pairs; a NULL field ends the list,
            // as HashGet requires (at most three pairs are given).
            unsafe {
                (api.hash_get)(
                    self.key.key,
                    HASH_NONE,
                    name(0),
                    o0 as *mut *mut RedisModuleString,
                    name(1),
                    o1 as *mut *mut RedisModuleString,
                    name(2),
                    o2 as *mut *mut RedisModuleString,
                    null_mut::<c_void>(),
                );
            }
        }
        std::array::from_fn(|i| {
            OwnedString::new(api, self.key.ctx, out.get(i).copied().unwrap_or(null_mut()))
        })
    }

    /// Reads the token bucket: `None` when it has never been written (or expired); see
    /// `fields::decode` for what counts as corrupt. A hash that is not a bucket (a window,
    /// someone else's record, a mix) is an error, never read as a new bucket: see
    /// `owner`.
    pub fn read(&self) -> Result<Option<State>, TbError> {
        if !self.key.exists() {
            return Ok(None);
        }
        let [tokens, last] = self.get([Field::Tokens, Field::LastRefillTime]);
        self.owner(
            StateKind::Bucket,
            Held {
                len: 2,
                bucket: usize::from(!tokens.is_null()) + usize::from(!last.is_null()),
                window: 0,
            },
        )?;
        fields::decode(tokens.bytes(), last.bytes())
    }

    /// The number of fields in the hash (0 for a missing key).
    fn len(&self) -> usize {
        if !self.key.exists() {
            return 0;
        }
        // SAFETY: valid open hash key.
        unsafe { (self.key.api.value_length)(self.key.key) }
    }

    /// Applies `fields::check_owner` for a command keeping `wanted` state, given the
    /// module's fields its reads found (`found.len` unused). The usual key holds exactly
    /// those (one ValueLength tells); any other hash has all six field names looked up,
    /// a path only keys that are refused or carry fields of their own take.
    fn owner(&self, wanted: StateKind, found: Held) -> Result<(), TbError> {
        let mut held = Held {
            len: self.len(),
            ..found
        };
        if found.bucket + found.window == 0 || !held.complete() {
            let present = |got: &[OwnedString]| got.iter().filter(|f| !f.is_null()).count();
            held.bucket = present(&self.get([Field::Tokens, Field::LastRefillTime]));
            held.window = present(&self.get([Field::Start, Field::Count, Field::Counts]))
                + present(&self.get([Field::Previous]));
        }
        fields::check_owner(wanted, held)
    }

    /// Reads a FIXED or SLIDING window's fields (all absent on a missing key), refuses a
    /// hash that is not a window (`owner`), and decodes them with `decode` while the
    /// field strings are alive (no copies). Each mode first reads the fields it stores
    /// (and FIXED `previous`, which only a SLIDING key has); the others only when one of
    /// its own is missing, which tells a key of the other mode, or a token bucket, apart.
    pub fn read_window<T>(
        &self,
        mode: Mode,
        decode: impl FnOnce(&WindowFields<'_>) -> Result<T, TbError>,
    ) -> Result<T, TbError> {
        if !self.key.exists() {
            return decode(&WindowFields::default());
        }
        let (start, count, counts, previous) = if mode == Mode::Sliding {
            let [start, counts] = self.get([Field::Start, Field::Counts]);
            let [count, previous] = self.get_if(counts.is_null(), [Field::Count, Field::Previous]);
            (start, count, counts, previous)
        } else {
            let [start, count, previous] = self.get([Field::Start, Field::Count, Field::Previous]);
            let [counts] = self.get_if(count.is_null(), [Field::Counts]);
            (start, count, counts, previous)
        };
        // Not the window's state (a token bucket, someone else's record, a mix): refused
        // here, so `decode` sees only a window's fields.
        let window = [&start, &count, &counts, &previous]
            .iter()
            .filter(|f| !f.is_null())
            .count();
        self.owner(
            StateKind::Window,
            Held {
                len: 0,
                bucket: 0,
                window,
            },
        )?;
        decode(&WindowFields {
            start: start.bytes(),
            count: count.bytes(),
            counts: counts.bytes(),
            previous: previous.bytes(),
            holds_bucket: false,
        })
    }

    /// Stores the token bucket's fields given (their exact texts; `None`: unchanged, left
    /// as stored). Rewriting an unchanged field would cost a hash write, a string and
    /// replication bytes per call (a client that sends the same `now` twice never moves
    /// `last_refill_time`).
    pub fn write(&self, tokens: Option<&[u8]>, last_refill_time: Option<&[u8]>) {
        let mut pairs: [(Field, &[u8]); 2] = [(Field::Tokens, &[]); 2];
        let mut n = 0;
        for (field, value) in [
            (Field::Tokens, tokens),
            (Field::LastRefillTime, last_refill_time),
        ] {
            if let (Some(v), Some(slot)) = (value, pairs.get_mut(n)) {
                *slot = (field, v);
                n += 1;
            }
        }
        self.write_fields(pairs.get(..n).unwrap_or(&[]));
    }

    /// Stores up to three fields (their exact texts), notifies keyspace listeners as HSET
    /// would, and replicates the same HSET.
    pub fn write_fields(&self, pairs: &[(Field, &[u8])]) {
        if pairs.is_empty() || pairs.len() > 3 || !self.key.writable() {
            return;
        }
        let api = self.key.api;
        let ctx = self.key.ctx;
        // On the stack: a take writes on nearly every call, and a heap allocation there
        // costs as much as a field's parsing.
        let values: [Option<OwnedString>; 3] = std::array::from_fn(|i| {
            pairs.get(i).map(|(_, bytes)| {
                // SAFETY: bytes is valid for its length; the string is freed on drop.
                let ptr = unsafe { (api.create_string)(ctx, bytes.as_ptr().cast(), bytes.len()) };
                OwnedString::new(api, ctx, ptr)
            })
        });
        let field = |i: usize| {
            pairs
                .get(i)
                .map_or(null_mut(), |(f, _)| self.fields.get(*f))
        };
        let value = |i: usize| {
            values
                .get(i)
                .and_then(Option::as_ref)
                .map_or(null_mut(), |v| v.ptr)
        };
        self.key.mark_modified();
        // SAFETY: varargs are (field, value) string pairs ended by NULL (HashSet stops at
        // the first NULL field: one call shape serves one, two or three fields).
        unsafe {
            (api.hash_set)(
                self.key.key,
                HASH_NONE,
                field(0),
                value(0),
                field(1),
                value(1),
                field(2),
                value(2),
                null_mut::<c_void>(),
            );
        }
        let mut argv = [
            self.key.name,
            field(0),
            value(0),
            field(1),
            value(1),
            field(2),
            value(2),
        ];
        let argv = argv.get_mut(..1 + 2 * pairs.len()).unwrap_or(&mut []);
        self.key
            .effect(REDISMODULE_NOTIFY_HASH, c"hset", c"HSET", argv);
    }

    /// TB.HOLD's `holds` field, as stored (`None`: missing), for `decode` to read while
    /// the string is alive.
    pub fn read_holds<T>(&self, decode: impl FnOnce(Option<&[u8]>) -> T) -> T {
        let [holds] = self.get([Field::Holds]);
        decode(holds.bytes())
    }

    /// Deletes one field, notifying and replicating `HDEL` as a user's would.
    pub fn delete_field(&self, name: Field) {
        if !self.key.writable() {
            return;
        }
        let api = self.key.api;
        let f = self.fields.get(name);
        self.key.mark_modified();
        // SAFETY: varargs are one (field, REDISMODULE_HASH_DELETE) pair ended by NULL.
        unsafe {
            (api.hash_set)(
                self.key.key,
                HASH_NONE,
                f,
                HASH_DELETE,
                null_mut::<c_void>(),
            );
        }
        self.key.effect(
            REDISMODULE_NOTIFY_HASH,
            c"hdel",
            c"HDEL",
            &mut [self.key.name, f],
        );
    }

    /// Deletes two fields (a SLIDING key's `count` and `previous`, once it is
    /// stored as `counts`), notifies keyspace listeners as HDEL would, and replicates the
    /// same HDEL. Called after `write_fields` in the same call, so the hash never holds
    /// both layouts, on the master or in the replication stream.
    pub fn delete_fields(&self, names: [Field; 2]) {
        if !self.key.writable() {
            return;
        }
        let api = self.key.api;
        let [a, b] = names.map(|f| self.fields.get(f));
        self.key.mark_modified();
        // SAFETY: varargs are (field, REDISMODULE_HASH_DELETE) pairs ended by NULL.
        unsafe {
            (api.hash_set)(
                self.key.key,
                HASH_NONE,
                a,
                HASH_DELETE,
                b,
                HASH_DELETE,
                null_mut::<c_void>(),
            );
        }
        self.key.effect(
            REDISMODULE_NOTIFY_HASH,
            c"hdel",
            c"HDEL",
            &mut [self.key.name, a, b],
        );
    }
}

/// A RedisModuleString we own (possibly NULL), freed on drop.
pub(crate) struct OwnedString<'a> {
    api: &'a Api,
    ctx: *mut RedisModuleCtx,
    pub(crate) ptr: *mut RedisModuleString,
}

impl<'a> OwnedString<'a> {
    pub(crate) fn new(api: &'a Api, ctx: *mut RedisModuleCtx, ptr: *mut RedisModuleString) -> Self {
        OwnedString { api, ctx, ptr }
    }

    fn is_null(&self) -> bool {
        self.ptr.is_null()
    }

    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        (!self.ptr.is_null()).then(|| string_bytes(self.api, self.ptr))
    }
}

impl Drop for OwnedString<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: we own this reference; freed once.
            unsafe { (self.api.free_string)(self.ctx, self.ptr) }
        }
    }
}

/// The bytes of a Redis string, valid while the string lives.
pub fn string_bytes<'s>(api: &Api, s: *const RedisModuleString) -> &'s [u8] {
    let mut len = 0usize;
    // SAFETY: s is a live Redis string; StringPtrLen returns its buffer and length, valid
    // until the string is freed or modified, which does not happen while we hold the slice.
    unsafe {
        let ptr: *const c_char = (api.string_ptr_len)(s, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}
