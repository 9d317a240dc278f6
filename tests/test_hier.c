/* The cluster view and the hierarchical algorithms. Ranks on this machine
 * act as hosts of their own through SHOAL_HOST_ID (ranks of one "host"
 * share memory, the others talk tcp), in even, uneven and interleaved
 * layouts. Every hierarchical collective, forced and as the cost model
 * picks, is checked against the scalar reference: counts 0, 1, odd and
 * several pipeline pieces, in place and out of place. */
#include "harness.h"

#include "algos/algo.h"
#include "core/comm.h"
#include "base/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define MAX_RANKS 8

/* host_of[r] for each rank (values 0..), and the algorithm setting. */
typedef struct {
    int nranks;
    int host_of[MAX_RANKS];
    const char *algo;
    const char *pipe; /* SHOAL_HIER_PIPE, NULL: unset */
} layout_t;

static const char *const all_hier =
    "allreduce:hier,reducescatter:hier,allgather:hier,broadcast:hier,alltoall:hier";

static size_t test_count(int c, size_t es)
{
    static const size_t small[] = {0, 1, 17};
    return c < 3 ? small[c] : 2 * (TEST_CHUNK / es) + 333;
}

/* The view every rank must build: hosts numbered by lowest rank, ranks by
 * host then rank (no NUMA here), rails by local position. */
static int check_view(shoal_comm_t comm, const layout_t *lay)
{
    const shoal_cluster_t *c = &comm->team.cluster;
    int n = lay->nranks, seen[MAX_RANKS] = {0}, nl[MAX_RANKS] = {0};
    for (int r = 0; r < n; r++)
        nl[lay->host_of[r]]++;
    int hosts = 0;
    for (int h = 0; h < MAX_RANKS; h++)
        hosts += nl[h] > 0;
    RANK_CHECK(c->nhosts == hosts && comm->team.nhosts == hosts, fail, "%d hosts, want %d", c->nhosts,
               hosts);
    int pos = 0;
    for (int h = 0; h < c->nhosts; h++) {
        for (int j = 0; j < shoal_cluster_nlocal(c, h); j++, pos++) {
            int r = shoal_cluster_rank_at(c, h, j);
            RANK_CHECK(c->host_of[r] == h && c->local_of[r] == j && c->ring_pos[r] == pos &&
                           !seen[r]++, fail,
                       "rank %d at host %d position %d is misplaced", r, h, j);
            RANK_CHECK(j == 0 || r > shoal_cluster_rank_at(c, h, j - 1), fail,
                       "host %d's ranks out of order", h);
        }
    }
    for (int h = 0; h < c->nhosts; h++) {
        int lh = shoal_cluster_nlocal(c, h);
        RANK_CHECK(lh >= c->min_local && lh <= c->max_local, fail, "min/max local");
        for (int j = 0; j < c->max_local; j++) {
            int r = c->rail_mod_ranks[j * c->nhosts + h];
            RANK_CHECK(r == shoal_cluster_rank_at(c, h, j % lh), fail, "rail %d of host %d", j, h);
        }
    }
    return 0;
fail:
    return 1;
}

static int check_allreduce(shoal_comm_t comm, int rank, int n, shoal_dtype_t dt, shoal_op_t op,
                           size_t count, int in_place, unsigned char *a, unsigned char *b,
                           unsigned char *want, unsigned char *tmp)
{
    size_t es = shoal_dtype_bytes(dt);
    harness_fill_exact(a, count, rank, dt, op);
    void *out = in_place ? (void *)a : (void *)b;
    shoal_status_t s = shoal_allreduce(count ? a : NULL, count ? out : NULL, count, dt, op, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "allreduce: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    harness_expected(want, tmp, count, n, dt, op);
    RANK_CHECK(!count || memcmp(out, want, count * es) == 0, fail,
               "rank %d: allreduce %s %s count %zu %s differs", rank, shoal_dtype_name(dt),
               shoal_op_name(op), count, in_place ? "in place" : "");
    return 0;
fail:
    return 1;
}

static int check_rs_ag(shoal_comm_t comm, int rank, int n, size_t count, int in_place,
                       unsigned char *a, unsigned char *b, unsigned char *want,
                       unsigned char *tmp)
{
    const shoal_dtype_t dt = SHOAL_FLOAT32;
    size_t es = 4, total = (size_t)n * count;
    harness_fill_exact(a, total, rank, dt, SHOAL_SUM);
    unsigned char *out = in_place ? a + (size_t)rank * count * es : b;
    shoal_status_t s = shoal_reduce_scatter(count ? a : NULL, count ? out : NULL, count, dt,
                                            SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "reduce_scatter: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    harness_expected(want, tmp, total, n, dt, SHOAL_SUM);
    RANK_CHECK(!count || memcmp(out, want + (size_t)rank * count * es, count * es) == 0, fail,
               "rank %d: reduce_scatter count %zu differs", rank, count);
    /* All-gather of each rank's own fill. */
    unsigned char *mine = in_place ? b + (size_t)rank * count * es : a;
    harness_fill_exact(mine, count, rank, dt, SHOAL_SUM);
    s = shoal_allgather(count ? mine : NULL, count ? b : NULL, count, dt, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "allgather: %s", shoal_status_string(s));
    for (int r = 0; r < n; r++) {
        harness_fill_exact(want, count, r, dt, SHOAL_SUM);
        RANK_CHECK(!count || memcmp(b + (size_t)r * count * es, want, count * es) == 0, fail,
                   "rank %d: allgather count %zu block %d differs", rank, count, r);
    }
    return 0;
fail:
    return 1;
}

static int check_bcast_a2a(shoal_comm_t comm, int rank, int n, size_t count, int in_place,
                           uint32_t *a, uint32_t *b)
{
    for (int root = 0; root < n; root += n > 2 ? n - 2 : 1) {
        for (size_t i = 0; i < count; i++)
            a[i] = rank == root ? harness_mix((uint32_t)(i * 31 + (size_t)root)) : 0;
        uint32_t *out = in_place ? a : b;
        shoal_status_t s = shoal_broadcast(count ? a : NULL, count ? out : NULL, count,
                                           SHOAL_UINT32, root, comm);
        RANK_CHECK(s == SHOAL_OK, fail, "broadcast: %s", shoal_status_string(s));
        for (size_t i = 0; i < count; i++)
            RANK_CHECK(out[i] == harness_mix((uint32_t)(i * 31 + (size_t)root)), fail,
                       "rank %d: broadcast root %d count %zu element %zu", rank, root, count, i);
    }
    size_t total = (size_t)n * count;
    for (size_t i = 0; i < total; i++)
        a[i] = (uint32_t)rank * 1000003u + (uint32_t)i;
    uint32_t *out = in_place ? a : b;
    shoal_status_t s = shoal_alltoall(count ? a : NULL, count ? out : NULL, count, SHOAL_UINT32,
                                      comm);
    RANK_CHECK(s == SHOAL_OK, fail, "alltoall: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++)
            RANK_CHECK(out[(size_t)r * count + i] ==
                           (uint32_t)r * 1000003u + (uint32_t)((size_t)rank * count + i), fail,
                       "rank %d: alltoall count %zu block %d element %zu", rank, count, r, i);
    return 0;
fail:
    return 1;
}

static int rank_layout(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const layout_t *lay = arg;
    char host[32];
    snprintf(host, sizeof(host), "hier-host-%d", lay->host_of[rank]);
    harness_setenv("SHOAL_HOST_ID", host);
    harness_setenv("SHOAL_ALGO", lay->algo);
    harness_setenv("SHOAL_HIER_PIPE", lay->pipe);
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    if (check_view(comm, lay))
        return 1;
    size_t bytes = (size_t)nranks * (2 * TEST_CHUNK + 333 * 8) + 64;
    unsigned char *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes),
                  *tmp = malloc(bytes);
    RANK_CHECK(a && b && want && tmp, fail, "out of memory");
    static const struct {
        shoal_dtype_t dt;
        shoal_op_t op;
    } cases[] = {{SHOAL_FLOAT32, SHOAL_SUM}, {SHOAL_INT32, SHOAL_MAX}, {SHOAL_FLOAT64, SHOAL_AVG},
                 {SHOAL_INT8, SHOAL_MIN},    {SHOAL_BFLOAT16, SHOAL_SUM}, {SHOAL_INT64, SHOAL_AVG}};
    for (int c = 0; c < 4; c++) {
        for (int ip = 0; ip < 2; ip++) {
            for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                size_t count = test_count(c, shoal_dtype_bytes(cases[k].dt));
                if (check_allreduce(comm, rank, nranks, cases[k].dt, cases[k].op, count, ip, a,
                                    b, want, tmp))
                    return 1;
            }
            size_t count = test_count(c, 4);
            if (check_rs_ag(comm, rank, nranks, count, ip, a, b, want, tmp) ||
                check_bcast_a2a(comm, rank, nranks, count, ip, (uint32_t *)a, (uint32_t *)b))
                return 1;
        }
    }
    free(a);
    free(b);
    free(want);
    free(tmp);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_layout(int nranks, const int *host_of, const char *algo, const char *pipe)
{
    layout_t lay = {.nranks = nranks, .algo = algo, .pipe = pipe};
    memcpy(lay.host_of, host_of, (size_t)nranks * sizeof(int));
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_HOST_ID", NULL);
    assert_int_equal(harness_run_ranks(nranks, rank_layout, &lay, 300), 0);
}

static const char *const pipes[] = {"1", "2", "3", "16"};

#define LAYOUT_TEST(name, n, ...)                                             \
    static void test_##name(void **state)                                     \
    {                                                                         \
        (void)state;                                                          \
        static const int hosts[n] = {__VA_ARGS__};                            \
        run_layout(n, hosts, all_hier, NULL);                                 \
        run_layout(n, hosts, "auto", NULL);                                   \
        /* The pipelines of the all-reduce, reduce-scatter, all-gather and \
         * broadcast: their phases one after the other (1), and 2, 3 and   \
         * 16 pieces (for 17 elements 2 of 16, for the multi-piece count   \
         * short last pieces, for 1 and 0 fewer pieces than asked). */     \
        for (size_t p_ = 0; p_ < sizeof(pipes) / sizeof(pipes[0]); p_++)      \
            run_layout(n, hosts, all_hier, pipes[p_]);                        \
    }
LAYOUT_TEST(one_rank, 1, 0)
LAYOUT_TEST(one_host_3, 3, 0, 0, 0)
LAYOUT_TEST(hosts_2x2, 4, 0, 0, 1, 1)
LAYOUT_TEST(hosts_1_3, 4, 0, 1, 1, 1)
LAYOUT_TEST(hosts_3_1_2, 6, 0, 0, 0, 1, 2, 2)
LAYOUT_TEST(hosts_interleaved, 5, 0, 1, 0, 1, 0)
LAYOUT_TEST(hosts_1x2, 2, 0, 1)
LAYOUT_TEST(hosts_4x2, 8, 0, 0, 1, 1, 2, 2, 3, 3)
LAYOUT_TEST(hosts_uneven_7, 7, 2, 0, 1, 0, 2, 0, 1)

/* The flat ring all-reduce across hosts with SHOAL_TCP_NSLOTS=4 keeps
 * three loops in flight (shoal_ring_allreduce_run_deep): counts 0, 1, 17,
 * and several windows of loops with a short last one, in place and out of
 * place, over shared memory and over tcp. */
static int rank_ring_deep(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const int *host_of = arg;
    char host[32];
    snprintf(host, sizeof(host), "deep-host-%d", host_of[rank]);
    harness_setenv("SHOAL_HOST_ID", host);
    harness_setenv("SHOAL_ALGO", "allreduce:ring");
    harness_setenv("SHOAL_TCP_NSLOTS", "4");
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t counts[] = {0, 1, 17, 7 * (size_t)nranks * (TEST_CHUNK / 4) + 77};
    size_t bytes = counts[3] * 8 + 64;
    unsigned char *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes),
                  *tmp = malloc(bytes);
    RANK_CHECK(a && b && want && tmp, fail, "out of memory");
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        for (int ip = 0; ip < 2; ip++) {
            if (check_allreduce(comm, rank, nranks, SHOAL_FLOAT32, SHOAL_SUM, counts[c], ip, a,
                                b, want, tmp) ||
                check_allreduce(comm, rank, nranks, SHOAL_INT32, SHOAL_MAX, counts[c], ip, a, b,
                                want, tmp))
                return 1;
        }
    }
    free(a);
    free(b);
    free(want);
    free(tmp);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_ring_deep(void **state)
{
    (void)state;
    static const int two[] = {0, 0, 1, 1}, three[] = {0, 1, 1, 2, 2};
    harness_setenv("SHOAL_HOST_ID", NULL);
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(4, rank_ring_deep, (void *)two, 300), 0);
    assert_int_equal(harness_run_ranks(5, rank_ring_deep, (void *)three, 300), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(3, rank_ring_deep, (void *)three, 300), 0);
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
}

/* Ranks bound to the NUMA nodes of a stand-in machine: the ring keeps a
 * host's ranks of one NUMA node together, and the link inside the host is
 * the cross-NUMA class. */
static int rank_numa(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    harness_setenv("SHOAL_TOPO_SYNTHETIC", "numa:2 core:2 pu:1");
    /* Ranks 0, 2, 4 on node 1 (PUs 2-3), ranks 1, 3, 5 on node 0. */
    harness_setenv("SHOAL_TOPO_CPUS", rank % 2 ? "0" : "2");
    harness_setenv("SHOAL_TOPO_LINKS", "tcp:100us:100M,shm-xnuma:2us:3G");
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    const shoal_cluster_t *c = &comm->team.cluster;
    static const int want_ring[6] = {1, 3, 5, 0, 2, 4};
    for (int i = 0; i < nranks; i++)
        RANK_CHECK(c->by_host[i] == want_ring[i], fail, "ring position %d holds rank %d, want %d",
                   i, c->by_host[i], want_ring[i]);
    RANK_CHECK(c->place[rank].numa == (rank % 2 ? 0 : 1), fail, "rank %d on NUMA node %d", rank,
               c->place[rank].numa);
    RANK_CHECK(c->cross_numa && comm->team.cost.links.intra == SHOAL_LINK_SHM_CROSS_NUMA, fail,
               "intra class %s", shoal_link_class_name(comm->team.cost.links.intra));
    RANK_CHECK(comm->team.cost.links.cls[SHOAL_LINK_SHM_CROSS_NUMA].bw_Bps == 3.0 * (1 << 30) &&
                   comm->team.cost.links.cls[SHOAL_LINK_TCP].lat_s > 99e-6, fail,
               "SHOAL_TOPO_LINKS not applied");
    int32_t x[37];
    for (int i = 0; i < 37; i++)
        x[i] = rank * 100 + i;
    RANK_CHECK(shoal_allreduce(x, x, 37, SHOAL_INT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "allreduce");
    for (int i = 0; i < 37; i++)
        RANK_CHECK(x[i] == 100 * nranks * (nranks - 1) / 2 + nranks * i, fail, "sum[%d]", i);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_numa_ring(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(6, rank_numa, NULL, 120), 0);
    harness_setenv("SHOAL_TOPO_SYNTHETIC", NULL);
    harness_setenv("SHOAL_TOPO_CPUS", NULL);
    harness_setenv("SHOAL_TOPO_LINKS", NULL);
}

/* Two hosts of two with a slow link between them: the cost model picks the
 * hierarchical all-reduce for large messages and the probe's figures are
 * the same on every rank. Between hosts the probe's large transfers go
 * both ways at once (the link in and out loaded together, as the
 * simulator's model has them): the first rank of the second host sent the
 * first rank of the first as much as it received, not 8 B replies. */
static int rank_choice(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    harness_setenv("SHOAL_HOST_ID", rank < 2 ? "choice-a" : "choice-b");
    harness_setenv("SHOAL_TOPO_PROBE", "y");
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(comm->team.cost.links.measured[SHOAL_LINK_SHM_SAME_NUMA] &&
                   comm->team.cost.links.measured[SHOAL_LINK_TCP], fail,
               "the probe measured nothing");
    if (rank == 2) {
        unsigned long long sent = atomic_load(&shoal_comm_ep(comm, 0)->tx_bytes);
        RANK_CHECK(sent >= (4u << 20), fail,
                   "the probe between hosts went one way: rank 2 sent rank 0 %llu B", sent);
    }
    double mine[4] = {comm->team.cost.links.cls[SHOAL_LINK_SHM_SAME_NUMA].lat_s,
                      comm->team.cost.links.cls[SHOAL_LINK_SHM_SAME_NUMA].bw_Bps,
                      comm->team.cost.links.cls[SHOAL_LINK_TCP].lat_s,
                      comm->team.cost.links.cls[SHOAL_LINK_TCP].bw_Bps};
    double all[4 * MAX_RANKS] = {0};
    memcpy(all + 4 * rank, mine, sizeof(mine));
    RANK_CHECK(shoal_allreduce(all, all, 4 * (size_t)nranks, SHOAL_FLOAT64, SHOAL_SUM, comm) ==
                   SHOAL_OK, fail, "allreduce");
    for (int r = 0; r < nranks; r++)
        RANK_CHECK(!memcmp(all + 4 * r, mine, sizeof(mine)), fail,
                   "rank %d's probe figures differ from rank %d's", r, rank);

    /* The probe's figures follow the machine's load: the choice is checked
     * on a communicator split off with figures from the setting. */
    harness_setenv("SHOAL_TOPO_PROBE", NULL);
    harness_setenv("SHOAL_TOPO_LINKS", "tcp:50us:100M,shm:1us:8G");
    shoal_comm_t set;
    RANK_CHECK(shoal_comm_split(comm, 0, rank, &set) == SHOAL_OK, fail, "split");
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .count = 1 << 22,
                              .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
    const shoal_algo_ops_t *algo = shoal_algo_select(&set->team, &args);
    RANK_CHECK(algo && !strcmp(algo->name, "hier"), fail, "4M floats over 2 hosts: %s",
               algo ? algo->name : "none");
    RANK_CHECK(shoal_comm_destroy(set) == SHOAL_OK && shoal_comm_destroy(comm) == SHOAL_OK, fail,
               "destroy");
    return 0;
fail:
    return 1;
}

static void test_cost_model_choice(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_ALGO", "auto");
    assert_int_equal(harness_run_ranks(4, rank_choice, NULL, 120), 0);
    harness_setenv("SHOAL_TOPO_PROBE", NULL);
    harness_setenv("SHOAL_TOPO_LINKS", NULL);
}

static int rank_bad_links(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    harness_setenv("SHOAL_TOPO_LINKS", "tcp:fast:1G");
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_ERR_INVALID_ARG, fail,
               "a bad SHOAL_TOPO_LINKS was accepted");
    RANK_CHECK(strstr(shoal_comm_last_error(NULL), "SHOAL_TOPO_LINKS"), fail, "reason: %s",
               shoal_comm_last_error(NULL));
    return 0;
fail:
    return 1;
}

static void test_bad_links(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_bad_links, NULL, 60), 0);
    harness_setenv("SHOAL_TOPO_LINKS", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_rank),        cmocka_unit_test(test_one_host_3),      cmocka_unit_test(test_hosts_2x2),
        cmocka_unit_test(test_hosts_1_3),       cmocka_unit_test(test_hosts_3_1_2),
        cmocka_unit_test(test_hosts_interleaved), cmocka_unit_test(test_hosts_1x2),
        cmocka_unit_test(test_hosts_4x2),       cmocka_unit_test(test_hosts_uneven_7),
        cmocka_unit_test(test_ring_deep),       cmocka_unit_test(test_numa_ring),       cmocka_unit_test(test_cost_model_choice),
        cmocka_unit_test(test_bad_links),
    };
    return cmocka_run_group_tests_name("hier", tests, NULL, NULL);
}
