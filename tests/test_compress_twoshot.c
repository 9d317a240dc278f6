/* The compressed two-shot all-reduce (algos/twoshot_codec.c) with the int8
 * codec, over shared memory and over tcp, rank counts 1..8, counts 0, 1,
 * 63, 64, 65, 1001 and several pipeline loops of 4 KiB pieces (86861), and
 * a multi-MB count with the default piece size, blocks of 32, 64 and 128,
 * nearest and stochastic rounding, each through the reference check of
 * compress_ref.h: bitwise the same result on every rank and in place,
 * within the two-shot's bound (each contribution and the sum quantised
 * once: f * 2.1 * A / 127, where the ring's grows with n) of a double
 * reference, residuals that add up to the error, AVG as SUM / n.
 *
 * And the choice of schedule (shoal_codec_algo_select): AUTO is the ring
 * on up to 8 ranks of one host and the two-shot beyond, the ring for the
 * ternary codec whatever the rank count, the hierarchical one across
 * hosts; checked on the selection function for every case, and end to end
 * by AUTO giving bitwise the result of the schedule it names on 3 and 9
 * ranks. */
#include "compress_ref.h"

#include "algos/algo.h"
#include "core/comm.h"

#define TEST_CHUNK 4096

/* One rank of the matrix over counts (cref_rank_matrix). */
static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    cref_matrix_t m = {.counts = arg, .algo = SHOAL_COMPRESS_ALGO_TWO_SHOT, .sched = CREF_TWO_SHOT,
                       .ternary = 0};
    return cref_rank_matrix(rank, nranks, id, &m);
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

/* The default piece size, several loops of it (8 MB of values). */
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

/* The name of the schedule AUTO (or algo) picks for codec ops on nranks
 * ranks of nhosts hosts; only the fields the choice reads are set. */
static const char *chosen(const shoal_codec_ops_t *ops, int algo, int nranks, int nhosts)
{
    static shoal_team_t comm;
    shoal_codec_t c = {.ops = ops, .block = 64};
    comm.nranks = nranks;
    comm.nhosts = nhosts;
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .count = 1000,
                              .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM, .codec = &c,
                              .codec_algo = algo};
    const shoal_algo_ops_t *a = shoal_codec_algo_select(&comm, &args);
    return a ? a->name : "none";
}

static void test_select(void **state)
{
    (void)state;
    const shoal_codec_ops_t *i8 = &shoal_codec_int8, *tern = &shoal_codec_ternary;
    const int autoa = SHOAL_COMPRESS_ALGO_AUTO, ring = SHOAL_COMPRESS_ALGO_RING,
              two = SHOAL_COMPRESS_ALGO_TWO_SHOT;
    assert_string_equal(chosen(i8, autoa, 1, 1), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 8, 1), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 9, 1), "twoshot-codec");
    assert_string_equal(chosen(i8, autoa, 64, 1), "twoshot-codec");
    assert_string_equal(chosen(tern, autoa, 64, 1), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 4, 2), "hier-codec");
    assert_string_equal(chosen(tern, autoa, 16, 4), "hier-codec");
    assert_string_equal(chosen(i8, ring, 64, 4), "ring-codec");
    assert_string_equal(chosen(i8, two, 2, 1), "twoshot-codec");
    assert_string_equal(chosen(i8, two, 16, 4), "twoshot-codec");
    assert_string_equal(chosen(i8, 7, 4, 1), "none");
}

/* AUTO against the schedule it should pick on this rank count (arg):
 * bitwise the same results, and AVG too. */
static int rank_auto(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_compress_algo_t want = *(const shoal_compress_algo_t *)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 20011;
    float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float)),
          *z = malloc(count * sizeof(float));
    RANK_CHECK(x && y && z, fail, "out of memory");
    for (size_t i = 0; i < count; i++)
        x[i] = cref_input(rank, i);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 64, .round = SHOAL_ROUND_STOCHASTIC,
                       .seed = 7, .step = 3};
    for (int avg = 0; avg < 2; avg++) {
        shoal_op_t op = avg ? SHOAL_AVG : SHOAL_SUM;
        shoal_status_t s = shoal_allreduce_codec(comm, x, y, count, SHOAL_FLOAT32, op, &c,
                                                 NULL, SHOAL_COMPRESS_ALGO_AUTO);
        RANK_CHECK(s == SHOAL_OK, fail, "auto: %s (%s)", shoal_status_string(s),
                   shoal_comm_last_error(comm));
        s = shoal_allreduce_codec(comm, x, z, count, SHOAL_FLOAT32, op, &c, NULL, want);
        RANK_CHECK(s == SHOAL_OK, fail, "algo %d: %s", (int)want, shoal_status_string(s));
        RANK_CHECK(!memcmp(y, z, count * sizeof(float)), fail,
                   "rank %d/%d: AUTO differs from algo %d (%s)", rank, nranks, (int)want,
                   avg ? "avg" : "sum");
    }
    free(x);
    free(y);
    free(z);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_auto(void **state)
{
    (void)state;
    static const shoal_compress_algo_t ring = SHOAL_COMPRESS_ALGO_RING,
                                       two = SHOAL_COMPRESS_ALGO_TWO_SHOT;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(3, rank_auto, (void *)&ring, 120), 0);
    assert_int_equal(harness_run_ranks(9, rank_auto, (void *)&two, 120), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_auto),
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
