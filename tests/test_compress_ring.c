/* The compressed ring all-reduce (core/compress_call.h, algos/ring_codec.c)
 * with the int8 codec, over shared memory and over tcp, rank counts 1..8,
 * counts 0, 1, 63, 64, 65, odd and several pipeline loops (4 KiB pieces,
 * and one run with the default piece size), blocks of 32, 64 and 128,
 * nearest and stochastic rounding:
 * - every rank's result (and its in-place twin) is bitwise the same;
 * - the result is within the codec's error of the exact sum, computed in
 *   double by a scalar reference from every rank's input. Tolerance: value
 *   i is quantised once per rank, each time with an error below its
 *   block's scale (half of it for nearest), and a block's scale at any hop
 *   is amax / 127 of a partial sum, whose magnitude is at most
 *   A = sum over ranks of the block's largest |input| (plus the errors so
 *   far, at most n / 127 of A): so |result - exact| <= n * 1.1 * A / 127;
 * - the residuals, summed over the ranks, are the exact sum minus the
 *   result, up to fp32 rounding (one rounding of a partial sum per hop,
 *   tolerance 4 n A 2^-24);
 * - AVG is the SUM result times 1/n in fp32, bit for bit;
 * - a compressed all-reduce against a plain one fails with
 *   SHOAL_ERR_MISMATCH and never hangs;
 * - bad arguments are SHOAL_ERR_INVALID_ARG and leave the communicator usable.
 * The dry simulator is not covered here yet. */
#include "harness.h"

#include "algos/reduce.h"
#include "compress/codec.h"
#include "core/compress_call.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TEST_CHUNK 4096

/* Rank r's input value i: random signs and magnitudes that vary from block
 * to block by up to 2^12, so that scales differ. */
static float input(int r, size_t i)
{
    uint32_t h = harness_mix((uint32_t)(r * 1000003) ^ (uint32_t)i * 2654435761u);
    float mag = ldexpf(1.0f, (int)((i / 40) % 13) - 6);
    return ((float)(h >> 8) / 16777216.0f - 0.5f) * mag;
}

typedef struct {
    size_t count, cap;
    float *x, *y, *y2, *res, *all_res;
    double *exact, *absmax;
} bufs_t;

/* The exact sum and, per value, A of its block (see the header). */
static void reference(bufs_t *b, int nranks, size_t block)
{
    for (size_t i = 0; i < b->count; i++)
        b->exact[i] = 0;
    for (size_t s = 0; s < b->count; s += block) {
        size_t e = s + block < b->count ? s + block : b->count;
        double a = 0;
        for (int r = 0; r < nranks; r++) {
            double m = 0;
            for (size_t i = s; i < e; i++) {
                double v = input(r, i);
                b->exact[i] += v;
                m = fabs(v) > m ? fabs(v) : m;
            }
            a += m;
        }
        for (size_t i = s; i < e; i++)
            b->absmax[i] = a;
    }
}

static int check_codec(shoal_comm_t comm, int rank, int nranks, bufs_t *b,
                       const shoal_codec_t *c)
{
    size_t count = b->count;
    const char *rn = c->round == SHOAL_ROUND_NEAREST ? "nearest" : "stochastic";
    for (size_t i = 0; i < count; i++)
        b->x[i] = input(rank, i);
    for (size_t i = 0; i < count; i++)
        b->res[i] = NAN;
    shoal_status_t s = shoal_allreduce_codec(comm, b->x, b->y, count, SHOAL_FLOAT32, SHOAL_SUM,
                                             c, b->res);
    RANK_CHECK(s == SHOAL_OK, "rank %d: codec allreduce of %zu (block %zu %s): %s (%s)", rank,
               count, c->block, rn, shoal_status_string(s), shoal_comm_last_error(comm));
    RANK_CHECK(harness_same_bytes(comm, b->y, count * sizeof(float)),
               "rank %d: results differ between ranks (count %zu block %zu %s)", rank, count,
               c->block, rn);
    /* In place, no residual: the same bits. */
    memcpy(b->y2, b->x, count * sizeof(float));
    s = shoal_allreduce_codec(comm, b->y2, b->y2, count, SHOAL_FLOAT32, SHOAL_SUM, c, NULL);
    RANK_CHECK(s == SHOAL_OK, "in-place: %s", shoal_status_string(s));
    RANK_CHECK(!memcmp(b->y, b->y2, count * sizeof(float)),
               "rank %d: in-place result differs (count %zu)", rank, count);

    reference(b, nranks, c->block);
    s = shoal_allgather(b->res, b->all_res, count, SHOAL_FLOAT32, comm);
    RANK_CHECK(s == SHOAL_OK, "allgather of residuals: %s", shoal_status_string(s));
    double n = nranks;
    for (size_t i = 0; i < count; i++) {
        double a = b->absmax[i], err = (double)b->y[i] - b->exact[i];
        RANK_CHECK(fabs(err) <= n * 1.1 * a / 127,
                   "rank %d/%d count %zu block %zu %s: value %zu is %.9g, exact %.9g, "
                   "A %.9g", rank, nranks, count, c->block, rn, i, b->y[i], b->exact[i], a);
        double sum_res = 0;
        for (int r = 0; r < nranks; r++)
            sum_res += b->all_res[(size_t)r * count + i];
        RANK_CHECK(nranks > 1 || sum_res == 0, "single rank: residual %zu is %g", i, sum_res);
        RANK_CHECK(fabs(sum_res + err) <= 4 * n * a * 0x1p-24,
                   "rank %d/%d count %zu block %zu %s: value %zu: residuals sum to %.9g, "
                   "exact - result is %.9g", rank, nranks, count, c->block, rn, i, sum_res,
                   -err);
    }

    /* AVG: the same wire, the sum times 1/n. */
    s = shoal_allreduce_codec(comm, b->x, b->y2, count, SHOAL_FLOAT32, SHOAL_AVG, c, NULL);
    RANK_CHECK(s == SHOAL_OK, "avg: %s", shoal_status_string(s));
    shoal_avg_finish_ref(b->y, b->y, count, SHOAL_FLOAT32, nranks);
    RANK_CHECK(!memcmp(b->y, b->y2, count * sizeof(float)),
               "rank %d: AVG is not SUM / %d (count %zu)", rank, nranks, count);
    return 0;
}

static int alloc_bufs(bufs_t *b, size_t cap, int nranks)
{
    b->cap = cap;
    b->x = malloc(cap * sizeof(float));
    b->y = malloc(cap * sizeof(float));
    b->y2 = malloc(cap * sizeof(float));
    b->res = malloc(cap * sizeof(float));
    b->all_res = malloc(cap * (size_t)nranks * sizeof(float));
    b->exact = malloc(cap * sizeof(double));
    b->absmax = malloc(cap * sizeof(double));
    return b->x && b->y && b->y2 && b->res && b->all_res && b->exact && b->absmax;
}

static void free_bufs(bufs_t *b)
{
    free(b->x);
    free(b->y);
    free(b->y2);
    free(b->res);
    free(b->all_res);
    free(b->exact);
    free(b->absmax);
}

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const size_t *counts = arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, "init: %s", shoal_status_string(s));
    size_t most = 0;
    for (size_t k = 0; counts[k] != SIZE_MAX; k++)
        most = counts[k] > most ? counts[k] : most;
    bufs_t b;
    RANK_CHECK(alloc_bufs(&b, most ? most : 1, nranks), "out of memory");
    static const size_t blocks[] = {32, 64, 128};
    for (size_t k = 0; counts[k] != SIZE_MAX; k++) {
        for (size_t bl = 0; bl < 3; bl++) {
            for (int rd = 0; rd < 2; rd++) {
                shoal_codec_t c = {.ops = &shoal_codec_int8, .block = blocks[bl],
                                   .round = rd ? SHOAL_ROUND_STOCHASTIC : SHOAL_ROUND_NEAREST,
                                   .seed = 42, .step = counts[k]};
                b.count = counts[k];
                if (check_codec(comm, rank, nranks, &b, &c))
                    return 1;
            }
        }
    }
    free_bufs(&b);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, "destroy");
    return 0;
}

/* Several loops of 4 KiB pieces at 8 ranks: a piece holds 3616 values of
 * blocks of 32 (113 blocks of 36 B). */
static const size_t small_counts[] = {0, 1, 63, 64, 65, 1001, 3 * 8 * 3616 + 77, SIZE_MAX};

static void run_matrix(const char *transport, int nranks)
{
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_matrix, (void *)small_counts, 600), 0);
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

/* The default piece size, several loops of it. */
static const size_t large_counts[] = {2000005, SIZE_MAX};

static void test_default_chunk(void **state)
{
    (void)state;
    harness_use_transport("shm", 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(harness_run_ranks(3, rank_matrix, (void *)large_counts, 600), 0);
    harness_use_transport("tcp", 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(harness_run_ranks(2, rank_matrix, (void *)large_counts, 600), 0);
}

/* Rank 0 runs a plain all-reduce, the others the compressed one: each
 * rank's status lands in shared memory for the parent to look at. */
static int rank_mismatch(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    int *status = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, "init");
    size_t count = 5000;
    float *x = calloc(count, sizeof(float)), *y = calloc(count, sizeof(float));
    RANK_CHECK(x && y, "out of memory");
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 64, .round = SHOAL_ROUND_NEAREST};
    shoal_status_t s =
        rank == 0 ? shoal_allreduce(x, y, count, SHOAL_FLOAT32, SHOAL_SUM, comm)
                  : shoal_allreduce_codec(comm, x, y, count, SHOAL_FLOAT32, SHOAL_SUM, &c, NULL);
    status[rank] = (int)s;
    free(x);
    free(y);
    shoal_comm_abort(comm);
    return 0;
}

static void run_mismatch(const char *transport, int nranks)
{
    int *status = mmap(NULL, 8 * sizeof(int), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(status != MAP_FAILED);
    for (int r = 0; r < 8; r++)
        status[r] = -1;
    harness_use_transport(transport, TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "5s");
    assert_int_equal(harness_run_ranks(nranks, rank_mismatch, status, 60), 0);
    int mismatches = 0;
    for (int r = 0; r < nranks; r++) {
        assert_int_not_equal(status[r], SHOAL_OK);
        mismatches += status[r] == SHOAL_ERR_MISMATCH;
    }
    assert_true(mismatches > 0);
    munmap(status, 8 * sizeof(int));
}

static void test_mismatch(void **state)
{
    (void)state;
    run_mismatch("shm", 2);
    run_mismatch("shm", 3);
    run_mismatch("tcp", 2);
    run_mismatch("tcp", 3);
}

static int rank_bad_args(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, "init");
    float x[100], y[100], res[100];
    double d[100];
    for (int i = 0; i < 100; i++)
        x[i] = (float)(i + rank);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 32, .round = SHOAL_ROUND_NEAREST};
    shoal_codec_t bad_block = c, bad_round = c;
    bad_block.block = 48;
    bad_round.round = (shoal_round_t)7;
    struct {
        const char *what;
        shoal_status_t s;
    } cases[] = {
        {"float64", shoal_allreduce_codec(comm, d, d, 100, SHOAL_FLOAT64, SHOAL_SUM, &c, NULL)},
        {"int32", shoal_allreduce_codec(comm, x, y, 100, SHOAL_INT32, SHOAL_SUM, &c, NULL)},
        {"max", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_MAX, &c, NULL)},
        {"prod", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_PROD, &c, NULL)},
        {"block 48", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                           &bad_block, NULL)},
        {"round 7", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                          &bad_round, NULL)},
        {"NULL codec", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, NULL,
                                             NULL)},
        {"residual = recvbuf", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                                     &c, y)},
        {"NULL sendbuf", shoal_allreduce_codec(comm, NULL, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c,
                                               NULL)},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        RANK_CHECK(cases[k].s == SHOAL_ERR_INVALID_ARG, "rank %d: %s gave %s", rank,
                   cases[k].what, shoal_status_string(cases[k].s));
    /* Still usable: a good call, checked against its exact sum. */
    shoal_status_t s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, res);
    RANK_CHECK(s == SHOAL_OK, "good call after bad ones: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    s = shoal_allreduce(x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, "plain call after bad ones: %s", shoal_status_string(s));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, "destroy");
    return 0;
}

static void test_bad_args(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_bad_args, NULL, 60), 0);
    assert_int_equal(harness_run_ranks(3, rank_bad_args, NULL, 60), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_bad_args, NULL, 60), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_shm_1), cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3), cmocka_unit_test(test_shm_4),
        cmocka_unit_test(test_shm_5), cmocka_unit_test(test_shm_6),
        cmocka_unit_test(test_shm_7), cmocka_unit_test(test_shm_8),
        cmocka_unit_test(test_tcp_2), cmocka_unit_test(test_tcp_3),
        cmocka_unit_test(test_tcp_4), cmocka_unit_test(test_tcp_5),
        cmocka_unit_test(test_tcp_6), cmocka_unit_test(test_tcp_7),
        cmocka_unit_test(test_tcp_8),
        cmocka_unit_test(test_default_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
