/* Strangers on shoal's listening ports: a job of ranks runs verified
 * all-reduces while an intruder process attacks every TCP port the ranks
 * listen on, in three phases:
 *   boot     the bootstrap root's listener, while rank 0 waits for the
 *            other ranks to join;
 *   wireup   every rank's transport listener (tcp's data listener), while
 *            the ranks connect their transports;
 *   running  whatever the ranks still listen on after init: with tcp
 *            connecting peers on first use (SHOAL_TCP_CONNECT=lazy, the
 *            default), every rank's data listener, served by progress
 *            while the all-reduces run.
 * SHOAL_TEST_WIREUP_DELAY holds the joiners back at both steps of init, so
 * the listeners of init stay open and served for a whole delay: rank 0's
 * acceptor serves the strangers while it waits for the joiners, and in
 * wireup rank r connects r delays late, so every rank but the last serves
 * its data listener (over eager tcp; lazy tcp accepts only once the
 * operations run, and with shared memory nobody accepts there).
 *
 * The attacks on each port: random bytes, a partial handshake, a huge
 * length, a made-up proof trickled byte by byte, connect-then-close, a
 * proof made with a wrong secret, a proof of the right secret followed by
 * a hello that names nobody, and the replay of that right proof on a
 * second connection with another challenge. Each intruder connection must
 * be closed by shoal; where a rank serves the port, every proof but the
 * right one must get a refusal, and the rank must log each refusal or drop
 * naming the intruder's port. The job must neither crash nor stall nor
 * change its results. Each phase counts the ports it attacked and the test
 * fails where a listener must exist and none was attacked. */
#include "harness.h"

#include "base/auth.h"
#include "base/sock.h"
#include "core/bootstrap.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
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
#define DELAY "1s"           /* SHOAL_TEST_WIREUP_DELAY */
#define MAX_PORTS 32         /* listening ports one phase may report */
#define COUNT 4096           /* int32 elements per all-reduce, plus one stop flag */
#define CLOSE_WAIT_MS 8000   /* how long shoal has to drop every intruder (init: 3 delays) */
#define FIND_WAIT_S 10       /* how long the intruder looks for the wireup listeners */
#define TRICKLE_STEP_MS 5
#define RANK_RUN_S 15        /* rank 0 gives up on the intruder's stop after this */

/* The handshake (base/auth.c): challenge, proof, verdict, then the hello. */
#define CHALLENGE_BYTES 40
#define PROOF_BYTES 72
#define VERDICT_BYTES 36
#define BOOT_HELLO_BYTES 20  /* the bootstrap's hello */
#define TCP_HELLO_BYTES 16   /* tcp's */

enum { PHASE_BOOT, PHASE_WIREUP, PHASE_RUNNING, NPHASES };
static const char *const phase_names[NPHASES] = {"boot", "wireup", "running"};

enum {
    ATTACK_RANDOM,
    ATTACK_PARTIAL,
    ATTACK_HUGE_LEN,
    ATTACK_TRICKLE,
    ATTACK_CLOSE,
    ATTACK_WRONG_SECRET,
    ATTACK_PROVEN,  /* the right proof, then a hello that names nobody */
    ATTACK_REPLAY,  /* ATTACK_PROVEN's proof again, to another challenge */
    NATTACKS
};
static const char *const attack_names[NATTACKS] = {
    "random bytes", "partial handshake", "huge length",  "slow trickle",
    "connect-then-close", "wrong secret", "right proof, bad hello", "replayed proof"};

/* A listening socket found in a rank. */
typedef struct {
    int32_t phase;
    int32_t rank;      /* -1 ends a rank's list */
    int32_t family;
    int32_t port;
    int32_t inherited; /* already open before shoal_comm_init: the parent's, not this rank's */
    uint32_t pad;
    uint64_t inode;
    uint8_t addr[16];
} port_rec_t;

/* The outcome of one attack connection. */
typedef struct {
    port_rec_t where;
    int32_t attack;
    int32_t connected;
    int32_t lport;     /* the intruder's port, which shoal's log names */
    int32_t closed;    /* shoal closed it within CLOSE_WAIT_MS */
    int32_t challenged;
    int32_t verdict;   /* -1: none came; else the verdict's status (0 accepted) */
    int32_t server_ok; /* ATTACK_PROVEN: the server proved the secret too */
} conn_result_t;

typedef struct {
    atomic_int stop;            /* the intruder is done; rank 0 spreads it */
    uint8_t secret[SHOAL_SECRET_BYTES]; /* this job's, for the right proof */
    int32_t nresults[NPHASES];
    conn_result_t results[NPHASES][MAX_PORTS * NATTACKS];
    int32_t rank_pids[NRANKS];
    long rss_kib[NRANKS][2];
    int32_t rounds[NRANKS];
} shared_t;

typedef struct {
    shared_t *sh;
    int ports_w;    /* ranks -> intruder: port_rec_t */
    int go_r;       /* intruder -> rank 0: attacks on the root are under way */
    uint64_t stale[MAX_PORTS]; /* the parent's listeners before this job's id */
    int nstale;
    size_t secret_at; /* where a unique id keeps its secret */
} rank_arg_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- finding listeners -------------------------------------------------- */

/* Socket inodes among the descriptors of process pid (0: this one). */
static int socket_inodes(int pid, uint64_t *inodes, int cap)
{
    char dir[64];
    if (pid)
        snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
    else
        snprintf(dir, sizeof(dir), "/proc/self/fd");
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < cap) {
        char path[340], target[64];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
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

/* Listening TCP sockets (state 0A) of process pid (0: this one), from
 * /proc/net/tcp{,6}. */
static int listeners_of(int pid, port_rec_t *out, int cap)
{
    uint64_t inodes[256];
    int ninodes = socket_inodes(pid, inodes, 256);
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
            port_rec_t *l = &out[n++];
            memset(l, 0, sizeof(*l));
            l->inode = ino;
            l->family = v6 ? AF_INET6 : AF_INET;
            l->port = (int32_t)port;
            /* The kernel prints each 32-bit word of the address as a host
             * integer: converting back word by word restores the bytes. */
            for (int w = 0; w < (v6 ? 4 : 1); w++) {
                char word[9];
                memcpy(word, addr + 8 * w, 8);
                word[8] = '\0';
                uint32_t x = (uint32_t)strtoul(word, NULL, 16);
                memcpy(l->addr + 4 * w, &x, 4);
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
    port_rec_t before[MAX_PORTS], after[MAX_PORTS];
    int nbefore = listeners_of(0, before, MAX_PORTS);

    /* Rank 0 holds the root's listener before init: let the intruder at it
     * first, so that the bootstrap runs while it is attacked. Its list also
     * tells the intruder which listeners every rank inherited. */
    if (rank == 0) {
        memcpy(sh->secret, id->bytes + arg->secret_at, SHOAL_SECRET_BYTES);
        for (int i = 0; i < nbefore; i++) {
            before[i].phase = PHASE_BOOT;
            before[i].rank = rank;
            /* Listeners of earlier jobs' ids that the parent still holds
             * are not this job's root: attacked, but nobody accepts there. */
            for (int j = 0; j < arg->nstale; j++)
                before[i].inherited |= arg->stale[j] == before[i].inode;
            RANK_CHECK(publish(arg->ports_w, &before[i]) == 0, fail, "publish");
        }
        port_rec_t end = {.phase = PHASE_BOOT, .rank = -1};
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

    int nafter = listeners_of(0, after, MAX_PORTS);
    for (int i = 0; i < nafter; i++) {
        after[i].phase = PHASE_RUNNING;
        after[i].rank = rank;
        for (int j = 0; j < nbefore; j++)
            after[i].inherited |= before[j].inode == after[i].inode;
        RANK_CHECK(publish(arg->ports_w, &after[i]) == 0, fail, "publish");
    }
    port_rec_t end = {.phase = PHASE_RUNNING, .rank = -1};
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

typedef struct intr_conn {
    int fd;
    conn_result_t *res;
    size_t trickled;
    int state;                  /* handshake attacks: 0 challenge, 1 verdict, 2 after */
    size_t in_len;
    uint8_t in[64];
    uint8_t nonce_s[32];
    uint8_t proof[PROOF_BYTES];
    int proof_ready;            /* ATTACK_PROVEN: proof holds its right proof */
    int proof_sent;
    struct intr_conn *source;   /* ATTACK_REPLAY: whose proof it replays */
} intr_conn_t;

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* mac = HMAC-SHA256(secret, label || first || second), as base/auth.c. */
static void auth_mac(const uint8_t *secret, const char *label, const uint8_t *first,
                     const uint8_t *second, uint8_t mac[32])
{
    uint8_t msg[16 + 64];
    size_t l = strlen(label);
    memcpy(msg, label, l);
    memcpy(msg + l, first, 32);
    memcpy(msg + l + 32, second, 32);
    unsigned len = 0;
    if (!HMAC(EVP_sha256(), secret, SHOAL_SECRET_BYTES, msg, l + 64, mac, &len))
        memset(mac, 0, 32);
}

/* A client's proof for the challenge nonce_s under secret. */
static void make_proof(uint8_t proof[PROOF_BYTES], const uint8_t *secret,
                       const uint8_t *nonce_s, uint32_t seed)
{
    put_u32(proof, 0x5348414cu); /* "SHAL" */
    put_u32(proof + 4, 1);
    for (size_t i = 0; i < 32; i++)
        proof[8 + i] = (uint8_t)harness_mix(seed * 64u + (uint32_t)i);
    auth_mac(secret, "shoal-client", nonce_s, proof + 8, proof + 40);
}

static int connect_to(const port_rec_t *p, int32_t *lport_p)
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
    struct sockaddr_storage me;
    socklen_t mlen = sizeof(me);
    if (getsockname(fd, (struct sockaddr *)&me, &mlen) == 0)
        *lport_p = ntohs(me.ss_family == AF_INET ? ((struct sockaddr_in *)&me)->sin_port
                                                 : ((struct sockaddr_in6 *)&me)->sin6_port);
    return fd;
}

/* The start of a real client's proof: magic "SHAL", version 1, then its
 * nonce; here the nonce and MAC are made up. */
static uint8_t proof_byte(size_t i)
{
    static const uint8_t head[8] = {'S', 'H', 'A', 'L', 0, 0, 0, 1};
    return i < 8 ? head[i] : (uint8_t)(harness_mix((uint32_t)i) & 0xff);
}

static void conn_send(intr_conn_t *c, const void *buf, size_t len)
{
    if (send(c->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)len)
        fprintf(stderr, "# intruder: a send of %zu bytes fell short\n", len);
}

/* A handshake attack's proof, once it has its challenge (and, to replay,
 * once the proof it replays exists). */
static void conn_send_proof(const shared_t *sh, intr_conn_t *c, uint32_t seed)
{
    if (c->proof_sent || !c->res->challenged)
        return;
    if (c->res->attack == ATTACK_WRONG_SECRET) {
        uint8_t wrong[SHOAL_SECRET_BYTES];
        memcpy(wrong, sh->secret, sizeof(wrong));
        wrong[0] ^= 0x5a;
        make_proof(c->proof, wrong, c->nonce_s, seed);
    } else if (c->res->attack == ATTACK_PROVEN) {
        make_proof(c->proof, sh->secret, c->nonce_s, seed);
        c->proof_ready = 1;
    } else if (c->source && c->source->proof_ready) {
        memcpy(c->proof, c->source->proof, PROOF_BYTES);
    } else {
        return;
    }
    conn_send(c, c->proof, PROOF_BYTES);
    c->proof_sent = 1;
    c->state = 1;
}

/* A whole message of a handshake attack has arrived. */
static void conn_message(const shared_t *sh, intr_conn_t *c, uint32_t seed)
{
    if (c->state == 0) {
        if (get_u32(c->in) != 0x5348414cu || get_u32(c->in + 4) != 1) {
            c->state = 2; /* not shoal's challenge: just wait for the end */
            return;
        }
        c->res->challenged = 1;
        memcpy(c->nonce_s, c->in + 8, 32);
        conn_send_proof(sh, c, seed);
    } else if (c->state == 1) {
        c->res->verdict = (int32_t)get_u32(c->in);
        if (c->res->attack == ATTACK_PROVEN && c->res->verdict == 0) {
            uint8_t want[32];
            auth_mac(sh->secret, "shoal-server", c->proof + 8, c->nonce_s, want);
            c->res->server_ok = memcmp(want, c->in + 4, 32) == 0;
            uint8_t hello[BOOT_HELLO_BYTES] = {0}; /* names no rank of anything */
            conn_send(c, hello, c->res->where.phase == PHASE_BOOT ? BOOT_HELLO_BYTES
                                                                   : TCP_HELLO_BYTES);
        }
        c->state = 2;
    }
}

static int is_handshake(int attack)
{
    return attack == ATTACK_WRONG_SECRET || attack == ATTACK_PROVEN || attack == ATTACK_REPLAY;
}

/* Read what conns[k] has; 1 when shoal closed it. */
static int conn_read(const shared_t *sh, intr_conn_t *c, uint32_t seed)
{
    for (;;) {
        size_t need = sizeof(c->in);
        if (is_handshake(c->res->attack) && c->state < 2)
            need = c->state == 0 ? CHALLENGE_BYTES : VERDICT_BYTES;
        else
            c->in_len = 0;
        ssize_t r = recv(c->fd, c->in + c->in_len, need - c->in_len, MSG_DONTWAIT);
        if (r > 0) {
            c->in_len += (size_t)r;
            if (c->in_len == need && is_handshake(c->res->attack) && c->state < 2) {
                c->in_len = 0;
                conn_message(sh, c, seed);
            }
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return !(r < 0 && errno == EAGAIN);
    }
}

/* Attack every port in ports with every attack; fill results. Writes a
 * byte to go_w (if >= 0) once every connection has had its first bytes. */
static int attack(const shared_t *sh, const port_rec_t *ports, int nports,
                  conn_result_t *results, int go_w)
{
    static intr_conn_t conns[MAX_PORTS * NATTACKS];
    int n = 0;
    for (int p = 0; p < nports; p++) {
        for (int a = 0; a < NATTACKS; a++) {
            intr_conn_t *c = &conns[n];
            memset(c, 0, sizeof(*c));
            c->res = &results[n];
            n++;
            memset(c->res, 0, sizeof(*c->res));
            c->res->where = ports[p];
            c->res->attack = a;
            c->res->verdict = -1;
            if (a == ATTACK_REPLAY)
                c->source = c - (ATTACK_REPLAY - ATTACK_PROVEN);
            c->fd = connect_to(&ports[p], &c->res->lport);
            if (c->fd < 0)
                continue;
            c->res->connected = 1;
            uint8_t buf[4096];
            switch (a) {
            case ATTACK_RANDOM:
                for (size_t i = 0; i < sizeof(buf); i++)
                    buf[i] = (uint8_t)harness_mix((uint32_t)(i + 977u * (unsigned)n));
                conn_send(c, buf, sizeof(buf));
                break;
            case ATTACK_PARTIAL:
                for (size_t i = 0; i < 8; i++)
                    buf[i] = proof_byte(i);
                conn_send(c, buf, 8);
                break;
            case ATTACK_HUGE_LEN:
                memset(buf, 0xff, 16);
                conn_send(c, buf, 16);
                break;
            case ATTACK_CLOSE:
                close(c->fd);
                c->fd = -1;
                break;
            default:
                break;
            }
        }
    }
    if (go_w >= 0 && write(go_w, "g", 1) != 1)
        return -1;

    /* Trickle a made-up proof, one byte at a time, until it is whole or the
     * connection is gone. The pacing is the attack, not synchronisation. */
    for (size_t i = 0; i < PROOF_BYTES; i++) {
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

    /* Answer the challenges of the handshake attacks, and wait for shoal to
     * close each connection: the other attacks read (and discard) what it
     * sends, then expect end of file or an error. Nobody accepts on an
     * inherited port: those are not waited for. */
    double deadline = now_s() + CLOSE_WAIT_MS / 1000.0;
    for (;;) {
        struct pollfd pfds[MAX_PORTS * NATTACKS];
        int open = 0;
        for (int k = 0; k < n; k++) {
            pfds[k] = (struct pollfd){.fd = conns[k].fd, .events = POLLIN};
            open += conns[k].fd >= 0 && !conns[k].res->where.inherited;
        }
        int ms = (int)((deadline - now_s()) * 1000);
        if (open == 0 || ms <= 0)
            break;
        if (poll(pfds, (nfds_t)n, ms) < 0 && errno != EINTR)
            return -1;
        for (int k = 0; k < n; k++) {
            if (conns[k].fd < 0 || !pfds[k].revents)
                continue;
            if (!conn_read(sh, &conns[k], (uint32_t)k))
                continue;
            conns[k].res->closed = 1;
            close(conns[k].fd);
            conns[k].fd = -1;
        }
        for (int k = 0; k < n; k++)
            if (conns[k].fd >= 0 && conns[k].res->attack == ATTACK_REPLAY)
                conn_send_proof(sh, &conns[k], (uint32_t)k);
    }
    for (int k = 0; k < n; k++)
        if (conns[k].fd >= 0)
            close(conns[k].fd);
    return n;
}

/* Add rec to ports unless a port of the same address is there already. */
static void add_port(port_rec_t *ports, int *n_p, int cap, const port_rec_t *rec)
{
    for (int i = 0; i < *n_p; i++)
        if (ports[i].family == rec->family && ports[i].port == rec->port &&
            !memcmp(ports[i].addr, rec->addr, sizeof(rec->addr)))
            return;
    if (*n_p < cap)
        ports[(*n_p)++] = *rec;
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
        if (rec.rank < 0)
            nlists--;
        else
            add_port(ports, &n, cap, &rec);
    }
    return n;
}

/* The listeners the ranks open during init beyond those they inherited
 * (known): look at every rank until each shows one, or FIND_WAIT_S pass. */
static int find_wireup_ports(const shared_t *sh, const port_rec_t *known, int nknown,
                             port_rec_t *ports, int cap)
{
    int n = 0, found[NRANKS] = {0};
    double deadline = now_s() + FIND_WAIT_S;
    for (;;) {
        int all = 1;
        for (int r = 0; r < NRANKS; r++) {
            if (found[r])
                continue;
            all = 0;
            port_rec_t l[MAX_PORTS];
            int nl = sh->rank_pids[r] ? listeners_of(sh->rank_pids[r], l, MAX_PORTS) : 0;
            for (int i = 0; i < nl; i++) {
                int old = 0;
                for (int j = 0; j < nknown; j++)
                    old |= known[j].inode == l[i].inode;
                if (old)
                    continue;
                l[i].phase = PHASE_WIREUP;
                l[i].rank = r;
                add_port(ports, &n, cap, &l[i]);
                found[r] = 1;
            }
        }
        if (all || now_s() > deadline)
            return n;
        struct timespec ts = {.tv_nsec = 1000000L}; /* the next look */
        nanosleep(&ts, NULL);
    }
}

static int intruder(shared_t *sh, int ports_r, int go_w, int nranks)
{
    port_rec_t known[MAX_PORTS], ports[MAX_PORTS];
    int rc = 0;
    int nknown = read_ports(ports_r, 1, known, MAX_PORTS);
    if (nknown < 0) {
        rc = 1;
    } else {
        sh->nresults[PHASE_BOOT] = attack(sh, known, nknown, sh->results[PHASE_BOOT], go_w);
        if (sh->nresults[PHASE_BOOT] < 0)
            rc = 2;
    }
    int n = rc ? -1 : find_wireup_ports(sh, known, nknown, ports, MAX_PORTS);
    if (n >= 0) {
        sh->nresults[PHASE_WIREUP] = attack(sh, ports, n, sh->results[PHASE_WIREUP], -1);
        if (sh->nresults[PHASE_WIREUP] < 0)
            rc = 3;
    }
    n = rc ? -1 : read_ports(ports_r, nranks, ports, MAX_PORTS);
    if (n >= 0)
        sh->nresults[PHASE_RUNNING] = attack(sh, ports, n, sh->results[PHASE_RUNNING], -1);
    if (!rc && (n < 0 || sh->nresults[PHASE_RUNNING] < 0))
        rc = 4;
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

/* Whether the log holds a line from pid that says needle and, for a port
 * above 0, names that port (":port" and no further digit). */
static int logged(const char *log, int pid, const char *needle, int port)
{
    char prefix[32], at[16];
    snprintf(prefix, sizeof(prefix), ":%d shoal ", pid);
    snprintf(at, sizeof(at), ":%d", port);
    for (const char *p = log ? strstr(log, prefix) : NULL; p; p = strstr(p + 1, prefix)) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)(len < 1023 ? len : 1023), p);
        if (!strstr(line, needle))
            continue;
        if (port <= 0)
            return 1;
        for (const char *q = strstr(line, at); q; q = strstr(q + 1, at))
            if (q[strlen(at)] < '0' || q[strlen(at)] > '9')
                return 1;
    }
    return 0;
}

/* Whether a rank takes connections on the port c attacked: the root while
 * the others join, and over tcp every rank but the last while it waits for
 * the higher ranks (with shared memory nobody dials tcp). */
/* transport: "shm", "tcp" (lazy) or "tcp-eager". */
static int served(const conn_result_t *c, const char *transport)
{
    if (c->where.inherited)
        return 0;
    if (c->where.phase == PHASE_BOOT)
        return 1;
    if (c->where.phase == PHASE_RUNNING)
        return !strcmp(transport, "tcp");
    return c->where.phase == PHASE_WIREUP && !strcmp(transport, "tcp-eager") &&
           c->where.rank < NRANKS - 1;
}

/* What the serving rank logs about connection c, if anything. */
static const char *drop_line(const conn_result_t *c, int *port_p)
{
    *port_p = c->lport;
    switch (c->attack) {
    case ATTACK_RANDOM:
    case ATTACK_HUGE_LEN:
        return "is not a shoal handshake";
    case ATTACK_TRICKLE:
    case ATTACK_WRONG_SECRET:
    case ATTACK_REPLAY:
        return "failed authentication (wrong secret); refused";
    case ATTACK_PROVEN:
        if (c->where.phase == PHASE_BOOT)
            return "refused a join from";
        *port_p = 0; /* tcp's line names the hello, not the address */
        return "dropping a data connection with an unexpected hello";
    default:
        return NULL;
    }
}

/* Judge one connection: returns a failure text, or NULL; *state_p gets
 * what happened to it. */
static const char *judge(const conn_result_t *c, const char *transport, const char *log,
                         const shared_t *sh, const char **state_p)
{
    *state_p = !c->connected                ? "connect failed"
               : c->attack == ATTACK_CLOSE  ? "closed by us"
               : c->verdict == 0            ? (c->closed ? "accepted, then closed by shoal"
                                                         : "accepted, NEVER CLOSED")
               : c->verdict > 0             ? (c->closed ? "refused, closed by shoal"
                                                         : "refused, NEVER CLOSED")
               : c->closed                  ? "closed by shoal"
               : c->where.inherited         ? "left open (nobody accepts there)"
                                            : "NEVER CLOSED";
    if (!c->connected)
        return NULL;
    if (c->verdict == 0 && c->attack != ATTACK_PROVEN)
        return "a stranger without the secret was accepted";
    if (c->attack != ATTACK_CLOSE && !c->where.inherited && !c->closed)
        return "shoal never closed it";
    if (!served(c, transport))
        return NULL;
    if (is_handshake(c->attack) && !c->challenged)
        return "no challenge came on a served port";
    if ((c->attack == ATTACK_WRONG_SECRET || c->attack == ATTACK_REPLAY) && c->verdict != 1)
        return "no refusal came";
    if (c->attack == ATTACK_PROVEN && (c->verdict != 0 || !c->server_ok))
        return "the right proof was not accepted, or the server did not prove the secret";
    int port;
    const char *line = drop_line(c, &port);
    int pid = sh->rank_pids[c->where.phase == PHASE_BOOT ? 0 : c->where.rank];
    if (line && !logged(log, pid, line, port))
        return "the serving rank logged no drop of it";
    return NULL;
}

/* Where shoal_bootstrap_id_make puts the secret in a unique id. */
static size_t secret_offset(void)
{
    shoal_sockaddr_t root;
    assert_int_equal(shoal_sock_resolve("127.0.0.1:1", 0, &root), SHOAL_OK);
    uint8_t secret[SHOAL_SECRET_BYTES];
    for (size_t i = 0; i < sizeof(secret); i++)
        secret[i] = (uint8_t)(0xa0 + i);
    shoal_unique_id_t id;
    assert_int_equal(shoal_bootstrap_id_make(&root, secret, &id), SHOAL_OK);
    for (size_t at = 0; at + sizeof(secret) <= sizeof(id.bytes); at++)
        if (!memcmp(id.bytes + at, secret, sizeof(secret)))
            return at;
    fail_msg("no secret in a unique id");
    return 0;
}

static void run_attacked_job(const char *transport)
{
    char pattern[64], log_path[64];
    snprintf(pattern, sizeof(pattern), "/tmp/shoal-intruder-%d-%%p.log", (int)getpid());
    snprintf(log_path, sizeof(log_path), "/tmp/shoal-intruder-%d-%d.log", (int)getpid(),
             (int)getpid());
    unlink(log_path);
    int eager = !strcmp(transport, "tcp-eager");
    harness_use_transport(eager ? "tcp" : transport, 4096);
    harness_setenv("SHOAL_TCP_CONNECT", eager ? "eager" : NULL);
    harness_setenv("SHOAL_TEST_WIREUP_DELAY", DELAY);
    harness_setenv("SHOAL_DEBUG_FILE", pattern);

    shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    rank_arg_t arg = {.sh = sh, .secret_at = secret_offset()};
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
    arg.ports_w = ports_pipe[1];
    arg.go_r = go_pipe[0];
    port_rec_t stale[MAX_PORTS];
    arg.nstale = listeners_of(0, stale, MAX_PORTS);
    for (int i = 0; i < arg.nstale; i++)
        arg.stale[i] = stale[i].inode;
    double t0 = now_s();
    int job = harness_run_ranks(NRANKS, rank_body, &arg, 40);
    double took = now_s() - t0;
    close(ports_pipe[1]);
    close(go_pipe[0]);
    int irc = harness_wait(ipid, 30);
    harness_setenv("SHOAL_DEBUG_FILE", NULL);
    harness_setenv("SHOAL_TEST_WIREUP_DELAY", NULL);
    harness_setenv("SHOAL_TCP_CONNECT", NULL);

    char *log = slurp(log_path);
    printf("# %s: job %s in %.2f s, %d rounds, intruder exit %d\n", transport,
           job == 0 ? "ok" : "FAILED", took, sh->rounds[0], irc);
    int failures = 0;
    int boot_ports = 0, wireup_ranks = 0, running_ports = 0, running_own = 0;
    for (int phase = 0; phase < NPHASES; phase++) {
        for (int k = 0; k < sh->nresults[phase]; k++) {
            const conn_result_t *c = &sh->results[phase][k];
            const char *state, *bad = judge(c, transport, log, sh, &state);
            printf("# %s %s: rank %d port %d%s: %s: %s%s%s\n", transport, phase_names[phase],
                   c->where.rank, c->where.port,
                   c->where.inherited ? " (the parent's, not accepted by this job)"
                   : served(c, transport) ? " (served)" : "",
                   attack_names[c->attack], state, bad ? ": FAILED: " : "", bad ? bad : "");
            failures += bad != NULL;
            /* One attack per port counts it: the first. */
            if (c->attack != 0 || !c->connected)
                continue;
            if (phase == PHASE_BOOT && !c->where.inherited)
                boot_ports++;
            if (phase == PHASE_WIREUP)
                wireup_ranks |= 1 << c->where.rank;
            if (phase == PHASE_RUNNING) {
                running_ports++;
                running_own += !c->where.inherited;
            }
        }
    }
    printf("# %s: attacked %d root listener(s) at boot, the listeners of ranks %#x in wireup, "
           "%d port(s) while running (%d of the ranks' own)\n",
           transport, boot_ports, wireup_ranks, running_ports, running_own);
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
    munmap(sh, sizeof(*sh));

    assert_int_equal(job, 0);
    assert_int_equal(irc, 0);
    /* The root listens while the others join. */
    assert_int_equal(boot_ports, 1);
    /* Every rank's transport listener exists until the transports are ready. */
    assert_int_equal(wireup_ranks, (1 << NRANKS) - 1);
    /* After init the ranks listen on nothing of their own, but for lazy
     * tcp's data listener on every rank, served while the job runs (the
     * judge above wants each stranger there challenged, refused and
     * logged). The root's listener of this job's id stays open in the
     * process that made the id (the parent, whose copy the ranks
     * inherit), unserved, and is attacked while the job runs. */
    assert_true(running_ports > 0);
    assert_int_equal(running_own, !strcmp(transport, "tcp") ? NRANKS : 0);
    assert_int_equal(failures, 0);
}

static void test_intruder_tcp(void **state)
{
    (void)state;
    run_attacked_job("tcp");
}

static void test_intruder_tcp_eager(void **state)
{
    (void)state;
    run_attacked_job("tcp-eager");
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
        cmocka_unit_test(test_intruder_tcp_eager),
        cmocka_unit_test(test_intruder_shm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
