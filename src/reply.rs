//! Replies. Doubles go out as RESP3 doubles, or under RESP2 as bulk strings holding the
//! shortest text that parses back to the same value (Redis's own RESP2 double formatting
//! uses `%.17g`, slower and noisier: `0.10000000000000001`).

use std::os::raw::c_int;

use redis_module::raw::{REDISMODULE_CTX_FLAGS_RESP3, RedisModuleCtx};

use crate::api::Api;
use crate::bucket::Decision;
use crate::error::TbError;
use crate::num::{NumText, format_f64};

pub const OK: c_int = 0;

/// Replies `[allowed, remaining, retry_after, reset_after]`. `remaining_text` is
/// `format_f64(d.remaining)`, formatted once by the caller, who also stores it.
pub fn decision(
    api: &Api,
    ctx: *mut RedisModuleCtx,
    d: &Decision,
    remaining_text: &NumText,
) -> c_int {
    // SAFETY: ctx is the live command context.
    let resp3 = unsafe { (api.get_context_flags)(ctx) } as u32 & REDISMODULE_CTX_FLAGS_RESP3 != 0;
    let text = |bytes: &[u8]| {
        // SAFETY: bytes is valid for its length; Redis copies it.
        unsafe { (api.reply_with_string_buffer)(ctx, bytes.as_ptr().cast(), bytes.len()) };
    };
    let double = |v: f64, formatted: Option<&NumText>| {
        if resp3 {
            // SAFETY: as above.
            unsafe { (api.reply_with_double)(ctx, v) };
        } else if let Some(t) = formatted {
            text(t.as_bytes());
        } else {
            text(format_f64(v).as_bytes());
        }
    };
    // SAFETY: as above.
    unsafe {
        (api.reply_with_array)(ctx, 4);
        (api.reply_with_long_long)(ctx, i64::from(d.allowed));
    }
    double(d.remaining, Some(remaining_text));
    double(d.retry_after, None);
    double(d.reset_after, None);
    OK
}

/// Replies an error.
pub fn error(api: &Api, ctx: *mut RedisModuleCtx, e: TbError) -> c_int {
    // SAFETY: the text is NUL-terminated (checked by a unit test) and static.
    unsafe { (api.reply_with_error)(ctx, e.text().as_ptr().cast()) };
    OK
}
