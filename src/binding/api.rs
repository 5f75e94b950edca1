//! The Redis module API functions this module calls, resolved once at load time into plain
//! function pointers. A missing mandatory function fails the load with a log line instead
//! of a panic later; optional ones (newer servers only) stay `Option`.

use std::os::raw::{c_char, c_int, c_longlong, c_ulonglong};
use std::sync::OnceLock;

use redis_module::raw::{
    RedisModuleCmdFunc, RedisModuleCommand, RedisModuleCommandInfo, RedisModuleCtx,
    RedisModuleInfoCtx, RedisModuleInfoFunc, RedisModuleKey, RedisModuleString, mstime_t,
};

type Ctx = *mut RedisModuleCtx;
type Str = *mut RedisModuleString;
type Key = *mut RedisModuleKey;

/// Resolved API entry points. See redismodule.h for each one's contract.
pub struct Api {
    pub open_key: unsafe extern "C" fn(Ctx, Str, c_int) -> Key,
    pub close_key: unsafe extern "C" fn(Key),
    pub key_type: unsafe extern "C" fn(Key) -> c_int,
    pub hash_get: unsafe extern "C" fn(Key, c_int, ...) -> c_int,
    pub hash_set: unsafe extern "C" fn(Key, c_int, ...) -> c_int,
    pub get_abs_expire: unsafe extern "C" fn(Key) -> mstime_t,
    pub set_abs_expire: unsafe extern "C" fn(Key, mstime_t) -> c_int,
    pub create_string: unsafe extern "C" fn(Ctx, *const c_char, usize) -> Str,
    pub free_string: unsafe extern "C" fn(Ctx, Str),
    pub string_ptr_len: unsafe extern "C" fn(*const RedisModuleString, *mut usize) -> *const c_char,
    pub replicate: unsafe extern "C" fn(Ctx, *const c_char, *const c_char, ...) -> c_int,
    pub notify_keyspace_event: unsafe extern "C" fn(Ctx, c_int, *const c_char, Str) -> c_int,
    pub signal_modified_key: unsafe extern "C" fn(Ctx, Str) -> c_int,
    pub set_module_options: unsafe extern "C" fn(Ctx, c_int),
    pub reply_with_array: unsafe extern "C" fn(Ctx, std::os::raw::c_long) -> c_int,
    pub reply_with_long_long: unsafe extern "C" fn(Ctx, c_longlong) -> c_int,
    pub reply_with_double: unsafe extern "C" fn(Ctx, f64) -> c_int,
    pub reply_with_string_buffer: unsafe extern "C" fn(Ctx, *const c_char, usize) -> c_int,
    pub reply_with_error: unsafe extern "C" fn(Ctx, *const c_char) -> c_int,
    pub get_context_flags: unsafe extern "C" fn(Ctx) -> c_int,
    pub value_length: unsafe extern "C" fn(Key) -> usize,
    pub zset_add: unsafe extern "C" fn(Key, f64, Str, *mut c_int) -> c_int,
    pub zset_rem: unsafe extern "C" fn(Key, Str, *mut c_int) -> c_int,
    pub zset_score: unsafe extern "C" fn(Key, Str, *mut f64) -> c_int,
    pub reply_with_null: unsafe extern "C" fn(Ctx) -> c_int,
    pub zset_range_stop: unsafe extern "C" fn(Key),
    pub zset_first_in_score_range: unsafe extern "C" fn(Key, f64, f64, c_int, c_int) -> c_int,
    pub zset_last_in_score_range: unsafe extern "C" fn(Key, f64, f64, c_int, c_int) -> c_int,
    pub zset_range_current_element: unsafe extern "C" fn(Key, *mut f64) -> Str,
    pub zset_range_next: unsafe extern "C" fn(Key) -> c_int,
    pub zset_range_end_reached: unsafe extern "C" fn(Key) -> c_int,
    pub is_keys_position_request: unsafe extern "C" fn(Ctx) -> c_int,
    pub key_at_pos: unsafe extern "C" fn(Ctx, c_int),
    pub create_command: unsafe extern "C" fn(
        Ctx,
        *const c_char,
        RedisModuleCmdFunc,
        *const c_char,
        c_int,
        c_int,
        c_int,
    ) -> c_int,
    pub get_command: unsafe extern "C" fn(Ctx, *const c_char) -> *mut RedisModuleCommand,
    pub register_info_func: unsafe extern "C" fn(Ctx, RedisModuleInfoFunc) -> c_int,
    pub info_add_section: unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char) -> c_int,
    pub info_add_field_ulonglong:
        unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char, c_ulonglong) -> c_int,
    pub info_add_field_cstring:
        unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char, *const c_char) -> c_int,
    /// Redis 7.0+: key specs, arity, summary. Mandatory: TB.MTAKE's keys can only be
    /// declared through a key spec.
    pub set_command_info:
        unsafe extern "C" fn(*mut RedisModuleCommand, *const RedisModuleCommandInfo) -> c_int,
    /// Redis 7.2+ only: calling it is what makes a module fail to load on 7.0.
    pub set_command_acl_categories:
        Option<unsafe extern "C" fn(*mut RedisModuleCommand, *const c_char) -> c_int>,
    /// Redis 7.4+ only.
    pub add_acl_category: Option<unsafe extern "C" fn(Ctx, *const c_char) -> c_int>,
}

static API: OnceLock<Api> = OnceLock::new();

/// The resolved API, or `None` before a successful load.
#[inline]
pub fn api() -> Option<&'static Api> {
    API.get()
}

/// Resolves every entry point. Must run after `RedisModule_Init` filled the pointers.
/// Returns the name of the first missing mandatory function.
pub fn resolve() -> Result<&'static Api, &'static str> {
    use redis_module::raw as r;
    macro_rules! need {
        ($sym:ident) => {
            // SAFETY: the pointers were written by RedisModule_Init before this runs, on
            // the main thread, and are never written again; reading copies the value.
            unsafe { r::$sym }.ok_or(stringify!($sym))?
        };
    }
    macro_rules! optional {
        ($sym:ident) => {
            // SAFETY: as above.
            unsafe { r::$sym }
        };
    }
    let api = Api {
        open_key: need!(RedisModule_OpenKey),
        close_key: need!(RedisModule_CloseKey),
        key_type: need!(RedisModule_KeyType),
        hash_get: need!(RedisModule_HashGet),
        hash_set: need!(RedisModule_HashSet),
        get_abs_expire: need!(RedisModule_GetAbsExpire),
        set_abs_expire: need!(RedisModule_SetAbsExpire),
        create_string: need!(RedisModule_CreateString),
        free_string: need!(RedisModule_FreeString),
        string_ptr_len: need!(RedisModule_StringPtrLen),
        replicate: need!(RedisModule_Replicate),
        notify_keyspace_event: need!(RedisModule_NotifyKeyspaceEvent),
        signal_modified_key: need!(RedisModule_SignalModifiedKey),
        set_module_options: need!(RedisModule_SetModuleOptions),
        reply_with_array: need!(RedisModule_ReplyWithArray),
        reply_with_long_long: need!(RedisModule_ReplyWithLongLong),
        reply_with_double: need!(RedisModule_ReplyWithDouble),
        reply_with_string_buffer: need!(RedisModule_ReplyWithStringBuffer),
        reply_with_error: need!(RedisModule_ReplyWithError),
        get_context_flags: need!(RedisModule_GetContextFlags),
        value_length: need!(RedisModule_ValueLength),
        zset_add: need!(RedisModule_ZsetAdd),
        zset_rem: need!(RedisModule_ZsetRem),
        zset_score: need!(RedisModule_ZsetScore),
        reply_with_null: need!(RedisModule_ReplyWithNull),
        zset_range_stop: need!(RedisModule_ZsetRangeStop),
        zset_first_in_score_range: need!(RedisModule_ZsetFirstInScoreRange),
        zset_last_in_score_range: need!(RedisModule_ZsetLastInScoreRange),
        zset_range_current_element: need!(RedisModule_ZsetRangeCurrentElement),
        zset_range_next: need!(RedisModule_ZsetRangeNext),
        zset_range_end_reached: need!(RedisModule_ZsetRangeEndReached),
        is_keys_position_request: need!(RedisModule_IsKeysPositionRequest),
        key_at_pos: need!(RedisModule_KeyAtPos),
        create_command: need!(RedisModule_CreateCommand),
        get_command: need!(RedisModule_GetCommand),
        register_info_func: need!(RedisModule_RegisterInfoFunc),
        info_add_section: need!(RedisModule_InfoAddSection),
        info_add_field_ulonglong: need!(RedisModule_InfoAddFieldULongLong),
        info_add_field_cstring: need!(RedisModule_InfoAddFieldCString),
        set_command_info: need!(RedisModule_SetCommandInfo),
        set_command_acl_categories: optional!(RedisModule_SetCommandACLCategories),
        add_acl_category: optional!(RedisModule_AddACLCategory),
    };
    // A second load after MODULE UNLOAD finds the same server and the same pointers.
    Ok(API.get_or_init(|| api))
}
