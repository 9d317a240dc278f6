/* Barrier and the rooted collectives' bad input, over forked ranks, over
 * shared memory and over tcp: the barrier is checked through a counter in
 * shared memory; bad arguments must fail cleanly and leave comm usable.
 * The broadcast and reduce matrices, of every algorithm and of the public
 * calls, are test_algos.c's; the single-copy gather and scatter run here at
 * every root and element size (test_mem.c has them in its memory modes). */
#include "harness.h"

#include "core/comm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- gather and scatter, single copy ---------------------------------- */

/* How a matrix run gets its buffers: from shoal_mem_alloc (the put
 * algorithms go single copy), or malloc'd with cross-memory attach off
 * (every rank falls back to the slots together). */
typedef struct {
    int shared;
} put_run_t;

static unsigned char byte_of(int src, int dst, size_t i)
{
    return (unsigned char)harness_mix((uint32_t)(src * 7919 + dst * 131) ^ (uint32_t)i);
}

static void *buf_get(const put_run_t *run, size_t bytes)
{
    void *p = NULL;
    if (!run->shared)
        return malloc(bytes ? bytes : 1);
    return shoal_mem_alloc(bytes ? bytes : 1, &p) == SHOAL_OK ? p : NULL;
}

static void buf_put(const put_run_t *run, void *p)
{
    if (run->shared)
        shoal_mem_free(p);
    else
        free(p);
}

static uint64_t single_moves(shoal_comm_t comm)
{
    uint64_t n = 0;
    for (int q = 0; q < comm->team.nranks; q++) {
        if (comm->team.eps[q])
            n += comm->team.eps[q]->puts + comm->team.eps[q]->gets;
    }
    return n;
}

/* One gather (scatter when scatter) of count elements of es bytes at root,
 * checked on every rank, with the single-copy moves it must have made:
 * one per non-root (its put, or its get), none on the root. */
static int check_rooted(shoal_comm_t comm, const put_run_t *run, int scatter, int rank, int n,
                        int root, size_t count, size_t es, int in_place)
{
    static const shoal_dtype_t by_size[9] = {[1] = SHOAL_INT8, [2] = SHOAL_FLOAT16,
                                             [4] = SHOAL_FLOAT32, [8] = SHOAL_FLOAT64};
    size_t bytes = count * es, total = (size_t)n * bytes;
    unsigned char *in = buf_get(run, total), *out = buf_get(run, total);
    RANK_CHECK(in && out, fail, "rank %d: no memory", rank);
    memset(out, 0xee, total ? total : 1);
    uint64_t before = single_moves(comm);
    shoal_status_t s;
    if (!scatter) {
        unsigned char *src = in_place && rank == root ? out + (size_t)rank * bytes : in;
        for (size_t i = 0; i < bytes; i++)
            src[i] = byte_of(rank, 0, i);
        s = shoal_gather(src, out, count, by_size[es], root, comm);
    } else {
        if (rank == root)
            for (size_t i = 0; i < total; i++)
                in[i] = byte_of(root, 0, i);
        unsigned char *dst = in_place && rank == root ? in + (size_t)rank * bytes : out;
        s = shoal_scatter(in, dst, count, by_size[es], root, comm);
        if (dst != out)
            memcpy(out, dst, bytes);
    }
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: %s of %zu x %zu B at root %d: %s", rank,
               scatter ? "scatter" : "gather", count, es, root, shoal_status_string(s));
    if (scatter) {
        for (size_t i = 0; i < bytes; i++)
            RANK_CHECK(out[i] == byte_of(root, 0, (size_t)rank * bytes + i), fail,
                       "rank %d: scatter byte %zu of %zu x %zu B at root %d", rank, i, count,
                       es, root);
    } else if (rank == root) {
        for (size_t i = 0; i < total; i++)
            RANK_CHECK(out[i] == byte_of((int)(i / bytes), 0, i % bytes), fail,
                       "rank %d: gather byte %zu of %zu x %zu B", rank, i, count, es);
    } else {
        for (size_t i = 0; i < total; i++)
            RANK_CHECK(out[i] == 0xee, fail, "rank %d: a non-root's output written", rank);
    }
    uint64_t due = run->shared && n > 1 && count > 0 && rank != root ? 1 : 0;
    uint64_t did = single_moves(comm) - before;
    RANK_CHECK(did == due, fail, "rank %d: %s of %zu x %zu B at root %d: %llu single-copy "
               "moves, want %llu", rank, scatter ? "scatter" : "gather", count, es, root,
               (unsigned long long)did, (unsigned long long)due);
    buf_put(run, in);
    buf_put(run, out);
    return 0;
fail:
    return 1;
}

static int rank_put_rooted(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const put_run_t *run = arg;
    static const size_t sizes[] = {1, 2, 4, 8};
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    for (int scatter = 0; scatter < 2; scatter++)
        for (int root = 0; root < nranks; root++)
            for (size_t e = 0; e < sizeof(sizes) / sizeof(sizes[0]); e++) {
                /* 0, 1, odd, several slot pieces of any element size. */
                size_t counts[] = {0, 1, 17, 3 * TEST_CHUNK / sizes[e] + 5};
                for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                    for (int in_place = 0; in_place < 2; in_place++)
                        if (check_rooted(comm, run, scatter, rank, nranks, root, counts[c],
                                         sizes[e], in_place))
                            return 1;
            }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* The put gather and scatter (forced) at every root, element sizes 1..8:
 * single copy with shareable buffers on 1..8 ranks; malloc'd buffers
 * without cross-memory attach fall back to the slots on every rank. */
static void test_put_rooted(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_ALGO", "gather:put,scatter:put");
    harness_setenv("SHOAL_CMA", "off");
    put_run_t shared = {.shared = 1}, priv = {.shared = 0};
    for (int n = 1; n <= 8; n++) {
        if (!harness_ranks_wanted(n))
            continue;
        assert_int_equal(harness_run_ranks(n, rank_put_rooted, &shared, 120), 0);
    }
    assert_int_equal(harness_run_ranks(3, rank_put_rooted, &priv, 120), 0);
    harness_setenv("SHOAL_CMA", NULL);
    harness_setenv("SHOAL_ALGO", NULL);
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
        cmocka_unit_test(test_put_rooted),
        cmocka_unit_test(test_invalid_comm),
    };
    return cmocka_run_group_tests_name("rooted", tests, NULL, NULL);
}
