/* The compressed all-gather, reduce-scatter and all-to-all of device
 * tensors (shoal_*_compressed_stream, api/compressor_dev_colls.c), over
 * forked ranks on shared memory and tcp, on the CPU stand-in of
 * tests/cuda/ in make test (the real driver in make test-gpu).
 *
 * - INT8, three calls in a row on one compressor (the residual and the
 *   step carried on the device), float32, float16 and bfloat16, error
 *   feedback on (nearest rounding) and off (stochastic), counts 1, odd
 *   and several blocks, in place and not, SUM and AVG for the
 *   reduce-scatter: each call's result is bitwise the host form's on the
 *   same inputs (a host compressor with the same options beside it; the
 *   host reduce-scatter's AUTO is the two-shot on one host), and so is
 *   the device compressor's checkpoint after the calls, byte for byte;
 * - the codec ran as device kernels (the stand-in counts them);
 * - a rank's info: the bytes it sent are the host form's (on one host),
 *   and the ratio
 *   against the caller's dtype is above 3 for float32 (1.5 for 16 bits);
 * - the same across two faked hosts (4 and 5 ranks), where the
 *   all-to-all's blocks between one host's ranks travel as fp32;
 * - INT4 is refused there, with the reason, and the communicator goes on. */
#include "cuda_user.h"
#include "harness.h"

#include "base/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 16384
#define CALLS 3

static const int all_ranks[] = {1, 2, 3, 5, 8};
static const int quick_ranks[] = {1, 3};

/* Rank r's input value i of call k (a few significant bits, exact in
 * float16 and bfloat16, magnitudes varying by codec block). */
static float input_of(int r, int k, size_t i)
{
    uint32_t h = harness_mix((uint32_t)(r * 7919 + k * 104729) ^ (uint32_t)i * 2654435761u);
    float mag = ldexpf(1.0f, (int)((i / 50) % 9) - 4);
    return (float)((int)(h >> 24) - 128) / 64.0f * mag;
}

static void fill(unsigned char *buf, shoal_dtype_t dt, int rank, int call, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = input_of(rank, call, i);
        if (dt == SHOAL_FLOAT32) {
            memcpy(buf + i * 4, &f, 4);
        } else {
            uint16_t h = dt == SHOAL_FLOAT16 ? shoal_f32_to_f16(f) : shoal_f32_to_bf16(f);
            memcpy(buf + i * 2, &h, 2);
        }
    }
}

typedef struct {
    shoal_compress_coll_t coll;
    shoal_dtype_t dtype;
    size_t count;
    int ef, inplace;
    shoal_op_t op;
    shoal_compress_algo_t algo;
} dcase_t;

/* What a run of ranks tests: a collective, on faked hosts (1: none). */
typedef struct {
    shoal_compress_coll_t coll;
    int hosts;
} run_arg_t;

static shoal_status_t call_dev(shoal_compressor_t c, const dcase_t *dc, const void *in,
                               void *out, shoal_compress_info_t *info, void *stream)
{
    switch (dc->coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        return shoal_allgather_compressed_stream(c, in, out, info, stream);
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        return shoal_reduce_scatter_compressed_stream(c, in, out, dc->op, info, stream);
    default:
        return shoal_alltoall_compressed_stream(c, in, out, info, stream);
    }
}

static shoal_status_t call_host(shoal_compressor_t c, const dcase_t *dc, const void *in,
                                void *out, shoal_compress_info_t *info)
{
    switch (dc->coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        return shoal_allgather_compressed(c, in, out, info);
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        return shoal_reduce_scatter_compressed(c, in, out, dc->op, info);
    default:
        return shoal_alltoall_compressed(c, in, out, info);
    }
}

/* One case: CALLS calls on a device compressor and on a host one beside
 * it, the results and then the checkpoints compared byte for byte. */
static int run_case(shoal_comm_t comm, void *stream, int rank, int n, int hosts,
                    const dcase_t *dc)
{
    size_t es = shoal_dtype_bytes(dc->dtype), all = dc->count * (size_t)n;
    size_t in = (dc->coll == SHOAL_COMPRESS_COLL_ALLGATHER ? dc->count : all) * es;
    size_t out = (dc->coll == SHOAL_COMPRESS_COLL_REDUCE_SCATTER ? dc->count : all) * es;
    size_t big = in > out ? in : out;
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    o.coll = dc->coll;
    o.error_feedback = dc->ef;
    o.stochastic = !dc->ef;
    o.seed = 5;
    o.algo = dc->algo;
    shoal_compressor_t dev = NULL, host = NULL;
    RANK_CHECK(shoal_compressor_create(comm, &o, dc->count, dc->dtype, NULL, &dev) == SHOAL_OK &&
                   shoal_compressor_create(comm, &o, dc->count, dc->dtype, NULL, &host) ==
                       SHOAL_OK,
               fail, "create: %s", shoal_comm_last_error(comm));
    unsigned char *hin = malloc(big), *hout = malloc(big), *hdev = malloc(big);
    unsigned char *din = cu_user_alloc(big), *dbuf = dc->inplace ? NULL : cu_user_alloc(big);
    RANK_CHECK(hin && hout && hdev && din && (dc->inplace || dbuf), fail, "out of memory");
    /* In place: the reduce-scatter's result is this rank's block of the
     * input, the all-to-all's the input itself. */
    size_t at = dc->coll == SHOAL_COMPRESS_COLL_REDUCE_SCATTER ? (size_t)rank * out : 0;
    unsigned char *dout = dc->inplace ? din + at : dbuf;
    for (int t = 0; t < CALLS; t++) {
        fill(hin, dc->dtype, rank, t, in / es);
        cu_user_htod(din, hin, in);
        shoal_compress_info_t info, hinfo;
        RANK_CHECK(call_dev(dev, dc, din, dout, &info, stream) == SHOAL_OK, fail,
                   "device call: %s", shoal_comm_last_error(comm));
        cu_user_sync(stream);
        cu_user_dtoh(hdev, dout, out);
        unsigned char *hres = dc->inplace ? hin + at : hout;
        RANK_CHECK(call_host(host, dc, hin, hres, &hinfo) == SHOAL_OK, fail,
                   "host call: %s", shoal_comm_last_error(comm));
        RANK_CHECK(!memcmp(hdev, hres, out), fail,
                   "coll %d count %zu dtype %d ef %d op %d in place %d call %d: the device's "
                   "result differs from the host's", (int)dc->coll, dc->count, (int)dc->dtype,
                   dc->ef, (int)dc->op, dc->inplace, t);
        RANK_CHECK(info.step == (uint64_t)t, fail, "info step %llu, call %d",
                   (unsigned long long)info.step, t);
        /* On one host both move the same wires the same way; across
         * hosts the device form's byte all-to-all is the hierarchy's,
         * whose relays count too. The ratio: against the plain bytes of
         * the caller's dtype. */
        RANK_CHECK(hosts > 1 || n == 1 || dc->count < 10000 || info.ratio > 0.75 * (double)es,
                   fail, "coll %d count %zu dtype %d: ratio %.2f", (int)dc->coll, dc->count,
                   (int)dc->dtype, info.ratio);
        RANK_CHECK(hosts > 1 || info.bytes_sent == hinfo.bytes_sent, fail, "bytes sent %llu, host %llu",
                   (unsigned long long)info.bytes_sent,
                   (unsigned long long)hinfo.bytes_sent);
    }
    size_t sb = 0, sb2 = 0;
    RANK_CHECK(shoal_compressor_state_size(dev, &sb) == SHOAL_OK &&
                   shoal_compressor_state_size(host, &sb2) == SHOAL_OK && sb == sb2,
               fail, "state sizes %zu and %zu", sb, sb2);
    unsigned char *s1 = malloc(sb), *s2 = malloc(sb);
    RANK_CHECK(s1 && s2 && shoal_compressor_get_state(dev, s1, sb) == SHOAL_OK &&
                   shoal_compressor_get_state(host, s2, sb) == SHOAL_OK && !memcmp(s1, s2, sb),
               fail, "coll %d count %zu dtype %d: the device's checkpoint differs from the "
               "host's", (int)dc->coll, dc->count, (int)dc->dtype);
    free(s1), free(s2), free(hin), free(hout), free(hdev);
    if (dbuf)
        cu_user_free(dbuf);
    cu_user_free(din);
    RANK_CHECK(shoal_compressor_destroy(dev) == SHOAL_OK &&
                   shoal_compressor_destroy(host) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static int rank_open(int rank, shoal_comm_t *comm, int nranks, const shoal_unique_id_t *id)
{
    char why[256];
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "rank %d: %s", rank, why);
    RANK_CHECK(shoal_comm_init(nranks, id, rank, comm) == SHOAL_OK, fail, "init");
    return 0;
fail:
    return 1;
}

/* arg: a run_arg_t. Every combination of count, dtype and variant (v 0:
 * error feedback, nearest, SUM, out of place; v 1: none, stochastic, AVG,
 * in place); the all-to-all keeps no residual. Across faked hosts the
 * all-to-all's blocks between one host's ranks travel as fp32, and the
 * host reduce-scatter is asked for the two-shot (AUTO there is the
 * hierarchy's, which the device form does not run). */
static int rank_colls(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const run_arg_t *ra = arg;
    shoal_compress_coll_t coll = ra->coll;
    shoal_comm_t comm;
    if (ra->hosts > 1)
        harness_split_hosts(rank, nranks, ra->hosts);
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    static const size_t counts[] = {1, 1001, 40000};
    static const shoal_dtype_t dts[] = {SHOAL_FLOAT32, SHOAL_BFLOAT16, SHOAL_FLOAT16};
    unsigned long k0 = cu_user_launches("shoal_k_codec");
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
        for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
            for (int v = 0; v < 2; v++) {
                dcase_t dc = {.coll = coll, .dtype = dts[d], .count = counts[k],
                              .ef = v == 0 && coll != SHOAL_COMPRESS_COLL_ALLTOALL,
                              .inplace = v == 1, .op = v == 1 ? SHOAL_AVG : SHOAL_SUM};
                if (ra->hosts > 1 && coll == SHOAL_COMPRESS_COLL_REDUCE_SCATTER)
                    dc.algo = SHOAL_COMPRESS_ALGO_TWO_SHOT;
                /* The all-gather's output is larger than its input: in
                 * place means the input inside it, which the host form
                 * does not take from a separate buffer here. */
                if (coll == SHOAL_COMPRESS_COLL_ALLGATHER)
                    dc.inplace = 0;
                if (run_case(comm, stream, rank, nranks, ra->hosts, &dc))
                    return 1;
            }
    RANK_CHECK(!cu_user_is_standin() || (nranks == 1 && coll != SHOAL_COMPRESS_COLL_ALLGATHER) ||
                   cu_user_launches("shoal_k_codec") > k0, fail,
               "the codec did not run on the device");
    /* INT4 has no device kernels: refused, with the reason. */
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT4);
    o.coll = coll;
    o.error_feedback = 0;
    shoal_compressor_t c4;
    void *b = cu_user_alloc(64 * 4 * (size_t)nranks);
    RANK_CHECK(shoal_compressor_create(comm, &o, 64, SHOAL_FLOAT32, NULL, &c4) == SHOAL_OK,
               fail, "create int4: %s", shoal_comm_last_error(comm));
    dcase_t dc4 = {.coll = coll, .dtype = SHOAL_FLOAT32, .count = 64, .op = SHOAL_SUM};
    shoal_status_t s = call_dev(c4, &dc4, b, b, NULL, stream);
    RANK_CHECK(s == SHOAL_ERR_UNSUPPORTED && strstr(shoal_comm_last_error(comm), "INT8"), fail,
               "int4 on the device: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    RANK_CHECK(shoal_compressor_destroy(c4) == SHOAL_OK, fail, "destroy int4");
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier after the refusal: %s",
               shoal_comm_last_error(comm));
    cu_user_free(b);
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "comm destroy");
    return 0;
fail:
    return 1;
}

static void run_coll(shoal_compress_coll_t coll, const char *transport, int max_ranks)
{
    harness_use_transport(transport, TEST_CHUNK);
    int quick = harness_quick();
    const int *ranks = quick ? quick_ranks : all_ranks;
    size_t n = quick ? 2 : 5;
    run_arg_t arg = {.coll = coll, .hosts = 1};
    for (size_t i = 0; i < n; i++) {
        if (ranks[i] <= max_ranks)
            assert_int_equal(harness_run_ranks(ranks[i], rank_colls, &arg, 240), 0);
    }
}

/* 4 and 5 ranks on two faked hosts. */
static void test_hosts(void **state)
{
    (void)state;
    static const int ranks[] = {4, 5};
    harness_use_transport("shm", TEST_CHUNK);
    for (int c = 0; c < 2; c++) {
        run_arg_t arg = {.coll = c ? SHOAL_COMPRESS_COLL_ALLTOALL
                                   : SHOAL_COMPRESS_COLL_REDUCE_SCATTER,
                         .hosts = 2};
        for (size_t i = 0; i < (harness_quick() ? 1 : 2); i++)
            assert_int_equal(harness_run_ranks(ranks[i], rank_colls, &arg, 240), 0);
    }
}

static void test_allgather(void **state)
{
    (void)state;
    run_coll(SHOAL_COMPRESS_COLL_ALLGATHER, "shm", 5);
}

static void test_reduce_scatter(void **state)
{
    (void)state;
    run_coll(SHOAL_COMPRESS_COLL_REDUCE_SCATTER, "shm", 8);
}

static void test_alltoall(void **state)
{
    (void)state;
    run_coll(SHOAL_COMPRESS_COLL_ALLTOALL, "shm", 8);
}

static void test_reduce_scatter_tcp(void **state)
{
    (void)state;
    run_coll(SHOAL_COMPRESS_COLL_REDUCE_SCATTER, "tcp", 3);
}

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allgather),
        cmocka_unit_test(test_reduce_scatter),
        cmocka_unit_test(test_alltoall),
        cmocka_unit_test(test_reduce_scatter_tcp),
        cmocka_unit_test(test_hosts),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
