/* Broadcast, reduce and barrier over forked ranks, over shared memory and
 * over tcp. Reduce covers every dtype x op against the scalar reference
 * (inputs exact in every dtype, so the order of reduction does not matter);
 * broadcast covers a few dtypes with odd counts; both run for every root,
 * counts 0, 1, 17 and several pipeline pieces, in place and out of place,
 * and check that nothing is written past recvbuf nor, for reduce, into the
 * recvbuf of a non-root. The barrier is checked through a counter in shared
 * memory; bad arguments must fail cleanly and leave comm usable. */
#include "harness.h"

#include "base/dtype.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

static int check_reduce(shoal_comm_t comm, int rank, int nranks, int root, size_t count,
                        shoal_dtype_t dt, shoal_op_t op, int in_place, bufs_t *m)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es;
    int is_root = rank == root;
    harness_fill_exact(m->a, count, rank, dt, op);
    memset(m->b, is_root ? GUARD_BYTE : UNTOUCHED_BYTE, bytes + GUARD);
    /* In place on root; on non-roots the in-place variant passes a NULL
     * recvbuf, which is allowed there. */
    void *send = m->a;
    void *recv = is_root ? (in_place ? m->a : m->b) : (in_place ? NULL : m->b);
    shoal_status_t s = shoal_reduce(count ? send : NULL, count ? recv : NULL, count, dt, op,
                                    root, comm);
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
    void *send, *recv = m->b;
    if (is_root) {
        memcpy(in_place ? m->b : m->a, m->want, bytes);
        send = in_place ? m->b : m->a;
    } else {
        /* sendbuf is ignored off the root: NULL or a buffer that must stay. */
        memset(m->a, UNTOUCHED_BYTE, bytes);
        send = in_place ? NULL : m->a;
    }
    shoal_status_t s =
        shoal_broadcast(count ? send : NULL, count ? recv : NULL, count, dt, root, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: broadcast %s count %zu root %d: %s (%s)", rank,
               nranks, shoal_dtype_name(dt), count, root, shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(m->b[i] == m->want[i], fail,
                   "rank %d/%d root %d %s count %zu %s: byte %zu is %#x, want %#x", rank,
                   nranks, root, shoal_dtype_name(dt), count,
                   in_place ? "in-place" : "out-of-place", i, m->b[i], m->want[i]);
    if (!is_root && !in_place && harness_check_untouched(m->a, 0, bytes, UNTOUCHED_BYTE, rank,
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
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    bufs_t m = {malloc(MAX_BYTES + GUARD), malloc(MAX_BYTES + GUARD), malloc(MAX_BYTES),
                malloc(MAX_BYTES)};
    RANK_CHECK(m.a && m.b && m.want && m.tmp, fail, "out of memory");
    static const shoal_dtype_t bcast_dtypes[] = {SHOAL_INT8, SHOAL_FLOAT16, SHOAL_INT32,
                                                 SHOAL_FLOAT64};
    /* Every rank is root in turn: the chain starts, ends and wraps around
     * at every position. */
    for (int root = 0; root < nranks; root++) {
        for (size_t c = 0; c < NCOUNTS; c++) {
            for (size_t d = 0; d < sizeof(bcast_dtypes) / sizeof(bcast_dtypes[0]); d++)
                for (int in_place = 0; in_place < 2; in_place++)
                    if (check_broadcast(comm, rank, nranks, root, counts[c],
                                        bcast_dtypes[d], in_place, &m))
                        return 1;
            /* Every dtype x op; in place and out of place alternate over
             * the matrix so each variant meets every dtype and op. */
            for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++)
                for (int op = 0; op < SHOAL_OP_COUNT; op++)
                    if (check_reduce(comm, rank, nranks, root, counts[c],
                                     (shoal_dtype_t)dt, (shoal_op_t)op,
                                     (int)((dt + op + (int)c + root) % 2), &m))
                        return 1;
        }
    }
    free(m.a);
    free(m.b);
    free(m.want);
    free(m.tmp);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
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

#define BARRIER_ROUNDS 50

/* Each round, every rank counts itself in a counter shared by all ranks
 * (mapped before the fork) and then enters the barrier; whoever leaves it
 * must see every rank's count of that round. A rank that left early would
 * see fewer. */
static int rank_barrier(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    atomic_int *counter = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    for (int round = 1; round <= BARRIER_ROUNDS; round++) {
        atomic_fetch_add_explicit(counter, 1, memory_order_seq_cst);
        shoal_status_t s = shoal_barrier(comm);
        RANK_CHECK(s == SHOAL_OK, fail, "rank %d: barrier %d: %s (%s)", rank, round,
                   shoal_status_string(s), shoal_comm_last_error(comm));
        int seen = atomic_load_explicit(counter, memory_order_seq_cst);
        RANK_CHECK(seen >= round * nranks, fail, "rank %d left barrier %d having seen %d of %d",
                   rank, round, seen, round * nranks);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_barrier(const char *transport, int nranks)
{
    harness_use_transport(transport, TEST_CHUNK);
    atomic_int *counter = mmap(NULL, sizeof(*counter), PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(counter != MAP_FAILED);
    atomic_init(counter, 0);
    assert_int_equal(harness_run_ranks(nranks, rank_barrier, counter, 120), 0);
    assert_int_equal(atomic_load(counter), nranks * BARRIER_ROUNDS);
    munmap(counter, sizeof(*counter));
}

static void test_barrier(void **state)
{
    (void)state;
    for (int n = 1; n <= 8; n++)
        run_barrier("shm", n);
    run_barrier("tcp", 2);
    run_barrier("tcp", 5);
}

/* A call every rank makes with the same bad argument: each must get
 * SHOAL_ERR_INVALID_ARG with a reason, and nothing may be written; a rank
 * that does not jumps to label. */
#define EXPECT_INVALID(call, label, what)                                     \
    do {                                                                      \
        shoal_status_t s_ = (call);                                           \
        RANK_CHECK(s_ == SHOAL_ERR_INVALID_ARG, label, "rank %d: %s gave %s", \
                   rank, what, shoal_status_string(s_));                      \
        RANK_CHECK(shoal_comm_last_error(comm)[0] != '\0', label,             \
                   "rank %d: %s left no reason", rank, what);                 \
    } while (0)

static int rank_bad_input(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int32_t in[4] = {1, 2, 3, 4}, out[4] = {-7, -7, -7, -7};
    EXPECT_INVALID(shoal_broadcast(in, out, 4, SHOAL_INT32, -1, comm), fail, "broadcast root -1");
    EXPECT_INVALID(shoal_broadcast(in, out, 4, SHOAL_INT32, nranks, comm), fail,
                   "broadcast root nranks");
    EXPECT_INVALID(shoal_reduce(in, out, 4, SHOAL_INT32, SHOAL_SUM, -1, comm), fail,
                   "reduce root -1");
    EXPECT_INVALID(shoal_reduce(in, out, 4, SHOAL_INT32, SHOAL_SUM, nranks, comm), fail,
                   "reduce root nranks");
    EXPECT_INVALID(shoal_broadcast(in, NULL, 4, SHOAL_INT32, 0, comm), fail,
                   "broadcast NULL recvbuf");
    EXPECT_INVALID(shoal_reduce(NULL, out, 4, SHOAL_INT32, SHOAL_SUM, 0, comm), fail,
                   "reduce NULL sendbuf");
    EXPECT_INVALID(shoal_broadcast(in, out, 4, SHOAL_DTYPE_COUNT, 0, comm), fail,
                   "broadcast unknown dtype");
    EXPECT_INVALID(shoal_reduce(in, out, 4, (shoal_dtype_t)-1, SHOAL_SUM, 0, comm), fail,
                   "reduce unknown dtype");
    EXPECT_INVALID(shoal_reduce(in, out, 4, SHOAL_INT32, SHOAL_OP_COUNT, 0, comm), fail,
                   "reduce unknown op");
    EXPECT_INVALID(shoal_reduce(in, out, SIZE_MAX / 2, SHOAL_INT32, SHOAL_SUM, 0, comm), fail,
                   "reduce overflowing count");
    if (nranks == 1) {
        /* Buffers that only the root needs: with one rank, it is the only
         * one to see the error, so no peer is left waiting. */
        EXPECT_INVALID(shoal_broadcast(NULL, out, 4, SHOAL_INT32, 0, comm), fail,
                       "broadcast NULL sendbuf on root");
        EXPECT_INVALID(shoal_reduce(in, NULL, 4, SHOAL_INT32, SHOAL_SUM, 0, comm), fail,
                       "reduce NULL recvbuf on root");
    }
    for (int i = 0; i < 4; i++)
        RANK_CHECK(out[i] == -7, fail, "rank %d: a rejected call wrote recvbuf[%d]", rank, i);
    /* Count 0 with NULL buffers is fine. */
    RANK_CHECK(shoal_broadcast(NULL, NULL, 0, SHOAL_INT32, 0, comm) == SHOAL_OK, fail,
               "empty bcast");
    RANK_CHECK(shoal_reduce(NULL, NULL, 0, SHOAL_INT32, SHOAL_SUM, 0, comm) == SHOAL_OK, fail,
               "empty reduce");
    /* comm still works. */
    int root = nranks - 1;
    int32_t v[4] = {rank, rank, rank, rank};
    RANK_CHECK(shoal_broadcast(v, v, 4, SHOAL_INT32, root, comm) == SHOAL_OK, fail,
               "broadcast after errors: %s", shoal_comm_last_error(comm));
    for (int i = 0; i < 4; i++)
        RANK_CHECK(v[i] == root, fail, "rank %d: broadcast after errors gave %d", rank, v[i]);
    int32_t one = 1, sum = 0;
    RANK_CHECK(shoal_reduce(&one, rank == 0 ? &sum : NULL, 1, SHOAL_INT32, SHOAL_SUM, 0, comm) ==
                   SHOAL_OK, fail,
               "reduce after errors: %s", shoal_comm_last_error(comm));
    RANK_CHECK(rank != 0 || sum == nranks, fail, "reduce after errors gave %d", sum);
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier after errors");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_bad_input(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_bad_input, NULL, 60), 0);
    assert_int_equal(harness_run_ranks(3, rank_bad_input, NULL, 60), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_bad_input, NULL, 60), 0);
}

static void test_invalid_comm(void **state)
{
    (void)state;
    int x = 0;
    assert_int_equal(shoal_broadcast(&x, &x, 1, SHOAL_INT32, 0, NULL), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_reduce(&x, &x, 1, SHOAL_INT32, SHOAL_SUM, 0, NULL),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_barrier(NULL), SHOAL_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_1),     cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3),     cmocka_unit_test(test_shm_4),
        cmocka_unit_test(test_shm_5),     cmocka_unit_test(test_shm_6),
        cmocka_unit_test(test_shm_7),     cmocka_unit_test(test_shm_8),
        cmocka_unit_test(test_tcp_2),     cmocka_unit_test(test_tcp_3),
        cmocka_unit_test(test_tcp_4),     cmocka_unit_test(test_tcp_5),
        cmocka_unit_test(test_tcp_6),     cmocka_unit_test(test_tcp_7),
        cmocka_unit_test(test_tcp_8),     cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_bad_input), cmocka_unit_test(test_invalid_comm),
    };
    return cmocka_run_group_tests_name("rooted", tests, NULL, NULL);
}
