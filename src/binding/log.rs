//! The Redis log: one warning line, for what an operator must see (a load refused, a
//! panic caught).

use redis_module::raw;

/// Logs a warning to the Redis log (used on paths that should never run).
pub fn warning(message: &str) {
    // SAFETY: the pointer was filled by RedisModule_Init (None before it: then we cannot
    // log); reading it copies the value.
    let Some(log) = (unsafe { raw::RedisModule_Log }) else {
        return;
    };
    let mut text = message.as_bytes().to_vec();
    text.retain(|&b| b != 0);
    text.push(0);
    // SAFETY: a NULL context is allowed; "%s" with one NUL-terminated argument.
    unsafe {
        log(
            std::ptr::null_mut(),
            c"warning".as_ptr(),
            c"%s".as_ptr(),
            text.as_ptr(),
        )
    };
}
