/* Communicator lifecycle and bad input: every invalid argument gets a clear
 * status and a reason, and the communicator stays usable; split; a
 * destroyed handle is refused; a rank that dies turns into an error on the
 * others within the deadline. */
#include "harness.h"

#include "core/comm.h"
#include "core/bootstrap.h"

#include <sys/mman.h>

#include <pthread.h>
#include <sched.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int allreduce_works(shoal_comm_t comm, int nranks)
{
    int one = 1, sum = 0;
    return shoal_allreduce(&one, &sum, 1, SHOAL_INT32, SHOAL_SUM, comm) == SHOAL_OK &&
           sum == nranks;
}

static int rank_bad_input(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    float x[4] = {1, 2, 3, 4};
    struct {
        const char *what;
        const void *send;
        void *recv;
        size_t count;
        int dtype, op;
    } bad[] = {
        {"NULL sendbuf", NULL, x, 4, SHOAL_FLOAT32, SHOAL_SUM},
        {"NULL recvbuf", x, NULL, 4, SHOAL_FLOAT32, SHOAL_SUM},
        {"unknown dtype", x, x, 4, SHOAL_DTYPE_COUNT, SHOAL_SUM},
        {"negative dtype", x, x, 4, -1, SHOAL_SUM},
        {"unknown op", x, x, 4, SHOAL_FLOAT32, SHOAL_OP_COUNT},
        {"bitwise op on a float", x, x, 4, SHOAL_FLOAT32, SHOAL_BAND},
        {"op past the bitwise ones", x, x, 4, SHOAL_INT32, SHOAL_BITOP_END},
        {"overflowing count", x, x, SIZE_MAX / 2, SHOAL_FLOAT32, SHOAL_SUM},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        shoal_status_t s = shoal_allreduce(bad[i].send, bad[i].recv, bad[i].count,
                                           (shoal_dtype_t)bad[i].dtype, (shoal_op_t)bad[i].op,
                                           comm);
        RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "%s gave %s", bad[i].what,
                   shoal_status_string(s));
        RANK_CHECK(strlen(shoal_comm_last_error(comm)) > 0, fail, "%s left no reason", bad[i].what);
        RANK_CHECK(x[0] == 1 && x[3] == 4, fail, "%s changed the buffer", bad[i].what);
    }
    RANK_CHECK(shoal_allreduce(NULL, NULL, 0, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "count 0 with NULL buffers must succeed");
    RANK_CHECK(allreduce_works(comm, nranks), fail, "comm unusable after bad input");

    int r = -1, n = -1;
    RANK_CHECK(shoal_comm_rank(comm, &r) == SHOAL_OK && r == rank, fail, "rank query");
    RANK_CHECK(shoal_comm_size(comm, &n) == SHOAL_OK && n == nranks, fail, "size query");
    RANK_CHECK(shoal_comm_rank(comm, NULL) == SHOAL_ERR_INVALID_ARG, fail, "NULL rank_p");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");

    /* The handle is dead now: refused, never dereferenced. */
    RANK_CHECK(shoal_allreduce(x, x, 4, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_ERR_INVALID_ARG,
               fail, "destroyed comm accepted");
    RANK_CHECK(strstr(shoal_comm_last_error(comm), "not valid") != NULL, fail, "reason: %s",
               shoal_comm_last_error(comm));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_ERR_INVALID_ARG, fail, "double destroy accepted");
    RANK_CHECK(shoal_allreduce(x, x, 4, SHOAL_FLOAT32, SHOAL_SUM, NULL) == SHOAL_ERR_INVALID_ARG,
               fail, "NULL comm accepted");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_bad_input(void **state)
{
    (void)state;
    assert_int_equal(harness_run_ranks(3, rank_bad_input, NULL, 120), 0);
}

static void test_bad_init_args(void **state)
{
    (void)state;
    shoal_unique_id_t id;
    shoal_comm_t comm = (shoal_comm_t)0x1;
    assert_int_equal(shoal_get_unique_id(&id), SHOAL_OK);
    assert_int_equal(shoal_comm_init(0, &id, 0, &comm), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_init(2, &id, 2, &comm), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_init(2, &id, -1, &comm), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_init(2, NULL, 0, &comm), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_init(2, &id, 0, NULL), SHOAL_ERR_INVALID_ARG);
    assert_ptr_equal(comm, (shoal_comm_t)0x1); /* outputs written only on success */
    assert_true(strstr(shoal_comm_last_error(NULL), "NULL") != NULL);
    assert_int_equal(shoal_get_unique_id(NULL), SHOAL_ERR_INVALID_ARG);
    size_t sz;
    assert_int_equal(shoal_dtype_size(SHOAL_BFLOAT16, &sz), SHOAL_OK);
    assert_int_equal(sz, 2);
    assert_int_equal(shoal_dtype_size(SHOAL_DTYPE_COUNT, &sz), SHOAL_ERR_INVALID_ARG);
    assert_string_equal(shoal_status_string(SHOAL_ERR_TIMEOUT), "timed out");
    assert_string_equal(shoal_status_string((shoal_status_t)999), "unknown status");
}

/* Split by parity, ordered by descending key; rank 0 opts out. */
static int rank_split(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm, sub = NULL;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int color = rank == 0 ? SHOAL_SPLIT_NOCOLOR : rank % 2;
    shoal_status_t s = shoal_comm_split(comm, color, -rank, &sub);
    RANK_CHECK(s == SHOAL_OK, fail, "split: %s", shoal_status_string(s));
    if (rank == 0) {
        RANK_CHECK(sub == NULL, fail, "NOCOLOR rank got a communicator");
    } else {
        int members = 0, above = 0;
        for (int r = 1; r < nranks; r++) {
            if (r % 2 == color) {
                members++;
                above += r > rank;
            }
        }
        int sr, sn;
        RANK_CHECK(shoal_comm_rank(sub, &sr) == SHOAL_OK && sr == above, fail,
                   "sub rank %d, want %d", sr, above);
        RANK_CHECK(shoal_comm_size(sub, &sn) == SHOAL_OK && sn == members, fail, "sub size %d", sn);
        int v = rank, sum = 0, want = 0;
        for (int r = 1; r < nranks; r++)
            want += r % 2 == color ? r : 0;
        RANK_CHECK(shoal_allreduce(&v, &sum, 1, SHOAL_INT32, SHOAL_SUM, sub) == SHOAL_OK &&
                       sum == want, fail, "sub allreduce %d, want %d", sum, want);
        RANK_CHECK(shoal_comm_destroy(sub) == SHOAL_OK, fail, "destroy sub");
    }
    RANK_CHECK(allreduce_works(comm, nranks), fail, "parent unusable after split");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_split(void **state)
{
    (void)state;
    assert_int_equal(harness_run_ranks(6, rank_split, NULL, 120), 0);
    assert_int_equal(harness_run_ranks(7, rank_split, NULL, 120), 0);
}

/* What the child's secret must never do: cross the parent's bootstrap
 * connections. Rank 1 reaches rank 0 through a relay that records every
 * byte; both ranks split, rank 1 sends a marker over the parent's
 * bootstrap first (so the recording is known to hold the split's traffic
 * around it), and the child's secret must not be among the bytes. */
#define SPLIT_MARKER "split-eavesdrop-marker"

typedef struct {
    uint8_t secret[2][SHOAL_SECRET_BYTES];
    int done[2];
} split_seen_t;

static int rank_split_secret(int rank, const shoal_unique_id_t *id, split_seen_t *seen)
{
    shoal_comm_t comm, child = NULL;
    RANK_CHECK(shoal_comm_init(2, id, rank, &comm) == SHOAL_OK, fail, "init");
    char marker[2][32] = {{0}};
    snprintf(marker[rank], sizeof(marker[rank]), "%s", SPLIT_MARKER);
    RANK_CHECK(shoal_bootstrap_allgather(comm->bootstrap, marker, sizeof(marker[0])) ==
                   SHOAL_OK, fail, "marker");
    RANK_CHECK(shoal_comm_split(comm, 7, rank, &child) == SHOAL_OK, fail, "split");
    RANK_CHECK(child && allreduce_works(child, 2), fail, "child unusable");
    memcpy(seen->secret[rank], shoal_bootstrap_secret(child->bootstrap), SHOAL_SECRET_BYTES);
    seen->done[rank] = 1;
    RANK_CHECK(shoal_comm_destroy(child) == SHOAL_OK, fail, "destroy child");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_split_secret_not_sent(void **state)
{
    (void)state;
    /* Rank 1's bootstrap connection runs through the relay, which records it. */
    harness_relay_t *relay;
    shoal_unique_id_t id;
    assert_int_equal(harness_relay_id(-1, &relay, &id), 0);
    split_seen_t *seen = mmap(NULL, sizeof(*seen), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(seen != MAP_FAILED);
    memset(seen, 0, sizeof(*seen));
    pid_t pids[2];
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = rank_split_secret(r, &id, seen);
            fflush(NULL);
            _exit(rc);
        }
    }
    int rc0 = harness_wait(pids[0], 120), rc1 = harness_wait(pids[1], 120);
    shoal_bootstrap_listener_withdraw(&id);
    size_t len;
    const unsigned char *log = harness_relay_log(relay, &len);
    int marked = memmem(log, len, SPLIT_MARKER, strlen(SPLIT_MARKER)) != NULL;
    int leaked = memmem(log, len, seen->secret[0], SHOAL_SECRET_BYTES) != NULL;
    harness_relay_stop(relay, 30);
    assert_int_equal(rc0, 0);
    assert_int_equal(rc1, 0);
    assert_true(seen->done[0] && seen->done[1]);
    assert_memory_equal(seen->secret[0], seen->secret[1], SHOAL_SECRET_BYTES);
    munmap(seen, sizeof(*seen));
    assert_true(marked);
    assert_false(leaked);
}

/* The last rank exits after init; the others must get an error, not hang. */
static int rank_dies(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    if (rank == nranks - 1)
        _exit(0);
    static float x[1 << 16];
    shoal_status_t s = shoal_allreduce(x, x, 1 << 16, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_ERR_PEER || s == SHOAL_ERR_TIMEOUT, fail, "got %s",
               shoal_status_string(s));
    s = shoal_allreduce(x, x, 1, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_ERR_PEER || s == SHOAL_ERR_TIMEOUT, fail, "broken comm gave %s",
               shoal_status_string(s));
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_dead_rank(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "3s");
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    assert_int_equal(harness_run_ranks(3, rank_dies, NULL, 60), 0);
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
    assert_int_equal(harness_run_ranks(3, rank_dies, NULL, 60), 0);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

typedef struct {
    shoal_comm_t comm;
    shoal_status_t status;
} inflight_t;

static void *blocked_allreduce(void *arg)
{
    inflight_t *t = arg;
    static float x[1024];
    t->status = shoal_allreduce(x, x, 1024, SHOAL_FLOAT32, SHOAL_SUM, t->comm);
    return NULL;
}

/* Rank 0 aborts while another of its threads waits inside an all-reduce that
 * rank 1 never joins: the waiting call must return SHOAL_ERR_ABORTED long
 * before SHOAL_TIMEOUT, and the abort must not free what it still uses. */
static int rank_abort_inflight(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    if (rank == 1) {
        /* Wait for rank 0 to go away; its abort breaks the bootstrap link. */
        shoal_status_t s = shoal_comm_split(comm, 0, 0, &(shoal_comm_t){NULL});
        RANK_CHECK(s != SHOAL_OK, fail, "split succeeded without rank 0");
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort on rank 1");
        return 0;
    }
    inflight_t t = {comm, SHOAL_OK};
    pthread_t th;
    RANK_CHECK(pthread_create(&th, NULL, blocked_allreduce, &t) == 0, fail, "thread");
    while (atomic_load(&comm->active) == 0)
        sched_yield();
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    pthread_join(th, NULL);
    RANK_CHECK(t.status == SHOAL_ERR_ABORTED, fail, "in-flight call got %s",
               shoal_status_string(t.status));
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_abort_inflight(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "120s");
    assert_int_equal(harness_run_ranks(2, rank_abort_inflight, NULL, 60), 0);
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    assert_int_equal(harness_run_ranks(2, rank_abort_inflight, NULL, 60), 0);
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    shoal_comm_t comm;
    int key;
    shoal_status_t status;
} split_call_t;

static void *split_thread(void *arg)
{
    split_call_t *c = arg;
    shoal_comm_t sub = NULL;
    c->status = shoal_comm_split(c->comm, 0, c->key, &sub);
    if (c->status == SHOAL_OK)
        shoal_comm_abort(sub);
    return NULL;
}

/* Rank 0 aborts the parent while another of its threads is inside
 * shoal_comm_split, forming the new communicator with rank 1, which never
 * comes: rank 1's own init of it is refused at once (an invalid SHOAL_ALGO
 * set after the parent formed). The split's init must see the parent's
 * abort and fail with SHOAL_ERR_ABORTED, and the abort, which waits for
 * the split to leave, must return long before the 60 s SHOAL_TIMEOUT that
 * would otherwise end the init. *arg says which rank leads the new
 * communicator: 0, whose init then waits on its listener, or 1, when rank
 * 0 waits for a handshake or a connection. */
static int rank_abort_split(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    int leader = *(const int *)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int key = rank == leader ? 0 : 1;
    if (rank == 1) {
        harness_setenv("SHOAL_ALGO", "no-such-algorithm");
        shoal_comm_t sub = NULL;
        shoal_status_t s = shoal_comm_split(comm, 0, key, &sub);
        RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "rank 1's split gave %s",
                   shoal_status_string(s));
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort on rank 1");
        return 0;
    }
    split_call_t c = {comm, key, SHOAL_OK};
    pthread_t th;
    RANK_CHECK(pthread_create(&th, NULL, split_thread, &c) == 0, fail, "thread");
    /* Rank 1 aborted its parent only after its split's exchanges: rank 0's
     * split is in (or just before) the new communicator's init when the
     * news of it arrives. */
    shoal_status_t err = SHOAL_OK;
    while (err == SHOAL_OK) {
        RANK_CHECK(shoal_comm_get_async_error(comm, &err) == SHOAL_OK, fail, "async error");
        sched_yield();
    }
    double t0 = now_s();
    shoal_status_t s = shoal_comm_abort(comm);
    double took = now_s() - t0;
    pthread_join(th, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "abort gave %s", shoal_status_string(s));
    RANK_CHECK(c.status == SHOAL_ERR_ABORTED, fail, "the split gave %s",
               shoal_status_string(c.status));
    RANK_CHECK(took < 10.0, fail, "abort took %.1f s", took);
    return 0;
fail:
    return 1;
}

static void test_abort_during_split(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "60s");
    for (int leader = 0; leader < 2; leader++)
        assert_int_equal(harness_run_ranks(2, rank_abort_split, &leader, 40), 0);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_init_args),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_secret_not_sent),
        cmocka_unit_test(test_dead_rank),
        cmocka_unit_test(test_abort_inflight),
        cmocka_unit_test(test_abort_during_split),
    };
    return cmocka_run_group_tests_name("comm", tests, NULL, NULL);
}
