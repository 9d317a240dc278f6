/* shoal_comm_shrink over forked ranks, on shared memory and tcp:
 * - 2..8 ranks excluding rank 0, the last rank, a middle rank or two ranks,
 *   with SHOAL_SHRINK_DEFAULT and SHOAL_SHRINK_ABORT, the excluded ranks
 *   alive, exited right after init, killed (SIGKILL) right after init, or
 *   dead with the parent broken by a collective that failed for it; the
 *   survivors check their new rank and size and an all-reduce of the new
 *   communicator against the scalar reference, then release the parent;
 * - with SHOAL_SHRINK_ABORT, a parent collective blocked on another thread,
 *   a queued non-blocking one, and a split waiting in the bootstrap all
 *   return SHOAL_ERR_ABORTED (or the peer's failure), and destroy returns
 *   at once; a split in its new communicator's init, which a peer never
 *   joins, is cut short and the shrink returns long before the deadline;
 * - every bad argument: SHOAL_ERR_INVALID_ARG with a reason, nothing
 *   changed, the parent still usable;
 * - strangers on a rendezvous port that leads no shrink are refused, and
 *   do not disturb the shrinks that follow;
 * - a rank that disagrees about the excluded set is refused, and the others
 *   form their communicator. */
#include "harness.h"

#include "core/comm.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEST_CHUNK 4096
#define CHECK_COUNT (3 * TEST_CHUNK / 4 + 5) /* several pieces of float */
#define RUN_TIMEOUT_S 90

/* What becomes of the excluded ranks. */
typedef enum {
    FATE_ALIVE,  /* they stay, and take part in the parent's release */
    FATE_EXIT,   /* _exit right after init */
    FATE_KILL,   /* SIGKILL right after init */
    FATE_BROKEN, /* _exit after init; the survivors' next collective fails */
} fate_t;

static const char *const fate_name[] = {"alive", "exit", "kill", "broken"};

typedef struct {
    int nexclude;
    int exclude[2];
    int flags;
    fate_t fate;
    int has_pipe;
    int pipe_fd[2];     /* inflight: the excluded rank's wait for the survivors */
} shrink_case_t;

static int is_excluded(const shrink_case_t *c, int rank)
{
    for (int i = 0; i < c->nexclude; i++) {
        if (c->exclude[i] == rank)
            return 1;
    }
    return 0;
}

/* Rank and size a survivor must get: ordered by old rank. */
static void expected_place(const shrink_case_t *c, int rank, int nranks, int *newrank_p,
                           int *newsize_p)
{
    int below = 0;
    for (int r = 0; r < rank; r++)
        below += !is_excluded(c, r);
    *newrank_p = below;
    *newsize_p = nranks - c->nexclude;
}

/* The new communicator works: rank, size, and two all-reduces checked
 * against the scalar reference. */
static int check_newcomm(shoal_comm_t sub, int newrank, int newsize)
{
    int r = -1, n = -1;
    RANK_CHECK(shoal_comm_rank(sub, &r) == SHOAL_OK && r == newrank, fail, "new rank %d, want %d",
               r, newrank);
    RANK_CHECK(shoal_comm_size(sub, &n) == SHOAL_OK && n == newsize, fail, "new size %d, want %d",
               n, newsize);
    static const struct {
        shoal_dtype_t dt;
        shoal_op_t op;
    } runs[] = {{SHOAL_FLOAT32, SHOAL_SUM}, {SHOAL_INT32, SHOAL_MAX}};
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        size_t bytes = CHECK_COUNT * 4;
        unsigned char *in = malloc(bytes), *out = malloc(bytes), *want = malloc(bytes),
                      *tmp = malloc(bytes);
        RANK_CHECK(in && out && want && tmp, fail, "out of memory");
        harness_fill_exact(in, CHECK_COUNT, newrank, runs[k].dt, runs[k].op);
        harness_expected(want, tmp, CHECK_COUNT, newsize, runs[k].dt, runs[k].op);
        shoal_status_t s = shoal_allreduce(in, out, CHECK_COUNT, runs[k].dt, runs[k].op, sub);
        int same = s == SHOAL_OK && memcmp(out, want, bytes) == 0;
        free(in);
        free(out);
        free(want);
        free(tmp);
        RANK_CHECK(s == SHOAL_OK, fail, "all-reduce on the new communicator: %s (%s)",
                   shoal_status_string(s), shoal_comm_last_error(sub));
        RANK_CHECK(same, fail, "all-reduce %zu on the new communicator of %d: wrong result", k,
                   newsize);
    }
    return 0;
fail:
    return 1;
}

/* An all-reduce on comm; its status. */
static shoal_status_t one_allreduce(shoal_comm_t comm)
{
    static float x[64];
    return shoal_allreduce(x, x, 64, SHOAL_FLOAT32, SHOAL_SUM, comm);
}

static int rank_shrink(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const shrink_case_t *c = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    if (is_excluded(c, rank)) {
        switch (c->fate) {
        case FATE_EXIT:
        case FATE_BROKEN:
            _exit(0);
        case FATE_KILL:
            raise(SIGKILL);
            return 1;
        case FATE_ALIVE:
            break;
        }
        if (c->flags == SHOAL_SHRINK_ABORT) {
            /* The survivors stop their side of the parent. */
            RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort on an excluded rank");
            return 0;
        }
        /* The parent is untouched: one more collective with the survivors,
         * then the release. */
        RANK_CHECK(one_allreduce(comm) == SHOAL_OK, fail, "parent all-reduce on an excluded rank");
        RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy on an excluded rank");
        return 0;
    }

    if (c->fate == FATE_BROKEN) {
        /* The dead rank never joins: with a short deadline the collective
         * fails soon, and the parent stays broken. */
        comm->team.timeout_ns = 100000000ull;
        shoal_status_t s = one_allreduce(comm);
        RANK_CHECK(s == SHOAL_ERR_PEER || s == SHOAL_ERR_TIMEOUT, fail, "broken all-reduce gave %s",
                   shoal_status_string(s));
        s = one_allreduce(comm);
        RANK_CHECK(s == SHOAL_ERR_PEER || s == SHOAL_ERR_TIMEOUT, fail, "broken parent gave %s",
                   shoal_status_string(s));
    }

    shoal_comm_t sub = NULL;
    shoal_status_t s = shoal_comm_shrink(comm, c->exclude, c->nexclude, c->flags, &sub);
    RANK_CHECK(s == SHOAL_OK, fail, "shrink: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    int newrank, newsize;
    expected_place(c, rank, nranks, &newrank, &newsize);
    if (check_newcomm(sub, newrank, newsize))
        return 1;
    RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy the new communicator");

    if (c->flags == SHOAL_SHRINK_ABORT) {
        s = one_allreduce(comm);
        RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "stopped parent gave %s", shoal_status_string(s));
        /* Either release returns at once: nothing is left to wait for. */
        s = rank % 2 ? shoal_comm_abort(comm) : shoal_comm_destroy(comm);
        RANK_CHECK(s == SHOAL_OK, fail, "release of the stopped parent: %s",
                   shoal_status_string(s));
    } else if (c->fate == FATE_ALIVE) {
        RANK_CHECK(one_allreduce(comm) == SHOAL_OK, fail, "parent unusable after a default shrink");
        RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy the parent");
    } else {
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort the parent");
    }
    return 0;
fail:
    return 1;
}

/* Fork the ranks of case c running fn. Unlike harness_run_ranks, the
 * excluded ranks of a FATE_KILL case must die of SIGKILL, and this process
 * closes its ends of the case's pipe once the ranks are forked, so that
 * the pipe's reader sees its end when the ranks close theirs. */
static int run_ranks(int nranks, harness_rank_fn_t fn, shrink_case_t *c)
{
    shoal_unique_id_t id;
    if (shoal_get_unique_id(&id) != SHOAL_OK)
        return -1;
    int pids[8];
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = fn(r, nranks, &id, c);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
    }
    if (c->has_pipe) {
        close(c->pipe_fd[0]);
        close(c->pipe_fd[1]);
    }
    int failed = 0;
    for (int pass = 0; pass < 2; pass++) {
        /* Survivors first: a rank that waits for a dead one fails, then
         * the dead are reaped. */
        for (int r = 0; r < nranks; r++) {
            int killed = c->fate == FATE_KILL && is_excluded(c, r);
            if (killed != pass)
                continue;
            int st = 0;
            if (!killed) {
                int rc = harness_wait(pids[r], RUN_TIMEOUT_S);
                if (rc != 0) {
                    fprintf(stderr, "# rank %d/%d exited %d (-1: signal or timeout)\n", r,
                            nranks, rc);
                    failed = 1;
                }
            } else if (waitpid(pids[r], &st, 0) != pids[r] || !WIFSIGNALED(st) ||
                       WTERMSIG(st) != SIGKILL) {
                fprintf(stderr, "# rank %d/%d should have died of SIGKILL\n", r, nranks);
                failed = 1;
            }
        }
    }
    return failed ? -1 : 0;
}

/* Exclusion pattern p of n ranks: rank 0, the last, a middle one, two
 * (listed out of order). Returns 0 where the pattern makes no sense. */
static int pattern(int p, int n, shrink_case_t *c)
{
    switch (p) {
    case 0:
        c->nexclude = 1;
        c->exclude[0] = 0;
        return 1;
    case 1:
        c->nexclude = 1;
        c->exclude[0] = n - 1;
        return 1;
    case 2:
        c->nexclude = 1;
        c->exclude[0] = n / 2;
        return n >= 3;
    default:
        c->nexclude = 2;
        c->exclude[0] = n - 2;
        c->exclude[1] = n % 2 ? 0 : 1;
        return n >= 3;
    }
}

/* Every rank count and pattern on one transport (t = 0 for shm, 1 for
 * tcp); the flags alternate so that each pair of count and pattern gets
 * both over the two transports, and the fates take turns (every flag meets
 * every fate). A few runs are killed instead. */
static void shrink_matrix(int t)
{
    harness_use_transport(t ? "tcp" : "shm", TEST_CHUNK);
    for (int n = 2; n <= 8; n++) {
        for (int p = 0; p < 4; p++) {
            shrink_case_t c = {.flags = (n + p + t) % 2};
            if (!pattern(p, n, &c))
                continue;
            c.fate = (fate_t[]){FATE_ALIVE, FATE_EXIT, FATE_BROKEN}[(n + 2 * p + t) % 3];
            if ((n == 4 && p == 0) || (n == 7 && p == 3))
                c.fate = FATE_KILL;
            int rc = run_ranks(n, rank_shrink, &c);
            if (rc)
                fprintf(stderr, "# %s: %d ranks, excluding %d (and %d), %s, %s: failed\n",
                        t ? "tcp" : "shm", n, c.exclude[0], c.nexclude > 1 ? c.exclude[1] : -1,
                        c.flags ? "abort" : "default", fate_name[c.fate]);
            assert_int_equal(rc, 0);
        }
    }
}

static void test_shrink_shm(void **state)
{
    (void)state;
    shrink_matrix(0);
}

static void test_shrink_tcp(void **state)
{
    (void)state;
    shrink_matrix(1);
}

/* ---- in-flight calls on the parent ------------------------------------- */

#define INFLIGHT_COUNT 1024

typedef struct {
    shoal_comm_t comm;
    int split;          /* a split instead of an all-reduce */
    shoal_status_t status;
    atomic_int done;
} inflight_t;

static void *inflight_call(void *arg)
{
    inflight_t *t = arg;
    if (t->split) {
        shoal_comm_t sub = NULL;
        t->status = shoal_comm_split(t->comm, 0, 0, &sub);
    } else {
        static float x[INFLIGHT_COUNT];
        t->status = shoal_allreduce(x, x, INFLIGHT_COUNT, SHOAL_FLOAT32, SHOAL_SUM, t->comm);
    }
    atomic_store(&t->done, 1);
    return NULL;
}

/* The last rank stays alive but idle, so the survivors' parent calls wait
 * for it until SHOAL_SHRINK_ABORT stops them. It releases the parent only
 * once every survivor has closed its end of the pipe (after its shrink), so
 * that its sockets do not close under a survivor's blocked call. */
static int rank_inflight(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shrink_case_t *c = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int split = c->fate == FATE_BROKEN; /* this test's flag for the split variant */
    if (is_excluded(c, rank)) {
        close(c->pipe_fd[1]);
        char b;
        while (read(c->pipe_fd[0], &b, 1) > 0)
            continue;
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort on the excluded rank");
        return 0;
    }
    close(c->pipe_fd[0]);
    inflight_t t = {comm, split, SHOAL_OK, 0};
    shoal_status_t s;
    pthread_t th;
    RANK_CHECK(pthread_create(&th, NULL, inflight_call, &t) == 0, fail, "thread");
    /* In flight, or already failed by a survivor that stopped first. */
    while (atomic_load(&comm->active) == 0 && !atomic_load(&t.done))
        sched_yield();
    shoal_request_t req = NULL;
    if (!split) {
        /* The same shape as the blocked one: whichever the ranks queue
         * first, they agree, and both wait for the idle rank. A survivor
         * that stops first is, to the others, a rank that left without a
         * goodbye: their communicator may be broken by then. */
        static float y[INFLIGHT_COUNT];
        s = shoal_iallreduce(y, y, INFLIGHT_COUNT, SHOAL_FLOAT32, SHOAL_SUM, comm, &req);
        RANK_CHECK(s == SHOAL_OK || s == SHOAL_ERR_PEER, fail,
                   "queue a non-blocking all-reduce: %s", shoal_status_string(s));
    }
    shoal_comm_t sub = NULL;
    s = shoal_comm_shrink(comm, c->exclude, c->nexclude, SHOAL_SHRINK_ABORT, &sub);
    RANK_CHECK(s == SHOAL_OK, fail, "shrink: %s", shoal_status_string(s));
    pthread_join(th, NULL);
    if (split) {
        /* A survivor that stops first shuts its bootstrap sockets: the
         * others' split may see that before their own stop. */
        RANK_CHECK(t.status == SHOAL_ERR_ABORTED || t.status == SHOAL_ERR_PEER, fail,
                   "blocked split got %s", shoal_status_string(t.status));
    } else {
        RANK_CHECK(t.status == SHOAL_ERR_ABORTED || t.status == SHOAL_ERR_PEER, fail,
                   "blocked all-reduce got %s", shoal_status_string(t.status));
        s = req ? shoal_wait(&req) : SHOAL_ERR_PEER;
        RANK_CHECK(s == SHOAL_ERR_ABORTED || s == SHOAL_ERR_PEER, fail, "queued all-reduce got %s",
                   shoal_status_string(s));
    }
    close(c->pipe_fd[1]);
    int newrank, newsize;
    expected_place(c, rank, nranks, &newrank, &newsize);
    if (check_newcomm(sub, newrank, newsize))
        return 1;
    RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy the new communicator");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy the stopped parent");
    return 0;
fail:
    return 1;
}

static void inflight_runs(const char *transport)
{
    harness_use_transport(transport, TEST_CHUNK);
    for (int n = 3; n <= 5; n += 2) {
        for (int split = 0; split < 2; split++) {
            shrink_case_t c = {.nexclude = 1, .exclude = {n - 1},
                               .fate = split ? FATE_BROKEN : FATE_ALIVE};
            assert_int_equal(pipe(c.pipe_fd), 0);
            c.has_pipe = 1;
            assert_int_equal(run_ranks(n, rank_inflight, &c), 0);
        }
    }
}

static void test_abort_inflight(void **state)
{
    (void)state;
    /* The blocked calls would only end at this deadline without the stop. */
    inflight_runs("shm");
    inflight_runs("tcp");
}

/* ---- a split in its new communicator's init --------------------------- */

typedef struct {
    shoal_comm_t comm;
    shoal_status_t status;
} split_init_t;

static void *split_init_call(void *arg)
{
    split_init_t *t = arg;
    shoal_comm_t sub = NULL;
    t->status = shoal_comm_split(t->comm, 0, 0, &sub);
    if (t->status == SHOAL_OK)
        shoal_comm_abort(sub);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 0 shrinks with SHOAL_SHRINK_ABORT while another of its threads is
 * inside shoal_comm_split, past the parent's exchanges and forming the new
 * communicator with rank 1, which never joins it (its own init is refused
 * at once: an invalid SHOAL_ALGO set after the parent formed). The stop
 * must cut that init short (SHOAL_ERR_ABORTED) instead of waiting for the
 * 60 s SHOAL_TIMEOUT at which it would end, and the shrink to rank 0 alone
 * must succeed long before that. */
static int rank_shrink_split(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    if (rank == 1) {
        harness_setenv("SHOAL_ALGO", "no-such-algorithm");
        shoal_comm_t sub = NULL;
        shoal_status_t s = shoal_comm_split(comm, 0, 0, &sub);
        RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "rank 1's split gave %s",
                   shoal_status_string(s));
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort on rank 1");
        return 0;
    }
    split_init_t t = {comm, SHOAL_OK};
    pthread_t th;
    RANK_CHECK(pthread_create(&th, NULL, split_init_call, &t) == 0, fail, "thread");
    /* Rank 1 leaves after the split's exchanges: its departure says that
     * rank 0's split is in (or just before) the new communicator's init. */
    shoal_status_t err = SHOAL_OK;
    while (err == SHOAL_OK) {
        RANK_CHECK(shoal_comm_get_async_error(comm, &err) == SHOAL_OK, fail, "async error");
        sched_yield();
    }
    int gone = 1;
    shoal_comm_t sub = NULL;
    double t0 = now_s();
    shoal_status_t s = shoal_comm_shrink(comm, &gone, 1, SHOAL_SHRINK_ABORT, &sub);
    double took = now_s() - t0;
    pthread_join(th, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "shrink: %s", shoal_status_string(s));
    RANK_CHECK(t.status == SHOAL_ERR_ABORTED, fail, "the split gave %s",
               shoal_status_string(t.status));
    RANK_CHECK(took < 10.0, fail, "shrink took %.1f s", took);
    RANK_CHECK(check_newcomm(sub, 0, 1) == 0, fail, "the new communicator");
    RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy the new communicator");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy the stopped parent");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_stop_split_init(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "60s");
    assert_int_equal(harness_run_ranks(2, rank_shrink_split, NULL, 40), 0);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

/* ---- bad arguments ------------------------------------------------------ */

static int rank_bad_args(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    shoal_comm_t const sentinel = (shoal_comm_t)0x1;
    shoal_comm_t sub = sentinel;
    int other = (rank + 1) % nranks;
    int all[8];
    for (int r = 0; r < nranks; r++)
        all[r] = r;
    const struct {
        const char *what;
        const int *exclude;
        int nexclude;
        int flags;
        shoal_comm_t *newcomm_p;
        const char *reason;
    } bad[] = {
        {"NULL newcomm_p", NULL, 0, SHOAL_SHRINK_DEFAULT, NULL, "newcomm_p"},
        {"NULL exclude", NULL, 1, SHOAL_SHRINK_DEFAULT, &sub, "NULL"},
        {"negative nexclude", all, -1, SHOAL_SHRINK_DEFAULT, &sub, "negative"},
        {"rank past the end", (int[]){nranks}, 1, SHOAL_SHRINK_DEFAULT, &sub, "out of range"},
        {"negative rank", (int[]){-1}, 1, SHOAL_SHRINK_DEFAULT, &sub, "out of range"},
        {"rank twice", (int[]){other, other}, 2, SHOAL_SHRINK_DEFAULT, &sub, "twice"},
        {"self excluded", (int[]){rank}, 1, SHOAL_SHRINK_DEFAULT, &sub,
         nranks > 1 ? "is in exclude" : "all"},
        {"everyone excluded", all, nranks, SHOAL_SHRINK_DEFAULT, &sub, "all"},
        {"flags 2", NULL, 0, 2, &sub, "flags"},
        {"flags -1", NULL, 0, -1, &sub, "flags"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* With either flag: a bad call must not stop the parent. */
        for (int abort_flag = 0; abort_flag < 2; abort_flag++) {
            int flags = bad[i].flags | (abort_flag && bad[i].flags == 0 ? SHOAL_SHRINK_ABORT : 0);
            shoal_status_t s =
                shoal_comm_shrink(comm, bad[i].exclude, bad[i].nexclude, flags, bad[i].newcomm_p);
            RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "%s gave %s", bad[i].what,
                       shoal_status_string(s));
            RANK_CHECK(strstr(shoal_comm_last_error(comm), bad[i].reason) != NULL, fail,
                       "%s: reason \"%s\"", bad[i].what, shoal_comm_last_error(comm));
            RANK_CHECK(sub == sentinel, fail, "%s wrote *newcomm_p", bad[i].what);
        }
    }
    RANK_CHECK(shoal_comm_shrink(NULL, NULL, 0, 0, &sub) == SHOAL_ERR_INVALID_ARG, fail,
               "NULL comm");
    RANK_CHECK(strstr(shoal_comm_last_error(NULL), "NULL") != NULL, fail, "NULL comm reason");
    RANK_CHECK(one_allreduce(comm) == SHOAL_OK, fail, "parent unusable after bad shrinks");

    /* Nobody excluded, twice (the second shrink numbers differ), then the
     * parent still works. */
    for (int k = 0; k < 2; k++) {
        sub = NULL;
        shoal_status_t s = shoal_comm_shrink(comm, k ? all : NULL, 0, SHOAL_SHRINK_DEFAULT, &sub);
        RANK_CHECK(s == SHOAL_OK, fail, "shrink excluding nobody: %s", shoal_status_string(s));
        if (check_newcomm(sub, rank, nranks))
            return 1;
        RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy the new communicator");
    }
    RANK_CHECK(one_allreduce(comm) == SHOAL_OK, fail, "parent unusable after a default shrink");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    sub = sentinel;
    RANK_CHECK(shoal_comm_shrink(comm, NULL, 0, 0, &sub) == SHOAL_ERR_INVALID_ARG, fail,
               "destroyed comm accepted");
    RANK_CHECK(strstr(shoal_comm_last_error(comm), "not valid") != NULL, fail, "reason: %s",
               shoal_comm_last_error(comm));
    RANK_CHECK(sub == sentinel, fail, "destroyed comm wrote *newcomm_p");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_bad_args(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_bad_args, NULL, RUN_TIMEOUT_S), 0);
    assert_int_equal(harness_run_ranks(3, rank_bad_args, NULL, RUN_TIMEOUT_S), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(4, rank_bad_args, NULL, RUN_TIMEOUT_S), 0);
}

/* ---- strangers on the rendezvous listener ------------------------------ */

/* A connection to rank `to`'s rendezvous listener; -1 on failure. */
static int stranger_connect(shoal_comm_t comm, int to)
{
    const shoal_sockaddr_t *a = &comm->rdv_addrs[to];
    int fd = socket(a->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = a->u.sa.sa_family == AF_INET ? sizeof(a->u.sin) : sizeof(a->u.sin6);
    if (fd >= 0 && connect(fd, &a->u.sa, len) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Ranks 2 and 3 try rank 1's rendezvous port (rank 1 leads the shrinks
 * without rank 0) before the first shrink and after each: a port that is
 * not leading a shrink refuses the connection outright, so strangers never
 * wait in a queue that nobody accepts from; it is bound again after each
 * shrink, so the second shrink works too. Collectives around each try
 * keep rank 1 out of its shrinks while it happens. */
static int stranger_refused(shoal_comm_t comm, int rank, const char *when)
{
    if (rank < 2)
        return 0;
    int fd = stranger_connect(comm, 1);
    if (fd >= 0)
        close(fd);
    RANK_CHECK(fd < 0, fail, "a stranger connected to rank 1's rendezvous port %s", when);
    return 0;
fail:
    return 1;
}

static int rank_stranger(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    if (stranger_refused(comm, rank, "before any shrink"))
        return 1;
    RANK_CHECK(one_allreduce(comm) == SHOAL_OK, fail, "parent all-reduce");
    if (rank == 0) {
        /* Left out of the shrinks, rank 0 stays until the others leave:
         * leaving at once would be a death to the others, which may still
         * be finishing the all-reduce above and would fail it. */
        shoal_status_t st = SHOAL_OK;
        while (shoal_comm_get_async_error(comm, &st) == SHOAL_OK && st == SHOAL_OK)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        RANK_CHECK(st == SHOAL_ERR_PEER, fail, "rank 0 saw %s", shoal_status_string(st));
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort on rank 0");
        return 0;
    }
    for (int k = 0; k < 2; k++) {
        shoal_comm_t sub = NULL;
        shoal_status_t s = shoal_comm_shrink(comm, (int[]){0}, 1, SHOAL_SHRINK_DEFAULT, &sub);
        RANK_CHECK(s == SHOAL_OK, fail, "shrink %d: %s", k, shoal_status_string(s));
        if (check_newcomm(sub, rank - 1, nranks - 1))
            return 1;
        /* Rank 1 is past its shrink (the port closed) after the first
         * all-reduce, and not yet in the next one before the second. */
        RANK_CHECK(one_allreduce(sub) == SHOAL_OK, fail, "all-reduce on the new communicator");
        if (stranger_refused(comm, rank, k ? "after the second shrink" : "after a shrink"))
            return 1;
        RANK_CHECK(one_allreduce(sub) == SHOAL_OK, fail, "all-reduce on the new communicator");
        RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy the new communicator");
    }
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_strangers(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(4, rank_stranger, NULL, RUN_TIMEOUT_S), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(5, rank_stranger, NULL, RUN_TIMEOUT_S), 0);
}

/* ---- ranks that disagree about the set --------------------------------- */

/* Ranks 0 and 1 exclude rank 2 and form a communicator of two; rank 2
 * excludes rank 1 instead. Both sides meet at rank 0's listener, but the
 * excluded set is part of the new secret: rank 2 must be refused, not let
 * in as rank 1 of the others' communicator. Rank 1 joins only after rank 2
 * has tried (the pipe), so rank 0 is still accepting when rank 2 comes. */
static int rank_disagree(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shrink_case_t *c = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    if (rank != 1)
        close(c->pipe_fd[0]);
    if (rank == 0)
        close(c->pipe_fd[1]);
    shoal_comm_t sub = NULL;
    if (rank == 2) {
        shoal_status_t s = shoal_comm_shrink(comm, (int[]){1}, 1, SHOAL_SHRINK_DEFAULT, &sub);
        close(c->pipe_fd[1]);
        RANK_CHECK(s == SHOAL_ERR_AUTH, fail, "odd rank out got %s", shoal_status_string(s));
        RANK_CHECK(sub == NULL, fail, "odd rank out got a communicator");
        RANK_CHECK(strstr(shoal_comm_last_error(comm), "survivors") != NULL, fail, "reason: %s",
                   shoal_comm_last_error(comm));
    } else {
        if (rank == 1) {
            close(c->pipe_fd[1]);
            char b;
            while (read(c->pipe_fd[0], &b, 1) > 0)
                continue;
        }
        shoal_status_t s = shoal_comm_shrink(comm, (int[]){2}, 1, SHOAL_SHRINK_DEFAULT, &sub);
        RANK_CHECK(s == SHOAL_OK, fail, "shrink: %s", shoal_status_string(s));
        if (check_newcomm(sub, rank, 2))
            return 1;
        RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy the new communicator");
    }
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    return 0;
fail:
    return 1;
}

static void test_disagreeing_sets(void **state)
{
    (void)state;
    harness_use_transport("tcp", TEST_CHUNK);
    shrink_case_t c = {.has_pipe = 1};
    assert_int_equal(pipe(c.pipe_fd), 0);
    assert_int_equal(run_ranks(3, rank_disagree, &c), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_shrink_shm),
        cmocka_unit_test(test_shrink_tcp),
        cmocka_unit_test(test_abort_inflight),
        cmocka_unit_test(test_stop_split_init),
        cmocka_unit_test(test_strangers),
        cmocka_unit_test(test_disagreeing_sets),
    };
    return cmocka_run_group_tests_name("shrink", tests, NULL, NULL);
}
