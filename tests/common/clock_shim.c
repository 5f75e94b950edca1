/* A wall clock the tests set: LD_PRELOADed into a test's redis-server, it answers
 * clock_gettime(CLOCK_REALTIME*), gettimeofday and time with the microseconds stored in the
 * 8-byte file named by TB_CLOCK_FILE while they are not 0 (the real clock otherwise).
 * Two servers sharing one file read the same time, so a call on the server's clock (leases,
 * holds, TIME in scripts, key expiry) is decided at the same instant by the module and by
 * the scripts: the differential run compares their replies and bytes exactly. The monotonic
 * clocks, which Redis times its event loop with, are left alone.
 * Valkey loads modules with RTLD_DEEPBIND, which makes a module resolve clock_gettime in
 * its own dependencies (libc) before this preloaded library: dlopen is wrapped to drop that
 * flag, so the module reads this clock too (without it, the module read the real clock on
 * Valkey 8.1 while the server's TIME read this one, and the differential runs differed by
 * the microseconds between the test's set and the call).
 * Built by tests/common/clock.rs with the system's cc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const volatile uint64_t *shared;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);

/* The real functions, looked up on first use: another library's constructor (jemalloc's)
 * may read the clock before ours runs. */
static void tb_clock_real(void) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    if (real_gettimeofday == NULL)
        real_gettimeofday = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
}

__attribute__((constructor)) static void tb_clock_init(void) {
    tb_clock_real();
    const char *path = getenv("TB_CLOCK_FILE");
    if (path == NULL) return;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    void *m = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED) shared = (const volatile uint64_t *)m;
}

static uint64_t fake_micros(void) {
    return shared ? __atomic_load_n((const uint64_t *)shared, __ATOMIC_ACQUIRE) : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    uint64_t us = fake_micros();
    if (us != 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        ts->tv_sec = (time_t)(us / 1000000);
        ts->tv_nsec = (long)(us % 1000000) * 1000;
        return 0;
    }
    tb_clock_real();
    return real_clock_gettime(id, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
    uint64_t us = fake_micros();
    if (us != 0 && tv != NULL) {
        tv->tv_sec = (time_t)(us / 1000000);
        tv->tv_usec = (suseconds_t)(us % 1000000);
        return 0;
    }
    tb_clock_real();
    return real_gettimeofday(tv, tz);
}

time_t time(time_t *out) {
    uint64_t us = fake_micros();
    struct timespec ts;
    time_t t;
    if (us != 0) {
        t = (time_t)(us / 1000000);
    } else {
        tb_clock_real();
        real_clock_gettime(CLOCK_REALTIME, &ts);
        t = ts.tv_sec;
    }
    if (out != NULL) *out = t;
    return t;
}

void *dlopen(const char *file, int flags) {
    static void *(*real_dlopen)(const char *, int);
    if (real_dlopen == NULL) real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
#ifdef RTLD_DEEPBIND
    flags &= ~RTLD_DEEPBIND;
#endif
    return real_dlopen(file, flags);
}
