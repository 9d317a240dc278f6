/* The double binary tree and one-shot all-reduces, each called directly
 * through shoal_coll_run, against the scalar reference: every dtype x op,
 * rank counts 1..8, counts 0, 1, odd, several pieces and (tree) several
 * windows of pieces, in place and out of place, over shared memory and over
 * tcp. Inputs are exact in every dtype (harness_fill_exact), so the
 * expected result does not depend on the order of reduction.
 *
 * Determinism: with inputs whose sums do round, every rank must still get
 * the same bits, run after run. Each rank leaves a hash of its results in
 * shared memory and the parent compares them across ranks. */
#include "harness.h"

#include "core/coll.h"
#include "base/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TEST_CHUNK 4096
#define GUARD_BYTES 64
#define GUARD 0xa5
#define MAX_RANKS 8

/* Tree counts: 0, 1, odd, a few pieces per half (one window), and enough
 * pieces for three windows with a short last piece. */
#define NCOUNTS 5
static size_t tree_count(size_t c, size_t es)
{
    static const size_t small[] = {0, 1, 17};
    if (c < 3)
        return small[c];
    return c == 3 ? 2 * (TEST_CHUNK / es) + 333 : 19 * (TEST_CHUNK / es) + 77;
}
#define MAX_COUNT (19 * TEST_CHUNK + 77)

/* One-shot counts: 0, 1, odd, and exactly one full slot. */
static size_t oneshot_count(size_t c, size_t es)
{
    static const size_t small[] = {0, 1, 17};
    return c < 3 ? small[c] : TEST_CHUNK / es;
}

typedef struct {
    unsigned char *a, *b, *want, *tmp, *orig;
} bufs_t;

static int bufs_alloc(bufs_t *bf)
{
    size_t bytes = MAX_COUNT * 8 + GUARD_BYTES;
    bf->a = malloc(bytes);
    bf->b = malloc(bytes);
    bf->want = malloc(bytes);
    bf->tmp = malloc(bytes);
    bf->orig = malloc(bytes);
    return bf->a && bf->b && bf->want && bf->tmp && bf->orig;
}

static void bufs_free(bufs_t *bf)
{
    free(bf->a);
    free(bf->b);
    free(bf->want);
    free(bf->tmp);
    free(bf->orig);
}

static int check_guard(const unsigned char *p, int rank, const char *what)
{
    for (size_t i = 0; i < GUARD_BYTES; i++)
        RANK_CHECK(p[i] == GUARD, fail, "rank %d: %s wrote %zu B past the end of its buffer", rank,
                   what, i + 1);
    return 0;
fail:
    return 1;
}

static shoal_status_t run_allreduce(shoal_comm_t comm, const shoal_algo_ops_t *algo,
                                    const void *send, void *recv, size_t count,
                                    shoal_dtype_t dt, shoal_op_t op)
{
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = send, .recvbuf = recv,
                              .count = count, .dtype = dt, .op = op};
    return shoal_coll_run(comm, algo, "test allreduce", &args);
}

static int check_allreduce(shoal_comm_t comm, const shoal_algo_ops_t *algo, int rank,
                           int nranks, size_t count, shoal_dtype_t dt, shoal_op_t op,
                           int in_place, bufs_t *bf)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es;
    harness_fill_exact(bf->a, count, rank, dt, op);
    memset(bf->a + bytes, GUARD, GUARD_BYTES);
    memcpy(bf->orig, bf->a, bytes);
    memset(bf->b, GUARD, bytes + GUARD_BYTES);
    unsigned char *recv = in_place ? bf->a : bf->b;
    shoal_status_t s = run_allreduce(comm, algo, count ? bf->a : NULL, count ? recv : NULL,
                                     count, dt, op);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s allreduce %s/%s count %zu: %s (%s)", rank,
               nranks, algo->name, shoal_dtype_name(dt), shoal_op_name(op), count,
               shoal_status_string(s), shoal_comm_last_error(comm));
    harness_expected(bf->want, bf->tmp, count, nranks, dt, op);
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(recv[i] == bf->want[i], fail,
                   "rank %d/%d %s %s %s count %zu %s: byte %zu (element %zu) is %#x, want %#x",
                   rank, nranks, algo->name, shoal_dtype_name(dt), shoal_op_name(op), count,
                   in_place ? "in-place" : "out-of-place", i, i / es, recv[i], bf->want[i]);
    if (!in_place)
        RANK_CHECK(memcmp(bf->a, bf->orig, bytes) == 0, fail,
                   "rank %d: out-of-place %s allreduce changed sendbuf", rank, algo->name);
    return check_guard(recv + bytes, rank, algo->name);
fail:
    return 1;
}

/* Every dtype x op x count; in place and out of place alternate over the
 * matrix, so each meets every dtype, op and count. */
static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    bufs_t bf;
    RANK_CHECK(bufs_alloc(&bf), fail, "out of memory");
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++) {
        size_t es = shoal_dtype_bytes((shoal_dtype_t)dt);
        for (int op = 0; op < SHOAL_OP_COUNT; op++) {
            for (size_t c = 0; c < NCOUNTS; c++) {
                int in_place = (int)((dt + op + (int)c) % 2);
                if (check_allreduce(comm, &shoal_tree_allreduce_ops, rank, nranks,
                                    tree_count(c, es), (shoal_dtype_t)dt, (shoal_op_t)op,
                                    in_place, &bf))
                    return 1;
                if (c < 4 && check_allreduce(comm, &shoal_oneshot_allreduce_ops, rank, nranks,
                                             oneshot_count(c, es), (shoal_dtype_t)dt,
                                             (shoal_op_t)op, !in_place, &bf))
                    return 1;
            }
        }
    }
    bufs_free(&bf);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_ranks(harness_rank_fn_t fn, const char *transport, int nranks, void *arg)
{
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, fn, arg, 120), 0);
}

#define MATRIX_TEST(tl, n)                                                    \
    static void test_##tl##_##n(void **state)                                 \
    {                                                                         \
        (void)state;                                                          \
        run_ranks(rank_matrix, #tl, n, NULL);                                 \
    }
MATRIX_TEST(shm, 1) MATRIX_TEST(shm, 2) MATRIX_TEST(shm, 3) MATRIX_TEST(shm, 4)
MATRIX_TEST(shm, 5) MATRIX_TEST(shm, 6) MATRIX_TEST(shm, 7) MATRIX_TEST(shm, 8)
MATRIX_TEST(tcp, 2) MATRIX_TEST(tcp, 3) MATRIX_TEST(tcp, 4) MATRIX_TEST(tcp, 5)
MATRIX_TEST(tcp, 6) MATRIX_TEST(tcp, 7) MATRIX_TEST(tcp, 8)

/* Determinism. Inputs in [-1, 1] with no short binary expansion, so sums
 * round and a rank that reduced in another order would see other bits. */
typedef struct {
    const shoal_algo_ops_t *algo;
    shoal_dtype_t dt;
    shoal_op_t op;
    size_t count;
} det_case_t;

static const det_case_t det_cases[] = {
    {&shoal_tree_allreduce_ops, SHOAL_FLOAT32, SHOAL_SUM, 5 * TEST_CHUNK / 4 + 13},
    {&shoal_tree_allreduce_ops, SHOAL_FLOAT64, SHOAL_AVG, 3 * TEST_CHUNK / 8 + 5},
    {&shoal_tree_allreduce_ops, SHOAL_FLOAT16, SHOAL_SUM, 3 * TEST_CHUNK / 2 + 1},
    {&shoal_oneshot_allreduce_ops, SHOAL_FLOAT32, SHOAL_SUM, TEST_CHUNK / 4},
    {&shoal_oneshot_allreduce_ops, SHOAL_FLOAT64, SHOAL_AVG, TEST_CHUNK / 8 - 3},
    {&shoal_oneshot_allreduce_ops, SHOAL_FLOAT16, SHOAL_SUM, 333},
};
#define NDET (sizeof(det_cases) / sizeof(det_cases[0]))

static double det_value(int rank, size_t i)
{
    return (double)(harness_mix((uint32_t)rank * 7919u + (uint32_t)i) % 20001) / 10000.0 - 1;
}

static double decode(const void *buf, size_t i, shoal_dtype_t dt)
{
    switch (dt) {
    case SHOAL_FLOAT64:
        return ((const double *)buf)[i];
    case SHOAL_FLOAT32:
        return ((const float *)buf)[i];
    default:
        return shoal_f16_to_f32(((const uint16_t *)buf)[i]);
    }
}

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Results are also close to the exact sum, so the bits that must agree
 * are those of a real all-reduce. */
static int check_close(const void *got, size_t count, int nranks, const det_case_t *c)
{
    double tol = c->dt == SHOAL_FLOAT64 ? 1e-12 : c->dt == SHOAL_FLOAT32 ? 1e-5 : 1e-2;
    for (size_t i = 0; i < count; i++) {
        double sum = 0, mag = 1;
        for (int r = 0; r < nranks; r++) {
            sum += det_value(r, i);
            mag += fabs(det_value(r, i));
        }
        if (c->op == SHOAL_AVG)
            sum /= nranks;
        double g = decode(got, i, c->dt);
        RANK_CHECK(fabs(g - sum) <= tol * mag, fail, "%s %s element %zu is %g, want about %g",
                   c->algo->name, shoal_dtype_name(c->dt), i, g, sum);
    }
    return 0;
fail:
    return 1;
}

static int rank_determinism(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    uint64_t(*hashes)[MAX_RANKS] = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    bufs_t bf;
    RANK_CHECK(bufs_alloc(&bf), fail, "out of memory");
    for (size_t k = 0; k < NDET; k++) {
        const det_case_t *c = &det_cases[k];
        size_t bytes = c->count * shoal_dtype_bytes(c->dt);
        for (size_t i = 0; i < c->count; i++)
            shoal_dtype_set_f64(bf.a, i, c->dt, det_value(rank, i));
        shoal_status_t s = run_allreduce(comm, c->algo, bf.a, bf.b, c->count, c->dt, c->op);
        RANK_CHECK(s == SHOAL_OK, fail, "%s: %s", c->algo->name, shoal_status_string(s));
        /* Again, in place: the same bits. */
        s = run_allreduce(comm, c->algo, bf.a, bf.a, c->count, c->dt, c->op);
        RANK_CHECK(s == SHOAL_OK, fail, "%s in place: %s", c->algo->name, shoal_status_string(s));
        RANK_CHECK(memcmp(bf.a, bf.b, bytes) == 0, fail, "rank %d: %s %s gave other bits in place",
                   rank, c->algo->name, shoal_dtype_name(c->dt));
        if (check_close(bf.b, c->count, nranks, c))
            return 1;
        hashes[k][rank] = fnv1a(bf.b, bytes);
    }
    bufs_free(&bf);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void determinism(const char *transport, int nranks)
{
    uint64_t(*hashes)[MAX_RANKS] = mmap(NULL, NDET * sizeof(*hashes), PROT_READ | PROT_WRITE,
                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(hashes != MAP_FAILED);
    memset(hashes, 0, NDET * sizeof(*hashes));
    run_ranks(rank_determinism, transport, nranks, hashes);
    for (size_t k = 0; k < NDET; k++) {
        for (int r = 1; r < nranks; r++) {
            if (hashes[k][r] != hashes[k][0])
                fail_msg("%s %s over %d ranks (%s): rank %d's result differs from rank 0's",
                         det_cases[k].algo->name, shoal_dtype_name(det_cases[k].dt), nranks,
                         transport, r);
        }
    }
    munmap(hashes, NDET * sizeof(*hashes));
}

static void test_determinism(void **state)
{
    (void)state;
    for (int n = 2; n <= MAX_RANKS; n++)
        determinism("shm", n);
    determinism("tcp", 5);
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
        cmocka_unit_test(test_tcp_8), cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests_name("tree", tests, NULL, NULL);
}
