/* Every wait bounded:
 * - shoal_comm_abort and shoal_comm_stop while a call stays inside the
 *   communicator (held entered, as a call that never polled the abort flag
 *   would): they give up at SHOAL_TIMEOUT with SHOAL_ERR_TIMEOUT and a
 *   reason instead of waiting for ever, the aborted communicator refuses
 *   calls, and the last call to leave frees it;
 * - a point-to-point message that never matches fails at its own deadline
 *   while other messages of the same communicator keep flowing, on shared
 *   memory and tcp.
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

/* ---- a stalled message among flowing ones ------------------------------ */

#define FLOW_LIMIT_S 15.0

/* Rank 0 posts a receive from rank 1 that rank 1 never sends, then sends
 * rank 1 a small message every millisecond, each completing at once (rank
 * 1 receives them as they come), so that every step of rank 0's p2p
 * session moves something. The receive must fail at its own deadline
 * (SHOAL_TIMEOUT, 2 s) and the session with it, well before FLOW_LIMIT_S:
 * before, a deadline was looked at only in a step that moved nothing, and
 * the receive waited for as long as the others flowed. */
static int rank_stalled(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int v = 0;
    if (rank == 1) {
        shoal_status_t s;
        while ((s = shoal_recv(&v, 1, SHOAL_INT32, 0, comm)) == SHOAL_OK)
            continue;
        /* Rank 0's failure, told to this rank, or rank 0 gone. */
        RANK_CHECK(s == SHOAL_ERR_PEER || s == SHOAL_ERR_TIMEOUT, fail, "rank 1's receive "
                   "gave %s", shoal_status_string(s));
        shoal_comm_abort(comm);
        return 0;
    }
    int never = 0;
    shoal_request_t stalled;
    RANK_CHECK(shoal_irecv(&never, 1, SHOAL_INT32, 1, comm, &stalled) == SHOAL_OK, fail,
               "irecv");
    double t0 = now_s(), failed_at = 0;
    int sent = 0;
    shoal_status_t s = SHOAL_OK;
    while (now_s() - t0 < FLOW_LIMIT_S) {
        shoal_request_t req;
        s = shoal_isend(&sent, 1, SHOAL_INT32, 1, comm, &req);
        if (s == SHOAL_OK)
            s = shoal_wait(&req);
        if (s != SHOAL_OK) {
            failed_at = now_s() - t0;
            break;
        }
        sent++;
        struct timespec pace = {0, 1000000};
        nanosleep(&pace, NULL);
    }
    RANK_CHECK(s != SHOAL_OK, fail, "%d sends flowed for %.0f s past the stalled receive's "
               "deadline", sent, FLOW_LIMIT_S);
    RANK_CHECK(sent > 0, fail, "no send flowed before the failure (%s)",
               shoal_status_string(s));
    RANK_CHECK(failed_at < 10.0, fail, "the session failed after %.1f s", failed_at);
    int done = 0;
    shoal_status_t st = shoal_test(&stalled, &done);
    RANK_CHECK(done && st == SHOAL_ERR_TIMEOUT, fail, "the stalled receive: done %d, %s", done,
               shoal_status_string(st));
    shoal_comm_abort(comm);
    (void)arg;
    return 0;
fail:
    return 1;
}

static void stalled_runs(void)
{
    harness_setenv("SHOAL_TIMEOUT", "2s");
    harness_setenv("SHOAL_PROGRESS", "caller");
    assert_int_equal(harness_run_ranks(2, rank_stalled, NULL, 60), 0);
    harness_setenv("SHOAL_PROGRESS", NULL);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

static void test_stalled_p2p(void **state)
{
    (void)state;
    stalled_runs();
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    stalled_runs();
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abort_held),
        cmocka_unit_test(test_stalled_p2p),
    };
    return cmocka_run_group_tests_name("bounds", tests, NULL, NULL);
}
