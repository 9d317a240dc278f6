/* The NCCL door's 2.30 API, as a program written against NCCL 2.30's
 * header sees it: shoal's nccl.h (its default, 2.30 declarations) with
 * nccl230/nccl_230.h's declarations of 2.30 after it, so that a
 * prototype, value or layout of shoal's that differs from 2.30's fails the
 * build; then, over forked ranks on shared memory, calling
 * shoal's libnccl.so.2:
 * - ncclGetVersion answers 23007, and ncclGetErrorString knows
 *   ncclTimeout;
 * - a 2.30 config (its new fields set) is taken, and so is a 2.28.9 one
 *   (size 80) that ends at an unreadable page: nothing past its size is
 *   read;
 * - ncclCommGetUniqueId and ncclCommGrow: 1..4 ranks growing by 1..2
 *   (new ranks appended, an all-reduce on the grown communicator and on
 *   the parent after it), every rank of the parent getting the same id,
 *   and the id refused by a communicator it is not for;
 * - ncclWinGetUserPtr gives each window's buffer, and refuses a window
 *   that is not the communicator's;
 * - suspend and resume on host buffers: calls refused while suspended,
 *   working again after; the statistics (no device memory here, the
 *   suspended flag); bad flags, and a resume of what is not suspended,
 *   refused (the device side is test_cuda_nccl_compress.c's);
 * - the parameter API over shoal's settings, set in this process's
 *   environment before the library reads it: a setting by its SHOAL_ name
 *   and by its NCCL alias is one handle and one value; a size, a time and
 *   a log level read as the numbers shoal uses, values that do not fit a
 *   narrower type and text that is no number refused with the reason;
 *   the raw read's bytes and length; every key listed; unknown keys and
 *   handles refused;
 * - one-sided calls (1 and 3 ranks on shm, 2 on tcp): every rank puts a
 *   block into every rank's window from its symmetric source window and
 *   waits for all, signals alone, a put and a wait in a group around a
 *   ring, NCCL's argument checks with their reasons, and a wait never
 *   satisfied ending in ncclTimeout that names the peer. */
#include "nccl.h"
#include "nccl230/nccl_230.h"

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 120
#define COUNT 1001

#define NCCL_OK(call, label)                                                           \
    do {                                                                               \
        ncclResult_t r_ = (call);                                                      \
        RANK_CHECK(r_ == ncclSuccess, label, "%s: %s (%s)", #call,                    \
                   ncclGetErrorString(r_), ncclGetLastError(NULL));                    \
    } while (0)

typedef struct {
    int old, add;
    ncclUniqueId parent_id;
    int pipe_fd[2];
} grow_arg_t;

/* An exact int32 sum on comm, of n ranks, this one being rank. */
static int check_sum(ncclComm_t comm, int rank, int n, const char *what)
{
    int32_t buf[COUNT];
    for (int i = 0; i < COUNT; i++)
        buf[i] = rank * 1000 + i;
    NCCL_OK(ncclAllReduce(buf, buf, COUNT, ncclInt32, ncclSum, comm, NULL), fail);
    for (int i = 0; i < COUNT; i++) {
        int32_t want = 1000 * n * (n - 1) / 2 + n * i;
        RANK_CHECK(buf[i] == want, fail, "%s: value %d is %d, expected %d", what, i, buf[i],
                   want);
    }
    return 0;
fail:
    return 1;
}

static int check_shape(ncclComm_t comm, int rank, int n, const char *what)
{
    int r = -1, c = -1;
    NCCL_OK(ncclCommUserRank(comm, &r), fail);
    NCCL_OK(ncclCommCount(comm, &c), fail);
    RANK_CHECK(r == rank && c == n, fail, "%s: rank %d of %d, expected %d of %d", what, r, c,
               rank, n);
    return 0;
fail:
    return 1;
}

/* A config whose last byte ends a readable page, the next page unreadable:
 * a library that reads past config->size faults. */
static ncclConfig_t *config_at_page_end(size_t size, void **map_p)
{
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED || mprotect(map + page, (size_t)page, PROT_NONE) != 0)
        return NULL;
    ncclConfig_t full = NCCL_CONFIG_INITIALIZER;
    full.size = size;
    full.commName = "old-config";
    ncclConfig_t *c = (ncclConfig_t *)(void *)(map + page - size);
    memcpy(c, &full, size);
    *map_p = map;
    return c;
}

static int rank_grow(int rank, int nprocs, const shoal_unique_id_t *unused, void *varg)
{
    (void)unused, (void)nprocs;
    grow_arg_t *a = varg;
    int n = a->old + a->add;
    ncclComm_t parent = NULL, grown = NULL;
    ncclUniqueId id;
    if (rank >= a->old) {
        close(a->pipe_fd[1]);
        RANK_CHECK(read(a->pipe_fd[0], &id, sizeof(id)) == (ssize_t)sizeof(id), fail,
                   "new rank %d: no id", rank);
        /* A new rank with a 2.30 config, its new fields set. */
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.graphUsageMode = 1;
        cfg.numRmaCtx = 2;
        cfg.maxP2pPeers = 8;
        cfg.graphStreamOrdering = 0;
        NCCL_OK(ncclCommGrow(NULL, n, &id, rank, &grown, &cfg), fail);
    } else {
        close(a->pipe_fd[0]);
        void *map = NULL;
        ncclConfig_t *old = config_at_page_end(NCCL_228_CONFIG_SIZE, &map);
        RANK_CHECK(old, fail, "mmap");
        NCCL_OK(ncclCommInitRankConfig(&parent, a->old, a->parent_id, rank, old), fail);
        munmap(map, 2 * (size_t)sysconf(_SC_PAGESIZE));
        NCCL_OK(ncclCommGetUniqueId(parent, &id), fail);
        /* Every rank of the parent gets the same id: compare them. */
        ncclUniqueId *all = malloc(sizeof(id) * (size_t)a->old);
        RANK_CHECK(all, fail, "out of memory");
        NCCL_OK(ncclAllGather(&id, all, sizeof(id), ncclUint8, parent, NULL), fail);
        for (int r = 0; r < a->old; r++)
            RANK_CHECK(!memcmp(&all[r], &id, sizeof(id)), fail, "rank %d's grow id differs", r);
        free(all);
        if (rank == 0) {
            for (int k = 0; k < a->add; k++)
                RANK_CHECK(write(a->pipe_fd[1], &id, sizeof(id)) == (ssize_t)sizeof(id), fail,
                           "pipe");
        }
        close(a->pipe_fd[1]);
        NCCL_OK(ncclCommGrow(parent, n, rank == 0 ? &id : NULL, -1, &grown, NULL), fail);
    }
    if (check_shape(grown, rank, n, "grown") || check_sum(grown, rank, n, "grown"))
        return 1;
    if (parent) {
        if (check_sum(parent, rank, a->old, "parent after the grow"))
            return 1;
        /* The id was for that grow: the parent's next one differs, and the
         * grown communicator refuses it. */
        ncclUniqueId next;
        NCCL_OK(ncclCommGetUniqueId(parent, &next), fail);
        RANK_CHECK(memcmp(&next, &id, sizeof(id)), fail, "the next grow id is the used one");
        NCCL_OK(ncclCommDestroy(parent), fail);
    }
    ncclComm_t again = NULL;
    ncclResult_t r = ncclCommGrow(grown, n + 1, &id, -1, &again, NULL);
    RANK_CHECK(r == ncclInvalidArgument && again == NULL, fail,
               "another communicator's id: %s", ncclGetErrorString(r));
    NCCL_OK(ncclCommDestroy(grown), fail);
    return 0;
fail:
    return 1;
}

/* The door reads its settings once a process, and this one has (its
 * ncclGetUniqueId), so every case runs on one transport: shared memory.
 * test_grow.c runs the core's grow on tcp too. */
static void run_grow(const char *transport)
{
    harness_use_transport(transport, 4096);
    for (int old = 1; old <= 4; old++) {
        for (int add = 1; add <= 2; add++) {
            if (harness_quick() && old != 2)
                continue;
            grow_arg_t a = {.old = old, .add = add};
            assert_int_equal(pipe(a.pipe_fd), 0);
            assert_int_equal(ncclGetUniqueId(&a.parent_id), ncclSuccess);
            int rc = harness_run_ranks(old + add, rank_grow, &a, RUN_TIMEOUT_S);
            close(a.pipe_fd[0]);
            close(a.pipe_fd[1]);
            assert_int_equal(rc, 0);
        }
    }
}

static void test_grow_shm(void **state)
{
    (void)state;
    run_grow("shm");
}

static void test_version(void **state)
{
    (void)state;
    int v = 0;
    assert_int_equal(ncclGetVersion(&v), ncclSuccess);
    assert_int_equal(v, 23007);
    assert_string_not_equal(ncclGetErrorString(ncclTimeout),
                            ncclGetErrorString((ncclResult_t)99));
}

static int rank_win(int rank, int n, const shoal_unique_id_t *unused, void *varg)
{
    (void)unused;
    ncclUniqueId id = *(const ncclUniqueId *)varg;
    ncclComm_t comm;
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank), fail);
    size_t bytes = 2 * 4096;
    void *buf[2];
    ncclWindow_t win[2];
    for (int k = 0; k < 2; k++) {
        NCCL_OK(ncclMemAlloc(&buf[k], bytes), fail);
        NCCL_OK(ncclCommWindowRegister(comm, buf[k], bytes, &win[k],
                                       k ? NCCL_WIN_STRICT_ORDERING : NCCL_WIN_DEFAULT),
                fail);
    }
    for (int k = 0; k < 2; k++) {
        void *p = NULL;
        NCCL_OK(ncclWinGetUserPtr(comm, win[k], &p), fail);
        RANK_CHECK(p == buf[k], fail, "window %d: user pointer %p, registered %p", k, p,
                   buf[k]);
    }
    void *p = NULL;
    ncclResult_t r = ncclWinGetUserPtr(comm, (ncclWindow_t)(void *)&p, &p);
    RANK_CHECK(r == ncclInvalidArgument && strstr(ncclGetLastError(comm), "window"), fail,
               "a foreign window: %s", ncclGetErrorString(r));
    r = ncclWinGetUserPtr(comm, win[0], NULL);
    RANK_CHECK(r == ncclInvalidArgument, fail, "NULL outUserPtr: %s", ncclGetErrorString(r));
    for (int k = 0; k < 2; k++) {
        NCCL_OK(ncclCommWindowDeregister(comm, win[k]), fail);
        NCCL_OK(ncclMemFree(buf[k]), fail);
    }
    r = ncclWinGetUserPtr(comm, win[0], &p);
    RANK_CHECK(r == ncclInvalidArgument, fail, "a deregistered window: %s",
               ncclGetErrorString(r));
    NCCL_OK(ncclCommDestroy(comm), fail);
    return 0;
fail:
    return 1;
}

static int rank_suspend(int rank, int n, const shoal_unique_id_t *unused, void *varg)
{
    (void)unused;
    ncclUniqueId id = *(const ncclUniqueId *)varg;
    ncclComm_t comm;
    uint64_t v = 99;
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank), fail);
    for (int mem = 0; mem < 2; mem++) {
        if (check_sum(comm, rank, n, "before the suspend"))
            return 1;
        NCCL_OK(ncclCommSuspend(comm, mem ? NCCL_SUSPEND_MEM : 0), fail);
        NCCL_OK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), fail);
        RANK_CHECK(v == 1, fail, "suspended: %llu", (unsigned long long)v);
        int32_t x = 1;
        ncclResult_t r = ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL);
        RANK_CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(comm), "suspended"), fail,
                   "a call while suspended: %s", ncclGetErrorString(r));
        NCCL_OK(ncclCommResume(comm), fail);
        NCCL_OK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), fail);
        RANK_CHECK(v == 0, fail, "resumed: %llu", (unsigned long long)v);
        if (check_sum(comm, rank, n, "after the resume"))
            return 1;
    }
    static const ncclCommMemStat_t stats[] = {ncclStatGpuMemSuspend, ncclStatGpuMemPersist,
                                              ncclStatGpuMemTotal};
    for (int k = 0; k < 3; k++) {
        NCCL_OK(ncclCommMemStats(comm, stats[k], &v), fail);
        RANK_CHECK(v == 0, fail, "stat %d: %llu bytes of device memory on a host comm",
                   (int)stats[k], (unsigned long long)v);
    }
    RANK_CHECK(ncclCommResume(comm) == ncclInvalidUsage, fail, "resume, not suspended");
    RANK_CHECK(ncclCommSuspend(comm, 4) == ncclInvalidArgument, fail, "flags 4");
    RANK_CHECK(ncclCommMemStats(comm, (ncclCommMemStat_t)9, &v) == ncclInvalidArgument, fail,
               "stat 9");
    RANK_CHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, NULL) == ncclInvalidArgument, fail,
               "NULL value");
    /* Destroy works while suspended. */
    NCCL_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), fail);
    NCCL_OK(ncclCommDestroy(comm), fail);
    return 0;
fail:
    return 1;
}

static void test_suspend(void **state)
{
    (void)state;
    harness_use_transport("shm", 4096);
    ncclUniqueId id;
    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
    assert_int_equal(harness_run_ranks(3, rank_suspend, &id, RUN_TIMEOUT_S), 0);
}

static void test_win_user_ptr(void **state)
{
    (void)state;
    harness_use_transport("shm", 4096);
    ncclUniqueId id;
    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
    assert_int_equal(harness_run_ranks(2, rank_win, &id, RUN_TIMEOUT_S), 0);
}

#define RMA_COUNT 1001
#define RMA_BYTES (RMA_COUNT * sizeof(float))

static float rma_value(int src, int dst, size_t i)
{
    return (float)(src * 100000 + dst * 10000) + (float)i;
}

/* Every rank puts a block of floats into every rank's window (its own
 * included) from its symmetric source window, waits for every rank's
 * signal, and finds each block; then signals alone, a put and wait in a
 * group around a ring (then simulated: estimated, not run), and NCCL's
 * argument checks. */
static int rank_rma(int rank, int n, const shoal_unique_id_t *unused, void *varg)
{
    (void)unused;
    ncclUniqueId id = *(const ncclUniqueId *)varg;
    ncclComm_t comm;
    float *dst = NULL, *src = malloc((size_t)n * RMA_BYTES), *plain = malloc(RMA_BYTES);
    ncclWindow_t dwin, swin;
    ncclWaitSignalDesc_t d[8];
    RANK_CHECK(src && plain, fail, "out of memory");
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank), fail);
    NCCL_OK(ncclMemAlloc((void **)&dst, (size_t)n * RMA_BYTES), fail);
    NCCL_OK(ncclCommWindowRegister(comm, dst, (size_t)n * RMA_BYTES, &dwin,
                                   NCCL_WIN_COLL_SYMMETRIC), fail);
    NCCL_OK(ncclCommWindowRegister(comm, src, (size_t)n * RMA_BYTES, &swin,
                                   NCCL_WIN_COLL_SYMMETRIC), fail);
    for (int q = 0; q < n; q++) {
        for (size_t i = 0; i < RMA_COUNT; i++)
            src[(size_t)q * RMA_COUNT + i] = rma_value(rank, q, i);
        NCCL_OK(ncclPutSignal(src + (size_t)q * RMA_COUNT, RMA_COUNT, ncclFloat32, q, dwin,
                              (size_t)rank * RMA_BYTES, 0, 0, 0, comm, NULL), fail);
        d[q] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = q};
    }
    NCCL_OK(ncclWaitSignal(n, d, comm, NULL), fail);
    for (int q = 0; q < n; q++) {
        for (size_t i = 0; i < RMA_COUNT; i++)
            RANK_CHECK(dst[(size_t)q * RMA_COUNT + i] == rma_value(q, rank, i), fail,
                       "rank %d's value %zu is %g", q, i, dst[(size_t)q * RMA_COUNT + i]);
    }
    /* Two signals alone from every rank, waited for as one count each. */
    for (int q = 0; q < n; q++) {
        NCCL_OK(ncclSignal(q, 0, 0, 0, comm, NULL), fail);
        NCCL_OK(ncclSignal(q, 0, 0, 0, comm, NULL), fail);
        d[q].opCnt = 2;
    }
    NCCL_OK(ncclWaitSignal(n, d, comm, NULL), fail);
    /* A ring in a group: put to the next, wait for the previous. */
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    ncclWaitSignalDesc_t w = {.opCnt = 1, .peer = prev};
    src[0] = (float)(7 * rank);
    NCCL_OK(ncclGroupStart(), fail);
    NCCL_OK(ncclPutSignal(src, 1, ncclFloat32, next, dwin, 0, 0, 0, 0, comm, NULL), fail);
    NCCL_OK(ncclWaitSignal(1, &w, comm, NULL), fail);
    NCCL_OK(ncclGroupEnd(), fail);
    RANK_CHECK(dst[0] == (float)(7 * prev), fail, "the ring's value is %g", dst[0]);
    /* The same group simulated: an estimate that grows with the put's
     * bytes, and nothing moves. */
    double est[2];
    src[0] = -1.0f;
    for (int k = 0; k < 2; k++) {
        ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
        NCCL_OK(ncclGroupStart(), fail);
        NCCL_OK(ncclPutSignal(src, k ? RMA_COUNT : 1, ncclFloat32, next, dwin, 0, 0, 0, 0, comm,
                              NULL), fail);
        NCCL_OK(ncclWaitSignal(1, &w, comm, NULL), fail);
        NCCL_OK(ncclGroupSimulateEnd(&sim), fail);
        est[k] = sim.estimatedTime;
    }
    RANK_CHECK(est[0] > 0 && est[1] > est[0], fail, "simulated puts of 4 and %zu bytes: %g s "
               "and %g s", RMA_BYTES, est[0], est[1]);
    if (check_sum(comm, rank, n, "after the simulated one-sided calls"))
        return 1;
    RANK_CHECK(dst[0] == (float)(7 * prev), fail, "a simulated put landed: %g", dst[0]);

    /* NCCL's checks, each with its reason; the communicator stays usable. */
    static const char *const words[] = {
        "signal index", "context", "flags", "peerWin", "localbuff", "NCCL_WIN_COLL_SYMMETRIC",
        "pass the end", "outside", "signal index", "invalid arguments", "invalid arguments",
        "opCnt", "context"};
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
        ncclWaitSignalDesc_t bad = {.opCnt = k == 11 ? 0 : 1, .peer = prev, .ctx = k == 12};
        size_t end = (size_t)n * RMA_BYTES - 4;
        ncclResult_t r =
            k < 3   ? ncclPutSignal(src, 1, ncclFloat32, next, dwin, 0, k == 0, k == 1,
                                    k == 2, comm, NULL)
            : k == 3 ? ncclPutSignal(src, 1, ncclFloat32, next, NULL, 0, 0, 0, 0, comm, NULL)
            : k == 4 ? ncclPutSignal(NULL, 1, ncclFloat32, next, dwin, 0, 0, 0, 0, comm, NULL)
            : k == 5 ? ncclPutSignal(plain, 1, ncclFloat32, next, dwin, 0, 0, 0, 0, comm, NULL)
            : k == 6 ? ncclPutSignal(src, 2, ncclFloat32, next, dwin, end, 0, 0, 0, comm, NULL)
            : k == 7 ? ncclPutSignal(src, 1, ncclFloat32, n, dwin, 0, 0, 0, 0, comm, NULL)
            : k == 8 ? ncclSignal(next, 1, 0, 0, comm, NULL)
            : k == 9 ? ncclWaitSignal(0, d, comm, NULL)
            : k == 10 ? ncclWaitSignal(1, NULL, comm, NULL)
                      : ncclWaitSignal(1, &bad, comm, NULL);
        RANK_CHECK(r == ncclInvalidArgument && strstr(ncclGetLastError(comm), words[k]), fail,
                   "bad call %zu: %s: %s", k, ncclGetErrorString(r), ncclGetLastError(comm));
    }
    if (check_sum(comm, rank, n, "after the one-sided calls"))
        return 1;
    NCCL_OK(ncclCommWindowDeregister(comm, dwin), fail);
    NCCL_OK(ncclCommWindowDeregister(comm, swin), fail);
    NCCL_OK(ncclMemFree(dst), fail);
    free(src);
    free(plain);
    NCCL_OK(ncclCommDestroy(comm), fail);
    return 0;
fail:
    return 1;
}

/* Rank 1 waits for a signal rank 0 never sends: ncclTimeout at the
 * deadline, naming rank 0. */
static int rank_rma_timeout(int rank, int n, const shoal_unique_id_t *unused, void *varg)
{
    (void)unused;
    ncclUniqueId id = *(const ncclUniqueId *)varg;
    ncclComm_t comm;
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank), fail);
    if (rank == 1) {
        ncclWaitSignalDesc_t w = {.opCnt = 1, .peer = 0};
        ncclResult_t r = ncclWaitSignal(1, &w, comm, NULL);
        RANK_CHECK(r == ncclTimeout, fail, "an unsatisfied wait: %s", ncclGetErrorString(r));
        RANK_CHECK(strstr(ncclGetLastError(comm), "from rank 0"), fail,
                   "the error does not name rank 0: %s", ncclGetLastError(comm));
    } else {
        sleep(4);
    }
    ncclCommAbort(comm);
    return 0;
fail:
    return 1;
}

/* The door reads its settings once a process, and this one has: a case
 * that needs others (tcp only, a short deadline) runs each rank in a fresh
 * image of this program, told its part by SHOAL_TEST_RMA ("<case> <rank>
 * <n> <file>"; main runs it). Rank 0 makes the id there (the bootstrap's
 * listener is its own) and hands it over through the file. */
typedef struct {
    int timeout; /* rank_rma_timeout, else rank_rma */
    const char *shm;
    char file[64];
} rma_exec_t;

static int rank_exec(int rank, int n, const shoal_unique_id_t *unused, void *varg)
{
    (void)unused;
    const rma_exec_t *a = varg;
    char text[128];
    snprintf(text, sizeof(text), "%d %d %d %s", a->timeout, rank, n, a->file);
    setenv("SHOAL_TEST_RMA", text, 1);
    setenv("SHOAL_SHM_ENABLE", a->shm, 1);
    setenv("SHOAL_TIMEOUT", a->timeout ? "2s" : "20s", 1);
    char self[4096];
    ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
    RANK_CHECK(k > 0, fail, "readlink /proc/self/exe");
    self[k] = '\0';
    execl(self, self, (char *)NULL);
    RANK_CHECK(0, fail, "exec %s", self);
fail:
    return 1;
}

/* main's side of rank_exec: the rank's exit status. */
static int run_exec_rank(const char *text)
{
    int timeout, rank, n;
    char file[64], tmp[80];
    ncclUniqueId id;
    if (sscanf(text, "%d %d %d %63s", &timeout, &rank, &n, file) != 4)
        return 2;
    if (rank == 0) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", file);
        FILE *f = fopen(tmp, "w");
        if (ncclGetUniqueId(&id) != ncclSuccess || !f || fwrite(&id, sizeof(id), 1, f) != 1 ||
            fclose(f) != 0 || rename(tmp, file) != 0)
            return 2;
    } else {
        FILE *f = NULL;
        for (int t = 0; t < 3000 && !(f = fopen(file, "r")); t++)
            usleep(10000);
        if (!f || fread(&id, sizeof(id), 1, f) != 1)
            return 2;
        fclose(f);
    }
    int rc = timeout ? rank_rma_timeout(rank, n, NULL, &id) : rank_rma(rank, n, NULL, &id);
    if (rank == 0)
        unlink(file);
    return rc;
}

static void test_one_sided(void **state)
{
    (void)state;
    for (int n = 1; n <= 3; n += 2) {
        harness_use_transport("shm", 4096);
        ncclUniqueId id;
        assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
        assert_int_equal(harness_run_ranks(n, rank_rma, &id, RUN_TIMEOUT_S), 0);
    }
    for (int timeout = 0; timeout < 2; timeout++) {
        rma_exec_t a = {.timeout = timeout, .shm = timeout ? "y" : "n"};
        snprintf(a.file, sizeof(a.file), "/tmp/shoal_test_rma.%d.%d", (int)getpid(), timeout);
        unlink(a.file);
        assert_int_equal(harness_run_ranks(2, rank_exec, &a, RUN_TIMEOUT_S), 0);
    }
}

static void test_params(void **state)
{
    (void)state;
    ncclParamHandle_t h, h2;
    const char *text;
    int32_t i32;
    uint64_t u64;
    uint16_t u16;
    int8_t i8;
    assert_int_equal(ncclParamBind(&h, "SHOAL_CHUNK_SIZE"), ncclSuccess);
    assert_int_equal(ncclParamGetU64(h, &u64), ncclSuccess);
    assert_int_equal(u64, 4 << 20);
    assert_int_equal(ncclParamGetI32(h, &i32), ncclSuccess);
    assert_int_equal(i32, 4 << 20);
    assert_int_equal(ncclParamGetU16(h, &u16), ncclInvalidArgument);
    assert_non_null(strstr(ncclGetLastError(NULL), "does not fit"));
    assert_int_equal(ncclParamGetStr(h, &text), ncclSuccess);
    assert_string_equal(text, "4M");
    char raw[16];
    int len = 0;
    assert_int_equal(ncclParamGet(h, raw, sizeof(raw), &len), ncclSuccess);
    assert_int_equal(len, sizeof(size_t));
    size_t z;
    memcpy(&z, raw, sizeof(z));
    assert_int_equal(z, 4 << 20);
    assert_int_equal(ncclParamGet(h, raw, 4, &len), ncclInvalidArgument);
    assert_int_equal(len, sizeof(size_t));

    /* A time: nanoseconds. */
    assert_int_equal(ncclParamBind(&h, "SHOAL_TIMEOUT"), ncclSuccess);
    assert_int_equal(ncclParamGetU64(h, &u64), ncclSuccess);
    assert_true(u64 == 90ull * 1000000000ull);
    assert_int_equal(ncclParamGetI32(h, &i32), ncclInvalidArgument);

    /* A setting and its NCCL alias: one handle, one value. */
    assert_int_equal(ncclParamBind(&h, "SHOAL_DEBUG"), ncclSuccess);
    assert_int_equal(ncclParamBind(&h2, "NCCL_DEBUG"), ncclSuccess);
    assert_ptr_equal(h, h2);
    assert_int_equal(ncclParamGetStr(h, &text), ncclSuccess);
    const char *value;
    int vlen = 0;
    assert_int_equal(ncclParamGetParameter("NCCL_DEBUG", &value, &vlen), ncclSuccess);
    assert_string_equal(value, text);
    assert_int_equal(vlen, (int)strlen(text));
    assert_int_equal(ncclParamGetI8(h, &i8), ncclSuccess);
    assert_true(i8 > 0);

    /* Text that is no number: refused, readable as a string. */
    assert_int_equal(ncclParamBind(&h, "NCCL_ALGO"), ncclSuccess);
    assert_int_equal(ncclParamGetI32(h, &i32), ncclInvalidArgument);
    assert_non_null(strstr(ncclGetLastError(NULL), "not a number"));
    assert_int_equal(ncclParamGetStr(h, &text), ncclSuccess);
    assert_string_equal(text, "auto");
    assert_int_equal(ncclParamGet(h, raw, sizeof(raw), &len), ncclSuccess);
    assert_int_equal(len, 5);
    assert_string_equal(raw, "auto");

    const char **keys;
    int nkeys = 0, found = 0;
    assert_int_equal(ncclParamGetAllParameterKeys(&keys, &nkeys), ncclSuccess);
    assert_true(nkeys > 20);
    for (int k = 0; k < nkeys; k++)
        found += !strcmp(keys[k], "SHOAL_TIMEOUT") + !strcmp(keys[k], "NCCL_DEBUG");
    assert_int_equal(found, 2);
    assert_null(keys[nkeys]);
    ncclParamDumpAll();

    assert_int_equal(ncclParamBind(&h, "NCCL_NO_SUCH_THING"), ncclInvalidArgument);
    assert_non_null(strstr(ncclGetLastError(NULL), "NCCL_NO_SUCH_THING"));
    assert_int_equal(ncclParamGetI32((ncclParamHandle_t)(void *)&h, &i32), ncclInvalidArgument);
    assert_int_equal(ncclParamGetParameter("SHOAL_NOPE", &value, &vlen), ncclInvalidArgument);
}

int main(void)
{
    if (getenv("SHOAL_TEST_RMA"))
        return run_exec_rank(getenv("SHOAL_TEST_RMA"));
    /* Before the library reads its settings (once a process). */
    setenv("SHOAL_CHUNK_SIZE", "4M", 1);
    setenv("SHOAL_TIMEOUT", "90s", 1);
    setenv("NCCL_DEBUG", "WARN", 1);
    unsetenv("SHOAL_DEBUG");
    unsetenv("SHOAL_ALGO");
    unsetenv("NCCL_ALGO");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_grow_shm),
        cmocka_unit_test(test_win_user_ptr),
        cmocka_unit_test(test_suspend),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_one_sided),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
