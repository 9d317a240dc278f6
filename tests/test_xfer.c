/* The message engine (shoal_xfer_run) and the algorithms built on it that
 * are not all-to-all: send/recv (p2p), direct gather and direct scatter.
 *
 * - Matrix over shared memory (1..8 ranks) and tcp (2..8): chains of
 *   messages of 0, 1, odd, exactly one piece and several pieces between
 *   rank pairs through the p2p algorithm; one shoal_xfer_run per rank with
 *   several messages to and from every peer (order per peer, 0-byte
 *   messages, a receive that reduces); gather and scatter for every root,
 *   counts 0, 1, odd and several pieces, element sizes 1, 4 and 8, in place
 *   and out of place.
 * - Two ranks that each send the other a message far larger than the FIFOs
 *   and socket buffers before receiving: must not deadlock.
 * - A receiver that expects another size than was sent gets an error, not
 *   a hang; a message that never comes times out; an abort is seen.
 * Values are exact bytes computed from (source, destination, index), and
 * bytes outside the destination blocks must keep their sentinel. */
#include "harness.h"

#include "algos/reduce.h"
#include "core/bootstrap.h"
#include "base/clock.h"
#include "core/coll.h"
#include "base/dtype.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define GUARD_BYTES 64
#define SENTINEL 0xa5

/* Byte i of message `msg` from src to dst. */
static unsigned char pat(int src, int dst, size_t i, uint32_t msg)
{
    uint32_t h = harness_mix((uint32_t)src * 0x9e3779b1u + msg);
    h = harness_mix(h ^ ((uint32_t)dst * 0x85ebca6bu));
    return (unsigned char)harness_mix(h + (uint32_t)i);
}

static void fill(unsigned char *buf, size_t bytes, int src, int dst, uint32_t msg)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = pat(src, dst, i, msg);
}

static int check_bytes(const unsigned char *buf, size_t bytes, int src, int dst, uint32_t msg,
                       const char *what)
{
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(buf[i] == pat(src, dst, i, msg), fail,
                   "rank %d: %s (message %u from rank %d): byte %zu of %zu is %#x, want %#x",
                   dst, what, msg, src, i, bytes, buf[i], pat(src, dst, i, msg));
    return 0;
fail:
    return 1;
}

static int check_sentinel(const unsigned char *p, size_t bytes, int rank, const char *what)
{
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(p[i] == SENTINEL, fail, "rank %d: %s: byte %zu is %#x, want the sentinel", rank,
                   what, i, p[i]);
    return 0;
fail:
    return 1;
}

static shoal_status_t p2p(shoal_comm_t comm, int send, int peer, void *buf, size_t count,
                          shoal_dtype_t dt)
{
    shoal_coll_args_t a = {.kind = send ? SHOAL_COLL_SEND : SHOAL_COLL_RECV,
                           .sendbuf = send ? buf : NULL,
                           .recvbuf = send ? NULL : buf,
                           .count = count,
                           .dtype = dt,
                           .root = peer};
    return shoal_coll_run(comm, &shoal_p2p_ops, send ? "send test" : "recv test", &a, NULL);
}

/* ---- send/recv chains ------------------------------------------------- */

/* The chain of messages, in int32 elements: empty ones, one element, odd,
 * exactly one piece, several pieces and a short tail. */
static const size_t chain_counts[] = {0, 1, 17, TEST_CHUNK / 4, 0, 3 * (TEST_CHUNK / 4) + 5,
                                      2};
#define CHAIN_LEN (sizeof(chain_counts) / sizeof(chain_counts[0]))
#define CHAIN_MAX (3 * (TEST_CHUNK / 4) + 5)

static int chain_send(shoal_comm_t comm, int rank, int peer, unsigned char *buf)
{
    for (size_t m = 0; m < CHAIN_LEN; m++) {
        size_t bytes = chain_counts[m] * 4;
        fill(buf, bytes, rank, peer, (uint32_t)m);
        shoal_status_t s = p2p(comm, 1, peer, chain_counts[m] ? buf : NULL, chain_counts[m],
                               SHOAL_INT32);
        RANK_CHECK(s == SHOAL_OK, fail, "rank %d: send %zu of %zu B to %d: %s (%s)", rank, m, bytes,
                   peer, shoal_status_string(s), shoal_comm_last_error(comm));
    }
    return 0;
fail:
    return 1;
}

static int chain_recv(shoal_comm_t comm, int rank, int peer, unsigned char *buf)
{
    for (size_t m = 0; m < CHAIN_LEN; m++) {
        size_t bytes = chain_counts[m] * 4;
        memset(buf, SENTINEL, CHAIN_MAX * 4 + GUARD_BYTES);
        shoal_status_t s = p2p(comm, 0, peer, chain_counts[m] ? buf : NULL, chain_counts[m],
                               SHOAL_INT32);
        RANK_CHECK(s == SHOAL_OK, fail, "rank %d: recv %zu of %zu B from %d: %s (%s)", rank, m,
                   bytes, peer, shoal_status_string(s), shoal_comm_last_error(comm));
        if (check_bytes(buf, bytes, peer, rank, (uint32_t)m, "p2p chain") ||
            check_sentinel(buf + bytes, CHAIN_MAX * 4 + GUARD_BYTES - bytes, rank,
                           "past the received message"))
            return 1;
    }
    return 0;
fail:
    return 1;
}

/* Pairs (0,1), (2,3), ...: the even rank sends its whole chain first, the
 * odd one receives first; then the other way round. An odd rank out
 * waits. */
static int check_p2p_chains(shoal_comm_t comm, int rank, int n)
{
    int peer = rank ^ 1;
    if (peer >= n)
        return 0;
    unsigned char *buf = malloc(CHAIN_MAX * 4 + GUARD_BYTES);
    RANK_CHECK(buf, fail, "out of memory");
    int rc = rank % 2 == 0 ? chain_send(comm, rank, peer, buf) || chain_recv(comm, rank, peer, buf)
                           : chain_recv(comm, rank, peer, buf) || chain_send(comm, rank, peer, buf);
    free(buf);
    return rc;
fail:
    return 1;
}

/* ---- one xfer_run with every peer --------------------------------------- */

/* Messages from src to dst, in bytes: several per peer, so order matters;
 * the last one is received with a reduction (int32 SUM). */
static size_t all_bytes(int src, int dst, int m)
{
    static const size_t sizes[] = {3 * TEST_CHUNK + 5, 0, 1, TEST_CHUNK, 0};
    if (m < 5)
        return sizes[m] + (m == 0 ? (size_t)(src + 3 * dst) : 0);
    return 4 * (TEST_CHUNK / 4 + 3 + (size_t)src); /* the reduced one, int32 */
}
#define ALL_MSGS 6
#define ALL_REDUCED (ALL_MSGS - 1)

/* Element i of the reduced message: the sender's value and the receiver's
 * own value, small enough that their sum is exact. */
static int32_t red_sent(int src, int dst, size_t i)
{
    return (int32_t)(harness_mix((uint32_t)(src * 64 + dst) * 2654435761u + (uint32_t)i) % 100000);
}
static int32_t red_own(int dst, size_t i)
{
    return (int32_t)(i * 7) - dst * 1000;
}

static int check_xfer_all(shoal_comm_t comm, int rank, int n)
{
    if (n == 1)
        return 0;
    size_t np = (size_t)n - 1;
    shoal_xfer_t *sends = calloc(np * ALL_MSGS, sizeof(*sends));
    shoal_xfer_t *recvs = calloc(np * ALL_MSGS, sizeof(*recvs));
    unsigned char **sbuf = calloc(np * ALL_MSGS, sizeof(*sbuf));
    unsigned char **rbuf = calloc(np * ALL_MSGS, sizeof(*rbuf));
    RANK_CHECK(sends && recvs && sbuf && rbuf, fail, "out of memory");
    shoal_reduce_fn_t sum = shoal_reduce_fn(SHOAL_INT32, SHOAL_SUM);
    /* Message-major order: a peer's messages are spread through the arrays,
     * each after the previous one of that peer. */
    size_t k = 0;
    for (int m = 0; m < ALL_MSGS; m++) {
        for (int d = 1; d < n; d++, k++) {
            int to = (rank + d) % n, from = (rank - d + n) % n;
            size_t sb = all_bytes(rank, to, m), rb = all_bytes(from, rank, m);
            sbuf[k] = malloc(sb + 1);
            rbuf[k] = malloc(rb + GUARD_BYTES);
            RANK_CHECK(sbuf[k] && rbuf[k], fail, "out of memory");
            memset(rbuf[k], SENTINEL, rb + GUARD_BYTES);
            if (m == ALL_REDUCED) {
                int32_t *sv = (int32_t *)sbuf[k], *rv = (int32_t *)rbuf[k];
                for (size_t i = 0; i < sb / 4; i++)
                    sv[i] = red_sent(rank, to, i);
                for (size_t i = 0; i < rb / 4; i++)
                    rv[i] = red_own(rank, i);
                recvs[k].reduce = sum;
            } else {
                fill(sbuf[k], sb, rank, to, (uint32_t)m);
            }
            sends[k] = (shoal_xfer_t){.ep = shoal_comm_ep(comm, to), .buf = sbuf[k],
                                      .bytes = sb, .esize = 4};
            recvs[k].ep = shoal_comm_ep(comm, from);
            recvs[k].buf = rbuf[k];
            recvs[k].bytes = rb;
            recvs[k].esize = 4;
        }
    }
    shoal_status_t s = shoal_xfer_run(&comm->team, sends, k, recvs, k,
                                      shoal_deadline_after(20ull * 1000000000ull));
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: xfer_run with every peer: %s", rank,
               shoal_status_string(s));
    k = 0;
    for (int m = 0; m < ALL_MSGS; m++) {
        for (int d = 1; d < n; d++, k++) {
            int from = (rank - d + n) % n;
            size_t rb = all_bytes(from, rank, m);
            RANK_CHECK(recvs[k].done == rb && sends[k].done == sends[k].bytes, fail,
                       "rank %d: message %d with peers +-%d: done %zu/%zu and %zu/%zu", rank,
                       m, d, sends[k].done, sends[k].bytes, recvs[k].done, rb);
            if (m == ALL_REDUCED) {
                const int32_t *rv = (const int32_t *)rbuf[k];
                for (size_t i = 0; i < rb / 4; i++)
                    RANK_CHECK(rv[i] == red_own(rank, i) + red_sent(from, rank, i), fail,
                               "rank %d: reduced message from %d: element %zu is %d, want %d",
                               rank, from, i, rv[i], red_own(rank, i) + red_sent(from, rank, i));
            } else if (check_bytes(rbuf[k], rb, from, rank, (uint32_t)m, "xfer with every peer")) {
                return 1;
            }
            if (check_sentinel(rbuf[k] + rb, GUARD_BYTES, rank, "past an xfer message"))
                return 1;
            free(sbuf[k]);
            free(rbuf[k]);
        }
    }
    free(sends);
    free(recvs);
    free(sbuf);
    free(rbuf);
    return 0;
fail:
    return 1;
}

/* ---- gather and scatter ------------------------------------------------- */

static size_t gs_count(int c, size_t es)
{
    static const size_t small[] = {0, 1, 17};
    return c < 3 ? small[c] : 3 * (TEST_CHUNK / es) + 5;
}

static int check_gather(shoal_comm_t comm, int rank, int n, int root, shoal_dtype_t dt,
                        size_t count, int in_place)
{
    size_t es = shoal_dtype_bytes(dt), blk = count * es, total = (size_t)n * blk;
    uint32_t salt = (uint32_t)(count * 3 + es + (size_t)in_place);
    int is_root = rank == root;
    unsigned char *send = malloc(blk + 1), *all = malloc(total + GUARD_BYTES);
    RANK_CHECK(send && all, fail, "out of memory");
    memset(all, SENTINEL, total + GUARD_BYTES);
    unsigned char *mine = is_root && in_place ? all + (size_t)root * blk : send;
    fill(mine, blk, rank, root, salt);
    /* Off the root, recvbuf is ignored: NULL in place, else a buffer that
     * must keep its sentinel. */
    shoal_coll_args_t a = {.kind = SHOAL_COLL_GATHER,
                           .sendbuf = count ? mine : NULL,
                           .recvbuf = count && (is_root || !in_place) ? all : NULL,
                           .count = count,
                           .dtype = dt,
                           .root = root};
    shoal_status_t s = shoal_coll_run(comm, &shoal_direct_gather_ops, "gather test", &a, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: gather of %zu x %s to %d%s: %s (%s)", rank, n,
               count, shoal_dtype_name(dt), root, in_place ? " in place" : "",
               shoal_status_string(s), shoal_comm_last_error(comm));
    if (is_root) {
        for (int j = 0; j < n; j++)
            if (check_bytes(all + (size_t)j * blk, blk, j, root, salt, "gather"))
                return 1;
    } else if (check_sentinel(all, total, rank, "non-root recvbuf of gather")) {
        return 1;
    }
    if (check_sentinel(all + total, GUARD_BYTES, rank, "past the end of gather's recvbuf"))
        return 1;
    if (!(is_root && in_place) && check_bytes(send, blk, rank, root, salt, "gather's sendbuf"))
        return 1;
    free(send);
    free(all);
    return 0;
fail:
    return 1;
}

static int check_scatter(shoal_comm_t comm, int rank, int n, int root, shoal_dtype_t dt,
                         size_t count, int in_place)
{
    size_t es = shoal_dtype_bytes(dt), blk = count * es, total = (size_t)n * blk;
    uint32_t salt = (uint32_t)(count * 5 + es + (size_t)in_place);
    int is_root = rank == root;
    unsigned char *all = malloc(total + 1), *recv = malloc(blk + GUARD_BYTES);
    RANK_CHECK(all && recv, fail, "out of memory");
    memset(recv, SENTINEL, blk + GUARD_BYTES);
    if (is_root) {
        for (int j = 0; j < n; j++)
            fill(all + (size_t)j * blk, blk, root, j, salt);
    } else {
        memset(all, SENTINEL, total);
    }
    unsigned char *dst = is_root && in_place ? all + (size_t)root * blk : recv;
    shoal_coll_args_t a = {.kind = SHOAL_COLL_SCATTER,
                           .sendbuf = count && (is_root || !in_place) ? all : NULL,
                           .recvbuf = count ? dst : NULL,
                           .count = count,
                           .dtype = dt,
                           .root = root};
    shoal_status_t s = shoal_coll_run(comm, &shoal_direct_scatter_ops, "scatter test", &a, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: scatter of %zu x %s from %d%s: %s (%s)", rank, n,
               count, shoal_dtype_name(dt), root, in_place ? " in place" : "",
               shoal_status_string(s), shoal_comm_last_error(comm));
    if (check_bytes(dst, blk, root, rank, salt, "scatter"))
        return 1;
    if (dst == recv && check_sentinel(recv + blk, GUARD_BYTES, rank, "past scatter's recvbuf"))
        return 1;
    if (is_root) {
        /* The root's sendbuf is read only (in place, its own block is the
         * result, which is the same bytes). */
        for (int j = 0; j < n; j++)
            if (check_bytes(all + (size_t)j * blk, blk, root, j, salt, "scatter's sendbuf"))
                return 1;
        if (in_place && check_sentinel(recv, blk + GUARD_BYTES, rank, "unused recv buffer"))
            return 1;
    } else if (check_sentinel(all, total, rank, "non-root sendbuf of scatter")) {
        return 1;
    }
    free(all);
    free(recv);
    return 0;
fail:
    return 1;
}

static int check_gather_scatter(shoal_comm_t comm, int rank, int n)
{
    static const shoal_dtype_t dts[] = {SHOAL_INT8, SHOAL_INT32, SHOAL_FLOAT64};
    for (int root = 0; root < n; root++)
        for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
            for (int c = 0; c < 4; c++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    size_t count = gs_count(c, shoal_dtype_bytes(dts[d]));
                    if (check_gather(comm, rank, n, root, dts[d], count, in_place) ||
                        check_scatter(comm, rank, n, root, dts[d], count, in_place))
                        return 1;
                }
    return 0;
}

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    if (check_p2p_chains(comm, rank, nranks) || check_xfer_all(comm, rank, nranks) ||
        check_gather_scatter(comm, rank, nranks))
        return 1;
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void run_matrix(const char *transport, int nranks)
{
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_matrix, NULL, 120), 0);
}

#define MATRIX_TEST(tl, n)                                                    \
    static void test_##tl##_##n(void **state)                                 \
    {                                                                         \
        (void)state;                                                          \
        run_matrix(#tl, n);                                                   \
    }
MATRIX_TEST(shm, 1) MATRIX_TEST(shm, 2) MATRIX_TEST(shm, 3) MATRIX_TEST(shm, 4)
MATRIX_TEST(shm, 5) MATRIX_TEST(shm, 6) MATRIX_TEST(shm, 7) MATRIX_TEST(shm, 8)
MATRIX_TEST(tcp, 2) MATRIX_TEST(tcp, 3) MATRIX_TEST(tcp, 4) MATRIX_TEST(tcp, 5)
MATRIX_TEST(tcp, 6) MATRIX_TEST(tcp, 7) MATRIX_TEST(tcp, 8)

/* ---- two ranks, each sending first -------------------------------------- */

/* Far beyond the shm FIFO (8 slots) and the loopback socket buffers (a few
 * MiB), so a schedule that finished its send before it received would
 * wait forever. */
#define CROSS_BYTES (24u << 20)

static int rank_crossed(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int peer = 1 - rank;
    unsigned char *out = malloc(CROSS_BYTES), *in = malloc(CROSS_BYTES + GUARD_BYTES);
    RANK_CHECK(out && in, fail, "out of memory");
    fill(out, CROSS_BYTES, rank, peer, 99);
    memset(in, SENTINEL, CROSS_BYTES + GUARD_BYTES);
    /* The send comes first in the arrays and the receive second: the
     * engine must still receive while the send waits for room. */
    shoal_xfer_t s0 = {.ep = shoal_comm_ep(comm, peer), .buf = out, .bytes = CROSS_BYTES};
    shoal_xfer_t r0 = {.ep = shoal_comm_ep(comm, peer), .buf = in, .bytes = CROSS_BYTES};
    shoal_status_t s = shoal_xfer_run(&comm->team, &s0, 1, &r0, 1,
                                      shoal_deadline_after(20ull * 1000000000ull));
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: crossed xfer: %s", rank, shoal_status_string(s));
    if (check_bytes(in, CROSS_BYTES, peer, rank, 99, "crossed message") ||
        check_sentinel(in + CROSS_BYTES, GUARD_BYTES, rank, "past the crossed message"))
        return 1;
    free(out);
    free(in);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_crossed(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_crossed, NULL, 60), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_crossed, NULL, 60), 0);
}

/* ---- errors ------------------------------------------------------------- */

typedef struct {
    size_t sent, expected; /* bytes rank 0 sends and rank 1 expects */
} mismatch_t;

/* Rank 0 sends one message, rank 1 expects another size: rank 1 must fail
 * with SHOAL_ERR_MISMATCH and a reason, soon, and rank 0 must not hang. */
static int rank_mismatch(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const mismatch_t *mm = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t max = mm->sent > mm->expected ? mm->sent : mm->expected;
    unsigned char *buf = malloc(max + 1);
    RANK_CHECK(buf, fail, "out of memory");
    memset(buf, 0, max + 1);
    shoal_status_t s = p2p(comm, rank == 0, 1 - rank, buf, rank == 0 ? mm->sent : mm->expected,
                           SHOAL_INT8);
    if (rank == 0) {
        RANK_CHECK(s == SHOAL_OK, fail, "sender of %zu B: %s (%s)", mm->sent,
                   shoal_status_string(s), shoal_comm_last_error(comm));
    } else {
        RANK_CHECK(s == SHOAL_ERR_MISMATCH, fail, "receiver of %zu B where %zu B were sent: %s",
                   mm->expected, mm->sent, shoal_status_string(s));
        RANK_CHECK(shoal_comm_last_error(comm)[0] != '\0', fail, "mismatch left no reason");
    }
    free(buf);
    /* The mismatch breaks the receiver's communicator (its FIFO still holds
     * the sender's pieces), so it leaves without the final barrier and the
     * sender's destroy may see it gone. */
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK || (rank == 0 && (s == SHOAL_ERR_PEER || s == SHOAL_ERR_MISMATCH)),
               fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_mismatch(void **state)
{
    (void)state;
    /* Shorter, longer, empty against not, and a last piece one byte off. */
    static const mismatch_t cases[] = {{100, 200},
                                       {200, 100},
                                       {0, 8},
                                       {8, 0},
                                       {3 * TEST_CHUNK + 5, 3 * TEST_CHUNK + 4},
                                       {100, 3 * TEST_CHUNK}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        harness_use_transport(i % 2 ? "tcp" : "shm", TEST_CHUNK);
        assert_int_equal(harness_run_ranks(2, rank_mismatch, (void *)&cases[i], 60), 0);
    }
}

/* A message that is never sent times out at the deadline instead of
 * waiting forever; then (shm only: tcp's socket buffers would swallow it)
 * so does a send that never finds room. The engine does not mark the
 * communicator broken, so destroy still works. */
static int rank_timeout(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const char *transport = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    static unsigned char buf[16 * TEST_CHUNK];
    shoal_xfer_t x = {.ep = shoal_comm_ep(comm, 1 - rank), .buf = buf, .bytes = 8};
    shoal_status_t s;
    if (rank == 1) {
        s = shoal_xfer_run(&comm->team, NULL, 0, &x, 1, shoal_deadline_after(200ull * 1000000ull));
        RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "missing message: %s", shoal_status_string(s));
        RANK_CHECK(!x.started && x.done == 0, fail, "a piece of a missing message moved");
    }
    /* Through the bootstrap: a barrier on the data path would put a piece
     * where rank 1 is still waiting for its message. */
    s = shoal_bootstrap_barrier(comm->bootstrap);
    RANK_CHECK(s == SHOAL_OK, fail, "barrier after a timeout: %s", shoal_status_string(s));
    if (rank == 0 && !strcmp(transport, "shm")) {
        x.bytes = sizeof(buf);
        s = shoal_xfer_run(&comm->team, &x, 1, NULL, 0, shoal_deadline_after(200ull * 1000000ull));
        RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "send without room: %s", shoal_status_string(s));
        RANK_CHECK(x.done > 0 && x.done < x.bytes, fail, "send without room moved %zu of %zu B",
                   x.done, x.bytes);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* An aborted communicator's transfer returns SHOAL_ERR_ABORTED. The flag
 * is set here by hand (as shoal_comm_abort does) and cleared after, since
 * nothing moved. */
static int rank_abort(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    unsigned char b[8];
    shoal_xfer_t x = {.ep = shoal_comm_ep(comm, 1 - rank), .buf = b, .bytes = sizeof(b)};
    atomic_store(&comm->team.aborted, 1);
    shoal_status_t s = shoal_xfer_run(&comm->team, NULL, 0, &x, 1,
                                      shoal_deadline_after(20ull * 1000000000ull));
    atomic_store(&comm->team.aborted, 0);
    RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "aborted xfer: %s", shoal_status_string(s));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_timeout_abort(void **state)
{
    (void)state;
    static char shm[] = "shm", tcp[] = "tcp";
    harness_use_transport(shm, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_timeout, shm, 60), 0);
    assert_int_equal(harness_run_ranks(2, rank_abort, NULL, 60), 0);
    harness_use_transport(tcp, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_timeout, tcp, 60), 0);
    assert_int_equal(harness_run_ranks(2, rank_abort, NULL, 60), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_1),    cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3),    cmocka_unit_test(test_shm_4),
        cmocka_unit_test(test_shm_5),    cmocka_unit_test(test_shm_6),
        cmocka_unit_test(test_shm_7),    cmocka_unit_test(test_shm_8),
        cmocka_unit_test(test_tcp_2),    cmocka_unit_test(test_tcp_3),
        cmocka_unit_test(test_tcp_4),    cmocka_unit_test(test_tcp_5),
        cmocka_unit_test(test_tcp_6),    cmocka_unit_test(test_tcp_7),
        cmocka_unit_test(test_tcp_8),    cmocka_unit_test(test_crossed),
        cmocka_unit_test(test_mismatch), cmocka_unit_test(test_timeout_abort),
    };
    return cmocka_run_group_tests_name("xfer", tests, NULL, NULL);
}
