/* Load and soak: several communicators at once, each driven by its own
 * thread, running random collectives of random sizes, dtypes and ops for
 * SHOAL_SOAK_SECONDS (default 10), every result checked against the scalar
 * reference. Afterwards each rank must hold the resources it held before
 * its first init: as many open descriptors, as many threads, no segment of
 * its own left in /dev/shm, and (without sanitizers, whose allocators keep
 * memory) a resident size that did not grow during the run.
 *
 * A second case kills one rank between collectives and checks that the
 * survivors get an error within SHOAL_TIMEOUT, abort, hold no new
 * descriptor or thread, and that no rank left a shared-memory segment
 * behind. A third kills a rank in the middle of a communicator's wireup:
 * the survivors must remove its segment too. */
#include "harness.h"

#include "base/dtype.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SOAK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SOAK_SANITIZED 1
#endif
#endif
#ifndef SOAK_SANITIZED
#define SOAK_SANITIZED 0
#endif

#define SOAK_RANKS 3
#define SOAK_THREADS 3
#define SOAK_CHUNK 65536
/* Largest message: the whole vector of a collective (all ranks' blocks). */
#define SOAK_MAX_BYTES (3u << 20)
#define SOAK_WARMUP_ROUNDS 12
#define SOAK_RSS_SLACK_KB (64 * 1024)
#define SOAK_SHM_PREFIX "shoal-shm-"

/* Shared between the parent and the forked ranks (an anonymous shared
 * mapping made before the fork): who the ranks are, and what the crash
 * case's ranks saw. */
typedef struct {
    shoal_unique_id_t id2;
    int seconds;
    int pid[SOAK_RANKS];
    atomic_int survivor_ok[SOAK_RANKS];
    atomic_int dying;
} soak_shared_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int soak_seconds(void)
{
    const char *v = getenv("SHOAL_SOAK_SECONDS");
    if (!v || !*v)
        return 10;
    int s = atoi(v);
    return s < 0 ? 0 : s;
}

/* Log the threads of this process with their names, to tell whose a
 * thread that stayed is. */
static void log_threads(int rank, const char *tag)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], name[64] = "?";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(name, sizeof(name), f))
                strcpy(name, "?");
            name[strcspn(name, "\n")] = '\0';
            fclose(f);
        }
        printf("# rank %d %s: thread %s \"%s\"\n", rank, tag, e->d_name, name);
    }
    if (d)
        closedir(d);
    fflush(stdout);
}

/* Entries of /dev/shm named for process pid by the shared-memory
 * transport ("shoal-shm-<pid>-<random>"); names are logged with tag. */
static int count_segments_of(long pid, const char *tag)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), SOAK_SHM_PREFIX "%ld-", pid);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            printf("# %s: /dev/shm/%s remains\n", tag, e->d_name);
            n++;
        }
    }
    closedir(d);
    fflush(stdout);
    return n;
}

/* The open descriptors of this process, each with what it points to. A
 * descriptor may legitimately go away during the run (rank 0 takes over
 * and later closes the listener that shoal_get_unique_id opened in the
 * parent), so the check is that nothing new stays open. */
#define SOAK_MAX_FDS 256
typedef struct {
    int n;
    int fd[SOAK_MAX_FDS];
    char target[SOAK_MAX_FDS][96];
} fd_snap_t;

static void fd_snapshot(fd_snap_t *snap)
{
    snap->n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && snap->n < SOAK_MAX_FDS) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, snap->target[snap->n], sizeof(snap->target[0]) - 1);
        snap->target[snap->n][len < 0 ? 0 : len] = '\0';
        snap->fd[snap->n++] = atoi(e->d_name);
    }
    closedir(d);
}

/* Descriptors open in after that were not open (to the same object) in
 * before; each is logged with tag. */
static int fd_new(const fd_snap_t *before, const fd_snap_t *after, int rank, const char *tag)
{
    int n = 0;
    for (int i = 0; i < after->n; i++) {
        int found = 0;
        for (int j = 0; j < before->n && !found; j++)
            found = after->fd[i] == before->fd[j] && !strcmp(after->target[i], before->target[j]);
        if (!found) {
            printf("# rank %d %s: fd %d -> %s was not open before init\n", rank, tag,
                   after->fd[i], after->target[i]);
            n++;
        }
    }
    fflush(stdout);
    return n;
}

static void *noop_thread(void *arg)
{
    *(pid_t *)arg = gettid();
    return NULL;
}

/* Thread count to compare with at the end: start and join one thread
 * first, because TSan's runtime starts a thread of its own (a background
 * thread that never exits) at the first pthread_create of a forked child.
 * The joined thread may still be listed in /proc/self/task for a moment
 * (see settled_threads): wait up to 5 s for its entry to go before
 * counting. */
static int baseline_threads(void)
{
    pthread_t th;
    pid_t tid = 0;
    if (pthread_create(&th, NULL, noop_thread, &tid) == 0) {
        pthread_join(th, NULL);
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
        double t0 = now_s();
        while (tid > 0 && access(path, F_OK) == 0 && now_s() - t0 < 5) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    return harness_threads(NULL);
}

/* Threads of this process once those that are exiting have gone: a
 * joined thread may still be listed in /proc/self/task for a moment after
 * pthread_join returned (the kernel wakes the joiner before it removes
 * the task; slow under TSan), so wait up to 5 s for the count to come
 * down to want. Returns the count and how long it took. */
static int settled_threads(int want, double *waited_p)
{
    double t0 = now_s();
    int n = harness_threads(NULL);
    while (n > want && now_s() - t0 < 5) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        n = harness_threads(NULL);
    }
    *waited_p = now_s() - t0;
    return n;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* ---- One communicator's random schedule -------------------------------- */

/* xorshift64*: every member of a communicator seeds it alike, so all draw
 * the same operations in the same order. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static size_t rng_below(uint64_t *s, size_t n)
{
    return n ? (size_t)(rng_next(s) % n) : 0;
}

typedef enum {
    K_ALLREDUCE,
    K_REDUCE_SCATTER,
    K_ALLGATHER,
    K_BROADCAST,
    K_REDUCE,
    K_ALLTOALL,
    K_GATHER,
    K_SCATTER,
    K_SENDRECV,
    K_BARRIER,
    K_COUNT
} soak_kind_t;

static const char *const kind_name[K_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
    "alltoall",  "gather",         "scatter",   "sendrecv",  "barrier",
};

/* A communicator as one thread drives it. */
typedef struct {
    shoal_comm_t comm;
    const char *name;
    uint32_t salt; /* the same on every member */
    int rank, nranks;
    uint64_t rng;
    int stopped;
    double start;
    long ops;
} soak_comm_t;

/* Per-thread buffers, allocated once at the largest size so that the
 * test's own allocations do not move the resident size. */
typedef struct {
    unsigned char *send, *recv, *want, *tmp, *small;
} soak_bufs_t;

typedef struct {
    soak_comm_t comms[2];
    int ncomms;
    int seconds;
    int tid;
    soak_bufs_t b;
    pthread_barrier_t *warm;
    char err[256];
    int failed;
    long rounds;
} soak_thread_t;

/* Byte pattern of a copied block: what rank src sends to dst in operation
 * seq of communicator salt. */
static void fill_bytes(unsigned char *p, size_t n, uint32_t salt, uint64_t seq, int src, int dst)
{
    uint32_t tag = harness_mix(salt ^ (uint32_t)seq * 2654435761u ^ (uint32_t)src * 40503u ^
                               (uint32_t)(dst + 1) * 97u);
    for (size_t i = 0; i < n; i += 4) {
        uint32_t w = harness_mix(tag + (uint32_t)(i / 4));
        size_t m = n - i < 4 ? n - i : 4;
        memcpy(p + i, &w, m);
    }
}

static int check_bytes(const unsigned char *got, size_t n, uint32_t salt, uint64_t seq, int src,
                       int dst, unsigned char *scratch)
{
    fill_bytes(scratch, n, salt, seq, src, dst);
    return memcmp(got, scratch, n) != 0;
}

/* Keep the first failure's message. */
#define SOAK_FAIL(t, ...)                                                     \
    do {                                                                      \
        if (!(t)->failed)                                                     \
            snprintf((t)->err, sizeof((t)->err), __VA_ARGS__);                \
        (t)->failed = 1;                                                      \
        return 1;                                                             \
    } while (0)

/* Finish a call: wait for its request when it was non-blocking. */
static shoal_status_t finish(shoal_status_t s, int nb, shoal_request_t *req)
{
    if (s != SHOAL_OK || !nb)
        return s;
    return shoal_wait(req);
}

/* Reductions: fill every rank's input with harness_fill_exact for
 * the rank's index, and compare with harness_expected. */
static int run_reduction(soak_thread_t *t, soak_comm_t *c, soak_kind_t kind, size_t count,
                         shoal_dtype_t dt, shoal_op_t op, int root, int nb, int inplace)
{
    soak_bufs_t *b = &t->b;
    size_t es = shoal_dtype_bytes(dt), n = (size_t)c->nranks;
    size_t total = kind == K_REDUCE_SCATTER ? count * n : count;
    shoal_request_t req = NULL;
    shoal_status_t s;
    harness_fill_exact(b->send, total, c->rank, dt, op);
    memset(b->recv, 0xA5 ^ (int)(c->ops & 0xff), total * es + 1);
    if (kind == K_ALLREDUCE) {
        void *dst = inplace ? b->send : b->recv;
        s = nb ? shoal_iallreduce(b->send, dst, count, dt, op, c->comm, &req)
               : shoal_allreduce(b->send, dst, count, dt, op, c->comm);
    } else if (kind == K_REDUCE_SCATTER) {
        s = nb ? shoal_ireduce_scatter(b->send, b->recv, count, dt, op, c->comm, &req)
               : shoal_reduce_scatter(b->send, b->recv, count, dt, op, c->comm);
    } else {
        s = nb ? shoal_ireduce(b->send, b->recv, count, dt, op, root, c->comm, &req)
               : shoal_reduce(b->send, b->recv, count, dt, op, root, c->comm);
    }
    s = finish(s, nb, &req);
    if (s != SHOAL_OK)
        SOAK_FAIL(t, "%s %s%s of %zu %s %s: %s (%s)", c->name, nb ? "i" : "", kind_name[kind],
                  count, shoal_dtype_name(dt), shoal_op_name(op), shoal_status_string(s),
                  shoal_comm_last_error(c->comm));
    if (kind == K_REDUCE && c->rank != root)
        return 0;
    harness_expected(b->want, b->tmp, total, c->nranks, dt, op);
    const unsigned char *got = kind == K_ALLREDUCE && inplace ? b->send : b->recv;
    const unsigned char *want = b->want;
    if (kind == K_REDUCE_SCATTER)
        want += (size_t)c->rank * count * es;
    if (memcmp(got, want, count * es))
        SOAK_FAIL(t, "%s %s%s of %zu %s %s (op %ld): wrong result", c->name, nb ? "i" : "",
                  kind_name[kind], count, shoal_dtype_name(dt), shoal_op_name(op), c->ops);
    return 0;
}

/* Copies: every block carries a pattern named for its sender, receiver
 * and the operation's number, so a stale or misplaced block shows. */
static int run_copy(soak_thread_t *t, soak_comm_t *c, soak_kind_t kind, size_t count,
                    shoal_dtype_t dt, int root, int nb, uint32_t salt)
{
    soak_bufs_t *b = &t->b;
    size_t es = shoal_dtype_bytes(dt), bytes = count * es, n = (size_t)c->nranks;
    int me = c->rank, bad = -1;
    uint64_t seq = (uint64_t)c->ops;
    shoal_request_t req = NULL;
    shoal_status_t s = SHOAL_OK;
    memset(b->recv, 0x5A ^ (int)(seq & 0xff), bytes * n + 1);
    switch (kind) {
    case K_ALLGATHER:
        fill_bytes(b->send, bytes, salt, seq, me, -1);
        s = nb ? shoal_iallgather(b->send, b->recv, count, dt, c->comm, &req)
               : shoal_allgather(b->send, b->recv, count, dt, c->comm);
        s = finish(s, nb, &req);
        for (int r = 0; r < c->nranks && s == SHOAL_OK && bad < 0; r++)
            if (check_bytes(b->recv + (size_t)r * bytes, bytes, salt, seq, r, -1, b->tmp))
                bad = r;
        break;
    case K_BROADCAST:
        fill_bytes(b->send, bytes, salt, seq, root, -1);
        s = nb ? shoal_ibroadcast(b->send, b->recv, count, dt, root, c->comm, &req)
               : shoal_broadcast(b->send, b->recv, count, dt, root, c->comm);
        s = finish(s, nb, &req);
        if (s == SHOAL_OK && check_bytes(b->recv, bytes, salt, seq, root, -1, b->tmp))
            bad = root;
        break;
    case K_ALLTOALL:
        for (int r = 0; r < c->nranks; r++)
            fill_bytes(b->send + (size_t)r * bytes, bytes, salt, seq, me, r);
        s = nb ? shoal_ialltoall(b->send, b->recv, count, dt, c->comm, &req)
               : shoal_alltoall(b->send, b->recv, count, dt, c->comm);
        s = finish(s, nb, &req);
        for (int r = 0; r < c->nranks && s == SHOAL_OK && bad < 0; r++)
            if (check_bytes(b->recv + (size_t)r * bytes, bytes, salt, seq, r, me, b->tmp))
                bad = r;
        break;
    case K_GATHER:
        fill_bytes(b->send, bytes, salt, seq, me, root);
        s = nb ? shoal_igather(b->send, b->recv, count, dt, root, c->comm, &req)
               : shoal_gather(b->send, b->recv, count, dt, root, c->comm);
        s = finish(s, nb, &req);
        for (int r = 0; r < c->nranks && s == SHOAL_OK && me == root && bad < 0; r++)
            if (check_bytes(b->recv + (size_t)r * bytes, bytes, salt, seq, r, root, b->tmp))
                bad = r;
        break;
    case K_SCATTER:
        for (int r = 0; r < c->nranks; r++)
            fill_bytes(b->send + (size_t)r * bytes, bytes, salt, seq, root, r);
        s = nb ? shoal_iscatter(b->send, b->recv, count, dt, root, c->comm, &req)
               : shoal_scatter(b->send, b->recv, count, dt, root, c->comm);
        s = finish(s, nb, &req);
        if (s == SHOAL_OK && check_bytes(b->recv, bytes, salt, seq, root, me, b->tmp))
            bad = root;
        break;
    case K_SENDRECV: {
        /* A ring in a group: receive from the previous rank, send to the
         * next (oneself on a communicator of one). */
        int next = (me + 1) % c->nranks, prev = (me + c->nranks - 1) % c->nranks;
        fill_bytes(b->send, bytes, salt, seq, me, next);
        s = shoal_group_start();
        if (s == SHOAL_OK) {
            shoal_status_t s1 = shoal_recv(b->recv, count, dt, prev, c->comm);
            shoal_status_t s2 = shoal_send(b->send, count, dt, next, c->comm);
            s = shoal_group_end();
            if (s == SHOAL_OK)
                s = s1 != SHOAL_OK ? s1 : s2;
        }
        if (s == SHOAL_OK && check_bytes(b->recv, bytes, salt, seq, prev, me, b->tmp))
            bad = prev;
        break;
    }
    default:
        s = nb ? shoal_ibarrier(c->comm, &req) : shoal_barrier(c->comm);
        s = finish(s, nb, &req);
        break;
    }
    if (s != SHOAL_OK)
        SOAK_FAIL(t, "%s %s%s of %zu %s: %s (%s)", c->name, nb ? "i" : "", kind_name[kind],
                  count, shoal_dtype_name(dt), shoal_status_string(s),
                  shoal_comm_last_error(c->comm));
    if (bad >= 0)
        SOAK_FAIL(t, "%s %s%s of %zu %s (op %ld, root %d): block of rank %d wrong", c->name,
                  nb ? "i" : "", kind_name[kind], count, shoal_dtype_name(dt), c->ops, root,
                  bad);
    return 0;
}

/* Element count of a block: 0, 1, a small odd number, or anything up to
 * what fits SOAK_MAX_BYTES for the whole vector. */
static size_t pick_count(uint64_t *rng, size_t es, size_t nranks)
{
    size_t cap = SOAK_MAX_BYTES / es / nranks;
    switch (rng_below(rng, 6)) {
    case 0:
        return 0;
    case 1:
        return 1;
    case 2:
        return 2 * rng_below(rng, 500) + 1;
    case 3:
        return cap - rng_below(rng, 7);
    default:
        return 1 + rng_below(rng, cap);
    }
}

/* One random operation on c; on failure t->err says what. */
static int soak_one(soak_thread_t *t, soak_comm_t *c)
{
    soak_kind_t kind = (soak_kind_t)rng_below(&c->rng, K_COUNT);
    shoal_dtype_t dt = (shoal_dtype_t)rng_below(&c->rng, SHOAL_DTYPE_COUNT);
    shoal_op_t op = (shoal_op_t)rng_below(&c->rng, SHOAL_OP_COUNT);
    int root = (int)rng_below(&c->rng, (size_t)c->nranks);
    int nb = rng_below(&c->rng, 3) == 0 && kind != K_SENDRECV;
    int inplace = (int)rng_below(&c->rng, 2);
    size_t count = pick_count(&c->rng, shoal_dtype_bytes(dt), (size_t)c->nranks);
    /* Sometimes a small all-reduce stays outstanding across the operation:
     * two requests in flight on one communicator. */
    int extra = rng_below(&c->rng, 4) == 0;
    int64_t *small = (int64_t *)t->b.small;
    shoal_request_t xreq = NULL;
    if (extra) {
        small[0] = c->rank + c->ops;
        shoal_status_t s = shoal_iallreduce(small, small, 1, SHOAL_INT64, SHOAL_SUM, c->comm,
                                            &xreq);
        if (s != SHOAL_OK)
            SOAK_FAIL(t, "%s outstanding iallreduce: %s", c->name, shoal_status_string(s));
    }
    int rc;
    if (kind == K_ALLREDUCE || kind == K_REDUCE_SCATTER || kind == K_REDUCE)
        rc = run_reduction(t, c, kind, count, dt, op, root, nb, inplace);
    else
        rc = run_copy(t, c, kind, count, dt, root, nb, c->salt);
    if (extra) {
        shoal_status_t s = shoal_wait(&xreq);
        int64_t n = c->nranks, want = n * (n - 1) / 2 + n * c->ops;
        if (rc == 0 && (s != SHOAL_OK || small[0] != want))
            SOAK_FAIL(t, "%s outstanding iallreduce: %s, %lld (want %lld)", c->name,
                      shoal_status_string(s), (long long)small[0], (long long)want);
    }
    c->ops++;
    return rc;
}

/* One round on c: a random operation, then the stop decision, which the
 * communicator's rank 0 takes by its clock and which also carries any
 * failure, so a rank whose check failed stops its peers instead of
 * leaving them waiting. Deciding after every operation keeps the overrun
 * past SHOAL_SOAK_SECONDS to about one operation, sanitizers included. */
static void soak_round(soak_thread_t *t, soak_comm_t *c)
{
    soak_one(t, c);
    int32_t flag = t->failed || (c->rank == 0 && now_s() - c->start >= t->seconds), all = 0;
    shoal_status_t s = shoal_allreduce(&flag, &all, 1, SHOAL_INT32, SHOAL_MAX, c->comm);
    if (s != SHOAL_OK && !t->failed) {
        snprintf(t->err, sizeof(t->err), "%s stop all-reduce: %s (%s)", c->name,
                 shoal_status_string(s), shoal_comm_last_error(c->comm));
        t->failed = 1;
    }
    c->stopped = s != SHOAL_OK || all != 0;
}

static void *soak_thread(void *p)
{
    soak_thread_t *t = p;
    int warmed = 0;
    for (long round = 0;; round++) {
        int live = 0;
        for (int i = 0; i < t->ncomms; i++) {
            if (!t->comms[i].stopped) {
                soak_round(t, &t->comms[i]);
                live = 1;
            }
        }
        if (!warmed && (round + 1 == SOAK_WARMUP_ROUNDS || !live)) {
            pthread_barrier_wait(t->warm);
            warmed = 1;
        }
        if (!live)
            break;
        t->rounds++;
    }
    return NULL;
}

static int soak_bufs_alloc(soak_bufs_t *b)
{
    b->send = malloc(SOAK_MAX_BYTES + 64);
    b->recv = malloc(SOAK_MAX_BYTES + 64);
    b->want = malloc(SOAK_MAX_BYTES + 64);
    b->tmp = malloc(SOAK_MAX_BYTES + 64);
    b->small = malloc(64);
    if (!b->send || !b->recv || !b->want || !b->tmp || !b->small)
        return 1;
    /* Touch every page now, so the warm-up resident size includes them. */
    memset(b->send, 0, SOAK_MAX_BYTES + 64);
    memset(b->recv, 0, SOAK_MAX_BYTES + 64);
    memset(b->want, 0, SOAK_MAX_BYTES + 64);
    memset(b->tmp, 0, SOAK_MAX_BYTES + 64);
    return 0;
}

static void soak_bufs_free(soak_bufs_t *b)
{
    free(b->send);
    free(b->recv);
    free(b->want);
    free(b->tmp);
    free(b->small);
}

/* Rank body of the soak: world on thread 0; on thread 1 a split of world
 * with the ranks reversed; on thread 2 an independent communicator (a
 * second init) and a split of world by parity (sizes 2 and 1). */
static int rank_soak(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    soak_shared_t *sh = varg;
    sh->pid[rank] = (int)getpid();
    static fd_snap_t fds0, fds1;
    fd_snapshot(&fds0);
    int tasks0 = baseline_threads();
    if (getenv("SOAK_LOG_THREADS"))
        log_threads(rank, "before init");
    RANK_CHECK(count_segments_of(getpid(), "before init") == 0, fail, "segments before init");

    shoal_comm_t world, rev, indep, parity;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &world) == SHOAL_OK, fail, "init world");
    RANK_CHECK(shoal_comm_split(world, 0, nranks - 1 - rank, &rev) == SHOAL_OK, fail, "split rev");
    RANK_CHECK(shoal_comm_split(world, rank % 2, rank, &parity) == SHOAL_OK, fail, "split parity");
    RANK_CHECK(shoal_comm_init(nranks, &sh->id2, rank, &indep) == SHOAL_OK, fail, "init second");

    pthread_barrier_t warm;
    RANK_CHECK(pthread_barrier_init(&warm, NULL, SOAK_THREADS + 1) == 0, fail, "barrier");
    static soak_thread_t th[SOAK_THREADS];
    memset(th, 0, sizeof(th));
    shoal_comm_t comms[4] = {world, rev, indep, parity};
    const char *names[4] = {"world", "reversed split", "second init", "parity split"};
    int owner[4] = {0, 1, 2, 2};
    double start = now_s();
    for (int i = 0; i < 4; i++) {
        soak_thread_t *t = &th[owner[i]];
        soak_comm_t *c = &t->comms[t->ncomms++];
        c->comm = comms[i];
        c->name = names[i];
        c->salt = (uint32_t)i + 1;
        RANK_CHECK(shoal_comm_rank(c->comm, &c->rank) == SHOAL_OK &&
                   shoal_comm_size(c->comm, &c->nranks) == SHOAL_OK, fail, "rank/size");
        /* Members of one communicator share the seed: the same schedule. */
        c->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + (uint64_t)(i == 3 ? rank % 2 : 0);
        c->start = start;
    }
    for (int i = 0; i < SOAK_THREADS; i++) {
        th[i].seconds = sh->seconds;
        th[i].tid = i;
        th[i].warm = &warm;
        RANK_CHECK(soak_bufs_alloc(&th[i].b) == 0, fail, "buffers");
    }
    pthread_t tid[SOAK_THREADS];
    for (int i = 0; i < SOAK_THREADS; i++)
        RANK_CHECK(pthread_create(&tid[i], NULL, soak_thread, &th[i]) == 0, fail, "thread");
    pthread_barrier_wait(&warm);
    long rss_warm = rss_kb();
    int failed = 0;
    for (int i = 0; i < SOAK_THREADS; i++) {
        pthread_join(tid[i], NULL);
        if (th[i].failed) {
            fprintf(stderr, "# rank %d thread %d: %s\n", rank, i, th[i].err);
            failed = 1;
        }
    }
    long rss_end = rss_kb();
    double secs = now_s() - start;
    pthread_barrier_destroy(&warm);
    long ops = 0, rounds = 0;
    for (int i = 0; i < SOAK_THREADS; i++) {
        rounds += th[i].rounds;
        for (int j = 0; j < th[i].ncomms; j++)
            ops += th[i].comms[j].ops;
        soak_bufs_free(&th[i].b);
    }
    RANK_CHECK(!failed, fail, "a thread failed");

    RANK_CHECK(shoal_comm_destroy(parity) == SHOAL_OK, fail, "destroy parity");
    RANK_CHECK(shoal_comm_destroy(rev) == SHOAL_OK, fail, "destroy rev");
    RANK_CHECK(shoal_comm_destroy(indep) == SHOAL_OK, fail, "destroy second");
    RANK_CHECK(shoal_comm_destroy(world) == SHOAL_OK, fail, "destroy world");

    fd_snapshot(&fds1);
    double waited;
    int tasks1 = settled_threads(tasks0, &waited);
    int fdnew = fd_new(&fds0, &fds1, rank, "after destroy");
    int segs = count_segments_of(getpid(), "after destroy");
    printf("# rank %d: %.1f s, %ld operations in %ld rounds; VmRSS %ld kB after warm-up, "
           "%ld kB at the end (%+ld kB)%s; fds %d -> %d (%d new); threads %d -> %d (settled in "
           "%.3f s); own segments left %d\n",
           rank, secs, ops, rounds, rss_warm, rss_end, rss_end - rss_warm,
           SOAK_SANITIZED ? " [not checked under a sanitizer]" : "", fds0.n, fds1.n, fdnew, tasks0,
           tasks1, waited,
           segs);
    fflush(stdout);
    RANK_CHECK(rss_warm > 0 && rss_end > 0, fail, "VmRSS unreadable");
    RANK_CHECK(SOAK_SANITIZED || rss_end - rss_warm <= SOAK_RSS_SLACK_KB, fail,
               "resident size grew by %ld kB", rss_end - rss_warm);
    RANK_CHECK(fdnew == 0, fail, "%d descriptor(s) opened during the run still open", fdnew);
    if (tasks1 != tasks0)
        log_threads(rank, "after destroy");
    RANK_CHECK(tasks1 == tasks0, fail, "threads: %d before init, %d after destroy", tasks0, tasks1);
    RANK_CHECK(segs == 0, fail, "%d segment(s) of this rank left in /dev/shm", segs);
    return 0;
fail:
    return 1;
}

static soak_shared_t *shared_new(void)
{
    soak_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return sh == MAP_FAILED ? NULL : sh;
}

static int parent_segments_left(const soak_shared_t *sh)
{
    int left = 0;
    for (int r = 0; r < SOAK_RANKS; r++)
        if (sh->pid[r] > 0)
            left += count_segments_of(sh->pid[r], "after the run");
    return left;
}

static void test_soak(void **state)
{
    (void)state;
    soak_shared_t *sh = shared_new();
    assert_non_null(sh);
    sh->seconds = soak_seconds();
    harness_use_transport("shm", SOAK_CHUNK);
    harness_setenv("SHOAL_PROGRESS", NULL);
    /* The second communicator's id: its rank 0 is a child of this process. */
    assert_int_equal(shoal_get_unique_id(&sh->id2), SHOAL_OK);
    printf("# soak: %d ranks x %d threads, 4 communicators, %d s (SHOAL_SOAK_SECONDS)\n",
           SOAK_RANKS, SOAK_THREADS, sh->seconds);
    fflush(stdout);
    double t0 = now_s();
    int rc = harness_run_ranks(SOAK_RANKS, rank_soak, sh, sh->seconds + 120);
    printf("# soak: ranks finished in %.1f s\n", now_s() - t0);
    fflush(stdout);
    int left = parent_segments_left(sh);
    munmap(sh, sizeof(*sh));
    assert_int_equal(rc, 0);
    assert_int_equal(left, 0);
}

/* ---- A rank that dies ---------------------------------------------------- */

#define CRASH_RANK 2
#define CRASH_COUNT (1u << 18) /* float32: 1 MiB, many pieces in flight */

/* Ranks run all-reduces; after a few, CRASH_RANK kills itself while the
 * others are inside the next one (or about to enter it). The survivors
 * must see an error within SHOAL_TIMEOUT, then abort. */
static int rank_crash(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    soak_shared_t *sh = varg;
    sh->pid[rank] = (int)getpid();
    static fd_snap_t fds0, fds1;
    fd_snapshot(&fds0);
    int tasks0 = baseline_threads();
    shoal_comm_t world, sub;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &world) == SHOAL_OK, fail, "init");
    RANK_CHECK(shoal_comm_split(world, 0, rank, &sub) == SHOAL_OK, fail, "split");
    float *in = malloc(CRASH_COUNT * sizeof(float)), *out = malloc(CRASH_COUNT * sizeof(float));
    float *want = malloc(CRASH_COUNT * sizeof(float)), *tmp = malloc(CRASH_COUNT * sizeof(float));
    RANK_CHECK(in && out && want && tmp, fail, "buffers");
    harness_fill_exact(in, CRASH_COUNT, rank, SHOAL_FLOAT32, SHOAL_SUM);
    harness_expected(want, tmp, CRASH_COUNT, nranks, SHOAL_FLOAT32, SHOAL_SUM);
    for (int k = 0; k < 4; k++) {
        shoal_comm_t c = k % 2 ? sub : world;
        RANK_CHECK(shoal_allreduce(in, out, CRASH_COUNT, SHOAL_FLOAT32, SHOAL_SUM, c) == SHOAL_OK,
                   fail, "allreduce %d before the crash", k);
        RANK_CHECK(!memcmp(out, want, CRASH_COUNT * sizeof(float)), fail, "allreduce %d wrong", k);
    }
    if (rank == CRASH_RANK) {
        atomic_store(&sh->dying, 1);
        raise(SIGKILL);
    }
    /* Run until the loss shows: every call is bounded by SHOAL_TIMEOUT. */
    shoal_status_t s = SHOAL_OK;
    for (int k = 0; k < 1000 && s == SHOAL_OK; k++)
        s = shoal_allreduce(in, out, CRASH_COUNT, SHOAL_FLOAT32, SHOAL_SUM, world);
    printf("# rank %d: after rank %d died: %s (%s)\n", rank, CRASH_RANK, shoal_status_string(s),
           shoal_comm_last_error(world));
    fflush(stdout);
    RANK_CHECK(s == SHOAL_ERR_PEER || s == SHOAL_ERR_TIMEOUT, fail, "status after a peer died: %s",
               shoal_status_string(s));
    RANK_CHECK(shoal_comm_abort(sub) == SHOAL_OK, fail, "abort sub");
    RANK_CHECK(shoal_comm_abort(world) == SHOAL_OK, fail, "abort world");
    free(in);
    free(out);
    free(want);
    free(tmp);
    fd_snapshot(&fds1);
    double waited;
    int tasks1 = settled_threads(tasks0, &waited);
    int fdnew = fd_new(&fds0, &fds1, rank, "after abort");
    int segs = count_segments_of(getpid(), "survivor after abort");
    printf("# rank %d: fds %d -> %d (%d new), threads %d -> %d (settled in %.3f s), own "
           "segments left %d\n", rank, fds0.n, fds1.n, fdnew, tasks0, tasks1, waited, segs);
    fflush(stdout);
    RANK_CHECK(fdnew == 0, fail, "%d descriptor(s) opened since init still open", fdnew);
    RANK_CHECK(tasks1 == tasks0, fail, "threads: %d before init, %d after abort", tasks0, tasks1);
    RANK_CHECK(segs == 0, fail, "segments left");
    atomic_store(&sh->survivor_ok[rank], 1);
    return 0;
fail:
    return 1;
}

static void test_crash(void **state)
{
    (void)state;
    soak_shared_t *sh = shared_new();
    assert_non_null(sh);
    harness_use_transport("shm", SOAK_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "3s");
    /* The harness reports the killed rank as a failure: that one is meant. */
    int rc = harness_run_ranks(SOAK_RANKS, rank_crash, sh, 60);
    int left = parent_segments_left(sh);
    int dying = atomic_load(&sh->dying), ok = 1;
    for (int r = 0; r < SOAK_RANKS; r++)
        if (r != CRASH_RANK && !atomic_load(&sh->survivor_ok[r])) {
            printf("# survivor rank %d did not finish cleanly\n", r);
            ok = 0;
        }
    printf("# crash: harness %d, rank %d died on purpose: %s, segments left %d\n", rc,
           CRASH_RANK, dying ? "yes" : "no", left);
    fflush(stdout);
    munmap(sh, sizeof(*sh));
    harness_setenv("SHOAL_TIMEOUT", NULL);
    assert_int_equal(rc, -1);
    assert_true(dying);
    assert_true(ok);
    assert_int_equal(left, 0);
}

/* ---- A rank that dies while a communicator wires up ------------------ */

#define WIREUP_SPLITS 200

/* Kills its process as soon as a segment of the process shows in
 * /dev/shm, that is, in the middle of a communicator's wireup: after the
 * shared-memory transport created the segment and before the peers have
 * all mapped it (the last one removes the name). */
static void *kill_when_segment_shows(void *arg)
{
    soak_shared_t *sh = arg;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), SOAK_SHM_PREFIX "%ld-", (long)getpid());
    for (;;) {
        DIR *d = opendir("/dev/shm");
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
                atomic_store(&sh->dying, 1);
                raise(SIGKILL);
            }
        }
        closedir(d);
    }
    return NULL;
}

/* Every rank splits world again and again; CRASH_RANK dies inside one of
 * those splits, once its new segment exists. The survivors' split (or the
 * all-reduce on the new communicator) fails within SHOAL_TIMEOUT and they
 * abort everything. */
static int rank_crash_wireup(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    soak_shared_t *sh = varg;
    sh->pid[rank] = (int)getpid();
    shoal_comm_t world;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &world) == SHOAL_OK, fail, "init");
    if (rank == CRASH_RANK) {
        pthread_t th;
        RANK_CHECK(pthread_create(&th, NULL, kill_when_segment_shows, sh) == 0, fail, "watcher");
    }
    shoal_status_t s = SHOAL_OK;
    int k;
    for (k = 0; k < WIREUP_SPLITS && s == SHOAL_OK; k++) {
        shoal_comm_t sub = NULL;
        int64_t v = rank, all = 0;
        s = shoal_comm_split(world, 0, rank, &sub);
        if (s == SHOAL_OK) {
            s = shoal_allreduce(&v, &all, 1, SHOAL_INT64, SHOAL_SUM, sub);
            shoal_status_t sd = s == SHOAL_OK ? shoal_comm_destroy(sub) : shoal_comm_abort(sub);
            if (s == SHOAL_OK)
                s = sd;
        }
    }
    if (rank == CRASH_RANK) {
        /* The watcher never caught a segment: die here instead. */
        printf("# rank %d: %d splits and the watcher saw no segment of its own\n", rank, k);
        fflush(stdout);
        raise(SIGKILL);
    }
    printf("# rank %d: split %d failed after rank %d died: %s (%s)\n", rank, k - 1, CRASH_RANK,
           shoal_status_string(s), shoal_comm_last_error(world));
    fflush(stdout);
    RANK_CHECK(s != SHOAL_OK, fail, "no failure although rank %d died", CRASH_RANK);
    RANK_CHECK(shoal_comm_abort(world) == SHOAL_OK, fail, "abort world");
    RANK_CHECK(count_segments_of(getpid(), "survivor after abort") == 0, fail, "segments left");
    atomic_store(&sh->survivor_ok[rank], 1);
    return 0;
fail:
    return 1;
}

static void test_crash_wireup(void **state)
{
    (void)state;
    soak_shared_t *sh = shared_new();
    assert_non_null(sh);
    harness_use_transport("shm", SOAK_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "3s");
    int rc = harness_run_ranks(SOAK_RANKS, rank_crash_wireup, sh, 60);
    int ok = 1, left_dead = 0, left_alive = 0;
    for (int r = 0; r < SOAK_RANKS; r++) {
        if (r != CRASH_RANK && !atomic_load(&sh->survivor_ok[r])) {
            printf("# survivor rank %d did not finish cleanly\n", r);
            ok = 0;
        }
        if (sh->pid[r] <= 0)
            continue;
        char prefix[64];
        snprintf(prefix, sizeof(prefix), SOAK_SHM_PREFIX "%d-", sh->pid[r]);
        DIR *d = opendir("/dev/shm");
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, prefix, strlen(prefix)))
                continue;
            printf("# /dev/shm/%s of %s rank %d remains%s\n", e->d_name,
                   r == CRASH_RANK ? "the killed" : "surviving", r,
                   r == CRASH_RANK ? "; removed now" : "");
            *(r == CRASH_RANK ? &left_dead : &left_alive) += 1;
            if (r == CRASH_RANK) {
                char name[300];
                snprintf(name, sizeof(name), "/%s", e->d_name);
                shm_unlink(name);
            }
        }
        if (d)
            closedir(d);
    }
    printf("# crash in wireup: harness %d, killed in a wireup: %s, segments left: %d of the "
           "killed rank, %d of survivors\n", rc, atomic_load(&sh->dying) ? "yes" : "no",
           left_dead, left_alive);
    fflush(stdout);
    munmap(sh, sizeof(*sh));
    harness_setenv("SHOAL_TIMEOUT", NULL);
    assert_int_equal(rc, -1);
    assert_true(ok);
    assert_int_equal(left_alive, 0);
    /* The survivors' failed wireup removes the segment of a rank killed
     * before every local peer mapped it (its name comes from the init
     * exchange, see src/transport/shm.c). */
    assert_int_equal(left_dead, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak),
        cmocka_unit_test(test_crash),
        cmocka_unit_test(test_crash_wireup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
