/* Plans as objects (algos/plan.c): a communicator keeps the last plan of
 * each collective kind and runs it again for a call of the same shape,
 * with the working memory its first run took; another count, type, op or
 * root, another forced algorithm or a change of settings makes a new one;
 * all-to-all-v calls, whose counts differ per call, are planned per call
 * and never kept. Every result is checked, so a plan that kept something of
 * an earlier call's buffers would show. */
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

static void run(const char *transport, int nranks)
{
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_plans, NULL, 60), 0);
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
