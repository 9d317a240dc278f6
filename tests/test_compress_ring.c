/* The compressed ring all-reduce (core/compress_call.h, algos/ring_codec.c)
 * with the int8 and ternary codecs, over shared memory and over tcp, rank
 * counts 1..8, counts 0, 1, 63, 64, 65, odd and several pipeline loops
 * (4 KiB pieces, and one run with the default piece size), blocks of 32,
 * 64 and 128, nearest and stochastic rounding, each through the reference
 * check of compress_ref.h (bitwise the same result on every rank and in
 * place, within the ring's error bound of a double reference, residuals
 * that add up to the error, AVG as SUM / n). The ternary codec's shared
 * scales are the max over ranks of each rank's block maxima. Also:
 * - a compressed all-reduce against a plain one, and ranks whose codecs
 *   differ in rounding, block or schedule, fail with SHOAL_ERR_MISMATCH
 *   on some rank and never succeed or hang;
 * - bad arguments are SHOAL_ERR_INVALID_ARG and leave the communicator
 *   usable;
 * - the codec id of the signature changes with each setting it covers, and
 *   a signature prints it in place of a root.
 * The dry simulator is not covered here yet. */
#include "compress_ref.h"

#include "core/sig.h"

#include <sys/mman.h>

#define TEST_CHUNK 4096

/* One rank of the matrix over counts (cref_rank_matrix). */
static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    cref_matrix_t m = {.counts = arg, .algo = SHOAL_COMPRESS_ALGO_RING, .sched = CREF_RING,
                       .ternary = 1};
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

/* How rank 0's call differs from the others' in a mismatch case. */
enum { MIS_PLAIN, MIS_ROUND, MIS_BLOCK, MIS_ALGO, MIS_MODES };
static const char *const mis_names[MIS_MODES] = {"plain allreduce", "rounding", "block",
                                                  "algo"};

/* Shared with the ranks: the case, and each rank's status. */
typedef struct {
    int mode;
    int status[8];
} mismatch_t;

/* Rank 0 runs a plain all-reduce or a codec that differs from the others'
 * in one setting; each rank's status lands in shared memory for the
 * parent to look at. */
static int rank_mismatch(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    mismatch_t *m = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 5000;
    float *x = calloc(count, sizeof(float)), *y = calloc(count, sizeof(float));
    RANK_CHECK(x && y, fail, "out of memory");
    for (size_t i = 0; i < count; i++)
        x[i] = cref_input(rank, i);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 64, .round = SHOAL_ROUND_STOCHASTIC};
    shoal_compress_algo_t algo = SHOAL_COMPRESS_ALGO_RING;
    if (rank == 0 && m->mode == MIS_ROUND)
        c.round = SHOAL_ROUND_NEAREST;
    if (rank == 0 && m->mode == MIS_BLOCK)
        c.block = 32;
    if (rank == 0 && m->mode == MIS_ALGO)
        algo = SHOAL_COMPRESS_ALGO_TWO_SHOT;
    shoal_status_t s =
        rank == 0 && m->mode == MIS_PLAIN
            ? shoal_allreduce(x, y, count, SHOAL_FLOAT32, SHOAL_SUM, comm)
            : shoal_allreduce_codec(comm, x, y, count, SHOAL_FLOAT32, SHOAL_SUM, &c, NULL, algo);
    m->status[rank] = (int)s;
    free(x);
    free(y);
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void run_mismatch(const char *transport, int nranks, int mode)
{
    mismatch_t *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
    assert_true(m != MAP_FAILED);
    m->mode = mode;
    for (int r = 0; r < 8; r++)
        m->status[r] = -1;
    harness_use_transport(transport, TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "5s");
    assert_int_equal(harness_run_ranks(nranks, rank_mismatch, m, 60), 0);
    int mismatches = 0;
    for (int r = 0; r < nranks; r++) {
        if (m->status[r] == SHOAL_OK)
            fail_msg("%s, %d ranks, %s differs: rank %d succeeded", transport, nranks,
                     mis_names[mode], r);
        mismatches += m->status[r] == SHOAL_ERR_MISMATCH;
    }
    if (mismatches == 0)
        fail_msg("%s, %d ranks, %s differs: no rank saw a mismatch", transport, nranks,
                 mis_names[mode]);
    munmap(m, sizeof(*m));
}

/* A plain all-reduce against a compressed one, and compressed ones whose
 * codecs differ in rounding, block or schedule (the codec id in their
 * signatures). */
static void test_mismatch(void **state)
{
    (void)state;
    for (int mode = 0; mode < MIS_MODES; mode++) {
        run_mismatch("shm", 2, mode);
        run_mismatch("shm", 3, mode);
        run_mismatch("tcp", 2, mode);
        run_mismatch("tcp", 3, mode);
    }
}

/* The codec id: a function of exactly the settings it covers; printed as
 * a codec, whatever its top bit. */
static void test_sig_codec_id(void **state)
{
    (void)state;
    uint32_t id = shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 8, 1);
    assert_int_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("ternary", 64, SHOAL_ROUND_NEAREST, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 32, SHOAL_ROUND_NEAREST, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_STOCHASTIC, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 16, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 4, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 8, 2));
    char buf[SHOAL_SIG_STR_MAX];
    shoal_sig_t sig = {.seq = 3, .count = 100, .kind = SHOAL_SIG_ALLREDUCE_CODEC,
                       .dtype = SHOAL_FLOAT32, .op = SHOAL_AVG, .root = 0x1234abcd};
    assert_string_equal(shoal_sig_format(&sig, buf, sizeof(buf)),
                        "compressed allreduce #3 of 100 x float avg codec 1234abcd");
    sig.root = (int32_t)0xfedcba98u;
    assert_string_equal(shoal_sig_format(&sig, buf, sizeof(buf)),
                        "compressed allreduce #3 of 100 x float avg codec fedcba98");
}

static int rank_bad_args(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    float x[100], y[100], res[100];
    double d[100];
    for (int i = 0; i < 100; i++)
        x[i] = (float)(i + rank);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 32, .round = SHOAL_ROUND_NEAREST};
    shoal_codec_t bad_block = c, bad_round = c, tern = c;
    bad_block.block = 48;
    bad_round.round = (shoal_round_t)7;
    float scales[4] = {1, 1, 1, 1};
    tern.ops = &shoal_codec_ternary;
    tern.scales = scales;
    const shoal_compress_algo_t ring = SHOAL_COMPRESS_ALGO_RING;
    struct {
        const char *what;
        shoal_status_t s;
    } cases[] = {
        {"float64", shoal_allreduce_codec(comm, d, d, 100, SHOAL_FLOAT64, SHOAL_SUM, &c, NULL,
                                          ring)},
        {"int32", shoal_allreduce_codec(comm, x, y, 100, SHOAL_INT32, SHOAL_SUM, &c, NULL, ring)},
        {"max", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_MAX, &c, NULL, ring)},
        {"prod", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_PROD, &c, NULL,
                                       ring)},
        {"block 48", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                           &bad_block, NULL, ring)},
        {"round 7", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                          &bad_round, NULL, ring)},
        {"NULL codec", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, NULL,
                                             NULL, ring)},
        {"residual = recvbuf", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                                     &c, y, ring)},
        {"NULL sendbuf", shoal_allreduce_codec(comm, NULL, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c,
                                               NULL, ring)},
        {"algo 7", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, NULL,
                                         (shoal_compress_algo_t)7)},
        {"algo -1", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, NULL,
                                          (shoal_compress_algo_t)-1)},
        {"ternary two-shot", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                                   &tern, NULL, SHOAL_COMPRESS_ALGO_TWO_SHOT)},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        RANK_CHECK(cases[k].s == SHOAL_ERR_INVALID_ARG, fail, "rank %d: %s gave %s", rank,
                   cases[k].what, shoal_status_string(cases[k].s));
    /* Still usable: good calls of every schedule, and a plain one. */
    shoal_status_t s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, res,
                                             ring);
    RANK_CHECK(s == SHOAL_OK, fail, "good call after bad ones: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, res,
                              SHOAL_COMPRESS_ALGO_TWO_SHOT);
    RANK_CHECK(s == SHOAL_OK, fail, "two-shot after bad ones: %s", shoal_status_string(s));
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &tern, res,
                              SHOAL_COMPRESS_ALGO_AUTO);
    RANK_CHECK(s == SHOAL_OK, fail, "ternary auto after bad ones: %s", shoal_status_string(s));
    s = shoal_allreduce(x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "plain call after bad ones: %s", shoal_status_string(s));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
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
        cmocka_unit_test(test_sig_codec_id),
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
