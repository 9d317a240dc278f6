/* Flight recorder: records go queued -> running -> done or failed; the ring
 * keeps the newest records and the running one; a running record lists the
 * bytes moved with each peer since it started, capped for thousands of
 * peers; the text is cut cleanly at any buffer size; depth 0 is a no-op;
 * queueing from several threads (one at a time, as under the executor's
 * lock) while another runs and a third formats is safe; the dump goes
 * to the log. Also the text of every kind of operation signature. */
#include "harness.h"

#include "algos/algo.h"
#include "core/comm.h"
#include "core/flight.h"
#include "base/log.h"
#include "core/sig.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A communicator with only what the recorder reads: rank, nranks and an
 * endpoint for each peer listed in with_ep (the others have none). */
static struct shoal_comm *fake_comm(int rank, int nranks, const int *with_ep, int nwith)
{
    struct shoal_comm *comm = calloc(1, sizeof(*comm));
    assert_non_null(comm);
    comm->team.rank = rank;
    comm->team.nranks = nranks;
    comm->team.eps = calloc((size_t)nranks, sizeof(*comm->team.eps));
    assert_non_null(comm->team.eps);
    for (int i = 0; i < nwith; i++) {
        shoal_ep_t *ep = calloc(1, sizeof(*ep));
        assert_non_null(ep);
        ep->peer = with_ep[i];
        comm->team.eps[with_ep[i]] = ep;
    }
    return comm;
}

/* Every peer but rank has an endpoint. */
static struct shoal_comm *fake_comm_full(int rank, int nranks)
{
    struct shoal_comm *comm = fake_comm(rank, nranks, NULL, 0);
    for (int p = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        comm->team.eps[p] = calloc(1, sizeof(shoal_ep_t));
        assert_non_null(comm->team.eps[p]);
        comm->team.eps[p]->peer = p;
    }
    return comm;
}

static void fake_comm_free(struct shoal_comm *comm)
{
    for (int p = 0; p < comm->team.nranks; p++)
        free(comm->team.eps[p]);
    free(comm->team.eps);
    free(comm);
}

static void set_bytes(struct shoal_comm *comm, int peer, unsigned long long tx,
                      unsigned long long rx)
{
    atomic_store_explicit(&comm->team.eps[peer]->tx_bytes, tx, memory_order_relaxed);
    atomic_store_explicit(&comm->team.eps[peer]->rx_bytes, rx, memory_order_relaxed);
}

#define TEXT_MAX 65536

/* The recorder's text, split into lines (the text is kept in a static
 * buffer, so one call's lines at a time). */
typedef struct {
    char *line[256];
    int n;
} lines_t;

static lines_t format_lines(shoal_flight_t *f)
{
    static char text[TEXT_MAX];
    size_t len = shoal_flight_format(f, text, sizeof(text));
    assert_true(len < sizeof(text));
    assert_int_equal(strlen(text), len);
    lines_t l = {.n = 0};
    char *save = NULL;
    for (char *s = strtok_r(text, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
        assert_true(l.n < 256);
        l.line[l.n++] = s;
    }
    return l;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

#define assert_has(hay, needle)                                               \
    do {                                                                      \
        if (!strstr((hay), (needle)))                                         \
            fail_msg("\"%s\" lacks \"%s\"", (hay), (needle));                 \
    } while (0)
#define assert_lacks(hay, needle)                                             \
    do {                                                                      \
        if (strstr((hay), (needle)))                                          \
            fail_msg("\"%s\" has \"%s\"", (hay), (needle));                   \
    } while (0)

static const shoal_sig_t sig_allreduce = {.seq = 11, .count = 100, .kind = SHOAL_COLL_ALLREDUCE,
                                          .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM, .root = -1};

static void test_states(void **state)
{
    (void)state;
    int peers[] = {1, 2, 3};
    struct shoal_comm *comm = fake_comm(0, 4, peers, 3);
    shoal_flight_t *f;
    assert_int_equal(shoal_flight_create(comm, 8, &f), SHOAL_OK);
    assert_non_null(f);

    lines_t l = format_lines(f);
    assert_int_equal(l.n, 0);

    assert_int_equal(shoal_flight_queue(f, "shoal_allreduce", 400), 1);
    assert_int_equal(shoal_flight_queue(f, "shoal_iallreduce", 400), 2);
    assert_int_equal(shoal_flight_queue(f, "shoal_ibroadcast", 2048), 3);
    assert_int_equal(shoal_flight_queue(f, NULL, 0), 4);
    l = format_lines(f);
    assert_int_equal(l.n, 4);
    assert_true(starts_with(l.line[0], "#1 shoal_allreduce of 400 B: queued for "));
    assert_true(starts_with(l.line[1], "#2 shoal_iallreduce of 400 B: queued for "));
    assert_true(starts_with(l.line[2], "#3 shoal_ibroadcast of 2.0 KiB: queued for "));
    assert_true(starts_with(l.line[3], "#4 ? of 0 B: queued for "));

    shoal_flight_start(f, 1, "ring", &sig_allreduce);
    l = format_lines(f);
    assert_true(starts_with(l.line[0], "#1 shoal_allreduce of 400 B: allreduce #11 of 100 x "
                                       "float sum, ring, running for "));
    assert_has(l.line[1], "queued for");

    shoal_flight_finish(f, 1, SHOAL_OK);
    shoal_sig_t sig2 = sig_allreduce;
    sig2.seq = 12;
    shoal_flight_start(f, 2, "tree", &sig2);
    shoal_flight_finish(f, 2, SHOAL_ERR_TIMEOUT);
    /* Failed by an abort before it ran. */
    shoal_flight_finish(f, 3, SHOAL_ERR_ABORTED);
    /* Started without an algorithm or a signature (a group of sends). */
    shoal_flight_start(f, 4, NULL, NULL);
    /* Numbers never handed out, and 0, change nothing. */
    shoal_flight_start(f, 0, "ring", &sig_allreduce);
    shoal_flight_finish(f, 0, SHOAL_OK);
    shoal_flight_finish(f, 99, SHOAL_OK);

    l = format_lines(f);
    assert_int_equal(l.n, 4);
    assert_true(starts_with(l.line[0], "#1 shoal_allreduce of 400 B: allreduce #11 of 100 x "
                                       "float sum, ring, done in "));
    assert_has(l.line[0], " ms ago");
    assert_true(starts_with(l.line[1], "#2 shoal_iallreduce of 400 B: allreduce #12 of 100 x "
                                       "float sum, tree, failed (timed out) after "));
    assert_true(starts_with(l.line[2], "#3 shoal_ibroadcast of 2.0 KiB: failed (communicator "
                                       "aborted) while queued for "));
    assert_true(starts_with(l.line[3], "#4 ? of 0 B: running for "));
    shoal_flight_finish(f, 4, SHOAL_OK);
    l = format_lines(f);
    assert_true(starts_with(l.line[3], "#4 ? of 0 B: done in "));

    shoal_flight_destroy(f);
    fake_comm_free(comm);
}

static void test_ring_wraps(void **state)
{
    (void)state;
    struct shoal_comm *comm = fake_comm_full(0, 2);
    shoal_flight_t *f;
    assert_int_equal(shoal_flight_create(comm, 4, &f), SHOAL_OK);
    for (uint64_t i = 1; i <= 10; i++) {
        assert_int_equal(shoal_flight_queue(f, "shoal_allreduce", 4), i);
        shoal_flight_start(f, i, "ring", &sig_allreduce);
        shoal_flight_finish(f, i, SHOAL_OK);
    }
    lines_t l = format_lines(f);
    assert_int_equal(l.n, 4);
    for (int i = 0; i < 4; i++) {
        char want[32];
        snprintf(want, sizeof(want), "#%d shoal_allreduce", 7 + i);
        assert_true(starts_with(l.line[i], want));
        assert_has(l.line[i], "done in");
    }
    shoal_flight_destroy(f);
    fake_comm_free(comm);
}

/* More operations queued than records: the newest queued are left out and
 * one that starts takes the spare record, displacing an earlier one there
 * but never a queued record. */
static void test_ring_full_of_queued(void **state)
{
    (void)state;
    struct shoal_comm *comm = fake_comm_full(0, 2);
    shoal_flight_t *f;
    assert_int_equal(shoal_flight_create(comm, 2, &f), SHOAL_OK);
    for (uint64_t i = 1; i <= 4; i++)
        assert_int_equal(shoal_flight_queue(f, "shoal_iallgather", 8), i);
    lines_t l = format_lines(f);
    assert_int_equal(l.n, 2);
    assert_true(starts_with(l.line[0], "#1 "));
    assert_true(starts_with(l.line[1], "#2 "));

    shoal_flight_start(f, 1, "ring", &sig_allreduce);
    shoal_flight_finish(f, 1, SHOAL_OK);
    assert_int_equal(shoal_flight_queue(f, "shoal_iallgather", 8), 5);  /* replaces #1 */
    shoal_flight_start(f, 2, "ring", &sig_allreduce);
    shoal_flight_finish(f, 2, SHOAL_OK);
    assert_int_equal(shoal_flight_queue(f, "shoal_iallgather", 8), 6);  /* replaces #2 */
    l = format_lines(f);
    assert_int_equal(l.n, 2);
    assert_true(starts_with(l.line[0], "#5 shoal_iallgather of 8 B: queued"));
    assert_true(starts_with(l.line[1], "#6 shoal_iallgather of 8 B: queued"));

    /* #3 was left out: it runs in the spare, beside the queued ones. */
    shoal_flight_start(f, 3, "ring", &sig_allreduce);
    l = format_lines(f);
    assert_int_equal(l.n, 3);
    assert_true(starts_with(l.line[0], "#3 ?: allreduce #11 of 100 x float sum, ring, running"));
    assert_true(starts_with(l.line[1], "#5 shoal_iallgather of 8 B: queued"));
    assert_true(starts_with(l.line[2], "#6 shoal_iallgather of 8 B: queued"));
    shoal_flight_finish(f, 3, SHOAL_ERR_PEER);
    l = format_lines(f);
    assert_int_equal(l.n, 3);
    assert_has(l.line[0], "failed (");
    /* #4 displaces the finished #3 from the spare. */
    shoal_flight_start(f, 4, "ring", &sig_allreduce);
    l = format_lines(f);
    assert_int_equal(l.n, 3);
    assert_true(starts_with(l.line[0], "#4 ?: allreduce"));
    assert_has(l.line[0], "running");
    assert_true(starts_with(l.line[1], "#5 "));
    assert_true(starts_with(l.line[2], "#6 "));
    /* Finishing one that was displaced changes nothing. */
    shoal_flight_finish(f, 3, SHOAL_OK);
    l = format_lines(f);
    assert_int_equal(l.n, 3);
    assert_has(l.line[0], "running");
    assert_has(l.line[1], "queued");
    assert_has(l.line[2], "queued");
    /* A queued record that fails (an abort) is kept in its place. */
    shoal_flight_finish(f, 6, SHOAL_ERR_ABORTED);
    l = format_lines(f);
    assert_true(starts_with(l.line[2], "#6 shoal_iallgather of 8 B: failed ("));
    assert_has(l.line[2], "while queued");
    shoal_flight_destroy(f);
    fake_comm_free(comm);
}

static void test_running_peers(void **state)
{
    (void)state;
    /* Rank 0 of 4 with endpoints to 1 and 3 only. */
    int peers[] = {1, 3};
    struct shoal_comm *comm = fake_comm(0, 4, peers, 2);
    set_bytes(comm, 1, 100, 50);
    set_bytes(comm, 3, 7, 9);
    shoal_flight_t *f;
    assert_int_equal(shoal_flight_create(comm, 4, &f), SHOAL_OK);
    uint64_t id = shoal_flight_queue(f, "shoal_allreduce", 4 << 20);
    shoal_flight_start(f, id, "ring", &sig_allreduce);
    lines_t l = format_lines(f);
    assert_has(l.line[0], "4.0 MiB: allreduce");
    assert_has(l.line[0], "; to r1 0 B, from r1 0 B; to r3 0 B, from r3 0 B");

    set_bytes(comm, 1, 100 + (4 << 20), 50 + (2 << 20));
    l = format_lines(f);
    assert_int_equal(l.n, 1);
    assert_has(l.line[0], "running for");
    assert_has(l.line[0], "; to r1 4.0 MiB, from r1 2.0 MiB; to r3 0 B, from r3 0 B");
    assert_lacks(l.line[0], "r0");
    assert_lacks(l.line[0], "r2");
    assert_lacks(l.line[0], "more");

    set_bytes(comm, 3, 7 + 1536, 9 + 1023);
    l = format_lines(f);
    assert_has(l.line[0], "; to r3 1.5 KiB, from r3 1023 B");

    /* Once finished, the peers are no longer listed. */
    shoal_flight_finish(f, id, SHOAL_OK);
    l = format_lines(f);
    assert_has(l.line[0], "done in");
    assert_lacks(l.line[0], "r1");

    /* The next operation counts from its own start. */
    id = shoal_flight_queue(f, "shoal_allreduce", 4);
    shoal_flight_start(f, id, "ring", &sig_allreduce);
    set_bytes(comm, 1, 100 + (4 << 20) + 4, 50 + (2 << 20));
    l = format_lines(f);
    assert_int_equal(l.n, 2);
    assert_has(l.line[1], "; to r1 4 B, from r1 0 B; to r3 0 B, from r3 0 B");
    shoal_flight_destroy(f);
    fake_comm_free(comm);
}

/* Thousands of peers: the list stops at SHOAL_FLIGHT_PEERS_MAX with the
 * silent peers first, a few that sent, and the count of the rest. */
static void test_many_peers(void **state)
{
    (void)state;
    struct shoal_comm *comm = fake_comm_full(5, 3000);
    shoal_flight_t *f;
    assert_int_equal(shoal_flight_create(comm, 64, &f), SHOAL_OK);
    uint64_t id = shoal_flight_queue(f, "shoal_alltoall", 1 << 20);
    shoal_flight_start(f, id, "pairwise", &sig_allreduce);
    /* Sent to 7 and 8, nothing back; 1..4 and 2000..2009 sent something. */
    set_bytes(comm, 7, 64, 0);
    set_bytes(comm, 8, 64, 0);
    for (int p = 1; p <= 4; p++)
        set_bytes(comm, p, 32, 32);
    for (int p = 2000; p < 2010; p++)
        set_bytes(comm, p, 0, 16);
    lines_t l = format_lines(f);
    assert_int_equal(l.n, 1);
    const char *want = "running for ";
    const char *s = strstr(l.line[0], want);
    assert_non_null(s);
    s = strchr(s, ';');
    assert_non_null(s);
    assert_string_equal(s, "; to r7 64 B, from r7 0 B; to r8 64 B, from r8 0 B"
                           "; to r0 0 B, from r0 0 B; to r6 0 B, from r6 0 B"
                           "; to r9 0 B, from r9 0 B; to r10 0 B, from r10 0 B"
                           "; to r11 0 B, from r11 0 B; to r12 0 B, from r12 0 B"
                           "; to r13 0 B, from r13 0 B; to r14 0 B, from r14 0 B"
                           "; to r15 0 B, from r15 0 B; to r16 0 B, from r16 0 B"
                           "; to r1 32 B, from r1 32 B; to r2 32 B, from r2 32 B"
                           "; to r3 32 B, from r3 32 B; to r4 32 B, from r4 32 B"
                           "; ... and 2983 more, 2973 of them with 0 B received");
    shoal_flight_destroy(f);
    fake_comm_free(comm);

    /* The longest record fits in one log line (1 KiB with the host, pid and
     * rank before it): four-digit ranks, four-digit byte counts in every
     * unit, a long call and signature. */
    comm = fake_comm_full(9999, 10000);
    assert_int_equal(shoal_flight_create(comm, 1, &f), SHOAL_OK);
    id = shoal_flight_queue(f, "shoal_reduce_scatter", (1ull << 30) - 1);
    shoal_sig_t sig = {.seq = UINT64_MAX - 1, .count = UINT64_MAX - 1,
                       .kind = SHOAL_COLL_REDUCE_SCATTER, .dtype = SHOAL_BFLOAT16,
                       .op = SHOAL_PROD, .root = 9998};
    shoal_flight_start(f, id, "ring_reduce_scatter", &sig);
    for (int p = 0; p < 9999; p++)
        set_bytes(comm, p, p >= 9000 ? (1ull << 30) - 1 : 0, p >= 9990 ? (1ull << 30) - 1 : 0);
    l = format_lines(f);
    assert_int_equal(l.n, 1);
    assert_has(l.line[0], "to r9000 1024.0 MiB, from r9000 0 B");
    assert_has(l.line[0], "to r9990 1024.0 MiB, from r9990 1024.0 MiB");
    assert_has(l.line[0], "... and 9983 more, 9978 of them with 0 B received");
    assert_true(strlen(l.line[0]) <= 900);
    shoal_flight_destroy(f);
    fake_comm_free(comm);
}

/* Every run of digits and dots as one '#': the ages change between calls. */
static void squash_numbers(const char *in, char *out)
{
    while (*in) {
        if ((*in >= '0' && *in <= '9') || *in == '.') {
            while ((*in >= '0' && *in <= '9') || *in == '.')
                in++;
            *out++ = '#';
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

static void test_truncation(void **state)
{
    (void)state;
    struct shoal_comm *comm = fake_comm_full(0, 3);
    shoal_flight_t *f;
    assert_int_equal(shoal_flight_create(comm, 4, &f), SHOAL_OK);
    for (int i = 0; i < 3; i++) {
        uint64_t id = shoal_flight_queue(f, "shoal_allreduce", 400);
        shoal_flight_start(f, id, "ring", &sig_allreduce);
        shoal_flight_finish(f, id, i == 1 ? SHOAL_ERR_TIMEOUT : SHOAL_OK);
    }
    uint64_t id = shoal_flight_queue(f, "shoal_allreduce", 400);
    shoal_flight_start(f, id, "ring", &sig_allreduce);
    shoal_flight_queue(f, "shoal_barrier", 0);

    /* cap 0: nothing written, buf may be NULL, the length still told. */
    size_t len = shoal_flight_format(f, NULL, 0);
    assert_true(len > 100);
    static char full[TEXT_MAX], squashed_full[TEXT_MAX], part[TEXT_MAX], squashed[TEXT_MAX];
    size_t full_len = shoal_flight_format(f, full, sizeof(full));
    assert_int_equal(strlen(full), full_len);
    squash_numbers(full, squashed_full);

    for (size_t cap = 1; cap <= full_len + 2; cap++) {
        memset(part, 0x5a, cap + 8);
        size_t n = shoal_flight_format(f, part, cap);
        size_t kept = n < cap ? n : cap - 1;
        assert_int_equal(strlen(part), kept);
        for (size_t i = cap; i < cap + 8; i++)
            assert_int_equal((unsigned char)part[i], 0x5a);
        /* A cut text is the start of the whole one. */
        squash_numbers(part, squashed);
        assert_int_equal(strncmp(squashed, squashed_full, strlen(squashed)), 0);
    }
    shoal_flight_destroy(f);
    fake_comm_free(comm);
}

static void test_depth_zero(void **state)
{
    (void)state;
    struct shoal_comm *comm = fake_comm_full(0, 2);
    shoal_flight_t *f = (shoal_flight_t *)comm;  /* overwritten on success */
    assert_int_equal(shoal_flight_create(comm, 0, &f), SHOAL_OK);
    assert_null(f);
    assert_int_equal(shoal_flight_queue(f, "shoal_allreduce", 4), 0);
    shoal_flight_start(f, 0, "ring", &sig_allreduce);
    shoal_flight_start(f, 1, "ring", &sig_allreduce);
    shoal_flight_finish(f, 1, SHOAL_ERR_TIMEOUT);
    char buf[8] = "junk";
    assert_int_equal(shoal_flight_format(f, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
    assert_int_equal(shoal_flight_format(f, NULL, 0), 0);
    shoal_flight_dump(f, "timeout");
    shoal_flight_destroy(f);

    /* No comm is needed for depth 0; for a real recorder it is. */
    assert_int_equal(shoal_flight_create(NULL, 0, &f), SHOAL_OK);
    assert_null(f);
    f = (shoal_flight_t *)comm;
    assert_int_equal(shoal_flight_create(NULL, 4, &f), SHOAL_ERR_INVALID_ARG);
    assert_ptr_equal(f, (shoal_flight_t *)comm);
    assert_int_equal(shoal_flight_create(comm, 4, NULL), SHOAL_ERR_INVALID_ARG);
    fake_comm_free(comm);
}

#define QUEUERS 4
#define PER_QUEUER 1500
#define TOTAL (QUEUERS * PER_QUEUER)

typedef struct {
    shoal_flight_t *f;
    struct shoal_comm *comm;
    pthread_mutex_t order;           /* queue and finish: the executor's lock */
    atomic_uint queued;              /* queue calls returned */
    atomic_uchar seen[TOTAL + 1];    /* numbers handed out */
    atomic_int bad;
} threads_t;

static void *queuer(void *arg)
{
    threads_t *t = arg;
    for (int i = 0; i < PER_QUEUER; i++) {
        pthread_mutex_lock(&t->order);
        uint64_t id = shoal_flight_queue(t->f, "shoal_iallreduce", 64);
        pthread_mutex_unlock(&t->order);
        if (id == 0 || id > TOTAL ||
            atomic_fetch_add_explicit(&t->seen[id], 1, memory_order_relaxed) != 0)
            atomic_store(&t->bad, 1);
        atomic_fetch_add_explicit(&t->queued, 1, memory_order_release);
    }
    return NULL;
}

/* The executor: runs the operations in order as they are queued, moving
 * bytes like a transport and formatting now and then, as a dump would. */
static void *executor(void *arg)
{
    threads_t *t = arg;
    static char text[TEXT_MAX];
    for (uint64_t id = 1; id <= TOTAL; id++) {
        /* Once id calls have returned, number id has been handed out. */
        while (atomic_load_explicit(&t->queued, memory_order_acquire) < id)
            sched_yield();
        shoal_sig_t sig = sig_allreduce;
        sig.seq = id;
        shoal_flight_start(t->f, id, "ring", &sig);
        atomic_fetch_add_explicit(&t->comm->team.eps[1]->tx_bytes, 64, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->comm->team.eps[1]->rx_bytes, 64, memory_order_relaxed);
        if (id % 97 == 0 && shoal_flight_format(t->f, text, sizeof(text)) >= sizeof(text))
            atomic_store(&t->bad, 1);
        pthread_mutex_lock(&t->order);
        shoal_flight_finish(t->f, id, SHOAL_OK);
        pthread_mutex_unlock(&t->order);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    struct shoal_comm *comm = fake_comm_full(0, 3);
    threads_t *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    t->comm = comm;
    pthread_mutex_init(&t->order, NULL);
    assert_int_equal(shoal_flight_create(comm, 16, &t->f), SHOAL_OK);
    pthread_t q[QUEUERS], e;
    assert_int_equal(pthread_create(&e, NULL, executor, t), 0);
    for (int i = 0; i < QUEUERS; i++)
        assert_int_equal(pthread_create(&q[i], NULL, queuer, t), 0);
    /* This thread formats too, while the others queue and run. */
    static char text[TEXT_MAX];
    for (int i = 0; i < 50; i++)
        assert_true(shoal_flight_format(t->f, text, sizeof(text)) < sizeof(text));
    for (int i = 0; i < QUEUERS; i++)
        assert_int_equal(pthread_join(q[i], NULL), 0);
    assert_int_equal(pthread_join(e, NULL), 0);
    assert_int_equal(atomic_load(&t->bad), 0);
    for (int id = 1; id <= TOTAL; id++)
        assert_int_equal(atomic_load(&t->seen[id]), 1);

    /* Every record kept is done, in order, the last one included. */
    lines_t l = format_lines(t->f);
    assert_true(l.n >= 1 && l.n <= 17); /* 16 and the spare */
    uint64_t prev = 0;
    for (int i = 0; i < l.n; i++) {
        unsigned long long id;
        assert_int_equal(sscanf(l.line[i], "#%llu ", &id), 1);
        assert_true(id > prev);
        prev = id;
        assert_has(l.line[i], "done in");
    }
    assert_int_equal(prev, TOTAL);
    shoal_flight_destroy(t->f);
    free(t);
    fake_comm_free(comm);
}

static char *read_all(const char *path)
{
    static char buf[TEXT_MAX];
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

/* In a child, whose log goes to a file: the dump, then nothing with error
 * logging off. */
static int dump_child(const char *path)
{
    harness_setenv("SHOAL_DEBUG_FILE", path);
    harness_setenv("SHOAL_DEBUG", "warn");
    harness_setenv("SHOAL_DEBUG_SUBSYS", "INIT");
    struct shoal_comm *comm = calloc(1, sizeof(*comm));
    shoal_ep_t *eps[4] = {NULL, calloc(1, sizeof(shoal_ep_t)), NULL,
                          calloc(1, sizeof(shoal_ep_t))};
    if (!comm || !eps[1] || !eps[3])
        return 2;
    comm->team.rank = 2;
    comm->team.nranks = 4;
    comm->team.eps = eps;
    shoal_flight_t *f;
    if (shoal_flight_create(comm, 3, &f) != SHOAL_OK)
        return 3;
    for (uint64_t i = 1; i <= 4; i++) {
        uint64_t id = shoal_flight_queue(f, "shoal_allreduce", 400);
        shoal_flight_start(f, id, "ring", &sig_allreduce);
        shoal_flight_finish(f, id, SHOAL_OK);
    }
    uint64_t id = shoal_flight_queue(f, "shoal_allreduce", 400);
    shoal_flight_start(f, id, "ring", &sig_allreduce);
    atomic_store(&eps[1]->tx_bytes, 4u << 20);
    atomic_store(&eps[1]->rx_bytes, 2u << 20);
    shoal_flight_dump(f, "timeout");
    harness_setenv("SHOAL_DEBUG", "none");
    shoal_flight_dump(f, "hidden");
    shoal_flight_destroy(f);
    free(eps[1]);
    free(eps[3]);
    free(comm);
    return 0;
}

static void test_dump(void **state)
{
    (void)state;
    char path[] = "/tmp/shoal-flight-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    fflush(NULL);
    int pid = fork();
    if (pid == 0)
        _exit(dump_child(path));
    assert_int_equal(harness_wait(pid, 30), 0);
    char *text = read_all(path);
    unlink(path);
    assert_non_null(text);
    assert_has(text, "ERROR rank 2 flight recorder (timeout): last 3 of 5 operations\n");
    assert_has(text, "ERROR rank 2 #3 shoal_allreduce of 400 B: allreduce #11 of 100 x float "
                     "sum, ring, done in ");
    assert_has(text, "ERROR rank 2 #4 shoal_allreduce");
    assert_has(text, "; to r1 4.0 MiB, from r1 2.0 MiB; to r3 0 B, from r3 0 B\n");
    assert_lacks(text, "#2 ");
    assert_lacks(text, "hidden");
    /* One line per record, after the heading. */
    int nlines = 0;
    for (const char *s = text; *s; s++)
        nlines += *s == '\n';
    assert_int_equal(nlines, 4);
}

static void check_sig(shoal_sig_t sig, const char *want)
{
    char buf[SHOAL_SIG_STR_MAX];
    memset(buf, 'x', sizeof(buf));
    assert_ptr_equal(shoal_sig_format(&sig, buf, sizeof(buf)), buf);
    assert_string_equal(buf, want);
}

static void test_sig_format(void **state)
{
    (void)state;
    typedef shoal_sig_t S;
    const uint64_t any = SHOAL_SIG_COUNT_ANY;
    check_sig((S){12, 100, SHOAL_COLL_ALLREDUCE, SHOAL_FLOAT32, SHOAL_SUM, 0, -1},
              "allreduce #12 of 100 x float sum");
    check_sig((S){1, 8, SHOAL_COLL_REDUCE_SCATTER, SHOAL_BFLOAT16, SHOAL_MAX, 0, -1},
              "reducescatter #1 of 8 x bfloat16 max");
    check_sig((S){2, 8, SHOAL_COLL_ALLGATHER, SHOAL_INT32, SHOAL_SUM, 0, -1},
              "allgather #2 of 8 x int32");
    check_sig((S){3, 8, SHOAL_COLL_BROADCAST, SHOAL_INT8, SHOAL_SUM, 0, 3},
              "broadcast #3 of 8 x int8 root 3");
    check_sig((S){4, 8, SHOAL_COLL_REDUCE, SHOAL_FLOAT64, SHOAL_PROD, 0, 0},
              "reduce #4 of 8 x double prod root 0");
    check_sig((S){5, 8, SHOAL_COLL_ALLTOALL, SHOAL_UINT8, SHOAL_SUM, 0, -1},
              "alltoall #5 of 8 x uint8");
    check_sig((S){6, any, SHOAL_COLL_ALLTOALLV, SHOAL_FLOAT16, SHOAL_SUM, 0, -1},
              "alltoallv #6 of any count x half");
    check_sig((S){7, 8, SHOAL_COLL_GATHER, SHOAL_INT64, SHOAL_SUM, 0, 1},
              "gather #7 of 8 x int64 root 1");
    check_sig((S){8, 8, SHOAL_COLL_SCATTER, SHOAL_UINT64, SHOAL_SUM, 0, 2},
              "scatter #8 of 8 x uint64 root 2");
    check_sig((S){0, 8, SHOAL_COLL_SEND, SHOAL_FLOAT32, SHOAL_SUM, 0, 2},
              "send of 8 x float peer 2");
    check_sig((S){0, 8, SHOAL_COLL_RECV, SHOAL_FP8_E4M3, SHOAL_SUM, 0, 1},
              "recv of 8 x f8e4m3 peer 1");
    check_sig((S){0, any, SHOAL_SIG_P2P, SHOAL_FLOAT32, SHOAL_SUM, 0, -1},
              "send/recv of any count x float");
    check_sig((S){0, 10, SHOAL_SIG_P2P, SHOAL_UINT32, SHOAL_SUM, 0, 3},
              "send/recv of 10 x uint32 peer 3");
    check_sig((S){4, 10, SHOAL_SIG_P2P, SHOAL_UINT32, SHOAL_SUM, 0, -1},
              "send/recv #4 of 10 x uint32");
    check_sig((S){9, 0, SHOAL_SIG_BARRIER, 0, 0, 0, -1}, "barrier #9");
    check_sig((S){UINT64_MAX, any - 1, SHOAL_COLL_ALLREDUCE, SHOAL_FP8_E5M2, SHOAL_AVG, 0, -1},
              "allreduce #18446744073709551615 of 18446744073709551614 x f8e5m2 avg");
    /* Values no rank should send still read as something. */
    check_sig((S){1, 8, 0x80, SHOAL_DTYPE_COUNT, SHOAL_OP_COUNT, 0, -1},
              "kind 128 #1 of 8 x ?");
    check_sig((S){1, 8, SHOAL_COLL_ALLREDUCE, 200, 200, 0, -1}, "allreduce #1 of 8 x ? ?");

    /* Every collective starts with its name. */
    for (unsigned k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        char buf[SHOAL_SIG_STR_MAX];
        S sig = {.seq = 1, .count = 1, .kind = (uint8_t)k, .root = -1};
        shoal_sig_format(&sig, buf, sizeof(buf));
        assert_true(starts_with(buf, shoal_coll_kind_name((shoal_coll_kind_t)k)));
    }

    /* Small buffers: cut and terminated; cap 0 writes nothing. */
    char buf[16];
    memset(buf, 'x', sizeof(buf));
    assert_ptr_equal(shoal_sig_format(&sig_allreduce, buf, 8), buf);
    assert_string_equal(buf, "allredu");
    assert_int_equal(buf[8], 'x');
    shoal_sig_format(&sig_allreduce, buf, 1);
    assert_string_equal(buf, "");
    memset(buf, 'x', sizeof(buf));
    shoal_sig_format(&sig_allreduce, buf, 0);
    assert_int_equal(buf[0], 'x');
    shoal_sig_t b = {.seq = 123456, .kind = SHOAL_SIG_BARRIER, .root = -1};
    shoal_sig_format(&b, buf, 12);
    assert_string_equal(buf, "barrier #12");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states),
        cmocka_unit_test(test_ring_wraps),
        cmocka_unit_test(test_ring_full_of_queued),
        cmocka_unit_test(test_running_peers),
        cmocka_unit_test(test_many_peers),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_depth_zero),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_sig_format),
    };
    return cmocka_run_group_tests_name("flight", tests, NULL, NULL);
}
