/* The least a Redis module can do for an in-flight acquire + release, to compare
 * TB.ACQUIRE + TB.RELEASE and redis-semaphore against (bench/floor/lease_floor.py, `make
 * bench-floor-leases`; not part of CI). Three pairs, each doing less than a correct
 * in-flight limit must:
 *   FLOOR.ZACQ key member score at / FLOOR.ZREL key member: a lease as a sorted-set
 *     member, TB's design: OpenKey, ZsetAdd + SetAbsExpire, a keyspace event, ZADD and
 *     PEXPIREAT replicated; ZsetRem, an event, ZREM replicated. No lease id made, no
 *     expired lease reclaimed, no count of leases, a one-integer reply.
 *   FLOOR.NACQ key at / FLOOR.NREL key: a counter in a module type instead: the value
 *     set or read, the expiry, an event, one command of the module's own replicated.
 *   FLOOR.MACQ key / FLOOR.MREL key: the counter with no expiry and no event; the
 *     release replicated verbatim (no command lookup).
 * FLOOR.NSET is what the N and M pairs replicate (it does nothing: no replica is
 * measured). Built by lease_floor.py with the redismodule.h of the redis-module crate
 * in the cargo registry. */
#include "redismodule.h"
#include <stdlib.h>

static RedisModuleType *CountType;
typedef struct { long long n; } Count;

static void *count_load(RedisModuleIO *io, int ver) { (void)ver; Count *c = RedisModule_Alloc(sizeof *c); c->n = RedisModule_LoadSigned(io); return c; }
static void count_save(RedisModuleIO *io, void *v) { RedisModule_SaveSigned(io, ((Count *)v)->n); }
static void count_free(void *v) { RedisModule_Free(v); }

static int zacq(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 5) return RedisModule_WrongArity(ctx);
    double score; long long at;
    if (RedisModule_StringToDouble(argv[3], &score) != REDISMODULE_OK || RedisModule_StringToLongLong(argv[4], &at) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR bad number");
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int t = RedisModule_KeyType(key);
    if (t != REDISMODULE_KEYTYPE_EMPTY && t != REDISMODULE_KEYTYPE_ZSET) { RedisModule_CloseKey(key); return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); }
    int flags = REDISMODULE_ZADD_NX;
    RedisModule_ZsetAdd(key, score, argv[2], &flags);
    RedisModule_SetAbsExpire(key, at);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", argv[1]);
    RedisModule_Replicate(ctx, "ZADD", "sss", argv[1], argv[3], argv[2]);
    RedisModule_Replicate(ctx, "PEXPIREAT", "sl", argv[1], at);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, 1);
}

static int zrel(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int t = RedisModule_KeyType(key);
    if (t != REDISMODULE_KEYTYPE_ZSET) { RedisModule_CloseKey(key); return RedisModule_ReplyWithLongLong(ctx, 0); }
    int deleted = 0;
    RedisModule_ZsetRem(key, argv[2], &deleted);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zrem", argv[1]);
    RedisModule_Replicate(ctx, "ZREM", "ss", argv[1], argv[2]);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, deleted);
}

/* The key's counter, or NULL when the key holds anything else (or nothing). */
static inline Count *count_of(RedisModuleKey *key) {
    return RedisModule_ModuleTypeGetType(key) == CountType ? RedisModule_ModuleTypeGetValue(key) : NULL;
}

/* The same, an empty key given a counter at 0 first; NULL for another type. */
static inline Count *count_or_new(RedisModuleKey *key) {
    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) {
        Count *c = RedisModule_Alloc(sizeof *c);
        c->n = 0;
        RedisModule_ModuleTypeSetValue(key, CountType, c);
        return c;
    }
    return count_of(key);
}

static int nacq(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    long long at;
    if (RedisModule_StringToLongLong(argv[2], &at) != REDISMODULE_OK) return RedisModule_ReplyWithError(ctx, "ERR bad number");
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    Count *c = count_or_new(key);
    if (!c) { RedisModule_CloseKey(key); return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); }
    c->n++;
    RedisModule_SetAbsExpire(key, at);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "floor.nacq", argv[1]);
    RedisModule_Replicate(ctx, "FLOOR.NSET", "sll", argv[1], c->n, at);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, c->n);
}

static int nrel(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    Count *c = count_of(key);
    if (!c) { RedisModule_CloseKey(key); return RedisModule_ReplyWithLongLong(ctx, 0); }
    long long n = --c->n;
    if (n <= 0) RedisModule_DeleteKey(key);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "floor.nrel", argv[1]);
    RedisModule_Replicate(ctx, "FLOOR.NSET", "sll", argv[1], n, (long long)0);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, 1);
}


/* M*: the least of all: a module type value, no expiry, no notification; acquire
 * replicates one own command, release replicates itself verbatim (no lookup). */
static int macq(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    Count *c = count_or_new(key);
    if (!c) { RedisModule_CloseKey(key); return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); }
    c->n++;
    RedisModule_Replicate(ctx, "FLOOR.NSET", "sl", argv[1], c->n);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, c->n);
}

static int mrel(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    Count *c = count_of(key);
    if (!c) { RedisModule_CloseKey(key); return RedisModule_ReplyWithLongLong(ctx, 0); }
    if (--c->n <= 0) RedisModule_DeleteKey(key);
    RedisModule_ReplicateVerbatim(ctx);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, 1);
}

static int nset(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc; return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    if (RedisModule_Init(ctx, "floor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    RedisModuleTypeMethods tm = { .version = REDISMODULE_TYPE_METHOD_VERSION, .rdb_load = count_load, .rdb_save = count_save, .free = count_free };
    CountType = RedisModule_CreateDataType(ctx, "floorcnt0", 0, &tm);
    if (!CountType) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.zacq", zacq, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.zrel", zrel, "write", 1, 1, 1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.nacq", nacq, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.nrel", nrel, "write", 1, 1, 1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.macq", macq, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.mrel", mrel, "write", 1, 1, 1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.nset", nset, "write", 1, 1, 1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
