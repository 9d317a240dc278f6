/* Stream-ordered calls on device buffers (the staged path, dev_stage.h),
 * over forked ranks, shared memory and tcp, against the scalar reference.
 * In make test the driver is the CPU stand-in of tests/cuda/ (device
 * memory is ordinary memory there, so these show the ordering and the
 * staging logic, not a GPU's behaviour); make test-gpu runs the same
 * binary on the real driver.
 *
 * - every collective and send/receive, on device, managed, pinned and
 *   pageable buffers, in place and not, counts 0, 1, odd and multi-chunk,
 *   every dtype for the all-reduce, 1 to 8 ranks, by the direct path
 *   (device to device through memory handles, falling back to staging
 *   where a rank's buffer is not device memory) and the staged one; fresh
 *   buffers for every case, so a handle cache that served freed memory
 *   would give wrong results; SHOAL_CUDA_PATH=direct stages where a
 *   rank cannot go direct; auto stages small calls and sends large ones
 *   direct, by the cost model, whose device link figures count (a slow
 *   PCIe sends a mid-sized call direct);
 * - the host never waits: a stream held behind a gate still lets the call
 *   return, and the work queued behind the call on the same stream sees
 *   its result;
 * - a group is launched at its end, not before;
 * - a rank that dies turns into an error on the others, whose streams go
 *   on (both paths);
 * - without CUDA (no module, no driver, no device) the call is refused
 *   with the cause. */
#include "cuda_user.h"
#include "harness.h"

#include "core/comm.h"
#include "core/dev_priv.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_CHUNK 16384
#define BIG 70001 /* elements: several pieces of TEST_CHUNK bytes */

/* The kinds the loops run over, then device memory made by the virtual
 * memory API (cuMemCreate), which only its own tests use. */
enum { MEM_DEVICE, MEM_MANAGED, MEM_PINNED, MEM_HOST, MEM_KINDS, MEM_VMM = MEM_KINDS };
static const char *const mem_names[] = {"device", "managed", "pinned", "host", "cuMem device"};

static void *mem_alloc(int kind, size_t bytes)
{
    switch (kind) {
    case MEM_DEVICE: return cu_user_alloc(bytes);
    case MEM_MANAGED: return cu_user_alloc_managed(bytes);
    case MEM_PINNED: return cu_user_alloc_pinned(bytes);
    case MEM_VMM: return cu_user_alloc_vmm(bytes);
    default: return malloc(bytes ? bytes : 1);
    }
}

static void mem_free(int kind, void *p)
{
    switch (kind) {
    case MEM_DEVICE:
    case MEM_MANAGED: cu_user_free(p); break;
    case MEM_PINNED: cu_user_free_pinned(p); break;
    case MEM_VMM: cu_user_free_vmm(p); break;
    default: free(p); break;
    }
}

/* Host to and from memory of any kind (synchronous copies for device
 * memory; the others are host-readable). */
static void mem_put(int kind, void *dst, const void *src, size_t bytes)
{
    if (kind == MEM_DEVICE || kind == MEM_VMM)
        cu_user_htod(dst, src, bytes);
    else if (bytes)
        memcpy(dst, src, bytes);
}

static void mem_get(int kind, void *dst, const void *src, size_t bytes)
{
    if (kind == MEM_DEVICE || kind == MEM_VMM)
        cu_user_dtoh(dst, src, bytes);
    else if (bytes)
        memcpy(dst, src, bytes);
}

/* Byte pattern of rank r's element block: what the data-moving
 * collectives carry. */
static void fill_pattern(unsigned char *p, size_t bytes, int r, int salt)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)harness_mix((uint32_t)(i * 131 + (size_t)r * 7919 + (size_t)salt));
}

/* The rank's driver open on device, then its communicator. */
static int rank_open_on(int device, int rank, shoal_comm_t *comm, int nranks,
                        const shoal_unique_id_t *id)
{
    char why[256];
    RANK_CHECK(cu_user_open(device, why, sizeof(why)) == 0, fail, "rank %d: %s", rank, why);
    RANK_CHECK(shoal_comm_init(nranks, id, rank, comm) == SHOAL_OK, fail, "init");
    return 0;
fail:
    return 1;
}

static int rank_open(int rank, shoal_comm_t *comm, int nranks, const shoal_unique_id_t *id)
{
    return rank_open_on(0, rank, comm, nranks, id);
}

/* ---- all-reduce over every dtype, memory kind and count ---- */

static int check_allreduce(shoal_comm_t comm, void *stream, int rank, int nranks, int kind,
                           shoal_dtype_t dt, shoal_op_t op, size_t count, int inplace)
{
    size_t es;
    shoal_dtype_size(dt, &es);
    size_t bytes = count * es;
    unsigned char *in = malloc(bytes + 1), *want = malloc(bytes + 1), *tmp = malloc(bytes + 1),
                  *got = malloc(bytes + 1);
    void *sbuf = mem_alloc(kind, bytes), *rbuf = inplace ? sbuf : mem_alloc(kind, bytes);
    harness_fill_exact(in, count, rank, dt, op);
    harness_expected(want, tmp, count, nranks, dt, op);
    mem_put(kind, sbuf, in, bytes);
    shoal_status_t s = shoal_allreduce_stream(sbuf, rbuf, count, dt, op, comm, stream);
    RANK_CHECK(s == SHOAL_OK, fail, "allreduce_stream: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    cu_user_sync(stream);
    mem_get(kind, got, rbuf, bytes);
    RANK_CHECK(memcmp(got, want, bytes) == 0, fail,
               "rank %d: all-reduce of %zu %s %s on %s memory%s: wrong result", rank, count,
               shoal_status_string(SHOAL_OK), "", mem_names[kind], inplace ? " in place" : "");
    int rc = 0;
    goto out;
fail:
    rc = 1;
out:
    if (!inplace)
        mem_free(kind, rbuf);
    mem_free(kind, sbuf);
    free(in);
    free(want);
    free(tmp);
    free(got);
    return rc;
}

static int rank_allreduce(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    static const size_t counts[] = {0, 1, 1001, BIG};
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++) {
        if (harness_quick() && dt != SHOAL_FLOAT32 && dt != SHOAL_BFLOAT16)
            continue;
        for (size_t c = 0; c < 4; c++) {
            if (check_allreduce(comm, stream, rank, nranks, MEM_DEVICE, (shoal_dtype_t)dt,
                                SHOAL_SUM, counts[c], (int)c & 1))
                goto fail;
        }
    }
    for (int op = 0; op < SHOAL_OP_COUNT; op++) {
        for (int kind = 0; kind < MEM_KINDS; kind++) {
            if (check_allreduce(comm, stream, rank, nranks, kind, SHOAL_FLOAT32, (shoal_op_t)op,
                                1001, kind & 1))
                goto fail;
        }
    }
    /* The legacy default stream too. */
    if (check_allreduce(comm, NULL, rank, nranks, MEM_DEVICE, SHOAL_INT32, SHOAL_MAX, 1001, 0))
        goto fail;
    /* The direct path reduces with the device's kernels; staging reduces
     * on the host and launches none. */
    if (cu_user_is_standin() && nranks > 1) {
        int direct = strcmp(getenv("SHOAL_CUDA_PATH"), "staged") != 0;
        unsigned long k = cu_user_launches("shoal_k_reduce");
        RANK_CHECK(direct ? k > 0 : k == 0, fail, "rank %d: %lu reduction kernels on the %s "
                   "path", rank, k, direct ? "direct" : "staged");
    }
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* ---- the data-moving collectives and the rooted ones ---- */

typedef enum { C_RS, C_AG, C_A2A, C_BCAST, C_REDUCE, C_GATHER, C_SCATTER, C_SENDRECV, C_COUNT } coll_t;
static const char *const coll_names[] = {"reduce_scatter", "allgather", "alltoall", "broadcast",
                                         "reduce", "gather", "scatter", "send/recv"};

/* One collective of count elements of fp32 per block on kind memory,
 * root 1 % nranks; checked against what the ranks' patterns give. */
static int check_coll(shoal_comm_t comm, void *stream, int rank, int n, int kind, coll_t coll,
                      size_t count, int salt)
{
    const size_t es = 4, blk = count * es, all = blk * (size_t)n;
    const int root = 1 % n;
    unsigned char *host_in = malloc(all + 1), *want = calloc(1, all + 1), *got = malloc(all + 1),
                  *tmp = malloc(all + 1);
    void *sbuf = mem_alloc(kind, all), *rbuf = mem_alloc(kind, all);
    size_t in_bytes = blk, out_bytes = blk;
    shoal_status_t s = SHOAL_OK;
    switch (coll) {
    case C_RS: in_bytes = all; break;
    case C_AG: out_bytes = all; break;
    case C_A2A: in_bytes = out_bytes = all; break;
    case C_GATHER: out_bytes = rank == root ? all : 0; break;
    case C_SCATTER: in_bytes = rank == root ? all : 0; break;
    default: break;
    }
    if (coll == C_RS || coll == C_REDUCE) {
        harness_fill_exact(host_in, in_bytes / es, rank, SHOAL_FLOAT32, SHOAL_SUM);
        harness_expected(tmp, got, in_bytes / es, n, SHOAL_FLOAT32, SHOAL_SUM);
        memcpy(want, tmp + (coll == C_RS ? (size_t)rank * blk : 0), blk);
    } else {
        fill_pattern(host_in, in_bytes, rank, salt);
    }
    switch (coll) {
    case C_AG:
        for (int r = 0; r < n; r++)
            fill_pattern(want + (size_t)r * blk, blk, r, salt);
        break;
    case C_A2A:
        /* Block j of rank r's input is its pattern's j-th block. */
        for (int r = 0; r < n; r++) {
            fill_pattern(tmp, all, r, salt);
            memcpy(want + (size_t)r * blk, tmp + (size_t)rank * blk, blk);
        }
        break;
    case C_BCAST: fill_pattern(want, blk, root, salt); break;
    case C_GATHER:
        for (int r = 0; r < n && rank == root; r++)
            fill_pattern(want + (size_t)r * blk, blk, r, salt);
        break;
    case C_SCATTER:
        fill_pattern(tmp, all, root, salt);
        memcpy(want, tmp + (size_t)rank * blk, blk);
        break;
    case C_SENDRECV: fill_pattern(want, blk, (rank + n - 1) % n, salt); break;
    default: break;
    }
    mem_put(kind, sbuf, host_in, in_bytes);
    switch (coll) {
    case C_RS: s = shoal_reduce_scatter_stream(sbuf, rbuf, count, SHOAL_FLOAT32, SHOAL_SUM, comm, stream); break;
    case C_AG: s = shoal_allgather_stream(sbuf, rbuf, count, SHOAL_FLOAT32, comm, stream); break;
    case C_A2A: s = shoal_alltoall_stream(sbuf, rbuf, count, SHOAL_FLOAT32, comm, stream); break;
    case C_BCAST: s = shoal_broadcast_stream(sbuf, rbuf, count, SHOAL_FLOAT32, root, comm, stream); break;
    case C_REDUCE: s = shoal_reduce_stream(sbuf, rbuf, count, SHOAL_FLOAT32, SHOAL_SUM, root, comm, stream); break;
    case C_GATHER: s = shoal_gather_stream(sbuf, rbuf, count, SHOAL_FLOAT32, root, comm, stream); break;
    case C_SCATTER: s = shoal_scatter_stream(sbuf, rbuf, count, SHOAL_FLOAT32, root, comm, stream); break;
    case C_SENDRECV:
        /* A ring shift: each rank sends to the next and receives from the
         * previous, in one group so that neither waits for the other. */
        shoal_group_start();
        s = shoal_send_stream(sbuf, count, SHOAL_FLOAT32, (rank + 1) % n, comm, stream);
        if (s == SHOAL_OK)
            s = shoal_recv_stream(rbuf, count, SHOAL_FLOAT32, (rank + n - 1) % n, comm, stream);
        shoal_status_t e = shoal_group_end();
        s = s != SHOAL_OK ? s : e;
        break;
    default: break;
    }
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: %s: %s (%s)", rank, coll_names[coll],
               shoal_status_string(s), shoal_comm_last_error(comm));
    cu_user_sync(stream);
    /* What this rank receives: nothing at a rooted collective's other
     * ranks. */
    size_t check = out_bytes;
    if (coll == C_REDUCE && rank != root)
        check = 0;
    mem_get(kind, got, rbuf, check);
    RANK_CHECK(memcmp(got, want, check) == 0, fail, "rank %d of %d: %s of %zu on %s memory: "
               "wrong result", rank, n, coll_names[coll], count, mem_names[kind]);
    int rc = 0;
    goto out;
fail:
    rc = 1;
out:
    mem_free(kind, sbuf);
    mem_free(kind, rbuf);
    free(host_in);
    free(want);
    free(got);
    free(tmp);
    return rc;
}

static int rank_colls(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    static const size_t counts[] = {0, 1, 1001, BIG / 4};
    int salt = 0;
    for (int coll = 0; coll < C_COUNT; coll++) {
        if (coll == C_SENDRECV && nranks == 1)
            continue; /* a message to oneself is test_group_nb's */
        for (size_t c = 0; c < 4; c++) {
            int kind = c == 2 ? MEM_PINNED : c == 1 ? MEM_MANAGED : MEM_DEVICE;
            if (check_coll(comm, stream, rank, nranks, kind, (coll_t)coll, counts[c], ++salt))
                goto fail;
        }
    }
    /* An in-place all-to-all on device memory: block j of the input goes
     * to rank j and is replaced by rank j's block for this rank. */
    {
        const size_t cnt = 777, blk = cnt * 4, all = blk * (size_t)nranks;
        unsigned char *mine = malloc(all), *want = malloc(all), *got = malloc(all),
                      *tmp = malloc(all);
        void *d = cu_user_alloc(all);
        fill_pattern(mine, all, rank, 99);
        for (int q = 0; q < nranks; q++) {
            fill_pattern(tmp, all, q, 99);
            memcpy(want + (size_t)q * blk, tmp + (size_t)rank * blk, blk);
        }
        cu_user_htod(d, mine, all);
        shoal_status_t s = shoal_alltoall_stream(d, d, cnt, SHOAL_FLOAT32, comm, stream);
        RANK_CHECK(s == SHOAL_OK, fail, "in-place alltoall: %s", shoal_status_string(s));
        cu_user_sync(stream);
        cu_user_dtoh(got, d, all);
        RANK_CHECK(memcmp(got, want, all) == 0, fail, "rank %d: in-place alltoall: wrong result",
                   rank);
        cu_user_free(d);
        free(mine);
        free(want);
        free(got);
        free(tmp);
    }
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* ---- ordering: the host does not wait; the stream does ---- */

static int rank_order(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    const size_t count = 1001, bytes = count * sizeof(float);
    void *stream = cu_user_stream();
    _Atomic uint32_t *gate = cu_user_alloc_pinned(64);
    atomic_store(gate, 0);
    float *in = malloc(bytes), *want = malloc(bytes), *tmp = malloc(bytes), *got = malloc(bytes);
    /* after: pinned, so that the host reads it with no copy while the
     * stream is held (on a GPU a synchronous copy may queue behind the
     * held stream's work, and wait for the gate that this thread opens). */
    void *dbuf = cu_user_alloc(bytes);
    float *after = cu_user_alloc_pinned(bytes);
    harness_fill_exact(in, count, rank, SHOAL_FLOAT32, SHOAL_SUM);
    harness_expected(want, tmp, count, nranks, SHOAL_FLOAT32, SHOAL_SUM);
    cu_user_htod(dbuf, in, bytes);
    memset(after, 0, bytes);

    /* The stream waits for the gate; the call must return all the same. */
    cu_user_gate(stream, (uint32_t *)gate, 1);
    shoal_status_t s = shoal_allreduce_stream(dbuf, dbuf, count, SHOAL_FLOAT32, SHOAL_SUM, comm,
                                              stream);
    RANK_CHECK(s == SHOAL_OK, fail, "allreduce_stream: %s", shoal_status_string(s));
    /* Work queued behind the call on its stream sees the result. */
    cu_user_copy_async(after, dbuf, bytes, stream);
    RANK_CHECK(!cu_user_idle(stream), fail, "rank %d: the stream ran past its closed gate", rank);
    for (size_t i = 0; i < count; i++)
        RANK_CHECK(after[i] == 0.0f, fail, "rank %d: the copy behind the call ran early", rank);
    /* Nor did the call itself: its input is as it was (read by a copy,
     * which only the stand-in runs past a held stream for certain). */
    if (cu_user_is_standin()) {
        cu_user_dtoh(got, dbuf, bytes);
        RANK_CHECK(nranks == 1 || memcmp(got, in, bytes) == 0, fail, "rank %d: the all-reduce "
                   "ran before its stream reached it", rank);
    }
    atomic_store(gate, 1);
    cu_user_sync(stream);
    RANK_CHECK(memcmp(after, want, bytes) == 0, fail, "rank %d: the work behind the call did "
               "not see its result", rank);

    /* A group is launched at its end: the stream is idle until then. */
    cu_user_htod(dbuf, in, bytes);
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
    s = shoal_allreduce_stream(dbuf, dbuf, count, SHOAL_FLOAT32, SHOAL_SUM, comm, stream);
    RANK_CHECK(s == SHOAL_OK, fail, "allreduce_stream in a group: %s", shoal_status_string(s));
    RANK_CHECK(cu_user_idle(stream), fail, "rank %d: a grouped call queued work before the "
               "group's end", rank);
    RANK_CHECK(shoal_group_end() == SHOAL_OK, fail, "group end: %s",
               shoal_comm_last_error(comm));
    cu_user_sync(stream);
    cu_user_dtoh(got, dbuf, bytes);
    RANK_CHECK(memcmp(got, want, bytes) == 0, fail, "rank %d: grouped call: wrong result", rank);

    /* One rank: a call (alone or in a group) is a copy on its stream, with
     * no staging through host memory. */
    if (nranks == 1) {
        void *out = cu_user_alloc(bytes);
        RANK_CHECK(shoal_allreduce_stream(dbuf, out, count, SHOAL_FLOAT32, SHOAL_SUM, comm,
                                          stream) == SHOAL_OK, fail, "one rank's all-reduce");
        cu_user_sync(stream);
        cu_user_dtoh(got, out, bytes);
        RANK_CHECK(memcmp(got, want, bytes) == 0, fail, "one rank's all-reduce: wrong result");
        RANK_CHECK(!comm->dev || !comm->dev->slots, fail, "one rank staged through host memory");
        cu_user_free(out);
    }

    /* The host forms refuse device memory, and the communicator goes on. */
    s = shoal_allreduce(dbuf, dbuf, count, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG && strstr(shoal_comm_last_error(comm), "device memory"),
               fail, "rank %d: a host all-reduce of device memory gave %s (%s)", rank,
               shoal_status_string(s), shoal_comm_last_error(comm));

    cu_user_free(dbuf);
    cu_user_free_pinned(after);
    cu_user_free_pinned((void *)gate);
    cu_user_stream_free(stream);
    free(in);
    free(want);
    free(tmp);
    free(got);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* ---- no CUDA: refused with the cause ---- */

typedef struct {
    const char *name, *value; /* the setting that takes CUDA away */
    const char *says;         /* what the error must say */
} no_cuda_t;

static int rank_no_cuda(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const no_cuda_t *nc = arg;
    shoal_comm_t comm;
    char why[256];
    /* The test's side reads the same settings: where it finds no device
     * either, the buffer is host memory, which a stream-ordered call
     * refuses all the same. */
    harness_setenv(nc->name, nc->value);
    int have = cu_user_open(0, why, sizeof(why)) == 0;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    float host[4] = {0};
    void *buf = have ? cu_user_alloc(sizeof(host)) : host;
    shoal_status_t s = shoal_allreduce_stream(buf, buf, 4, SHOAL_FLOAT32, SHOAL_SUM, comm, NULL);
    RANK_CHECK(s == SHOAL_ERR_UNSUPPORTED, fail, "with %s=%s: got %s", nc->name, nc->value,
               shoal_status_string(s));
    RANK_CHECK(strstr(shoal_comm_last_error(comm), nc->says), fail,
               "with %s=%s the error does not say \"%s\": %s", nc->name, nc->value, nc->says,
               shoal_comm_last_error(comm));
    /* The communicator still works on host memory. */
    s = shoal_allreduce(host, host, 4, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "host all-reduce after the refusal: %s",
               shoal_status_string(s));
    if (have)
        cu_user_free(buf);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* ---- a rank that dies ---- */

/* Rank 1 dies before the call; the others' streams go on past it (the
 * call's host side fails, its done flag still rises) and the failure,
 * naming the dead rank's loss, is the communicator's async error. */
static int rank_peer_dies(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    if (rank == 1)
        raise(SIGKILL);
    void *buf = cu_user_alloc(4096), *stream = cu_user_stream();
    shoal_status_t s = shoal_allreduce_stream(buf, buf, 1024, SHOAL_FLOAT32, SHOAL_SUM, comm,
                                              stream);
    RANK_CHECK(s == SHOAL_OK || s == SHOAL_ERR_PEER, fail, "queueing: %s",
               shoal_status_string(s));
    cu_user_sync(stream);
    shoal_status_t async = SHOAL_OK;
    RANK_CHECK(shoal_comm_get_async_error(comm, &async) == SHOAL_OK, fail, "async error");
    RANK_CHECK(async == SHOAL_ERR_PEER || async == SHOAL_ERR_TIMEOUT, fail,
               "rank %d: async error %s after a peer died", rank, shoal_status_string(async));
    cu_user_free(buf);
    cu_user_stream_free(stream);
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void test_peer_dies(void **state)
{
    (void)state;
    static const char *const paths[] = {"staged", "auto"};
    harness_use_transport("shm", TEST_CHUNK);
    for (int i = 0; i < 2; i++) {
        harness_setenv("SHOAL_CUDA_PATH", paths[i]);
        assert_int_equal(harness_run_ranks_victim(3, rank_peer_dies, NULL, 60, 1), 0);
    }
    harness_setenv("SHOAL_CUDA_PATH", NULL);
}

/* ---- cases ---- */

static const int all_ranks[] = {1, 2, 3, 5, 8};
static const int quick_ranks[] = {2, 3};

/* path: SHOAL_CUDA_PATH, auto (device to device on one host) or staged. */
static void run_all(harness_rank_fn_t fn, const char *transport, const char *path)
{
    harness_use_transport(transport, TEST_CHUNK);
    harness_setenv("SHOAL_CUDA_PATH", path);
    int quick = harness_quick();
    const int *ranks = quick ? quick_ranks : all_ranks;
    size_t n = quick ? 2 : 5;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(transport, "tcp") == 0 && ranks[i] > 5)
            continue; /* tcp adds nothing at 8 that 5 does not show */
        assert_int_equal(harness_run_ranks(ranks[i], fn, NULL, 240), 0);
    }
}

static void test_allreduce_direct(void **state) { (void)state; run_all(rank_allreduce, "shm", "direct"); }
static void test_allreduce_shm(void **state) { (void)state; run_all(rank_allreduce, "shm", "staged"); }
static void test_allreduce_tcp(void **state) { (void)state; run_all(rank_allreduce, "tcp", "staged"); }
static void test_colls_direct(void **state) { (void)state; run_all(rank_colls, "shm", "direct"); }
static void test_colls_shm(void **state) { (void)state; run_all(rank_colls, "shm", "staged"); }
static void test_colls_tcp(void **state) { (void)state; run_all(rank_colls, "tcp", "staged"); }

/* SHOAL_CUDA_PATH=direct where one rank's buffer is managed memory, which
 * its peers cannot open: every rank stages instead, with the right result. */
static int rank_direct_fallback(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    int rc = check_allreduce(comm, stream, rank, nranks, rank == 1 ? MEM_MANAGED : MEM_DEVICE,
                             SHOAL_FLOAT32, SHOAL_SUM, 3000, 0);
    RANK_CHECK(rc == 0, fail, "rank %d: the fallback's result", rank);
    RANK_CHECK(cu_user_launches("shoal_k_reduce") == 0, fail,
               "rank %d: a reduction kernel ran though a rank could not go direct", rank);
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_direct_fallback(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_CUDA_PATH", "direct");
    int rc = harness_run_ranks(3, rank_direct_fallback, NULL, 60);
    harness_setenv("SHOAL_CUDA_PATH", NULL);
    assert_int_equal(rc, 0);
}

/* SHOAL_CUDA_PATH=direct with the ranks on two devices: where the devices
 * have peer access the call goes direct; where they have none
 * (SHOAL_STANDIN_NO_P2P=1: a handle opens only on its own device, as
 * between GPUs without a P2P-capable link) every rank stages it instead,
 * with the same result. arg: whether the devices have peer access. */
typedef struct {
    int p2p;  /* whether the devices have peer access */
    int kind; /* MEM_DEVICE or MEM_VMM */
} two_dev_arg_t;

static int rank_two_devices(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    const two_dev_arg_t *arg = varg;
    int p2p = arg->p2p;
    shoal_comm_t comm;
    if (rank_open_on(rank % 2, rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    int rc = check_allreduce(comm, stream, rank, nranks, arg->kind, SHOAL_FLOAT32, SHOAL_SUM,
                             3000, 0);
    RANK_CHECK(rc == 0, fail, "rank %d: the result on %s memory (peer access %s)", rank,
               mem_names[arg->kind], p2p ? "on" : "off");
    unsigned long k = cu_user_launches("shoal_k_reduce");
    RANK_CHECK(p2p ? k > 0 : k == 0, fail,
               "rank %d: %lu reduction kernels with peer access %s", rank, k, p2p ? "on" : "off");
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_direct_two_devices(void **state)
{
    (void)state;
    /* Only the stand-in can be given two devices and told to refuse peer
     * access between them, and only it counts the kernels. */
    if (!getenv("SHOAL_CUDA_DRIVER"))
        return;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_CUDA_PATH", "direct");
    harness_setenv("SHOAL_STANDIN_DEVICES", "2");
    int rc[2][2];
    for (int k = 0; k < 2; k++) {
        two_dev_arg_t on = {.p2p = 1, .kind = k ? MEM_VMM : MEM_DEVICE};
        two_dev_arg_t off = {.p2p = 0, .kind = on.kind};
        rc[k][0] = harness_run_ranks(3, rank_two_devices, &on, 60);
        harness_setenv("SHOAL_STANDIN_NO_P2P", "1");
        rc[k][1] = harness_run_ranks(3, rank_two_devices, &off, 60);
        harness_setenv("SHOAL_STANDIN_NO_P2P", NULL);
    }
    harness_setenv("SHOAL_STANDIN_DEVICES", NULL);
    harness_setenv("SHOAL_CUDA_PATH", NULL);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rc[k][0], 0);
        assert_int_equal(rc[k][1], 0);
    }
}

/* Device memory made by the virtual memory API (cuMemCreate and cuMemMap,
 * as ncclMemAlloc and PyTorch's expandable segments make it) has no
 * CUipcMemHandle: the direct path exports it as a file descriptor that
 * the peers take a copy of. The all-reduces go direct (reduction kernels
 * ran) with the right result, in and out of place; a second call on the
 * same buffers opens nothing again (the cache), buffers freed and made
 * again are opened anew, and calls on the same buffers leave no
 * descriptor open behind them. */
static int rank_vmm(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    char why[256];
    shoal_comm_t comm;
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "rank %d: %s", rank, why);
    void *stream = cu_user_stream();
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    const size_t count = 3001, bytes = count * sizeof(float);
    float *in = malloc(bytes), *want = malloc(bytes), *tmp = malloc(bytes), *got = malloc(bytes);
    harness_fill_exact(in, count, rank, SHOAL_FLOAT32, SHOAL_SUM);
    harness_expected(want, tmp, count, nranks, SHOAL_FLOAT32, SHOAL_SUM);
    unsigned long opened[3];
    int fds[3];
    void *sbuf = NULL, *rbuf = NULL;
    for (int round = 0; round < 3; round++) {
        /* Rounds 0 and 1 on the same buffers, round 2 on new ones. */
        if (round != 1) {
            if (sbuf) {
                cu_user_free_vmm(sbuf);
                cu_user_free_vmm(rbuf);
            }
            sbuf = cu_user_alloc_vmm(bytes);
            rbuf = cu_user_alloc_vmm(bytes);
        }
        for (int inplace = 0; inplace < 2; inplace++) {
            cu_user_htod(sbuf, in, bytes);
            void *out = inplace ? sbuf : rbuf;
            shoal_status_t s =
                shoal_allreduce_stream(sbuf, out, count, SHOAL_FLOAT32, SHOAL_SUM, comm, stream);
            RANK_CHECK(s == SHOAL_OK, fail, "rank %d: allreduce_stream: %s (%s)", rank,
                       shoal_status_string(s), shoal_comm_last_error(comm));
            cu_user_sync(stream);
            cu_user_dtoh(got, out, bytes);
            RANK_CHECK(memcmp(got, want, bytes) == 0, fail,
                       "rank %d: round %d: wrong result%s", rank, round,
                       inplace ? " in place" : "");
        }
        opened[round] = cu_user_vmm_imports();
        fds[round] = harness_open_fds();
        if (round == 2) {
            cu_user_free_vmm(sbuf);
            cu_user_free_vmm(rbuf);
            sbuf = rbuf = NULL;
        }
    }
    if (cu_user_is_standin()) {
        /* Each peer's two buffers, once per pair of buffers. */
        unsigned long want_new = 2 * (unsigned long)(nranks - 1);
        RANK_CHECK(cu_user_launches("shoal_k_reduce") > 0, fail,
                   "rank %d: no reduction kernel ran: the calls did not go direct", rank);
        RANK_CHECK(opened[0] == want_new && opened[1] == opened[0] &&
                       opened[2] == opened[1] + want_new, fail,
                   "rank %d: descriptors imported by round: %lu %lu %lu, want %lu, the same, "
                   "%lu more", rank, opened[0], opened[1], opened[2], want_new, want_new);
    }
    /* The exports' descriptors are closed once the peers have copies. */
    RANK_CHECK(fds[1] == fds[0], fail, "rank %d: %d descriptors open after the second round, "
               "%d after the first", rank, fds[1], fds[0]);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    cu_user_stream_free(stream);
    free(in);
    free(want);
    free(tmp);
    free(got);
    return 0;
fail:
    return 1;
}

static void test_direct_vmm(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_CUDA_PATH", "direct");
    static const int ns[] = {2, 3, 5};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        int rc = harness_run_ranks(ns[i], rank_vmm, NULL, 60);
        if (rc != 0)
            fprintf(stderr, "# failed with %d ranks\n", ns[i]);
        assert_int_equal(rc, 0);
    }
    harness_setenv("SHOAL_CUDA_PATH", NULL);
}

/* SHOAL_CUDA_PATH=auto: the cost model stages a one-element all-reduce
 * (its host collective costs less than the direct path's four small ones)
 * and sends a 16 MiB one device to device. */
static int rank_auto_model(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    RANK_CHECK(check_allreduce(comm, stream, rank, nranks, MEM_DEVICE, SHOAL_FLOAT32, SHOAL_SUM,
                               1, 0) == 0, fail, "one element");
    RANK_CHECK(comm->dev && comm->dev->staged_by_cost == 1 &&
               (!cu_user_is_standin() || cu_user_launches("shoal_k_reduce") == 0), fail,
               "rank %d: one element was not staged by the cost model", rank);
    RANK_CHECK(check_allreduce(comm, stream, rank, nranks, MEM_DEVICE, SHOAL_FLOAT32, SHOAL_SUM,
                               4u << 20, 0) == 0, fail, "16 MiB");
    RANK_CHECK(comm->dev->staged_by_cost == 1 &&
               (!cu_user_is_standin() || cu_user_launches("shoal_k_reduce") > 0), fail,
               "rank %d: 16 MiB did not go device to device", rank);
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* The device links' figures count: with PCIe at 1 MB/s (SHOAL_TOPO_LINKS),
 * staging a 1 KiB all-reduce would copy all of it twice over PCIe, the
 * direct path reads two thirds of it from the peers (no NVLink here): it
 * goes direct, where the default figures stage it. */
static int rank_auto_links(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    int slow = *(const int *)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    RANK_CHECK(check_allreduce(comm, stream, rank, nranks, MEM_DEVICE, SHOAL_FLOAT32, SHOAL_SUM,
                               256, 0) == 0, fail, "1 KiB");
    unsigned long staged = comm->dev ? comm->dev->staged_by_cost : 0;
    RANK_CHECK(slow ? staged == 0 && cu_user_launches("shoal_k_reduce") > 0 : staged == 1, fail,
               "rank %d: PCIe at %s: 1 KiB staged by the cost model %lu times", rank,
               slow ? "1 MB/s" : "its default figure", staged);
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_auto_model(void **state)
{
    (void)state;
    static const int slow = 1, fast = 0;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_CUDA_PATH", "auto");
    int rc = harness_run_ranks(3, rank_auto_model, NULL, 120);
    if (rc == 0)
        rc = harness_run_ranks(3, rank_auto_links, (void *)&fast, 120);
    harness_setenv("SHOAL_TOPO_LINKS", "pcie:10us:1M");
    if (rc == 0)
        rc = harness_run_ranks(3, rank_auto_links, (void *)&slow, 120);
    harness_setenv("SHOAL_TOPO_LINKS", NULL);
    harness_setenv("SHOAL_CUDA_PATH", NULL);
    assert_int_equal(rc, 0);
}

static void test_order(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_order, NULL, 120), 0);
    assert_int_equal(harness_run_ranks(3, rank_order, NULL, 120), 0);
}

static void test_no_cuda(void **state)
{
    (void)state;
    static const no_cuda_t cases[] = {
        {"SHOAL_CUDA_MODULE", "/nonexistent/libshoal_cuda.so", "no CUDA module"},
        {"SHOAL_CUDA_DRIVER", "/nonexistent/libcuda.so.1", "cannot load"},
        {"SHOAL_STANDIN_DEVICES", "0", "no CUDA device"},
    };
    harness_use_transport("shm", TEST_CHUNK);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* Only the stand-in can be told to have no device. */
        if (strcmp(cases[i].name, "SHOAL_STANDIN_DEVICES") == 0 && !getenv("SHOAL_CUDA_DRIVER"))
            continue;
        assert_int_equal(harness_run_ranks(2, rank_no_cuda, (void *)&cases[i], 60), 0);
    }
}

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_cuda),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_allreduce_direct),
        cmocka_unit_test(test_allreduce_shm),
        cmocka_unit_test(test_allreduce_tcp),
        cmocka_unit_test(test_colls_direct),
        cmocka_unit_test(test_colls_shm),
        cmocka_unit_test(test_colls_tcp),
        cmocka_unit_test(test_direct_fallback),
        cmocka_unit_test(test_direct_two_devices),
        cmocka_unit_test(test_direct_vmm),
        cmocka_unit_test(test_auto_model),
        cmocka_unit_test(test_peer_dies),
    };
    /* TEST_FILTER=name runs one case (for debugging). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
