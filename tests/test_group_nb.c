/* Groups, non-blocking operations and pre-multiplied sums, over forked
 * ranks on shared memory and tcp:
 * - a group mixing many all-reduces (fused), other collectives, sends and
 *   receives in every order (including messages to oneself), checked
 *   against the scalar reference;
 * - many outstanding non-blocking operations completing in issue order,
 *   with the progress thread and with caller-driven progress;
 * - non-blocking sends and receives posted in opposite orders;
 * - pre-multiplied sums for every dtype on all-reduce, reduce-scatter,
 *   reduce;
 * - several threads per rank: independent communicators at once, and
 *   requests issued on one thread and completed on another;
 * - a call queued on one thread behind a blocking call that runs on
 *   another without the queue's lock is woken when that call ends;
 * - shoal_comm_set_progress: caller-driven progress starts no thread and
 *   still completes every operation; the mode is refused once the progress
 *   thread runs, and the communicator keeps working. */
#include "harness.h"

#include "algos/reduce.h"
#include "base/dtype.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_CHUNK 4096

static void set_transport(const char *transport, const char *progress)
{
    harness_use_transport(transport, TEST_CHUNK);
    harness_setenv("SHOAL_PROGRESS", progress);
}

/* Value element i of a message from rank `from` to rank `to`, call k. */
static int32_t p2p_value(int from, int to, int k, size_t i)
{
    return (int32_t)harness_mix((uint32_t)(from * 1000003 + to * 1009 + k * 31) + (uint32_t)i);
}

static int check_exact(const void *got, shoal_dtype_t dt, shoal_op_t op, size_t count,
                       int nranks, const char *what, int k)
{
    size_t es = shoal_dtype_bytes(dt);
    unsigned char *want = malloc(count * es + 1), *tmp = malloc(count * es + 1);
    harness_expected(want, tmp, count, nranks, dt, op);
    size_t bad = count;
    for (size_t i = 0; i < count && bad == count; i++) {
        if (memcmp((const char *)got + i * es, want + i * es, es))
            bad = i;
    }
    free(want);
    free(tmp);
    RANK_CHECK(bad == count, fail, "%s %d (%s %s, count %zu): element %zu differs", what, k,
               shoal_dtype_name(dt), shoal_op_name(op), count, bad);
    return 0;
fail:
    return 1;
}

#define GROUP_ARS 60
#define P2P_COUNT (3 * TEST_CHUNK / 4 + 7) /* int32: several pieces */

/* One group: GROUP_ARS all-reduces (counts 0..., dtypes and ops in runs so
 * some fuse and some do not), an all-gather in the middle, and sends and
 * receives to both neighbours and to oneself, receives posted first. */
static int rank_group(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    static const size_t ar_counts[] = {1, 0, 17, 300, 2 * TEST_CHUNK + 3};
    void *in[GROUP_ARS], *out[GROUP_ARS];
    shoal_dtype_t dts[GROUP_ARS];
    shoal_op_t ops[GROUP_ARS];
    size_t cnt[GROUP_ARS];
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    int32_t *sbuf[3], *rbuf[3];
    for (int d = 0; d < 3; d++) {
        sbuf[d] = malloc(P2P_COUNT * sizeof(int32_t));
        rbuf[d] = calloc(P2P_COUNT, sizeof(int32_t));
    }
    int peers_to[3] = {next, prev, rank}, peers_from[3] = {prev, next, rank};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < P2P_COUNT; i++)
            sbuf[d][i] = p2p_value(rank, peers_to[d], d, i);
    size_t ag_count = 33;
    int16_t *ag_in = malloc(ag_count * 2), *ag_out = malloc(ag_count * 2 * (size_t)nranks);
    for (size_t i = 0; i < ag_count; i++)
        ag_in[i] = (int16_t)(rank * 100 + (int)i);

    for (int round = 0; round < 2; round++) {
        RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
        for (int d = 0; d < 3; d++)
            RANK_CHECK(shoal_recv(rbuf[d], P2P_COUNT, SHOAL_INT32, peers_from[d], comm) ==
                           SHOAL_OK, fail, "recv %d: %s", d, shoal_comm_last_error(comm));
        for (int k = 0; k < GROUP_ARS; k++) {
            /* Runs of 10 share a dtype and op and fuse. */
            dts[k] = (shoal_dtype_t)((k / 10 * 5) % SHOAL_DTYPE_COUNT);
            ops[k] = (shoal_op_t)((k / 10) % SHOAL_OP_COUNT);
            cnt[k] = ar_counts[(size_t)k % 5];
            size_t es = shoal_dtype_bytes(dts[k]);
            in[k] = malloc(cnt[k] * es + 1);
            out[k] = malloc(cnt[k] * es + 1);
            harness_fill_exact(in[k], cnt[k], rank, dts[k], ops[k]);
            /* Every other one in place. */
            void *dst = k % 2 ? in[k] : out[k];
            RANK_CHECK(shoal_allreduce(in[k], dst, cnt[k], dts[k], ops[k], comm) == SHOAL_OK, fail,
                       "allreduce %d", k);
            if (k == GROUP_ARS / 2)
                RANK_CHECK(shoal_allgather(ag_in, ag_out, ag_count, SHOAL_BFLOAT16, comm) ==
                               SHOAL_OK,
                           fail, "allgather");
        }
        for (int d = 0; d < 3; d++)
            RANK_CHECK(shoal_send(sbuf[d], P2P_COUNT, SHOAL_INT32, peers_to[d], comm) == SHOAL_OK,
                       fail, "send %d: %s", d, shoal_comm_last_error(comm));
        shoal_status_t s = shoal_group_end();
        RANK_CHECK(s == SHOAL_OK, fail, "group end: %s (%s)", shoal_status_string(s),
                   shoal_comm_last_error(comm));
        for (int k = 0; k < GROUP_ARS; k++) {
            if (check_exact(k % 2 ? in[k] : out[k], dts[k], ops[k], cnt[k], nranks,
                            "grouped allreduce", k))
                return 1;
            free(in[k]);
            free(out[k]);
        }
        for (int r = 0; r < nranks; r++)
            for (size_t i = 0; i < ag_count; i++)
                RANK_CHECK(ag_out[(size_t)r * ag_count + i] == (int16_t)(r * 100 + (int)i), fail,
                           "allgather block %d element %zu", r, i);
        for (int d = 0; d < 3; d++)
            for (size_t i = 0; i < P2P_COUNT; i++)
                RANK_CHECK(rbuf[d][i] == p2p_value(peers_from[d], rank, d, i), fail,
                           "recv %d from %d element %zu", d, peers_from[d], i);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

#define NB_OPS 120

/* NB_OPS non-blocking operations outstanding at once on one communicator:
 * all-reduces that each depend on the one before (in place on the same
 * buffer, so only issue order gives the right result), with other
 * collectives between them; then tested and waited in reverse order. */
static int rank_nb(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 2 * TEST_CHUNK + 5;
    int64_t *acc = malloc(count * sizeof(*acc));
    for (size_t i = 0; i < count; i++)
        acc[i] = (int64_t)i + rank;
    int32_t *bc = malloc(NB_OPS * sizeof(*bc));
    shoal_request_t req[2 * NB_OPS];
    size_t nreq = 0;
    for (int k = 0; k < NB_OPS; k++) {
        /* acc = sum over ranks of acc: after k rounds, n^k * (i + mean). */
        shoal_status_t s = shoal_iallreduce(acc, acc, count, SHOAL_INT64, SHOAL_SUM, comm,
                                            &req[nreq++]);
        RANK_CHECK(s == SHOAL_OK, fail, "iallreduce %d: %s", k, shoal_comm_last_error(comm));
        bc[k] = rank == k % nranks ? k * 7 : -1;
        s = shoal_ibroadcast(&bc[k], &bc[k], 1, SHOAL_INT32, k % nranks, comm, &req[nreq++]);
        RANK_CHECK(s == SHOAL_OK, fail, "ibroadcast %d", k);
        if (k == 3) {
            int done = 1;
            /* Zero-count calls complete at once. */
            shoal_request_t z;
            RANK_CHECK(shoal_iallreduce(NULL, NULL, 0, SHOAL_INT64, SHOAL_SUM, comm, &z) ==
                           SHOAL_OK, fail, "empty iallreduce");
            RANK_CHECK(shoal_test(&z, &done) == SHOAL_OK && done && z == NULL, fail, "empty test");
        }
    }
    /* Poll the last one a while, then wait for all in reverse order. */
    int done = 0;
    for (int spin = 0; spin < 5 && !done; spin++)
        RANK_CHECK(shoal_test(&req[nreq - 1], &done) == SHOAL_OK, fail, "test");
    if (done)
        nreq--;
    for (size_t i = nreq; i-- > 0;) {
        shoal_status_t s = shoal_wait(&req[i]);
        RANK_CHECK(s == SHOAL_OK && req[i] == NULL, fail, "wait %zu: %s", i,
                   shoal_status_string(s));
    }
    /* Waiting twice is an error, not a crash. */
    RANK_CHECK(shoal_wait(&req[0]) == SHOAL_ERR_INVALID_ARG, fail, "second wait");
    /* Round 1: n*i + n(n-1)/2; round k: n^k * i + n^(k-1) * n(n-1)/2,
     * modulo 2^64 like the kernels' integer sums. */
    uint64_t prev_scale = 1, n = (uint64_t)nranks;
    for (int k = 1; k < NB_OPS; k++)
        prev_scale *= n;
    for (size_t i = 0; i < count; i++) {
        uint64_t want = prev_scale * n * (uint64_t)i + prev_scale * (n * (n - 1) / 2);
        RANK_CHECK((uint64_t)acc[i] == want, fail, "element %zu after %d chained all-reduces", i,
                   NB_OPS);
    }
    for (int k = 0; k < NB_OPS; k++)
        RANK_CHECK(bc[k] == k * 7, fail, "broadcast %d got %d", k, bc[k]);
    free(acc);
    free(bc);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

#define XCOUNT (5 * TEST_CHUNK / 4 + 3)

/* Non-blocking sends and receives: every rank sends several messages to
 * every other rank and receives theirs, sends posted before receives, each
 * message several pieces long; destroy runs what was never waited for. */
static int rank_nb_p2p(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int nmsg = 3;
    size_t total = (size_t)nranks * (size_t)nmsg;
    int32_t **sb = calloc(total, sizeof(*sb)), **rb = calloc(total, sizeof(*rb));
    shoal_request_t *req = calloc(2 * total, sizeof(*req));
    size_t nreq = 0;
    for (int p = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        for (int k = 0; k < nmsg; k++) {
            size_t idx = (size_t)p * (size_t)nmsg + (size_t)k, n = XCOUNT * (size_t)k;
            sb[idx] = malloc(n * 4 + 4);
            for (size_t i = 0; i < n; i++)
                sb[idx][i] = p2p_value(rank, p, k, i);
            RANK_CHECK(shoal_isend(sb[idx], n, SHOAL_INT32, p, comm, &req[nreq++]) == SHOAL_OK,
                       fail, "isend");
        }
    }
    for (int p = nranks - 1; p >= 0; p--) {
        if (p == rank)
            continue;
        for (int k = 0; k < nmsg; k++) {
            size_t idx = (size_t)p * (size_t)nmsg + (size_t)k, n = XCOUNT * (size_t)k;
            rb[idx] = malloc(n * 4 + 4);
            RANK_CHECK(shoal_irecv(rb[idx], n, SHOAL_INT32, p, comm, &req[nreq++]) == SHOAL_OK,
                       fail, "irecv");
        }
    }
    shoal_status_t s = shoal_wait_all(nreq, req);
    RANK_CHECK(s == SHOAL_OK, fail, "wait_all: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (int p = 0; p < nranks; p++) {
        for (int k = 0; k < nmsg && p != rank; k++) {
            size_t idx = (size_t)p * (size_t)nmsg + (size_t)k, n = XCOUNT * (size_t)k;
            for (size_t i = 0; i < n; i++)
                RANK_CHECK(rb[idx][i] == p2p_value(p, rank, k, i), fail, "message %d from %d [%zu]",
                           k, p, i);
            free(sb[idx]);
            free(rb[idx]);
        }
    }
    /* Left to destroy: one last all-reduce nobody waits for. */
    int64_t one = 1, all = 0;
    shoal_request_t last;
    RANK_CHECK(shoal_iallreduce(&one, &all, 1, SHOAL_INT64, SHOAL_SUM, comm, &last) == SHOAL_OK,
               fail, "last iallreduce");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy with a queued operation");
    RANK_CHECK(all == nranks, fail, "queued all-reduce ran at destroy: %lld", (long long)all);
    RANK_CHECK(shoal_wait(&last) == SHOAL_OK, fail, "request outlives its communicator");
    free(sb);
    free(rb);
    free(req);
    (void)arg;
    return 0;
fail:
    return 1;
}

/* Pre-multiplied sums: scalar 3 (2 for fp8, whose exact range is small)
 * for every dtype, on all-reduce, reduce-scatter and reduce. */
static int rank_premul(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 37, n = count * (size_t)nranks;
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++) {
        shoal_dtype_t dt = (shoal_dtype_t)d;
        size_t es = shoal_dtype_bytes(dt);
        unsigned char scalar[8], rep[8 * 64];
        double sv = dt == SHOAL_FP8_E4M3 || dt == SHOAL_FP8_E5M2 ? 2 : 3;
        shoal_dtype_set_f64(scalar, 0, dt, sv);
        for (size_t i = 0; i < n && i < 64; i++)
            memcpy(rep + i * es, scalar, es);
        shoal_op_t op;
        RANK_CHECK(shoal_op_create_premul_sum(comm, scalar, dt, &op) == SHOAL_OK, fail, "create");
        RANK_CHECK((int)op >= SHOAL_OP_COUNT, fail, "premul op %d collides with a built-in",
                   (int)op);
        unsigned char *in = malloc(n * es), *out = malloc(n * es), *want = malloc(n * es),
                      *tmp = malloc(n * es);
        /* want = sum over ranks of scalar * input, by the scalar reference. */
        for (int r = 0; r < nranks; r++) {
            harness_fill_exact(tmp, n, r, dt, SHOAL_SUM);
            for (size_t i = 0; i < n; i += 64) {
                size_t m = n - i < 64 ? n - i : 64;
                shoal_reduce_ref(tmp + i * es, tmp + i * es, rep, m, dt, SHOAL_PROD);
            }
            if (r == 0)
                memcpy(want, tmp, n * es);
            else
                shoal_reduce_ref(want, want, tmp, n, dt, SHOAL_SUM);
        }
        harness_fill_exact(in, n, rank, dt, SHOAL_SUM);
        RANK_CHECK(shoal_allreduce(in, out, n, dt, op, comm) == SHOAL_OK, fail, "allreduce %s: %s",
                   shoal_dtype_name(dt), shoal_comm_last_error(comm));
        RANK_CHECK(!memcmp(out, want, n * es), fail, "premul allreduce %s", shoal_dtype_name(dt));
        RANK_CHECK(shoal_reduce_scatter(in, out, count, dt, op, comm) == SHOAL_OK, fail, "rs");
        RANK_CHECK(!memcmp(out, want + (size_t)rank * count * es, count * es), fail,
                   "premul reduce-scatter %s", shoal_dtype_name(dt));
        RANK_CHECK(shoal_reduce(in, out, n, dt, op, nranks - 1, comm) == SHOAL_OK, fail, "reduce");
        RANK_CHECK(rank != nranks - 1 || !memcmp(out, want, n * es), fail, "premul reduce %s",
                   shoal_dtype_name(dt));
        /* The op serves its dtype only, and dies with destroy. */
        shoal_dtype_t other = dt == SHOAL_FLOAT32 ? SHOAL_FLOAT64 : SHOAL_FLOAT32;
        RANK_CHECK(shoal_allreduce(in, out, 1, other, op, comm) == SHOAL_ERR_INVALID_ARG, fail,
                   "premul op of %s accepted for %s", shoal_dtype_name(dt),
                   shoal_dtype_name(other));
        RANK_CHECK(shoal_op_destroy(op, comm) == SHOAL_OK, fail, "destroy op");
        RANK_CHECK(shoal_op_destroy(op, comm) == SHOAL_ERR_INVALID_ARG, fail, "destroy op twice");
        RANK_CHECK(shoal_allreduce(in, out, n, dt, op, comm) == SHOAL_ERR_INVALID_ARG, fail,
                   "destroyed op accepted");
        free(in);
        free(out);
        free(want);
        free(tmp);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

#define THREADS 3
#define THREAD_ITERS 40

typedef struct {
    shoal_comm_t comm;
    int rank, nranks, tid;
    int failed;
    /* Hand-off: requests issued by one thread, completed by another. */
    shoal_request_t *reqs;
    int64_t *vals;
} thread_arg_t;

/* Each thread drives its own communicator: independent ones at once. */
static void *thread_own_comm(void *p)
{
    thread_arg_t *t = p;
    for (int k = 0; k < THREAD_ITERS && !t->failed; k++) {
        int64_t v = t->rank + k + t->tid * 1000, sum = 0;
        int64_t want = (int64_t)t->nranks * (k + t->tid * 1000) +
                       (int64_t)t->nranks * (t->nranks - 1) / 2;
        shoal_request_t r;
        if (k % 2) {
            t->failed |= shoal_allreduce(&v, &sum, 1, SHOAL_INT64, SHOAL_SUM, t->comm) != SHOAL_OK;
        } else {
            t->failed |= shoal_iallreduce(&v, &sum, 1, SHOAL_INT64, SHOAL_SUM, t->comm, &r) !=
                         SHOAL_OK;
            t->failed |= !t->failed && shoal_wait(&r) != SHOAL_OK;
        }
        t->failed |= sum != want;
    }
    return NULL;
}

/* Completes the requests another thread issued. */
static void *thread_waiter(void *p)
{
    thread_arg_t *t = p;
    for (int k = 0; k < THREAD_ITERS; k++) {
        int done = 0;
        while (!done && !t->failed)
            t->failed |= shoal_test(&t->reqs[k], &done) != SHOAL_OK;
    }
    return NULL;
}

static int rank_threads(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t world, comms[THREADS];
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &world) == SHOAL_OK, fail, "init");
    for (int i = 0; i < THREADS; i++)
        RANK_CHECK(shoal_comm_split(world, 0, rank, &comms[i]) == SHOAL_OK, fail, "split");
    thread_arg_t ta[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        ta[i] = (thread_arg_t){.comm = comms[i], .rank = rank, .nranks = nranks, .tid = i};
        RANK_CHECK(pthread_create(&th[i], NULL, thread_own_comm, &ta[i]) == 0, fail, "thread");
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        RANK_CHECK(!ta[i].failed, fail, "thread %d on its own communicator failed", i);
    }
    /* This thread issues on world; another completes with shoal_test. */
    shoal_request_t reqs[THREAD_ITERS];
    int64_t vals[THREAD_ITERS];
    thread_arg_t w = {.comm = world, .reqs = reqs, .vals = vals};
    for (int k = 0; k < THREAD_ITERS; k++) {
        vals[k] = rank * k;
        RANK_CHECK(shoal_iallreduce(&vals[k], &vals[k], 1, SHOAL_INT64, SHOAL_MAX, world,
                                    &reqs[k]) == SHOAL_OK, fail, "iallreduce");
    }
    pthread_t wt;
    RANK_CHECK(pthread_create(&wt, NULL, thread_waiter, &w) == 0, fail, "waiter");
    pthread_join(wt, NULL);
    RANK_CHECK(!w.failed, fail, "waiter thread failed");
    for (int k = 0; k < THREAD_ITERS; k++)
        RANK_CHECK(vals[k] == (int64_t)(nranks - 1) * k, fail, "max %d", k);
    for (int i = 0; i < THREADS; i++)
        RANK_CHECK(shoal_comm_destroy(comms[i]) == SHOAL_OK, fail, "destroy");
    RANK_CHECK(shoal_comm_destroy(world) == SHOAL_OK, fail, "destroy world");
    (void)arg;
    return 0;
fail:
    return 1;
}

/* Rank 0 issues a blocking all-reduce on one thread (nothing is queued
 * before it, so it runs there, holding the queue's token without its
 * lock) and, once that is under way, a non-blocking one on this thread,
 * which waits behind it: the first must wake the second (or the progress
 * thread) when it ends. The others join late, so that the first is still
 * running then. Naps and heartbeats here outlast the test's limit (run_wake),
 * so a missed wake-up fails it. Both calls are alike, so that whichever
 * goes first, the ranks agree. */
#define WAKE_ROUNDS 4
#define WAKE_HOLD_US 60000

typedef struct {
    shoal_comm_t comm;
    int64_t in, out;
    atomic_int started;
    int failed;
} wake_arg_t;

static void *wake_blocking(void *p)
{
    wake_arg_t *w = p;
    atomic_store(&w->started, 1);
    w->failed = shoal_allreduce(&w->in, &w->out, 1, SHOAL_INT64, SHOAL_SUM, w->comm) != SHOAL_OK;
    return NULL;
}

static int rank_wake(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int64_t want = (int64_t)nranks * (nranks + 1) / 2;
    for (int k = 0; k < WAKE_ROUNDS; k++) {
        int64_t in = rank + 1, out = 0;
        if (rank == 0) {
            wake_arg_t w = {.comm = comm, .in = rank + 1};
            atomic_init(&w.started, 0);
            pthread_t th;
            RANK_CHECK(pthread_create(&th, NULL, wake_blocking, &w) == 0, fail, "thread");
            while (!atomic_load(&w.started))
                sched_yield();
            usleep(WAKE_HOLD_US / 3);
            shoal_request_t req;
            RANK_CHECK(shoal_iallreduce(&in, &out, 1, SHOAL_INT64, SHOAL_SUM, comm, &req) ==
                           SHOAL_OK, fail, "iallreduce %d", k);
            RANK_CHECK(shoal_wait(&req) == SHOAL_OK, fail, "wait %d", k);
            pthread_join(th, NULL);
            RANK_CHECK(!w.failed && w.out == want, fail, "blocking all-reduce %d: %lld", k,
                       (long long)w.out);
        } else {
            usleep(WAKE_HOLD_US);
            int64_t first = 0;
            RANK_CHECK(shoal_allreduce(&in, &first, 1, SHOAL_INT64, SHOAL_SUM, comm) == SHOAL_OK,
                       fail, "first all-reduce %d", k);
            RANK_CHECK(first == want, fail, "first all-reduce %d: %lld", k, (long long)first);
            RANK_CHECK(shoal_allreduce(&in, &out, 1, SHOAL_INT64, SHOAL_SUM, comm) == SHOAL_OK,
                       fail, "second all-reduce %d", k);
        }
        RANK_CHECK(out == want, fail, "all-reduce behind the blocking one, %d: %lld", k,
                   (long long)out);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

#define BAD 0x77

/* Bad calls: a clear status, nothing written, the communicator usable. */
static int rank_bad(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t n = (size_t)nranks;
    int32_t *a = malloc(64 * n * 4), *b = malloc(64 * n * 4);
    memset(a, BAD, 64 * n * 4);
    memset(b, BAD, 64 * n * 4);
    size_t counts[8] = {1, 1, 1, 1, 1, 1, 1, 1}, displs[8] = {0}, huge[8];
    for (int j = 0; j < nranks; j++)
        huge[j] = SIZE_MAX / 2;
    shoal_request_t req = NULL;
    int done;
    struct {
        const char *what;
        shoal_status_t got;
    } cases[] = {
        {"root out of range", shoal_broadcast(a, b, 4, SHOAL_INT32, nranks, comm)},
        {"negative root", shoal_reduce(a, b, 4, SHOAL_INT32, SHOAL_SUM, -1, comm)},
        {"peer out of range", shoal_send(a, 4, SHOAL_INT32, nranks + 3, comm)},
        {"send to self outside a group", shoal_send(a, 4, SHOAL_INT32, rank, comm)},
        {"unknown dtype", shoal_allreduce(a, b, 4, (shoal_dtype_t)99, SHOAL_SUM, comm)},
        {"unknown op", shoal_allreduce(a, b, 4, SHOAL_INT32, (shoal_op_t)77, comm)},
        {"overflowing count", shoal_allgather(a, b, SIZE_MAX / 3, SHOAL_INT32, comm)},
        {"NULL recvbuf", shoal_allreduce(a, NULL, 4, SHOAL_INT32, SHOAL_SUM, comm)},
        {"all-reduce buffers overlapping off by one", shoal_allreduce(a, a + 1, 8, SHOAL_INT32,
                                                                      SHOAL_SUM, comm)},
        {"reduce-scatter recvbuf at the wrong block",
         nranks > 1 ? shoal_reduce_scatter(a, a + 4 * ((rank + 1) % nranks), 4, SHOAL_INT32,
                                           SHOAL_SUM, comm)
                    : shoal_reduce_scatter(a, a + 1, 4, SHOAL_INT32, SHOAL_SUM, comm)},
        {"all-gather sendbuf at the wrong block",
         shoal_allgather(b + 4 * (size_t)rank + 1, b, 4, SHOAL_INT32, comm)},
        {"all-to-all-v receive blocks overlapping",
         nranks > 1 ? shoal_alltoallv(a, counts, displs, b, counts, displs, SHOAL_INT32, comm)
                    : SHOAL_ERR_INVALID_ARG},
        {"all-to-all-v displacement overflowing",
         shoal_alltoallv(a, counts, huge, b, counts, huge, SHOAL_INT32, comm)},
        {"NULL request pointer", shoal_iallreduce(a, b, 4, SHOAL_INT32, SHOAL_SUM, comm, NULL)},
        {"wait on NULL request", shoal_wait(&req)},
        {"test on NULL request", shoal_test(&req, &done)},
        {"group end without start", shoal_group_end()},
        {"NULL communicator", shoal_allreduce(a, b, 4, SHOAL_INT32, SHOAL_SUM, NULL)},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        RANK_CHECK(cases[i].got == SHOAL_ERR_INVALID_ARG, fail, "%s: got %s", cases[i].what,
                   shoal_status_string(cases[i].got));
    for (size_t i = 0; i < 64 * n * 4; i++)
        RANK_CHECK(((unsigned char *)a)[i] == BAD && ((unsigned char *)b)[i] == BAD, fail,
                   "a bad call wrote byte %zu", i);
    /* Still usable. */
    int32_t one = 1, all = 0;
    RANK_CHECK(shoal_allreduce(&one, &all, 1, SHOAL_INT32, SHOAL_SUM, comm) == SHOAL_OK &&
                   all == nranks,
               fail, "all-reduce after bad calls: %s", shoal_comm_last_error(comm));
    free(a);
    free(b);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

/* Abort with non-blocking operations outstanding that the peer never
 * joins: every request completes with SHOAL_ERR_ABORTED, long before the
 * deadline, and outlives the communicator. */
static int rank_abort_nb(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    if (rank == 1) {
        /* Wait for rank 0 to go away: its abort breaks the bootstrap link. */
        shoal_comm_t none = NULL;
        RANK_CHECK(shoal_comm_split(comm, 0, 0, &none) != SHOAL_OK, fail, "split without rank 0");
        RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort on rank 1");
        return 0;
    }
    static float x[3][4096];
    shoal_request_t req[4];
    for (int k = 0; k < 3; k++)
        RANK_CHECK(shoal_iallreduce(x[k], x[k], 4096, SHOAL_FLOAT32, SHOAL_SUM, comm, &req[k]) ==
                       SHOAL_OK, fail, "iallreduce %d", k);
    RANK_CHECK(shoal_isend(x[0], 4096, SHOAL_FLOAT32, 1, comm, &req[3]) == SHOAL_OK, fail, "isend");
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    for (int k = 0; k < 4; k++) {
        shoal_status_t s = shoal_wait(&req[k]);
        RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "request %d after abort: %s", k,
                   shoal_status_string(s));
    }
    (void)arg;
    return 0;
fail:
    return 1;
}

/* An all-reduce of count int32 issued without waiting, then (after a poll,
 * which must not change the progress threads before: caller-driven
 * progress) waited and checked; threads_after is how many progress threads
 * the process then has. */
static int nb_allreduce_threads(shoal_comm_t comm, int rank, int nranks, size_t count, int k,
                                int *threads_poll, int *threads_after)
{
    int32_t *buf = malloc(count * sizeof(*buf) + 1);
    RANK_CHECK(buf, fail, "out of memory");
    harness_fill_exact(buf, count, rank, SHOAL_INT32, SHOAL_SUM);
    shoal_request_t req = NULL;
    shoal_status_t s = shoal_iallreduce(buf, buf, count, SHOAL_INT32, SHOAL_SUM, comm, &req);
    RANK_CHECK(s == SHOAL_OK, fail_free, "iallreduce %d: %s", k, shoal_status_string(s));
    int done = 0;
    s = shoal_test(&req, &done);
    RANK_CHECK(s == SHOAL_OK, fail_free, "test %d: %s", k, shoal_status_string(s));
    *threads_poll = harness_threads("shoal progress");
    if (!done) {
        s = shoal_wait(&req);
        RANK_CHECK(s == SHOAL_OK, fail_free, "wait %d: %s", k, shoal_status_string(s));
    }
    *threads_after = harness_threads("shoal progress");
    int bad = check_exact(buf, SHOAL_INT32, SHOAL_SUM, count, nranks, "set_progress all-reduce", k);
    free(buf);
    return bad;
fail_free:
    free(buf);
fail:
    return 1;
}

/* From the environment's mode: caller-driven progress, set before the
 * first non-blocking call, runs it with no new thread; back to the thread
 * while idle, whose first non-blocking call starts one; refused after
 * that (and bad modes and handles always), the communicator unharmed. */
static int rank_set_progress(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    shoal_status_t s = shoal_comm_set_progress(comm, (shoal_progress_t)7);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "mode 7 gave %s", shoal_status_string(s));
    RANK_CHECK(strstr(shoal_comm_last_error(comm), "mode 7"), fail, "reason: %s",
               shoal_comm_last_error(comm));
    s = shoal_comm_set_progress(NULL, SHOAL_PROGRESS_CALLER);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "NULL comm gave %s", shoal_status_string(s));

    int before = harness_threads("shoal progress"), poll = -1, after = -1;
    RANK_CHECK(shoal_comm_set_progress(comm, SHOAL_PROGRESS_CALLER) == SHOAL_OK, fail,
               "caller: %s", shoal_comm_last_error(comm));
    /* Multi-chunk, odd, then one element. */
    size_t counts[] = {3 * TEST_CHUNK + 7, 1};
    for (int k = 0; k < 2; k++) {
        RANK_CHECK(!nb_allreduce_threads(comm, rank, nranks, counts[k], k, &poll, &after), fail,
                   "caller-driven all-reduce");
        RANK_CHECK(poll == before && after == before, fail,
                   "caller-driven progress: %d threads before, %d at the poll, %d after",
                   before, poll, after);
    }
    RANK_CHECK(shoal_comm_set_progress(comm, SHOAL_PROGRESS_THREAD) == SHOAL_OK, fail,
               "back to the thread: %s", shoal_comm_last_error(comm));
    RANK_CHECK(!nb_allreduce_threads(comm, rank, nranks, counts[0], 2, &poll, &after), fail,
               "all-reduce on the progress thread");
    RANK_CHECK(after == before + 1, fail, "progress thread: %d threads before, %d after",
               before, after);
    s = shoal_comm_set_progress(comm, SHOAL_PROGRESS_CALLER);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "caller once the thread runs gave %s",
               shoal_status_string(s));
    RANK_CHECK(strstr(shoal_comm_last_error(comm), "set its progress before"), fail,
               "reason: %s", shoal_comm_last_error(comm));
    RANK_CHECK(!nb_allreduce_threads(comm, rank, nranks, counts[1], 3, &poll, &after), fail,
               "all-reduce after the refusal");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void run(harness_rank_fn_t fn, const char *transport, const char *progress, int nranks)
{
    set_transport(transport, progress);
    assert_int_equal(harness_run_ranks(nranks, fn, NULL, 120), 0);
}

/* Naps of a minute, limit of 30 s: a wake-up missed is a failure. */
static void run_wake(const char *progress, int nranks)
{
    set_transport("shm", progress);
    harness_setenv("SHOAL_TEST_EXEC_NAP", "60s");
    harness_setenv("SHOAL_HEARTBEAT", "60s");
    int rc = harness_run_ranks(nranks, rank_wake, NULL, 30);
    harness_setenv("SHOAL_TEST_EXEC_NAP", NULL);
    harness_setenv("SHOAL_HEARTBEAT", NULL);
    assert_int_equal(rc, 0);
}

static void test_wake_caller_2(void **state)
{
    (void)state;
    run_wake("caller", 2);
}

static void test_wake_thread_3(void **state)
{
    (void)state;
    run_wake("thread", 3);
}

#define CASE(name, fn, tl, prog, n)                                           \
    static void test_##name##_##tl##_##prog##_##n(void **state)               \
    {                                                                         \
        (void)state;                                                          \
        run(fn, #tl, #prog, n);                                               \
    }
CASE(group, rank_group, shm, thread, 1) CASE(group, rank_group, shm, thread, 2)
CASE(group, rank_group, shm, caller, 3) CASE(group, rank_group, shm, thread, 5)
CASE(group, rank_group, shm, thread, 8) CASE(group, rank_group, tcp, thread, 3)
CASE(nb, rank_nb, shm, thread, 1) CASE(nb, rank_nb, shm, thread, 2)
CASE(nb, rank_nb, shm, caller, 2) CASE(nb, rank_nb, shm, thread, 4)
CASE(nb, rank_nb, shm, caller, 7) CASE(nb, rank_nb, tcp, thread, 3)
CASE(nbp2p, rank_nb_p2p, shm, thread, 2) CASE(nbp2p, rank_nb_p2p, shm, caller, 3)
CASE(nbp2p, rank_nb_p2p, shm, thread, 6) CASE(nbp2p, rank_nb_p2p, tcp, thread, 4)
CASE(premul, rank_premul, shm, thread, 1) CASE(premul, rank_premul, shm, thread, 3)
CASE(premul, rank_premul, tcp, thread, 4)
CASE(threads, rank_threads, shm, thread, 2) CASE(threads, rank_threads, shm, caller, 3)
CASE(bad, rank_bad, shm, thread, 1) CASE(bad, rank_bad, shm, thread, 3)
CASE(abort, rank_abort_nb, shm, thread, 2) CASE(abort, rank_abort_nb, shm, caller, 2)
CASE(abort, rank_abort_nb, tcp, thread, 2)
CASE(setprog, rank_set_progress, shm, thread, 1) CASE(setprog, rank_set_progress, shm, caller, 3)
CASE(setprog, rank_set_progress, tcp, thread, 2)

#define T(name, tl, prog, n) cmocka_unit_test(test_##name##_##tl##_##prog##_##n)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(group, shm, thread, 1), T(group, shm, thread, 2), T(group, shm, caller, 3),
        T(group, shm, thread, 5), T(group, shm, thread, 8), T(group, tcp, thread, 3),
        T(nb, shm, thread, 1),    T(nb, shm, thread, 2),    T(nb, shm, caller, 2),
        T(nb, shm, thread, 4),    T(nb, shm, caller, 7),    T(nb, tcp, thread, 3),
        T(nbp2p, shm, thread, 2), T(nbp2p, shm, caller, 3), T(nbp2p, shm, thread, 6),
        T(nbp2p, tcp, thread, 4), T(premul, shm, thread, 1), T(premul, shm, thread, 3),
        T(premul, tcp, thread, 4), T(threads, shm, thread, 2), T(threads, shm, caller, 3),
        T(bad, shm, thread, 1),   T(bad, shm, thread, 3),   T(abort, shm, thread, 2),
        T(abort, shm, caller, 2), T(abort, tcp, thread, 2),
        T(setprog, shm, thread, 1), T(setprog, shm, caller, 3), T(setprog, tcp, thread, 2),
        cmocka_unit_test(test_wake_caller_2), cmocka_unit_test(test_wake_thread_3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
