/* The rest of the vendor header on one rank of a forked job: every way to
 * create a communicator, queries, pre-multiply-sum scalars, groups and
 * their simulation, split and shrink, registration and windows, memory,
 * non-blocking communicators, bad input, revoke, finalize, abort. */
#include "vendor.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

bool vt_probe_allreduce(ncclComm_t comm, int rank, int nranks, const char *what, uint32_t tag)
{
    enum { N = 5 };
    int32_t send[N], recv[N + VT_GUARD / 4];
    memset(recv, VT_SENTINEL, sizeof(recv));
    vt_fill_input(send, ncclInt32, ncclSum, rank, nranks, 0, N, tag);
    char text[160];
    snprintf(text, sizeof(text), "%s: probe ncclAllReduce", what);
    if (!vt_rc(text, ncclAllReduce(send, recv, N, ncclInt32, ncclSum, comm, VT_STREAM),
               ncclSuccess))
        return false;
    return vt_check_reduced(text, recv, ncclInt32, ncclSum, nranks, 0, N, tag) &&
           vt_check_sentinel(text, recv, N * 4, sizeof(recv));
}

/* Count, user rank, no CUDA device, healthy async state. */
static void query(ncclComm_t comm, int rank, int nranks, const char *what)
{
    char text[160];
    int v = -1;
    snprintf(text, sizeof(text), "%s: ncclCommCount", what);
    if (vt_rc(text, ncclCommCount(comm, &v), ncclSuccess) && v != nranks)
        vt_fail("%s: got %d expected %d", text, v, nranks);
    v = -1;
    snprintf(text, sizeof(text), "%s: ncclCommUserRank", what);
    if (vt_rc(text, ncclCommUserRank(comm, &v), ncclSuccess) && v != rank)
        vt_fail("%s: got %d expected %d", text, v, rank);
    snprintf(text, sizeof(text), "%s: ncclCommCuDevice", what);
    if (vt_rc(text, ncclCommCuDevice(comm, &v), ncclInvalidUsage)) {
        const char *why = ncclGetLastError(comm);
        if (!why || !*why)
            vt_fail("%s: ncclGetLastError after it: got \"%s\" expected a reason", text,
                    why ? why : "(null)");
    }
    ncclResult_t state = ncclInternalError;
    snprintf(text, sizeof(text), "%s: ncclCommGetAsyncError", what);
    if (vt_rc(text, ncclCommGetAsyncError(comm, &state), ncclSuccess))
        vt_rc(text, state, ncclSuccess);
    if (!ncclGetLastError(comm))
        vt_fail("%s: ncclGetLastError returned NULL", what);
}

/* Query and probe a communicator made by one of the init calls. */
static void use(ncclComm_t comm, int rank, int nranks, const char *what, uint32_t tag)
{
    query(comm, rank, nranks, what);
    vt_probe_allreduce(comm, rank, nranks, what, tag);
}

static void destroy(ncclComm_t comm, const char *what)
{
    char text[160];
    snprintf(text, sizeof(text), "%s: ncclCommDestroy", what);
    vt_rc(text, ncclCommDestroy(comm), ncclSuccess);
}

/* ---- creating communicators ----------------------------------------------- */

static void bad_init_args(int nranks, const ncclUniqueId *id)
{
    ncclComm_t c = NULL;
    VT_RC(ncclCommInitRank(&c, 0, *id, 0), ncclInvalidArgument);
    VT_RC(ncclCommInitRank(&c, nranks, *id, nranks), ncclInvalidArgument);
    VT_RC(ncclCommInitRank(&c, nranks, *id, -1), ncclInvalidArgument);
}

/* A config from an older NCCL: size ends before commName, and the page
 * after it is inaccessible, so reading a field past size faults. */
static ncclConfig_t *old_config(void **map_p)
{
    const size_t size = offsetof(ncclConfig_t, commName);
    char *map = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED || mprotect(map + PAGE, PAGE, PROT_NONE) != 0) {
        vt_fail("mmap/mprotect for the old-size config failed");
        return NULL;
    }
    ncclConfig_t full = NCCL_CONFIG_INITIALIZER;
    full.size = size;
    full.version = 22700;
    ncclConfig_t *old = (ncclConfig_t *)(void *)(map + PAGE - size);
    memcpy(old, &full, size);
    *map_p = map;
    return old;
}

typedef struct {
    ncclComm_t config, old, scal1, scal2;
} extra_comms_t;

/* The config id first meets a config with a bad magic, which must be
 * refused before anything reaches the other ranks. */
static void init_variants(int rank, int n, const vt_ids_t *ids, extra_comms_t *x)
{
    *x = (extra_comms_t){NULL, NULL, NULL, NULL};
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.magic = 0xdeadbeef;
    ncclComm_t c = NULL;
    if (!VT_RC(ncclCommInitRankConfig(&c, n, ids->id[VT_ID_CONFIG], rank, &cfg),
               ncclInvalidArgument) &&
        c)
        ncclCommDestroy(c);

    ncclConfig_t good = NCCL_CONFIG_INITIALIZER;
    good.blocking = 1;
    good.commName = "vendor-test";
    if (VT_RC(ncclCommInitRankConfig(&x->config, n, ids->id[VT_ID_CONFIG], rank, &good),
              ncclSuccess))
        use(x->config, rank, n, "ncclCommInitRankConfig(NCCL_CONFIG_INITIALIZER)", 11);
    else
        x->config = NULL;

    void *map = NULL;
    ncclConfig_t *old = old_config(&map);
    if (old) {
        const char *what = "ncclCommInitRankConfig(older config: size up to commName, "
                           "version 22700)";
        if (vt_rc(what, ncclCommInitRankConfig(&x->old, n, ids->id[VT_ID_OLDCFG], rank, old),
                  ncclSuccess))
            use(x->old, rank, n, what, 12);
        else
            x->old = NULL;
        /* Gone before the communicator's next use: a copy is all it may keep. */
        munmap(map, 2 * PAGE);
        if (x->old)
            vt_probe_allreduce(x->old, rank, n, "older-config comm after its config is unmapped",
                               15);
    }

    ncclUniqueId one[1] = {ids->id[VT_ID_SCAL1]};
    if (VT_RC(ncclCommInitRankScalable(&x->scal1, n, rank, 1, one, NULL), ncclSuccess))
        use(x->scal1, rank, n, "ncclCommInitRankScalable(nId 1)", 13);
    else
        x->scal1 = NULL;

    /* Two ids need two ranks at least: NCCL allows one per rank. */
    x->scal2 = NULL;
    if (n >= 2) {
        ncclUniqueId two[2] = {ids->id[VT_ID_SCAL2A], ids->id[VT_ID_SCAL2B]};
        ncclConfig_t c2 = NCCL_CONFIG_INITIALIZER;
        if (VT_RC(ncclCommInitRankScalable(&x->scal2, n, rank, 2, two, &c2), ncclSuccess))
            use(x->scal2, rank, n, "ncclCommInitRankScalable(nId 2)", 14);
        else
            x->scal2 = NULL;
    }
}

/* ---- pre-multiply-sum scalars ---------------------------------------------- */

/* All-reduce count elements with op and check sum over ranks of w[r] * x_r,
 * x_r being rank r's sum-like reference input. */
static void premul_allreduce(ncclComm_t comm, int rank, int n, ncclDataType_t dt, ncclRedOp_t op,
                             const double *w, const char *what, uint32_t salt)
{
    enum { N = 33 };
    double send_d[N], recv_d[N + VT_GUARD / 8];
    memset(recv_d, VT_SENTINEL, sizeof(recv_d));
    vt_fill_input(send_d, dt, ncclSum, rank, n, 0, N, salt);
    if (!vt_rc(what, ncclAllReduce(send_d, recv_d, N, dt, op, comm, VT_STREAM), ncclSuccess))
        return;
    for (size_t k = 0; k < N; k++) {
        double want = 0;
        for (int r = 0; r < n; r++)
            want += w[r] * vt_input(dt, ncclSum, r, n, k, salt).f;
        vt_val_t got = vt_load(dt, recv_d, k);
        if (got.f != want) {
            vt_fail("%s: element %zu: got %.9g expected %.9g", what, k, got.f, want);
            return;
        }
    }
    vt_check_sentinel(what, recv_d, N * vt_size(dt), N * vt_size(dt) + VT_GUARD);
}

static void premul_scalars(ncclComm_t comm, int rank, int n)
{
    double w[8];
    ncclRedOp_t op;

    /* Host immediate: the value at creation counts, later writes do not. */
    float s = (float)(rank + 1);
    if (VT_RC(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, ncclScalarHostImmediate, comm),
              ncclSuccess)) {
        s = 100;
        for (int r = 0; r < n; r++)
            w[r] = r + 1;
        premul_allreduce(comm, rank, n, ncclFloat32, op, w,
                         "ncclAllReduce float32 premulsum (host immediate, changed after creation)",
                         21);
        VT_RC(ncclRedOpDestroy(op, comm), ncclSuccess);
        VT_RC(ncclRedOpDestroy(op, comm), ncclInvalidArgument);
    }

    /* "Device" residence, here a host pointer: read when the collective
     * runs, so a new value between two calls shows in the second. */
    double d = 2;
    if (VT_RC(ncclRedOpCreatePreMulSum(&op, &d, ncclFloat64, ncclScalarDevice, comm),
              ncclSuccess)) {
        for (int r = 0; r < n; r++)
            w[r] = 2;
        premul_allreduce(comm, rank, n, ncclFloat64, op, w,
                         "ncclAllReduce float64 premulsum (ncclScalarDevice = 2)", 22);
        d = rank % 2 ? 3 : -1.5;
        for (int r = 0; r < n; r++)
            w[r] = r % 2 ? 3 : -1.5;
        premul_allreduce(comm, rank, n, ncclFloat64, op, w,
                         "ncclAllReduce float64 premulsum (ncclScalarDevice changed to 3 / -1.5)",
                         23);
        VT_RC(ncclRedOpDestroy(op, comm), ncclSuccess);
        VT_RC(ncclRedOpDestroy(op, comm), ncclInvalidArgument);
    }
}

/* ---- groups ---------------------------------------------------------------- */

static void group_of_many(ncclComm_t comm, int rank, int n)
{
    const char *what = "one group: all-reduce, broadcast, all-gather, reduce-scatter, send/recv";
    const size_t ar = 1031, bc = 257, ag = 100, rs = 33, p2p = 64;
    uint32_t salt = 31;
    char *ar_s = vt_alloc(ar * 4), *ar_r = vt_alloc(ar * 4);
    char *bc_b = vt_alloc(bc * 4);
    char *ag_s = vt_alloc(ag), *ag_r = vt_alloc(ag * (size_t)n);
    char *rs_s = vt_alloc(rs * 8 * (size_t)n), *rs_r = vt_alloc(rs * 8);
    char *pp_s = vt_alloc(p2p * 2), *pp_r = vt_alloc(p2p * 2);
    vt_fill_input(ar_s, ncclFloat32, ncclSum, rank, n, 0, ar, salt);
    if (rank == n - 1)
        vt_fill_bytes(bc_b, 0, bc * 4, rank, salt);
    vt_fill_bytes(ag_s, 0, ag, rank, salt);
    vt_fill_input(rs_s, ncclInt64, ncclMax, rank, n, 0, rs * (size_t)n, salt);
    vt_fill_bytes(pp_s, 0, p2p * 2, rank, salt + 1);
    bool ok = VT_RC(ncclGroupStart(), ncclSuccess);
    ok &= VT_RC(ncclAllReduce(ar_s, ar_r, ar, ncclFloat32, ncclSum, comm, VT_STREAM), ncclSuccess);
    ok &= VT_RC(ncclBroadcast(bc_b, bc_b, bc, ncclInt32, n - 1, comm, VT_STREAM), ncclSuccess);
    ok &= VT_RC(ncclAllGather(ag_s, ag_r, ag, ncclUint8, comm, VT_STREAM), ncclSuccess);
    ok &= VT_RC(ncclReduceScatter(rs_s, rs_r, rs, ncclInt64, ncclMax, comm, VT_STREAM),
                ncclSuccess);
    ok &= VT_RC(ncclSend(pp_s, p2p, ncclBfloat16, (rank + 1) % n, comm, VT_STREAM), ncclSuccess);
    ok &= VT_RC(ncclRecv(pp_r, p2p, ncclBfloat16, (rank + n - 1) % n, comm, VT_STREAM),
                ncclSuccess);
    ok &= VT_RC(ncclGroupEnd(), ncclSuccess);
    if (ok) {
        char text[160];
        snprintf(text, sizeof(text), "%s: all-reduce", what);
        vt_check_reduced(text, ar_r, ncclFloat32, ncclSum, n, 0, ar, salt);
        snprintf(text, sizeof(text), "%s: broadcast", what);
        vt_check_bytes(text, bc_b, ncclInt32, 0, bc * 4, n - 1, salt);
        for (int j = 0; j < n; j++) {
            snprintf(text, sizeof(text), "%s: all-gather block %d", what, j);
            vt_check_bytes(text, ag_r + (size_t)j * ag, ncclUint8, 0, ag, j, salt);
        }
        snprintf(text, sizeof(text), "%s: reduce-scatter", what);
        vt_check_reduced(text, rs_r, ncclInt64, ncclMax, n, (size_t)rank * rs, rs, salt);
        snprintf(text, sizeof(text), "%s: recv", what);
        vt_check_bytes(text, pp_r, ncclBfloat16, 0, p2p * 2, (rank + n - 1) % n, salt + 1);
    }
    free(ar_s), free(ar_r), free(bc_b), free(ag_s), free(ag_r), free(rs_s), free(rs_r);
    free(pp_s), free(pp_r);
}

static void groups(ncclComm_t comm, int rank, int n)
{
    group_of_many(comm, rank, n);

    /* Nested: only the outermost ncclGroupEnd runs the operations. */
    enum { N = 9 };
    int32_t send[N], recv[N];
    vt_fill_input(send, ncclInt32, ncclSum, rank, n, 0, N, 41);
    memset(recv, VT_SENTINEL, sizeof(recv));
    bool ok = VT_RC(ncclGroupStart(), ncclSuccess);
    ok &= VT_RC(ncclGroupStart(), ncclSuccess);
    ok &= VT_RC(ncclAllReduce(send, recv, N, ncclInt32, ncclSum, comm, VT_STREAM), ncclSuccess);
    ok &= VT_RC(ncclGroupEnd(), ncclSuccess);
    vt_check_sentinel("nested group: receive buffer after the inner ncclGroupEnd", recv, 0,
                      sizeof(recv));
    ok &= VT_RC(ncclGroupEnd(), ncclSuccess);
    if (ok)
        vt_check_reduced("nested group: all-reduce after the outer ncclGroupEnd", recv, ncclInt32,
                         ncclSum, n, 0, N, 41);

    VT_RC(ncclGroupEnd(), ncclInvalidUsage);
    vt_probe_allreduce(comm, rank, n, "after ncclGroupEnd without ncclGroupStart", 42);

    /* Simulation: a time estimate, and nothing runs. */
    const size_t count = ((size_t)1 << 20) / 4;
    char *s = vt_alloc(count * 4), *r = vt_alloc(count * 4);
    vt_fill_input(s, ncclFloat32, ncclSum, rank, n, 0, count, 43);
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    if (VT_RC(ncclGroupStart(), ncclSuccess)) {
        VT_RC(ncclAllReduce(s, r, count, ncclFloat32, ncclSum, comm, VT_STREAM), ncclSuccess);
        if (VT_RC(ncclGroupSimulateEnd(&sim), ncclSuccess) && !(sim.estimatedTime > 0))
            vt_fail("ncclGroupSimulateEnd(all-reduce of 1 MiB): estimatedTime got %g expected > 0",
                    (double)sim.estimatedTime);
        vt_check_sentinel("ncclGroupSimulateEnd: receive buffer (nothing may run)", r, 0,
                          count * 4 + VT_GUARD);
    }
    free(s);
    free(r);
    vt_probe_allreduce(comm, rank, n, "after ncclGroupSimulateEnd", 44);
}

/* ---- bad input --------------------------------------------------------------- */

enum { BAD_N = 4 };

/* After one bad call: the expected code, the receive buffer untouched (and
 * set again for the next call), and the communicator still working. */
static void after_bad(ncclComm_t comm, int rank, int n, const char *what, ncclResult_t got,
                      int32_t *recv, size_t recv_len)
{
    vt_rc(what, got, ncclInvalidArgument);
    vt_check_sentinel(what, recv, 0, recv_len);
    memset(recv, VT_SENTINEL, recv_len);
    vt_probe_allreduce(comm, rank, n, what, 50);
}

static void bad_input(ncclComm_t comm, int rank, int n)
{
    int32_t send[BAD_N] = {1, 2, 3, 4}, recv[BAD_N];
    const size_t len = sizeof(recv);
    memset(recv, VT_SENTINEL, len);

    after_bad(comm, rank, n, "ncclAllReduce(comm NULL)",
              ncclAllReduce(send, recv, BAD_N, ncclInt32, ncclSum, NULL, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclAllReduce(dtype ncclNumTypes)",
              ncclAllReduce(send, recv, BAD_N, ncclNumTypes, ncclSum, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclAllReduce(op 99, never created)",
              ncclAllReduce(send, recv, BAD_N, ncclInt32, (ncclRedOp_t)99, comm, VT_STREAM), recv,
              len);
    after_bad(comm, rank, n, "ncclBroadcast(root nranks)",
              ncclBroadcast(send, recv, BAD_N, ncclInt32, n, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclBcast(root nranks)",
              ncclBcast(recv, BAD_N, ncclInt32, n, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclReduce(root -1)",
              ncclReduce(send, recv, BAD_N, ncclInt32, ncclSum, -1, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclGather(root nranks)",
              ncclGather(send, recv, 1, ncclInt32, n, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclScatter(root nranks)",
              ncclScatter(send, recv, 1, ncclInt32, n, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclAllReduce(sendbuff NULL, count 4)",
              ncclAllReduce(NULL, recv, BAD_N, ncclInt32, ncclSum, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclAllReduce(recvbuff NULL, count 4)",
              ncclAllReduce(send, NULL, BAD_N, ncclInt32, ncclSum, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclSend(peer nranks)",
              ncclSend(send, BAD_N, ncclInt32, n, comm, VT_STREAM), recv, len);
    after_bad(comm, rank, n, "ncclRecv(peer -1)",
              ncclRecv(recv, BAD_N, ncclInt32, -1, comm, VT_STREAM), recv, len);

    /* A pointer the host cannot touch, as device memory looks from the host:
     * refused with a reason, never dereferenced. */
    char *noaccess = mmap(NULL, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (noaccess == MAP_FAILED) {
        vt_fail("mmap(PROT_NONE) failed");
        return;
    }
    const char *what = "ncclAllReduce(sendbuff in a PROT_NONE page)";
    ncclResult_t rc = ncclAllReduce(noaccess, recv, BAD_N, ncclInt32, ncclSum, comm, VT_STREAM);
    const char *why = ncclGetLastError(comm);
    if (rc == ncclInvalidArgument && (!why || !*why))
        vt_fail("%s: ncclGetLastError(comm): got \"%s\" expected a reason", what,
                why ? why : "(null)");
    after_bad(comm, rank, n, what, rc, recv, len);
    after_bad(comm, rank, n, "ncclAllReduce(recvbuff in a PROT_NONE page)",
              ncclAllReduce(send, noaccess, BAD_N, ncclInt32, ncclSum, comm, VT_STREAM), recv,
              len);

    /* The same page made accessible is host memory like any other: malloc
     * arenas and sanitizer heaps reserve address space without rights and
     * grant them as they grow, so an earlier refusal must not stick. */
    if (mprotect(noaccess, PAGE, PROT_READ | PROT_WRITE) != 0) {
        vt_fail("mprotect(PROT_READ | PROT_WRITE) failed");
    } else {
        int32_t *in = (int32_t *)(void *)noaccess, *out = in + PAGE / 8;
        vt_fill_input(in, ncclInt32, ncclSum, rank, n, 0, BAD_N, 51);
        memset(out, VT_SENTINEL, BAD_N * 4 + VT_GUARD);
        what = "ncclAllReduce on a page that was PROT_NONE at an earlier call";
        if (vt_rc(what, ncclAllReduce(in, out, BAD_N, ncclInt32, ncclSum, comm, VT_STREAM),
                  ncclSuccess))
            vt_check_reduced(what, out, ncclInt32, ncclSum, n, 0, BAD_N, 51);
    }
    munmap(noaccess, PAGE);
}

/* ---- memory from another thread ---------------------------------------------- */

typedef struct {
    void *buf[6];
    size_t len;
    int nbuf;
} thread_bufs_t;

static void *alloc_in_thread(void *arg)
{
    thread_bufs_t *b = arg;
    for (int i = 0; i < b->nbuf; i++)
        b->buf[i] = malloc(b->len);
    return NULL;
}

static bool run_alloc_thread(thread_bufs_t *b)
{
    pthread_t t;
    if (pthread_create(&t, NULL, alloc_in_thread, b) != 0 || pthread_join(t, NULL) != 0) {
        vt_fail("pthread_create/join failed");
        return false;
    }
    return true;
}

/* A thread's malloc arena reserves address space without rights and grants
 * them as it grows: memory a collective saw as inaccessible before may be a
 * buffer now. The first thread makes the arena, a collective runs, a second
 * thread (which glibc hands the same arena) allocates the buffers. */
static void thread_buffers(ncclComm_t comm, int rank, int n)
{
    thread_bufs_t first = {.len = 1000, .nbuf = 1};
    if (!run_alloc_thread(&first))
        return;
    /* On a fresh mapping, so that a library keeping a copy of the address
     * space's map has to look again now, while the arena is still small
     * (larger than any hole that earlier munmaps left, so at a new address). */
    const size_t fresh_len = 16 * PAGE;
    int32_t *fresh =
        mmap(NULL, fresh_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED) {
        vt_fail("mmap failed");
        return;
    }
    vt_fill_input(fresh, ncclInt32, ncclSum, rank, n, 0, 8, 55);
    const char *what = "ncclAllReduce on a fresh mapping";
    if (vt_rc(what, ncclAllReduce(fresh, fresh + 8, 8, ncclInt32, ncclSum, comm, VT_STREAM),
              ncclSuccess))
        vt_check_reduced(what, fresh + 8, ncclInt32, ncclSum, n, 0, 8, 55);
    munmap(fresh, fresh_len);
    thread_bufs_t b = {.len = 100000, .nbuf = 6};
    if (!run_alloc_thread(&b))
        return;
    const size_t count = b.len / 4;
    for (int i = 0; i < b.nbuf; i++) {
        char text[96];
        snprintf(text, sizeof(text), "ncclAllReduce in place on buffer %d malloc'd by a thread", i);
        if (!b.buf[i]) {
            vt_fail("%s: malloc failed", text);
            continue;
        }
        vt_fill_input(b.buf[i], ncclInt32, ncclSum, rank, n, 0, count, 56 + (uint32_t)i);
        if (vt_rc(text, ncclAllReduce(b.buf[i], b.buf[i], count, ncclInt32, ncclSum, comm,
                                      VT_STREAM),
                  ncclSuccess))
            vt_check_reduced(text, b.buf[i], ncclInt32, ncclSum, n, 0, count, 56 + (uint32_t)i);
        free(b.buf[i]);
    }
    free(first.buf[0]);
}

/* ---- registration, windows, memory -------------------------------------------- */

static void registration(ncclComm_t comm, int rank, int n)
{
    const size_t count = 16384, len = count * 4;
    char *send = vt_alloc(len), *buf = vt_alloc(len);
    vt_fill_input(send, ncclInt32, ncclSum, rank, n, 0, count, 61);
    void *handle = NULL;
    if (VT_RC(ncclCommRegister(comm, buf, len, &handle), ncclSuccess)) {
        if (!handle)
            vt_fail("ncclCommRegister: handle got NULL expected non-NULL");
        if (VT_RC(ncclAllReduce(send, buf, count, ncclInt32, ncclSum, comm, VT_STREAM),
                  ncclSuccess))
            vt_check_reduced("ncclAllReduce into a registered buffer", buf, ncclInt32, ncclSum, n,
                             0, count, 61);
        VT_RC(ncclCommDeregister(comm, handle), ncclSuccess);
    }
    int bogus = 0;
    VT_RC(ncclCommDeregister(comm, &bogus), ncclInvalidArgument);
    free(send);
    free(buf);

    /* Windows over ncclMemAlloc memory, both flavours, one collective
     * across them; registration is collective, so every rank takes part. */
    void *wsend = NULL, *wrecv = NULL;
    if (!VT_RC(ncclMemAlloc(&wsend, len), ncclSuccess) ||
        !VT_RC(ncclMemAlloc(&wrecv, len), ncclSuccess) || !wsend || !wrecv) {
        vt_fail("ncclMemAlloc for windows failed");
        return;
    }
    vt_fill_input(wsend, ncclInt32, ncclSum, rank, n, 0, count, 62);
    memset(wrecv, VT_SENTINEL, len);
    ncclWindow_t w1 = NULL, w2 = NULL;
    bool ok = VT_RC(ncclCommWindowRegister(comm, wsend, len, &w1, NCCL_WIN_DEFAULT), ncclSuccess);
    ok &= VT_RC(ncclCommWindowRegister(comm, wrecv, len, &w2, NCCL_WIN_COLL_SYMMETRIC),
                ncclSuccess);
    if (ok && (!w1 || !w2))
        vt_fail("ncclCommWindowRegister: window got NULL expected non-NULL");
    if (ok && VT_RC(ncclAllReduce(wsend, wrecv, count, ncclInt32, ncclSum, comm, VT_STREAM),
                    ncclSuccess))
        vt_check_reduced("ncclAllReduce between registered windows", wrecv, ncclInt32, ncclSum, n,
                         0, count, 62);
    if (w2)
        VT_RC(ncclCommWindowDeregister(comm, w2), ncclSuccess);
    if (w1)
        VT_RC(ncclCommWindowDeregister(comm, w1), ncclSuccess);
    VT_RC(ncclMemFree(wrecv), ncclSuccess);
    VT_RC(ncclMemFree(wsend), ncclSuccess);
}

static void memory(void)
{
    const size_t len = ((size_t)1 << 20) + 3;
    void *p = NULL;
    if (VT_RC(ncclMemAlloc(&p, len), ncclSuccess)) {
        if (!p) {
            vt_fail("ncclMemAlloc(1 MiB + 3): pointer got NULL expected host memory");
        } else {
            memset(p, 0x3c, len);
            const unsigned char *b = p;
            if (b[0] != 0x3c || b[len / 2] != 0x3c || b[len - 1] != 0x3c)
                vt_fail("ncclMemAlloc memory does not keep what is written");
            VT_RC(ncclMemFree(p), ncclSuccess);
        }
    }
    void *m = malloc(64);
    VT_RC(ncclMemFree(m), ncclInvalidArgument);
    free(m);
}

/* ---- split, shrink -------------------------------------------------------------- */

/* Colour by parity, the last rank (of two or more) out, key reversing the
 * order: the new ranks count down from the highest old rank. */
static void split_parity(ncclComm_t comm, int rank, int n)
{
    int out = n >= 2 ? n - 1 : -1;
    int color = rank == out ? NCCL_SPLIT_NOCOLOR : rank % 2;
    ncclComm_t sub = (ncclComm_t)&color; /* must be overwritten */
    if (!VT_RC(ncclCommSplit(comm, color, n - rank, &sub, NULL), ncclSuccess))
        return;
    if (color == NCCL_SPLIT_NOCOLOR) {
        if (sub)
            vt_fail("ncclCommSplit(NCCL_SPLIT_NOCOLOR): newcomm got %p expected NULL", (void *)sub);
        return;
    }
    if (!sub) {
        vt_fail("ncclCommSplit(color %d): newcomm got NULL", color);
        return;
    }
    int members[8], m = 0, newrank = 0;
    for (int r = n - 1; r >= 0; r--) {
        if (r != out && r % 2 == color) {
            if (r > rank)
                newrank++;
            members[m++] = r;
        }
    }
    query(sub, newrank, m, "ncclCommSplit comm");
    int32_t mine = rank, all[8 + VT_GUARD / 4];
    memset(all, VT_SENTINEL, sizeof(all));
    if (VT_RC(ncclAllGather(&mine, all, 1, ncclInt32, sub, VT_STREAM), ncclSuccess)) {
        for (int i = 0; i < m; i++)
            if (all[i] != members[i])
                vt_fail("ncclCommSplit comm: all-gather of old ranks: element %d got %d "
                        "expected %d",
                        i, all[i], members[i]);
    }
    vt_probe_allreduce(sub, newrank, m, "ncclCommSplit comm", 70);
    destroy(sub, "ncclCommSplit comm");
}

static void split(ncclComm_t comm, int rank, int n)
{
    split_parity(comm, rank, n);

    /* A config for the new communicator, everyone in one colour. */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclComm_t sub = NULL;
    if (VT_RC(ncclCommSplit(comm, 7, rank, &sub, &cfg), ncclSuccess)) {
        use(sub, rank, n, "ncclCommSplit(config) comm", 71);
        destroy(sub, "ncclCommSplit(config) comm");
    }
}

/* The last rank leaves by not calling ncclCommShrink. */
static void shrink_default(int rank, int n, const ncclUniqueId *id)
{
    if (n < 2)
        return;
    ncclComm_t parent = NULL;
    if (!VT_RC(ncclCommInitRank(&parent, n, *id, rank), ncclSuccess))
        return;
    if (rank < n - 1) {
        int excluded = n - 1;
        ncclComm_t sub = NULL;
        if (VT_RC(ncclCommShrink(parent, &excluded, 1, &sub, NULL, NCCL_SHRINK_DEFAULT),
                  ncclSuccess)) {
            if (!sub) {
                vt_fail("ncclCommShrink(NCCL_SHRINK_DEFAULT): newcomm got NULL");
            } else {
                use(sub, rank, n - 1, "ncclCommShrink(NCCL_SHRINK_DEFAULT) comm", 80);
                destroy(sub, "ncclCommShrink(NCCL_SHRINK_DEFAULT) comm");
            }
        }
    }
    destroy(parent, "parent of ncclCommShrink(NCCL_SHRINK_DEFAULT)");
}

int vt_shrink_abort_rank(int rank, int n, const vt_ids_t *ids)
{
    ncclComm_t parent = NULL;
    if (!VT_RC(ncclCommInitRank(&parent, n, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    if (rank == 0) {
        /* Dies without a word to anyone. */
        fflush(NULL);
        _exit(0);
    }
    int excluded = 0;
    ncclComm_t sub = NULL;
    if (VT_RC(ncclCommShrink(parent, &excluded, 1, &sub, NULL, NCCL_SHRINK_ABORT), ncclSuccess)) {
        if (!sub) {
            vt_fail("ncclCommShrink(NCCL_SHRINK_ABORT): newcomm got NULL");
        } else {
            use(sub, rank - 1, n - 1, "ncclCommShrink(NCCL_SHRINK_ABORT) comm", 81);
            destroy(sub, "ncclCommShrink(NCCL_SHRINK_ABORT) comm");
        }
    }
    VT_RC(ncclCommAbort(parent), ncclSuccess);
    return 0;
}

/* The last rank is killed after a working all-reduce; the others, blocked
 * in the next one, get ncclRemoteError naming it, the same from
 * ncclCommGetAsyncError, and abort. */
int vt_death_rank(int rank, int n, const vt_ids_t *ids)
{
    ncclComm_t comm = NULL;
    if (!VT_RC(ncclCommInitRank(&comm, n, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    int victim = n - 1;
    vt_probe_allreduce(comm, rank, n, "before the death", 90);
    /* The others' probe must be over before the victim dies: its death,
     * reported at once, fails an all-reduce a rank is still finishing even
     * when the victim's data has all arrived. Each survivor leaves a mark
     * after its probe; the victim waits for the marks (up to a minute). */
    char mark[64];
    if (rank != victim) {
        snprintf(mark, sizeof(mark), "/tmp/shoal-vt-death-%d-%d", (int)getppid(), rank);
        FILE *f = fopen(mark, "w");
        if (f)
            fclose(f);
    } else {
        for (int r = 0; r < victim; r++) {
            snprintf(mark, sizeof(mark), "/tmp/shoal-vt-death-%d-%d", (int)getppid(), r);
            for (int t = 0; t < 60000 && access(mark, F_OK) != 0; t++)
                nanosleep(&(struct timespec){0, 1000000}, NULL);
            unlink(mark);
        }
        fflush(NULL);
        raise(SIGKILL);
    }
    static int32_t x[1 << 16];
    if (VT_RC(ncclAllReduce(x, x, 1 << 16, ncclInt32, ncclSum, comm, VT_STREAM),
              ncclRemoteError)) {
        char want[32];
        snprintf(want, sizeof(want), "rank %d ", victim);
        const char *msg = ncclGetLastError(comm);
        if (!msg || !strstr(msg, want))
            vt_fail("ncclGetLastError does not name rank %d: %s", victim, msg ? msg : "NULL");
    }
    ncclResult_t async = ncclSuccess;
    if (VT_RC(ncclCommGetAsyncError(comm, &async), ncclSuccess) && async != ncclRemoteError)
        vt_fail("ncclCommGetAsyncError after rank %d died: %d, expected ncclRemoteError",
                victim, (int)async);
    VT_RC(ncclCommAbort(comm), ncclSuccess);
    return 0;
}

/* ---- non-blocking, revoke ---------------------------------------------------- */

static void nonblocking(int rank, int n, const ncclUniqueId *id)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nb = NULL;
    const char *what = "ncclCommInitRankConfig(blocking 0)";
    if (!vt_rc2(what, ncclCommInitRankConfig(&nb, n, *id, rank, &cfg), ncclSuccess,
                ncclInProgress))
        return;
    if (!nb) {
        vt_fail("%s: comm got NULL", what);
        return;
    }
    if (!vt_rc(what, vt_wait_comm(nb, what), ncclSuccess))
        return;

    const size_t count = 1031;
    char *send = vt_alloc(count * 4), *recv = vt_alloc(count * 4);
    char *gs = vt_alloc(count), *gr = vt_alloc(count * (size_t)n);
    vt_fill_input(send, ncclFloat32, ncclSum, rank, n, 0, count, 90);
    what = "non-blocking ncclAllReduce";
    if (vt_rc2(what, ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, nb, VT_STREAM),
               ncclSuccess, ncclInProgress) &&
        vt_rc(what, vt_wait_comm(nb, what), ncclSuccess))
        vt_check_reduced(what, recv, ncclFloat32, ncclSum, n, 0, count, 90);

    vt_fill_input(send, ncclFloat32, ncclSum, rank, n, 0, count, 91);
    vt_fill_bytes(gs, 0, count, rank, 91);
    what = "non-blocking group of all-reduce and all-gather";
    bool ok = vt_rc(what, ncclGroupStart(), ncclSuccess);
    ok &= vt_rc2(what, ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, nb, VT_STREAM),
                 ncclSuccess, ncclInProgress);
    ok &= vt_rc2(what, ncclAllGather(gs, gr, count, ncclUint8, nb, VT_STREAM), ncclSuccess,
                 ncclInProgress);
    ok &= vt_rc2(what, ncclGroupEnd(), ncclSuccess, ncclInProgress);
    if (ok && vt_rc(what, vt_wait_comm(nb, what), ncclSuccess)) {
        vt_check_reduced(what, recv, ncclFloat32, ncclSum, n, 0, count, 91);
        for (int j = 0; j < n; j++)
            vt_check_bytes(what, gr + (size_t)j * count, ncclUint8, 0, count, j, 91);
    }
    free(send), free(recv), free(gs), free(gr);

    what = "ncclCommFinalize(non-blocking comm)";
    if (vt_rc2(what, ncclCommFinalize(nb), ncclSuccess, ncclInProgress))
        vt_rc(what, vt_wait_comm(nb, what), ncclSuccess);
    destroy(nb, "non-blocking comm");
}

static void revoked_comm(int rank, int n, const ncclUniqueId *id)
{
    ncclComm_t comm = NULL;
    if (!VT_RC(ncclCommInitRank(&comm, n, *id, rank), ncclSuccess))
        return;
    VT_RC(ncclCommRevoke(comm, 1), ncclInvalidArgument);
    vt_probe_allreduce(comm, rank, n, "after ncclCommRevoke(flags 1)", 100);
    /* A rank's revoke tells the others at once, and fails an all-reduce a
     * rank is still finishing even when all its data has arrived: every
     * probe is over before any rank revokes. */
    vt_ranks_meet("probed", rank, n);
    const char *what = "ncclCommRevoke(comm, 0)";
    if (vt_rc2(what, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclSuccess, ncclInProgress)) {
        vt_wait_comm(comm, what);
        int32_t x[4] = {1, 2, 3, 4}, y[4];
        ncclResult_t rc = ncclAllReduce(x, y, 4, ncclInt32, ncclSum, comm, VT_STREAM);
        if (rc == ncclSuccess)
            vt_fail("ncclAllReduce on a revoked comm: got ncclSuccess expected an error");
    }
    if (rank % 2)
        VT_RC(ncclCommAbort(comm), ncclSuccess);
    else
        destroy(comm, "revoked comm");
}

/* ---- the three cases ----------------------------------------------------------- */

/* Every way to make, query, split, shrink and end a communicator. */
int vt_comm_rank(int rank, int n, const vt_ids_t *ids)
{
    bad_init_args(n, &ids->id[VT_ID_MAIN]);
    ncclComm_t comm = NULL;
    if (!VT_RC(ncclCommInitRank(&comm, n, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    use(comm, rank, n, "ncclCommInitRank", 10);

    extra_comms_t x;
    init_variants(rank, n, ids, &x);
    split(comm, rank, n);
    nonblocking(rank, n, &ids->id[VT_ID_NONBLOCK]);
    shrink_default(rank, n, &ids->id[VT_ID_SHRINK]);
    revoked_comm(rank, n, &ids->id[VT_ID_REVOKE]);

    if (x.config)
        VT_RC(ncclCommAbort(x.config), ncclSuccess);
    if (x.old)
        destroy(x.old, "older-config comm");
    if (x.scal1)
        destroy(x.scal1, "ncclCommInitRankScalable(nId 1) comm");
    if (x.scal2)
        destroy(x.scal2, "ncclCommInitRankScalable(nId 2) comm");

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    ncclResetDebugInit();
#pragma GCC diagnostic pop

    VT_RC(ncclCommFinalize(comm), ncclSuccess);
    VT_RC(ncclCommDestroy(comm), ncclSuccess);
    return 0;
}

/* Pre-multiply-sum scalars, groups and their simulation, registration,
 * windows and NCCL's allocator. */
int vt_usage_rank(int rank, int n, const vt_ids_t *ids)
{
    ncclComm_t comm = NULL;
    if (!VT_RC(ncclCommInitRank(&comm, n, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    premul_scalars(comm, rank, n);
    groups(comm, rank, n);
    registration(comm, rank, n);
    memory();
    VT_RC(ncclCommDestroy(comm), ncclSuccess);
    return 0;
}

/* Bad arguments leave the communicator working; host memory is whatever
 * the process can touch at the time of the call. */
int vt_input_rank(int rank, int n, const vt_ids_t *ids)
{
    ncclComm_t comm = NULL;
    if (!VT_RC(ncclCommInitRank(&comm, n, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    bad_input(comm, rank, n);
    thread_buffers(comm, rank, n);
    VT_RC(ncclCommDestroy(comm), ncclSuccess);
    return 0;
}
