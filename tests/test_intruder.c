/* Strangers on shoal's listening ports: a job of ranks runs verified
 * all-reduces while an intruder process attacks every TCP port the ranks
 * listen on, once while the job boots (the bootstrap root's listener) and
 * once while it runs (whatever the ranks still listen on after init). Each
 * intruder connection must be closed by shoal, logged, and must neither
 * crash nor stall the job nor change its results. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

#define NRANKS 4
#define MAX_PORTS 32         /* listening ports one phase may report */
#define COUNT 4096           /* int32 elements per all-reduce, plus one stop flag */
#define CLOSE_WAIT_MS 3000   /* how long shoal has to drop every intruder */
#define TRICKLE_STEP_MS 5
#define RANK_RUN_S 15        /* rank 0 gives up on the intruder's stop after this */

enum { ATTACK_RANDOM, ATTACK_PARTIAL, ATTACK_HUGE_LEN, ATTACK_TRICKLE, ATTACK_CLOSE, NATTACKS };
static const char *const attack_names[NATTACKS] = {"random bytes", "partial handshake",
                                                   "huge length", "slow trickle",
                                                   "connect-then-close"};

/* A listening socket a rank found in itself. */
typedef struct {
    int32_t phase;     /* 0: before init (rank 0 only), 1: after init; -1 ends a rank's list */
    int32_t rank;
    int32_t family;
    int32_t port;
    int32_t inherited; /* already open before shoal_comm_init: the parent's, not this rank's */
    uint8_t addr[16];
} port_rec_t;

/* The outcome of one attack connection. */
typedef struct {
    port_rec_t where;
    int32_t attack;
    int32_t connected;
    int32_t closed;    /* shoal closed it within CLOSE_WAIT_MS */
} conn_result_t;

typedef struct {
    atomic_int stop;            /* the intruder is done; rank 0 spreads it */
    int32_t nresults[2];
    conn_result_t results[2][MAX_PORTS * NATTACKS];
    int32_t rank_pids[NRANKS];
    long rss_kib[NRANKS][2];
    int32_t rounds[NRANKS];
} shared_t;

typedef struct {
    shared_t *sh;
    int ports_w;    /* ranks -> intruder: port_rec_t */
    int go_r;       /* intruder -> rank 0: attacks on the root are under way */
    unsigned long stale[MAX_PORTS]; /* the parent's listeners before this job's id */
    int nstale;
} rank_arg_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- finding our own listeners ------------------------------------------ */

typedef struct {
    unsigned long inode;
    port_rec_t rec;
} listener_t;

/* Socket inodes among this process's descriptors. */
static int own_socket_inodes(unsigned long *inodes, int cap)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < cap) {
        char path[300], target[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        unsigned long ino;
        if (sscanf(target, "socket:[%lu]", &ino) == 1)
            inodes[n++] = ino;
    }
    closedir(d);
    return n;
}

/* Listening TCP sockets (state 0A) of this process, from /proc/net/tcp{,6}. */
static int own_listeners(listener_t *out, int cap)
{
    unsigned long inodes[256];
    int ninodes = own_socket_inodes(inodes, 256);
    int n = 0;
    for (int v6 = 0; v6 <= 1; v6++) {
        FILE *f = fopen(v6 ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
        if (!f)
            continue;
        char line[512];
        if (!fgets(line, sizeof(line), f)) { /* header */
            fclose(f);
            continue;
        }
        while (fgets(line, sizeof(line), f) && n < cap) {
            char addr[40];
            unsigned port, st;
            unsigned long ino;
            if (sscanf(line, " %*d: %39[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*d %*d %lu", addr,
                       &port, &st, &ino) != 4 || st != 0x0A)
                continue;
            int mine = 0;
            for (int i = 0; i < ninodes; i++)
                mine |= inodes[i] == ino;
            if (!mine)
                continue;
            listener_t *l = &out[n++];
            memset(l, 0, sizeof(*l));
            l->inode = ino;
            l->rec.family = v6 ? AF_INET6 : AF_INET;
            l->rec.port = (int32_t)port;
            /* The kernel prints each 32-bit word of the address as a host
             * integer: converting back word by word restores the bytes. */
            for (int w = 0; w < (v6 ? 4 : 1); w++) {
                char word[9];
                memcpy(word, addr + 8 * w, 8);
                word[8] = '\0';
                uint32_t x = (uint32_t)strtoul(word, NULL, 16);
                memcpy(l->rec.addr + 4 * w, &x, 4);
            }
        }
        fclose(f);
    }
    return n;
}

static int publish(int fd, const port_rec_t *rec)
{
    return write(fd, rec, sizeof(*rec)) == (ssize_t)sizeof(*rec) ? 0 : -1;
}

static long vm_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* ---- ranks -------------------------------------------------------------- */

static int32_t input_value(int rank, size_t i, uint32_t round)
{
    return (int32_t)(harness_mix((uint32_t)rank * 131u + (uint32_t)i * 7u + round * 7919u) &
                     0xffffu);
}

/* One verified all-reduce; *stop_p is rank 0's stop flag as everyone sees it. */
static int checked_allreduce(shoal_comm_t comm, int rank, int nranks, uint32_t round,
                             int32_t stop, int32_t *send, int32_t *recv, int *stop_p)
{
    for (size_t i = 0; i < COUNT; i++)
        send[i] = input_value(rank, i, round);
    send[COUNT] = rank == 0 ? stop : 0;
    shoal_status_t s = shoal_allreduce(send, recv, COUNT + 1, SHOAL_INT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d round %u: allreduce: %s", rank, round,
               shoal_status_string(s));
    for (size_t i = 0; i < COUNT; i++) {
        int32_t want = 0;
        for (int r = 0; r < nranks; r++)
            want += input_value(r, i, round);
        RANK_CHECK(recv[i] == want, fail, "rank %d round %u: element %zu is %d, want %d", rank,
                   round, i, recv[i], want);
    }
    RANK_CHECK(recv[COUNT] == 0 || recv[COUNT] == 1, fail, "rank %d: stop flag %d", rank,
               recv[COUNT]);
    *stop_p = recv[COUNT];
    return 0;
fail:
    return 1;
}

static int rank_body(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    rank_arg_t *arg = varg;
    shared_t *sh = arg->sh;
    sh->rank_pids[rank] = (int32_t)getpid();
    listener_t before[MAX_PORTS], after[MAX_PORTS];
    int nbefore = own_listeners(before, MAX_PORTS);

    /* Rank 0 holds the root's listener before init: let the intruder at it
     * first, so that the bootstrap runs while it is attacked. */
    if (rank == 0) {
        for (int i = 0; i < nbefore; i++) {
            before[i].rec.phase = 0;
            before[i].rec.rank = rank;
            /* Listeners of earlier jobs' ids that the parent still holds
             * are not this job's root: attacked, but nobody accepts there. */
            for (int j = 0; j < arg->nstale; j++)
                before[i].rec.inherited |= arg->stale[j] == before[i].inode;
            RANK_CHECK(publish(arg->ports_w, &before[i].rec) == 0, fail, "publish");
        }
        port_rec_t end = {.phase = 0, .rank = rank, .port = -1};
        RANK_CHECK(publish(arg->ports_w, &end) == 0, fail, "publish");
        struct pollfd pfd = {.fd = arg->go_r, .events = POLLIN};
        char go;
        RANK_CHECK(poll(&pfd, 1, 20000) == 1 && read(arg->go_r, &go, 1) == 1, fail,
                   "rank 0: the intruder never started");
    }

    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: init: %s", rank, shoal_status_string(s));
    int32_t *send = malloc((COUNT + 1) * sizeof(int32_t));
    int32_t *recv = malloc((COUNT + 1) * sizeof(int32_t));
    RANK_CHECK(send && recv, fail, "out of memory");
    uint32_t round = 0;
    int stop = 0;
    for (; round < 8; round++)
        if (checked_allreduce(comm, rank, nranks, round, 0, send, recv, &stop))
            return 1;
    sh->rss_kib[rank][0] = vm_rss_kib();

    int nafter = own_listeners(after, MAX_PORTS);
    for (int i = 0; i < nafter; i++) {
        after[i].rec.phase = 1;
        after[i].rec.rank = rank;
        for (int j = 0; j < nbefore; j++)
            after[i].rec.inherited |= before[j].inode == after[i].inode;
        RANK_CHECK(publish(arg->ports_w, &after[i].rec) == 0, fail, "publish");
    }
    port_rec_t end = {.phase = 1, .rank = rank, .port = -1};
    RANK_CHECK(publish(arg->ports_w, &end) == 0, fail, "publish");

    /* Run until the intruder is done; rank 0 decides for everyone through
     * the last element, so all ranks run the same number of rounds. */
    double give_up = now_s() + RANK_RUN_S;
    while (!stop) {
        int32_t mine = rank == 0 && (atomic_load(&sh->stop) || now_s() > give_up);
        if (checked_allreduce(comm, rank, nranks, round++, mine, send, recv, &stop))
            return 1;
    }
    sh->rounds[rank] = (int32_t)round;
    sh->rss_kib[rank][1] = vm_rss_kib();
    RANK_CHECK(atomic_load(&sh->stop), fail, "rank %d: the intruder was not done after %d s", rank,
               RANK_RUN_S);
    free(send);
    free(recv);
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: destroy: %s", rank, shoal_status_string(s));
    return 0;
fail:
    return 1;
}

/* ---- intruder ----------------------------------------------------------- */

typedef struct {
    int fd;
    conn_result_t *res;
    size_t trickled;
} intr_conn_t;

static int connect_to(const port_rec_t *p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (p->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)p->port);
        memcpy(&in->sin_addr, p->addr, 4);
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)p->port);
        memcpy(&in6->sin6_addr, p->addr, 16);
        len = sizeof(*in6);
    }
    int fd = socket(p->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* A full listen queue must not hang the intruder. */
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The start of a real client's proof (auth.c): magic "SHAL", version 1,
 * then its nonce; here the nonce and MAC are made up. */
static uint8_t proof_byte(size_t i)
{
    static const uint8_t head[8] = {'S', 'H', 'A', 'L', 0, 0, 0, 1};
    return i < 8 ? head[i] : (uint8_t)(harness_mix((uint32_t)i) & 0xff);
}

/* Attack every port in ports with every attack; fill results. Writes a
 * byte to go_w (if >= 0) once every connection has had its first bytes. */
static int attack(const port_rec_t *ports, int nports, conn_result_t *results, int go_w)
{
    intr_conn_t conns[MAX_PORTS * NATTACKS];
    int n = 0;
    for (int p = 0; p < nports; p++) {
        for (int a = 0; a < NATTACKS; a++) {
            intr_conn_t *c = &conns[n];
            c->res = &results[n];
            n++;
            memset(c->res, 0, sizeof(*c->res));
            c->res->where = ports[p];
            c->res->attack = a;
            c->trickled = 0;
            c->fd = connect_to(&ports[p]);
            if (c->fd < 0)
                continue;
            c->res->connected = 1;
            uint8_t buf[4096];
            ssize_t w = 0;
            switch (a) {
            case ATTACK_RANDOM:
                for (size_t i = 0; i < sizeof(buf); i++)
                    buf[i] = (uint8_t)harness_mix((uint32_t)(i + 977u * (unsigned)n));
                w = send(c->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);
                break;
            case ATTACK_PARTIAL:
                for (size_t i = 0; i < 8; i++)
                    buf[i] = proof_byte(i);
                w = send(c->fd, buf, 8, MSG_DONTWAIT | MSG_NOSIGNAL);
                break;
            case ATTACK_HUGE_LEN:
                memset(buf, 0xff, 16);
                w = send(c->fd, buf, 16, MSG_DONTWAIT | MSG_NOSIGNAL);
                break;
            case ATTACK_CLOSE:
                close(c->fd);
                c->fd = -1;
                break;
            default:
                break;
            }
            (void)w;
        }
    }
    if (go_w >= 0 && write(go_w, "g", 1) != 1)
        return -1;

    /* Trickle a made-up proof, one byte at a time, until it is whole or the
     * connection is gone. The pacing is the attack, not synchronisation. */
    for (size_t i = 0; i < 72; i++) {
        for (int k = 0; k < n; k++) {
            intr_conn_t *c = &conns[k];
            if (c->res->attack != ATTACK_TRICKLE || c->fd < 0 || c->trickled != i)
                continue;
            uint8_t b = proof_byte(i);
            if (send(c->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
                c->trickled++;
        }
        struct timespec ts = {.tv_nsec = TRICKLE_STEP_MS * 1000000L};
        nanosleep(&ts, NULL);
    }

    /* Wait for shoal to close each connection: read (and discard) its
     * challenge, then expect end of file or an error. */
    double deadline = now_s() + CLOSE_WAIT_MS / 1000.0;
    for (;;) {
        struct pollfd pfds[MAX_PORTS * NATTACKS];
        int open = 0;
        for (int k = 0; k < n; k++) {
            pfds[k] = (struct pollfd){.fd = conns[k].fd, .events = POLLIN};
            open += conns[k].fd >= 0;
        }
        int ms = (int)((deadline - now_s()) * 1000);
        if (open == 0 || ms <= 0)
            break;
        if (poll(pfds, (nfds_t)n, ms) < 0 && errno != EINTR)
            return -1;
        for (int k = 0; k < n; k++) {
            if (conns[k].fd < 0 || !pfds[k].revents)
                continue;
            char buf[512];
            ssize_t r = recv(conns[k].fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
                continue;
            conns[k].res->closed = 1;
            close(conns[k].fd);
            conns[k].fd = -1;
        }
    }
    for (int k = 0; k < n; k++)
        if (conns[k].fd >= 0)
            close(conns[k].fd);
    return n;
}

/* Read one phase's port lists, up to nlists end markers, within 20 s. */
static int read_ports(int fd, int nlists, port_rec_t *ports, int cap)
{
    int n = 0;
    double deadline = now_s() + 20;
    while (nlists > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((deadline - now_s()) * 1000);
        if (ms <= 0 || poll(&pfd, 1, ms) != 1)
            return -1;
        port_rec_t rec;
        if (read(fd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            return -1;
        if (rec.port < 0)
            nlists--;
        else if (n < cap)
            ports[n++] = rec;
    }
    return n;
}

static int intruder(shared_t *sh, int ports_r, int go_w, int nranks)
{
    port_rec_t ports[MAX_PORTS];
    int rc = 0;
    int n = read_ports(ports_r, 1, ports, MAX_PORTS);
    if (n < 0)
        rc = 1;
    else
        sh->nresults[0] = attack(ports, n, sh->results[0], go_w);
    if (sh->nresults[0] < 0)
        rc = 2;
    n = rc ? -1 : read_ports(ports_r, nranks, ports, MAX_PORTS);
    if (n >= 0)
        sh->nresults[1] = attack(ports, n, sh->results[1], -1);
    if (n < 0 || sh->nresults[1] < 0)
        rc = 3;
    atomic_store(&sh->stop, 1);
    return rc;
}

/* ---- the test ----------------------------------------------------------- */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 1024) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

/* Whether the log holds a line from pid that drops or refuses a stranger. */
static int logged_drop(const char *log, int pid)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), ":%d shoal ", pid);
    for (const char *p = strstr(log, prefix); p; p = strstr(p + 1, prefix)) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)(len < 1023 ? len : 1023), p);
        if (strstr(line, "connection from") &&
            (strstr(line, "dropped") || strstr(line, "refused")))
            return 1;
    }
    return 0;
}

static void run_attacked_job(const char *transport)
{
    char pattern[64], log_path[64];
    snprintf(pattern, sizeof(pattern), "/tmp/shoal-intruder-%d-%%p.log", (int)getpid());
    snprintf(log_path, sizeof(log_path), "/tmp/shoal-intruder-%d-%d.log", (int)getpid(),
             (int)getpid());
    unlink(log_path);
    harness_use_transport(transport, 4096);
    harness_setenv("SHOAL_DEBUG_FILE", pattern);

    shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    int ports_pipe[2], go_pipe[2];
    assert_int_equal(pipe(ports_pipe), 0);
    assert_int_equal(pipe(go_pipe), 0);

    fflush(NULL);
    pid_t ipid = fork();
    assert_true(ipid >= 0);
    if (ipid == 0) {
        close(ports_pipe[1]);
        close(go_pipe[0]);
        _exit(intruder(sh, ports_pipe[0], go_pipe[1], NRANKS));
    }
    close(ports_pipe[0]);
    close(go_pipe[1]);
    rank_arg_t arg = {.sh = sh, .ports_w = ports_pipe[1], .go_r = go_pipe[0]};
    listener_t stale[MAX_PORTS];
    arg.nstale = own_listeners(stale, MAX_PORTS);
    for (int i = 0; i < arg.nstale; i++)
        arg.stale[i] = stale[i].inode;
    double t0 = now_s();
    int job = harness_run_ranks(NRANKS, rank_body, &arg, 40);
    double took = now_s() - t0;
    close(ports_pipe[1]);
    close(go_pipe[0]);
    int irc = harness_wait(ipid, 30);
    harness_setenv("SHOAL_DEBUG_FILE", NULL);

    char *log = slurp(log_path);
    printf("# %s: job %s in %.2f s, %d rounds, intruder exit %d\n", transport,
           job == 0 ? "ok" : "FAILED", took, sh->rounds[0], irc);
    int unclosed = 0, unlogged = 0;
    for (int phase = 0; phase < 2; phase++) {
        for (int k = 0; k < sh->nresults[phase]; k++) {
            const conn_result_t *c = &sh->results[phase][k];
            int want_close = c->connected && c->attack != ATTACK_CLOSE && !c->where.inherited;
            printf("# %s %s: rank %d port %d%s: %s: %s\n", transport,
                   phase ? "running" : "boot", c->where.rank, c->where.port,
                   c->where.inherited ? " (the parent's, not accepted by this job)" : "",
                   attack_names[c->attack],
                   !c->connected ? "connect failed"
                   : c->attack == ATTACK_CLOSE ? "closed by us"
                   : c->closed ? "closed by shoal" : "NEVER CLOSED");
            unclosed += want_close && !c->closed;
        }
    }
    /* Every rank whose own listener met strangers logs dropping them. */
    for (int r = 0; r < NRANKS; r++) {
        int attacked = 0;
        for (int phase = 0; phase < 2; phase++)
            for (int k = 0; k < sh->nresults[phase]; k++) {
                const conn_result_t *c = &sh->results[phase][k];
                attacked |= c->where.rank == r && c->connected && !c->where.inherited;
            }
        /* The root's listener is created in this process and taken by
         * rank 0's bootstrap: the drops of phase 0 are rank 0's. */
        if (r == 0 && sh->nresults[0] > 0)
            attacked = 1;
        int logged = log && logged_drop(log, sh->rank_pids[r]);
        if (attacked && !logged) {
            printf("# %s: rank %d (pid %d) logged no dropped stranger\n", transport, r,
                   sh->rank_pids[r]);
            unlogged++;
        }
    }
    if (!UNDER_SANITIZER) {
        for (int r = 0; r < NRANKS; r++) {
            printf("# %s: rank %d VmRSS %ld -> %ld KiB\n", transport, r, sh->rss_kib[r][0],
                   sh->rss_kib[r][1]);
            if (job == 0)
                assert_true(sh->rss_kib[r][1] - sh->rss_kib[r][0] < 64 * 1024);
        }
    }
    free(log);
    unlink(log_path);
    int nresults0 = sh->nresults[0], nresults1 = sh->nresults[1];
    munmap(sh, sizeof(*sh));

    assert_int_equal(job, 0);
    assert_int_equal(irc, 0);
    assert_true(nresults0 > 0);  /* the root's listener was attacked during boot */
    assert_true(nresults1 > 0);  /* something listened while the job ran */
    assert_int_equal(unclosed, 0);
    assert_int_equal(unlogged, 0);
}

static void test_intruder_tcp(void **state)
{
    (void)state;
    run_attacked_job("tcp");
}

static void test_intruder_shm(void **state)
{
    (void)state;
    run_attacked_job("shm");
}

int main(void)
{
    /* A stranger that closes first must not kill the intruder with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intruder_tcp),
        cmocka_unit_test(test_intruder_shm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
