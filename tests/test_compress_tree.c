/* The compressed double binary tree all-reduce (algos/tree_codec.c) with
 * the int8 codec, over shared memory and over tcp, rank counts 1..8,
 * counts 0, 1, 63, 64, 65, 1001 and several windows of 4 KiB pieces
 * (86861), and a multi-MB count with the default piece size, blocks of
 * 32, 64 and 128, nearest and stochastic rounding, each through the
 * reference check of compress_ref.h: bitwise the same result on every
 * rank and in place, within the tree's bound of a double reference,
 * residuals that add up to the error, AVG as SUM / n.
 *
 * The bound: each rank quantises its subtree's partial sum once, and a
 * rank's input lies in the subtrees of at most L = ceil(log2(n + 1))
 * ranks, so a value is within f * L * 1.1 * A / 127 of the exact sum
 * (A: the sum over ranks of the block's largest |input|; f = 1/2 for
 * nearest rounding, 1 for stochastic), where the ring's bound grows with
 * n itself.
 *
 * And the choice: TREE selects the tree on any shape and AUTO never does;
 * the ternary codec with TREE is SHOAL_ERR_INVALID_ARG, and the
 * communicator stays usable. */
#include "compress_ref.h"

#include "algos/algo.h"
#include "core/comm.h"

#define TEST_CHUNK 4096

/* At 4 KiB a piece holds 3616 values of blocks of 32: 86861 values are 24
 * pieces, three windows of the trees. */
static const size_t small_counts[] = {0, 1, 63, 64, 65, 1001, 3 * 8 * 3616 + 77, SIZE_MAX};

static void run_matrix(const char *transport, int nranks)
{
    cref_matrix_t m = {.counts = small_counts, .algo = SHOAL_COMPRESS_ALGO_TREE,
                       .sched = CREF_TREE};
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, cref_rank_matrix, &m, 600), 0);
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

/* The default piece size (8 MB of values: three windows of 128 KiB
 * pieces over shared memory). */
static const size_t large_counts[] = {2000005, SIZE_MAX};

static void test_default_chunk(void **state)
{
    (void)state;
    cref_matrix_t m = {.counts = large_counts, .algo = SHOAL_COMPRESS_ALGO_TREE,
                       .sched = CREF_TREE};
    harness_use_transport("shm", 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(harness_run_ranks(3, cref_rank_matrix, &m, 600), 0);
    harness_use_transport("tcp", 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(harness_run_ranks(2, cref_rank_matrix, &m, 600), 0);
}

/* The name of the schedule algo picks for codec ops on nranks ranks of
 * nhosts hosts; only the fields the choice reads are set. */
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
    const int tree = SHOAL_COMPRESS_ALGO_TREE, autoa = SHOAL_COMPRESS_ALGO_AUTO;
    static const int shapes[][2] = {{1, 1}, {2, 1}, {8, 1}, {64, 1}, {16, 4}};
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        assert_string_equal(chosen(i8, tree, shapes[k][0], shapes[k][1]), "tree-codec");
        assert_string_not_equal(chosen(i8, autoa, shapes[k][0], shapes[k][1]), "tree-codec");
        assert_string_not_equal(chosen(tern, autoa, shapes[k][0], shapes[k][1]), "tree-codec");
    }
}

/* The ternary codec with TREE is refused on every rank, and the
 * communicator stays usable for the tree with int8 and ternary's ring. */
static int rank_refuse(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    float x[100], y[100], res[100], scales[4] = {1, 1, 1, 1};
    for (int i = 0; i < 100; i++)
        x[i] = (float)(i + rank) / 100;
    shoal_codec_t tern = {.ops = &shoal_codec_ternary, .block = 32,
                          .round = SHOAL_ROUND_STOCHASTIC, .scales = scales};
    shoal_codec_t i8 = {.ops = &shoal_codec_int8, .block = 32, .round = SHOAL_ROUND_NEAREST};
    shoal_status_t s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &tern,
                                             res, SHOAL_COMPRESS_ALGO_TREE);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "rank %d: ternary tree gave %s", rank,
               shoal_status_string(s));
    const char *why = shoal_comm_last_error(comm);
    RANK_CHECK(why && strstr(why, "no tree schedule"), fail, "rank %d: ternary tree: '%s'", rank,
               why ? why : "(null)");
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &i8, res,
                              SHOAL_COMPRESS_ALGO_TREE);
    RANK_CHECK(s == SHOAL_OK, fail, "int8 tree after the refusal: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &tern, res,
                              SHOAL_COMPRESS_ALGO_RING);
    RANK_CHECK(s == SHOAL_OK, fail, "ternary ring after the refusal: %s", shoal_status_string(s));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_ternary_refused(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_refuse, NULL, 60), 0);
    assert_int_equal(harness_run_ranks(3, rank_refuse, NULL, 60), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_ternary_refused),
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
