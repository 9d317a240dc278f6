/* Fuzz target: what the bootstrap reads from a connection after the
 * handshake: the join hello that rank 0 checks (shoal_boot_check_hello),
 * and the messages of the star, through the collectives and the failure
 * watch (shoal_boot_recv_hdr, shoal_boot_recv, shoal_boot_recv_fail,
 * shoal_boot_news, shoal_boot_fail_parse).
 *
 * Input, first byte:
 *   bit 7 set: hello mode. Byte 1 gives nranks (1..8), byte 2 which ranks
 *     have joined already, the next SHOAL_BOOT_HELLO_BYTES (20) are the hello.
 *   bit 7 clear: message mode. Bit 0 is this rank (0, with nranks 2, or 1,
 *     with nranks 2 + bits 1-2), bit 5 whether the peer closed its end
 *     (else it only stopped writing, and takes what this rank sends).
 *     Byte 1 holds the number of calls (0..7), one byte each follows
 *     (kind in bits 0-2, size or root in bits 3-7), then the peer's bytes.
 * Every call returns promptly with a status; a failure stays for every
 * later collective; a failure notice's text is terminated and its culprit
 * a rank or -1. */
#include "../../src/core/bootstrap.c"

#include "fuzz.h"

enum {
    FUZZ_BOOT_BARRIER,
    FUZZ_BOOT_ALLGATHER,
    FUZZ_BOOT_BCAST,
    FUZZ_BOOT_POLL,
    FUZZ_BOOT_JOIN, /* the verdict a joining rank waits for */
};

#define FUZZ_BOOT_HELLO_MODE 0x80
#define FUZZ_BOOT_PEER_CLOSED 0x20
#define FUZZ_BOOT_MAX_RANKS 8

/* A bootstrap of nranks ranks as shoal_bootstrap_init leaves it, with one
 * connection, fd, to peer; shoal_bootstrap_destroy frees it. */
static shoal_bootstrap_t *fuzz_bs_create(int rank, int nranks, int peer, int fd)
{
    shoal_bootstrap_t *bs = calloc(1, sizeof(*bs));
    fuzz_assert(bs != NULL);
    bs->rank = rank;
    bs->nranks = nranks;
    bs->timeout_ns = FUZZ_DEADLINE_NS;
    bs->fds = malloc((size_t)nranks * sizeof(*bs->fds));
    bs->gone = calloc((size_t)nranks, sizeof(*bs->gone));
    bs->pfds = calloc((size_t)nranks, sizeof(*bs->pfds));
    bs->pfd_rank = calloc((size_t)nranks, sizeof(*bs->pfd_rank));
    bs->links = calloc((size_t)nranks, sizeof(*bs->links));
    fuzz_assert(bs->fds && bs->gone && bs->pfds && bs->pfd_rank && bs->links);
    for (int r = 0; r < nranks; r++)
        bs->fds[r] = -1;
    bs->fds[peer] = fd;
    atomic_init(&bs->aborted, 0);
    pthread_mutex_init(&bs->lock, NULL);
    return bs;
}

/* What the peer's side of the connection sends: shoal's own sender code
 * for the calls sends[], each a kind (below and the receiving kinds) and
 * a parameter, made by a bootstrap of rank `rank`. */
enum { FUZZ_BOOT_SEND_FAIL = 5, FUZZ_BOOT_SEND_BYE = 6 };
#define FUZZ_OP(kind, param) ((uint8_t)(FUZZ_BOOT_##kind | (param) << 3))

static size_t fuzz_sent(int rank, int nranks, const uint8_t *sends, size_t nsends,
                        uint8_t *out, size_t cap)
{
    int peer = rank == 0 ? 1 : 0;
    int sv[2];
    fuzz_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    shoal_bootstrap_t *bs = fuzz_bs_create(rank, nranks, peer, sv[0]);
    for (size_t i = 0; i < nsends; i++) {
        uint8_t buf[32 * FUZZ_BOOT_MAX_RANKS] = {0};
        int param = sends[i] >> 3;
        switch (sends[i] & 7) {
        case FUZZ_BOOT_BARRIER:
            shoal_boot_send(bs, peer, SHOAL_BOOT_OP_BARRIER, ++bs->seq, NULL, 0, 0);
            break;
        case FUZZ_BOOT_ALLGATHER:
            /* Rank 0 sends every rank's block back. */
            shoal_boot_send(bs, peer, SHOAL_BOOT_OP_ALLGATHER, ++bs->seq, buf,
                            (size_t)param * (rank == 0 ? (size_t)nranks : 1), 0);
            break;
        case FUZZ_BOOT_BCAST:
            shoal_boot_send(bs, peer, SHOAL_BOOT_OP_BCAST, ++bs->seq, buf, 8, 0);
            break;
        case FUZZ_BOOT_JOIN:
            shoal_boot_send_verdict(bs, sv[0], 0, bs->links[peer].key, &bs->links[peer].tx, peer,
                                    (shoal_boot_verdict_t)param, 0);
            break;
        case FUZZ_BOOT_SEND_FAIL:
            shoal_boot_send_fail(bs, peer, param, (shoal_status_t)(param % SHOAL_STATUS_COUNT),
                                 "rank 3 went away", 0);
            break;
        case FUZZ_BOOT_SEND_BYE:
            shoal_boot_send(bs, peer, SHOAL_BOOT_OP_BYE, bs->seq, NULL, 0, 0);
            break;
        }
    }
    size_t len = fuzz_drain(sv[1], out, cap);
    bs->fds[peer] = -1;
    shoal_bootstrap_destroy(bs);
    close(sv[0]);
    close(sv[1]);
    return len;
}

static void fuzz_seeds(void)
{
    /* Hellos: nranks, the ranks joined already (bit r), then the hello. */
    static const struct {
        const char *name;
        int nranks;
        uint8_t joined;
        uint32_t magic, rank, nranks_said;
    } hellos[] = {
        {"hello-ok", 4, 0x01, SHOAL_BOOT_HELLO_MAGIC, 2, 4},
        {"hello-dup", 4, 0x05, SHOAL_BOOT_HELLO_MAGIC, 2, 4},
        {"hello-rank", 4, 0x01, SHOAL_BOOT_HELLO_MAGIC, 4, 4},
        {"hello-rank0", 4, 0x01, SHOAL_BOOT_HELLO_MAGIC, 0, 4},
        {"hello-nranks", 3, 0x01, SHOAL_BOOT_HELLO_MAGIC, 1, 7},
        {"hello-magic", 2, 0x01, 0x47455420u /* "GET " */, 1, 2},
    };
    for (size_t i = 0; i < sizeof(hellos) / sizeof(hellos[0]); i++) {
        uint8_t in[3 + SHOAL_BOOT_HELLO_BYTES];
        in[0] = FUZZ_BOOT_HELLO_MODE;
        in[1] = (uint8_t)(hellos[i].nranks - 1);
        in[2] = hellos[i].joined;
        shoal_boot_put_u32(in + 3, hellos[i].magic);
        shoal_boot_put_u32(in + 7, SHOAL_BOOT_HELLO_VERSION);
        shoal_boot_put_u32(in + 11, hellos[i].rank);
        shoal_boot_put_u32(in + 15, hellos[i].nranks_said);
        fuzz_seed(hellos[i].name, in, sizeof(in));
    }

    /* Messages: the mode byte, this rank's calls, and what the peer sends. */
    static const struct {
        const char *name;
        uint8_t mode;
        uint8_t ncalls, calls[4];
        uint8_t nsends, sends[4];
    } msgs[] = {
        {"r1-barrier", 0x01, 1, {FUZZ_OP(BARRIER, 0)}, 1, {FUZZ_OP(BARRIER, 0)}},
        {"r1-join-barrier", 0x01, 2, {FUZZ_OP(JOIN, 0), FUZZ_OP(BARRIER, 0)},
         2, {FUZZ_OP(JOIN, SHOAL_BOOT_JOIN_OK), FUZZ_OP(BARRIER, 0)}},
        {"r1-join-refused", 0x21, 1, {FUZZ_OP(JOIN, 0)},
         1, {FUZZ_OP(JOIN, SHOAL_BOOT_JOIN_DUPLICATE)}},
        {"r1of3-allgather", 0x03, 1, {FUZZ_OP(ALLGATHER, 4)}, 1, {FUZZ_OP(ALLGATHER, 4)}},
        {"r1of4-bcast-poll", 0x05, 2, {FUZZ_OP(BCAST, 2), FUZZ_OP(POLL, 0)},
         1, {FUZZ_OP(BCAST, 2)}},
        {"r1-fail", 0x01, 1, {FUZZ_OP(BARRIER, 0)}, 1, {FUZZ_OP(SEND_FAIL, 1)}},
        {"r1-fail-closed", 0x21, 1, {FUZZ_OP(ALLGATHER, 1)}, 1, {FUZZ_OP(SEND_FAIL, 6)}},
        {"r1-poll-fail", 0x01, 3, {FUZZ_OP(POLL, 0), FUZZ_OP(POLL, 0), FUZZ_OP(BARRIER, 0)},
         1, {FUZZ_OP(SEND_FAIL, 10)}},
        {"r1-seq", 0x01, 2, {FUZZ_OP(BARRIER, 0), FUZZ_OP(BARRIER, 0)},
         2, {FUZZ_OP(BARRIER, 0), FUZZ_OP(ALLGATHER, 0)}},
        {"r0-allgather-barrier", 0x00, 2, {FUZZ_OP(ALLGATHER, 4), FUZZ_OP(BARRIER, 0)},
         2, {FUZZ_OP(ALLGATHER, 4), FUZZ_OP(BARRIER, 0)}},
        {"r0-bcast-root1", 0x00, 1, {FUZZ_OP(BCAST, 1)}, 1, {FUZZ_OP(BCAST, 1)}},
        {"r0-poll-bye", 0x00, 2, {FUZZ_OP(POLL, 0), FUZZ_OP(BARRIER, 0)},
         1, {FUZZ_OP(SEND_BYE, 0)}},
        {"r0-poll-closed", 0x20, 1, {FUZZ_OP(POLL, 0)}, 0, {0}},
        {"r0-fail", 0x20, 2, {FUZZ_OP(ALLGATHER, 2), FUZZ_OP(BARRIER, 0)},
         1, {FUZZ_OP(SEND_FAIL, 0)}},
    };
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        uint8_t in[2048];
        size_t n = 0;
        in[n++] = msgs[i].mode;
        in[n++] = msgs[i].ncalls;
        memcpy(in + n, msgs[i].calls, msgs[i].ncalls);
        n += msgs[i].ncalls;
        int rank = msgs[i].mode & 1, nranks = rank == 0 ? 2 : 2 + ((msgs[i].mode >> 1) & 3);
        n += fuzz_sent(rank == 0 ? 1 : 0, nranks, msgs[i].sends, msgs[i].nsends, in + n,
                       sizeof(in) - n);
        fuzz_seed(msgs[i].name, in, n);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_setup(fuzz_seeds);
    return 0;
}

static void fuzz_hello(const uint8_t *data, size_t size)
{
    uint8_t in[3 + SHOAL_BOOT_HELLO_BYTES] = {0};
    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    int fds[FUZZ_BOOT_MAX_RANKS];
    shoal_bootstrap_t bs = {.nranks = 1 + in[1] % FUZZ_BOOT_MAX_RANKS, .fds = fds};
    for (int r = 0; r < bs.nranks; r++)
        fds[r] = in[2] >> r & 1 ? 100 + r : -1; /* a rank that joined */
    int rank = -1;
    shoal_boot_verdict_t v = shoal_boot_check_hello(&bs, in + 3, &rank);
    fuzz_assert(v < SHOAL_BOOT_JOIN_COUNT);
    /* Rank 0 files the connection under the rank of an accepted hello. */
    if (v == SHOAL_BOOT_JOIN_OK)
        fuzz_assert(rank >= 1 && rank < bs.nranks && fds[rank] < 0);
}

static void fuzz_messages(const uint8_t *data, size_t size)
{
    uint8_t mode = data[0];
    size_t nops = size > 1 ? data[1] % 8 : 0;
    if (size < 2 + nops)
        return;
    const uint8_t *ops = data + 2;
    int rank = mode & 1;
    int nranks = rank == 0 ? 2 : 2 + ((mode >> 1) & 3);
    int peer = rank == 0 ? 1 : 0;
    int peer_fd;
    int fd = fuzz_peer(data + 2 + nops, size - 2 - nops, mode & FUZZ_BOOT_PEER_CLOSED, &peer_fd);
    shoal_bootstrap_t *bs = fuzz_bs_create(rank, nranks, peer, fd);

    shoal_status_t failed = SHOAL_OK;
    for (size_t i = 0; i < nops; i++) {
        uint8_t buf[32 * FUZZ_BOOT_MAX_RANKS];
        int param = ops[i] >> 3;
        int culprit = -2;
        char text[128];
        shoal_status_t s;
        memset(buf, 0, sizeof(buf));
        switch (ops[i] & 7) {
        case FUZZ_BOOT_BARRIER:
            s = shoal_bootstrap_barrier(bs);
            break;
        case FUZZ_BOOT_ALLGATHER:
            s = shoal_bootstrap_allgather(bs, buf, (size_t)param);
            break;
        case FUZZ_BOOT_BCAST:
            s = shoal_bootstrap_bcast(bs, buf, 8, param % nranks);
            break;
        case FUZZ_BOOT_POLL:
            s = shoal_bootstrap_poll(bs, &culprit, text, sizeof(text));
            if (s != SHOAL_OK) {
                fuzz_assert(memchr(text, '\0', sizeof(text)) != NULL);
                fuzz_assert(culprit >= -1 && culprit < nranks);
            }
            break;
        case FUZZ_BOOT_JOIN:
            s = shoal_boot_recv(bs, peer, SHOAL_BOOT_OP_JOIN, 0, buf, 4,
                                shoal_deadline_after(FUZZ_DEADLINE_NS));
            break;
        default:
            continue;
        }
        fuzz_assert(s < SHOAL_STATUS_COUNT && s != SHOAL_INPROGRESS);
        /* Polling a failed bootstrap finds no news; a collective repeats
         * the failure; the join verdict is read before there is one. */
        int sticky = (ops[i] & 7) != FUZZ_BOOT_POLL && (ops[i] & 7) != FUZZ_BOOT_JOIN;
        if (failed != SHOAL_OK && sticky)
            fuzz_assert(s == failed);
        if (s != SHOAL_OK && failed == SHOAL_OK && (sticky || (ops[i] & 7) == FUZZ_BOOT_POLL))
            failed = s;
    }
    shoal_bootstrap_destroy(bs);
    if (peer_fd >= 0)
        close(peer_fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & FUZZ_BOOT_HELLO_MODE)
        fuzz_hello(data, size);
    else
        fuzz_messages(data, size);
    return 0;
}
