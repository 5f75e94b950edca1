//! Bucket storage: a plain Redis hash with the fields `tokens` and `last_refill_time`
//! (the layout of the Lua script teams migrate from). Opens the key, checks its type,
//! reads and writes the two fields, keeps the TTL, and replicates the effects (HSET,
//! PEXPIREAT) so replicas and AOF replay store exactly the same bytes, need no module, and
//! never recompute anything with another clock.

use std::cell::Cell;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::OnceLock;

use redis_module::raw::{
    REDISMODULE_KEYTYPE_EMPTY, REDISMODULE_KEYTYPE_HASH, REDISMODULE_NOTIFY_GENERIC,
    REDISMODULE_NOTIFY_HASH, REDISMODULE_READ, REDISMODULE_WRITE, RedisModuleCtx, RedisModuleKey,
    RedisModuleString,
};

use crate::api::Api;
use crate::bucket::State;
use crate::error::TbError;
use crate::expiry::ExpiryPlan;
use crate::fields;

const HASH_NONE: c_int = 0;
const NO_EXPIRE: i64 = -1;

/// The two field names, created once: building them per call is measurable.
struct FieldNames {
    tokens: *mut RedisModuleString,
    last_refill_time: *mut RedisModuleString,
}

// SAFETY: the strings are created at load and only ever read (never mutated or freed)
// by commands, which Redis runs on its main thread.
unsafe impl Send for FieldNames {}
unsafe impl Sync for FieldNames {}

static FIELDS: OnceLock<FieldNames> = OnceLock::new();

/// Creates the field-name strings. Called once from module init.
pub fn init(api: &Api) {
    let make = |name: &str| {
        // SAFETY: a NULL context creates a string owned by us, valid until freed; we
        // never free it (it lives as long as the module).
        unsafe { (api.create_string)(null_mut(), name.as_ptr().cast(), name.len()) }
    };
    FIELDS.get_or_init(|| FieldNames {
        tokens: make("tokens"),
        last_refill_time: make("last_refill_time"),
    });
}

/// Frees the field-name strings. Called from module deinit (MODULE UNLOAD), after which no
/// command of ours can run.
pub fn deinit(api: &Api) {
    if let Some(fields) = FIELDS.get() {
        // SAFETY: created by `init` with a NULL context and never freed before; nothing
        // uses them after unload.
        unsafe {
            (api.free_string)(null_mut(), fields.tokens);
            (api.free_string)(null_mut(), fields.last_refill_time);
        }
    }
}

/// An open bucket key. Closed on drop, also on an early error return. Opened read-only,
/// `key` is NULL for a missing key and nothing is ever written through it.
pub struct BucketKey<'a> {
    api: &'a Api,
    ctx: *mut RedisModuleCtx,
    name: *mut RedisModuleString,
    key: *mut RedisModuleKey,
    fields: &'static FieldNames,
    exists: bool,
    /// Set by a write or an expiry change: the key is signalled as modified (WATCH,
    /// client-side caching) once, when it is closed. The module sets
    /// NO_IMPLICIT_SIGNAL_MODIFIED, so a take that writes nothing signals nothing.
    modified: Cell<bool>,
}

/// How a command opens its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and write (every command that may take or give back tokens).
    Write,
    /// Read only (TB.PEEK): a missing key stays missing, and the command may run on a
    /// replica, where a logically expired key reads as empty.
    Read,
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
        let mut bucket = BucketKey {
            api,
            ctx,
            name,
            key,
            fields,
            exists: false,
            modified: Cell::new(false),
        };
        if key.is_null() {
            return Ok(bucket);
        }
        // SAFETY: key is a valid open key.
        let kind = unsafe { (api.key_type)(key) } as isize;
        match kind {
            REDISMODULE_KEYTYPE_EMPTY => Ok(bucket),
            REDISMODULE_KEYTYPE_HASH => {
                bucket.exists = true;
                Ok(bucket)
            }
            _ => Err(TbError::WrongType),
        }
    }

    /// Reads the stored state: `None` when the bucket has never been written (or expired);
    /// see `fields::decode` for what counts as corrupt.
    pub fn read(&self) -> Result<Option<State>, TbError> {
        if !self.exists {
            return Ok(None);
        }
        let mut tokens: *mut RedisModuleString = null_mut();
        let mut last: *mut RedisModuleString = null_mut();
        // SAFETY: varargs are (field, *mut out) pairs ended by NULL, as HashGet requires.
        unsafe {
            (self.api.hash_get)(
                self.key,
                HASH_NONE,
                self.fields.tokens,
                &mut tokens as *mut *mut RedisModuleString,
                self.fields.last_refill_time,
                &mut last as *mut *mut RedisModuleString,
                null_mut::<c_void>(),
            );
        }
        let tokens = OwnedString::new(self.api, self.ctx, tokens);
        let last = OwnedString::new(self.api, self.ctx, last);
        fields::decode(tokens.bytes(), last.bytes())
    }

    /// Stores the fields given (their exact texts; `None`: unchanged, left as stored),
    /// notifies keyspace listeners as HSET would, and replicates the same HSET. Rewriting
    /// an unchanged field would cost a hash write, a string and replication bytes per call
    /// (a client that sends the same `now` twice never moves `last_refill_time`).
    pub fn write(&self, tokens: Option<&[u8]>, last_refill_time: Option<&[u8]>) {
        let api = self.api;
        let value = |bytes: &[u8]| {
            // SAFETY: bytes is valid for its length; the string is freed on drop below.
            let ptr = unsafe { (api.create_string)(self.ctx, bytes.as_ptr().cast(), bytes.len()) };
            OwnedString::new(api, self.ctx, ptr)
        };
        let fields = self.fields;
        let ((f1, v1), second) = match (tokens, last_refill_time) {
            (Some(t), Some(l)) => (
                (fields.tokens, value(t)),
                Some((fields.last_refill_time, value(l))),
            ),
            (Some(t), None) => ((fields.tokens, value(t)), None),
            (None, Some(l)) => ((fields.last_refill_time, value(l)), None),
            (None, None) => return,
        };
        if self.key.is_null() {
            return;
        }
        // A NULL field ends HashSet's list, and Replicate reads only as many arguments as
        // its format names: one call shape serves one field or two.
        let (f2, v2) = second
            .as_ref()
            .map_or((null_mut(), null_mut()), |(f, v)| (*f, v.ptr));
        let format = if second.is_some() { c"sssss" } else { c"sss" };
        self.modified.set(true);
        // SAFETY: varargs are (field, value) string pairs ended by NULL; Replicate's "s"
        // takes RedisModuleString pointers and retains them for as long as it needs.
        unsafe {
            (api.hash_set)(
                self.key,
                HASH_NONE,
                f1,
                v1.ptr,
                f2,
                v2,
                null_mut::<c_void>(),
            );
            (api.notify_keyspace_event)(
                self.ctx,
                REDISMODULE_NOTIFY_HASH,
                c"hset".as_ptr(),
                self.name,
            );
            (api.replicate)(
                self.ctx,
                c"HSET".as_ptr(),
                format.as_ptr(),
                self.name,
                f1,
                v1.ptr,
                f2,
                v2,
            );
        }
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

    /// Applies an expiry plan, with the notification and replication EXPIRE-family
    /// commands produce (an absolute time, so a replica or an AOF replay gets the same one).
    pub fn apply_expiry(&self, plan: ExpiryPlan) {
        let api = self.api;
        let (at, event, command, format): (i64, &std::ffi::CStr, &std::ffi::CStr, &std::ffi::CStr) =
            match plan {
                ExpiryPlan::Keep => return,
                ExpiryPlan::SetAt(at) => (at, c"expire", c"PEXPIREAT", c"sl"),
                ExpiryPlan::Persist => (NO_EXPIRE, c"persist", c"PERSIST", c"s"),
            };
        if self.key.is_null() {
            return;
        }
        self.modified.set(true);
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
}

impl Drop for BucketKey<'_> {
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

/// A RedisModuleString we own (possibly NULL), freed on drop.
struct OwnedString<'a> {
    api: &'a Api,
    ctx: *mut RedisModuleCtx,
    ptr: *mut RedisModuleString,
}

impl<'a> OwnedString<'a> {
    fn new(api: &'a Api, ctx: *mut RedisModuleCtx, ptr: *mut RedisModuleString) -> Self {
        OwnedString { api, ctx, ptr }
    }

    fn bytes(&self) -> Option<&[u8]> {
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
