/* One-sided communication (shoal_win_create, shoal_put_signal,
 * shoal_signal, shoal_wait_signal) over forked ranks, on shared memory and
 * tcp, against the bytes each put must leave:
 * - every peer pattern (all to all, ring, one to all, all to one, self) on
 *   1, 2, 3, 5 and 8 ranks, with sizes 0, 1, odd and several slots, into
 *   windows of private memory and of shoal_mem_alloc (which shm writes
 *   straight into: its puts are counted as such, and tcp's are not);
 *   on two faked hosts too, which the RDMA guest runs over ib between its
 *   Soft-RoCE devices (tests/rdma/verbs_check.sh), where puts go straight
 *   into the other host's windows;
 * - ordering: after a wait for k signals from a rank, its first k puts are
 *   in place, and puts to the same bytes land in issue order; a put then a
 *   signal; a put in a group with the wait for the peer's;
 * - many outstanding puts: a thousand non-blocking puts to one rank, two
 *   ranks putting hundreds into each other before either waits, and puts
 *   followed by a barrier before the target waits; a hundred signals
 *   into a FIFO that holds fewer, sent while the target is away;
 * - lazy tcp: waits take one-sided messages from connected peers only, so
 *   a peer that sleeps past the deadline is not dialed (and failed) by
 *   them;
 * - a wait that is never satisfied fails with SHOAL_ERR_TIMEOUT at the
 *   deadline, naming the peer; a window freed by its target drops the
 *   bytes but still counts the signal;
 * - bad arguments: SHOAL_ERR_INVALID_ARG with the reason, the communicator
 *   still usable; a bad window on one rank fails the creation on all; a
 *   put whose window was freed while it waited in the queue is refused. */
#include "harness.h"

#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_CHUNK 4096
#define RUN_TIMEOUT_S 120

static const size_t sizes[] = {0, 1, 1001, 3 * TEST_CHUNK + 5};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define SLOT (3 * TEST_CHUNK + 8)

typedef struct {
    int shared; /* windows from shoal_mem_alloc */
    int tcp;
    int hosts;  /* ranks on two faked hosts (harness_split_hosts) */
} rma_case_t;

/* Byte i of what rank src puts to rank dst in round k. */
static unsigned char put_byte(int src, int dst, int k, size_t i)
{
    return (unsigned char)harness_mix((uint32_t)(src * 7919 + dst * 131 + k * 17) ^ (uint32_t)i);
}

static void *win_alloc(int shared, size_t size)
{
    void *p = NULL;
    if (shared)
        return shoal_mem_alloc(size ? size : 1, &p) == SHOAL_OK ? p : NULL;
    return calloc(1, size ? size : 1);
}

static void win_release(int shared, void *p)
{
    if (shared)
        shoal_mem_free(p);
    else
        free(p);
}

/* Puts to every rank in dsts[0..ndst) and waits for one signal from each
 * rank in srcs[0..nsrc): a pattern, with every size. Rank q's bytes land at
 * q * SLOT of the target's part. */
static int run_pattern(shoal_comm_t comm, int rank, int n, int shared, const char *name,
                       const int *dsts, int ndst, const int *srcs, int nsrc)
{
    size_t wsize = (size_t)n * SLOT;
    unsigned char *win_buf = win_alloc(shared, wsize), *src = win_alloc(shared, SLOT);
    shoal_win_t win = NULL, src_win = NULL;
    RANK_CHECK(win_buf && src, fail, "out of memory");
    RANK_CHECK(shoal_win_create(win_buf, wsize, comm, &win) == SHOAL_OK, fail,
               "%s: shoal_win_create: %s", name, shoal_comm_last_error(comm));
    /* The source in a window too, registered as ib's puts need it. */
    RANK_CHECK(shoal_win_create(src, SLOT, comm, &src_win) == SHOAL_OK, fail,
               "%s: shoal_win_create: %s", name, shoal_comm_last_error(comm));
    for (size_t z = 0; z < NSIZES; z++) {
        size_t sz = sizes[z];
        memset(win_buf, 0xee, wsize);
        RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
        for (int d = 0; d < ndst; d++) {
            for (size_t i = 0; i < sz; i++)
                src[i] = put_byte(rank, dsts[d], (int)z, i);
            RANK_CHECK(shoal_put_signal(src, sz, dsts[d], win, (size_t)rank * SLOT, comm) ==
                           SHOAL_OK,
                       fail, "%s: put of %zu B to rank %d: %s", name, sz, dsts[d],
                       shoal_comm_last_error(comm));
        }
        shoal_signal_wait_t waits[8];
        for (int s = 0; s < nsrc; s++)
            waits[s] = (shoal_signal_wait_t){.peer = srcs[s], .count = 1};
        if (nsrc)
            RANK_CHECK(shoal_wait_signal(waits, (size_t)nsrc, comm) == SHOAL_OK, fail,
                       "%s: wait for %d ranks: %s", name, nsrc, shoal_comm_last_error(comm));
        for (int s = 0; s < nsrc; s++) {
            const unsigned char *got = win_buf + (size_t)srcs[s] * SLOT;
            for (size_t i = 0; i < sz; i++)
                RANK_CHECK(got[i] == put_byte(srcs[s], rank, (int)z, i), fail,
                           "%s: %zu B from rank %d: byte %zu is %#x", name, sz, srcs[s], i,
                           got[i]);
            RANK_CHECK(!harness_check_untouched(got, sz, SLOT, 0xee, rank, name), fail,
                       "%s: rank %d's put ran past its %zu B", name, srcs[s], sz);
        }
    }
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
    RANK_CHECK(shoal_win_free(win, comm) == SHOAL_OK, fail, "shoal_win_free");
    RANK_CHECK(shoal_win_free(src_win, comm) == SHOAL_OK, fail, "shoal_win_free");
    win_release(shared, win_buf);
    win_release(shared, src);
    return 0;
fail:
    return 1;
}

static int patterns_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    const rma_case_t *c = arg;
    shoal_comm_t comm = NULL;
    if (c->hosts)
        harness_split_hosts(rank, n, 2);
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    int all[8], ring_to = (rank + 1) % n, ring_from = (rank + n - 1) % n, zero = 0;
    for (int q = 0; q < n; q++)
        all[q] = q;
    if (run_pattern(comm, rank, n, c->shared, "all to all", all, n, all, n) ||
        run_pattern(comm, rank, n, c->shared, "ring", &ring_to, 1, &ring_from, 1) ||
        run_pattern(comm, rank, n, c->shared, "one to all", all, rank == 0 ? n : 0, &zero, 1) ||
        run_pattern(comm, rank, n, c->shared, "all to one", &zero, 1, all, rank == 0 ? n : 0) ||
        run_pattern(comm, rank, n, c->shared, "self", &rank, 1, &rank, 1))
        goto fail;
    /* Where peers map the memory, shm writes into it; tcp never does. */
    if (n > (c->hosts ? 2 : 1) && c->shared && !c->tcp)
        RANK_CHECK(harness_direct_puts(comm) > 0, fail,
                   "no put went straight into a peer's window");
    if (c->tcp)
        RANK_CHECK(harness_direct_puts(comm) == 0, fail, "tcp wrote into a peer's memory");
    /* Between hosts on Soft-RoCE, the other host's ranks are written too. */
    if (c->hosts && getenv("SHOAL_TEST_RXE") && !strcmp(getenv("SHOAL_TEST_RXE"), "1")) {
        unsigned long long puts = 0;
        for (int q = 0; q < n; q++) {
            if (comm->team.eps[q] && q * 2 / n != rank * 2 / n)
                puts += comm->team.eps[q]->puts;
        }
        RANK_CHECK(puts > 0, fail, "no put went over ib into another host's window");
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_patterns(int tcp, int shared)
{
    static const int counts[] = {1, 2, 3, 5, 8};
    harness_use_transport(tcp ? "tcp" : "shm", TEST_CHUNK);
    rma_case_t c = {.shared = shared, .tcp = tcp};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        if (!harness_ranks_wanted(counts[i]))
            continue;
        print_message("%s, %s windows, %d ranks\n", tcp ? "tcp" : "shm",
                      shared ? "shareable" : "private", counts[i]);
        assert_int_equal(harness_run_ranks(counts[i], patterns_rank, &c, RUN_TIMEOUT_S), 0);
    }
}

static void test_patterns_shm_private(void **state)
{
    (void)state;
    run_patterns(0, 0);
}

static void test_patterns_shm_shared(void **state)
{
    (void)state;
    run_patterns(0, 1);
}

/* Two hosts: shm inside each, tcp between them, or ib between rxe0 and
 * rxe1 in the RDMA guest (SHOAL_TEST_RXE=1, tests/rdma/verbs_check.sh). */
static void test_patterns_hosts(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    for (int shared = 0; shared < 2; shared++) {
        for (int n = 2; n <= 4; n += 2) {
            rma_case_t c = {.shared = shared, .hosts = 1};
            print_message("two hosts, %s windows, %d ranks\n", shared ? "shareable" : "private",
                          n);
            assert_int_equal(harness_run_ranks(n, patterns_rank, &c, RUN_TIMEOUT_S), 0);
        }
    }
}

static void test_patterns_tcp(void **state)
{
    (void)state;
    run_patterns(1, 0);
    run_patterns(1, 1);
}

/* ---- ordering and many outstanding puts ------------------------------- */

#define NPUTS 1000
#define PUT_BYTES 24

/* Rank 0 puts NPUTS pieces to rank 1 (each at its own offset, then the
 * last byte of each again at one shared offset), non-blocking; rank 1
 * waits for them one at a time, and after wait k finds pieces 0..k in
 * place; then a big put and a signal behind it; then both put hundreds
 * into each other before either waits; then three ranks put into rank 0
 * and pass a barrier before it waits. */
static int ordering_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    const rma_case_t *c = arg;
    shoal_comm_t comm = NULL;
    size_t wsize = NPUTS * PUT_BYTES + 16 + SLOT;
    unsigned char *wbuf = win_alloc(c->shared, wsize);
    unsigned char *src = malloc(NPUTS * PUT_BYTES + SLOT);
    shoal_request_t *reqs = calloc(NPUTS, sizeof(*reqs));
    shoal_win_t win = NULL;
    RANK_CHECK(wbuf && src && reqs, fail, "out of memory");
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(shoal_win_create(wbuf, wsize, comm, &win) == SHOAL_OK, fail, "win_create: %s",
               shoal_comm_last_error(comm));
    size_t same = NPUTS * PUT_BYTES; /* the offset every put's last byte goes to again */
    if (rank == 0) {
        for (int k = 0; k < NPUTS; k++) {
            unsigned char *p = src + (size_t)k * PUT_BYTES;
            for (size_t i = 0; i < PUT_BYTES; i++)
                p[i] = put_byte(0, 1, k, i);
            RANK_CHECK(shoal_iput_signal(p, PUT_BYTES, 1, win, (size_t)k * PUT_BYTES, comm,
                                         &reqs[k]) == SHOAL_OK,
                       fail, "iput %d: %s", k, shoal_comm_last_error(comm));
        }
        RANK_CHECK(shoal_wait_all(NPUTS, reqs) == SHOAL_OK, fail, "wait_all: %s",
                   shoal_comm_last_error(comm));
        for (int k = 0; k < NPUTS; k++) {
            src[k] = (unsigned char)k;
            RANK_CHECK(shoal_put_signal(&src[k], 1, 1, win, same, comm) == SHOAL_OK, fail,
                       "same-byte put %d", k);
        }
        /* Bytes over several slots, then a signal alone. */
        for (size_t i = 0; i < SLOT; i++)
            src[i] = put_byte(0, 1, -1, i);
        RANK_CHECK(shoal_put_signal(src, SLOT, 1, win, same + 16, comm) == SHOAL_OK, fail,
                   "big put");
        RANK_CHECK(shoal_signal(1, comm) == SHOAL_OK, fail, "signal");
    } else if (rank == 1) {
        shoal_signal_wait_t one = {.peer = 0, .count = 1};
        for (int k = 0; k < NPUTS; k++) {
            RANK_CHECK(shoal_wait_signal(&one, 1, comm) == SHOAL_OK, fail, "wait %d: %s", k,
                       shoal_comm_last_error(comm));
            for (int j = k; j >= 0 && j > k - 2; j--) {
                const unsigned char *p = wbuf + (size_t)j * PUT_BYTES;
                for (size_t i = 0; i < PUT_BYTES; i++)
                    RANK_CHECK(p[i] == put_byte(0, 1, j, i), fail,
                               "after wait %d, put %d's byte %zu is not in place", k, j, i);
            }
        }
        one.count = NPUTS;
        RANK_CHECK(shoal_wait_signal(&one, 1, comm) == SHOAL_OK, fail, "same-byte waits");
        RANK_CHECK(wbuf[same] == (unsigned char)(NPUTS - 1), fail,
                   "the same byte holds %d, not the last put's %d", wbuf[same], NPUTS - 1);
        /* Two signals: the big put's and the lone one behind it. */
        one.count = 2;
        RANK_CHECK(shoal_wait_signal(&one, 1, comm) == SHOAL_OK, fail, "wait for two");
        for (size_t i = 0; i < SLOT; i++)
            RANK_CHECK(wbuf[same + 16 + i] == put_byte(0, 1, -1, i), fail,
                       "big put's byte %zu", i);
    }
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier: %s", shoal_comm_last_error(comm));

    /* Ranks 0 and 1 put into each other before either waits: more puts
     * than either's slots hold, so each must take the other's while its own
     * wait for room. */
    if (rank < 2) {
        int peer = 1 - rank;
        for (int k = 0; k < NPUTS / 2; k++) {
            src[k] = (unsigned char)(k * 3 + rank);
            RANK_CHECK(shoal_put_signal(&src[k], 1, peer, win, (size_t)k, comm) == SHOAL_OK,
                       fail, "crossed put %d: %s", k, shoal_comm_last_error(comm));
        }
        shoal_signal_wait_t w = {.peer = peer, .count = NPUTS / 2};
        RANK_CHECK(shoal_wait_signal(&w, 1, comm) == SHOAL_OK, fail, "crossed wait: %s",
                   shoal_comm_last_error(comm));
        for (int k = 0; k < NPUTS / 2; k++)
            RANK_CHECK(wbuf[k] == (unsigned char)(k * 3 + peer), fail, "crossed byte %d", k);
    }
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");

    /* Every other rank puts into rank 0, then all pass a barrier, then rank
     * 0 waits: the barrier must not wait on puts that wait on rank 0. */
    if (rank != 0) {
        for (int k = 0; k < 200; k++) {
            src[k] = (unsigned char)(rank + k);
            RANK_CHECK(shoal_put_signal(&src[k], 1, 0, win, (size_t)(rank * 200 + k), comm) ==
                           SHOAL_OK,
                       fail, "put before barrier %d: %s", k, shoal_comm_last_error(comm));
        }
    }
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier after puts: %s",
               shoal_comm_last_error(comm));
    if (rank == 0) {
        shoal_signal_wait_t w[8];
        for (int q = 1; q < n; q++)
            w[q - 1] = (shoal_signal_wait_t){.peer = q, .count = 200};
        RANK_CHECK(shoal_wait_signal(w, (size_t)n - 1, comm) == SHOAL_OK, fail, "wait: %s",
                   shoal_comm_last_error(comm));
        for (int q = 1; q < n; q++) {
            for (int k = 0; k < 200; k++)
                RANK_CHECK(wbuf[q * 200 + k] == (unsigned char)(q + k), fail,
                           "rank %d's byte %d", q, k);
        }
    }

    /* A group: each rank puts to the next and waits for the previous in
     * one group, in that order. */
    src[0] = (unsigned char)(0x40 + rank);
    shoal_signal_wait_t prev = {.peer = (rank + n - 1) % n, .count = 1};
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group_start");
    RANK_CHECK(shoal_put_signal(src, 1, (rank + 1) % n, win, same + 1, comm) == SHOAL_OK,
               fail, "put in group");
    RANK_CHECK(shoal_wait_signal(&prev, 1, comm) == SHOAL_OK, fail, "wait in group");
    RANK_CHECK(shoal_group_end() == SHOAL_OK, fail, "group_end: %s",
               shoal_comm_last_error(comm));
    RANK_CHECK(wbuf[same + 1] == (unsigned char)(0x40 + prev.peer), fail, "group put's byte");
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
    RANK_CHECK(shoal_win_free(win, comm) == SHOAL_OK, fail, "win_free");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    win_release(c->shared, wbuf);
    free(src);
    free(reqs);
    return 0;
fail:
    return 1;
}

static void test_ordering(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        for (int shared = 0; shared < 2; shared++) {
            harness_use_transport(t ? "tcp" : "shm", TEST_CHUNK);
            rma_case_t c = {.shared = shared, .tcp = t};
            print_message("%s, %s window\n", t ? "tcp" : "shm", shared ? "shareable" : "private");
            assert_int_equal(harness_run_ranks(3, ordering_rank, &c, RUN_TIMEOUT_S), 0);
        }
    }
}

/* Rank 0 signals rank 1 more times than its FIFO holds while rank 1 is
 * away: every signal beyond the FIFO's depth waits for room, none is lost. */
static int full_fifo_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm = NULL;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
    if (rank == 0) {
        for (int k = 0; k < 100; k++)
            RANK_CHECK(shoal_signal(1, comm) == SHOAL_OK, fail, "signal %d: %s", k,
                       shoal_comm_last_error(comm));
    } else {
        usleep(300000);
        shoal_signal_wait_t w = {.peer = 0, .count = 100};
        RANK_CHECK(shoal_wait_signal(&w, 1, comm) == SHOAL_OK, fail, "wait for 100: %s",
                   shoal_comm_last_error(comm));
    }
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_full_fifo(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        harness_use_transport(t ? "tcp" : "shm", TEST_CHUNK);
        assert_int_equal(harness_run_ranks(2, full_fifo_rank, NULL, RUN_TIMEOUT_S), 0);
    }
}

/* Lazy tcp: rank 0 waits, twice, for signals rank 1 sends late, while
 * rank 2, never connected to it, sleeps past the deadline. Rank 0's waits
 * must not dial rank 2 (a dial nobody serves fails at the deadline and
 * sticks to the endpoint): its put to rank 2 afterwards connects and
 * lands. */
static int lazy_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm = NULL;
    unsigned char wbuf[8] = {0}, byte = 42;
    shoal_win_t win = NULL;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    /* A ring all-gather: rank 0 and rank 2 stay unconnected. */
    RANK_CHECK(shoal_win_create(wbuf, sizeof(wbuf), comm, &win) == SHOAL_OK, fail, "create");
    shoal_signal_wait_t w = {.peer = rank == 2 ? 0 : 1, .count = 1};
    if (rank == 0) {
        for (int k = 0; k < 2; k++)
            RANK_CHECK(shoal_wait_signal(&w, 1, comm) == SHOAL_OK, fail, "wait %d: %s", k,
                       shoal_comm_last_error(comm));
        RANK_CHECK(shoal_put_signal(&byte, 1, 2, win, 0, comm) == SHOAL_OK, fail,
                   "put to rank 2: %s", shoal_comm_last_error(comm));
    } else if (rank == 1) {
        for (int k = 0; k < 2; k++) {
            usleep(3000000);
            RANK_CHECK(shoal_signal(0, comm) == SHOAL_OK, fail, "signal");
        }
    } else if (rank == 2) {
        usleep(8000000);
        RANK_CHECK(shoal_wait_signal(&w, 1, comm) == SHOAL_OK, fail, "wait: %s",
                   shoal_comm_last_error(comm));
        RANK_CHECK(wbuf[0] == 42, fail, "rank 0's byte is %d", wbuf[0]);
    } else {
        usleep(7000000); /* into the barrier with the others, within its deadline */
    }
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier: %s",
               shoal_comm_last_error(comm));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_lazy_tcp(void **state)
{
    (void)state;
    harness_use_transport("tcp", TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "4s");
    assert_int_equal(harness_run_ranks(4, lazy_rank, NULL, RUN_TIMEOUT_S), 0);
}

/* ---- deadlines and freed windows ----------------------------------------- */

static int timeout_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm = NULL;
    unsigned char wbuf[64] = {0}, byte = 7;
    shoal_win_t win = NULL;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(shoal_win_create(wbuf, sizeof(wbuf), comm, &win) == SHOAL_OK, fail, "create");
    /* Rank 1 frees its part: rank 0's bytes are dropped, its signal counts. */
    if (rank == 1)
        RANK_CHECK(shoal_win_free(win, comm) == SHOAL_OK, fail, "free");
    RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
    if (rank == 0)
        RANK_CHECK(shoal_put_signal(&byte, 1, 1, win, 3, comm) == SHOAL_OK, fail, "put: %s",
                   shoal_comm_last_error(comm));
    shoal_signal_wait_t w = {.peer = 0, .count = 1};
    if (rank == 1) {
        RANK_CHECK(shoal_wait_signal(&w, 1, comm) == SHOAL_OK, fail, "wait on freed: %s",
                   shoal_comm_last_error(comm));
        RANK_CHECK(wbuf[3] == 0, fail, "a freed window was written");
        /* A signal that never comes. */
        shoal_status_t s = shoal_wait_signal(&w, 1, comm);
        RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "unsatisfied wait returned %s",
                   shoal_status_string(s));
        const char *e = shoal_comm_last_error(comm);
        RANK_CHECK(strstr(e, "signal") && strstr(e, "from rank 0"), fail,
                   "the error does not name the peer: %s", e);
    } else {
        /* Idle past rank 1's deadline; its failure reaches this rank's next
         * call. */
        sleep(4);
        shoal_status_t s = shoal_barrier(comm);
        RANK_CHECK(s != SHOAL_OK, fail, "the barrier after rank 1's timeout passed");
    }
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void test_timeout(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "2s");
    assert_int_equal(harness_run_ranks(2, timeout_rank, NULL, RUN_TIMEOUT_S), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "2s");
    assert_int_equal(harness_run_ranks(2, timeout_rank, NULL, RUN_TIMEOUT_S), 0);
}

/* ---- bad arguments ------------------------------------------------------ */

static int expect_bad(shoal_comm_t comm, shoal_status_t s, const char *words, const char *what)
{
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "%s returned %s", what,
               shoal_status_string(s));
    RANK_CHECK(strstr(shoal_comm_last_error(comm), words), fail, "%s: the error says '%s'",
               what, shoal_comm_last_error(comm));
    return 0;
fail:
    return 1;
}

static int bad_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm = NULL;
    unsigned char wbuf[64], byte = 1;
    shoal_win_t win = NULL, other = NULL;
    shoal_request_t req;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    /* Queued calls run only when waited for (below). */
    RANK_CHECK(shoal_comm_set_progress(comm, SHOAL_PROGRESS_CALLER) == SHOAL_OK, fail,
               "set_progress");
    RANK_CHECK(shoal_win_create(wbuf, sizeof(wbuf) - (size_t)rank, comm, &win) == SHOAL_OK,
               fail, "create");
    if (expect_bad(comm, shoal_put_signal(&byte, 1, n, win, 0, comm), "outside", "peer n") ||
        expect_bad(comm, shoal_put_signal(&byte, 1, -1, win, 0, comm), "outside", "peer -1") ||
        expect_bad(comm, shoal_put_signal(NULL, 1, 0, win, 0, comm), "NULL", "NULL src") ||
        expect_bad(comm, shoal_put_signal(&byte, 1, 0, (shoal_win_t)&byte, 0, comm),
                   "not a live window", "foreign window") ||
        expect_bad(comm, shoal_put_signal(&byte, 2, n - 1, win, 64 - (size_t)(n - 1) - 1, comm),
                   "pass the end", "past the part") ||
        expect_bad(comm, shoal_put_signal(&byte, 1, 0, win, SIZE_MAX, comm), "pass the end",
                   "huge offset") ||
        expect_bad(comm, shoal_iput_signal(&byte, 1, 0, win, 0, comm, NULL), "req_p",
                   "NULL req_p") ||
        expect_bad(comm, shoal_signal(n, comm), "outside", "signal peer n") ||
        expect_bad(comm, shoal_isignal(0, comm, NULL), "req_p", "signal NULL req_p") ||
        expect_bad(comm, shoal_wait_signal(NULL, 1, comm), "waits is NULL", "NULL waits") ||
        expect_bad(comm, shoal_wait_signal(&(shoal_signal_wait_t){0, 1}, 0, comm), "nwaits is 0",
                   "no waits") ||
        expect_bad(comm, shoal_wait_signal(&(shoal_signal_wait_t){0, 0}, 1, comm), "0 signals",
                   "count 0") ||
        expect_bad(comm, shoal_wait_signal(&(shoal_signal_wait_t){n, 1}, 1, comm), "outside",
                   "wait peer n") ||
        expect_bad(comm, shoal_win_free((shoal_win_t)&byte, comm), "not a live window",
                   "free foreign"))
        goto fail;
    /* A bad part on the last rank fails the creation on every rank. */
    shoal_status_t s = shoal_win_create(rank == n - 1 ? NULL : wbuf, 8, comm, &other);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "a bad part on rank %d: %s", n - 1,
               shoal_status_string(s));
    char want[32];
    snprintf(want, sizeof(want), rank == n - 1 ? "buf is NULL" : "rank %d", n - 1);
    RANK_CHECK(strstr(shoal_comm_last_error(comm), want), fail, "the error says '%s'",
               shoal_comm_last_error(comm));
    /* Still usable: a put to every rank's last byte and the waits. */
    for (int q = 0; q < n; q++)
        RANK_CHECK(shoal_put_signal(&byte, 1, q, win, 63 - (size_t)q, comm) == SHOAL_OK, fail,
                   "put after the errors: %s", shoal_comm_last_error(comm));
    shoal_signal_wait_t w[8];
    for (int q = 0; q < n; q++)
        w[q] = (shoal_signal_wait_t){.peer = q, .count = 1};
    RANK_CHECK(shoal_iwait_signal(w, (size_t)n, comm, &req) == SHOAL_OK, fail, "iwait");
    RANK_CHECK(shoal_wait(&req) == SHOAL_OK, fail, "wait: %s", shoal_comm_last_error(comm));
    /* A put queued, then its window freed before it ran: refused when it
     * runs, the communicator still usable. */
    RANK_CHECK(shoal_iput_signal(&byte, 1, rank, win, 0, comm, &req) == SHOAL_OK, fail,
               "iput");
    RANK_CHECK(shoal_win_free(win, comm) == SHOAL_OK, fail, "free");
    RANK_CHECK(expect_bad(comm, shoal_wait(&req), "freed before the put ran", "stale put") == 0,
               fail, "stale put");
    RANK_CHECK(shoal_win_free(win, comm) == SHOAL_ERR_INVALID_ARG, fail, "freed twice");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_bad_args(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(3, bad_rank, NULL, RUN_TIMEOUT_S), 0);
}

/* A wait over more peers than one call holds (SHOAL_RMA_WAIT_INLINE):
 * 8 ranks, each waiting for every rank's two signals in one call, one
 * entry per signal. */
static int wide_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm = NULL;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    for (int q = 0; q < n; q++) {
        RANK_CHECK(shoal_signal(q, comm) == SHOAL_OK, fail, "signal");
        RANK_CHECK(shoal_signal(q, comm) == SHOAL_OK, fail, "signal");
    }
    shoal_signal_wait_t w[16];
    for (int q = 0; q < 2 * n; q++)
        w[q] = (shoal_signal_wait_t){.peer = (q * 3 + 1) % n, .count = 1};
    RANK_CHECK(shoal_wait_signal(w, (size_t)(2 * n), comm) == SHOAL_OK, fail, "wait: %s",
               shoal_comm_last_error(comm));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_wide_wait(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(harness_ranks_wanted(8) ? 8 : 5, wide_rank, NULL,
                                       RUN_TIMEOUT_S), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patterns_shm_private),
        cmocka_unit_test(test_patterns_shm_shared),
        cmocka_unit_test(test_patterns_tcp),
        cmocka_unit_test(test_patterns_hosts),
        cmocka_unit_test(test_ordering),
        cmocka_unit_test(test_full_fifo),
        cmocka_unit_test(test_lazy_tcp),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_wide_wait),
    };
    const char *filter = getenv("TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
