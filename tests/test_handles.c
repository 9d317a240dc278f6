/* Handles and per-communicator executors: the handle pool refuses what it
 * did not hand out; a destroyed or aborted communicator's memory stays
 * readable with its magic cleared, and a new communicator in the same shell
 * is told from it by its serial; a look-alike with the right magic outside
 * the pool is refused; calls racing an abort get a clear status; requests
 * waited on across communicators, from several threads, in groups and
 * before their group ended, all complete under either progress mode.
 *
 * Ranks are threads of this process (each initialises its communicator with
 * the same unique id), so that the white-box checks can look at the
 * objects. The progress mode is read once per process: the waits run in a
 * child process per mode, this program started again with --waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "shoal.h"

#include "core/comm.h"
#include "core/handle.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the pool ---------------------------------------------------------------- */

typedef struct {
    uint64_t magic;
    char body[40];
} item_t;

static shoal_handle_pool_t item_pool = SHOAL_HANDLE_POOL_INIT(item_t, "test item");

static void test_pool_owns(void **state)
{
    (void)state;
    item_t on_stack;
    item_t *on_heap = malloc(sizeof(*on_heap));
    assert_non_null(on_heap);
    assert_false(shoal_handle_owns(&item_pool, NULL));
    assert_false(shoal_handle_owns(&item_pool, &on_stack));
    assert_false(shoal_handle_owns(&item_pool, on_heap));

    /* Enough for several slabs. */
    enum { N = 7 * SHOAL_HANDLE_FIRST + 3 };
    item_t *items[N];
    for (int i = 0; i < N; i++) {
        items[i] = shoal_handle_alloc(&item_pool);
        assert_non_null(items[i]);
        assert_true(shoal_handle_owns(&item_pool, items[i]));
        /* Inside an object is not an object. */
        assert_false(shoal_handle_owns(&item_pool, (char *)items[i] + 1));
        assert_false(shoal_handle_owns(&item_pool, items[i]->body));
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(items[i], items[j]);
        items[i]->magic = (uint64_t)i + 1;
    }
    /* Freed objects stay the pool's and readable; the newest freed is the
     * next handed out. */
    shoal_handle_free(&item_pool, items[5]);
    assert_true(shoal_handle_owns(&item_pool, items[5]));
    assert_int_equal(items[5]->magic, 6);
    assert_ptr_equal(shoal_handle_alloc(&item_pool), items[5]);
    for (int i = 0; i < N; i++)
        shoal_handle_free(&item_pool, items[i]);
    free(on_heap);
}

/* Threads taking and giving back objects at once (for the sanitizers). */
static void *pool_churn(void *arg)
{
    (void)arg;
    item_t *mine[8];
    for (int round = 0; round < 2000; round++) {
        for (int i = 0; i < 8; i++) {
            mine[i] = shoal_handle_alloc(&item_pool);
            if (!mine[i])
                return (void *)1;
            mine[i]->magic = (uint64_t)(uintptr_t)&mine[i];
        }
        for (int i = 0; i < 8; i++) {
            if (mine[i]->magic != (uint64_t)(uintptr_t)&mine[i])
                return (void *)2; /* handed to two threads at once */
            shoal_handle_free(&item_pool, mine[i]);
        }
    }
    return NULL;
}

static void test_pool_threads(void **state)
{
    (void)state;
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, pool_churn, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
}

/* ---- communicator handles ------------------------------------------------------ */

static shoal_comm_t solo_comm(void)
{
    shoal_unique_id_t id;
    shoal_comm_t comm = NULL;
    assert_int_equal(shoal_get_unique_id(&id), SHOAL_OK);
    assert_int_equal(shoal_comm_init(1, &id, 0, &comm), SHOAL_OK);
    return comm;
}

static void test_dead_handles(void **state)
{
    (void)state;
    shoal_comm_t a = solo_comm();
    uint64_t serial_a = a->serial;
    assert_int_equal(atomic_load(&a->magic), SHOAL_COMM_LIVE);
    assert_int_equal(shoal_comm_destroy(a), SHOAL_OK);
    /* The memory is still there (no use after free under ASan), and says
     * it holds no communicator. */
    assert_int_equal(atomic_load(&a->magic), 0);
    int rank = -1;
    assert_int_equal(shoal_comm_rank(a, &rank), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(rank, -1);
    assert_false(shoal_comm_reenter(a, serial_a));

    /* The next communicator takes the same shell: the old handle now names
     * it, but the old serial does not. */
    shoal_comm_t b = solo_comm();
    assert_ptr_equal(b, a);
    assert_true(b->serial != serial_a);
    assert_false(shoal_comm_reenter(a, serial_a));
    assert_true(shoal_comm_reenter(b, b->serial));
    shoal_comm_leave(b);

    /* Aborted: cleared too, and refused everywhere. */
    assert_int_equal(shoal_comm_abort(b), SHOAL_OK);
    assert_int_equal(atomic_load(&b->magic), 0);
    assert_int_equal(shoal_comm_abort(b), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_destroy(b), SHOAL_ERR_INVALID_ARG);
    int one = 1, out = 0;
    assert_int_equal(shoal_allreduce(&one, &out, 1, SHOAL_INT32, SHOAL_SUM, b),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(out, 0);
}

static void test_lookalike_handles(void **state)
{
    (void)state;
    shoal_comm_t live = solo_comm();
    /* A copy of a live communicator, magic and serial included, is not a
     * communicator: it is not in the pool. */
    struct shoal_comm *copy = malloc(sizeof(*copy));
    assert_non_null(copy);
    memcpy(copy, live, sizeof(*copy));
    assert_int_equal(atomic_load(&copy->magic), SHOAL_COMM_LIVE);
    int rank = -1, one = 1, out = 0;
    assert_int_equal(shoal_comm_rank(copy, &rank), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_allreduce(&one, &out, 1, SHOAL_INT32, SHOAL_SUM, copy),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_destroy(copy), SHOAL_ERR_INVALID_ARG);
    assert_false(shoal_comm_reenter(copy, live->serial));
    /* Nor is a pointer into a live one. */
    shoal_comm_t inside = (shoal_comm_t)((char *)live + 64);
    assert_int_equal(shoal_comm_size(inside, &rank), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_allreduce(&one, &out, 1, SHOAL_INT32, SHOAL_SUM, inside),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(out, 0);
    free(copy);
    assert_int_equal(shoal_allreduce(&one, &out, 1, SHOAL_INT32, SHOAL_SUM, live), SHOAL_OK);
    assert_int_equal(out, 1);
    assert_int_equal(shoal_comm_destroy(live), SHOAL_OK);
}

/* Threads call on a communicator until a call fails, while the main thread
 * aborts it: every call before is fine, and the one that fails says
 * aborted (it was in flight, or met the abort under way) or not valid (it
 * came after). */
typedef struct {
    shoal_comm_t comm;
    atomic_int *calls;
    shoal_status_t last;
    int bad;
} racer_t;

static void *abort_racer(void *arg)
{
    racer_t *r = arg;
    float x[16] = {1}, y[16];
    for (;;) {
        shoal_status_t s = shoal_allreduce(x, y, 16, SHOAL_FLOAT32, SHOAL_SUM, r->comm);
        if (s != SHOAL_OK) {
            r->last = s;
            break;
        }
        r->bad |= y[0] != 1;
        atomic_fetch_add(r->calls, 1);
    }
    return NULL;
}

static void test_abort_races_calls(void **state)
{
    (void)state;
    enum { RACERS = 3 };
    for (int round = 0; round < 20; round++) {
        shoal_comm_t comm = solo_comm();
        atomic_int calls = 0;
        racer_t r[RACERS];
        pthread_t th[RACERS];
        for (int i = 0; i < RACERS; i++) {
            r[i] = (racer_t){.comm = comm, .calls = &calls};
            assert_int_equal(pthread_create(&th[i], NULL, abort_racer, &r[i]), 0);
        }
        while (atomic_load(&calls) < RACERS * (round + 1))
            sched_yield();
        assert_int_equal(shoal_comm_abort(comm), SHOAL_OK);
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            assert_false(r[i].bad);
            if (r[i].last != SHOAL_ERR_ABORTED && r[i].last != SHOAL_ERR_INVALID_ARG)
                fail_msg("round %d: a call racing the abort got %s", round,
                         shoal_status_string(r[i].last));
        }
    }
}

/* ---- waits across communicators -------------------------------------------------- */

#define WAIT_RANKS 2
#define WAIT_REQS 24

typedef struct {
    int rank;
    const shoal_unique_id_t *ids;
    int failed;
} wait_rank_t;

static void wait_check(wait_rank_t *w, int cond, const char *what)
{
    if (!cond && !w->failed) {
        fprintf(stderr, "# rank %d: %s\n", w->rank, what);
        w->failed = 1;
    }
}

typedef struct {
    shoal_request_t *req;
    shoal_status_t got;
} waiter_t;

static void *wait_other_thread(void *arg)
{
    waiter_t *w = arg;
    w->got = shoal_wait(w->req);
    return NULL;
}

/* One rank: two communicators, non-blocking all-reduces on both waited on
 * together, a group over both, and a group's request waited on by another
 * thread before the group ended. */
static void *wait_rank(void *arg)
{
    wait_rank_t *w = arg;
    shoal_comm_t c[2];
    for (int k = 0; k < 2; k++) {
        if (shoal_comm_init(WAIT_RANKS, &w->ids[k], w->rank, &c[k]) != SHOAL_OK) {
            wait_check(w, 0, "init");
            return NULL;
        }
    }
    int32_t in[WAIT_REQS], out[WAIT_REQS];
    shoal_request_t req[WAIT_REQS];
    for (int round = 0; round < 20 && !w->failed; round++) {
        for (int i = 0; i < WAIT_REQS; i++) {
            in[i] = i + round;
            out[i] = -1;
            wait_check(w, shoal_iallreduce(&in[i], &out[i], 1, SHOAL_INT32, SHOAL_SUM,
                                           c[i % 2], &req[i]) == SHOAL_OK, "iallreduce");
        }
        /* Newest first: each wait is on a queue whose head is elsewhere. */
        for (int i = WAIT_REQS; i-- > 0;)
            wait_check(w, shoal_wait(&req[i]) == SHOAL_OK && !req[i], "wait");
        for (int i = 0; i < WAIT_REQS; i++)
            wait_check(w, out[i] == WAIT_RANKS * (i + round), "all-reduce result");

        int32_t g[2] = {1, 2}, gs[2] = {0, 0};
        wait_check(w, shoal_group_start() == SHOAL_OK, "group start");
        for (int k = 0; k < 2; k++)
            shoal_allreduce(&g[k], &gs[k], 1, SHOAL_INT32, SHOAL_SUM, c[k]);
        wait_check(w, shoal_group_end() == SHOAL_OK, "group end");
        wait_check(w, gs[0] == WAIT_RANKS && gs[1] == 2 * WAIT_RANKS, "group result");

        /* A request of this thread's group, waited on by another thread:
         * bound to its task only at the group's end. */
        shoal_request_t greq = NULL;
        waiter_t waiter = {.req = &greq};
        pthread_t th;
        int32_t one = 1, sum = 0;
        wait_check(w, shoal_group_start() == SHOAL_OK, "group start");
        wait_check(w, shoal_iallreduce(&one, &sum, 1, SHOAL_INT32, SHOAL_SUM, c[round % 2],
                                       &greq) == SHOAL_OK, "iallreduce in a group");
        wait_check(w, pthread_create(&th, NULL, wait_other_thread, &waiter) == 0, "thread");
        sched_yield();
        wait_check(w, shoal_group_end() == SHOAL_OK, "group end");
        pthread_join(th, NULL);
        wait_check(w, waiter.got == SHOAL_OK && greq == NULL && sum == WAIT_RANKS,
                   "request waited on by another thread");
    }
    /* Requests outlive their communicator's destroy. */
    for (int i = 0; i < 2; i++)
        wait_check(w, shoal_iallreduce(&in[i], &out[i], 1, SHOAL_INT32, SHOAL_SUM, c[0],
                                       &req[i]) == SHOAL_OK, "iallreduce");
    wait_check(w, shoal_comm_destroy(c[0]) == SHOAL_OK, "destroy");
    wait_check(w, shoal_wait_all(2, req) == SHOAL_OK, "wait after destroy");
    wait_check(w, shoal_comm_destroy(c[1]) == SHOAL_OK, "destroy");
    return NULL;
}

static int run_waits(void)
{
    shoal_unique_id_t ids[2];
    for (int k = 0; k < 2; k++) {
        if (shoal_get_unique_id(&ids[k]) != SHOAL_OK)
            return 1;
    }
    wait_rank_t w[WAIT_RANKS];
    pthread_t th[WAIT_RANKS];
    for (int r = 0; r < WAIT_RANKS; r++) {
        w[r] = (wait_rank_t){.rank = r, .ids = ids};
        if (pthread_create(&th[r], NULL, wait_rank, &w[r]))
            return 1;
    }
    int failed = 0;
    for (int r = 0; r < WAIT_RANKS; r++) {
        pthread_join(th[r], NULL);
        failed |= w[r].failed;
    }
    return failed;
}

static void waits_in_mode(const char *mode)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("SHOAL_PROGRESS", mode, 1);
        /* A rank that fails leaves the other waiting: the deadline ends it. */
        setenv("SHOAL_TIMEOUT", "60s", 1);
        execl("/proc/self/exe", "test_handles", "--waits", (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("SHOAL_PROGRESS=%s: the waits failed (status 0x%x)", mode, status);
}

static void test_waits_thread(void **state)
{
    (void)state;
    waits_in_mode("thread");
}

static void test_waits_caller(void **state)
{
    (void)state;
    waits_in_mode("caller");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--waits"))
        return run_waits();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_owns),
        cmocka_unit_test(test_pool_threads),
        cmocka_unit_test(test_dead_handles),
        cmocka_unit_test(test_lookalike_handles),
        cmocka_unit_test(test_abort_races_calls),
        cmocka_unit_test(test_waits_thread),
        cmocka_unit_test(test_waits_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
