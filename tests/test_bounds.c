/* Every wait bounded:
 * - shoal_comm_abort and shoal_comm_stop while a call stays inside the
 *   communicator (held entered, as a call that never polled the abort flag
 *   would): they give up at SHOAL_TIMEOUT with SHOAL_ERR_TIMEOUT and a
 *   reason instead of waiting for ever, the aborted communicator refuses
 *   calls, and the last call to leave frees it.
 * The abort of a split's init is in test_comm, the stop of one in
 * test_shrink. */
#include "harness.h"

#include "core/comm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- abort and stop with a call that stays ----------------------------- */

/* SHOAL_TIMEOUT is 2 s: abort must give up then (the old wait spun for as
 * long as the call stayed, here for ever). */
static int rank_abort_held(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(shoal_comm_enter(comm, "a call that stays") == SHOAL_OK, fail, "enter");
    double t0 = now_s();
    shoal_status_t s = shoal_comm_abort(comm);
    double took = now_s() - t0;
    RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "abort gave %s", shoal_status_string(s));
    RANK_CHECK(took < 10.0, fail, "abort took %.1f s", took);
    RANK_CHECK(strstr(shoal_comm_last_error(NULL), "still inside") != NULL, fail,
               "abort's reason: %s", shoal_comm_last_error(NULL));
    /* Aborted, not freed: calls are refused, the shell is the same comm. */
    RANK_CHECK(!shoal_comm_valid(comm), fail, "aborted comm still valid");
    int one = 1;
    s = shoal_allreduce(&one, &one, 1, SHOAL_INT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "a call after the abort gave %s",
               shoal_status_string(s));
    RANK_CHECK(atomic_load(&comm->magic) == SHOAL_COMM_ABORTING, fail, "freed too early");
    /* The last call out frees it. */
    shoal_comm_leave(comm);
    RANK_CHECK(atomic_load(&comm->magic) == 0, fail, "not freed by the last call out");
    (void)arg;
    return 0;
fail:
    return 1;
}

static int rank_stop_held(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(shoal_comm_enter(comm, "a call that stays") == SHOAL_OK, fail, "enter");
    double t0 = now_s();
    shoal_status_t s = shoal_comm_stop(comm);
    double took = now_s() - t0;
    RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "stop gave %s", shoal_status_string(s));
    RANK_CHECK(took < 10.0, fail, "stop took %.1f s", took);
    RANK_CHECK(strstr(shoal_comm_last_error(comm), "still inside") != NULL, fail,
               "stop's reason: %s", shoal_comm_last_error(comm));
    int one = 1;
    s = shoal_allreduce(&one, &one, 1, SHOAL_INT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "a call after the stop gave %s",
               shoal_status_string(s));
    shoal_comm_leave(comm);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy after the call left");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_abort_held(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "2s");
    assert_int_equal(harness_run_ranks(1, rank_abort_held, NULL, 30), 0);
    assert_int_equal(harness_run_ranks(1, rank_stop_held, NULL, 30), 0);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abort_held),
    };
    return cmocka_run_group_tests_name("bounds", tests, NULL, NULL);
}
