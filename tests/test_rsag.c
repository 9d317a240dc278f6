/* Reduce-scatter and all-gather against a scalar reference: every dtype x op
 * for reduce-scatter and byte sizes 1, 2, 4 and 8 for all-gather, rank
 * counts 1..8, counts 0, 1, odd and several pipeline loops, in-place and
 * out-of-place, over shared memory and over tcp. Inputs are exact in every
 * dtype (harness_fill_exact), so the expected blocks do not depend on the
 * reduction order. The same matrix with the single-copy ("put") algorithms
 * forced over malloc'd buffers, with cross-memory attach on (the
 * transport's put and get counters must move) and off (the slots, with
 * nothing moved single copy). Bad arguments must be refused and leave comm
 * usable. */
#include "harness.h"

#include "base/dtype.h"
#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define GUARD_BYTES 64
#define GUARD 0xa5

/* The last count is two full pieces of a block and a short one, i.e.
 * three pipeline loops, whatever the element size. */
#define NCOUNTS 4
#define MAX_COUNT (2 * TEST_CHUNK + 333)

static size_t test_count(size_t c, shoal_dtype_t dt)
{
    static const size_t small[NCOUNTS - 1] = {0, 1, 17};
    size_t es;
    shoal_dtype_size(dt, &es);
    return c < NCOUNTS - 1 ? small[c] : 2 * (TEST_CHUNK / es) + 333;
}

typedef struct {
    unsigned char *a, *b, *want, *tmp, *orig;
} bufs_t;

static int bufs_alloc(bufs_t *bf, int nranks)
{
    size_t bytes = (size_t)nranks * MAX_COUNT * 8 + GUARD_BYTES;
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
        RANK_CHECK(p[i] == GUARD, fail, "rank %d: %s wrote %zu B past the end of recvbuf", rank,
                   what, i + 1);
    return 0;
fail:
    return 1;
}

static int check_rs(shoal_comm_t comm, int rank, int nranks, size_t rc, shoal_dtype_t dt,
                    shoal_op_t op, int in_place, bufs_t *bf)
{
    size_t es;
    shoal_dtype_size(dt, &es);
    size_t total = (size_t)nranks * rc, bytes = rc * es;
    harness_fill_exact(bf->a, total, rank, dt, op);
    memcpy(bf->orig, bf->a, total * es);
    memset(bf->b, GUARD, bytes + GUARD_BYTES);
    unsigned char *recv = in_place ? bf->a + (size_t)rank * bytes : bf->b;
    shoal_status_t s = shoal_reduce_scatter(rc ? bf->a : NULL, rc ? recv : NULL, rc, dt, op,
                                            comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: reduce_scatter %s/%s count %zu: %s (%s)", rank,
               shoal_dtype_name(dt), shoal_op_name(op), rc, shoal_status_string(s),
               shoal_comm_last_error(comm));
    harness_expected(bf->want, bf->tmp, total, nranks, dt, op);
    const unsigned char *want = bf->want + (size_t)rank * bytes;
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(recv[i] == want[i], fail,
                   "rank %d/%d %s %s count %zu %s: byte %zu (element %zu) is %#x, want %#x",
                   rank, nranks, shoal_dtype_name(dt), shoal_op_name(op), rc,
                   in_place ? "in-place" : "out-of-place", i, i / es, recv[i], want[i]);
    if (!in_place) {
        RANK_CHECK(memcmp(bf->a, bf->orig, total * es) == 0, fail,
                   "rank %d: out-of-place reduce_scatter changed sendbuf", rank);
        return check_guard(bf->b + bytes, rank, "reduce_scatter");
    }
    return 0;
fail:
    return 1;
}

static int check_ag(shoal_comm_t comm, int rank, int nranks, size_t count, shoal_dtype_t dt,
                    int in_place, bufs_t *bf)
{
    size_t es;
    shoal_dtype_size(dt, &es);
    size_t bytes = count * es, total = (size_t)nranks * bytes;
    memset(bf->b, GUARD, total + GUARD_BYTES);
    unsigned char *send = in_place ? bf->b + (size_t)rank * bytes : bf->a;
    harness_fill_exact(send, count, rank, dt, SHOAL_SUM);
    memcpy(bf->orig, send, bytes);
    shoal_status_t s = shoal_allgather(count ? send : NULL, count ? bf->b : NULL, count, dt,
                                       comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: allgather %s count %zu: %s (%s)", rank,
               shoal_dtype_name(dt), count, shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (int r = 0; r < nranks; r++) {
        harness_fill_exact(bf->want, count, r, dt, SHOAL_SUM);
        const unsigned char *got = bf->b + (size_t)r * bytes;
        for (size_t i = 0; i < bytes; i++)
            RANK_CHECK(got[i] == bf->want[i], fail,
                       "rank %d/%d %s count %zu %s: block %d byte %zu is %#x, want %#x", rank,
                       nranks, shoal_dtype_name(dt), count,
                       in_place ? "in-place" : "out-of-place", r, i, got[i], bf->want[i]);
    }
    if (!in_place)
        RANK_CHECK(memcmp(bf->a, bf->orig, bytes) == 0, fail,
                   "rank %d: out-of-place allgather changed sendbuf", rank);
    return check_guard(bf->b + total, rank, "allgather");
fail:
    return 1;
}

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    static const shoal_dtype_t ag_dtypes[] = {SHOAL_INT8, SHOAL_FLOAT16, SHOAL_FLOAT32,
                                              SHOAL_FLOAT64};
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    bufs_t bf;
    RANK_CHECK(bufs_alloc(&bf, nranks), fail, "out of memory");
    shoal_dtype_t dts[SHOAL_DTYPE_COUNT];
    int ndt = harness_dtypes(dts);
    for (int t = 0; t < ndt; t++)
        for (int op = 0; op < SHOAL_OP_COUNT; op++)
            for (size_t c = 0; c < NCOUNTS; c++)
                for (int in_place = 0; in_place < 2; in_place++)
                    if (check_rs(comm, rank, nranks, test_count(c, dts[t]), dts[t],
                                 (shoal_op_t)op, in_place, &bf))
                        return 1;
    for (size_t d = 0; d < sizeof(ag_dtypes) / sizeof(ag_dtypes[0]); d++)
        for (size_t c = 0; c < NCOUNTS; c++)
            for (int in_place = 0; in_place < 2; in_place++)
                if (check_ag(comm, rank, nranks, test_count(c, ag_dtypes[d]), ag_dtypes[d], in_place, &bf))
                    return 1;
    /* A forced put over cross-memory attach moved something single copy;
     * without it, nothing. */
    const int *want_single = arg;
    if (want_single && nranks > 1) {
        uint64_t moved = 0;
        for (int q = 0; q < nranks; q++) {
            if (comm->team.eps[q])
                moved += comm->team.eps[q]->puts + comm->team.eps[q]->gets;
        }
        RANK_CHECK(*want_single ? moved > 0 : moved == 0, fail,
                   "rank %d: %llu single-copy moves with SHOAL_CMA=%s", rank,
                   (unsigned long long)moved, *want_single ? "on" : "off");
    }
    bufs_free(&bf);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_ranks_arg(harness_rank_fn_t fn, const char *transport, int nranks, void *arg)
{
    char chunk[32];
    snprintf(chunk, sizeof(chunk), "%d", TEST_CHUNK);
    harness_setenv("SHOAL_CHUNK_SIZE", chunk);
    harness_setenv("SHOAL_SHM_ENABLE", strcmp(transport, "shm") ? "n" : "y");
    assert_int_equal(harness_run_ranks(nranks, fn, arg, 600), 0);
}

static void run_ranks(harness_rank_fn_t fn, const char *transport, int nranks)
{
    if (harness_ranks_wanted(nranks))
        run_ranks_arg(fn, transport, nranks, NULL);
}

/* The single-copy ("put") reduce-scatter and all-gather forced onto the
 * same matrix of malloc'd buffers: with cross-memory attach on, every
 * dtype and op reads (and writes) the peers' private memory directly;
 * with it off, every rank falls back to the slots together. */
static void run_put(int cma, int nranks)
{
    harness_setenv("SHOAL_ALGO", "reducescatter:put,allgather:put");
    harness_setenv("SHOAL_CMA", cma ? "on" : "off");
    run_ranks_arg(rank_matrix, "shm", nranks, &cma);
    harness_setenv("SHOAL_CMA", NULL);
    harness_setenv("SHOAL_ALGO", NULL);
}

static void test_put_cma(void **state)
{
    (void)state;
    for (int n = 2; n <= 8; n++)
        if (harness_ranks_wanted(n))
            run_put(1, n);
}

static void test_put_cma_off(void **state)
{
    (void)state;
    run_put(0, 3);
}

#define MATRIX_TEST(tl, n)                                                    \
    static void test_##tl##_##n(void **state)                                 \
    {                                                                         \
        (void)state;                                                          \
        run_ranks(rank_matrix, #tl, n);                                       \
    }
MATRIX_TEST(shm, 1) MATRIX_TEST(shm, 2) MATRIX_TEST(shm, 3) MATRIX_TEST(shm, 4)
MATRIX_TEST(shm, 5) MATRIX_TEST(shm, 6) MATRIX_TEST(shm, 7) MATRIX_TEST(shm, 8)
MATRIX_TEST(tcp, 2) MATRIX_TEST(tcp, 3) MATRIX_TEST(tcp, 4) MATRIX_TEST(tcp, 5)
MATRIX_TEST(tcp, 6) MATRIX_TEST(tcp, 7) MATRIX_TEST(tcp, 8)

/* A refused call must say why, write nothing and leave comm usable; every
 * rank makes the same bad calls, so none waits for a peer. */
static int expect_invalid(shoal_comm_t comm, shoal_status_t s, const char *what)
{
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "%s: got %s", what, shoal_status_string(s));
    RANK_CHECK(shoal_comm_last_error(comm)[0] != '\0', fail, "%s: no reason recorded", what);
    return 0;
fail:
    return 1;
}

static int rank_bad_args(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int32_t in[8 * 4], out[4 + GUARD_BYTES / 4];
    memset(out, GUARD, sizeof(out));
    /* count * 4 bytes fits, count * 4 * nranks does not. */
    size_t huge = SIZE_MAX / 4 / (size_t)nranks + 1;
    if (expect_invalid(comm, shoal_reduce_scatter(NULL, out, 4, SHOAL_INT32, SHOAL_SUM, comm),
                       "rs NULL sendbuf") ||
        expect_invalid(comm, shoal_reduce_scatter(in, NULL, 4, SHOAL_INT32, SHOAL_SUM, comm),
                       "rs NULL recvbuf") ||
        expect_invalid(comm,
                       shoal_reduce_scatter(in, out, 4, (shoal_dtype_t)SHOAL_DTYPE_COUNT,
                                            SHOAL_SUM, comm),
                       "rs unknown dtype") ||
        expect_invalid(comm,
                       shoal_reduce_scatter(in, out, 4, SHOAL_INT32, (shoal_op_t)SHOAL_OP_COUNT,
                                            comm),
                       "rs unknown op") ||
        expect_invalid(comm, shoal_reduce_scatter(in, out, huge, SHOAL_INT32, SHOAL_SUM, comm),
                       "rs overflowing count") ||
        expect_invalid(comm, shoal_allgather(NULL, out, 4, SHOAL_INT32, comm),
                       "ag NULL sendbuf") ||
        expect_invalid(comm, shoal_allgather(in, NULL, 4, SHOAL_INT32, comm),
                       "ag NULL recvbuf") ||
        expect_invalid(comm, shoal_allgather(in, out, 4, (shoal_dtype_t)-1, comm),
                       "ag unknown dtype") ||
        expect_invalid(comm, shoal_allgather(in, out, huge, SHOAL_INT32, comm),
                       "ag overflowing count"))
        return 1;
    const unsigned char *o = (const unsigned char *)out;
    for (size_t i = 0; i < sizeof(out); i++)
        RANK_CHECK(o[i] == GUARD, fail, "rank %d: a refused call wrote byte %zu", rank, i);

    /* Still usable: a real reduce-scatter and all-gather. */
    for (int i = 0; i < nranks * 4; i++)
        in[i] = rank + i;
    shoal_status_t s = shoal_reduce_scatter(in, out, 4, SHOAL_INT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "reduce_scatter after refusals: %s (%s)",
               shoal_status_string(s), shoal_comm_last_error(comm));
    for (int i = 0; i < 4; i++)
        RANK_CHECK(out[i] == nranks * (nranks - 1) / 2 + nranks * (rank * 4 + i), fail,
                   "rank %d: element %d is %d", rank, i, (int)out[i]);
    int32_t mine = rank * 10, all[8];
    s = shoal_allgather(&mine, all, 1, SHOAL_INT32, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "allgather after refusals: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (int r = 0; r < nranks; r++)
        RANK_CHECK(all[r] == r * 10, fail, "rank %d: block %d is %d", rank, r, (int)all[r]);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_bad_args(void **state)
{
    (void)state;
    run_ranks(rank_bad_args, "shm", 3);
    run_ranks(rank_bad_args, "tcp", 2);
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
        cmocka_unit_test(test_tcp_8), cmocka_unit_test(test_put_cma),
        cmocka_unit_test(test_put_cma_off), cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests_name("rsag", tests, NULL, NULL);
}
