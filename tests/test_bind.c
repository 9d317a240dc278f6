/* SHOAL_CPU_BIND (topo/topo_bind.c, topo/cluster.c): the choice of a
 * rank's CPU on stand-in machines (one PU per core and two, with and
 * without cores, a process bound already), and on this machine the
 * binding itself: set at init where the setting says, one CPU per rank,
 * ring neighbours apart, left alone when the process was bound already,
 * held while any communicator that took it lives and put back after. */
#include "harness.h"
#include "base/config.h"
#include "core/comm.h"
#include "topo/topo.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_TIMEOUT_S 120

/* The PU shoal_topo_bind_pick chooses for pos of nlocal on the stand-in
 * desc bound to cpus ("" = all of it); -1 when it leaves the rank. */
static int pick(const char *desc, const char *cpus, int mode, int pos, int nlocal)
{
    shoal_topo_t *topo = NULL;
    harness_setenv("SHOAL_TOPO_CPUS", cpus);
    assert_int_equal(shoal_topo_load_synthetic(desc, &topo), SHOAL_OK);
    hwloc_bitmap_t out = hwloc_bitmap_alloc();
    assert_non_null(out);
    int r = shoal_topo_bind_pick(topo, mode, shoal_topo_binding(topo), pos, nlocal, out);
    assert_true(r == 0 || r == 1);
    int pu = -1;
    if (r == 1) {
        assert_int_equal(hwloc_bitmap_weight(out), 1);
        pu = hwloc_bitmap_first(out);
    }
    hwloc_bitmap_free(out);
    shoal_topo_destroy(topo);
    harness_setenv("SHOAL_TOPO_CPUS", NULL);
    return pu;
}

static void test_pick_one_pu_per_core(void **state)
{
    (void)state;
    const char *m = "pack:1 core:2 pu:1";
    /* Four ranks on two CPUs: taken in turn. */
    for (int pos = 0; pos < 4; pos++)
        assert_int_equal(pick(m, "", SHOAL_BIND_AUTO, pos, 4), pos % 2);
    assert_int_equal(pick(m, "", SHOAL_BIND_AUTO, 2, 3), 0);
    /* No more ranks than CPUs: auto leaves them, on binds them. */
    assert_int_equal(pick(m, "", SHOAL_BIND_AUTO, 1, 2), -1);
    assert_int_equal(pick(m, "", SHOAL_BIND_AUTO, 0, 1), -1);
    assert_int_equal(pick(m, "", SHOAL_BIND_ON, 1, 2), 1);
    assert_int_equal(pick(m, "", SHOAL_BIND_ON, 0, 1), 0);
    assert_int_equal(pick(m, "", SHOAL_BIND_OFF, 3, 4), -1);
    /* A process bound already stays as it is. */
    assert_int_equal(pick(m, "1", SHOAL_BIND_AUTO, 0, 4), -1);
    assert_int_equal(pick(m, "0", SHOAL_BIND_ON, 1, 4), -1);
}

static void test_pick_spreads_over_cores(void **state)
{
    (void)state;
    /* Two cores of two PUs: PUs 0, 1 on core 0, 2, 3 on core 1. Every
     * core's first PU comes before any second one. */
    const char *m = "pack:1 core:2 pu:2";
    const int want[] = {0, 2, 1, 3, 0, 2};
    for (int pos = 0; pos < 6; pos++)
        assert_int_equal(pick(m, "", SHOAL_BIND_AUTO, pos, 6), want[pos]);
    assert_int_equal(pick(m, "", SHOAL_BIND_AUTO, 3, 4), -1);
    assert_int_equal(pick(m, "", SHOAL_BIND_ON, 3, 4), 3);
    /* Two packages: the cores in order across them. */
    const char *two = "pack:2 core:2 pu:2";
    const int want2[] = {0, 2, 4, 6, 1, 3, 5, 7, 0};
    for (int pos = 0; pos < 9; pos++)
        assert_int_equal(pick(two, "", SHOAL_BIND_AUTO, pos, 9), want2[pos]);
    assert_int_equal(pick(two, "0-6", SHOAL_BIND_AUTO, 0, 9), -1);
}

/* ---- the live machine ---- */

typedef struct {
    int mode;     /* SHOAL_CPU_BIND of the run */
    int expect;   /* 1: each rank bound to one CPU; 0: left as it was */
    int prebind;  /* bind each rank to the machine's first CPU before init */
    int split;    /* hold a second communicator past the first's destroy */
} live_arg_t;

static int rank_live(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    const live_arg_t *arg = varg;
    cpu_set_t before, after, shared;
    shoal_comm_t comm = NULL, sub = NULL;
    RANK_CHECK(sched_getaffinity(0, sizeof(before), &before) == 0, fail, "getaffinity");
    if (arg->prebind) {
        cpu_set_t one;
        CPU_ZERO(&one);
        for (int c = 0; c < CPU_SETSIZE; c++) {
            if (CPU_ISSET(c, &before)) {
                CPU_SET(c, &one);
                break;
            }
        }
        RANK_CHECK(sched_setaffinity(0, sizeof(one), &one) == 0, fail, "setaffinity");
        before = one;
    }
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    RANK_CHECK(sched_getaffinity(0, sizeof(after), &after) == 0, fail, "getaffinity");
    if (arg->expect) {
        RANK_CHECK(CPU_COUNT(&after) == 1, fail, "bound to %d CPUs", CPU_COUNT(&after));
        /* Every rank's CPU to every rank: neighbours apart, and as many
         * distinct CPUs as ranks or CPUs allow. */
        int mine = -1;
        for (int c = 0; c < CPU_SETSIZE && mine < 0; c++)
            mine = CPU_ISSET(c, &after) ? c : -1;
        int *cpus = calloc((size_t)nranks, sizeof(int));
        RANK_CHECK(cpus, fail, "out of memory");
        cpus[rank] = mine;
        s = shoal_allreduce(cpus, cpus, (size_t)nranks, SHOAL_INT32, SHOAL_SUM, comm);
        int distinct = 0;
        for (int r = 0; r < nranks && s == SHOAL_OK; r++) {
            int seen = 0;
            for (int q = 0; q < r; q++)
                seen |= cpus[q] == cpus[r];
            distinct += !seen;
        }
        int want = nranks < CPU_COUNT(&before) ? nranks : CPU_COUNT(&before);
        int apart = nranks < 2 || CPU_COUNT(&before) < 2 || cpus[0] != cpus[1];
        free(cpus);
        RANK_CHECK(s == SHOAL_OK, fail, "allreduce: %s", shoal_status_string(s));
        RANK_CHECK(distinct == want, fail, "%d distinct CPUs for %d ranks, want %d", distinct,
                   nranks, want);
        RANK_CHECK(apart, fail, "local ranks 0 and 1 share a CPU");
    } else {
        RANK_CHECK(CPU_EQUAL(&after, &before), fail, "binding changed: %d CPUs, was %d",
                   CPU_COUNT(&after), CPU_COUNT(&before));
    }
    if (arg->split) {
        s = shoal_comm_split(comm, rank % 2, rank, &sub);
        RANK_CHECK(s == SHOAL_OK, fail, "split: %s", shoal_status_string(s));
    }
    s = shoal_comm_destroy(comm);
    comm = NULL;
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    if (sub) {
        RANK_CHECK(sched_getaffinity(0, sizeof(shared), &shared) == 0, fail, "getaffinity");
        RANK_CHECK(CPU_EQUAL(&shared, &after), fail, "binding given back while held");
        s = shoal_comm_destroy(sub);
        sub = NULL;
        RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    }
    RANK_CHECK(sched_getaffinity(0, sizeof(after), &after) == 0, fail, "getaffinity");
    RANK_CHECK(CPU_EQUAL(&after, &before), fail, "binding not put back: %d CPUs, was %d",
               CPU_COUNT(&after), CPU_COUNT(&before));
    return 0;
fail:
    if (sub)
        shoal_comm_abort(sub);
    if (comm)
        shoal_comm_abort(comm);
    return 1;
}

static int live_cpus(void)
{
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    return CPU_COUNT(&set);
}

static void run_live(const char *mode, int nranks, live_arg_t arg)
{
    harness_setenv("SHOAL_CPU_BIND", mode);
    assert_int_equal(harness_run_ranks(nranks, rank_live, &arg, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_CPU_BIND", NULL);
}

static void test_live_on(void **state)
{
    (void)state;
    for (int n = 1; n <= 3; n++)
        run_live("on", n, (live_arg_t){SHOAL_BIND_ON, 1, 0, 0});
    run_live("on", 4, (live_arg_t){SHOAL_BIND_ON, 1, 0, 1});
}

static void test_live_auto(void **state)
{
    (void)state;
    int ncpus = live_cpus();
    /* As many ranks as CPUs: left where they are. */
    int fit = ncpus < 8 ? ncpus : 8;
    run_live("auto", fit, (live_arg_t){SHOAL_BIND_AUTO, 0, 0, 0});
    /* More: bound, where the machine is small enough to outnumber. */
    if (ncpus + 1 <= 8) {
        run_live("auto", ncpus + 1, (live_arg_t){SHOAL_BIND_AUTO, 1, 0, 0});
        run_live("auto", ncpus + 2, (live_arg_t){SHOAL_BIND_AUTO, 1, 0, 1});
    }
}

static void test_live_left_alone(void **state)
{
    (void)state;
    run_live("off", 3, (live_arg_t){SHOAL_BIND_OFF, 0, 0, 0});
    /* Bound by someone else before init. */
    run_live("on", 3, (live_arg_t){SHOAL_BIND_ON, 0, 1, 0});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_one_pu_per_core),
        cmocka_unit_test(test_pick_spreads_over_cores),
        cmocka_unit_test(test_live_on),
        cmocka_unit_test(test_live_auto),
        cmocka_unit_test(test_live_left_alone),
    };
    return cmocka_run_group_tests_name("bind", tests, NULL, NULL);
}
