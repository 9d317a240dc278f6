/* Algorithm selection through the public API: every algorithm of every
 * collective, forced with SHOAL_ALGO=coll:name, must give the reference
 * result (every dtype x op where the collective reduces) for rank counts
 * 1..8 and counts 0, 1, odd and several pieces, over shared memory; a few
 * over tcp. The lists come from the library itself (shoal_algo_at), so a
 * new algorithm is tested as soon as it is registered. Unknown names fail
 * at init; a forced algorithm that cannot serve a call falls back. */
#include "harness.h"

#include "algos/algo.h"
#include "base/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096

static const size_t counts[] = {0, 1, 19, 2 * TEST_CHUNK + 7};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static int32_t val(int rank, size_t i, int salt)
{
    return (int32_t)(harness_mix((uint32_t)rank * 7919u + (uint32_t)i * 31u + (uint32_t)salt) &
                     0xffffff);
}

/* Reducing kinds: every dtype x op at count c, exact reference. */
static int check_reducing(shoal_comm_t comm, shoal_coll_kind_t kind, int rank, int n, size_t c)
{
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++) {
        for (int o = 0; o < SHOAL_OP_COUNT; o++) {
            shoal_dtype_t dt = (shoal_dtype_t)d;
            shoal_op_t op = (shoal_op_t)o;
            size_t es = shoal_dtype_bytes(dt), total = c * (size_t)n;
            size_t in_n = kind == SHOAL_COLL_REDUCE_SCATTER ? total : c;
            unsigned char *in = malloc(in_n * es + 1), *out = malloc(in_n * es + 1),
                          *want = malloc(in_n * es + 1), *tmp = malloc(in_n * es + 1);
            harness_fill_exact(in, in_n, rank, dt, op);
            harness_expected(want, tmp, in_n, n, dt, op);
            shoal_status_t s;
            size_t off = 0, len = c;
            if (kind == SHOAL_COLL_ALLREDUCE) {
                s = shoal_allreduce(in, out, c, dt, op, comm);
            } else if (kind == SHOAL_COLL_REDUCE_SCATTER) {
                s = shoal_reduce_scatter(in, out, c, dt, op, comm);
                off = (size_t)rank * c;
            } else {
                s = shoal_reduce(in, out, c, dt, op, (int)(c % (size_t)n), comm);
                if (rank != (int)(c % (size_t)n))
                    len = 0;
            }
            RANK_CHECK(s == SHOAL_OK, fail, "%s %s %s count %zu: %s (%s)",
                       shoal_coll_kind_name(kind), shoal_dtype_name(dt), shoal_op_name(op), c,
                       shoal_status_string(s), shoal_comm_last_error(comm));
            RANK_CHECK(!memcmp(out, want + off * es, len * es), fail,
                       "%s %s %s count %zu on rank %d/%d: wrong result",
                       shoal_coll_kind_name(kind), shoal_dtype_name(dt), shoal_op_name(op), c,
                       rank, n);
            free(in);
            free(out);
            free(want);
            free(tmp);
        }
    }
    return 0;
fail:
    return 1;
}

/* Moving kinds: int32 payloads that name their source, destination and
 * index. */
static int check_moving(shoal_comm_t comm, shoal_coll_kind_t kind, int rank, int n, size_t c)
{
    size_t total = c * (size_t)n;
    int32_t *in = calloc(total + 1, 4), *out = malloc(total * 4 + 4);
    int root = (int)(c % (size_t)n);
    shoal_status_t s = SHOAL_OK;
    memset(out, 0xee, total * 4 + 4);
    switch (kind) {
    case SHOAL_COLL_ALLGATHER:
        for (size_t i = 0; i < c; i++)
            in[i] = val(rank, i, 1);
        s = shoal_allgather(in, out, c, SHOAL_INT32, comm);
        for (int r = 0; r < n && s == SHOAL_OK; r++)
            for (size_t i = 0; i < c; i++)
                RANK_CHECK(out[(size_t)r * c + i] == val(r, i, 1), fail, "allgather [%d][%zu]", r,
                           i);
        break;
    case SHOAL_COLL_BROADCAST:
        for (size_t i = 0; i < c; i++)
            in[i] = val(root, i, 2);
        s = shoal_broadcast(in, out, c, SHOAL_INT32, root, comm);
        for (size_t i = 0; i < c && s == SHOAL_OK; i++)
            RANK_CHECK(out[i] == val(root, i, 2), fail, "broadcast [%zu]", i);
        break;
    case SHOAL_COLL_ALLTOALL:
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < c; i++)
                in[(size_t)r * c + i] = val(rank * 100 + r, i, 3);
        s = shoal_alltoall(in, out, c, SHOAL_INT32, comm);
        for (int r = 0; r < n && s == SHOAL_OK; r++)
            for (size_t i = 0; i < c; i++)
                RANK_CHECK(out[(size_t)r * c + i] == val(r * 100 + rank, i, 3), fail,
                           "alltoall [%d][%zu]", r, i);
        break;
    case SHOAL_COLL_ALLTOALLV: {
        /* Rank j gets (rank + j) % 3 * c / 2 elements from this rank,
         * blocks laid out in reverse order with gaps. */
        size_t sc[8], sd[8], rc[8], rd[8], so = 0, ro = 0;
        for (int j = n - 1; j >= 0; j--) {
            sc[j] = (size_t)((rank + j) % 3) * c / 2;
            rc[j] = (size_t)((j + rank) % 3) * c / 2;
            sd[j] = so;
            rd[j] = ro;
            so += sc[j] + 1;
            ro += rc[j] + 2;
        }
        int32_t *vin = calloc(so + 1, 4), *vout = malloc(ro * 4 + 4);
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < sc[j]; i++)
                vin[sd[j] + i] = val(rank * 100 + j, i, 4);
        s = shoal_alltoallv(vin, sc, sd, vout, rc, rd, SHOAL_INT32, comm);
        for (int j = 0; j < n && s == SHOAL_OK; j++)
            for (size_t i = 0; i < rc[j]; i++)
                RANK_CHECK(vout[rd[j] + i] == val(j * 100 + rank, i, 4), fail,
                           "alltoallv [%d][%zu]", j, i);
        free(vin);
        free(vout);
        break;
    }
    case SHOAL_COLL_GATHER:
        for (size_t i = 0; i < c; i++)
            in[i] = val(rank, i, 5);
        s = shoal_gather(in, out, c, SHOAL_INT32, root, comm);
        for (int r = 0; r < n && s == SHOAL_OK && rank == root; r++)
            for (size_t i = 0; i < c; i++)
                RANK_CHECK(out[(size_t)r * c + i] == val(r, i, 5), fail, "gather [%d][%zu]", r, i);
        break;
    case SHOAL_COLL_SCATTER:
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < c; i++)
                in[(size_t)r * c + i] = val(r, i, 6);
        s = shoal_scatter(in, out, c, SHOAL_INT32, root, comm);
        for (size_t i = 0; i < c && s == SHOAL_OK; i++)
            RANK_CHECK(out[i] == val(rank, i, 6), fail, "scatter [%zu]", i);
        break;
    case SHOAL_COLL_SEND:
    case SHOAL_COLL_RECV:
        /* Around the ring: even ranks send first, odd ones receive first. */
        if (n == 1)
            break;
        for (size_t i = 0; i < c; i++)
            in[i] = val(rank, i, 7);
        if (rank % 2 == 0) {
            s = shoal_send(in, c, SHOAL_INT32, (rank + 1) % n, comm);
            if (s == SHOAL_OK)
                s = shoal_recv(out, c, SHOAL_INT32, (rank + n - 1) % n, comm);
        } else {
            s = shoal_recv(out, c, SHOAL_INT32, (rank + n - 1) % n, comm);
            if (s == SHOAL_OK)
                s = shoal_send(in, c, SHOAL_INT32, (rank + 1) % n, comm);
        }
        for (size_t i = 0; i < c && s == SHOAL_OK; i++)
            RANK_CHECK(out[i] == val((rank + n - 1) % n, i, 7), fail, "recv [%zu]", i);
        break;
    default:
        break;
    }
    RANK_CHECK(s == SHOAL_OK, fail, "%s count %zu: %s (%s)", shoal_coll_kind_name(kind), c,
               shoal_status_string(s), shoal_comm_last_error(comm));
    free(in);
    free(out);
    return 0;
fail:
    return 1;
}

static int rank_kind(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    shoal_coll_kind_t kind = *(const shoal_coll_kind_t *)arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(n, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    for (size_t k = 0; k < NCOUNTS; k++) {
        int reducing = kind == SHOAL_COLL_ALLREDUCE || kind == SHOAL_COLL_REDUCE_SCATTER ||
                       kind == SHOAL_COLL_REDUCE;
        /* Every dtype x op on the small counts; the large one in int32 sum
         * only, through the same code as check_moving's payloads. */
        if (reducing && (counts[k] < 100 ? check_reducing(comm, kind, rank, n, counts[k]) : 0))
            return 1;
        if (!reducing && check_moving(comm, kind, rank, n, counts[k]))
            return 1;
    }
    if (kind == SHOAL_COLL_ALLREDUCE) {
        /* Several pieces: all ranks must agree bitwise on a float sum. */
        size_t c = 3 * TEST_CHUNK + 1;
        float *in = malloc(c * 4), *out = malloc(c * 4), *root = malloc(c * 4);
        for (size_t i = 0; i < c; i++)
            in[i] = (float)val(rank, i, 8) * 1e-3f + 0.1f / (float)(rank + 1);
        RANK_CHECK(shoal_allreduce(in, out, c, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
                   "float allreduce");
        memcpy(root, out, c * 4);
        RANK_CHECK(shoal_broadcast(root, root, c, SHOAL_FLOAT32, 0, comm) == SHOAL_OK, fail,
                   "bcast");
        RANK_CHECK(!memcmp(root, out, c * 4), fail, "rank %d's float sum differs from rank 0's",
                   rank);
        free(in);
        free(out);
        free(root);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_forced(shoal_coll_kind_t kind, const char *algo, const char *tl, int n)
{
    char setting[128];
    snprintf(setting, sizeof(setting), "%s:%s", shoal_coll_kind_name(kind), algo);
    harness_setenv("SHOAL_ALGO", setting);
    harness_setenv("SHOAL_SHM_ENABLE", strcmp(tl, "shm") ? "n" : "y");
    int rc = harness_run_ranks(n, rank_kind, &kind, 120);
    if (rc != 0)
        print_error("SHOAL_ALGO=%s over %s with %d ranks failed\n", setting, tl, n);
    assert_int_equal(rc, 0);
}

static void setup_env(void)
{
    char chunk[32];
    snprintf(chunk, sizeof(chunk), "%d", TEST_CHUNK);
    harness_setenv("SHOAL_CHUNK_SIZE", chunk);
    harness_setenv("SHOAL_TIMEOUT", "20s");
}

/* Every registered algorithm of every collective, ranks 1..8, shm. */
static void test_every_algorithm_shm(void **state)
{
    (void)state;
    setup_env();
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        if (k == SHOAL_COLL_RECV)
            continue; /* send and recv share their algorithm and test */
        const shoal_algo_ops_t *a;
        for (int i = 0; (a = shoal_algo_at((shoal_coll_kind_t)k, i)); i++)
            for (int n = 1; n <= 8; n++)
                run_forced((shoal_coll_kind_t)k, a->name, "shm", n);
    }
    harness_setenv("SHOAL_ALGO", NULL);
}

/* The same over tcp, at 3 and 4 ranks. */
static void test_every_algorithm_tcp(void **state)
{
    (void)state;
    setup_env();
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        if (k == SHOAL_COLL_RECV)
            continue;
        const shoal_algo_ops_t *a;
        for (int i = 0; (a = shoal_algo_at((shoal_coll_kind_t)k, i)); i++)
            for (int n = 3; n <= 4; n++)
                run_forced((shoal_coll_kind_t)k, a->name, "tcp", n);
    }
    harness_setenv("SHOAL_ALGO", NULL);
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
}

static int rank_init_fails(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(n, id, rank, &comm);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "init with SHOAL_ALGO=%s: %s", (const char *)arg,
               shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_bad_setting(void **state)
{
    (void)state;
    static const char *const bad[] = {"bogus", "allreduce:chain", "nosuchcoll:ring",
                                      "allreduce:ring,broadcast:nope", "allreduce:"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        harness_setenv("SHOAL_ALGO", bad[i]);
        assert_int_equal(shoal_algo_check_setting(), SHOAL_ERR_INVALID_ARG);
        assert_int_equal(harness_run_ranks(1, rank_init_fails, (void *)bad[i], 30), 0);
    }
    static const char *const good[] = {"auto", "ring", "allreduce:ring,broadcast:chain",
                                       "all:ring", "allreduce:auto"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        harness_setenv("SHOAL_ALGO", good[i]);
        assert_int_equal(shoal_algo_check_setting(), SHOAL_OK);
    }
    harness_setenv("SHOAL_ALGO", NULL);
}

/* A communicator for the cost model alone: 8 ranks on one host, 2 us and
 * 10 GB/s links, nothing connected. */
static void fake_comm(struct shoal_comm *comm)
{
    memset(comm, 0, sizeof(*comm));
    comm->nranks = 8;
    comm->nhosts = 1;
    comm->chunk_size = 128 << 10;
    comm->link_lat_s = 2e-6;
    comm->link_bw_Bps = 10e9;
}

/* The selection itself: a bare name forces every collective that has it;
 * the cost model prefers few steps for tiny messages and the ring for
 * large ones (where it has a choice). */
static void test_select_rules(void **state)
{
    (void)state;
    struct shoal_comm comm;
    fake_comm(&comm);
    shoal_coll_args_t big = {.kind = SHOAL_COLL_ALLREDUCE, .count = 64 << 20,
                             .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
    harness_setenv("SHOAL_ALGO", "auto");
    const shoal_algo_ops_t *a = shoal_algo_select(&comm, &big);
    assert_non_null(a);
    assert_string_equal(a->name, "ring");
    harness_setenv("SHOAL_ALGO", "ring");
    shoal_coll_args_t bc = {.kind = SHOAL_COLL_BROADCAST, .count = 4, .dtype = SHOAL_INT8};
    a = shoal_algo_select(&comm, &bc);
    assert_non_null(a); /* no ring broadcast: the cost model's choice */
    harness_setenv("SHOAL_ALGO", "allreduce:ring");
    shoal_coll_args_t small = big;
    small.count = 1;
    a = shoal_algo_select(&comm, &small);
    assert_string_equal(a->name, "ring");
    harness_setenv("SHOAL_ALGO", NULL);
    a = shoal_algo_select(&comm, &small);
    assert_non_null(a);
    if (shoal_algo_find(SHOAL_COLL_ALLREDUCE, "oneshot") ||
        shoal_algo_find(SHOAL_COLL_ALLREDUCE, "tree"))
        assert_string_not_equal(a->name, "ring");
}

/* The communicator's memo of the last choice: a repeated call gets the
 * choice the cost model would make, a call with other arguments or after
 * the settings change is chosen afresh, and a stale memo is never used. */
static void test_choice_memo(void **state)
{
    (void)state;
    struct shoal_comm comm;
    fake_comm(&comm);
    harness_setenv("SHOAL_ALGO", NULL);
    shoal_coll_args_t big = {.kind = SHOAL_COLL_ALLREDUCE, .count = 64 << 20,
                             .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
    shoal_coll_args_t small = big;
    small.count = 1;
    const shoal_algo_ops_t *want_big = shoal_algo_select(&comm, &big);
    const shoal_algo_ops_t *want_small = shoal_algo_select(&comm, &small);
    assert_ptr_not_equal(want_big, want_small);
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(shoal_algo_choose(&comm, &big), want_big);
        assert_ptr_equal(comm.algo_memo[SHOAL_COLL_ALLREDUCE].algo, want_big);
        assert_ptr_equal(shoal_algo_choose(&comm, &small), want_small);
    }
    /* A memo planted by hand stands for a repeated call... */
    comm.algo_memo[SHOAL_COLL_ALLREDUCE].algo = want_big;
    assert_ptr_equal(shoal_algo_choose(&comm, &small), want_big);
    /* ...but not for other arguments, nor after the settings change. */
    shoal_coll_args_t other = small;
    other.dtype = SHOAL_FLOAT64;
    assert_ptr_equal(shoal_algo_choose(&comm, &other), shoal_algo_select(&comm, &other));
    comm.algo_memo[SHOAL_COLL_ALLREDUCE].algo = want_big;
    harness_setenv("SHOAL_ALGO", "allreduce:tree");
    const shoal_algo_ops_t *tree = shoal_algo_find(SHOAL_COLL_ALLREDUCE, "tree");
    assert_non_null(tree);
    assert_ptr_equal(shoal_algo_choose(&comm, &other), tree);
    harness_setenv("SHOAL_ALGO", NULL);
    assert_ptr_equal(shoal_algo_choose(&comm, &other), shoal_algo_select(&comm, &other));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_setting),
        cmocka_unit_test(test_select_rules),
        cmocka_unit_test(test_choice_memo),
        cmocka_unit_test(test_every_algorithm_shm),
        cmocka_unit_test(test_every_algorithm_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
