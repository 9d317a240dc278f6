/* The NCCL door with SHOAL_COMPRESS=int8 on device buffers (forked ranks
 * over shared memory; the driver is the CPU stand-in in make test, the
 * real one in make test-gpu). Float sums and averages of
 * SHOAL_COMPRESS_MIN bytes or more on device memory go through the
 * stream-ordered compressed all-reduce:
 * - the result is the same bits on every rank, within int8's two-shot
 *   error of the exact sum (nearest rounding: half a step for each
 *   contribution and for the sum), and not exact on two ranks or more;
 * - the codec ran as device kernels (the stand-in counts them);
 * - calls repeat on the communicator's compressor for that size, and a
 *   call behind a held stream still returns at once;
 * - smaller calls, integers and groups stay exact;
 * - with SHOAL_COMPRESS_ALLGATHER=int8, float all-gathers of device
 *   buffers go through the stream-ordered compressed all-gather: every
 *   rank holds the same bits, each block within half an int8 step of its
 *   owner's input and not all exact, float and bfloat16;
 * - with SHOAL_COMPRESS_REDUCESCATTER=int8, float reduce-scatters of
 *   device buffers go through the stream-ordered compressed
 *   reduce-scatter: each rank's block within the two-shot's error of the
 *   exact sum (or average), and not all exact;
 * - ncclCommSuspend with NCCL_SUSPEND_MEM: ncclCommMemStats counts the
 *   compressors' device memory as kept, the suspend fails while a stream
 *   has not reached a staged call yet, leaves nothing releasable, and the
 *   compressed all-reduce works again after ncclCommResume. */
#include "cuda_user.h"
#include "harness.h"

#include "base/dtype.h"
#include "nccl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 5001
#define SMALL 100
#define BLOCK 64 /* the default block of SHOAL_COMPRESS */

#define NCCL_CHECK(call, label)                                                        \
    do {                                                                               \
        ncclResult_t r_ = (call);                                                      \
        RANK_CHECK(r_ == ncclSuccess, label, "%s: %s (%s)", #call,                    \
                   ncclGetErrorString(r_), ncclGetLastError(NULL));                    \
    } while (0)

/* Rank r's value i: signs and magnitudes that vary from block to block. */
static float input_of(int r, size_t i)
{
    uint32_t h = harness_mix((uint32_t)(r * 1000003) ^ (uint32_t)i * 2654435761u);
    float mag = ldexpf(1.0f, (int)((i / 40) % 11) - 5);
    return ((float)(h >> 8) / 16777216.0f - 0.5f) * mag;
}

/* Value i's bound: the sum over the ranks of their block's largest
 * |input| A, times 2.1 / 127 / 2 (each contribution and the sum quantised
 * once, to nearest), plus the narrowing of the result for bfloat16. */
static double bound_of(int n, size_t i, double exact, int bf16)
{
    size_t b0 = i / BLOCK * BLOCK;
    double a = 0;
    for (int r = 0; r < n; r++) {
        double m = 0;
        for (size_t j = b0; j < b0 + BLOCK && j < COUNT; j++) {
            float v = input_of(r, j);
            if (bf16)
                v = shoal_bf16_to_f32(shoal_f32_to_bf16(v));
            m = fmax(m, fabs((double)v));
        }
        a += m;
    }
    return 2.1 * a / 127.0 / 2.0 + (bf16 ? fabs(exact) * 0x1p-7 : fabs(exact) * 0x1p-22) + 1e-30;
}

/* One compressed all-reduce of dt on device memory, checked; its result
 * stays in got (as fp32). */
static int check_one(ncclComm_t comm, void *stream, int rank, int n, ncclDataType_t dt,
                     float *got, int *inexact)
{
    int bf16 = dt == ncclBfloat16;
    size_t es = bf16 ? 2 : 4, bytes = COUNT * es;
    unsigned char *host = malloc(bytes);
    void *d = cu_user_alloc(bytes);
    for (size_t i = 0; i < COUNT; i++) {
        float v = input_of(rank, i);
        if (bf16) {
            uint16_t h = shoal_f32_to_bf16(v);
            memcpy(host + i * 2, &h, 2);
        } else {
            memcpy(host + i * 4, &v, 4);
        }
    }
    cu_user_htod(d, host, bytes);
    NCCL_CHECK(ncclAllReduce(d, d, COUNT, dt, ncclSum, comm, (cudaStream_t)stream), fail);
    cu_user_sync(stream);
    cu_user_dtoh(host, d, bytes);
    for (size_t i = 0; i < COUNT; i++) {
        double exact = 0;
        for (int r = 0; r < n; r++) {
            float v = input_of(r, i);
            exact += bf16 ? shoal_bf16_to_f32(shoal_f32_to_bf16(v)) : v;
        }
        if (bf16) {
            uint16_t h;
            memcpy(&h, host + i * 2, 2);
            got[i] = shoal_bf16_to_f32(h);
        } else {
            memcpy(&got[i], host + i * 4, 4);
        }
        RANK_CHECK(fabs(got[i] - exact) <= bound_of(n, i, exact, bf16), fail,
                   "rank %d value %zu: %.9g, the exact sum %.9g", rank, i, (double)got[i],
                   exact);
        /* Beyond fp32's rounding of a plain sum: int8's steps. */
        if (!bf16)
            *inexact |= fabs(got[i] - exact) > fabs(exact) * 0x1p-16 + 1e-30;
    }
    cu_user_free(d);
    free(host);
    return 0;
fail:
    return 1;
}

/* The device all-gather of COUNT floats a rank (SHOAL_COMPRESS_ALLGATHER=
 * int8), float then bfloat16: every rank the same bits (compared as
 * int32, which is never compressed), block r within half an int8 step of
 * rank r's input (its 64-value block's max |x| / 127 / 2, and bfloat16's
 * rounding), and some value not exact on two ranks or more. */
static int check_gather(ncclComm_t comm, void *stream, int rank, int n)
{
    size_t all = (size_t)COUNT * (size_t)n;
    float *in = malloc(COUNT * 4), *out = malloc(all * 4), *peer = malloc(all * 4 * (size_t)n);
    uint16_t *h = malloc(all * 2);
    void *din = cu_user_alloc(COUNT * 4), *dout = cu_user_alloc(all * 4);
    int inexact = 0;
    RANK_CHECK(in && out && peer && h && din && dout, fail, "out of memory");
    for (int bf = 0; bf < 2; bf++) {
        size_t es = bf ? 2 : 4;
        for (size_t i = 0; i < COUNT; i++) {
            in[i] = input_of(rank, i);
            if (bf) {
                h[i] = shoal_f32_to_bf16(in[i]);
                in[i] = shoal_bf16_to_f32(h[i]);
            }
        }
        cu_user_htod(din, bf ? (void *)h : (void *)in, COUNT * es);
        NCCL_CHECK(ncclAllGather(din, dout, COUNT, bf ? ncclBfloat16 : ncclFloat32, comm,
                                 (cudaStream_t)stream), fail);
        cu_user_sync(stream);
        if (bf) {
            cu_user_dtoh(h, dout, all * 2);
            for (size_t i = 0; i < all; i++)
                out[i] = shoal_bf16_to_f32(h[i]);
        } else {
            cu_user_dtoh(out, dout, all * 4);
        }
        NCCL_CHECK(ncclAllGather(out, peer, all, ncclInt32, comm, NULL), fail);
        for (int r = 0; r < n; r++)
            RANK_CHECK(!memcmp(peer + (size_t)r * all, out, all * 4), fail,
                       "rank %d's all-gather differs from rank %d's", r, rank);
        for (int r = 0; r < n; r++) {
            for (size_t b = 0; b < COUNT; b += BLOCK) {
                size_t end = b + BLOCK < COUNT ? b + BLOCK : COUNT;
                double amax = 0;
                for (size_t i = b; i < end; i++) {
                    float x = input_of(r, i);
                    if (bf)
                        x = shoal_bf16_to_f32(shoal_f32_to_bf16(x));
                    amax = fabs(x) > amax ? fabs(x) : amax;
                }
                for (size_t i = b; i < end; i++) {
                    float x = input_of(r, i);
                    if (bf)
                        x = shoal_bf16_to_f32(shoal_f32_to_bf16(x));
                    double got = out[(size_t)r * COUNT + i], d = fabs(got - x);
                    double bound = amax / 127 / 2 * 1.0001 + (bf ? fabs(x) / 128 : 0) + 1e-30;
                    RANK_CHECK(d <= bound, fail, "block of rank %d value %zu: %g for %g", r, i,
                               got, (double)x);
                    inexact |= d > 0;
                }
            }
        }
    }
    RANK_CHECK(n == 1 || inexact, fail, "every gathered value exact: nothing was compressed");
    cu_user_free(din);
    cu_user_free(dout);
    free(in), free(out), free(peer), free(h);
    return 0;
fail:
    return 1;
}

/* The device reduce-scatter of COUNT floats a rank (SHOAL_COMPRESS_
 * REDUCESCATTER=int8), float sum then bfloat16 average: rank me's block
 * within the two-shot's error of the exact sum (each other rank's
 * contribution quantised once, to nearest: half an int8 step of its block,
 * whose values start at me x COUNT; its own exact), plus bfloat16's
 * rounding, and some value not exact on two ranks or more. */
static int check_scatter(ncclComm_t comm, void *stream, int rank, int n)
{
    size_t all = (size_t)COUNT * (size_t)n, at = (size_t)rank * COUNT;
    float *in = malloc(all * 4), *out = malloc(COUNT * 4);
    uint16_t *h = malloc(all * 2);
    void *din = cu_user_alloc(all * 4), *dout = cu_user_alloc(COUNT * 4);
    int inexact = 0;
    RANK_CHECK(in && out && h && din && dout, fail, "out of memory");
    for (int bf = 0; bf < 2; bf++) {
        size_t es = bf ? 2 : 4;
        for (size_t i = 0; i < all; i++) {
            in[i] = input_of(rank, i);
            h[i] = shoal_f32_to_bf16(in[i]);
        }
        cu_user_htod(din, bf ? (void *)h : (void *)in, all * es);
        NCCL_CHECK(ncclReduceScatter(din, dout, COUNT, bf ? ncclBfloat16 : ncclFloat32,
                                     bf ? ncclAvg : ncclSum, comm, (cudaStream_t)stream), fail);
        cu_user_sync(stream);
        if (bf) {
            cu_user_dtoh(h, dout, COUNT * 2);
            for (size_t i = 0; i < COUNT; i++)
                out[i] = shoal_bf16_to_f32(h[i]);
        } else {
            cu_user_dtoh(out, dout, COUNT * 4);
        }
        for (size_t b = 0; b < COUNT; b += BLOCK) {
            size_t end = b + BLOCK < COUNT ? b + BLOCK : COUNT;
            double err = 0;
            for (int r = 0; r < n; r++) {
                double amax = 0;
                for (size_t i = b; i < end && r != rank; i++) {
                    float x = input_of(r, at + i);
                    x = bf ? shoal_bf16_to_f32(shoal_f32_to_bf16(x)) : x;
                    amax = fabs(x) > amax ? fabs(x) : amax;
                }
                err += amax / 127 / 2 * 1.0001;
            }
            for (size_t i = b; i < end; i++) {
                double exact = 0;
                for (int r = 0; r < n; r++) {
                    float x = input_of(r, at + i);
                    exact += bf ? shoal_bf16_to_f32(shoal_f32_to_bf16(x)) : x;
                }
                if (bf)
                    exact /= n;
                double d = fabs(out[i] - exact);
                double bound = (bf ? err / n + fabs(exact) / 128 : err) + 1e-6 * fabs(exact) +
                               1e-30;
                RANK_CHECK(d <= bound, fail, "%s value %zu: %g for %g (bound %g)",
                           bf ? "bfloat16 avg" : "float sum", i, (double)out[i], exact, bound);
                inexact |= d > 0;
            }
        }
    }
    RANK_CHECK(n == 1 || inexact, fail, "every value exact: nothing was compressed");
    cu_user_free(din);
    cu_user_free(dout);
    free(in), free(out), free(h);
    return 0;
fail:
    return 1;
}

/* ncclCommSuspend with NCCL_SUSPEND_MEM on device work (2.30): the
 * compressors' device memory shows in the statistics as kept (bfloat16's
 * compressor widens on the device), the total as the sum; a stream held
 * before a staged call of the communicator makes the suspend fail and
 * suspends nothing (on two ranks or more: one rank's calls are copies on
 * the stream, which stage nothing); after the suspend nothing releasable
 * is left, and after resume the compressed all-reduce works again. */
static int check_suspend(ncclComm_t comm, void *stream, int rank, int n)
{
    uint64_t freeable = 1, total = 0, kept = 0, suspended = 0;
    float got[COUNT];
    int inexact = 0;
    NCCL_CHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &freeable), fail);
    NCCL_CHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &total), fail);
    NCCL_CHECK(ncclCommMemStats(comm, ncclStatGpuMemPersist, &kept), fail);
    RANK_CHECK((n == 1 || kept > 0) && total == freeable + kept, fail,
               "device memory: releasable %llu, kept %llu, total %llu",
               (unsigned long long)freeable, (unsigned long long)kept,
               (unsigned long long)total);
    if (n > 1) {
        void *d = cu_user_alloc(COUNT * 4);
        _Atomic uint32_t *gate = cu_user_alloc_pinned(64);
        atomic_store(gate, 0);
        cu_user_gate(stream, (uint32_t *)gate, 1);
        /* Integers: never compressed, always staged. */
        NCCL_CHECK(ncclAllReduce(d, d, COUNT, ncclInt32, ncclSum, comm, (cudaStream_t)stream),
                   fail);
        ncclResult_t r = ncclCommSuspend(comm, NCCL_SUSPEND_MEM);
        atomic_store(gate, 1);
        cu_user_sync(stream);
        RANK_CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(comm), "synchronise"),
                   fail, "suspend behind a held stream: %s (%s)", ncclGetErrorString(r),
                   ncclGetLastError(comm));
        cu_user_free(d);
        cu_user_free_pinned((void *)gate);
    }
    NCCL_CHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), fail);
    NCCL_CHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &freeable), fail);
    NCCL_CHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &suspended), fail);
    RANK_CHECK(freeable == 0 && suspended == 1, fail,
               "after the suspend: %llu releasable bytes, suspended %llu",
               (unsigned long long)freeable, (unsigned long long)suspended);
    NCCL_CHECK(ncclCommResume(comm), fail);
    RANK_CHECK(check_one(comm, stream, rank, n, ncclBfloat16, got, &inexact) == 0, fail,
               "bfloat16 after the resume");
    return 0;
fail:
    return 1;
}

static int rank_door(int rank, int n, const shoal_unique_id_t *sid, void *arg)
{
    (void)sid;
    char why[256];
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "%s", why);
    ncclUniqueId id = *(const ncclUniqueId *)arg;
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, n, id, rank), fail);
    void *stream = cu_user_stream();
    float *got = malloc(COUNT * sizeof(float)), *all = malloc(COUNT * sizeof(float) * (size_t)n);
    int inexact = 0;

    /* Twice float (the second on the compressor the first made), then
     * bfloat16; every rank's float result the same bits. */
    for (int k = 0; k < 2; k++)
        RANK_CHECK(check_one(comm, stream, rank, n, ncclFloat32, got, &inexact) == 0, fail,
                   "float, call %d", k);
    /* As int32: a float all-gather of this size would be compressed. */
    NCCL_CHECK(ncclAllGather(got, all, COUNT, ncclInt32, comm, NULL), fail);
    for (int r = 0; r < n; r++)
        RANK_CHECK(memcmp(all + (size_t)r * COUNT, got, COUNT * sizeof(float)) == 0, fail,
                   "rank %d's result differs from rank %d's", r, rank);
    RANK_CHECK(check_one(comm, stream, rank, n, ncclBfloat16, got, &inexact) == 0, fail,
               "bfloat16");
    RANK_CHECK(n == 1 || inexact, fail, "every value within fp32's rounding: nothing was "
               "compressed");
    if (cu_user_is_standin())
        RANK_CHECK(n == 1 || cu_user_launches("shoal_k_codec") > 0, fail,
                   "no codec kernel ran");

    RANK_CHECK(check_gather(comm, stream, rank, n) == 0, fail, "all-gather");
    RANK_CHECK(check_scatter(comm, stream, rank, n) == 0, fail, "reduce-scatter");
    RANK_CHECK(check_suspend(comm, stream, rank, n) == 0, fail, "suspend");

    /* A held stream: the call returns, its work waits. */
    void *d = cu_user_alloc(COUNT * 4);
    _Atomic uint32_t *gate = cu_user_alloc_pinned(64);
    atomic_store(gate, 0);
    cu_user_gate(stream, (uint32_t *)gate, 1);
    NCCL_CHECK(ncclAllReduce(d, d, COUNT, ncclFloat32, ncclAvg, comm, (cudaStream_t)stream),
               fail);
    RANK_CHECK(!cu_user_idle(stream), fail, "the stream passed its gate");
    atomic_store(gate, 1);
    cu_user_sync(stream);

    /* Exact: below SHOAL_COMPRESS_MIN, integers, and inside a group. */
    int32_t ints[SMALL], want[SMALL];
    for (int i = 0; i < SMALL; i++) {
        ints[i] = rank * 1000 + i;
        want[i] = 0;
        for (int r = 0; r < n; r++)
            want[i] += r * 1000 + i;
    }
    float small[SMALL], small_want[SMALL];
    for (int i = 0; i < SMALL; i++) {
        small[i] = (float)(rank + 1) * 0.5f + (float)i;
        small_want[i] = 0;
        for (int r = 0; r < n; r++)
            small_want[i] += (float)(r + 1) * 0.5f + (float)i;
    }
    cu_user_htod(d, ints, sizeof(ints));
    NCCL_CHECK(ncclAllReduce(d, d, SMALL, ncclInt32, ncclSum, comm, (cudaStream_t)stream), fail);
    cu_user_sync(stream);
    cu_user_dtoh(ints, d, sizeof(ints));
    RANK_CHECK(memcmp(ints, want, sizeof(ints)) == 0, fail, "int32 sum not exact");
    cu_user_htod(d, small, sizeof(small));
    NCCL_CHECK(ncclAllReduce(d, d, SMALL, ncclFloat32, ncclSum, comm, (cudaStream_t)stream),
               fail);
    cu_user_sync(stream);
    cu_user_dtoh(small, d, sizeof(small));
    RANK_CHECK(memcmp(small, small_want, sizeof(small)) == 0, fail, "small float sum not exact");
    float *exact_in = malloc(COUNT * 4), *exact_want = malloc(COUNT * 4);
    for (size_t i = 0; i < COUNT; i++) {
        exact_in[i] = (float)(rank + 1) + (float)(i % 7);
        exact_want[i] = 0;
        for (int r = 0; r < n; r++)
            exact_want[i] += (float)(r + 1) + (float)(i % 7);
    }
    cu_user_htod(d, exact_in, COUNT * 4);
    NCCL_CHECK(ncclGroupStart(), fail);
    NCCL_CHECK(ncclAllReduce(d, d, COUNT, ncclFloat32, ncclSum, comm, (cudaStream_t)stream),
               fail);
    NCCL_CHECK(ncclGroupEnd(), fail);
    cu_user_sync(stream);
    cu_user_dtoh(exact_in, d, COUNT * 4);
    RANK_CHECK(memcmp(exact_in, exact_want, COUNT * 4) == 0, fail, "grouped sum not exact");

    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async), fail);
    RANK_CHECK(async == ncclSuccess, fail, "async error %s", ncclGetErrorString(async));
    NCCL_CHECK(ncclCommDestroy(comm), fail);
    cu_user_free(d);
    cu_user_free_pinned((void *)gate);
    cu_user_stream_free(stream);
    free(exact_in);
    free(exact_want);
    free(got);
    free(all);
    return 0;
fail:
    return 1;
}

static void test_door_compress(void **state)
{
    (void)state;
    harness_use_transport("shm", 8192);
    static const int ranks[] = {1, 2, 3, 5};
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
        if (harness_quick() && ranks[i] != 3)
            continue;
        ncclUniqueId id;
        assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
        assert_int_equal(harness_run_ranks(ranks[i], rank_door, &id, 120), 0);
    }
}

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    /* Before the door reads its settings (once per process). */
    setenv("SHOAL_COMPRESS", "int8", 1);
    setenv("SHOAL_COMPRESS_ALLGATHER", "int8", 1);
    setenv("SHOAL_COMPRESS_REDUCESCATTER", "int8", 1);
    setenv("SHOAL_COMPRESS_MIN", "4096", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_door_compress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
