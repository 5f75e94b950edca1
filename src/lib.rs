//! redis-tb: native token-bucket rate limiting for Redis.
//!
//! This file only registers: the module, its commands and their metadata, the INFO
//! section, and which allocator backs Rust allocations. See ARCHITECTURE.md for the map.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

// The layers, bottom up: `algo` (pure math), `error` (every reply text), `parse` (bytes to
// values), `binding` (the Redis module API, all unsafe), `commands` (one handler each).
pub mod algo;
mod binding;
mod commands;
pub mod error;
pub mod parse;

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

use binding::stats::CommandStats;

use redis_module::raw::{
    self, RedisModuleCommandArg, RedisModuleCommandInfo, RedisModuleCommandInfoVersion,
    RedisModuleCommandKeySpec, RedisModuleCtx, RedisModuleInfoCtx,
};

// Rust allocations go through Redis's allocator inside the server (so they show in
// used_memory); unit tests run outside Redis and keep the system allocator.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;

/// The module's version, as reported by `INFO tb`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The same for `MODULE LIST` (major * 10000 + minor * 100 + patch), from Cargo.toml too.
const MODULE_VERSION: c_int = version_part(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
    + version_part(env!("CARGO_PKG_VERSION_MINOR")) * 100
    + version_part(env!("CARGO_PKG_VERSION_PATCH"));

/// A version part (Cargo makes it decimal digits), read at compile time.
const fn version_part(text: &str) -> c_int {
    let (mut digits, mut n) = (text.as_bytes(), 0);
    while let [d, rest @ ..] = digits {
        n = n * 10 + (*d - b'0') as c_int;
        digits = rest;
    }
    n
}

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// Called by Redis on `loadmodule` / `MODULE LOAD`.
///
/// Written by hand rather than with the crate's `redis_module!` macro, whose load path
/// creates a detached thread-safe context that its unload path never frees (17.6 KB lost
/// on every MODULE UNLOAD, found by `make test-valgrind`). Nothing may allocate before
/// `Export_RedisModule_Init`: the global allocator calls the API it fills in.
///
/// # Safety
/// Redis calls it once per load with a valid context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: ctx is the load context; the name is a static C string.
    let init = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            c"tb".as_ptr(),
            MODULE_VERSION,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if init != OK || !init_module(ctx, argv, argc) {
        return ERR;
    }
    OK
}

/// Called by Redis on `MODULE UNLOAD`.
///
/// # Safety
/// Redis calls it once, after which no command of ours runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn RedisModule_OnUnload(_ctx: *mut RedisModuleCtx) -> c_int {
    if let Some(api) = binding::api::api() {
        binding::store::deinit(api);
    }
    OK
}

/// One command: its name, logic, flags, key declaration, docs, ACL categories and INFO
/// counters, declared together in one row of `COMMANDS`.
struct CommandDef {
    /// Lower-case, as Redis reports it (`tb.take`).
    name: &'static CStr,
    body: commands::Body,
    flags: &'static CStr,
    /// Redis arity: negative means "at least".
    arity: c_int,
    summary: &'static CStr,
    complexity: &'static CStr,
    since: &'static CStr,
    keys: Keys,
    args: &'static [ArgDef],
    /// ACL categories on servers that have the API (7.2+), without and with our own.
    acl_categories: &'static CStr,
    acl_categories_with_own: &'static CStr,
    /// `INFO tb`: `tb_<name without "tb.">_calls`, `_allowed`, `_denied`, `_errors`.
    stats: CommandStats,
    /// A second name, registered only when the module is loaded with `load_arg`.
    alias: Option<Alias>,
}

/// An opt-in second name for a command (same handler, flags, keys, docs and counters).
struct Alias {
    name: &'static CStr,
    /// The `loadmodule` argument that registers it (compared without case).
    load_arg: &'static str,
}

/// Where a command's keys are, declared as a key spec (COMMAND GETKEYS, cluster routing
/// and CROSSSLOT, ACL key patterns all read it), with the key-spec flags.
enum Keys {
    /// One key, at position 1.
    One(u32),
    /// `numkeys key [key ...]`: the count at position 1, the keys after it.
    Counted(u32),
    /// TB.ACQUIRE: one key at position 1, and optionally `TAKE numkeys key [key ...]`
    /// from position 4 on.
    OneThenTake(u32),
}

/// One documented argument (COMMAND DOCS), possibly a block of others.
struct ArgDef {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    flags: u32,
    subargs: &'static [ArgDef],
}

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> ArgDef {
    ArgDef {
        name,
        kind,
        flags: 0,
        subargs: &[],
    }
}

const KEY: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
const DOUBLE: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_DOUBLE;
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const BLOCK: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK;
const PURE_TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;
const OPTIONAL: u32 = raw::REDISMODULE_CMD_ARG_OPTIONAL;
const MULTIPLE: u32 = raw::REDISMODULE_CMD_ARG_MULTIPLE;

const KEY_ARG: ArgDef = arg(c"key", KEY);
const CAPACITY: ArgDef = arg(c"capacity", DOUBLE);
const RATE: ArgDef = arg(c"rate", DOUBLE);
const N: ArgDef = arg(c"n", DOUBLE);
const NOW: ArgDef = ArgDef {
    flags: OPTIONAL,
    ..arg(c"now", DOUBLE)
};

const KEY_RW_UPDATE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;
const KEY_RO_ACCESS: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;

/// The command table: one row per command.
static COMMANDS: [CommandDef; 12] = [
    CommandDef {
        name: c"tb.take",
        body: commands::take::run,
        flags: c"write deny-oom fast",
        arity: -5,
        summary: c"Refills a token bucket stored in a hash and takes n tokens from it if they are there. Replies [allowed, remaining, retry_after, reset_after].",
        complexity: c"O(1)",
        since: c"0.1.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[KEY_ARG, CAPACITY, RATE, N, NOW],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.mtake",
        body: commands::mtake::run,
        // getkeys-api: cluster routing asks the command for its keys (see
        // commands::declare_counted_keys); the key spec serves COMMAND GETKEYS and ACL.
        flags: c"write deny-oom fast getkeys-api",
        arity: -6,
        summary: c"Takes from several token buckets at once, all or nothing (layered limits). Replies the aggregate [allowed, remaining, retry_after, reset_after] and one such array per key.",
        complexity: c"O(N) where N is the number of keys",
        since: c"0.2.0",
        keys: Keys::Counted(KEY_RW_UPDATE),
        args: &[
            arg(c"numkeys", INTEGER),
            ArgDef {
                flags: MULTIPLE,
                ..KEY_ARG
            },
            ArgDef {
                name: c"limit",
                kind: BLOCK,
                flags: MULTIPLE,
                subargs: &[CAPACITY, RATE, N],
            },
            NOW,
        ],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.reserve",
        body: commands::reserve::run,
        flags: c"write deny-oom fast",
        arity: -6,
        summary: c"Leaky-bucket shaping: takes n tokens now, or reserves them if they will be there within max_wait seconds, replying the wait. Replies [allowed, remaining, wait_or_retry_after, reset_after].",
        complexity: c"O(1)",
        since: c"0.2.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[KEY_ARG, CAPACITY, RATE, N, arg(c"max_wait", DOUBLE), NOW],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.peek",
        body: commands::peek::run,
        flags: c"readonly fast",
        arity: -3,
        summary: c"Reports a token bucket without changing it: [allowed, remaining, retry_after, reset_after], allowed and retry_after for one token. TB.PEEK key LEASES reports an in-flight key: [in_flight, ms until the earliest lease expires]. Runs on replicas.",
        complexity: c"O(1)",
        since: c"0.2.0",
        keys: Keys::One(KEY_RO_ACCESS),
        args: &[KEY_ARG, CAPACITY, RATE, NOW],
        acl_categories: c"read fast",
        acl_categories_with_own: c"read fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.refund",
        body: commands::refund::run,
        flags: c"write deny-oom fast",
        arity: -5,
        summary: c"Gives n tokens back to a token bucket (never above capacity) for a request that was admitted and then not served. Replies [allowed, remaining, retry_after, reset_after].",
        complexity: c"O(1)",
        since: c"0.2.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[KEY_ARG, CAPACITY, RATE, N, NOW],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.throttle",
        body: commands::throttle::run,
        flags: c"write deny-oom fast",
        arity: -5,
        summary: c"redis-cell's CL.THROTTLE on a token bucket: [limited, limit, remaining, retry_after, reset_after] as integers, waits rounded up to whole seconds; fractional rates allowed, quantity 0 writes nothing, a negative quantity refunds.",
        complexity: c"O(1)",
        since: c"0.2.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[
            KEY_ARG,
            arg(c"max_burst", INTEGER),
            arg(c"count_per_period", DOUBLE),
            arg(c"period", DOUBLE),
            ArgDef {
                flags: OPTIONAL,
                ..arg(c"quantity", DOUBLE)
            },
        ],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: Some(Alias {
            name: c"cl.throttle",
            load_arg: "CL.THROTTLE",
        }),
    },
    CommandDef {
        name: c"tb.window",
        body: commands::window::run,
        flags: c"write deny-oom",
        arity: -5,
        summary: c"At most limit requests per window seconds: FIXED window counter, SLIDING window counter (the default) or sliding LOG. Replies [allowed, remaining, retry_after, reset_after].",
        complexity: c"O(1) for FIXED and SLIDING; O(log(N) + M) for LOG, N the entries held and M those added or removed",
        since: c"0.2.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[
            KEY_ARG,
            arg(c"limit", DOUBLE),
            arg(c"window", DOUBLE),
            N,
            NOW,
            ArgDef {
                name: c"mode",
                kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                flags: OPTIONAL,
                subargs: &[
                    ArgDef {
                        name: c"FIXED",
                        kind: PURE_TOKEN,
                        flags: 0,
                        subargs: &[],
                    },
                    ArgDef {
                        name: c"SLIDING",
                        kind: PURE_TOKEN,
                        flags: 0,
                        subargs: &[],
                    },
                    ArgDef {
                        name: c"LOG",
                        kind: PURE_TOKEN,
                        flags: 0,
                        subargs: &[],
                    },
                ],
            },
        ],
        acl_categories: c"write",
        acl_categories_with_own: c"write ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.acquire",
        body: commands::lease::acquire,
        // getkeys-api: the TAKE buckets are declared to cluster routing by the command
        // (commands::lease::declare_keys); the key specs serve COMMAND GETKEYS and ACL.
        flags: c"write deny-oom fast getkeys-api",
        arity: -4,
        summary: c"In-flight limit: takes one of limit slots on the key as a lease of lease_ms on the server's clock; with TAKE, also takes from token buckets, all or nothing. Replies [granted, in_flight, lease_id or nil, ms: the lease's time left, or when refused the wait until a lease expires] (with TAKE: and TB.MTAKE's aggregate and per-key arrays).",
        complexity: c"O(log(N) + M + K) where N is the leases held, M the expired ones reclaimed and K the TAKE buckets",
        since: c"0.3.0",
        keys: Keys::OneThenTake(KEY_RW_UPDATE),
        args: &[
            KEY_ARG,
            arg(c"limit", INTEGER),
            arg(c"lease_ms", INTEGER),
            ArgDef {
                name: c"take",
                kind: BLOCK,
                flags: OPTIONAL,
                subargs: &[
                    ArgDef {
                        name: c"TAKE",
                        kind: PURE_TOKEN,
                        flags: 0,
                        subargs: &[],
                    },
                    arg(c"numkeys", INTEGER),
                    ArgDef {
                        flags: MULTIPLE,
                        ..KEY_ARG
                    },
                    ArgDef {
                        name: c"limit",
                        kind: BLOCK,
                        flags: MULTIPLE,
                        subargs: &[CAPACITY, RATE, N],
                    },
                ],
            },
        ],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.release",
        body: commands::lease::release,
        flags: c"write fast",
        arity: 3,
        summary: c"Gives back a lease of TB.ACQUIRE by its id. Replies [released, in_flight]; released is 0 for an id not held (already released, expired or unknown).",
        complexity: c"O(log(N) + M) where N is the leases held and M the expired ones reclaimed",
        since: c"0.3.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[KEY_ARG, arg(c"lease_id", STRING)],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.renew",
        body: commands::lease::renew,
        flags: c"write fast",
        arity: 4,
        summary: c"Extends a held lease of TB.ACQUIRE to lease_ms from now (server clock). Replies [renewed, in_flight, ms left]; renewed is 0 (nothing changed) for a lease not held: expired, released or unknown.",
        complexity: c"O(log(N) + M) where N is the leases held and M the expired ones reclaimed",
        since: c"0.3.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[KEY_ARG, arg(c"lease_id", STRING), arg(c"lease_ms", INTEGER)],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.hold",
        body: commands::hold::hold,
        flags: c"write deny-oom fast",
        arity: 6,
        summary: c"Takes an estimated cost from a token bucket now as a hold of ttl_ms, to settle later with TB.SETTLE. Replies [allowed, remaining, retry_after, reset_after, hold_id or nil].",
        complexity: c"O(H) where H is the bucket's outstanding holds (at most 100)",
        since: c"0.3.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[KEY_ARG, CAPACITY, RATE, arg(c"estimate", DOUBLE), arg(c"ttl_ms", INTEGER)],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
    CommandDef {
        name: c"tb.settle",
        body: commands::hold::settle,
        flags: c"write fast",
        arity: -6,
        summary: c"Settles a hold of TB.HOLD with the actual cost: the surplus goes back, an excess is charged (as debt, bounded). Replies [settled, remaining, charged, reset_after]; settled 0 and nothing charged for a hold settled already, expired or unknown.",
        complexity: c"O(H) where H is the bucket's outstanding holds (at most 100)",
        since: c"0.3.0",
        keys: Keys::One(KEY_RW_UPDATE),
        args: &[
            KEY_ARG,
            CAPACITY,
            RATE,
            arg(c"hold_id", STRING),
            arg(c"actual", DOUBLE),
            ArgDef {
                flags: OPTIONAL,
                ..arg(c"max_wait", DOUBLE)
            },
        ],
        acl_categories: c"write fast",
        acl_categories_with_own: c"write fast ratelimit",
        stats: CommandStats::new(),
        alias: None,
    },
];

type CommandFunc =
    unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// The C entry point Redis calls for row `I` of the table.
///
/// # Safety
/// Called by Redis with a live context and `argc` valid argument strings.
unsafe extern "C" fn entry<const I: usize>(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let Some(def) = COMMANDS.get(I) else {
        return ERR;
    };
    if matches!(def.keys, Keys::Counted(_)) && commands::declare_counted_keys(ctx, argv, argc) {
        return OK;
    }
    if matches!(def.keys, Keys::OneThenTake(_)) && commands::lease::declare_keys(ctx, argv, argc) {
        return OK;
    }
    commands::dispatch(def.body, &def.stats, def.name, ctx, argv, argc)
}

/// One entry point per row, by position.
const ENTRIES: [CommandFunc; 12] = [
    entry::<0>,
    entry::<1>,
    entry::<2>,
    entry::<3>,
    entry::<4>,
    entry::<5>,
    entry::<6>,
    entry::<7>,
    entry::<8>,
    entry::<9>,
    entry::<10>,
    entry::<11>,
];
const _: () = assert!(ENTRIES.len() == COMMANDS.len());

fn init_module(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> bool {
    let api = match binding::api::resolve() {
        Ok(api) => api,
        Err(missing) => {
            log_warning(&format!("tb: this server lacks {missing}; not loading"));
            return false;
        }
    };
    let loaded = match load_arguments(api, argv, argc) {
        Ok(loaded) => loaded,
        Err(why) => {
            log_warning(&format!("tb: {why}; not loading"));
            return false;
        }
    };
    let aliases = loaded.aliases;
    commands::set_max_clock_ahead_ms(loaded.max_clock_ahead_ms);
    // Lease and hold ids must be unguessable: keyed by the kernel's randomness, or no load.
    match binding::random::os_seed() {
        Ok(seed) => commands::set_id_seed(seed),
        Err(why) => {
            log_warning(&format!(
                "tb: {why}; not loading (lease and hold ids need it)"
            ));
            return false;
        }
    }
    binding::store::init(api);
    // Keys are opened for writing, but only a take that writes modifies one: signal WATCH
    // and client-side caching ourselves, once for a key we wrote (store.rs), instead of
    // Redis doing it on every close (a denied take or a query would abort transactions
    // watching the bucket and invalidate client caches for nothing).
    // SAFETY: ctx is the load context.
    unsafe {
        (api.set_module_options)(
            ctx,
            raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int,
        )
    };
    let own_category = add_acl_category(ctx, api);
    for (def, handler) in COMMANDS.iter().zip(ENTRIES) {
        let alias = def.alias.as_ref().filter(|a| {
            aliases
                .iter()
                .any(|arg| arg.eq_ignore_ascii_case(a.load_arg))
        });
        for name in std::iter::once(def.name).chain(alias.map(|a| a.name)) {
            if !register(ctx, api, def, name, handler, own_category) {
                return false;
            }
        }
    }
    // SAFETY: registering during load; the callback is a plain extern "C" fn.
    unsafe { (api.register_info_func)(ctx, Some(info)) };
    true
}

/// Creates the command `name` for `def`, declares its keys and docs and puts it in its ACL
/// categories. Logs and returns false when the server refuses.
fn register(
    ctx: *mut RedisModuleCtx,
    api: &binding::api::Api,
    def: &CommandDef,
    name: &CStr,
    handler: CommandFunc,
    own_category: bool,
) -> bool {
    // Counted keys cannot be said in first/last/step: the key spec below declares them.
    let (first, last, step) = match def.keys {
        Keys::One(_) => (1, 1, 1),
        Keys::Counted(_) | Keys::OneThenTake(_) => (0, 0, 0),
    };
    // SAFETY: ctx is the load context; name and flags are static C strings.
    let created = unsafe {
        (api.create_command)(
            ctx,
            name.as_ptr(),
            Some(handler),
            def.flags.as_ptr(),
            first,
            last,
            step,
        )
    };
    if created != OK {
        log_warning(&format!(
            "tb: could not register {name:?} (is another module, such as redis-cell, already serving that name?)"
        ));
        return false;
    }
    // Without its key spec a command would run on keys of other cluster slots and past ACL
    // key patterns: refuse to load instead.
    if !set_command_info(ctx, api, def, name) {
        log_warning(&format!("tb: could not declare the keys of {name:?}"));
        return false;
    }
    set_acl_categories(ctx, api, def, name, own_category);
    true
}

/// The module's load arguments (`loadmodule /path/libredis_tb.so CL.THROTTLE
/// max-clock-ahead-ms 10000`): alias words and the clock bound (`parse_load_args`); a bad
/// one is returned as the reason the load fails, for a clear log line.
fn load_arguments(
    api: &binding::api::Api,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> Result<parse::args::LoadArgs, String> {
    let count = usize::try_from(argc).unwrap_or(0);
    let args: Vec<&[u8]> = if argv.is_null() || count == 0 {
        Vec::new()
    } else {
        // SAFETY: Redis passes argc valid strings in argv for the duration of the load.
        let argv = unsafe { std::slice::from_raw_parts(argv, count) };
        argv.iter()
            .map(|&s| binding::store::string_bytes(api, s))
            .collect()
    };
    parse::args::parse_load_args(&args, |text| {
        COMMANDS
            .iter()
            .filter_map(|def| def.alias.as_ref())
            .any(|a| a.load_arg.eq_ignore_ascii_case(text))
    })
}

/// Declares arity, key specs, summary and arguments (7.0+), so COMMAND INFO / COMMAND
/// DOCS / COMMAND GETKEYS, cluster routing and ACL key patterns all see the keys.
fn set_command_info(
    ctx: *mut RedisModuleCtx,
    api: &binding::api::Api,
    def: &CommandDef,
    name: &CStr,
) -> bool {
    // SAFETY: get_command returns the command we just created (or NULL).
    let command = unsafe { (api.get_command)(ctx, name.as_ptr()) };
    if command.is_null() {
        return false;
    }
    let version = RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<RedisModuleCommandArg>(),
    };
    // Zeroed arrays end each list, as the API requires.
    // SAFETY: all-zero is a valid value of these plain C structs (NULL pointers, zeros).
    let mut key_specs: [RedisModuleCommandKeySpec; 3] = unsafe { std::mem::zeroed() };
    if let (Keys::OneThenTake(flags), Some(spec)) = (&def.keys, key_specs.get_mut(1)) {
        // The buckets of TB.ACQUIRE ... TAKE numkeys key [key ...].
        spec.flags = u64::from(*flags);
        spec.begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_KEYWORD;
        spec.bs.keyword.keyword = c"TAKE".as_ptr();
        spec.bs.keyword.startfrom = 4;
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
        spec.fk.keynum.keynumidx = 0;
        spec.fk.keynum.firstkey = 1;
        spec.fk.keynum.keystep = 1;
    }
    if let Some(spec) = key_specs.first_mut() {
        spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        spec.bs.index.pos = 1;
        match def.keys {
            Keys::One(flags) | Keys::OneThenTake(flags) => {
                spec.flags = u64::from(flags);
                spec.find_keys_type =
                    raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
                spec.fk.range.lastkey = 0;
                spec.fk.range.keystep = 1;
                spec.fk.range.limit = 0;
            }
            Keys::Counted(flags) => {
                spec.flags = u64::from(flags);
                spec.find_keys_type =
                    raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
                // Relative to the begin-search index: the count there, keys right after.
                spec.fk.keynum.keynumidx = 0;
                spec.fk.keynum.firstkey = 1;
                spec.fk.keynum.keystep = 1;
            }
        }
    }
    let mut storage = Vec::new();
    let args = command_args(def.args, &mut storage);
    // SAFETY: all-zero is valid for this C struct; every pointer set below outlives the
    // call (Redis copies what it keeps).
    let mut info: RedisModuleCommandInfo = unsafe { std::mem::zeroed() };
    info.version = &version;
    info.summary = def.summary.as_ptr();
    info.complexity = def.complexity.as_ptr();
    info.since = def.since.as_ptr();
    info.arity = def.arity;
    info.key_specs = key_specs.as_mut_ptr();
    info.args = args;
    // SAFETY: command and info are valid for the duration of the call.
    unsafe { (api.set_command_info)(command, &info) == OK }
}

/// The C argument list for `defs`, zero-terminated, with blocks' sub-lists; every list is
/// kept in `storage` (moving a Vec keeps its buffer where it is), which the caller holds
/// until Redis has copied them.
fn command_args(
    defs: &[ArgDef],
    storage: &mut Vec<Vec<RedisModuleCommandArg>>,
) -> *mut RedisModuleCommandArg {
    let mut list: Vec<RedisModuleCommandArg> = defs
        .iter()
        .map(|def| {
            // SAFETY: all-zero is a valid value of this plain C struct.
            let mut slot: RedisModuleCommandArg = unsafe { std::mem::zeroed() };
            slot.name = def.name.as_ptr();
            slot.type_ = def.kind;
            slot.key_spec_index = if def.kind == KEY { 0 } else { -1 };
            if def.kind == PURE_TOKEN {
                // A pure token is its own word on the command line.
                slot.token = def.name.as_ptr();
            }
            slot.flags = def.flags as c_int;
            if !def.subargs.is_empty() {
                slot.subargs = command_args(def.subargs, storage);
            }
            slot
        })
        .collect();
    // SAFETY: as above; the zeroed entry ends the list.
    list.push(unsafe { std::mem::zeroed() });
    let ptr = list.as_mut_ptr();
    storage.push(list);
    ptr
}

/// Adds the `ratelimit` ACL category (Redis 7.4+), so `ACL SETUSER u +@ratelimit` grants
/// exactly this module's commands. Older servers lack the API; that is not an error.
fn add_acl_category(ctx: *mut RedisModuleCtx, api: &binding::api::Api) -> bool {
    let Some(add) = api.add_acl_category else {
        return false;
    };
    // SAFETY: called during load, as the API requires; the name is a static C string.
    let ok = unsafe { add(ctx, ACL_CATEGORY.as_ptr()) } == OK;
    if !ok {
        log_warning("tb: could not add the ratelimit ACL category");
    }
    ok
}

const ACL_CATEGORY: &CStr = c"ratelimit";

/// Puts a command in ACL categories matching its flags (Redis 7.2+; 7.0 has no API for
/// module command categories, and calling a missing one is what breaks loading there).
fn set_acl_categories(
    ctx: *mut RedisModuleCtx,
    api: &binding::api::Api,
    def: &CommandDef,
    name: &CStr,
    own_category: bool,
) {
    let Some(set) = api.set_command_acl_categories else {
        return;
    };
    // SAFETY: get_command returns the command we just created (or NULL).
    let command = unsafe { (api.get_command)(ctx, name.as_ptr()) };
    if command.is_null() {
        return;
    }
    let categories = if own_category {
        def.acl_categories_with_own
    } else {
        def.acl_categories
    };
    // SAFETY: valid command; static C string.
    if unsafe { set(command, categories.as_ptr()) } != OK {
        log_warning(&format!("tb: could not set ACL categories of {name:?}"));
    }
}

/// `INFO tb`: per-command counters and the module version.
unsafe extern "C" fn info(ctx: *mut RedisModuleInfoCtx, _for_crash_report: c_int) {
    let Some(api) = binding::api::api() else {
        return;
    };
    // SAFETY: ctx is the live info context; all strings are NUL-terminated.
    unsafe {
        (api.info_add_section)(ctx, c"".as_ptr());
        (api.info_add_field_cstring)(ctx, c"version".as_ptr(), VERSION_C.as_ptr());
        for def in &COMMANDS {
            let command = def.name.to_string_lossy();
            let command = command.strip_prefix("tb.").unwrap_or(&command);
            for (name, value) in def.stats.snapshot() {
                let mut field = format!("{command}_{name}").into_bytes();
                field.push(0);
                (api.info_add_field_ulonglong)(ctx, field.as_ptr().cast::<c_char>(), value);
            }
        }
    }
}

const VERSION_C: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"unknown",
    };

/// Logs a warning to the Redis log (used on paths that should never run).
pub(crate) fn log_warning(message: &str) {
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
