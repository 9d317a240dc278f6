/* All-to-all and all-to-all-v through both schedules (pairwise, direct),
 * called directly through shoal_coll_run so each algorithm is tested
 * whatever the cost model would pick. Rank counts 1..8 over shared memory
 * and 2..8 over tcp; element sizes 1, 4 and 8; counts 0, 1, odd and
 * several pipeline pieces. Every byte received is checked against the
 * value its sender computed for (source, destination, index), every byte
 * outside the destination blocks (guards, gaps between all-to-all-v
 * blocks) must keep its sentinel, and sendbuf must not change. */
#include "harness.h"

#include "core/coll.h"
#include "base/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define GUARD_BYTES 64
#define SENTINEL 0xa5

static const shoal_algo_ops_t *const algos[] = {&shoal_pairwise_alltoall_ops,
                                                &shoal_direct_alltoall_ops};
#define NALGOS (sizeof(algos) / sizeof(algos[0]))

static const shoal_dtype_t dtypes[] = {SHOAL_INT8, SHOAL_INT32, SHOAL_FLOAT64};
#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* Byte i of the block that src sends to dst: distinct per pair and call. */
static unsigned char pat(int src, int dst, size_t i, uint32_t salt)
{
    uint32_t h = harness_mix((uint32_t)src * 0x9e3779b1u + salt);
    h = harness_mix(h ^ ((uint32_t)dst * 0x85ebca6bu));
    return (unsigned char)harness_mix(h + (uint32_t)i);
}

/* Counts 0, 1, odd, and three pieces and a bit, whatever the element size. */
static size_t test_count(int c, size_t es)
{
    static const size_t small[] = {0, 1, 17};
    return c < 3 ? small[c] : 3 * (TEST_CHUNK / es) + 5;
}

static int check_sentinel(const unsigned char *p, size_t from, size_t to, int rank,
                          const char *what)
{
    for (size_t i = from; i < to; i++)
        RANK_CHECK(p[i] == SENTINEL, fail, "rank %d: %s: byte %zu is %#x, want the sentinel",
                   rank, what, i, p[i]);
    return 0;
fail:
    return 1;
}

static int check_alltoall(shoal_comm_t comm, int rank, int n, const shoal_algo_ops_t *algo,
                          shoal_dtype_t dt, size_t count)
{
    size_t es = shoal_dtype_bytes(dt), blk = count * es, total = (size_t)n * blk;
    uint32_t salt = (uint32_t)(count * 7 + es);
    unsigned char *send = malloc(total + 1), *recv = malloc(total + GUARD_BYTES);
    RANK_CHECK(send && recv, fail, "out of memory");
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < blk; i++)
            send[(size_t)j * blk + i] = pat(rank, j, i, salt);
    memset(recv, SENTINEL, total + GUARD_BYTES);
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLTOALL,
                              .sendbuf = count ? send : NULL,
                              .recvbuf = count ? recv : NULL,
                              .count = count,
                              .dtype = dt};
    shoal_status_t s = shoal_coll_run(comm, algo, "alltoall test", &args, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s alltoall of %zu x %s: %s (%s)", rank, n,
               algo->name, count, shoal_dtype_name(dt), shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < blk; i++) {
            unsigned char got = recv[(size_t)j * blk + i], want = pat(j, rank, i, salt);
            RANK_CHECK(got == want, fail,
                       "rank %d/%d: %s alltoall of %zu x %s: byte %zu of the block from "
                       "rank %d is %#x, want %#x", rank, n, algo->name, count,
                       shoal_dtype_name(dt), i, j, got, want);
            RANK_CHECK(send[(size_t)j * blk + i] == pat(rank, j, i, salt), fail,
                       "rank %d: %s alltoall changed sendbuf", rank, algo->name);
        }
    if (check_sentinel(recv, total, total + GUARD_BYTES, rank, "past the end of recvbuf"))
        return 1;
    free(send);
    free(recv);
    return 0;
fail:
    return 1;
}

/* Elements src sends dst in all-to-all-v call `call`: zeros, ones, odd
 * counts and several pieces, mixed over the pairs. */
static size_t vcount(int src, int dst, int call, size_t es)
{
    uint32_t h = harness_mix((uint32_t)(src * 131 + dst * 17 + call * 7919));
    if ((src + 2 * dst + call) % 4 == 1)
        return 0;
    switch (h % 4) {
    case 0: return 1;
    case 1: return 17 + (h >> 8) % 13;
    case 2: return 2 * (TEST_CHUNK / es) + (h >> 8) % 7;
    default: return (h >> 8) % 600;
    }
}

/* Lays blocks of counts[] out with gaps: the send side in falling rank
 * order, the receive side in rising order, so the displacements follow
 * neither the rank order nor each other. Returns the extent. */
static size_t layout(const size_t *counts, size_t *displs, int n, int falling)
{
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        int j = falling ? n - 1 - k : k;
        displs[j] = off + (size_t)(falling ? j % 3 + 1 : 2 * (j % 2) + 3);
        off = displs[j] + counts[j];
    }
    return off;
}

static int check_alltoallv(shoal_comm_t comm, int rank, int n, const shoal_algo_ops_t *algo,
                           shoal_dtype_t dt, int call)
{
    size_t es = shoal_dtype_bytes(dt);
    size_t sc[8], sd[8], rc[8], rd[8];
    for (int j = 0; j < n; j++) {
        sc[j] = vcount(rank, j, call, es);
        rc[j] = vcount(j, rank, call, es);
    }
    size_t sext = layout(sc, sd, n, 1) * es, rext = layout(rc, rd, n, 0) * es;
    uint32_t salt = (uint32_t)call * 977u + (uint32_t)es;
    unsigned char *send = malloc(sext + 1), *recv = malloc(rext + GUARD_BYTES);
    RANK_CHECK(send && recv, fail, "out of memory");
    memset(send, 0, sext);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < sc[j] * es; i++)
            send[sd[j] * es + i] = pat(rank, j, i, salt);
    memset(recv, SENTINEL, rext + GUARD_BYTES);
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLTOALLV, .sendbuf = send, .recvbuf = recv,
                              .dtype = dt, .sendcounts = sc, .sdispls = sd,
                              .recvcounts = rc, .rdispls = rd};
    shoal_status_t s = shoal_coll_run(comm, algo, "alltoallv test", &args, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s alltoallv %d of %s: %s (%s)", rank, n,
               algo->name, call, shoal_dtype_name(dt), shoal_status_string(s),
               shoal_comm_last_error(comm));
    /* Walk the receive extent in rank order: blocks hold the sender's
     * bytes, the gaps before them and the guard keep the sentinel. */
    size_t at = 0;
    for (int j = 0; j < n; j++) {
        size_t b = rd[j] * es;
        if (check_sentinel(recv, at, b, rank, "gap between alltoallv blocks"))
            return 1;
        for (size_t i = 0; i < rc[j] * es; i++) {
            unsigned char want = pat(j, rank, i, salt);
            RANK_CHECK(recv[b + i] == want, fail,
                       "rank %d/%d: %s alltoallv %d of %s: byte %zu of the %zu-element "
                       "block from rank %d is %#x, want %#x", rank, n, algo->name, call,
                       shoal_dtype_name(dt), i, rc[j], j, recv[b + i], want);
        }
        at = b + rc[j] * es;
    }
    if (check_sentinel(recv, at, rext + GUARD_BYTES, rank, "past the last alltoallv block"))
        return 1;
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < sc[j] * es; i++)
            RANK_CHECK(send[sd[j] * es + i] == pat(rank, j, i, salt), fail,
                       "rank %d: %s alltoallv changed sendbuf", rank, algo->name);
    free(send);
    free(recv);
    return 0;
fail:
    return 1;
}

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    for (size_t a = 0; a < NALGOS; a++) {
        for (size_t d = 0; d < NDTYPES; d++) {
            size_t es = shoal_dtype_bytes(dtypes[d]);
            for (int c = 0; c < 4; c++)
                if (check_alltoall(comm, rank, nranks, algos[a], dtypes[d], test_count(c, es)))
                    return 1;
            for (int call = 0; call < 3; call++)
                if (check_alltoallv(comm, rank, nranks, algos[a], dtypes[d], call))
                    return 1;
        }
    }
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

/* The cost model's shape: with one rank pair both schedules are the same
 * exchange; with many ranks, tiny blocks favour direct (one latency) and
 * large ones pairwise (no contention). */
static void test_cost(void **state)
{
    (void)state;
    shoal_team_t comm = {.rank = 0, .nranks = 8, .cost = {.link_lat_s = 2e-6,
                         .link_bw_Bps = 10e9}};
    shoal_coll_args_t small = {.kind = SHOAL_COLL_ALLTOALL, .count = 1, .dtype = SHOAL_INT32};
    shoal_coll_args_t large = small;
    large.count = 1 << 20;
    assert_true(shoal_direct_alltoall_ops.cost(&comm, &small) <
                shoal_pairwise_alltoall_ops.cost(&comm, &small));
    assert_true(shoal_pairwise_alltoall_ops.cost(&comm, &large) <
                shoal_direct_alltoall_ops.cost(&comm, &large));
    comm.nranks = 2;
    assert_true(shoal_direct_alltoall_ops.cost(&comm, &large) ==
                shoal_pairwise_alltoall_ops.cost(&comm, &large));
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
        cmocka_unit_test(test_tcp_8), cmocka_unit_test(test_cost),
    };
    return cmocka_run_group_tests_name("alltoall", tests, NULL, NULL);
}
