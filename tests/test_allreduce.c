/* All-reduce against a scalar reference: every dtype x op, rank counts 1..8,
 * counts 0, 1, odd and several pipeline loops, in-place and out-of-place,
 * over shared memory and over tcp; the bitwise and logical ops on the
 * integer types. Inputs are chosen so that every partial
 * result is exact in the dtype, which makes the expected output independent
 * of the reduction order; a separate case with random floats checks that all
 * ranks get bitwise identical results. */
#include "harness.h"

#include "algos/reduce.h"
#include "base/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096

static int check_one(shoal_comm_t comm, int rank, int nranks, size_t count, shoal_dtype_t dt,
                     shoal_op_t op, int in_place, unsigned char *a, unsigned char *b,
                     unsigned char *want, unsigned char *tmp)
{
    size_t es;
    shoal_dtype_size(dt, &es);
    size_t bytes = count * es;
    const unsigned char guard = 0xa5;
    harness_fill_exact(a, count, rank, dt, op);
    memset(b, guard, bytes + 64);
    void *send = a, *recv = in_place ? a : b;
    shoal_status_t s = shoal_allreduce(count ? send : NULL, count ? recv : NULL, count, dt, op, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: allreduce %s/%s count %zu: %s (%s)", rank,
               shoal_dtype_name(dt), shoal_op_name(op), count, shoal_status_string(s),
               shoal_comm_last_error(comm));
    harness_expected(want, tmp, count, nranks, dt, op);
    const unsigned char *got = recv;
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(got[i] == want[i], fail,
                   "rank %d/%d %s %s count %zu %s: byte %zu (element %zu) is %#x, want %#x",
                   rank, nranks, shoal_dtype_name(dt), shoal_op_name(op), count,
                   in_place ? "in-place" : "out-of-place", i, i / es, got[i], want[i]);
    if (!in_place) {
        for (size_t i = bytes; i < bytes + 64; i++)
            RANK_CHECK(b[i] == guard, fail, "rank %d: write past the end at byte %zu", rank, i);
    }
    return 0;
fail:
    return 1;
}

typedef struct {
    const char *transport; /* "shm" or "tcp" */
} case_t;

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    size_t loop_elems = (size_t)nranks * TEST_CHUNK; /* one ring loop of int8 */
    const size_t counts[] = {0, 1, 17, 2 * loop_elems + 333};
    size_t max_bytes = counts[3] * 8;
    unsigned char *a = malloc(max_bytes), *b = malloc(max_bytes + 64);
    unsigned char *want = malloc(max_bytes), *tmp = malloc(max_bytes);
    RANK_CHECK(a && b && want && tmp, fail, "out of memory");
    shoal_dtype_t dts[SHOAL_DTYPE_COUNT];
    int ndt = harness_dtypes(dts);
    for (int t = 0; t < ndt; t++)
        for (int op = 0; op < SHOAL_OP_COUNT; op++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (int in_place = 0; in_place < 2; in_place++)
                    if (check_one(comm, rank, nranks, counts[c], dts[t], (shoal_op_t)op,
                                  in_place, a, b, want, tmp))
                        return 1;
    /* The bitwise and logical ops, on the integer types. */
    for (int t = 0; t < ndt; t++)
        for (int op = SHOAL_BAND; op < SHOAL_BITOP_END && shoal_dtype_is_int(dts[t]); op++)
            for (size_t c = 1; c < sizeof(counts) / sizeof(counts[0]); c += 2)
                if (check_one(comm, rank, nranks, counts[c], dts[t], (shoal_op_t)op, c == 3, a,
                              b, want, tmp))
                    return 1;
    /* Random floats: inexact sums, so only agreement between ranks is due. */
    size_t n = counts[3];
    float *f = (float *)a;
    for (size_t i = 0; i < n; i++)
        f[i] = (float)harness_mix((uint32_t)(rank * 7919 + (int)i)) / 4294967296.0f - 0.5f;
    s = shoal_allreduce(f, b, n, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "random allreduce: %s", shoal_status_string(s));
    RANK_CHECK(harness_same_bytes(comm, b, n * sizeof(float)), fail,
               "rank %d: results differ between ranks", rank);
    free(a);
    free(b);
    free(want);
    free(tmp);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void run_matrix(const char *transport, int nranks)
{
    if (!harness_ranks_wanted(nranks))
        return;
    char chunk[32];
    snprintf(chunk, sizeof(chunk), "%d", TEST_CHUNK);
    harness_setenv("SHOAL_CHUNK_SIZE", chunk);
    harness_setenv("SHOAL_SHM_ENABLE", strcmp(transport, "shm") ? "n" : "y");
    assert_int_equal(harness_run_ranks(nranks, rank_matrix, NULL, 600), 0);
}

#define MATRIX_TEST(tl, n)                                                    \
    static void test_##tl##_##n(void **state)                                 \
    {                                                                         \
        (void)state;                                                          \
        run_matrix(#tl, n);                                                   \
    }
MATRIX_TEST(shm, 1) MATRIX_TEST(shm, 2) MATRIX_TEST(shm, 3) MATRIX_TEST(shm, 4)
MATRIX_TEST(shm, 5) MATRIX_TEST(shm, 6) MATRIX_TEST(shm, 7) MATRIX_TEST(shm, 8)
MATRIX_TEST(tcp, 2) MATRIX_TEST(tcp, 3) MATRIX_TEST(tcp, 4) MATRIX_TEST(tcp, 5)
MATRIX_TEST(tcp, 6) MATRIX_TEST(tcp, 7) MATRIX_TEST(tcp, 8)

/* Default pipeline size with several loops of real-sized pieces. */
static int rank_large(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t n = (size_t)5 << 20; /* 20 MiB of float */
    float *x = malloc(n * sizeof(float));
    RANK_CHECK(x, fail, "out of memory");
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i + (size_t)rank) % 7);
    RANK_CHECK(shoal_allreduce(x, x, n, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "allreduce");
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < nranks; r++)
            want += (float)((i + (size_t)r) % 7);
        RANK_CHECK(x[i] == want, fail, "element %zu is %g, want %g", i, x[i], want);
    }
    free(x);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_large_default_chunk(void **state)
{
    (void)state;
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
    assert_int_equal(harness_run_ranks(3, rank_large, NULL, 600), 0);
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    assert_int_equal(harness_run_ranks(2, rank_large, NULL, 600), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_1), cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3), cmocka_unit_test(test_shm_4),
        cmocka_unit_test(test_shm_5), cmocka_unit_test(test_shm_6),
        cmocka_unit_test(test_shm_7), cmocka_unit_test(test_shm_8),
        cmocka_unit_test(test_tcp_2), cmocka_unit_test(test_tcp_3),
        cmocka_unit_test(test_tcp_4), cmocka_unit_test(test_tcp_5),
        cmocka_unit_test(test_tcp_6), cmocka_unit_test(test_tcp_7),
        cmocka_unit_test(test_tcp_8), cmocka_unit_test(test_large_default_chunk),
    };
    return cmocka_run_group_tests_name("allreduce", tests, NULL, NULL);
}
