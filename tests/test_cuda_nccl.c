/* The NCCL door on device buffers with streams, as a CUDA program uses it
 * (forked ranks over shared memory and tcp; the driver is the CPU stand-in
 * in make test, the real one in make test-gpu):
 * - ncclCommCuDevice gives the device current at init;
 * - ncclMemAlloc gives device memory that the collectives take, which
 *   ncclCommRegister and ncclCommWindowRegister accept;
 * - a call on a stream returns at once, even with the stream held behind
 *   a gate, and the stream's later work sees its result;
 * - device buffers with the NULL stream use the legacy default stream;
 * - a group of calls (collectives and send/receive) is launched at
 *   ncclGroupEnd: the stream is idle before it;
 * - host buffers with the NULL stream still complete before the call
 *   returns;
 * - ncclPutSignal and ncclWaitSignal on a held stream return at once; the
 *   put sends what the stream wrote before it, and the stream's work after
 *   the wait finds every peer's bytes in the window; in a group they are
 *   queued at ncclGroupEnd. */
#include "cuda_user.h"
#include "harness.h"

#include "nccl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT 5001

#define NCCL_CHECK(call, label)                                                        \
    do {                                                                               \
        ncclResult_t r_ = (call);                                                      \
        RANK_CHECK(r_ == ncclSuccess, label, "%s: %s (%s)", #call,                    \
                   ncclGetErrorString(r_), ncclGetLastError(NULL));                    \
    } while (0)

#define SEG 3001 /* bytes each rank puts to each */

static unsigned char seg_byte(int from, int to, size_t i)
{
    return (unsigned char)harness_mix((uint32_t)(from * 31 + to * 7) ^ (uint32_t)i);
}

/* One-sided calls on a stream, through a symmetric window of device
 * memory: the sources at [0, n SEG), the targets at [n SEG, 2 n SEG). */
static int one_sided(ncclComm_t comm, int rank, int n, void *stream, _Atomic uint32_t *gate)
{
    size_t half = (size_t)n * SEG;
    unsigned char *sym = NULL, *fresh = cu_user_alloc_pinned(half);
    unsigned char *out = cu_user_alloc_pinned(half), *init = malloc(2 * half);
    ncclWindow_t win = NULL;
    RANK_CHECK(init, fail, "out of memory");
    NCCL_CHECK(ncclMemAlloc((void **)&sym, 2 * half), fail);
    NCCL_CHECK(ncclCommWindowRegister(comm, sym, 2 * half, &win, NCCL_WIN_COLL_SYMMETRIC), fail);
    for (size_t i = 0; i < half; i++) {
        fresh[i] = seg_byte(rank, (int)(i / SEG), i % SEG);
        init[i] = (unsigned char)~fresh[i];
        init[half + i] = 0xee;
    }
    cu_user_htod(sym, init, 2 * half);
    /* Every rank's window is ready before any put: a host all-reduce. */
    NCCL_CHECK(ncclAllReduce(out, out, 1, ncclUint8, ncclSum, comm, NULL), fail);
    atomic_store(gate, 0);
    cu_user_gate(stream, (uint32_t *)gate, 1);
    cu_user_copy_async(sym, fresh, half, stream);
    ncclWaitSignalDesc_t d[8];
    for (int q = 0; q < n; q++) {
        NCCL_CHECK(ncclPutSignal(sym + (size_t)q * SEG, SEG, ncclUint8, q, win,
                                 half + (size_t)rank * SEG, 0, 0, 0, comm, (cudaStream_t)stream),
                   fail);
        d[q] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = q};
    }
    NCCL_CHECK(ncclWaitSignal(n, d, comm, (cudaStream_t)stream), fail);
    cu_user_copy_async(out, sym + half, half, stream);
    RANK_CHECK(!cu_user_idle(stream), fail, "the stream passed its gate");
    if (cu_user_is_standin()) {
        cu_user_dtoh(init, sym + half + (size_t)rank * SEG, SEG);
        RANK_CHECK(init[0] == 0xee && init[SEG - 1] == 0xee, fail, "rank %d: the put to itself "
                   "landed before its stream reached it", rank);
    }
    atomic_store(gate, 1);
    cu_user_sync(stream);
    for (size_t i = 0; i < half; i++)
        RANK_CHECK(out[i] == seg_byte((int)(i / SEG), rank, i % SEG), fail, "rank %d: byte %zu "
                   "from rank %zu is %#x", rank, i % SEG, i / SEG, out[i]);
    /* A ring in a group on the stream: put this rank's first segment to
     * the next rank's first target segment, wait for the previous rank's. */
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    ncclWaitSignalDesc_t w = {.opCnt = 1, .peer = prev};
    NCCL_CHECK(ncclAllReduce(out, out, 1, ncclUint8, ncclSum, comm, NULL), fail);
    NCCL_CHECK(ncclGroupStart(), fail);
    NCCL_CHECK(ncclPutSignal(sym, SEG, ncclUint8, next, win, half, 0, 0, 0, comm,
                             (cudaStream_t)stream), fail);
    NCCL_CHECK(ncclWaitSignal(1, &w, comm, (cudaStream_t)stream), fail);
    RANK_CHECK(cu_user_idle(stream), fail, "a grouped one-sided call queued work before "
               "ncclGroupEnd");
    NCCL_CHECK(ncclGroupEnd(), fail);
    cu_user_copy_async(out, sym + half, SEG, stream);
    cu_user_sync(stream);
    for (size_t i = 0; i < SEG; i++)
        RANK_CHECK(out[i] == seg_byte(prev, 0, i), fail, "rank %d: ring byte %zu is %#x", rank,
                   i, out[i]);
    NCCL_CHECK(ncclAllReduce(out, out, 1, ncclUint8, ncclSum, comm, NULL), fail);
    NCCL_CHECK(ncclCommWindowDeregister(comm, win), fail);
    NCCL_CHECK(ncclMemFree(sym), fail);
    cu_user_free_pinned(fresh);
    cu_user_free_pinned(out);
    free(init);
    return 0;
fail:
    return 1;
}

/* arg: the job's ncclUniqueId, made by the door in the parent (whose
 * listener rank 0 inherits); the harness's own id is not the door's. */
static int rank_door(int rank, int n, const shoal_unique_id_t *sid, void *arg)
{
    (void)sid;
    char why[256];
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "%s", why);
    ncclUniqueId id = *(const ncclUniqueId *)arg;
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, n, id, rank), fail);
    int dev = -1;
    NCCL_CHECK(ncclCommCuDevice(comm, &dev), fail);
    RANK_CHECK(dev == 0, fail, "ncclCommCuDevice gave %d", dev);

    const size_t bytes = COUNT * sizeof(float);
    float *in = malloc(bytes), *want = malloc(bytes), *tmp = malloc(bytes), *got = malloc(bytes);
    harness_fill_exact(in, COUNT, rank, SHOAL_FLOAT32, SHOAL_SUM);
    harness_expected(want, tmp, COUNT, n, SHOAL_FLOAT32, SHOAL_SUM);
    void *d = NULL, *after = cu_user_alloc(bytes);
    NCCL_CHECK(ncclMemAlloc(&d, bytes), fail);
    void *stream = cu_user_stream();
    _Atomic uint32_t *gate = cu_user_alloc_pinned(64);
    atomic_store(gate, 0);

    /* Registration and windows take device memory, and the collectives
     * run on registered device buffers as on any others. */
    void *reg = NULL;
    ncclWindow_t win = NULL;
    NCCL_CHECK(ncclCommRegister(comm, d, bytes, &reg), fail);
    NCCL_CHECK(ncclCommWindowRegister(comm, after, bytes, &win, NCCL_WIN_DEFAULT), fail);

    /* Held stream: the call returns, the work behind it waits. */
    cu_user_htod(d, in, bytes);
    cu_user_gate(stream, (uint32_t *)gate, 1);
    NCCL_CHECK(ncclAllReduce(d, d, COUNT, ncclFloat32, ncclSum, comm, (cudaStream_t)stream),
               fail);
    cu_user_copy_async(after, d, bytes, stream);
    RANK_CHECK(!cu_user_idle(stream), fail, "the stream passed its gate");
    /* Nothing ran yet: the call waits for its stream (read by a copy,
     * which only the stand-in runs past a held stream for certain: on a
     * GPU it may queue behind the held work). */
    if (cu_user_is_standin()) {
        cu_user_dtoh(got, d, bytes);
        RANK_CHECK(n == 1 || memcmp(got, in, bytes) == 0, fail, "rank %d: the all-reduce ran "
                   "before its stream reached it", rank);
    }
    atomic_store(gate, 1);
    cu_user_sync(stream);
    cu_user_dtoh(got, after, bytes);
    RANK_CHECK(memcmp(got, want, bytes) == 0, fail, "rank %d: all-reduce on a stream: wrong "
               "result behind the call", rank);

    /* Device buffers and the NULL stream. */
    cu_user_htod(d, in, bytes);
    NCCL_CHECK(ncclAllReduce(d, d, COUNT, ncclFloat32, ncclSum, comm, NULL), fail);
    cu_user_sync(NULL);
    cu_user_dtoh(got, d, bytes);
    RANK_CHECK(memcmp(got, want, bytes) == 0, fail, "rank %d: NULL stream: wrong result", rank);

    /* A group: an all-reduce and a ring shift by send/receive. */
    void *ring_in = cu_user_alloc(bytes), *ring_out = cu_user_alloc(bytes);
    cu_user_htod(d, in, bytes);
    cu_user_htod(ring_in, in, bytes);
    NCCL_CHECK(ncclGroupStart(), fail);
    NCCL_CHECK(ncclAllReduce(d, d, COUNT, ncclFloat32, ncclSum, comm, (cudaStream_t)stream),
               fail);
    if (n > 1) {
        NCCL_CHECK(ncclSend(ring_in, COUNT, ncclFloat32, (rank + 1) % n, comm,
                            (cudaStream_t)stream), fail);
        NCCL_CHECK(ncclRecv(ring_out, COUNT, ncclFloat32, (rank + n - 1) % n, comm,
                            (cudaStream_t)stream), fail);
    }
    RANK_CHECK(cu_user_idle(stream), fail, "a grouped call queued work before ncclGroupEnd");
    NCCL_CHECK(ncclGroupEnd(), fail);
    cu_user_sync(stream);
    cu_user_dtoh(got, d, bytes);
    RANK_CHECK(memcmp(got, want, bytes) == 0, fail, "rank %d: grouped all-reduce", rank);
    if (n > 1) {
        float *prev = malloc(bytes);
        harness_fill_exact(prev, COUNT, (rank + n - 1) % n, SHOAL_FLOAT32, SHOAL_SUM);
        cu_user_dtoh(got, ring_out, bytes);
        RANK_CHECK(memcmp(got, prev, bytes) == 0, fail, "rank %d: grouped receive", rank);
        free(prev);
    }

    /* Host buffers, NULL stream: done when the call returns. */
    memcpy(got, in, bytes);
    NCCL_CHECK(ncclAllReduce(got, got, COUNT, ncclFloat32, ncclSum, comm, NULL), fail);
    RANK_CHECK(memcmp(got, want, bytes) == 0, fail, "rank %d: host all-reduce", rank);

    RANK_CHECK(one_sided(comm, rank, n, stream, gate) == 0, fail, "rank %d: one-sided", rank);
    NCCL_CHECK(ncclCommWindowDeregister(comm, win), fail);
    NCCL_CHECK(ncclCommDeregister(comm, reg), fail);
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async), fail);
    RANK_CHECK(async == ncclSuccess, fail, "async error %s", ncclGetErrorString(async));
    NCCL_CHECK(ncclMemFree(d), fail);
    cu_user_free(after);
    cu_user_free(ring_in);
    cu_user_free(ring_out);
    cu_user_free_pinned((void *)gate);
    cu_user_stream_free(stream);
    NCCL_CHECK(ncclCommDestroy(comm), fail);
    free(in);
    free(want);
    free(tmp);
    free(got);
    return 0;
fail:
    return 1;
}

static void run(const char *transport)
{
    harness_use_transport(transport, 8192);
    static const int ranks[] = {1, 2, 3, 4, 7};
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
        if (harness_quick() && ranks[i] != 3)
            continue;
        ncclUniqueId id;
        assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
        assert_int_equal(harness_run_ranks(ranks[i], rank_door, &id, 120), 0);
    }
}

static void test_door_shm(void **state) { (void)state; run("shm"); }
static void test_door_tcp(void **state) { (void)state; run("tcp"); }

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_door_shm),
        cmocka_unit_test(test_door_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
