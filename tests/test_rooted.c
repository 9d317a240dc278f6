/* Barrier and the rooted collectives' bad input, over forked ranks, over
 * shared memory and over tcp: the barrier is checked through a counter in
 * shared memory; bad arguments must fail cleanly and leave comm usable.
 * The broadcast and reduce matrices, of every algorithm and of the public
 * calls, are test_algos.c's. */
#include "harness.h"

#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>

#define TEST_CHUNK 4096
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
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_invalid_comm),
    };
    return cmocka_run_group_tests_name("rooted", tests, NULL, NULL);
}
