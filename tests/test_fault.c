/* Failures that involve other ranks: a rank killed with SIGKILL during a
 * large all-reduce or between calls, calls that differ across ranks (count,
 * collective), and a rank that never calls. Every surviving rank must get
 * the right status with the rank at fault named, never hang, and be able
 * to carry on in a communicator without the dead rank. */
#include "harness.h"

#include "base/clock.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_RANKS 8
#define BIG_COUNT (4u << 20) /* 16 MiB of floats */

/* Shared by the parent and the forked ranks (MAP_SHARED before the fork). */
typedef struct {
    _Atomic uint64_t killed_ns;           /* when the victim raised SIGKILL */
    _Atomic uint64_t error_ns[MAX_RANKS]; /* when each survivor saw the error */
    atomic_int gave_up;                   /* survivors done with the silent rank */
    atomic_int warm;                      /* survivors past the warm-up */
} shared_t;

typedef struct {
    shared_t *sh;
    int victim;
    int between;      /* kill between calls rather than during one */
    const char *transport;
} kill_case_t;

static shared_t *shared_new(void)
{
    shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    return sh;
}

static int names_rank(shoal_comm_t comm, int r)
{
    char want[32];
    snprintf(want, sizeof(want), "rank %d ", r);
    return strstr(shoal_comm_last_error(comm), want) != NULL;
}

/* Survivors in the communicator without the victim: a correct all-reduce. */
static int carry_on(shoal_comm_t comm, int rank, int nranks, int victim)
{
    shoal_comm_t sub = NULL;
    shoal_status_t s = shoal_comm_shrink(comm, &victim, 1, SHOAL_SHRINK_DEFAULT, &sub);
    RANK_CHECK(s == SHOAL_OK, fail, "shrink without rank %d: %s (%s)", victim,
               shoal_status_string(s), shoal_comm_last_error(comm));
    int newsize = 0;
    RANK_CHECK(shoal_comm_size(sub, &newsize) == SHOAL_OK && newsize == nranks - 1, fail, "size %d",
               newsize);
    float x[33];
    for (int i = 0; i < 33; i++)
        x[i] = (float)(rank + i);
    s = shoal_allreduce(x, x, 33, SHOAL_FLOAT32, SHOAL_SUM, sub);
    RANK_CHECK(s == SHOAL_OK, fail, "all-reduce after the shrink: %s", shoal_status_string(s));
    float ranks = 0;
    for (int r = 0; r < nranks; r++)
        ranks += r == victim ? 0.0f : (float)r;
    for (int i = 0; i < 33; i++)
        RANK_CHECK(x[i] == ranks + (float)(i * (nranks - 1)), fail, "x[%d] = %g", i, (double)x[i]);
    RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy the new communicator");
    return 0;
fail:
    return 1;
}

static int rank_killed(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const kill_case_t *c = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    float one = 1;
    RANK_CHECK(shoal_allreduce(&one, &one, 1, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "warm-up");
    /* The victim dies only once the others are past the warm-up: its death
     * fails an all-reduce a rank is still finishing, data delivered or not. */
    if (rank != c->victim)
        atomic_fetch_add(&c->sh->warm, 1);
    while (rank == c->victim && atomic_load(&c->sh->warm) < nranks - 1)
        sched_yield();
    float *buf = malloc(BIG_COUNT * sizeof(float));
    RANK_CHECK(buf, fail, "out of memory");
    for (size_t i = 0; i < BIG_COUNT; i++)
        buf[i] = (float)rank;
    if (rank == c->victim) {
        shoal_request_t req;
        if (!c->between)
            RANK_CHECK(shoal_iallreduce(buf, buf, BIG_COUNT, SHOAL_FLOAT32, SHOAL_SUM, comm,
                                        &req) == SHOAL_OK, fail, "start the all-reduce");
        atomic_store(&c->sh->killed_ns, shoal_now_ns());
        raise(SIGKILL);
    }
    shoal_status_t s;
    if (c->between) {
        /* Nobody calls: the heartbeat alone must bring the news. */
        do {
            RANK_CHECK(shoal_comm_get_async_error(comm, &s) == SHOAL_OK, fail, "async error");
            sched_yield();
        } while (s == SHOAL_OK);
    } else {
        s = shoal_allreduce(buf, buf, BIG_COUNT, SHOAL_FLOAT32, SHOAL_SUM, comm);
    }
    atomic_store(&c->sh->error_ns[rank], shoal_now_ns());
    RANK_CHECK(s == SHOAL_ERR_PEER, fail, "%s after rank %d died: %s (%s)",
               c->between ? "async error" : "all-reduce", c->victim, shoal_status_string(s),
               shoal_comm_last_error(comm));
    RANK_CHECK(names_rank(comm, c->victim), fail, "rank %d not named: %s", c->victim,
               shoal_comm_last_error(comm));
    /* The next call fails at once, with the same reason. */
    s = shoal_allreduce(&one, &one, 1, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_ERR_PEER && names_rank(comm, c->victim), fail, "next call: %s (%s)",
               shoal_status_string(s), shoal_comm_last_error(comm));
    free(buf);
    if (carry_on(comm, rank, nranks, c->victim))
        return 1;
    /* Destroy of a broken communicator returns promptly, whatever it reports. */
    (void)shoal_comm_destroy(comm);
    return 0;
fail:
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void kill_runs(int between)
{
    /* shm+cma: the put all-reduce reads the peers' private buffers by
     * cross-memory attach, which finds the victim's process gone. */
    static const char *const transports[] = {"shm", "tcp", "shm+cma"};
    /* A generous deadline: an error that came from it would be a timeout,
     * not the remote error the test wants. */
    for (size_t t = 0; t < 3; t++) {
        for (int victim = 0; victim < 4; victim += 2) {
            harness_use_transport(t == 1 ? "tcp" : "shm", 64 << 10);
            harness_setenv("SHOAL_CMA", t == 2 ? "on" : NULL);
            harness_setenv("SHOAL_TIMEOUT", "120s");
            shared_t *sh = shared_new();
            kill_case_t c = {sh, victim, between, transports[t]};
            int rc = harness_run_ranks_victim(4, rank_killed, &c, 200, victim);
            uint64_t delays[MAX_RANKS];
            int n = 0;
            for (int r = 0; r < 4; r++) {
                uint64_t at = atomic_load(&sh->error_ns[r]);
                if (r != victim && at)
                    delays[n++] = at - atomic_load(&sh->killed_ns);
            }
            qsort(delays, (size_t)n, sizeof(delays[0]), cmp_u64);
            if (n)
                printf("# %s, rank %d killed %s: error on the %d others after %.1f ms "
                       "(median; max %.1f ms)\n", transports[t], victim,
                       between ? "between calls" : "during a 16 MiB all-reduce", n,
                       (double)delays[n / 2] / 1e6, (double)delays[n - 1] / 1e6);
            fflush(stdout);
            munmap(sh, sizeof(*sh));
            harness_setenv("SHOAL_TIMEOUT", NULL);
            harness_setenv("SHOAL_CMA", NULL);
            assert_int_equal(rc, 0);
        }
    }
}

static void test_kill_during_allreduce(void **state)
{
    (void)state;
    kill_runs(0);
}

static void test_kill_between_calls(void **state)
{
    (void)state;
    kill_runs(1);
}

/* ---- mismatched calls ----------------------------------------------------- */

typedef struct {
    int odd_rank;     /* the rank whose call differs */
    int collective;   /* 0: a different count; 1: all-gather instead of all-reduce */
} mismatch_case_t;

#define MM_COUNT 200

static int rank_mismatch(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const mismatch_case_t *c = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t cap = (size_t)MM_COUNT * (size_t)nranks;
    float *send = malloc(cap * sizeof(float)), *recv = malloc(cap * sizeof(float));
    RANK_CHECK(send && recv, fail, "out of memory");
    for (size_t i = 0; i < cap; i++)
        send[i] = (float)rank;
    memset(recv, 0xa5, cap * sizeof(float));
    int odd = rank == c->odd_rank;
    size_t count = odd && !c->collective ? MM_COUNT / 2 : MM_COUNT;
    shoal_status_t s;
    if (odd && c->collective)
        s = shoal_allgather(send, recv, count, SHOAL_FLOAT32, comm);
    else
        s = shoal_allreduce(send, recv, count, SHOAL_FLOAT32, SHOAL_SUM, comm);
    const char *msg = shoal_comm_last_error(comm);
    RANK_CHECK(s == SHOAL_ERR_MISMATCH, fail, "rank %d: %s (%s)", rank, shoal_status_string(s),
               msg);
    /* Both signatures, whichever rank saw them. */
    const char *mine = strstr(msg, "#0 of");
    RANK_CHECK(mine && strstr(mine + 1, "#0 of"), fail, "not both signatures: %s", msg);
    if (c->collective)
        RANK_CHECK(strstr(msg, "allgather") && strstr(msg, "allreduce"), fail, "calls: %s", msg);
    else
        RANK_CHECK(strstr(msg, "of 100 x") && strstr(msg, "of 200 x"), fail, "counts: %s", msg);
    /* Nothing was written past what the odd rank's call owns. */
    if (odd && !c->collective)
        RANK_CHECK(harness_check_untouched((unsigned char *)recv, count * sizeof(float),
                                           cap * sizeof(float), 0xa5, rank, "recv") == 0, fail,
                   "beyond the count");
    free(send);
    free(recv);
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    return 0;
fail:
    return 1;
}

static void mismatch_runs(int collective)
{
    static const char *const transports[] = {"shm", "tcp"};
    for (size_t t = 0; t < 2; t++) {
        for (int n = 2; n <= 5; n++) {
            harness_use_transport(transports[t], 4096);
            /* Long enough that a timeout cannot pass for the mismatch. */
            harness_setenv("SHOAL_TIMEOUT", "60s");
            mismatch_case_t c = {n - 1, collective};
            int rc = harness_run_ranks(n, rank_mismatch, &c, 90);
            harness_setenv("SHOAL_TIMEOUT", NULL);
            assert_int_equal(rc, 0);
        }
    }
}

static void test_mismatched_count(void **state)
{
    (void)state;
    mismatch_runs(0);
}

static void test_mismatched_collective(void **state)
{
    (void)state;
    mismatch_runs(1);
}

/* ---- a rank that never calls ---------------------------------------------- */

static int rank_silent(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shared_t *sh = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int silent = nranks - 1;
    if (rank == silent) {
        /* Alive and connected, but it never makes the call. */
        while (atomic_load(&sh->gave_up) < nranks - 1)
            sched_yield();
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
        return 0;
    }
    float x[1000] = {0};
    shoal_status_t s = shoal_allreduce(x, x, 1000, SHOAL_FLOAT32, SHOAL_SUM, comm);
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", shoal_comm_last_error(comm));
    atomic_fetch_add(&sh->gave_up, 1);
    RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "all-reduce without rank %d: %s (%s)", silent,
               shoal_status_string(s), msg);
    /* Each survivor names whom it waited for: with two ranks that is the
     * silent one; with more, a survivor may be waiting for a neighbour
     * that waits for the silent rank, and then tells that one's report. */
    char want[32];
    snprintf(want, sizeof(want), "rank %d", silent);
    if (nranks == 2)
        RANK_CHECK(strstr(msg, want), fail, "silent rank not named: %s", msg);
    else
        RANK_CHECK(strstr(msg, "waited"), fail, "nobody named: %s", msg);
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    return 0;
fail:
    return 1;
}

/* Whether some file of dir holds every one of the strings. */
static int dir_has(const char *dir, const char *const *want, size_t nwant)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d))) {
        char path[512], text[65536];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (!f)
            continue;
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        text[n] = '\0';
        fclose(f);
        found = 1;
        for (size_t i = 0; i < nwant; i++)
            found = found && strstr(text, want[i]) != NULL;
    }
    if (d)
        closedir(d);
    return found;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static void test_silent_rank(void **state)
{
    (void)state;
    for (int n = 2; n <= 3; n++) {
        char dir[] = "/tmp/shoal-fault-XXXXXX", pattern[64];
        assert_non_null(mkdtemp(dir));
        snprintf(pattern, sizeof(pattern), "%s/rank.%%p.log", dir);
        harness_use_transport(n == 2 ? "shm" : "tcp", 4096);
        harness_setenv("SHOAL_TIMEOUT", "1s");
        harness_setenv("SHOAL_DEBUG_FILE", pattern);
        shared_t *sh = shared_new();
        int rc = harness_run_ranks(n, rank_silent, sh, 60);
        munmap(sh, sizeof(*sh));
        harness_setenv("SHOAL_DEBUG_FILE", NULL);
        harness_setenv("SHOAL_TIMEOUT", NULL);
        /* The flight recorder of the rank that waited shows the all-reduce
         * still running, with nothing received from the silent rank. */
        char silent[32];
        snprintf(silent, sizeof(silent), "from r%d 0 B", n - 1);
        const char *const want[] = {"flight recorder (timed out)", "shoal_allreduce of 3.9 KiB",
                                    "running for", silent};
        int dumped = dir_has(dir, want, 4);
        remove_dir(dir);
        assert_int_equal(rc, 0);
        assert_true(dumped);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_during_allreduce),
        cmocka_unit_test(test_kill_between_calls),
        cmocka_unit_test(test_mismatched_count),
        cmocka_unit_test(test_mismatched_collective),
        cmocka_unit_test(test_silent_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
