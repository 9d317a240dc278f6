/* shoal_comm_grow over forked ranks, on shared memory and tcp. The first
 * `old` processes form the parent with an id of their own; rank 0 makes
 * the grow's id (shoal_comm_grow_id) and hands it through a pipe to the
 * `add` new processes, which join with it:
 * - 1..6 ranks growing by 1..3: every rank's new rank and size (old ranks
 *   keep theirs, new ones appended), an exact all-reduce (int64, float)
 *   on the new communicator against the scalar reference, and the
 *   parent still usable after (an all-reduce of its own);
 * - the grow's id is the same whichever rank of the parent makes it, and
 *   the next one differs once the parent has grown;
 * - bad arguments: SHOAL_ERR_INVALID_ARG with a reason, the parent still
 *   usable; an id of another communicator is refused;
 * - a new rank that never comes: the others fail with SHOAL_ERR_TIMEOUT at
 *   the deadline, the new rank 0's error naming the missing rank;
 * - grow after a shrink that excluded a dead rank, and a shrink of a grown
 *   communicator that excludes a new rank. */
#include "harness.h"

#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_CHUNK 4096
#define COUNT (3 * TEST_CHUNK / 4 + 5)
#define RUN_TIMEOUT_S 120

typedef struct {
    int old, add;
    int missing;          /* a new rank that never comes (-1: none) */
    shoal_unique_id_t parent_id;
    int pipe_fd[2];       /* rank 0's grow id, to the new ranks */
} grow_case_t;

/* An exact sum on comm, of one integer and one float type (the types'
 * math is test_reduce's; here the communicator is what is checked). */
static int check_allreduce(shoal_comm_t comm, int rank, int n, const char *what)
{
    static const shoal_dtype_t dts[] = {SHOAL_INT64, SHOAL_FLOAT32};
    int ndt = 2;
    size_t bytes = COUNT * 8;
    void *buf = malloc(bytes), *want = malloc(bytes), *tmp = malloc(bytes);
    RANK_CHECK(buf && want && tmp, fail, "out of memory");
    for (int d = 0; d < ndt; d++) {
        harness_fill_exact(buf, COUNT, rank, dts[d], SHOAL_SUM);
        harness_expected(want, tmp, COUNT, n, dts[d], SHOAL_SUM);
        RANK_CHECK(shoal_allreduce(buf, buf, COUNT, dts[d], SHOAL_SUM, comm) == SHOAL_OK, fail,
                   "%s: all-reduce of dtype %d: %s", what, (int)dts[d],
                   shoal_comm_last_error(comm));
        RANK_CHECK(!memcmp(buf, want, COUNT * shoal_dtype_bytes(dts[d])), fail,
                   "%s: all-reduce of dtype %d differs from the reference", what, (int)dts[d]);
    }
    free(buf), free(want), free(tmp);
    return 0;
fail:
    return 1;
}

static int check_shape(shoal_comm_t comm, int rank, int n, const char *what)
{
    int r = -1, size = -1;
    RANK_CHECK(shoal_comm_rank(comm, &r) == SHOAL_OK && shoal_comm_size(comm, &size) == SHOAL_OK,
               fail, "%s: rank or size", what);
    RANK_CHECK(r == rank && size == n, fail, "%s: rank %d of %d, expected %d of %d", what, r,
               size, rank, n);
    return 0;
fail:
    return 1;
}

/* A new rank: the id from the pipe, then the grow. */
static int join(grow_case_t *c, int rank, int n, shoal_comm_t *newcomm)
{
    shoal_unique_id_t id;
    close(c->pipe_fd[1]);
    RANK_CHECK(read(c->pipe_fd[0], &id, sizeof(id)) == (ssize_t)sizeof(id), fail,
               "new rank %d: no grow id in the pipe", rank);
    close(c->pipe_fd[0]);
    RANK_CHECK(shoal_comm_grow(NULL, n, &id, rank, newcomm) == SHOAL_OK, fail,
               "new rank %d: grow: %s", rank, shoal_comm_last_error(NULL));
    return 0;
fail:
    return 1;
}

/* A rank of the parent; rank 0 passes the id on to the new ranks. */
static int grow_old(grow_case_t *c, shoal_comm_t parent, int rank, int n,
                    shoal_comm_t *newcomm)
{
    shoal_unique_id_t id, again;
    close(c->pipe_fd[0]);
    RANK_CHECK(shoal_comm_grow_id(parent, &id) == SHOAL_OK, fail, "grow id: %s",
               shoal_comm_last_error(parent));
    /* Every rank derives the same id: compare rank 0's. */
    RANK_CHECK(harness_same_bytes(parent, &id, sizeof(id)) == 1, fail,
               "the ranks of the parent derive different grow ids");
    if (rank == 0) {
        for (int k = 0; k < c->add; k++)
            RANK_CHECK(write(c->pipe_fd[1], &id, sizeof(id)) == (ssize_t)sizeof(id), fail,
                       "pipe");
    }
    close(c->pipe_fd[1]);
    shoal_status_t s = shoal_comm_grow(parent, n, rank == 0 ? &id : NULL, -1, newcomm);
    if (c->missing >= 0) {
        RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "grow without new rank %d: %s (%s)",
                   c->missing, shoal_status_string(s), shoal_comm_last_error(NULL));
        /* Rank 0 lists the missing ranks; the others name the first. */
        char want[32];
        snprintf(want, sizeof(want), rank == 0 ? "missing ranks: %d" : "missing: rank %d",
                 c->missing);
        RANK_CHECK(strstr(shoal_comm_last_error(NULL), want), fail,
                   "rank %d's error does not name rank %d: %s", rank, c->missing,
                   shoal_comm_last_error(NULL));
    } else {
        RANK_CHECK(s == SHOAL_OK, fail, "grow: %s", shoal_comm_last_error(parent));
    }
    RANK_CHECK(shoal_comm_grow_id(parent, &again) == SHOAL_OK && memcmp(&id, &again, sizeof(id)),
               fail, "the parent's next grow id is the one just used");
    return 0;
fail:
    return 1;
}

static int rank_grow(int rank, int nprocs, const shoal_unique_id_t *unused, void *arg)
{
    (void)unused;
    grow_case_t *c = arg;
    int n = c->old + c->add;
    (void)nprocs;
    shoal_comm_t parent = NULL, newcomm = NULL;
    if (rank >= c->old) {
        if (rank == c->missing)
            return 0;
        if (c->missing >= 0) {
            /* Rank 0 gives up on the missing one, and so the new one too. */
            shoal_unique_id_t id;
            close(c->pipe_fd[1]);
            RANK_CHECK(read(c->pipe_fd[0], &id, sizeof(id)) == (ssize_t)sizeof(id), fail,
                       "new rank %d: no grow id in the pipe", rank);
            shoal_status_t s = shoal_comm_grow(NULL, n, &id, rank, &newcomm);
            char want[32];
            snprintf(want, sizeof(want), "missing: rank %d", c->missing);
            RANK_CHECK(s == SHOAL_ERR_TIMEOUT && strstr(shoal_comm_last_error(NULL), want), fail,
                       "new rank %d without rank %d: %s (%s)", rank, c->missing,
                       shoal_status_string(s), shoal_comm_last_error(NULL));
            return 0;
        }
        if (join(c, rank, n, &newcomm))
            return 1;
    } else {
        RANK_CHECK(shoal_comm_init(c->old, &c->parent_id, rank, &parent) == SHOAL_OK, fail,
                   "parent init: %s", shoal_comm_last_error(NULL));
        if (grow_old(c, parent, rank, n, &newcomm))
            return 1;
        if (c->missing >= 0) {
            RANK_CHECK(check_allreduce(parent, rank, c->old, "parent after the failed grow") == 0,
                       fail, "parent");
            RANK_CHECK(shoal_comm_destroy(parent) == SHOAL_OK, fail, "destroy parent");
            return 0;
        }
    }
    if (check_shape(newcomm, rank, n, "grown") || check_allreduce(newcomm, rank, n, "grown"))
        return 1;
    if (parent) {
        if (check_allreduce(parent, rank, c->old, "parent after the grow"))
            return 1;
        RANK_CHECK(shoal_comm_destroy(parent) == SHOAL_OK, fail, "destroy parent");
    }
    RANK_CHECK(shoal_comm_destroy(newcomm) == SHOAL_OK, fail, "destroy grown");
    return 0;
fail:
    return 1;
}

static int run_case(grow_case_t *c)
{
    if (pipe(c->pipe_fd) != 0 || shoal_get_unique_id(&c->parent_id) != SHOAL_OK)
        return -1;
    int rc = harness_run_ranks(c->old + c->add, rank_grow, c, RUN_TIMEOUT_S);
    close(c->pipe_fd[0]);
    close(c->pipe_fd[1]);
    return rc;
}

static void grow_matrix(const char *transport)
{
    harness_use_transport(transport, TEST_CHUNK);
    int quick = harness_quick();
    for (int old = 1; old <= 6; old++) {
        for (int add = 1; add <= 3 && old + add <= 8; add++) {
            if (quick && !((old == 1 && add == 1) || (old == 3 && add == 2)))
                continue;
            grow_case_t c = {.old = old, .add = add, .missing = -1};
            print_message("# %s: %d ranks + %d\n", transport, old, add);
            assert_int_equal(run_case(&c), 0);
        }
    }
}

static void test_grow_shm(void **state)
{
    (void)state;
    grow_matrix("shm");
}

static void test_grow_tcp(void **state)
{
    (void)state;
    grow_matrix("tcp");
}

/* The last new rank never comes: the others time out. */
static void test_missing(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "3");
    grow_case_t c = {.old = 2, .add = 2, .missing = 3};
    int rc = run_case(&c);
    harness_setenv("SHOAL_TIMEOUT", NULL);
    assert_int_equal(rc, 0);
}

/* Bad arguments, each refused with a reason, the parent still usable. */
static int rank_bad(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm, other, out = NULL;
    shoal_unique_id_t gid, foreign;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(shoal_comm_split(comm, 0, rank, &other) == SHOAL_OK, fail, "split");
    RANK_CHECK(shoal_comm_grow_id(comm, &gid) == SHOAL_OK &&
                   shoal_comm_grow_id(other, &foreign) == SHOAL_OK,
               fail, "grow ids");
    RANK_CHECK(memcmp(&gid, &foreign, sizeof(gid)), fail, "two communicators, one grow id");
    /* Each call, then its status and the reason it left (on comm, or for
     * the thread where a new rank has no communicator yet). */
#define REFUSED(call, c, reason)                                                         \
    do {                                                                                 \
        shoal_status_t s_ = (call);                                                      \
        const char *why_ = shoal_comm_last_error(c);                                     \
        RANK_CHECK(s_ == SHOAL_ERR_INVALID_ARG && strstr(why_, reason), fail,            \
                   "%s: %s (%s), expected the reason \"%s\"", #call,                     \
                   shoal_status_string(s_), why_, reason);                               \
    } while (0)
    REFUSED(shoal_comm_grow_id(comm, NULL), comm, "id_p");
    REFUSED(shoal_comm_grow(comm, n, NULL, -1, &out), comm, "not more");
    REFUSED(shoal_comm_grow(comm, n + 1, NULL, -1, NULL), comm, "newcomm_p");
    REFUSED(shoal_comm_grow(comm, n + 1, NULL, rank + 1, &out), comm, "keeps its rank");
    REFUSED(shoal_comm_grow(NULL, n + 1, NULL, n, &out), NULL, "needs the grow's id");
    REFUSED(shoal_comm_grow(NULL, n + 1, &gid, 0, &out), NULL, "1 .. nranks - 1");
    REFUSED(shoal_comm_grow(NULL, n + 1, &gid, n + 1, &out), NULL, "1 .. nranks - 1");
    /* Last: a refused id still moves the grow number on (as any grow does). */
    REFUSED(shoal_comm_grow(comm, n + 1, &foreign, -1, &out), comm, "next grow id");
#undef REFUSED
    RANK_CHECK(out == NULL, fail, "a refused grow wrote newcomm");
    RANK_CHECK(check_allreduce(comm, rank, n, "after the refusals") == 0, fail, "parent");
    RANK_CHECK(shoal_comm_destroy(other) == SHOAL_OK && shoal_comm_destroy(comm) == SHOAL_OK,
               fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_bad_args(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(3, rank_bad, NULL, RUN_TIMEOUT_S), 0);
}

/* Four processes: 0, 1, 2 form the parent and 2 dies; 0 and 1 shrink
 * without it and grow back to 3 with process 3; then the three shrink
 * without the new rank, which leaves. */
static int rank_shrink_grow(int rank, int nprocs, const shoal_unique_id_t *unused, void *arg)
{
    (void)unused, (void)nprocs;
    grow_case_t *c = arg;
    shoal_comm_t parent, shrunk, grown, again;
    if (rank == 3) {
        if (join(c, 2, 3, &grown) || check_shape(grown, 2, 3, "new rank") ||
            check_allreduce(grown, 2, 3, "grown"))
            return 1;
        /* Excluded by the next shrink: it leaves without a word. */
        shoal_comm_abort(grown);
        return 0;
    }
    RANK_CHECK(shoal_comm_init(3, &c->parent_id, rank, &parent) == SHOAL_OK, fail, "init");
    if (rank == 2)
        _exit(0);
    int dead = 2;
    close(c->pipe_fd[0]);
    RANK_CHECK(shoal_comm_shrink(parent, &dead, 1, SHOAL_SHRINK_DEFAULT, &shrunk) == SHOAL_OK,
               fail, "shrink: %s", shoal_comm_last_error(parent));
    shoal_unique_id_t id;
    RANK_CHECK(shoal_comm_grow_id(shrunk, &id) == SHOAL_OK, fail, "grow id");
    if (rank == 0)
        RANK_CHECK(write(c->pipe_fd[1], &id, sizeof(id)) == (ssize_t)sizeof(id), fail, "pipe");
    close(c->pipe_fd[1]);
    RANK_CHECK(shoal_comm_grow(shrunk, 3, NULL, -1, &grown) == SHOAL_OK, fail, "grow: %s",
               shoal_comm_last_error(shrunk));
    if (check_shape(grown, rank, 3, "grown") || check_allreduce(grown, rank, 3, "grown"))
        return 1;
    int newrank = 2;
    RANK_CHECK(shoal_comm_shrink(grown, &newrank, 1, SHOAL_SHRINK_DEFAULT, &again) == SHOAL_OK,
               fail, "shrink of the grown: %s", shoal_comm_last_error(grown));
    if (check_shape(again, rank, 2, "shrunk again") ||
        check_allreduce(again, rank, 2, "shrunk again"))
        return 1;
    shoal_comm_abort(grown);
    shoal_comm_abort(parent);
    RANK_CHECK(shoal_comm_destroy(again) == SHOAL_OK && shoal_comm_destroy(shrunk) == SHOAL_OK,
               fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_shrink_grow(void **state)
{
    (void)state;
    static const char *const transports[] = {"shm", "tcp"};
    for (int t = 0; t < 2; t++) {
        harness_use_transport(transports[t], TEST_CHUNK);
        grow_case_t c = {.old = 3, .add = 1, .missing = -1};
        assert_int_equal(pipe(c.pipe_fd), 0);
        assert_int_equal(shoal_get_unique_id(&c.parent_id), SHOAL_OK);
        int rc = harness_run_ranks(4, rank_shrink_grow, &c, RUN_TIMEOUT_S);
        close(c.pipe_fd[0]);
        close(c.pipe_fd[1]);
        assert_int_equal(rc, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_shm),
        cmocka_unit_test(test_grow_tcp),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_shrink_grow),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
