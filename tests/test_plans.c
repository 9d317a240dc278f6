/* Plans as objects (algos/plan.c): a communicator keeps the last plan of
 * each collective kind and runs it again for a call of the same shape,
 * with the working memory its first run took; another count, type, op or
 * root, another forced algorithm or a change of settings makes a new one;
 * all-to-all-v calls, whose counts differ per call, are planned per call
 * and never kept. Every result is checked, so a plan that kept something of
 * an earlier call's buffers would show. A plan takes its memory when it is
 * made (the working memory its algorithm reserved, the core's staged
 * input), registered with every open transport, and a run never
 * allocates. */
#include "harness.h"

#include "algos/algo.h"
#include "core/comm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096

/* An all-reduce of count int32 on fresh buffers: the sum of rank + 1 + i. */
static int allreduce_ok(shoal_comm_t comm, int rank, int nranks, size_t count, int root_op)
{
    int32_t *in = malloc(count * sizeof(int32_t) + 1), *out = malloc(count * sizeof(int32_t) + 1);
    RANK_CHECK(in && out, fail, "no memory");
    for (size_t i = 0; i < count; i++)
        in[i] = rank + 1 + (int32_t)i;
    shoal_op_t op = root_op ? SHOAL_MAX : SHOAL_SUM;
    RANK_CHECK(shoal_allreduce(in, out, count, SHOAL_INT32, op, comm) == SHOAL_OK, fail,
               "all-reduce of %zu", count);
    for (size_t i = 0; i < count; i++) {
        int32_t want = op == SHOAL_MAX ? nranks + (int32_t)i
                                       : nranks * (nranks + 1) / 2 + nranks * (int32_t)i;
        RANK_CHECK(out[i] == want, fail, "rank %d: element %zu of %zu is %d, want %d", rank, i,
                   count, (int)out[i], (int)want);
    }
    free(in);
    free(out);
    return 0;
fail:
    free(in);
    free(out);
    return 1;
}

static int rank_plans(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    shoal_team_t *team = &comm->team;
    const size_t big = 3 * TEST_CHUNK + 7; /* several pieces: the tree's scratch is taken */

    /* The same shape again: the same plan and the same working memory. */
    if (allreduce_ok(comm, rank, nranks, big, 0))
        goto fail;
    shoal_plan_t *first = team->plans[SHOAL_COLL_ALLREDUCE];
    RANK_CHECK(first && first->args.count == big, fail, "rank %d: no plan kept", rank);
    void *scratch = first->scratch;
    for (int k = 0; k < 3; k++) {
        if (allreduce_ok(comm, rank, nranks, big, 0))
            goto fail;
        RANK_CHECK(team->plans[SHOAL_COLL_ALLREDUCE] == first && first->scratch == scratch,
                   fail, "rank %d: call %d of the same shape planned again", rank, k + 2);
    }

    /* Another count, another op: new plans, each kept in its turn. */
    if (allreduce_ok(comm, rank, nranks, 17, 0))
        goto fail;
    shoal_plan_t *small = team->plans[SHOAL_COLL_ALLREDUCE];
    RANK_CHECK(small && small->args.count == 17, fail, "rank %d: the count's plan", rank);
    if (allreduce_ok(comm, rank, nranks, 17, 1))
        goto fail;
    RANK_CHECK(team->plans[SHOAL_COLL_ALLREDUCE]->args.op == SHOAL_MAX, fail,
               "rank %d: the op's plan", rank);

    /* Settings change: a forced algorithm gets its own plan. */
    harness_setenv("SHOAL_ALGO", "allreduce:tree");
    if (allreduce_ok(comm, rank, nranks, big, 0))
        goto fail;
    const shoal_plan_t *forced = team->plans[SHOAL_COLL_ALLREDUCE];
    RANK_CHECK(forced && !strcmp(forced->algo->name, "tree"), fail, "rank %d: plan of %s",
               rank, forced ? forced->algo->name : "none");
    harness_setenv("SHOAL_ALGO", "allreduce:ring");
    if (allreduce_ok(comm, rank, nranks, big, 0))
        goto fail;
    RANK_CHECK(!strcmp(team->plans[SHOAL_COLL_ALLREDUCE]->algo->name, "ring"), fail,
               "rank %d: the ring's plan after the tree's", rank);
    harness_setenv("SHOAL_ALGO", NULL);

    /* All-to-all-v: planned per call, never kept. */
    size_t counts[8], displs[8];
    int32_t in[8], out[8];
    for (int j = 0; j < nranks; j++) {
        counts[j] = 1;
        displs[j] = (size_t)j;
        in[j] = rank * 10 + j;
    }
    RANK_CHECK(shoal_alltoallv(in, counts, displs, out, counts, displs, SHOAL_INT32, comm) ==
                   SHOAL_OK, fail, "all-to-all-v");
    for (int j = 0; j < nranks; j++)
        RANK_CHECK(out[j] == j * 10 + rank, fail, "rank %d: all-to-all-v from %d", rank, j);
    RANK_CHECK(team->plans[SHOAL_COLL_ALLTOALLV] == NULL, fail,
               "rank %d: an all-to-all-v plan was kept", rank);

    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

/* A plan's block is registered with every open transport, whole. */
static int plan_registered(const shoal_team_t *team, const shoal_plan_t *plan, int rank)
{
    int open = 0;
    for (int t = 0; t < team->ntl; t++) {
        const shoal_mem_t *m = plan->reg[t];
        if (!team->tl_ctx[t])
            continue;
        open++;
        RANK_CHECK(m && m->addr == plan->mem && m->len == plan->mem_bytes, fail,
                   "rank %d: the plan's %zu B are not registered with transport %d", rank,
                   plan->mem_bytes, t);
    }
    RANK_CHECK(open > 0 || team->nranks == 1, fail, "rank %d: no transport open", rank);
    return 0;
fail:
    return 1;
}

/* An algorithm whose run asks one byte more than its plan reserved. */
static shoal_status_t greedy_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                  shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    shoal_plan_reserve(plan, 64);
    return s;
}

static shoal_status_t greedy_run(shoal_plan_t *plan)
{
    void *mem;
    return shoal_plan_scratch(plan, 65, &mem);
}

static const shoal_algo_ops_t greedy_ops = {
    .size = sizeof(shoal_algo_ops_t), .name = "greedy", .plan = greedy_plan, .run = greedy_run,
};

/* Working memory is taken when the plan is made; a run never grows it. */
static int check_plan_scratch(shoal_comm_t comm, int rank, int nranks)
{
    shoal_team_t *team = &comm->team;
    const size_t count = 2 * TEST_CHUNK + 3;
    int32_t *in = malloc(count * (size_t)nranks * sizeof(int32_t));
    int32_t *out = malloc(count * sizeof(int32_t));
    shoal_plan_t *plan = NULL;
    RANK_CHECK(in && out, fail, "no memory");
    for (size_t i = 0; i < count * (size_t)nranks; i++)
        in[i] = rank + (int32_t)i;
    shoal_coll_args_t a = {.kind = SHOAL_COLL_REDUCE_SCATTER, .sendbuf = in, .recvbuf = out,
                           .count = count, .dtype = SHOAL_INT32, .op = SHOAL_SUM};
    RANK_CHECK(shoal_plan_create(team, &shoal_rhd_reduce_scatter_ops, &a, &plan) == SHOAL_OK,
               fail, "rank %d: plan of rhd", rank);
    /* rhd reduces every block in working memory. */
    size_t want = nranks > 1 ? count * (size_t)nranks * sizeof(int32_t) : 0;
    RANK_CHECK(plan->scratch_bytes == want && (!want || plan->scratch), fail,
               "rank %d: rhd's plan holds %zu B of working memory at %p, want %zu", rank,
               plan->scratch_bytes, plan->scratch, want);
    if (want && plan_registered(team, plan, rank))
        goto fail;
    void *scratch = plan->scratch;
    RANK_CHECK(shoal_plan_run(plan, &a) == SHOAL_OK && plan->scratch == scratch, fail,
               "rank %d: rhd's run", rank);
    for (size_t i = 0; i < count; i++) {
        int32_t w = nranks * (nranks - 1) / 2 + nranks * (int32_t)((size_t)rank * count + i);
        RANK_CHECK(out[i] == w, fail, "rank %d: element %zu is %d, want %d", rank, i,
                   (int)out[i], (int)w);
    }
    shoal_plan_destroy(plan);
    plan = NULL;

    /* A run that asks more than its plan reserved fails, allocating nothing. */
    RANK_CHECK(shoal_plan_create(team, &greedy_ops, &a, &plan) == SHOAL_OK &&
                   plan->scratch_bytes == 64 && plan->scratch, fail, "rank %d: greedy plan", rank);
    RANK_CHECK(shoal_plan_run(plan, &a) == SHOAL_ERR_INTERNAL && plan->scratch_bytes == 64, fail,
               "rank %d: a run grew its plan's working memory", rank);
    shoal_plan_destroy(plan);
    free(in);
    free(out);
    return 0;
fail:
    shoal_plan_destroy(plan);
    free(in);
    free(out);
    return 1;
}

/* The kept plan of kind stages bytes of input in its own registered memory. */
static int check_staged(shoal_comm_t comm, int rank, shoal_coll_kind_t kind, size_t bytes,
                        const char *what)
{
    const shoal_plan_t *plan = comm->team.plans[kind];
    RANK_CHECK(plan && plan->args.stage_bytes == bytes && plan->input == plan->mem &&
                   plan->mem_bytes >= bytes, fail,
               "rank %d: %s: the plan stages %zu B at %p, want %zu", rank, what,
               plan ? plan->args.stage_bytes : 0, plan ? plan->input : NULL, bytes);
    return plan_registered(&comm->team, plan, rank);
fail:
    return 1;
}

/* The core's staged inputs (a pre-multiplied sum, an in-place all-to-all,
 * a fused group) live in the plan of the call, and every result is right. */
static int check_plan_staging(shoal_comm_t comm, int rank, int nranks)
{
    enum { N = 37 };
    int32_t a[N], b[N], c[N], x[8 * N], two = 2;
    shoal_op_t twice;
    RANK_CHECK(shoal_op_create_premul_sum(comm, &two, SHOAL_INT32, &twice) == SHOAL_OK, fail,
               "premul op");
    for (int i = 0; i < N; i++)
        a[i] = rank + i;
    RANK_CHECK(shoal_allreduce(a, a, N, SHOAL_INT32, twice, comm) == SHOAL_OK, fail,
               "pre-multiplied all-reduce");
    for (int i = 0; i < N; i++)
        RANK_CHECK(a[i] == 2 * (nranks * (nranks - 1) / 2 + nranks * i), fail,
                   "rank %d: pre-multiplied element %d is %d", rank, i, (int)a[i]);
    if (check_staged(comm, rank, SHOAL_COLL_ALLREDUCE, N * sizeof(int32_t), "premul"))
        goto fail;
    RANK_CHECK(shoal_op_destroy(twice, comm) == SHOAL_OK, fail, "premul op destroy");

    for (int j = 0; j < nranks * N; j++)
        x[j] = rank * 1000 + j;
    RANK_CHECK(shoal_alltoall(x, x, N, SHOAL_INT32, comm) == SHOAL_OK, fail,
               "in-place all-to-all");
    for (int j = 0; j < nranks; j++)
        for (int i = 0; i < N; i++)
            RANK_CHECK(x[j * N + i] == j * 1000 + rank * N + i, fail,
                       "rank %d: all-to-all element %d of block %d", rank, i, j);
    if (check_staged(comm, rank, SHOAL_COLL_ALLTOALL, (size_t)nranks * N * sizeof(int32_t),
                     "in-place all-to-all"))
        goto fail;

    for (int i = 0; i < N; i++) {
        b[i] = rank;
        c[i] = i;
    }
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
    RANK_CHECK(shoal_allreduce(b, b, N, SHOAL_INT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "first fused");
    RANK_CHECK(shoal_allreduce(c, c, 5, SHOAL_INT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "second fused");
    RANK_CHECK(shoal_group_end() == SHOAL_OK, fail, "group end");
    for (int i = 0; i < N; i++)
        RANK_CHECK(b[i] == nranks * (nranks - 1) / 2 && c[i] == (i < 5 ? nranks * i : i), fail,
                   "rank %d: fused element %d is %d, %d", rank, i, (int)b[i], (int)c[i]);
    if (nranks > 1 &&
        check_staged(comm, rank, SHOAL_COLL_ALLREDUCE, (N + 5) * sizeof(int32_t), "fused group"))
        goto fail;
    return 0;
fail:
    return 1;
}

static int rank_plan_memory(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int bad = check_plan_scratch(comm, rank, nranks) || check_plan_staging(comm, rank, nranks);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK && !bad, fail, "rank %d", rank);
    (void)arg;
    return 0;
fail:
    return 1;
}

static void run(const char *transport, int nranks)
{
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_plans, NULL, 60), 0);
    assert_int_equal(harness_run_ranks(nranks, rank_plan_memory, NULL, 60), 0);
}

static void test_plans_shm(void **state)
{
    (void)state;
    for (int n = 1; n <= 5; n++)
        run("shm", n);
}

static void test_plans_tcp(void **state)
{
    (void)state;
    run("tcp", 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plans_shm),
        cmocka_unit_test(test_plans_tcp),
    };
    return cmocka_run_group_tests_name("plans", tests, NULL, NULL);
}
