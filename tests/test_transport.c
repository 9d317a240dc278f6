/* Transports under a real communicator: forked ranks form one with the
 * public API, then move messages through the internal endpoints
 * (comm->team.eps[peer]) of shm and tcp: every size class, many more messages
 * than slots, all pairs at once and pair by pair, and peers that leave. */
#include "harness.h"
#include "algos/prims.h"

#include "base/clock.h"
#include "base/config.h"
#include "core/comm.h"
#include "transport/transport.h"

#include <dirent.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 120
#define WAIT_NS (30ull * 1000000000ull)
#define STREAM_MSGS 150   /* per ordered pair: many times the slots */
#define PINGPONG_MSGS 24  /* per pair and direction */

typedef struct {
    const char *local_tl;  /* transport expected between ranks of one host */
    int hosts;             /* > 1: SHOAL_HOST_ID splits the ranks into this many hosts */
} xfer_arg_t;

static unsigned char pattern(int src, int dst, uint64_t seq, size_t i)
{
    uint64_t x = (uint64_t)src * 0x9e3779b97f4a7c15ull + (uint64_t)dst * 0xbf58476d1ce4e5b9ull +
                 seq * 0x94d049bb133111ebull + i * 0x2545f4914f6cdd1dull;
    return (unsigned char)(x >> 56);
}

/* Every size class: empty, tiny, odd, around shm's inline bound (32 B),
 * the stripe and chunk bounds. */
static size_t msg_size(const struct shoal_comm *comm, int src, int dst, uint64_t seq)
{
    size_t c = comm->team.chunk_size;
    const size_t sizes[] = {0, 1, 7, 31, 32, 33, 63, 64, 65, 1000, 1023, 1024, 1025, 2047,
                            2049, c / 3 + 1, c / 2 - 1, c / 2, c - 1, c};
    size_t n = sizeof(sizes) / sizeof(sizes[0]);
    return sizes[(seq + (uint64_t)src * 5 + (uint64_t)dst * 3) % n];
}

static void fill(void *buf, size_t len, int src, int dst, uint64_t seq)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(src, dst, seq, i);
}

static int check(const void *buf, size_t len, int src, int dst, uint64_t seq, size_t want)
{
    const unsigned char *p = buf;
    if (len != want) {
        fprintf(stderr, "# message %llu %d->%d: %zu B, expected %zu\n",
                (unsigned long long)seq, src, dst, len, want);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] != pattern(src, dst, seq, i)) {
            fprintf(stderr, "# message %llu %d->%d: byte %zu is %u, expected %u\n",
                    (unsigned long long)seq, src, dst, i, p[i], pattern(src, dst, seq, i));
            return -1;
        }
    }
    return 0;
}

/* Waits drive progress between tries: a short spin, then yield the core,
 * since ranks may outnumber cores. */
static void backoff(unsigned *spins)
{
    if (++*spins > 64)
        sched_yield();
}

static shoal_status_t wait_send(struct shoal_comm *comm, shoal_ep_t *ep, void **buf_p,
                                size_t *cap_p, uint64_t deadline)
{
    for (unsigned spins = 0;; backoff(&spins)) {
        shoal_status_t s = ep->ops->send_slot(ep, buf_p, cap_p);
        if (s != SHOAL_INPROGRESS)
            return s;
        s = shoal_team_progress(&comm->team);
        if (s != SHOAL_OK)
            return s;
        if (shoal_deadline_passed(deadline))
            return SHOAL_ERR_TIMEOUT;
    }
}

static shoal_status_t wait_recv(struct shoal_comm *comm, shoal_ep_t *ep, const void **buf_p,
                                size_t *len_p, uint64_t deadline)
{
    for (unsigned spins = 0;; backoff(&spins)) {
        shoal_status_t s = ep->ops->recv_slot(ep, buf_p, len_p, NULL);
        if (s != SHOAL_INPROGRESS)
            return s;
        s = shoal_team_progress(&comm->team);
        if (s != SHOAL_OK)
            return s;
        if (shoal_deadline_passed(deadline))
            return SHOAL_ERR_TIMEOUT;
    }
}

static int send_msg(struct shoal_comm *comm, int peer, uint64_t seq)
{
    shoal_ep_t *ep = comm->team.eps[peer];
    void *buf;
    size_t cap, len = msg_size(comm, comm->team.rank, peer, seq);
    shoal_status_t s = wait_send(comm, ep, &buf, &cap, shoal_deadline_after(WAIT_NS));
    RANK_CHECK(s == SHOAL_OK, fail, "send_slot to %d: %s", peer, shoal_status_string(s));
    RANK_CHECK(cap == comm->team.chunk_size, fail, "slot of %zu B", cap);
    fill(buf, len, comm->team.rank, peer, seq);
    s = ep->ops->send_post(ep, len, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "send_post to %d: %s", peer, shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static int recv_msg(struct shoal_comm *comm, int peer, uint64_t seq)
{
    shoal_ep_t *ep = comm->team.eps[peer];
    const void *buf;
    size_t len;
    shoal_status_t s = wait_recv(comm, ep, &buf, &len, shoal_deadline_after(WAIT_NS));
    RANK_CHECK(s == SHOAL_OK, fail, "recv_slot from %d: %s", peer, shoal_status_string(s));
    RANK_CHECK(check(buf, len, peer, comm->team.rank, seq, msg_size(comm, peer, comm->team.rank, seq)) == 0,
               fail, "content from %d", peer);
    s = ep->ops->recv_release(ep);
    RANK_CHECK(s == SHOAL_OK, fail, "recv_release from %d: %s", peer, shoal_status_string(s));
    return 0;
fail:
    return 1;
}

/* Every rank streams to every other at once, never waiting on one peer:
 * FIFOs fill up and wrap around in both directions of every pair. */
static int run_stream(struct shoal_comm *comm)
{
    int n = comm->team.nranks, me = comm->team.rank;
    uint64_t sent[64] = {0}, got[64] = {0};
    uint64_t deadline = shoal_deadline_after(WAIT_NS);
    int busy = 1;
    for (unsigned spins = 0; busy; backoff(&spins)) {
        busy = 0;
        for (int p = 0; p < n; p++) {
            if (p == me)
                continue;
            shoal_ep_t *ep = comm->team.eps[p];
            void *sbuf;
            size_t cap;
            while (sent[p] < STREAM_MSGS) {
                shoal_status_t s = ep->ops->send_slot(ep, &sbuf, &cap);
                if (s == SHOAL_INPROGRESS)
                    break;
                RANK_CHECK(s == SHOAL_OK, fail, "send_slot to %d: %s", p, shoal_status_string(s));
                size_t len = msg_size(comm, me, p, sent[p]);
                fill(sbuf, len, me, p, sent[p]);
                s = ep->ops->send_post(ep, len, NULL);
                RANK_CHECK(s == SHOAL_OK, fail, "send_post to %d: %s", p, shoal_status_string(s));
                sent[p]++;
            }
            const void *rbuf;
            size_t len;
            while (got[p] < STREAM_MSGS) {
                shoal_status_t s = ep->ops->recv_slot(ep, &rbuf, &len, NULL);
                if (s == SHOAL_INPROGRESS)
                    break;
                RANK_CHECK(s == SHOAL_OK, fail, "recv_slot from %d: %s", p, shoal_status_string(s));
                RANK_CHECK(check(rbuf, len, p, me, got[p], msg_size(comm, p, me, got[p])) == 0,
                           fail, "stream content from %d", p);
                s = ep->ops->recv_release(ep);
                RANK_CHECK(s == SHOAL_OK, fail, "recv_release: %s", shoal_status_string(s));
                got[p]++;
            }
            busy |= sent[p] < STREAM_MSGS || got[p] < STREAM_MSGS;
        }
        shoal_status_t s = shoal_team_progress(&comm->team);
        RANK_CHECK(s == SHOAL_OK, fail, "progress: %s", shoal_status_string(s));
        RANK_CHECK(!shoal_deadline_passed(deadline), fail, "stream did not finish");
    }
    return 0;
fail:
    return 1;
}

/* Partner of rank in round r of a round-robin tournament over an even
 * number of seats m (the circle method); seats >= nranks sit out. */
static int partner(int rank, int r, int m)
{
    int k = m - 1;
    if (rank == m - 1) {
        for (int j = 0; j < k; j++) {
            if ((2 * j) % k == r)
                return j;
        }
    }
    int p = ((r - rank) % k + k) % k;
    return p == rank ? m - 1 : p;
}

/* Each pair in turn: the lower rank sends, the higher answers, message by
 * message, so every message waits for the previous round trip. */
static int run_pingpong(struct shoal_comm *comm)
{
    int n = comm->team.nranks, me = comm->team.rank;
    int m = n + (n & 1);
    for (int r = 0; r < m - 1; r++) {
        int p = partner(me, r, m);
        if (p >= n)
            continue;
        for (uint64_t seq = 0; seq < PINGPONG_MSGS; seq++) {
            uint64_t tag = (uint64_t)r * 1000 + seq;
            if (me < p) {
                if (send_msg(comm, p, tag) || recv_msg(comm, p, tag))
                    return 1;
            } else {
                if (recv_msg(comm, p, tag) || send_msg(comm, p, tag))
                    return 1;
            }
        }
    }
    return 0;
}

/* Entries of /dev/shm that this process created. */
static int count_own_segments(void)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "shoal-shm-%ld-", (long)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        count += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return count;
}

static int rank_xfer(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    const xfer_arg_t *arg = varg;
    if (arg->hosts > 1) {
        char host[32];
        snprintf(host, sizeof(host), "host-%d", rank * arg->hosts / nranks);
        harness_setenv("SHOAL_HOST_ID", host);
    }
    RANK_CHECK(count_own_segments() == 0, fail, "a segment exists before init");
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    RANK_CHECK(count_own_segments() == 0, fail, "init left a segment in /dev/shm");
    for (int p = 0; p < nranks; p++) {
        if (p == rank) {
            RANK_CHECK(comm->team.eps[p] == NULL, fail, "endpoint to self");
            continue;
        }
        RANK_CHECK(comm->team.eps[p] != NULL, fail, "no endpoint to %d", p);
        const char *want = comm->host_of[p] == comm->host_of[rank] ? arg->local_tl : "tcp";
        RANK_CHECK(strcmp(comm->team.eps[p]->ops->name, want) == 0, fail,
                   "rank %d reached over %s, not %s", p, comm->team.eps[p]->ops->name, want);
    }
    if (run_stream(comm) || run_pingpong(comm) || run_stream(comm))
        return 1;
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void run_all_sizes(const xfer_arg_t *arg)
{
    for (int n = 2; n <= 8; n++) {
        int rc = harness_run_ranks(n, rank_xfer, (void *)arg, TEST_TIMEOUT_S);
        if (rc != 0)
            fprintf(stderr, "# failed with %d ranks\n", n);
        assert_int_equal(rc, 0);
    }
}

static int setup_small_chunks(void **state)
{
    harness_setenv("SHOAL_CHUNK_SIZE", "4096");
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
    harness_setenv("SHOAL_TCP_NSOCKS", NULL);
    harness_setenv("SHOAL_HOST_ID", NULL);
    harness_setenv("SHOAL_SHM_NSLOTS", NULL);
    harness_setenv("SHOAL_SHM_SPIN", NULL);
    harness_setenv("SHOAL_TIMEOUT", NULL);
    harness_setenv("SHOAL_TCP_CONNECT", NULL);
    harness_setenv("SHOAL_TEST_TCP_DROP", NULL);
    harness_setenv("SHOAL_TEST_TCP_DROP_LAST", NULL);
    return 0;
}

static void test_shm(void **state)
{
    xfer_arg_t arg = {.local_tl = "shm", .hosts = 1};
    run_all_sizes(&arg);
}

static void test_tcp_one_socket(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    harness_setenv("SHOAL_TCP_NSOCKS", "1");
    xfer_arg_t arg = {.local_tl = "tcp", .hosts = 1};
    run_all_sizes(&arg);
}

static void test_tcp_three_sockets(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    harness_setenv("SHOAL_TCP_NSOCKS", "3");
    xfer_arg_t arg = {.local_tl = "tcp", .hosts = 1};
    run_all_sizes(&arg);
}

/* The same matrix with one slot each way per peer, the floor of
 * SHOAL_TCP_MEM's rule. */
static void test_tcp_one_slot(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    harness_setenv("SHOAL_TCP_MEM", "1");
    xfer_arg_t arg = {.local_tl = "tcp", .hosts = 1};
    run_all_sizes(&arg);
    harness_setenv("SHOAL_TCP_MEM", NULL);
}

/* The same matrix with every pair connected at init. */
static void test_tcp_eager(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    harness_setenv("SHOAL_TCP_CONNECT", "eager");
    xfer_arg_t arg = {.local_tl = "tcp", .hosts = 1};
    run_all_sizes(&arg);
    harness_setenv("SHOAL_TCP_CONNECT", NULL);
}

/* tcp connects a peer the first time an operation needs it: nobody after
 * init, the two ring neighbours after a grouped exchange with them (both
 * ends dial at once: one connection per pair survives), and an all-reduce
 * over them still right. Eager: everyone at init. */
static shoal_tl_ctx_t *tcp_ctx_of(shoal_comm_t comm)
{
    for (int t = 0; t < comm->team.ntl; t++)
        if (comm->team.tl_ctx[t] && comm->team.tl_ctx[t]->ops == &shoal_tcp_ops)
            return comm->team.tl_ctx[t];
    return NULL;
}

typedef struct {
    int eager;
    atomic_int *checked; /* shared by the ranks: those past the check */
} lazy_arg_t;

static int rank_lazy(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    const lazy_arg_t *arg = varg;
    const int *eager = &arg->eager;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_tl_ctx_t *ctx = tcp_ctx_of(comm);
    RANK_CHECK((ctx != NULL) == (nranks > 1), fail, "tcp context %p with %d ranks",
               (void *)ctx, nranks);
    size_t want = *eager ? (size_t)nranks - 1 : 0;
    RANK_CHECK(!ctx || shoal_tcp_peers_up(ctx) == want, fail, "%zu peers up after init, "
               "want %zu", shoal_tcp_peers_up(ctx), want);
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    int32_t out[2] = {rank, -rank}, in[2] = {-1, -1};
    if (nranks > 1) {
        RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
        shoal_send(out, 1, SHOAL_INT32, right, comm);
        shoal_send(out + 1, 1, SHOAL_INT32, left, comm);
        shoal_recv(in, 1, SHOAL_INT32, left, comm);
        shoal_recv(in + 1, 1, SHOAL_INT32, right, comm);
        s = shoal_group_end();
        RANK_CHECK(s == SHOAL_OK, fail, "exchange: %s", shoal_status_string(s));
        RANK_CHECK(in[0] == left && in[1] == -right, fail, "got %d %d from %d %d", in[0],
                   in[1], left, right);
        size_t nbrs = nranks > 2 ? 2 : 1;
        want = *eager ? (size_t)nranks - 1 : nbrs;
        RANK_CHECK(shoal_tcp_peers_up(ctx) == want, fail, "%zu peers up after the exchange, "
                   "want %zu", shoal_tcp_peers_up(ctx), want);
    }
    /* Slots by the rule of SHOAL_TCP_MEM, in the order the peers came. */
    if (ctx) {
        const shoal_config_t *conf = shoal_config_get();
        size_t chunk = comm->team.chunk_size, slots = 0;
        for (size_t k = 1; k <= shoal_tcp_peers_up(ctx); k++)
            slots += 2 * chunk * shoal_tcp_slots_rule(conf->tcp.mem, chunk, conf->tcp.nslots, k);
        RANK_CHECK(shoal_tcp_slot_bytes(ctx) == slots, fail, "%zu B of slots, want %zu",
                   shoal_tcp_slot_bytes(ctx), slots);
    }
    /* The all-reduce below connects more peers: nobody starts it before
     * every rank has looked at its own. */
    atomic_fetch_add(arg->checked, 1);
    uint64_t give_up = shoal_deadline_after(WAIT_NS);
    while (atomic_load(arg->checked) < nranks && !shoal_deadline_passed(give_up))
        sched_yield();
    RANK_CHECK(atomic_load(arg->checked) == nranks, fail, "the other ranks never checked");
    int64_t sum = rank, total = (int64_t)nranks * (nranks - 1) / 2;
    s = shoal_allreduce(&sum, &sum, 1, SHOAL_INT64, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK && sum == total, fail, "allreduce: %s, %lld want %lld",
               shoal_status_string(s), (long long)sum, (long long)total);
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_tcp_lazy(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    /* 4 KiB pieces, 2 slots: the first peer gets both each way, the
     * others one, which must move data as well. */
    harness_setenv("SHOAL_TCP_MEM", "16k");
    atomic_int *checked = mmap(NULL, sizeof(*checked), PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(checked != MAP_FAILED);
    for (int eager = 0; eager <= 1; eager++) {
        harness_setenv("SHOAL_TCP_CONNECT", eager ? "eager" : "lazy");
        for (int n = 1; n <= 8; n++) {
            atomic_store(checked, 0);
            lazy_arg_t arg = {.eager = eager, .checked = checked};
            int rc = harness_run_ranks(n, rank_lazy, &arg, TEST_TIMEOUT_S);
            if (rc != 0)
                fprintf(stderr, "# failed with %d ranks, %s\n", n, eager ? "eager" : "lazy");
            assert_int_equal(rc, 0);
        }
    }
    harness_setenv("SHOAL_TCP_CONNECT", NULL);
    harness_setenv("SHOAL_TCP_MEM", NULL);
    munmap(checked, sizeof(*checked));
}

/* Lazy dials whose handshake the peer drops midway (a peer away too long
 * drops the handshakes it could not serve in time; SHOAL_TEST_TCP_DROP
 * drops the first ones at once) are made again until they hold: a ring
 * exchange and an all-reduce come out right, and the ranks made at least
 * one dial again between them. */
typedef struct {
    atomic_int *redials; /* shared by the ranks */
} redial_arg_t;

static int rank_redial(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    const redial_arg_t *arg = varg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_tl_ctx_t *ctx = tcp_ctx_of(comm);
    RANK_CHECK(ctx && shoal_tcp_peers_up(ctx) == 0, fail, "lazy tcp connected at init");
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    int32_t out = rank, in = -1;
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
    shoal_send(&out, 1, SHOAL_INT32, right, comm);
    shoal_recv(&in, 1, SHOAL_INT32, left, comm);
    s = shoal_group_end();
    RANK_CHECK(s == SHOAL_OK && in == left, fail, "exchange: %s, got %d from %d",
               shoal_status_string(s), in, left);
    int64_t sum = rank, total = (int64_t)nranks * (nranks - 1) / 2;
    s = shoal_allreduce(&sum, &sum, 1, SHOAL_INT64, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK && sum == total, fail, "allreduce: %s, %lld want %lld",
               shoal_status_string(s), (long long)sum, (long long)total);
    atomic_fetch_add(arg->redials, (int)shoal_tcp_redials(ctx));
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_tcp_lazy_redial(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    harness_setenv("SHOAL_TCP_CONNECT", "lazy");
    atomic_int *redials = mmap(NULL, sizeof(*redials), PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(redials != MAP_FAILED);
    /* knob: SHOAL_TEST_TCP_DROP drops handshakes midway;
     * SHOAL_TEST_TCP_DROP_LAST closes a set's last socket once its
     * handshake is through, so that the set never completes and its
     * dialer, waiting for the answer on socket 0, must notice. */
    static const struct {
        int nranks;
        const char *knob, *drops;
    } cases[] = {{2, "SHOAL_TEST_TCP_DROP", "1"},      {2, "SHOAL_TEST_TCP_DROP", "3"},
                 {3, "SHOAL_TEST_TCP_DROP", "1"},      {5, "SHOAL_TEST_TCP_DROP", "2"},
                 {2, "SHOAL_TEST_TCP_DROP_LAST", "1"}, {3, "SHOAL_TEST_TCP_DROP_LAST", "2"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        harness_setenv(cases[i].knob, cases[i].drops);
        atomic_store(redials, 0);
        redial_arg_t arg = {.redials = redials};
        int rc = harness_run_ranks(cases[i].nranks, rank_redial, &arg, TEST_TIMEOUT_S);
        if (rc != 0 || atomic_load(redials) == 0)
            fprintf(stderr, "# %d ranks, %s=%s: rc %d, %d dials again\n", cases[i].nranks,
                    cases[i].knob, cases[i].drops, rc, atomic_load(redials));
        harness_setenv(cases[i].knob, NULL);
        assert_int_equal(rc, 0);
        assert_true(atomic_load(redials) > 0);
    }
    harness_setenv("SHOAL_TCP_CONNECT", NULL);
    munmap(redials, sizeof(*redials));
}

/* Whether process pid has exited (gone, or a zombie nobody reaped yet). */
static int exited(uint32_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return !paren || paren[1] == '\0' || paren[2] == 'Z' || paren[2] == 'X';
}

/* The last rank leaves right after init, before anybody connected to it;
 * once it is gone the others' all-reduce, whose ring needs it, fails with
 * an error that names it, within the deadline instead of hanging. */
static int rank_dies_early(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    int victim = nranks - 1;
    if (rank == victim)
        _exit(0); /* no destroy, no goodbye */
    uint64_t give_up = shoal_deadline_after(WAIT_NS);
    while (!exited(comm->pids[victim]) && !shoal_deadline_passed(give_up))
        sched_yield();
    RANK_CHECK(exited(comm->pids[victim]), fail, "rank %d never exited", victim);
    int64_t x = rank;
    s = shoal_allreduce(&x, &x, 1, SHOAL_INT64, SHOAL_SUM, comm);
    RANK_CHECK(s != SHOAL_OK, fail, "the all-reduce succeeded without rank %d", victim);
    char name[32];
    snprintf(name, sizeof(name), "rank %d", victim);
    const char *why = shoal_comm_last_error(comm);
    RANK_CHECK(why && strstr(why, name), fail, "the error does not name %s: %s", name,
               why ? why : "(none)");
    fprintf(stderr, "# rank %d: %s: %s\n", rank, shoal_status_string(s), why);
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void test_tcp_dies_before_connect(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    harness_setenv("SHOAL_TIMEOUT", "20s");
    for (int n = 2; n <= 3; n++)
        assert_int_equal(harness_run_ranks(n, rank_dies_early, NULL, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

/* Rank 1 lives on but stays out of shoal: rank 0's all-reduce, which
 * needs it, ends at the deadline with an error that names it, and then
 * lets it go. */
static int rank_stays_away(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    atomic_int *released = varg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    if (rank == 1) {
        uint64_t give_up = shoal_deadline_after(WAIT_NS);
        while (!atomic_load(released) && !shoal_deadline_passed(give_up))
            sched_yield();
        RANK_CHECK(atomic_load(released), fail, "rank 0 never let rank 1 go");
        shoal_comm_abort(comm);
        return 0;
    }
    int64_t x = rank;
    s = shoal_allreduce(&x, &x, 1, SHOAL_INT64, SHOAL_SUM, comm);
    atomic_store(released, 1);
    RANK_CHECK(s != SHOAL_OK, fail, "the all-reduce succeeded without rank 1");
    const char *why = shoal_comm_last_error(comm);
    fprintf(stderr, "# rank 0: %s: %s\n", shoal_status_string(s), why);
    RANK_CHECK(why && strstr(why, "rank 1"), fail, "the error does not name rank 1: %s",
               why ? why : "(none)");
    shoal_comm_abort(comm);
    return 0;
fail:
    atomic_store(released, 1);
    return 1;
}

static void test_tcp_peer_stays_away(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    harness_setenv("SHOAL_TIMEOUT", "3s");
    atomic_int *released = mmap(NULL, sizeof(*released), PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(released != MAP_FAILED);
    atomic_store(released, 0);
    assert_int_equal(harness_run_ranks(2, rank_stays_away, released, TEST_TIMEOUT_S), 0);
    munmap(released, sizeof(*released));
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

/* Two pretend hosts: shm inside each, tcp between them, in one communicator. */
static void test_mixed_hosts(void **state)
{
    xfer_arg_t arg = {.local_tl = "shm", .hosts = 2};
    assert_int_equal(harness_run_ranks(5, rank_xfer, &arg, TEST_TIMEOUT_S), 0);
    assert_int_equal(harness_run_ranks(8, rank_xfer, &arg, TEST_TIMEOUT_S), 0);
}

/* Default-sized chunks, where tcp stripes are tens of kilobytes. */
static void test_large_chunks(void **state)
{
    harness_setenv("SHOAL_CHUNK_SIZE", "128k");
    xfer_arg_t shm = {.local_tl = "shm", .hosts = 1};
    assert_int_equal(harness_run_ranks(3, rank_xfer, &shm, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    xfer_arg_t tcp = {.local_tl = "tcp", .hosts = 1};
    assert_int_equal(harness_run_ranks(3, rank_xfer, &tcp, TEST_TIMEOUT_S), 0);
}

/* Rank 0 sends until its own slots are full because every buffer on the
 * way is, while rank 1 does not read yet; then it flushes and destroys its
 * communicator at once. Rank 1 must still get every message. */
static int rank_flush(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_ep_t *ep = comm->team.eps[1 - rank];
    uint64_t count = 0;
    if (rank == 0) {
        void *buf;
        size_t cap;
        while ((s = ep->ops->send_slot(ep, &buf, &cap)) == SHOAL_OK) {
            size_t len = msg_size(comm, 0, 1, count);
            fill(buf, len, 0, 1, count);
            s = ep->ops->send_post(ep, len, NULL);
            RANK_CHECK(s == SHOAL_OK, fail, "send_post: %s", shoal_status_string(s));
            count++;
        }
        RANK_CHECK(s == SHOAL_INPROGRESS, fail, "send_slot: %s", shoal_status_string(s));
    }
    /* Rank 1 starts reading only now, when rank 0 holds unsent messages. */
    s = shoal_bootstrap_bcast(comm->bootstrap, &count, sizeof(count), 0);
    RANK_CHECK(s == SHOAL_OK, fail, "bcast: %s", shoal_status_string(s));
    if (rank == 0) {
        uint64_t deadline = shoal_deadline_after(WAIT_NS);
        unsigned spins = 0;
        while ((s = ep->ops->flush(ep)) == SHOAL_INPROGRESS && !shoal_deadline_passed(deadline)) {
            s = shoal_team_progress(&comm->team);
            RANK_CHECK(s == SHOAL_OK, fail, "progress: %s", shoal_status_string(s));
            backoff(&spins);
        }
        RANK_CHECK(s == SHOAL_OK, fail, "flush: %s", shoal_status_string(s));
    } else {
        for (uint64_t seq = 0; seq < count; seq++) {
            if (recv_msg(comm, 0, seq))
                return 1;
        }
    }
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_flush_then_destroy(void **state)
{
    harness_setenv("SHOAL_CHUNK_SIZE", "128k");
    assert_int_equal(harness_run_ranks(2, rank_flush, NULL, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    assert_int_equal(harness_run_ranks(2, rank_flush, NULL, TEST_TIMEOUT_S), 0);
}

/* The shm doorbell: rank 0 sleeps in the transport (its sleep op, long
 * past any spin budget, with a 20 s timeout) waiting for something rank 1
 * does only once it sees rank 0 asleep: a post (rank 0 waits to receive)
 * and a released slot (rank 0 waits for room). Each sleep must end when
 * rank 1 acts, long before its timeout: a peer that forgot to ring would
 * leave it asleep for the whole 20 s. A rank that has just rung a sleeper
 * may decline to sleep for a while (SHM_RANG_SPIN_NS): the wait then
 * yields and asks again, as the collectives' waits do. */
#define BELL_ROUNDS 6
#define BELL_SLEEP_NS (20ull * 1000000000ull)
#define BELL_LATE_NS (5ull * 1000000000ull)

/* Sleep until ready() says so; fails on a sleep that outlived BELL_LATE_NS
 * or a transport that would not sleep at all. */
static int bell_wait(struct shoal_comm *comm, shoal_ep_t *ep, int for_room)
{
    int slept = 0;
    for (;;) {
        shoal_status_t s;
        if (for_room) {
            void *buf;
            size_t cap;
            s = ep->ops->send_slot(ep, &buf, &cap);
        } else {
            const void *buf;
            size_t len;
            s = ep->ops->recv_slot(ep, &buf, &len, NULL);
        }
        if (s == SHOAL_OK)
            break;
        RANK_CHECK(s == SHOAL_INPROGRESS, fail, "slot: %s", shoal_status_string(s));
        uint64_t t0 = shoal_now_ns();
        s = shoal_team_sleep(&comm->team, BELL_SLEEP_NS, BELL_SLEEP_NS);
        if (s == SHOAL_INPROGRESS) {
            sched_yield();
            continue;
        }
        RANK_CHECK(s == SHOAL_OK, fail, "the transport would not sleep: %s",
                   shoal_status_string(s));
        RANK_CHECK(shoal_now_ns() - t0 < BELL_LATE_NS, fail, "slept %.1f s: rank 1 never rang",
                   (double)(shoal_now_ns() - t0) / 1e9);
        slept++;
    }
    RANK_CHECK(slept > 0, fail, "the wait never slept (rank 1 acted too soon)");
    return 0;
fail:
    return 1;
}

/* Whether the main thread of process pid is blocked in a futex wait on
 * shared memory (FUTEX_WAIT without FUTEX_PRIVATE_FLAG): in rank 0 of the
 * doorbell test, only the shm doorbell's sleep waits so (threads of one
 * process wait on private futexes). /proc/PID/task/TID/syscall names the
 * call a blocked thread is in, and reads "running" while it runs. Where
 * it cannot be read, wchan, which names only the kernel function a thread
 * sleeps in, is asked for a futex wait of either kind. 1 yes, 0 no (or
 * not yet seen), -1 when neither file can be opened. */
static int in_shared_futex_wait(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        long nr;
        unsigned long addr, op;
        int n = fscanf(f, "%ld %lx %lx", &nr, &addr, &op);
        fclose(f);
        if (n == 3)
            return nr == SYS_futex && (op & FUTEX_CMD_MASK) == FUTEX_WAIT &&
                   !(op & FUTEX_PRIVATE_FLAG);
        if (n != EOF)
            return 0; /* "running", or not in a system call */
    }
    snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", (int)pid, (int)pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    char fn[128] = "";
    int n = fscanf(f, "%127s", fn);
    fclose(f);
    return n == 1 && strstr(fn, "futex") != NULL;
}

/* Rank 1's side of each step: returns once rank 0 (process pid) sleeps in
 * the doorbell, so that only a ring from what rank 1 does next can wake it
 * before its timeout. Fails when rank 0 does not sleep within WAIT_NS, or
 * when /proc cannot tell. */
static int wait_asleep(pid_t pid)
{
    uint64_t deadline = shoal_deadline_after(WAIT_NS);
    int r;
    while ((r = in_shared_futex_wait(pid)) == 0) {
        RANK_CHECK(!shoal_deadline_passed(deadline), fail,
                   "rank 0 (pid %d) never slept in the doorbell, as far as "
                   "/proc/%d/task/%d/syscall or wchan tell",
                   (int)pid, (int)pid, (int)pid);
        sched_yield();
    }
    RANK_CHECK(r == 1, fail, "cannot read /proc/%d/task/%d/syscall or wchan", (int)pid,
               (int)pid);
    return 0;
fail:
    return 1;
}

/* The doorbell tests' start: a communicator of 2 ranks over shm, its
 * endpoint to the other rank, and rank 0's pid. Rank 1 watches rank 0's
 * process through /proc: rank 0 tells its pid (once past init, so that no
 * wait of init's is taken for the doorbell's) and lets rank 1 read its
 * system calls where Yama allows only ancestors (the call fails harmlessly
 * without Yama). */
static int bell_start(int rank, int nranks, const shoal_unique_id_t *id, shoal_comm_t *comm_p,
                      shoal_ep_t **ep_p, pid_t *pid0_p)
{
    shoal_status_t s = shoal_comm_init(nranks, id, rank, comm_p);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_ep_t *ep = (*comm_p)->team.eps[1 - rank];
    RANK_CHECK(strcmp(ep->ops->name, "shm") == 0, fail, "reached over %s", ep->ops->name);
    *ep_p = ep;
    *pid0_p = getpid();
    if (rank == 0)
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    s = shoal_bootstrap_bcast((*comm_p)->bootstrap, pid0_p, sizeof(*pid0_p), 0);
    RANK_CHECK(s == SHOAL_OK, fail, "bcast: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static int rank_doorbell(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_ep_t *ep;
    pid_t pid0;
    if (bell_start(rank, nranks, id, &comm, &ep, &pid0))
        return 1;
    shoal_status_t s;
    uint64_t seq = 0;
    for (int round = 0; round < BELL_ROUNDS; round++) {
        /* Rank 0 waits for data, then fills rank 1's FIFO and waits for room. */
        if (rank == 1) {
            if (wait_asleep(pid0) || send_msg(comm, 0, seq))
                return 1;
        } else if (bell_wait(comm, ep, 0) || recv_msg(comm, 1, seq)) {
            return 1;
        }
        seq++;
        uint64_t filled = 0;
        if (rank == 0) {
            void *buf;
            size_t cap;
            while (ep->ops->send_slot(ep, &buf, &cap) == SHOAL_OK) {
                s = ep->ops->send_post(ep, 0, NULL);
                RANK_CHECK(s == SHOAL_OK, fail, "send_post: %s", shoal_status_string(s));
                filled++;
            }
            s = shoal_bootstrap_bcast(comm->bootstrap, &filled, sizeof(filled), 0);
            RANK_CHECK(s == SHOAL_OK, fail, "bcast: %s", shoal_status_string(s));
            if (bell_wait(comm, ep, 1))
                return 1;
        } else {
            s = shoal_bootstrap_bcast(comm->bootstrap, &filled, sizeof(filled), 0);
            RANK_CHECK(s == SHOAL_OK, fail, "bcast: %s", shoal_status_string(s));
            if (wait_asleep(pid0))
                return 1;
            for (uint64_t i = 0; i < filled; i++) {
                const void *buf;
                size_t len;
                s = wait_recv(comm, ep, &buf, &len, shoal_deadline_after(WAIT_NS));
                RANK_CHECK(s == SHOAL_OK && len == 0, fail, "empty message %llu: %s",
                           (unsigned long long)i, shoal_status_string(s));
                s = ep->ops->recv_release(ep);
                RANK_CHECK(s == SHOAL_OK, fail, "recv_release: %s", shoal_status_string(s));
            }
        }
        s = shoal_bootstrap_barrier(comm->bootstrap);
        RANK_CHECK(s == SHOAL_OK, fail, "barrier: %s", shoal_status_string(s));
    }
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_shm_doorbell(void **state)
{
    assert_int_equal(harness_run_ranks(2, rank_doorbell, NULL, TEST_TIMEOUT_S), 0);
}

/* A rank that has just woken a sleeping peer keeps polling instead of
 * sleeping, under SHOAL_SHM_SPIN=auto: the peer it woke answers only once
 * it is up, and were the ringer asleep by then, the two would hand one
 * wake-up back and forth per exchange. Rank 0 sleeps until rank 1 posts;
 * rank 1's sleep right after that post declines (unless rank 1 was held
 * up past RANG_NS), and sleeps once RANG_NS has passed. With the spin set
 * by hand, or on a host of one CPU (a synthetic topology), where the
 * polling would take the CPU from the ranks sharing it, rank 1 sleeps at
 * once. */
#define RANG_NS 1000000ull /* shm.c's SHM_RANG_SPIN_NS */

static int rank_rang(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    int spin_auto = *(const int *)arg;
    shoal_comm_t comm;
    shoal_ep_t *ep;
    pid_t pid0;
    if (bell_start(rank, nranks, id, &comm, &ep, &pid0))
        return 1;
    shoal_status_t s;
    if (rank == 0) {
        if (bell_wait(comm, ep, 0) || recv_msg(comm, 1, 0))
            return 1;
    } else {
        if (wait_asleep(pid0))
            return 1;
        uint64_t rang = shoal_now_ns();
        if (send_msg(comm, 0, 0))
            return 1;
        s = shoal_team_sleep(&comm->team, BELL_SLEEP_NS, 10000000u);
        uint64_t late = shoal_now_ns() - rang;
        if (spin_auto)
            RANK_CHECK(s == SHOAL_INPROGRESS || late >= RANG_NS, fail,
                       "slept %.0f us after waking rank 0: %s", (double)late * 1e-3,
                       shoal_status_string(s));
        else
            RANK_CHECK(s == SHOAL_OK, fail, "would not sleep: %s", shoal_status_string(s));
        struct timespec nap = {0, (long)RANG_NS + 500000};
        nanosleep(&nap, NULL);
        s = shoal_team_sleep(&comm->team, BELL_SLEEP_NS, 10000000u);
        RANK_CHECK(s == SHOAL_OK, fail, "would not sleep %.1f ms after waking rank 0: %s",
                   (double)(shoal_now_ns() - rang) * 1e-6, shoal_status_string(s));
    }
    s = shoal_bootstrap_barrier(comm->bootstrap);
    RANK_CHECK(s == SHOAL_OK, fail, "barrier: %s", shoal_status_string(s));
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_shm_rang(void **state)
{
    int spin_auto = 1;
    assert_int_equal(harness_run_ranks(2, rank_rang, &spin_auto, TEST_TIMEOUT_S), 0);
    spin_auto = 0;
    harness_setenv("SHOAL_SHM_SPIN", "1ms");
    assert_int_equal(harness_run_ranks(2, rank_rang, &spin_auto, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_SHM_SPIN", NULL);
    harness_setenv("SHOAL_TOPO_SYNTHETIC", "pack:1 core:1 pu:1");
    harness_setenv("SHOAL_CPU_BIND", "off");
    assert_int_equal(harness_run_ranks(2, rank_rang, &spin_auto, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_TOPO_SYNTHETIC", NULL);
    harness_setenv("SHOAL_CPU_BIND", NULL);
}

/* sched_yield() as this program's waits call it: counted, then libc's
 * system call. The definition here stands in for libc's in the whole
 * program, shoal's waits included. */
static atomic_int yields;

int sched_yield(void)
{
    atomic_fetch_add_explicit(&yields, 1, memory_order_relaxed);
    return (int)syscall(SYS_sched_yield);
}

/* One check of a wait's turns (shoal_prims_idle polls 64 times between
 * checks): whether that check yielded, for a wait that began waited_ns
 * before it (0: at the check). */
static int idle_yields(shoal_team_t *team, uint64_t waited_ns, int *yielded)
{
    shoal_idle_t w = {0, 0};
    int before = atomic_load(&yields);
    for (int turn = 0; turn < 64; turn++) {
        if (turn == 63 && waited_ns)
            w.since_ns = shoal_now_ns() - waited_ns;
        shoal_status_t s = shoal_prims_idle(team, shoal_deadline_after(10000000000ull), &w);
        if (s != SHOAL_OK)
            return 1;
    }
    *yielded = atomic_load(&yields) > before;
    return 0;
}

/* A wait yields the core from its first check where the host's ranks
 * outnumber its CPUs, since the rank it waits for may need the CPU; where
 * they do not, only once it has lasted team->yield_after_ns, since there a
 * yield is only a system call in the way of the answer. The host is a
 * synthetic topology of 1 or 2 CPUs; the shm sleep is put off past the
 * test by SHOAL_SHM_SPIN. */
static int rank_yield(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    int crowded = *(const int *)arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_team_t *team = &comm->team;
    uint64_t after = team->yield_after_ns;
    RANK_CHECK(crowded ? after == 0 : after > 0, fail, "%s host: yield after %llu ns",
               crowded ? "crowded" : "uncrowded", (unsigned long long)after);
    int at_once, later;
    RANK_CHECK(idle_yields(team, 0, &at_once) == 0 && idle_yields(team, after + 1, &later) == 0,
               fail, "an idle turn failed");
    RANK_CHECK(at_once == crowded, fail, "%s host: the first check %s", crowded ? "crowded" :
               "uncrowded", at_once ? "yielded" : "did not yield");
    RANK_CHECK(later, fail, "no yield after a wait of %llu ns", (unsigned long long)after + 1);
    s = shoal_bootstrap_barrier(comm->bootstrap);
    RANK_CHECK(s == SHOAL_OK, fail, "barrier: %s", shoal_status_string(s));
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_wait_yield(void **state)
{
    harness_setenv("SHOAL_SHM_SPIN", "60s");
    harness_setenv("SHOAL_CPU_BIND", "off");
    int crowded = 0;
    harness_setenv("SHOAL_TOPO_SYNTHETIC", "pack:1 core:2 pu:1");
    assert_int_equal(harness_run_ranks(2, rank_yield, &crowded, TEST_TIMEOUT_S), 0);
    crowded = 1;
    harness_setenv("SHOAL_TOPO_SYNTHETIC", "pack:1 core:1 pu:1");
    assert_int_equal(harness_run_ranks(2, rank_yield, &crowded, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_TOPO_SYNTHETIC", NULL);
    harness_setenv("SHOAL_CPU_BIND", NULL);
    harness_setenv("SHOAL_SHM_SPIN", NULL);
}

/* Rank 1 runs with different transport settings (the variable and value
 * passed), so wireup fails; whatever it had created must be gone. */
static int rank_mismatch(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    const char *const *setting = varg;
    if (rank == 1)
        harness_setenv(setting[0], setting[1]);
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s != SHOAL_OK, fail, "init succeeded with %s=%s on rank 1", setting[0], setting[1]);
    RANK_CHECK(count_own_segments() == 0, fail, "a failed init left a segment in /dev/shm");
    return 0;
fail:
    return 1;
}

static void test_mismatched_settings(void **state)
{
    /* A rank that gives up during wireup is noticed by the others when they
     * next need it; one that dials a rank already gone retries until the
     * deadline, which this keeps short. */
    harness_setenv("SHOAL_TIMEOUT", "5s");
    const char *shm_slots[] = {"SHOAL_SHM_NSLOTS", "5"};
    assert_int_equal(harness_run_ranks(3, rank_mismatch, shm_slots, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    const char *tcp_socks[] = {"SHOAL_TCP_NSOCKS", "4"};
    assert_int_equal(harness_run_ranks(3, rank_mismatch, tcp_socks, TEST_TIMEOUT_S), 0);
}

typedef enum { LEAVE_WHILE_AWAITED, LEAVE_WHILE_FED } leave_mode_t;

/* Rank 1 takes one message, then its process ends without destroying the
 * communicator. Rank 0 either waits for a message from it or keeps sending
 * to it; both must end in SHOAL_ERR_PEER, not in a hang or a timeout. */
static int rank_leave(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    leave_mode_t mode = *(const leave_mode_t *)varg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    if (rank == 1) {
        if (recv_msg(comm, 0, 0))
            return 1;
        fflush(NULL);
        _exit(0);
    }
    if (send_msg(comm, 1, 0))
        return 1;
    uint64_t deadline = shoal_deadline_after(WAIT_NS);
    shoal_ep_t *ep = comm->team.eps[1];
    if (mode == LEAVE_WHILE_AWAITED) {
        const void *buf;
        size_t len;
        s = wait_recv(comm, ep, &buf, &len, deadline);
    } else {
        while (s == SHOAL_OK) {
            void *buf;
            size_t cap;
            s = wait_send(comm, ep, &buf, &cap, deadline);
            if (s == SHOAL_OK)
                s = ep->ops->send_post(ep, cap, NULL);
        }
    }
    RANK_CHECK(s == SHOAL_ERR_PEER, fail, "got %s, expected %s", shoal_status_string(s),
               shoal_status_string(SHOAL_ERR_PEER));
    /* The loss is sticky: progress keeps reporting it. */
    s = shoal_team_progress(&comm->team);
    RANK_CHECK(s == SHOAL_ERR_PEER, fail, "progress after the loss: %s", shoal_status_string(s));
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void test_tcp_peer_leaves(void **state)
{
    harness_setenv("SHOAL_SHM_ENABLE", "n");
    leave_mode_t mode = LEAVE_WHILE_AWAITED;
    assert_int_equal(harness_run_ranks(2, rank_leave, &mode, TEST_TIMEOUT_S), 0);
    mode = LEAVE_WHILE_FED;
    assert_int_equal(harness_run_ranks(2, rank_leave, &mode, TEST_TIMEOUT_S), 0);
}

/* Two shm contexts of one process, as ranks 0 and 1 of one host, driven
 * through the ops table directly: the name leaves /dev/shm as soon as the
 * peer mapped it, and a context closed before that leaves nothing either. */
typedef struct {
    struct shoal_comm comm;
    int host_of[2];
    shoal_tl_ctx_t *ctx;
    unsigned char blob[SHOAL_TL_ADDR_MAX];
    size_t blob_len;
} fake_rank_t;

/* What the init exchange would have given both fake ranks. */
static uint32_t fake_pids[2];
static uint8_t fake_tags[2][SHOAL_TAG_BYTES];

static void fake_open(fake_rank_t *r, int rank)
{
    memset(r, 0, sizeof(*r));
    r->comm.team.rank = rank;
    r->comm.team.nranks = 2;
    r->comm.team.chunk_size = 4096;
    r->comm.host_of = r->host_of;
    fake_pids[rank] = (uint32_t)getpid();
    for (size_t i = 0; i < SHOAL_TAG_BYTES; i++)
        fake_tags[rank][i] = (uint8_t)harness_mix((uint32_t)(rank * 97 + (int)i) ^
                                                  (uint32_t)getpid());
    r->comm.pids = fake_pids;
    r->comm.tags = fake_tags;
    shoal_tl_params_t par = {.rank = rank, .nranks = 2, .chunk_size = r->comm.team.chunk_size,
                             .host_of = r->host_of, .pids = fake_pids, .tags = fake_tags};
    assert_int_equal(shoal_shm_ops.open(&par, &r->ctx), SHOAL_OK);
    r->blob_len = sizeof(r->blob);
    assert_int_equal(shoal_shm_ops.addr_pack(r->ctx, r->blob, &r->blob_len), SHOAL_OK);
}

static void test_shm_segment_lifetime(void **state)
{
    /* One thread plays both ranks, so ready must not wait for the other:
     * a fixed spin leaves the probe of the sleep out. */
    harness_setenv("SHOAL_SHM_SPIN", "100us");
    uint64_t deadline = shoal_deadline_after(WAIT_NS);
    fake_rank_t r[2];
    shoal_ep_t *ep[2];
    fake_open(&r[0], 0);
    fake_open(&r[1], 1);
    assert_int_equal(count_own_segments(), 2);

    /* A blob whose size disagrees with the segment is refused. */
    unsigned char bad[SHOAL_TL_ADDR_MAX];
    memcpy(bad, r[1].blob, r[1].blob_len);
    bad[8] ^= 0x40; /* the size field */
    assert_int_not_equal(shoal_shm_ops.connect(r[0].ctx, 1, bad, r[1].blob_len, deadline, &ep[0]),
                         SHOAL_OK);

    assert_int_equal(shoal_shm_ops.connect(r[0].ctx, 1, r[1].blob, r[1].blob_len, deadline,
                                           &ep[0]), SHOAL_OK);
    assert_int_equal(count_own_segments(), 1); /* rank 1's, mapped by its only peer */
    assert_int_equal(shoal_shm_ops.connect(r[1].ctx, 0, r[0].blob, r[0].blob_len, deadline,
                                           &ep[1]), SHOAL_OK);
    assert_int_equal(count_own_segments(), 0);
    assert_int_equal(shoal_shm_ops.ready(r[0].ctx), SHOAL_OK);
    assert_int_equal(shoal_shm_ops.ready(r[1].ctx), SHOAL_OK);

    /* Misuse is refused without touching the FIFO. */
    void *buf;
    size_t cap, len;
    const void *in;
    assert_int_equal(ep[1]->ops->recv_release(ep[1]), SHOAL_ERR_INTERNAL);
    assert_int_equal(ep[0]->ops->send_slot(ep[0], &buf, &cap), SHOAL_OK);
    assert_int_equal(ep[0]->ops->send_post(ep[0], cap + 1, NULL), SHOAL_ERR_INVALID_ARG);

    /* Fill the FIFO to the brim, then drain it, twice around. */
    uint64_t sent = 0, got = 0;
    for (int round = 0; round < 3; round++) {
        while (ep[0]->ops->send_slot(ep[0], &buf, &cap) == SHOAL_OK) {
            len = msg_size(&r[0].comm, 0, 1, sent);
            fill(buf, len, 0, 1, sent);
            assert_int_equal(ep[0]->ops->send_post(ep[0], len, NULL), SHOAL_OK);
            sent++;
        }
        assert_true(sent - got >= 2);
        while (ep[1]->ops->recv_slot(ep[1], &in, &len, NULL) == SHOAL_OK) {
            assert_int_equal(check(in, len, 0, 1, got, msg_size(&r[0].comm, 0, 1, got)), 0);
            assert_int_equal(ep[1]->ops->recv_release(ep[1]), SHOAL_OK);
            got++;
        }
        assert_int_equal(got, sent);
    }
    shoal_shm_ops.disconnect(ep[0]);
    shoal_shm_ops.disconnect(ep[1]);
    shoal_shm_ops.close(r[0].ctx);
    shoal_shm_ops.close(r[1].ctx);

    /* Closed before any peer mapped it: nothing stays behind. */
    fake_open(&r[0], 0);
    assert_int_equal(count_own_segments(), 1);
    shoal_shm_ops.close(r[0].ctx);
    assert_int_equal(count_own_segments(), 0);
}

/* Registration on copy transports only records the region. */
/* shm carries a message of at most 32 B in its slot's metadata line: it
 * is copied there when posted, so bytes written into the slot after the
 * post (which the contract does not allow; here it shows the copy) do not
 * reach the receiver. A 33-B message is read from the slot itself. The
 * receiver takes both only after a barrier that follows the writes. */
static int rank_inline(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    (void)varg;
    shoal_comm_t comm = NULL;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_ep_t *ep = comm->team.eps[1 - rank];
    const size_t lens[] = {1, 32, 33, 0, 31};
    const size_t nlens = sizeof(lens) / sizeof(lens[0]);
    for (uint64_t round = 0; round < 12; round++) {
        size_t len = lens[round % nlens];
        if (rank == 0) {
            void *buf;
            size_t cap;
            s = wait_send(comm, ep, &buf, &cap, shoal_deadline_after(WAIT_NS));
            RANK_CHECK(s == SHOAL_OK, fail, "send_slot: %s", shoal_status_string(s));
            fill(buf, len, 0, 1, round);
            s = ep->ops->send_post(ep, len, NULL);
            RANK_CHECK(s == SHOAL_OK, fail, "send_post: %s", shoal_status_string(s));
            memset(buf, 0xee, len);
        }
        s = shoal_bootstrap_barrier(comm->bootstrap);
        RANK_CHECK(s == SHOAL_OK, fail, "barrier: %s", shoal_status_string(s));
        if (rank == 1) {
            const void *buf;
            size_t got;
            s = wait_recv(comm, ep, &buf, &got, shoal_deadline_after(WAIT_NS));
            RANK_CHECK(s == SHOAL_OK, fail, "recv_slot: %s", shoal_status_string(s));
            RANK_CHECK(got == len, fail, "%zu B, expected %zu", got, len);
            const unsigned char *p = buf;
            for (size_t i = 0; i < len; i++) {
                unsigned char want = len <= 32 ? pattern(0, 1, round, i) : 0xee;
                RANK_CHECK(p[i] == want, fail, "message %llu of %zu B: byte %zu is %u, "
                           "expected %u", (unsigned long long)round, len, i, p[i], want);
            }
            s = ep->ops->recv_release(ep);
            RANK_CHECK(s == SHOAL_OK, fail, "recv_release: %s", shoal_status_string(s));
        }
    }
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    if (comm)
        shoal_comm_abort(comm);
    return 1;
}

static void test_shm_inline(void **state)
{
    (void)state;
    assert_int_equal(harness_run_ranks(2, rank_inline, NULL, TEST_TIMEOUT_S), 0);
}

static void test_host_mem_reg(void **state)
{
    char buf[64];
    shoal_mem_t *mem = NULL;
    assert_int_equal(shoal_tl_host_mem_reg(NULL, buf, sizeof(buf), SHOAL_MEM_HOST, &mem),
                     SHOAL_OK);
    assert_ptr_equal(mem->addr, buf);
    assert_int_equal(mem->len, sizeof(buf));
    assert_int_equal(mem->kind, SHOAL_MEM_HOST);
    assert_int_equal(shoal_tl_host_mem_dereg(NULL, mem), SHOAL_OK);
    assert_int_equal(shoal_tl_host_mem_reg(NULL, NULL, 8, SHOAL_MEM_HOST, &mem),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_shm_ops.put_signal(NULL, NULL, 0, 0, 0, 0, NULL), SHOAL_ERR_UNSUPPORTED);
    assert_int_equal(shoal_tcp_ops.put_signal(NULL, NULL, 0, 0, 0, 0, NULL), SHOAL_ERR_UNSUPPORTED);
    assert_int_equal(shoal_shm_ops.size, sizeof(shoal_transport_ops_t));
    assert_int_equal(shoal_tcp_ops.size, sizeof(shoal_transport_ops_t));
    assert_int_equal(shoal_shm_ops.flush(NULL), SHOAL_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_host_mem_reg, setup_small_chunks),
        cmocka_unit_test_setup(test_shm_segment_lifetime, setup_small_chunks),
        cmocka_unit_test_setup(test_shm, setup_small_chunks),
        cmocka_unit_test_setup(test_shm_inline, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_one_socket, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_three_sockets, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_eager, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_one_slot, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_lazy, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_lazy_redial, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_dies_before_connect, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_peer_stays_away, setup_small_chunks),
        cmocka_unit_test_setup(test_mixed_hosts, setup_small_chunks),
        cmocka_unit_test_setup(test_large_chunks, setup_small_chunks),
        cmocka_unit_test_setup(test_flush_then_destroy, setup_small_chunks),
        cmocka_unit_test_setup(test_shm_doorbell, setup_small_chunks),
        cmocka_unit_test_setup(test_shm_rang, setup_small_chunks),
        cmocka_unit_test_setup(test_wait_yield, setup_small_chunks),
        cmocka_unit_test_setup(test_mismatched_settings, setup_small_chunks),
        cmocka_unit_test_setup(test_tcp_peer_leaves, setup_small_chunks),
    };
    return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
