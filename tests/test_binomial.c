/* Binomial-tree broadcast and reduce, called directly through
 * shoal_coll_run, over shared memory and over tcp, rank counts 1..8, every
 * root (the tree's shape differs with the root's place), counts 0, 1, odd
 * and several pipeline pieces, in place and out of place. Reduce covers
 * every dtype x op against the scalar reference (inputs exact in every
 * dtype, so the order of reduction does not matter); broadcast covers byte
 * sizes 1, 2, 4 and 8. Nothing may be written past recvbuf nor, for
 * reduce, into a non-root's recvbuf. */
#include "harness.h"

#include "core/coll.h"
#include "base/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define GUARD 64
#define GUARD_BYTE 0xa5
#define UNTOUCHED_BYTE 0x5a

static const size_t counts[] = {0, 1, 17, 3 * TEST_CHUNK + 5};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
#define MAX_BYTES (counts[NCOUNTS - 1] * 8)

typedef struct {
    unsigned char *a, *b, *want, *tmp;
} bufs_t;

static shoal_status_t run_rooted(shoal_comm_t comm, const shoal_algo_ops_t *algo,
                                 shoal_coll_kind_t kind, const void *send, void *recv,
                                 size_t count, shoal_dtype_t dt, shoal_op_t op, int root)
{
    shoal_coll_args_t args = {.kind = kind, .sendbuf = count ? send : NULL,
                              .recvbuf = count ? recv : NULL, .count = count, .dtype = dt,
                              .op = op, .root = root};
    return shoal_coll_run(comm, algo, shoal_coll_kind_name(kind), &args);
}

static int check_reduce(shoal_comm_t comm, int rank, int nranks, int root, size_t count,
                        shoal_dtype_t dt, shoal_op_t op, int in_place, bufs_t *m)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es;
    int is_root = rank == root;
    harness_fill_exact(m->a, count, rank, dt, op);
    memset(m->b, is_root ? GUARD_BYTE : UNTOUCHED_BYTE, bytes + GUARD);
    /* In place on the root; a non-root's recvbuf is NULL in the in-place
     * variant, which is allowed there. */
    void *recv = is_root ? (in_place ? m->a : m->b) : (in_place ? NULL : m->b);
    shoal_status_t s = run_rooted(comm, &shoal_binomial_reduce_ops, SHOAL_COLL_REDUCE, m->a,
                                  recv, count, dt, op, root);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: reduce %s/%s count %zu root %d: %s (%s)", rank,
               nranks, shoal_dtype_name(dt), shoal_op_name(op), count, root,
               shoal_status_string(s), shoal_comm_last_error(comm));
    if (!is_root)
        return harness_check_untouched(m->b, 0, bytes + GUARD, UNTOUCHED_BYTE, rank,
                                       "non-root recvbuf of reduce");
    harness_expected(m->want, m->tmp, count, nranks, dt, op);
    const unsigned char *got = recv ? recv : m->b;
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(got[i] == m->want[i], fail,
                   "rank %d/%d root %d %s %s count %zu %s: byte %zu (element %zu) is %#x, "
                   "want %#x",
                   rank, nranks, root, shoal_dtype_name(dt), shoal_op_name(op), count,
                   in_place ? "in-place" : "out-of-place", i, i / es, got[i], m->want[i]);
    if (!in_place)
        return harness_check_untouched(m->b, bytes, bytes + GUARD, GUARD_BYTE, rank,
                                       "past the end of recvbuf");
    return 0;
fail:
    return 1;
}

/* Root's payload: distinct bytes that depend on the root and the call. */
static void fill_payload(unsigned char *buf, size_t bytes, int root, uint32_t salt)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (unsigned char)harness_mix((uint32_t)i * 31u + (uint32_t)root * 7919u + salt);
}

static int check_broadcast(shoal_comm_t comm, int rank, int nranks, int root, size_t count,
                           shoal_dtype_t dt, int in_place, bufs_t *m)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es;
    uint32_t salt = (uint32_t)(count * 131 + (size_t)dt * 17 + (size_t)in_place);
    int is_root = rank == root;
    fill_payload(m->want, bytes, root, salt);
    memset(m->b, GUARD_BYTE, bytes + GUARD);
    void *send;
    if (is_root) {
        memcpy(in_place ? m->b : m->a, m->want, bytes);
        send = in_place ? m->b : m->a;
    } else {
        /* sendbuf is ignored off the root: NULL or a buffer that must stay. */
        memset(m->a, UNTOUCHED_BYTE, bytes);
        send = in_place ? NULL : m->a;
    }
    shoal_status_t s = run_rooted(comm, &shoal_binomial_broadcast_ops, SHOAL_COLL_BROADCAST,
                                  send, m->b, count, dt, SHOAL_SUM, root);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: broadcast %s count %zu root %d: %s (%s)", rank,
               nranks, shoal_dtype_name(dt), count, root, shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(m->b[i] == m->want[i], fail,
                   "rank %d/%d root %d %s count %zu %s: byte %zu is %#x, want %#x", rank,
                   nranks, root, shoal_dtype_name(dt), count,
                   in_place ? "in-place" : "out-of-place", i, m->b[i], m->want[i]);
    if (!is_root && !in_place &&
        harness_check_untouched(m->a, 0, bytes, UNTOUCHED_BYTE, rank,
                                "non-root sendbuf of broadcast"))
        return 1;
    if (is_root && !in_place)
        RANK_CHECK(memcmp(m->a, m->want, bytes) == 0, fail, "rank %d: root's sendbuf changed",
                   rank);
    return harness_check_untouched(m->b, bytes, bytes + GUARD, GUARD_BYTE, rank,
                                   "past the end of recvbuf");
fail:
    return 1;
}

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    static const shoal_dtype_t bcast_dtypes[] = {SHOAL_INT8, SHOAL_FLOAT16, SHOAL_INT32,
                                                 SHOAL_FLOAT64};
    (void)arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    bufs_t m = {malloc(MAX_BYTES + GUARD), malloc(MAX_BYTES + GUARD), malloc(MAX_BYTES),
                malloc(MAX_BYTES)};
    RANK_CHECK(m.a && m.b && m.want && m.tmp, fail, "out of memory");
    for (int root = 0; root < nranks; root++) {
        for (size_t c = 0; c < NCOUNTS; c++) {
            for (size_t d = 0; d < sizeof(bcast_dtypes) / sizeof(bcast_dtypes[0]); d++)
                if (check_broadcast(comm, rank, nranks, root, counts[c], bcast_dtypes[d],
                                    (int)((d + c + (size_t)root) % 2), &m))
                    return 1;
            /* Every dtype x op; in place and out of place alternate over
             * the matrix so each variant meets every dtype, op and root. */
            for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++)
                for (int op = 0; op < SHOAL_OP_COUNT; op++)
                    if (check_reduce(comm, rank, nranks, root, counts[c], (shoal_dtype_t)dt,
                                     (shoal_op_t)op, (int)((dt + op + (int)c + root) % 2), &m))
                        return 1;
        }
    }
    free(m.a);
    free(m.b);
    free(m.want);
    free(m.tmp);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_matrix(const char *transport, int nranks)
{
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_matrix, NULL, 120), 0);
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
        cmocka_unit_test(test_tcp_8),
    };
    return cmocka_run_group_tests_name("binomial", tests, NULL, NULL);
}
