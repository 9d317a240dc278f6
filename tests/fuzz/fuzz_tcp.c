/* Fuzz target: what the TCP transport reads from its peers.
 *
 * First byte, bit 7 set: wireup. The rest is the peer's address blob (the
 * size of shoal_tcp_addr_t) and then the hellos (shoal_tcp_hello_t each)
 * of up to FUZZ_TCP_STRANGERS connections, which a dialing thread sends
 * after proving the secret; then it dials the nsocks connections of the
 * awaited peer with right hellos. shoal_tcp_connect checks the blob and
 * accepts (shoal_tcp_accept): it must end with the peer connected or a
 * refused blob, whatever the hellos claimed. Bits 0-1: nsocks - 1; bit 4:
 * this rank (0 or 1); bits 2-3 pick the peer among the higher ranks.
 *
 * Bit 7 clear: data. Bits 0-1: nsocks - 1; bits 2-3: nslots - 1. The rest
 * is what arrives on the endpoint's sockets: for each socket but the last
 * a 2-byte big-endian length and that many bytes, then the last socket's
 * bytes. The endpoint takes every message it can (shoal_tcp_progress,
 * shoal_tcp_recv_slot: shoal_tcp_rx_advance and shoal_tcp_rx_header parse
 * the headers); a message lies inside its slot, and the stream ends in a
 * lost peer or with nothing complete, never in a wait.
 *
 * The sockets are TCP over loopback, since the endpoint sets TCP options;
 * every connection ends with a reset from the test's side, so none is
 * left waiting in TIME_WAIT for the next inputs' ports. */
#include "../../src/transport/tcp.c"
#include "../../src/transport/tcp_conn.c"

#include "core/sig.h"
#include "fuzz.h"

#include <poll.h>
#include <pthread.h>
#include <semaphore.h>

#define FUZZ_TCP_WIREUP 0x80
#define FUZZ_TCP_NRANKS 4
#define FUZZ_TCP_CHUNK 4096
#define FUZZ_TCP_STRANGERS 8

static const uint8_t fuzz_secret[SHOAL_SECRET_BYTES] = "shoal fuzz secret, 32 bytes long";

static const uint8_t *fuzz_boot_secret(const void *handle)
{
    (void)handle;
    return fuzz_secret;
}

/* What the context is opened with; the wireup mode picks the rank. */
static shoal_tl_params_t fuzz_params = {.nranks = FUZZ_TCP_NRANKS, .chunk_size = FUZZ_TCP_CHUNK,
                                        .boot = {.secret = fuzz_boot_secret}};

/* A listener for the data mode's connections, made once. */
static int fuzz_listen_fd = -1;
static shoal_sockaddr_t fuzz_listen_addr;

/* Where the received bytes are read into, so that every one is read. */
static volatile unsigned fuzz_sum;

/* A context as shoal_tcp_open leaves it, without the listener. */
static shoal_tcp_ctx_t *fuzz_ctx_create(int nsocks, size_t nslots)
{
    shoal_tcp_ctx_t *ctx = calloc(1, sizeof(*ctx));
    fuzz_assert(ctx != NULL);
    ctx->base.ops = &shoal_tcp_ops;
    ctx->base.params = fuzz_params;
    ctx->listen_fd = -1;
    ctx->nsocks = nsocks;
    ctx->nslots = nslots;
    ctx->chunk = FUZZ_TCP_CHUNK;
    size_t nfds = (size_t)FUZZ_TCP_NRANKS * (size_t)nsocks;
    ctx->nevents = (int)nfds + 1;
    ctx->stash = malloc(nfds * sizeof(*ctx->stash));
    ctx->events = calloc(nfds + 1, sizeof(*ctx->events));
    ctx->list = calloc(FUZZ_TCP_NRANKS, sizeof(*ctx->list));
    ctx->peers = calloc(FUZZ_TCP_NRANKS, sizeof(*ctx->peers));
    ctx->dialing = calloc(FUZZ_TCP_NRANKS, sizeof(*ctx->dialing));
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    fuzz_assert(ctx->stash && ctx->events && ctx->list && ctx->peers && ctx->dialing &&
                ctx->epfd >= 0);
    for (size_t i = 0; i < nfds; i++)
        ctx->stash[i] = -1;
    return ctx;
}

/* Close our end of a test connection with a reset, which leaves neither
 * end in TIME_WAIT: the sockets of one process soon run out of ports at
 * thousands of connections a second. */
static void fuzz_close_reset(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

/* A connected loopback pair: *ours is the test's end, *theirs the end
 * for the endpoint. */
static void fuzz_pair(int *ours, int *theirs)
{
    *ours = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fuzz_assert(*ours >= 0);
    if (fuzz_connect(*ours, &fuzz_listen_addr.u.sa, sizeof(fuzz_listen_addr.u.sin)) != 0) {
        perror("connect to the test's listener");
        abort();
    }
    *theirs = fuzz_accept(fuzz_listen_fd);
    fuzz_assert(*theirs >= 0);
}

/* ---- data ------------------------------------------------------------- */

/* An endpoint to rank 1 over nsocks fresh pairs; ours[] gets our ends. */
static shoal_tcp_ep_t *fuzz_ep_create(shoal_tcp_ctx_t *ctx, int *ours)
{
    int theirs[SHOAL_TCP_NSOCKS_MAX];
    for (int i = 0; i < ctx->nsocks; i++)
        fuzz_pair(&ours[i], &theirs[i]);
    shoal_tcp_ep_t *ep;
    fuzz_assert(shoal_tcp_ep_alloc(ctx, 1, &ep) == SHOAL_OK);
    fuzz_assert(shoal_tcp_up(ctx, ep, theirs) == SHOAL_OK);
    ctx->peers[1] = ep;
    ctx->npeers++;
    return ep;
}

static void fuzz_data(uint8_t mode, const uint8_t *data, size_t size)
{
    shoal_tcp_ctx_t *ctx = fuzz_ctx_create(1 + (mode & 3), 1 + ((mode >> 2) & 3));
    int ours[SHOAL_TCP_NSOCKS_MAX];
    shoal_tcp_ep_t *ep = fuzz_ep_create(ctx, ours);
    for (int i = 0; i < ctx->nsocks; i++) {
        size_t len = size;
        if (i < ctx->nsocks - 1) {
            len = size >= 2 ? (size_t)(data[0] << 8 | data[1]) : 0;
            data += size >= 2 ? 2 : size;
            size -= size >= 2 ? 2 : size;
            len = len < size ? len : size;
        }
        for (size_t sent = 0; sent < len;) {
            ssize_t n = send(ours[i], data + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n <= 0)
                break;
            sent += (size_t)n;
        }
        data += len;
        size -= len;
        shutdown(ours[i], SHUT_WR);
    }

    /* As the engine does: drive progress and take every message, waiting
     * for news on the sockets when there is none, until the deadline. The
     * kernel may deliver our bytes late on a busy machine, but they all
     * come, the peer's close last. */
    uint64_t deadline = shoal_deadline_after(FUZZ_DEADLINE_NS);
    shoal_status_t s;
    for (;;) {
        const void *buf;
        size_t len;
        shoal_sig_t sig;
        s = shoal_tcp_progress(&ctx->base);
        if (s == SHOAL_OK)
            s = shoal_tcp_recv_slot(&ep->base, &buf, &len, &sig);
        if (s == SHOAL_INPROGRESS && !shoal_deadline_passed(deadline)) {
            struct pollfd pfd = {.fd = ctx->epfd, .events = POLLIN};
            poll(&pfd, 1, shoal_deadline_ms_left(deadline));
            continue;
        }
        if (s != SHOAL_OK)
            break;
        const unsigned char *p = buf;
        fuzz_assert(len <= ep->chunk && p >= ep->rx_buf &&
                    p + len <= ep->rx_buf + ep->nslots * ep->chunk);
        /* The collective reads the message and names its signature in a
         * mismatch error. */
        for (size_t i = 0; i < len; i++)
            fuzz_sum += p[i];
        char text[SHOAL_SIG_STR_MAX];
        shoal_sig_format(&sig, text, sizeof(text));
        s = shoal_tcp_recv_release(&ep->base);
        if (s != SHOAL_OK)
            break;
    }
    /* Every socket ends in the peer's close: whatever came before it,
     * the endpoint must see that the peer is gone rather than wait. */
    fuzz_assert(s == SHOAL_ERR_PEER);
    /* Our ends closed first: having sent the first FIN, they would
     * otherwise wait in TIME_WAIT. */
    for (int i = 0; i < ctx->nsocks; i++)
        fuzz_close_reset(ours[i]);
    shoal_tcp_close(&ctx->base);
}

/* ---- wireup ----------------------------------------------------------- */

typedef struct {
    shoal_sockaddr_t addr;   /* the accepting rank's listener */
    const uint8_t *hellos;   /* the strangers' hellos */
    size_t len;
    shoal_tcp_hello_t good[SHOAL_TCP_NSOCKS_MAX];
    int ngood;
    int fds[FUZZ_TCP_STRANGERS + SHOAL_TCP_NSOCKS_MAX];
    int nfds;
    sem_t done;              /* the accepting side is gone */
} fuzz_dialer_t;

/* One connection: the handshake, then hello. 0 on success. */
static int fuzz_dial(fuzz_dialer_t *d, const void *hello, size_t len)
{
    uint64_t deadline = shoal_deadline_after(FUZZ_DEADLINE_NS);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fuzz_assert(fd >= 0);
    d->fds[d->nfds++] = fd;
    if (fuzz_connect(fd, &d->addr.u.sa, sizeof(d->addr.u.sin)) != 0 ||
        shoal_auth_client(fd, fuzz_secret, deadline) != SHOAL_OK)
        return -1;
    return shoal_sock_send_all(fd, hello, len, deadline) == SHOAL_OK ? 0 : -1;
}

/* The dialing ranks: the strangers' connections, then the awaited peer's.
 * A failure means the accepting side is done: nobody answers any more. */
static void *fuzz_dialer_run(void *arg)
{
    fuzz_dialer_t *d = arg;
    int ok = 0;
    for (size_t off = 0; off < d->len && ok == 0; off += sizeof(shoal_tcp_hello_t)) {
        size_t n = d->len - off < sizeof(shoal_tcp_hello_t) ? d->len - off
                                                              : sizeof(shoal_tcp_hello_t);
        ok = fuzz_dial(d, d->hellos + off, n);
    }
    for (int i = 0; i < d->ngood && ok == 0; i++)
        ok = fuzz_dial(d, &d->good[i], sizeof(d->good[i]));
    /* Our ends stay open until the accepting side has closed its own, so
     * that no hello is lost to an early reset. */
    while (sem_wait(&d->done) != 0)
        ;
    for (int i = 0; i < d->nfds; i++)
        fuzz_close_reset(d->fds[i]);
    return NULL;
}

static void fuzz_wireup(uint8_t mode, const uint8_t *data, size_t size)
{
    fuzz_params.rank = (mode >> 4) & 1;
    int nsocks = 1 + (mode & 3);
    int peer = fuzz_params.rank + 1 + ((mode >> 2) & 3) % (FUZZ_TCP_NRANKS - 1 - fuzz_params.rank);
    shoal_tcp_ctx_t *ctx = fuzz_ctx_create(nsocks, 2);
    shoal_sockaddr_t addr = fuzz_listen_addr;
    shoal_sock_set_port(&addr, 0);
    fuzz_assert(shoal_sock_listen(&addr, &ctx->listen_fd) == SHOAL_OK);
    fuzz_assert(shoal_acceptor_create(ctx->listen_fd, fuzz_secret, sizeof(shoal_tcp_hello_t),
                                      &ctx->acc) == SHOAL_OK);

    size_t blob_len = size < sizeof(shoal_tcp_addr_t) ? size : sizeof(shoal_tcp_addr_t);
    size_t hellos = size - blob_len;
    if (hellos > FUZZ_TCP_STRANGERS * sizeof(shoal_tcp_hello_t))
        hellos = FUZZ_TCP_STRANGERS * sizeof(shoal_tcp_hello_t);
    fuzz_dialer_t d = {.addr = addr, .hellos = data + blob_len, .len = hellos, .ngood = nsocks};
    for (int i = 0; i < nsocks; i++)
        d.good[i] = (shoal_tcp_hello_t){.magic = htonl(SHOAL_TCP_HELLO_MAGIC),
                                        .rank = htonl((uint32_t)peer),
                                        .sock = htonl((uint32_t)i),
                                        .nsocks = htonl((uint32_t)nsocks)};
    sem_init(&d.done, 0, 0);
    pthread_t dialer;
    fuzz_assert(pthread_create(&dialer, NULL, fuzz_dialer_run, &d) == 0);

    shoal_ep_t *ep = NULL;
    shoal_status_t s = shoal_tcp_connect(&ctx->base, peer, data, blob_len,
                                         shoal_deadline_after(FUZZ_DEADLINE_NS), &ep);
    /* A blob that passed names our settings; then the peer got through. */
    fuzz_assert(s == SHOAL_OK || s == SHOAL_ERR_INTERNAL || s == SHOAL_ERR_INVALID_ARG);
    if (s == SHOAL_OK)
        fuzz_assert(ep->peer == peer && ((shoal_tcp_ep_t *)ep)->nsocks == nsocks);
    shoal_tcp_close(&ctx->base);
    sem_post(&d.done);
    pthread_join(dialer, NULL);
    sem_destroy(&d.done);
}

/* ---- seeds ------------------------------------------------------------ */

/* Data seed: what shoal's sender puts on the sockets for messages of
 * lens[] (send_slot, send_post, flush), in the input's layout. */
static void fuzz_seed_data(const char *name, int nsocks, int nslots, const size_t *lens,
                           int nmsgs)
{
    static uint8_t in[65536];
    shoal_tcp_ctx_t *ctx = fuzz_ctx_create(nsocks, (size_t)nslots);
    int ours[SHOAL_TCP_NSOCKS_MAX];
    shoal_tcp_ep_t *ep = fuzz_ep_create(ctx, ours);
    for (int m = 0; m < nmsgs; m++) {
        void *buf;
        size_t cap;
        shoal_status_t s;
        while ((s = shoal_tcp_send_slot(&ep->base, &buf, &cap)) == SHOAL_INPROGRESS)
            ;
        fuzz_assert(s == SHOAL_OK && lens[m] <= cap);
        memset(buf, 'a' + m, lens[m]);
        shoal_sig_t sig = {.seq = (uint64_t)m, .count = lens[m] / 4, .kind = 0,
                           .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM, .root = -1};
        fuzz_assert(shoal_tcp_send_post(&ep->base, lens[m], &sig) == SHOAL_OK);
    }
    while (shoal_tcp_flush(&ep->base) == SHOAL_INPROGRESS)
        ;
    size_t n = 0;
    in[n++] = (uint8_t)((nsocks - 1) | (nslots - 1) << 2);
    for (int i = 0; i < nsocks; i++) {
        size_t at = n;
        n += i < nsocks - 1 ? 2 : 0;
        size_t got = fuzz_drain(ours[i], in + n, sizeof(in) - n);
        if (i < nsocks - 1) {
            in[at] = (uint8_t)(got >> 8);
            in[at + 1] = (uint8_t)got;
        }
        n += got;
    }
    shoal_tcp_close(&ctx->base);
    for (int i = 0; i < nsocks; i++)
        fuzz_close_reset(ours[i]);
    fuzz_seed(name, in, n);
}

/* The same stream with the first header changed: length len, sequence
 * number seq. */
static void fuzz_seed_bad_header(const char *name, uint32_t len, uint32_t seq)
{
    shoal_tcp_hdr_t h = {.len = htonl(len), .seq = htonl(seq)};
    uint8_t in[1 + sizeof(h) + 16];
    in[0] = 0;
    memcpy(in + 1, &h, sizeof(h));
    memset(in + 1 + sizeof(h), 'x', 16);
    fuzz_seed(name, in, sizeof(in));
}

static void fuzz_seed_wireup(const char *name, uint8_t mode, const shoal_tcp_hello_t *hellos,
                             int nhellos, int blob_cut)
{
    int nsocks = 1 + (mode & 3);
    shoal_tcp_ctx_t *ctx = fuzz_ctx_create(nsocks, 2);
    ctx->addr = fuzz_listen_addr;
    uint8_t in[1 + SHOAL_TL_ADDR_MAX + FUZZ_TCP_STRANGERS * sizeof(shoal_tcp_hello_t)];
    size_t len = SHOAL_TL_ADDR_MAX;
    in[0] = FUZZ_TCP_WIREUP | mode;
    fuzz_assert(shoal_tcp_addr_pack(&ctx->base, in + 1, &len) == SHOAL_OK);
    len -= (size_t)blob_cut;
    memcpy(in + 1 + len, hellos, (size_t)nhellos * sizeof(*hellos));
    fuzz_seed(name, in, 1 + len + (size_t)nhellos * sizeof(*hellos));
    shoal_tcp_close(&ctx->base);
}

static shoal_tcp_hello_t fuzz_hello(uint32_t magic, uint32_t rank, uint32_t sock,
                                    uint32_t nsocks)
{
    return (shoal_tcp_hello_t){.magic = htonl(magic), .rank = htonl(rank),
                               .sock = htonl(sock), .nsocks = htonl(nsocks)};
}

static void fuzz_seeds(void)
{
    const size_t one[] = {100}, empty[] = {0, 1, 0}, full[] = {4096, 4096, 3000, 64};
    const size_t mixed[] = {2048, 10, 4095, 1024, 3333};
    fuzz_seed_data("one", 1, 1, one, 1);
    fuzz_seed_data("empty", 1, 2, empty, 3);
    fuzz_seed_data("2socks", 2, 2, full, 4);
    fuzz_seed_data("3socks", 3, 1, mixed, 5);
    fuzz_seed_data("4socks", 4, 4, full, 4);
    fuzz_seed_bad_header("too-long", FUZZ_TCP_CHUNK + 1, 0);
    fuzz_seed_bad_header("bad-seq", 16, 7);
    fuzz_seed_bad_header("half", 32, 0); /* 16 of the 32 bytes come */

    const uint32_t M = SHOAL_TCP_HELLO_MAGIC;
    /* Rank 0 with 2 sockets, waiting for rank 1 (mode 0x01). */
    shoal_tcp_hello_t h[FUZZ_TCP_STRANGERS];
    fuzz_seed_wireup("hello-none", 0x01, h, 0, 0);
    h[0] = fuzz_hello(M, 3, 1, 2); /* rank 3's, kept for later */
    h[1] = fuzz_hello(M, 3, 1, 2); /* the same again */
    h[2] = fuzz_hello(M, 1, 0, 2); /* rank 1's own socket 0 */
    fuzz_seed_wireup("hello-stash", 0x01, h, 3, 0);
    h[0] = fuzz_hello(M, 0, 0, 2);     /* itself */
    h[1] = fuzz_hello(M, 4, 0, 2);     /* no such rank */
    h[2] = fuzz_hello(M, 2, 2, 2);     /* no such socket */
    h[3] = fuzz_hello(M, 2, 0, 3);     /* other settings */
    h[4] = fuzz_hello(M ^ 1, 2, 0, 2); /* not a hello */
    fuzz_seed_wireup("hello-wrong", 0x01, h, 5, 0);
    /* Rank 1 with 4 sockets, waiting for rank 3 (mode 0x17): rank 1 below it. */
    h[0] = fuzz_hello(M, 1, 0, 4);
    h[1] = fuzz_hello(M, 3, 3, 4);
    fuzz_seed_wireup("hello-rank1", 0x17, h, 2, 0);
    fuzz_seed_wireup("blob-short", 0x01, h, 0, 1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    memset(&fuzz_listen_addr, 0, sizeof(fuzz_listen_addr));
    fuzz_listen_addr.u.sin.sin_family = AF_INET;
    fuzz_listen_addr.u.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fuzz_assert(shoal_sock_listen(&fuzz_listen_addr, &fuzz_listen_fd) == SHOAL_OK);
    fuzz_setup(fuzz_seeds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & FUZZ_TCP_WIREUP)
        fuzz_wireup(data[0], data + 1, size - 1);
    else
        fuzz_data(data[0], data + 1, size - 1);
    return 0;
}
