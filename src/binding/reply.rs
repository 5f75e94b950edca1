//! Replies. Doubles go out as RESP3 doubles, or under RESP2 as bulk strings holding the
//! shortest text that parses back to the same value (Redis's own RESP2 double formatting
//! uses `%.17g`, slower and noisier: `0.10000000000000001`).

use std::cell::Cell;
use std::os::raw::c_int;

use redis_module::raw::{REDISMODULE_CTX_FLAGS_RESP3, RedisModuleCtx};

use crate::algo::bucket::Decision;
use crate::algo::num::{NumText, format_f64};
use crate::binding::api::Api;
use crate::error::{TbError, arity_text};

pub const OK: c_int = 0;

/// Writes one command's reply.
pub struct Replier<'a> {
    api: &'a Api,
    ctx: *mut RedisModuleCtx,
    /// Whether the client speaks RESP3, read on the first double: only doubles differ
    /// by protocol, and `GetContextFlags` works out every flag of the server each call
    /// (about 100 instructions and a dozen instruction-cache misses, callgrind), which
    /// replies of integers and strings (TB.ACQUIRE, TB.RELEASE) do not need.
    resp3: Cell<Option<bool>>,
}

impl<'a> Replier<'a> {
    pub fn new(api: &'a Api, ctx: *mut RedisModuleCtx) -> Self {
        Replier {
            api,
            ctx,
            resp3: Cell::new(None),
        }
    }

    fn resp3(&self) -> bool {
        if let Some(known) = self.resp3.get() {
            return known;
        }
        // SAFETY: ctx is the live command context.
        let flags = unsafe { (self.api.get_context_flags)(self.ctx) } as u32;
        let resp3 = flags & REDISMODULE_CTX_FLAGS_RESP3 != 0;
        self.resp3.set(Some(resp3));
        resp3
    }

    /// Starts an array of `len` elements.
    pub fn array(&self, len: usize) {
        // SAFETY: ctx is the live command context.
        unsafe { (self.api.reply_with_array)(self.ctx, len as std::os::raw::c_long) };
    }

    /// `[allowed, remaining, retry_after, reset_after]`. `remaining_text` is
    /// `format_f64(d.remaining)`, formatted once by the caller, who may also store it.
    pub fn decision(&self, d: &Decision, remaining_text: &NumText) {
        self.array(4);
        self.decision_fields(d, remaining_text);
    }

    /// The four elements of a decision, inside an array the caller started.
    pub fn decision_fields(&self, d: &Decision, remaining_text: &NumText) {
        // SAFETY: ctx is the live command context.
        unsafe { (self.api.reply_with_long_long)(self.ctx, i64::from(d.allowed)) };
        self.double(d.remaining, Some(remaining_text));
        self.double(d.retry_after, None);
        self.double(d.reset_after, None);
    }

    /// An array of integers.
    pub fn integers(&self, values: &[i64]) {
        self.array(values.len());
        for &v in values {
            // SAFETY: ctx is the live command context.
            unsafe { (self.api.reply_with_long_long)(self.ctx, v) };
        }
    }

    /// One integer.
    pub fn integer(&self, v: i64) {
        // SAFETY: ctx is the live command context.
        unsafe { (self.api.reply_with_long_long)(self.ctx, v) };
    }

    /// One number: a RESP3 double, or RESP2 shortest round-trip text.
    pub fn number(&self, v: f64) {
        self.double(v, None);
    }

    /// One bulk string.
    pub fn bulk(&self, bytes: &[u8]) {
        // SAFETY: bytes is valid for its length; Redis copies it.
        unsafe {
            (self.api.reply_with_string_buffer)(self.ctx, bytes.as_ptr().cast(), bytes.len())
        };
    }

    /// A null (RESP2 nil bulk string, RESP3 null).
    pub fn null(&self) {
        // SAFETY: ctx is the live command context.
        unsafe { (self.api.reply_with_null)(self.ctx) };
    }

    fn double(&self, v: f64, formatted: Option<&NumText>) {
        if self.resp3() {
            // SAFETY: as above.
            unsafe { (self.api.reply_with_double)(self.ctx, v) };
            return;
        }
        let owned;
        let text = match formatted {
            Some(t) => t,
            None => {
                owned = format_f64(v);
                &owned
            }
        };
        let bytes = text.as_bytes();
        // SAFETY: bytes is valid for its length; Redis copies it.
        unsafe {
            (self.api.reply_with_string_buffer)(self.ctx, bytes.as_ptr().cast(), bytes.len())
        };
    }
}

/// Replies an error; wrong arity names `command` as Redis does.
pub fn error(api: &Api, ctx: *mut RedisModuleCtx, e: TbError, command: &str) -> c_int {
    let owned;
    let text = match e {
        TbError::WrongArity => {
            owned = arity_text(command);
            owned.as_str()
        }
        _ => e.text(),
    };
    // SAFETY: every text ends with its only NUL (checked by unit tests).
    unsafe { (api.reply_with_error)(ctx, text.as_ptr().cast()) };
    OK
}
