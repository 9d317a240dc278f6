/* Conformance test of an NCCL drop-in library. Compiled against the vendor's
 * nccl.h and linked against the vendor's libnccl.so.2, it is run with the
 * drop-in in LD_PRELOAD and its path in SHOAL_NCCL_LIB. Before anything else
 * it proves, with dladdr, that every nccl* function it calls comes from that
 * file; without the preload the vendor library would run (and fail: there is
 * no GPU), so a run that passes is a run on the drop-in.
 *
 * Ranks are forked processes; the parent creates the unique ids before the
 * fork and waits for the ranks with a deadline. All buffers are host memory
 * and every stream is NULL. */
#include "vendor.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* The vendor's library, which the program is linked against. */
#ifndef VENDOR_LIB
#define VENDOR_LIB "/usr/local/cuda/lib64/libnccl.so.2"
#endif
/* Deadline of one test case's ranks; the drop-in's own deadline (set by the
 * wrapper script) is shorter, so a stuck peer turns into an error first. */
#define VT_RANK_TIMEOUT_S 60
/* How long a non-blocking communicator may stay in progress. */
#define VT_ASYNC_TIMEOUT_S 30
/* Failure lines printed per process; the rest are only counted. */
#define VT_MAX_REPORTS 40

/* ---- reporting ------------------------------------------------------------ */

static char vt_who[48] = "parent";
static int vt_nfail;

void vt_set_who(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vt_who, sizeof(vt_who), fmt, ap);
    va_end(ap);
}

void vt_fail(const char *fmt, ...)
{
    if (++vt_nfail > VT_MAX_REPORTS)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "# %s: %s\n", vt_who, line);
}

int vt_failures(void)
{
    return vt_nfail;
}

static const char *rc_name(ncclResult_t rc)
{
    static const char *const names[] = {
        "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError",
        "ncclInternalError",   "ncclInvalidArgument",    "ncclInvalidUsage",
        "ncclRemoteError",     "ncclInProgress",
    };
    return (unsigned)rc < sizeof(names) / sizeof(names[0]) ? names[rc] : "(out of range)";
}

bool vt_rc(const char *what, ncclResult_t got, ncclResult_t want)
{
    if (got == want)
        return true;
    vt_fail("%s: got %d %s expected %d %s", what, (int)got, rc_name(got), (int)want,
            rc_name(want));
    return false;
}

bool vt_rc2(const char *what, ncclResult_t got, ncclResult_t want1, ncclResult_t want2)
{
    if (got == want1 || got == want2)
        return true;
    vt_fail("%s: got %d %s expected %s or %s", what, (int)got, rc_name(got), rc_name(want1),
            rc_name(want2));
    return false;
}

bool vt_check_reduced(const char *what, const void *got, ncclDataType_t dt, int op, int nranks,
                      size_t base, size_t count, uint32_t salt)
{
    size_t bad = 0, first = 0;
    vt_val_t first_got = {0}, first_want = {0};
    for (size_t k = 0; k < count; k++) {
        vt_val_t g = vt_load(dt, got, k);
        vt_val_t w = vt_expected(dt, op, nranks, base + k, salt);
        if (!vt_match(dt, op, g, w)) {
            if (!bad++)
                first = k, first_got = g, first_want = w;
        }
    }
    if (!bad)
        return true;
    char gt[48], wt[48];
    vt_format(dt, first_got, gt, sizeof(gt));
    vt_format(dt, first_want, wt, sizeof(wt));
    vt_fail("%s: element %zu of %zu: got %s expected %s (%zu elements differ)", what, first,
            count, gt, wt, bad);
    return false;
}

bool vt_check_bytes(const char *what, const void *got, ncclDataType_t dt, size_t off, size_t len,
                    int src, uint32_t salt)
{
    const uint8_t *p = got;
    size_t bad = 0, first = 0;
    uint8_t want[4096];
    for (size_t k = 0; k < len; k += sizeof(want)) {
        size_t m = len - k < sizeof(want) ? len - k : sizeof(want);
        vt_fill_bytes(want, off + k, m, src, salt);
        if (!memcmp(p + k, want, m))
            continue;
        for (size_t j = 0; j < m; j++)
            if (p[k + j] != want[j] && !bad++)
                first = k + j;
    }
    if (!bad)
        return true;
    size_t es = vt_size(dt);
    vt_fail("%s: element %zu (byte %zu) of %zu elements: got byte 0x%02x expected 0x%02x "
            "(from rank %d; %zu bytes differ)",
            what, first / es, first, len / es, p[first], vt_byte(src, off + first, salt), src,
            bad);
    return false;
}

bool vt_check_sentinel(const char *what, const void *buf, size_t from, size_t to)
{
    const uint8_t *p = buf;
    for (size_t k = from; k < to; k++) {
        if (p[k] != VT_SENTINEL) {
            vt_fail("%s: byte %zu written: got 0x%02x expected 0x%02x (untouched)", what, k, p[k],
                    VT_SENTINEL);
            return false;
        }
    }
    return true;
}

void *vt_alloc(size_t len)
{
    void *p = malloc(len + VT_GUARD);
    if (!p) {
        vt_fail("malloc(%zu) failed", len + VT_GUARD);
        fflush(stderr);
        _exit(1);
    }
    memset(p, VT_SENTINEL, len + VT_GUARD);
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ncclResult_t vt_wait_comm(ncclComm_t comm, const char *what)
{
    double deadline = now_s() + VT_ASYNC_TIMEOUT_S;
    for (;;) {
        ncclResult_t state = ncclInternalError;
        ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
        if (rc != ncclSuccess) {
            vt_fail("%s: ncclCommGetAsyncError: got %d %s expected ncclSuccess", what, (int)rc,
                    rc_name(rc));
            return rc;
        }
        if (state != ncclInProgress)
            return state;
        if (now_s() > deadline) {
            vt_fail("%s: still ncclInProgress after %d s", what, VT_ASYNC_TIMEOUT_S);
            return state;
        }
        sched_yield();
    }
}

/* ---- the calls this program makes ------------------------------------------ */

/* Every function of the vendor header; the address taken here is the one
 * the program's calls go through (the executable is position independent,
 * so it is read from the GOT that the dynamic linker filled). */
#define VT_FUNCS(X)                                                                            \
    X(ncclMemAlloc) X(ncclMemFree) X(ncclGetVersion) X(ncclGetUniqueId)                        \
    X(ncclCommInitRankConfig) X(ncclCommInitRank) X(ncclCommInitAll) X(ncclCommFinalize)       \
    X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommRevoke) X(ncclCommSplit) X(ncclCommShrink)   \
    X(ncclCommInitRankScalable) X(ncclGetErrorString) X(ncclGetLastError)                      \
    X(ncclResetDebugInit) X(ncclCommGetAsyncError) X(ncclCommCount) X(ncclCommCuDevice)        \
    X(ncclCommUserRank) X(ncclCommRegister) X(ncclCommDeregister) X(ncclCommWindowRegister)    \
    X(ncclCommWindowDeregister) X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy) X(ncclReduce)  \
    X(ncclBcast) X(ncclBroadcast) X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather)       \
    X(ncclAlltoAll) X(ncclGather) X(ncclScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart)     \
    X(ncclGroupEnd) X(ncclGroupSimulateEnd)

typedef struct {
    const char *name;
    void (*fn)(void);
} vt_func_t;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define VT_FUNC_ENTRY(f) {#f, (void (*)(void))f},
static const vt_func_t vt_funcs[] = {VT_FUNCS(VT_FUNC_ENTRY)};
#undef VT_FUNC_ENTRY
#pragma GCC diagnostic pop
#define VT_NFUNCS (sizeof(vt_funcs) / sizeof(vt_funcs[0]))

static void *fn_addr(void (*fn)(void))
{
    void *p;
    memcpy(&p, &fn, sizeof(p));
    return p;
}

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

bool vt_lives_in(const char *name, void *addr, const char *lib)
{
    Dl_info info;
    if (!addr || !dladdr(addr, &info) || !info.dli_fname) {
        vt_fail("%s: dladdr(%p) found no object", name, addr);
        return false;
    }
    if (!same_file(info.dli_fname, lib)) {
        vt_fail("%s: resolves to %s, not %s", name,
                info.dli_fname[0] ? info.dli_fname : "the executable", lib);
        return false;
    }
    return true;
}

/* Every nccl* (or pnccl* with prefix "p") function in the file named by
 * SHOAL_NCCL_LIB, which must be loaded. Returns the number of problems. */
static int check_symbols(const char *prefix)
{
    int before = vt_nfail;
    const char *lib = getenv("SHOAL_NCCL_LIB");
    if (!lib || !*lib) {
        vt_fail("SHOAL_NCCL_LIB is not set: it must name the preloaded drop-in libnccl.so.2");
        return vt_nfail - before;
    }
    struct stat st;
    if (stat(lib, &st) != 0) {
        vt_fail("SHOAL_NCCL_LIB=%s: %s", lib, strerror(errno));
        return vt_nfail - before;
    }
    if (same_file(lib, VENDOR_LIB)) {
        vt_fail("SHOAL_NCCL_LIB=%s is the vendor's library", lib);
        return vt_nfail - before;
    }
    void *handle = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (!handle) {
        vt_fail("%s is not loaded in this process (run with LD_PRELOAD=%s): %s", lib, lib,
                dlerror());
        return vt_nfail - before;
    }
    for (size_t k = 0; k < VT_NFUNCS; k++) {
        char name[64];
        snprintf(name, sizeof(name), "%s%s", prefix, vt_funcs[k].name);
        void *addr = *prefix ? dlsym(RTLD_DEFAULT, name) : fn_addr(vt_funcs[k].fn);
        if (!vt_lives_in(name, addr, lib))
            continue;
        void *defined = dlsym(handle, name);
        if (defined != addr)
            vt_fail("%s: the program calls %p but %s defines it at %p", name, addr, lib, defined);
    }
    dlclose(handle);
    return vt_nfail - before;
}

static void test_symbols(void **state)
{
    (void)state;
    assert_int_equal(VT_NFUNCS, 41);
    assert_int_equal(check_symbols(""), 0);
}

static void test_profiling_symbols(void **state)
{
    (void)state;
    assert_int_equal(check_symbols("p"), 0);
}

static void test_devapi_symbols(void **state)
{
    (void)state;
    const char *lib = getenv("SHOAL_NCCL_LIB");
    assert_non_null(lib);
    assert_int_equal(vt_devapi_check_symbols(lib), 0);
}

/* ---- reference self-check ---------------------------------------------------- */

static void test_reference(void **state)
{
    (void)state;
    /* Bit patterns from the formats' definitions: ones, signs, the largest
     * finite values, the smallest subnormals. */
    assert_int_equal(vt_to_half(1.0), 0x3c00);
    assert_int_equal(vt_to_half(-2.0), 0xc000);
    assert_int_equal(vt_to_half(0.5), 0x3800);
    assert_int_equal(vt_to_half(65504.0), 0x7bff);
    assert_int_equal(vt_to_half(0x1p-24), 0x0001);
    assert_int_equal(vt_to_half(0x1p-14), 0x0400);
    assert_int_equal(vt_to_half(1.0 + 0x1p-11), 0x3c00);     /* tie to even (down) */
    assert_int_equal(vt_to_half(1.0 + 3 * 0x1p-11), 0x3c02); /* tie to even (up) */
    assert_int_equal(vt_to_half(2047.0 + 0.5), 0x6800);      /* carry into the exponent */
    assert_int_equal(vt_to_bf16(1.0), 0x3f80);
    assert_int_equal(vt_to_bf16(-2.0), 0xc000);
    assert_int_equal(vt_to_bf16(3.0), 0x4040);
    assert_int_equal(vt_to_bf16(0x1p-133), 0x0001);
    assert_int_equal(vt_to_e4m3(1.0), 0x38);
    assert_int_equal(vt_to_e4m3(448.0), 0x7e);
    assert_int_equal(vt_to_e4m3(-2.0), 0xc0);
    assert_int_equal(vt_to_e4m3(0x1p-9), 0x01);
    assert_int_equal(vt_to_e4m3(0x1p-6), 0x08);
    assert_int_equal(vt_to_e5m2(1.0), 0x3c);
    assert_int_equal(vt_to_e5m2(57344.0), 0x7b);
    assert_int_equal(vt_to_e5m2(-1.5), 0xbe);
    assert_int_equal(vt_to_e5m2(0x1p-16), 0x01);
    assert_true(vt_from_half(0x7bff) == 65504.0);
    assert_true(vt_from_half(0x0001) == 0x1p-24);
    assert_true(vt_from_bf16(0x4040) == 3.0);
    assert_true(vt_from_e4m3(0x7e) == 448.0);
    assert_true(vt_from_e4m3(0x7f) != vt_from_e4m3(0x7f)); /* NaN */
    assert_true(vt_from_e5m2(0x7b) == 57344.0);
    assert_true(vt_from_e5m2(0x7c) > 1e300); /* Inf */
    /* Every finite code round-trips. */
    for (uint32_t b = 0; b < 0x10000; b++) {
        double h = vt_from_half((uint16_t)b), f = vt_from_bf16((uint16_t)b);
        if (h == h && h - h == 0 && !(h == 0 && b))
            assert_int_equal(vt_to_half(h), b);
        if (f == f && f - f == 0 && !(f == 0 && b))
            assert_int_equal(vt_to_bf16(f), b);
    }
    for (uint32_t b = 0; b < 0x100; b++) {
        double e4 = vt_from_e4m3((uint8_t)b), e5 = vt_from_e5m2((uint8_t)b);
        if (e4 == e4 && !(e4 == 0 && b))
            assert_int_equal(vt_to_e4m3(e4), b);
        if (e5 == e5 && e5 - e5 == 0 && !(e5 == 0 && b))
            assert_int_equal(vt_to_e5m2(e5), b);
    }
    /* Averages truncate toward zero on integers, as NCCL's sum-then-divide. */
    for (int n = 1; n <= 8; n++) {
        for (size_t g = 0; g < 64; g++) {
            int64_t sum = 0;
            for (int r = 0; r < n; r++)
                sum += vt_input(ncclInt32, ncclAvg, r, n, g, 7).i;
            assert_int_equal(vt_expected(ncclInt32, ncclAvg, n, g, 7).i, sum / n);
        }
    }
}

/* ---- version and error strings ---------------------------------------------- */

static const char *const nccl_strings[8] = {
    "no error",
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    "unhandled system error (run with NCCL_DEBUG=INFO for details)",
    "internal error - please report this issue to the NCCL developers",
    "invalid argument (run with NCCL_DEBUG=WARN for details)",
    "invalid usage (run with NCCL_DEBUG=WARN for details)",
    "remote process exited or there was a network error",
    "NCCL operation in progress",
};

static void test_version_strings(void **state)
{
    (void)state;
    int version = 0;
    /* The drop-in serves NCCL 2.30.7, whose calls a 2.28.9 program makes
     * unchanged: it answers 2.30's version, and knows 2.30's ncclTimeout
     * (8), which 2.28.9's library calls unknown. */
    assert_int_equal(ncclGetVersion(&version), ncclSuccess);
    assert_int_equal(version, 23007);
    assert_int_equal(NCCL_VERSION_CODE, 22809);

    int bad = 0;
    for (int rc = -2; rc <= 12; rc++) {
        const char *want = rc >= 0 && rc < 8 ? nccl_strings[rc]
                           : rc == 8         ? "timeout"
                                             : "unknown result code";
        const char *got = ncclGetErrorString((ncclResult_t)rc);
        if (!got || strcmp(got, want)) {
            vt_fail("ncclGetErrorString(%d): got \"%s\" expected \"%s\"", rc, got ? got : "(null)",
                    want);
            bad++;
        }
    }

    /* The vendor's own function, from a local handle (the preload does not
     * shadow it there), says the same. */
    void *vendor = dlopen(VENDOR_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!vendor)
        fail_msg("dlopen(%s): %s", VENDOR_LIB, dlerror());
    const char *(*vendor_str)(ncclResult_t);
    void *sym = dlsym(vendor, "ncclGetErrorString");
    assert_non_null(sym);
    memcpy(&vendor_str, &sym, sizeof(sym));
    Dl_info info;
    assert_true(dladdr(sym, &info) && info.dli_fname);
    if (!same_file(info.dli_fname, VENDOR_LIB))
        fail_msg("dlsym(vendor, ncclGetErrorString) is in %s, not %s", info.dli_fname, VENDOR_LIB);
    assert_ptr_not_equal(sym, fn_addr((void (*)(void))ncclGetErrorString));
    for (int rc = -2; rc <= 12; rc++) {
        if (rc == 8)
            continue; /* ncclTimeout: 2.30's, checked above */
        const char *want = vendor_str((ncclResult_t)rc);
        const char *got = ncclGetErrorString((ncclResult_t)rc);
        if (!got || strcmp(got, want)) {
            vt_fail("ncclGetErrorString(%d): got \"%s\"; the vendor's says \"%s\"", rc,
                    got ? got : "(null)", want);
            bad++;
        }
    }
    void *vsym = dlsym(vendor, "ncclGetVersion");
    ncclResult_t (*vendor_version)(int *);
    assert_non_null(vsym);
    memcpy(&vendor_version, &vsym, sizeof(vsym));
    int vv = 0;
    assert_int_equal(vendor_version(&vv), ncclSuccess);
    assert_int_equal(vv, NCCL_VERSION_CODE); /* the vendor's is the header's */
    dlclose(vendor);
    assert_int_equal(bad, 0);
}

/* ---- fork harness --------------------------------------------------------------- */

typedef int (*vt_rank_fn_t)(int rank, int nranks, const vt_ids_t *ids);

/* A rank still running at the deadline is asked (SIGUSR1 to its main
 * thread) to say where it is stuck before it is killed. */
#define VT_HANG_SIGNAL SIGUSR1
#define VT_HANG_GRACE_S 3

static char vt_hang_note[160];

/* One write of the note and the main thread's frames, each line a TAP
 * comment, so that reports of ranks stopped together do not interleave. */
static void on_hang_signal(int sig)
{
    (void)sig;
    void *frames[32];
    int n = backtrace(frames, 32);
    static char text[8192], out[10240];
    size_t len = 0, o = 0;
    int fd = memfd_create("vt-backtrace", 0);
    if (fd >= 0) {
        backtrace_symbols_fd(frames + 1, n - 1, fd);
        ssize_t r = pread(fd, text, sizeof(text) - 1, 0);
        len = r > 0 ? (size_t)r : 0;
    }
    for (const char *p = vt_hang_note; *p && o < sizeof(out); p++)
        out[o++] = *p;
    bool line_start = true;
    for (size_t k = 0; k < len && o + 5 < sizeof(out); k++) {
        if (line_start) {
            memcpy(out + o, "#   ", 4);
            o += 4;
        }
        out[o++] = text[k];
        line_start = text[k] == '\n';
    }
    ssize_t w = write(STDERR_FILENO, out, o);
    (void)w;
    _exit(1);
}

/* In a forked child: name it in failure lines and arm the hang report. */
static void child_setup(const char *fmt, int index)
{
    vt_set_who(fmt, index);
    vt_nfail = 0;
    snprintf(vt_hang_note, sizeof(vt_hang_note),
             "# %s: still running at the deadline; its main thread is in:\n", vt_who);
    struct sigaction sa = {.sa_handler = on_hang_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(VT_HANG_SIGNAL, &sa, NULL);
}

/* A forked child ends here: 0 only when fn returned 0 and no check failed. */
__attribute__((noreturn)) static void child_exit(int rc)
{
    if (vt_nfail > VT_MAX_REPORTS)
        fprintf(stderr, "# %s: %d more failures not shown\n", vt_who, vt_nfail - VT_MAX_REPORTS);
    fflush(NULL);
    _exit(rc || vt_nfail ? 1 : 0);
}

typedef struct {
    pid_t pid;
    int pidfd;
    bool done;
} vt_child_t;

/* Reap children as they exit until deadline; returns how many did not exit
 * 0, saying why for each unless late (then they were stopped by us). */
static int reap_until(vt_child_t *ch, int n, const char *label, double deadline, bool late)
{
    int bad = 0;
    for (;;) {
        struct pollfd pfd[8];
        int map[8], np = 0;
        for (int i = 0; i < n; i++) {
            if (!ch[i].done && ch[i].pidfd >= 0) {
                pfd[np] = (struct pollfd){.fd = ch[i].pidfd, .events = POLLIN};
                map[np++] = i;
            }
        }
        double rest = deadline - now_s();
        if (np == 0 || rest <= 0)
            return bad;
        int ready = poll(pfd, (nfds_t)np, (int)(rest * 1000) + 1);
        if (ready < 0 && errno != EINTR)
            return bad;
        for (int k = 0; k < np && ready > 0; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLHUP)))
                continue;
            vt_child_t *c = &ch[map[k]];
            int st = 0;
            if (waitpid(c->pid, &st, 0) != c->pid)
                st = -1;
            c->done = true;
            if (!late && WIFEXITED(st) && WEXITSTATUS(st) == 0)
                continue;
            bad++;
            if (late)
                fprintf(stderr, "# %s %d: stopped at the deadline\n", label, map[k]);
            else if (WIFSIGNALED(st))
                fprintf(stderr, "# %s %d: killed by signal %d (%s)\n", label, map[k],
                        WTERMSIG(st), strsignal(WTERMSIG(st)));
            else
                fprintf(stderr, "# %s %d: exit status %d\n", label, map[k], WEXITSTATUS(st));
        }
    }
}

/* Wait for every pid (pidfds make the wait poll-able with a deadline); at
 * the deadline ask the rest where they are, then kill them. Returns the
 * number of processes that did not exit 0, after saying why for each. */
static int wait_all(const pid_t *pids, int n, const char *label, int timeout_s)
{
    vt_child_t ch[8];
    for (int i = 0; i < n; i++) {
        ch[i] = (vt_child_t){.pid = pids[i], .pidfd = (int)syscall(SYS_pidfd_open, pids[i], 0)};
        if (ch[i].pidfd < 0)
            fprintf(stderr, "# pidfd_open(%d): %s\n", (int)pids[i], strerror(errno));
    }
    int bad = reap_until(ch, n, label, now_s() + timeout_s, false);
    bool stuck = false;
    for (int i = 0; i < n; i++) {
        if (!ch[i].done) {
            stuck = true;
            fprintf(stderr, "# %s %d: still running after the %d s deadline\n", label, i,
                    timeout_s);
            syscall(SYS_tgkill, ch[i].pid, ch[i].pid, VT_HANG_SIGNAL);
        }
    }
    if (stuck)
        bad += reap_until(ch, n, label, now_s() + VT_HANG_GRACE_S, true);
    for (int i = 0; i < n; i++) {
        if (!ch[i].done) {
            kill(ch[i].pid, SIGKILL);
            waitpid(ch[i].pid, NULL, 0);
            fprintf(stderr, "# %s %d: killed\n", label, i);
            bad++;
        }
        if (ch[i].pidfd >= 0)
            close(ch[i].pidfd);
    }
    return bad;
}

static void meet_mark(char *path, size_t len, pid_t parent, const char *tag, int rank)
{
    snprintf(path, len, "/tmp/shoal-vt-meet-%d-%s-%d", (int)parent, tag, rank);
}

void vt_ranks_meet(const char *tag, int rank, int nranks)
{
    char path[96];
    meet_mark(path, sizeof(path), getppid(), tag, rank);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    for (int r = 0; r < nranks; r++) {
        meet_mark(path, sizeof(path), getppid(), tag, r);
        int t = 0;
        for (; t < 60000 && access(path, F_OK) != 0; t++)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        if (t == 60000)
            vt_fail("rank %d never reached %s", r, tag);
    }
}

/* The marks of vt_ranks_meet that the ranks of the case just ended left. */
static void meet_cleanup(int nranks)
{
    static const char *const tags[] = {"probed"};
    char path[96];
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        for (int r = 0; r < nranks; r++) {
            meet_mark(path, sizeof(path), getpid(), tags[i], r);
            unlink(path);
        }
    }
}

/* Run fn in nranks forked processes with the first nids ids created here,
 * before the fork, as NCCL requires (the creator is the ranks' parent). */
static int run_ranks(int nranks, vt_rank_fn_t fn, int nids)
{
    vt_ids_t ids;
    memset(&ids, 0, sizeof(ids));
    for (int i = 0; i < nids; i++) {
        ncclResult_t rc = ncclGetUniqueId(&ids.id[i]);
        if (rc != ncclSuccess) {
            fprintf(stderr, "# parent: ncclGetUniqueId: got %d %s expected ncclSuccess\n", (int)rc,
                    rc_name(rc));
            return nranks;
        }
    }
    fflush(NULL);
    pid_t pids[8] = {0};
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            child_setup("rank %d", r);
            child_exit(fn(r, nranks, &ids));
        }
        if (pids[r] < 0) {
            fprintf(stderr, "# parent: fork: %s\n", strerror(errno));
            for (int k = 0; k < r; k++)
                kill(pids[k], SIGKILL);
            wait_all(pids, r, "rank", 1);
            return nranks;
        }
    }
    int bad = wait_all(pids, nranks, "rank", VT_RANK_TIMEOUT_S);
    meet_cleanup(nranks);
    return bad;
}

/* Run fn(n) in one forked process (a crash or hang there fails the case). */
static int run_single(int n, int (*fn)(int n))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        child_setup("process %d", 0);
        child_exit(fn(n));
    }
    if (pid < 0) {
        fprintf(stderr, "# parent: fork: %s\n", strerror(errno));
        return 1;
    }
    return wait_all(&pid, 1, "process", VT_RANK_TIMEOUT_S);
}

/* ---- one process, many communicators ------------------------------------------- */

/* One thread drives every communicator: all-reduce and broadcast on each
 * inside one group, checked after ncclGroupEnd. */
static void drive_comms(ncclComm_t *comms, int n, const char *how)
{
    const size_t count = 1031;
    char what[96];
    for (int i = 0; i < n; i++) {
        int c = -1, r = -1;
        snprintf(what, sizeof(what), "%s: comm %d: ncclCommCount", how, i);
        if (vt_rc(what, ncclCommCount(comms[i], &c), ncclSuccess) && c != n)
            vt_fail("%s: got %d expected %d", what, c, n);
        snprintf(what, sizeof(what), "%s: comm %d: ncclCommUserRank", how, i);
        if (vt_rc(what, ncclCommUserRank(comms[i], &r), ncclSuccess) && r != i)
            vt_fail("%s: got %d expected %d", what, r, i);
    }
    void *send[8], *recv[8], *bc[8];
    uint32_t salt = 0x51e;
    for (int i = 0; i < n; i++) {
        send[i] = vt_alloc(count * 4);
        recv[i] = vt_alloc(count * 4);
        bc[i] = vt_alloc(count * 8);
        vt_fill_input(send[i], ncclFloat32, ncclSum, i, n, 0, count, salt);
        if (i == n - 1)
            vt_fill_bytes(bc[i], 0, count * 8, i, salt);
    }
    snprintf(what, sizeof(what), "%s: ncclGroupStart", how);
    vt_rc(what, ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof(what), "%s: comm %d: ncclAllReduce in a group", how, i);
        vt_rc(what,
              ncclAllReduce(send[i], recv[i], count, ncclFloat32, ncclSum, comms[i], VT_STREAM),
              ncclSuccess);
        snprintf(what, sizeof(what), "%s: comm %d: ncclBroadcast in a group", how, i);
        vt_rc(what, ncclBroadcast(bc[i], bc[i], count, ncclFloat64, n - 1, comms[i], VT_STREAM),
              ncclSuccess);
    }
    snprintf(what, sizeof(what), "%s: ncclGroupEnd", how);
    vt_rc(what, ncclGroupEnd(), ncclSuccess);
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof(what), "%s: comm %d: all-reduce float32 sum", how, i);
        vt_check_reduced(what, recv[i], ncclFloat32, ncclSum, n, 0, count, salt);
        vt_check_sentinel(what, recv[i], count * 4, count * 4 + VT_GUARD);
        snprintf(what, sizeof(what), "%s: comm %d: broadcast float64 root %d", how, i, n - 1);
        vt_check_bytes(what, bc[i], ncclFloat64, 0, count * 8, n - 1, salt);
        free(send[i]);
        free(recv[i]);
        free(bc[i]);
    }
}

static void destroy_comms(ncclComm_t *comms, int n, const char *how)
{
    char what[96];
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof(what), "%s: comm %d: ncclCommDestroy", how, i);
        vt_rc(what, ncclCommDestroy(comms[i]), ncclSuccess);
    }
}

static int single_process(int n)
{
    ncclComm_t comms[8];
    int devlist[8];
    for (int i = 0; i < n; i++)
        devlist[i] = i;

    memset(comms, 0, sizeof(comms));
    if (VT_RC(ncclCommInitAll(comms, n, NULL), ncclSuccess)) {
        drive_comms(comms, n, "ncclCommInitAll(devlist NULL)");
        destroy_comms(comms, n, "ncclCommInitAll(devlist NULL)");
    }
    memset(comms, 0, sizeof(comms));
    if (VT_RC(ncclCommInitAll(comms, n, devlist), ncclSuccess)) {
        drive_comms(comms, n, "ncclCommInitAll(devlist 0..n-1)");
        destroy_comms(comms, n, "ncclCommInitAll(devlist 0..n-1)");
    }

    /* NCCL's single-thread, many-rank init: ncclCommInitRank for every rank
     * between ncclGroupStart and ncclGroupEnd. */
    ncclUniqueId id;
    if (!VT_RC(ncclGetUniqueId(&id), ncclSuccess))
        return 1;
    memset(comms, 0, sizeof(comms));
    bool ok = VT_RC(ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof(what), "ncclCommInitRank(rank %d) in a group", i);
        ok &= vt_rc(what, ncclCommInitRank(&comms[i], n, id, i), ncclSuccess);
    }
    ok &= VT_RC(ncclGroupEnd(), ncclSuccess);
    if (ok) {
        drive_comms(comms, n, "grouped ncclCommInitRank");
        /* Split every rank in one group, rank 0 with NCCL_SPLIT_NOCOLOR: its
         * part of the exchange must wait for ncclGroupEnd too. */
        ncclComm_t sub[8];
        memset(sub, 0, sizeof(sub));
        bool split_ok = n > 1 && VT_RC(ncclGroupStart(), ncclSuccess);
        for (int i = 0; split_ok && i < n; i++) {
            char what[64];
            snprintf(what, sizeof(what), "ncclCommSplit(rank %d) in a group", i);
            split_ok &= vt_rc(what,
                              ncclCommSplit(comms[i], i == 0 ? NCCL_SPLIT_NOCOLOR : 1, i,
                                            &sub[i], NULL),
                              ncclSuccess);
        }
        if (n > 1) {
            split_ok &= VT_RC(ncclGroupEnd(), ncclSuccess);
            if (sub[0] != NULL)
                vt_fail("grouped split: NCCL_SPLIT_NOCOLOR gave a communicator");
        }
        if (split_ok) {
            drive_comms(&sub[1], n - 1, "grouped ncclCommSplit");
            destroy_comms(&sub[1], n - 1, "grouped ncclCommSplit");
        }
        destroy_comms(comms, n, "grouped ncclCommInitRank");
    }
    return 0;
}

/* ---- test cases ------------------------------------------------------------------ */

static void expect_ranks_ok(int bad, int n, const char *what)
{
    if (bad)
        fail_msg("%d of %d %s failed (the lines above say how)", bad, n, what);
}

static void test_coll(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_coll_rank, 1), n, "ranks");
}

static void test_comm(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_comm_rank, VT_NIDS), n, "ranks");
}

static void test_usage(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_usage_rank, 1), n, "ranks");
}

static void test_input(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_input_rank, 1), n, "ranks");
}

static void test_shrink_abort(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_shrink_abort_rank, 1), n, "ranks");
}

static void test_death(void **state)
{
    int n = (int)(intptr_t)*state;
    /* The victim's SIGKILL is the one failure allowed (and reported). */
    int bad = run_ranks(n, vt_death_rank, 1);
    if (bad != 1)
        fail_msg("%d of %d ranks failed; only the killed one should have", bad, n);
}

static void test_compress(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_compress_rank, VT_ID_CONFIG + 1), n, "ranks");
}

static void test_compress_colls(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_compress_colls_rank, VT_ID_CONFIG + 1), n, "ranks");
}

static void test_devapi(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_ranks(n, vt_devapi_rank, VT_ID_MAIN + 1), n, "ranks");
    if (n > 1)
        expect_ranks_ok(run_ranks(n, vt_devapi_hosts_rank, VT_ID_MAIN + 1), n,
                        "ranks on two hosts");
}

static void test_single_process(void **state)
{
    int n = (int)(intptr_t)*state;
    expect_ranks_ok(run_single(n, single_process), 1, "process");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], VT_DEVAPI_EXEC))
        return vt_devapi_exec_main(argc, argv);
    /* backtrace loads its unwinder on first use: not in a signal handler. */
    void *frame;
    backtrace(&frame, 1);

    /* The proof comes first: if any nccl* function is not the drop-in's,
     * nothing below would test it, so stop here. */
    if (check_symbols("")) {
        printf("Bail out! the nccl* functions do not all come from SHOAL_NCCL_LIB "
               "(run with LD_PRELOAD=<drop-in libnccl.so.2> SHOAL_NCCL_LIB=<same path>)\n");
        return 1;
    }

    /* Five cases that need no ranks, then up to ten per rank count. */
    enum { KINDS = 10 };
    static char names[KINDS][8][96];
    struct CMUnitTest tests[5 + KINDS * 8];
    size_t nt = 0;
    tests[nt++] = (struct CMUnitTest){"symbols: all 41 nccl* functions are SHOAL_NCCL_LIB's",
                                      test_symbols, NULL, NULL, NULL};
    tests[nt++] = (struct CMUnitTest){"symbols: the pnccl* names are SHOAL_NCCL_LIB's too",
                                      test_profiling_symbols, NULL, NULL, NULL};
    tests[nt++] = (struct CMUnitTest){"symbols: the device API's 11 host functions and "
                                      "ncclResetDebugInitInternal are SHOAL_NCCL_LIB's",
                                      test_devapi_symbols, NULL, NULL, NULL};
    tests[nt++] = (struct CMUnitTest){"reference: fp16, bf16, fp8 conversions and averages",
                                      test_reference, NULL, NULL, NULL};
    tests[nt++] = (struct CMUnitTest){"ncclGetVersion (2.30.7 served) and ncclGetErrorString (vs the vendor's)",
                                      test_version_strings, NULL, NULL, NULL};
    static const struct {
        const char *name; /* %d%s is the rank count and its plural s */
        CMUnitTestFunction fn;
        int min_ranks, max_ranks;
    } kinds[KINDS] = {
        {"collectives, %d rank%s", test_coll, 1, 8},
        {"communicators: init, split, shrink, non-blocking, revoke, %d rank%s", test_comm, 1, 8},
        {"pre-multiply-sum, groups, registration, memory, %d rank%s", test_usage, 1, 8},
        {"bad input and host memory, %d rank%s", test_input, 1, 8},
        {"shrink with NCCL_SHRINK_ABORT, %d rank%s", test_shrink_abort, 2, 8},
        {"ncclCommInitAll and grouped init, %d comm%s in one process", test_single_process, 1, 8},
        {"a rank killed: ncclRemoteError on the others, %d rank%s", test_death, 2, 4},
        {"SHOAL_COMPRESS: float all-reduces compressed or exact as it says, %d rank%s",
         test_compress, 1, 4},
        {"SHOAL_COMPRESS_ALLGATHER and _REDUCESCATTER: compressed or exact as they say, %d rank%s",
         test_compress_colls, 1, 3},
        {"device API host functions: teams on one host and two, refusals, %d rank%s",
         test_devapi, 1, 5},
    };
    /* Short runs (SHOAL_TEST_QUICK=1, CI's sanitizer and clang variants)
     * take the rank counts of the test binaries' short matrices. */
    const char *quick = getenv("SHOAL_TEST_QUICK");
    int short_run = quick && quick[0] == '1';
    for (int n = 1; n <= 8; n++) {
        if (short_run && n != 1 && n != 2 && n != 3 && n != 5 && n != 8)
            continue;
        for (int k = 0; k < KINDS; k++) {
            if (n < kinds[k].min_ranks || n > kinds[k].max_ranks)
                continue;
            snprintf(names[k][n - 1], sizeof(names[k][n - 1]), kinds[k].name, n, n > 1 ? "s" : "");
            tests[nt++] = (struct CMUnitTest){names[k][n - 1], kinds[k].fn, NULL, NULL,
                                              (void *)(intptr_t)n};
        }
    }
    /* A glob over the names above runs a part, for debugging. */
    const char *filter = getenv("NCCL_VENDOR_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return _cmocka_run_group_tests("nccl_vendor", tests, nt, NULL, NULL);
}
