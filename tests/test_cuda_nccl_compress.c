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
 * - smaller calls, integers and groups stay exact. */
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
    NCCL_CHECK(ncclAllGather(got, all, COUNT, ncclFloat32, comm, NULL), fail);
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
    setenv("SHOAL_COMPRESS_MIN", "4096", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_door_compress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
