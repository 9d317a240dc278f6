/* Reliable connections over RDMA ports (transport/ib_qp.c):
 * - a queue pair's address survives its wire form, and a malformed one
 *   (length, link layer, MTU, 24-bit numbers) is refused;
 * - a port that is not there cannot be opened;
 * - with SHOAL_TEST_RXE=1 (the RDMA guest of tests/rdma, after
 *   rxe_setup.sh): two processes, on rxe0 and rxe1, connect a queue pair
 *   each through their addresses, then RDMA-write with immediate into the
 *   other's registered buffer, both ways, at 0, 1, 4097 and 1 MiB bytes:
 *   every write completes, the receiver sees the immediate and the length,
 *   and the bytes are the sender's; a write with a wrong key completes in
 *   error (on the sender, within the deadline) instead of hanging;
 * - with SHOAL_TEST_RXE=1: a FIFO of 4 slots each way (transport/ib_fifo.c)
 *   between the same two processes carries 300 messages each way at once,
 *   of sizes around the slot's (0, 1, 31, 32, 33, 1000, 4095, 4096 B),
 *   each with its header, in order, many times around the rings, and
 *   flushes. */
#include "harness.h"

#include "base/clock.h"
#include "transport/ib_fifo.h"
#include "transport/ib_qp.h"

#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_addr(void **state)
{
    (void)state;
    shoal_ib_addr_t a = {.qpn = 0x123456, .psn = 0xabcdef, .lid = 0x1234,
                         .link = SHOAL_IB_LINK_ETH, .mtu = 3}, b;
    for (int i = 0; i < 16; i++)
        a.gid[i] = (uint8_t)(0xf0 + i);
    uint8_t wire[SHOAL_IB_ADDR_BYTES];
    shoal_ib_addr_pack(&a, wire);
    assert_int_equal(wire[0], 0x56); /* little-endian */
    assert_int_equal(shoal_ib_addr_unpack(wire, sizeof(wire), &b), SHOAL_OK);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_int_equal(shoal_ib_addr_unpack(wire, sizeof(wire) - 1, &b), SHOAL_ERR_PEER);
    uint8_t bad[SHOAL_IB_ADDR_BYTES];
    memcpy(bad, wire, sizeof(bad));
    bad[10] = 3; /* link layer */
    assert_int_equal(shoal_ib_addr_unpack(bad, sizeof(bad), &b), SHOAL_ERR_PEER);
    memcpy(bad, wire, sizeof(bad));
    bad[11] = 0; /* MTU */
    assert_int_equal(shoal_ib_addr_unpack(bad, sizeof(bad), &b), SHOAL_ERR_PEER);
    bad[11] = 6;
    assert_int_equal(shoal_ib_addr_unpack(bad, sizeof(bad), &b), SHOAL_ERR_PEER);
    memcpy(bad, wire, sizeof(bad));
    bad[7] = 1; /* a PSN beyond 24 bits */
    assert_int_equal(shoal_ib_addr_unpack(bad, sizeof(bad), &b), SHOAL_ERR_PEER);
}

static void test_no_such_port(void **state)
{
    (void)state;
#if SHOAL_HAVE_IBVERBS
    shoal_ib_port_t port = {.dev = "shoal_no_such_dev", .port = 1, .link = SHOAL_IB_LINK_ETH};
    shoal_ib_dev_t dev;
    assert_int_equal(shoal_ib_dev_open(&port, &dev), SHOAL_ERR_UNSUPPORTED);
#endif
}

#if SHOAL_HAVE_IBVERBS
#define BUF_BYTES (1u << 20)
#define DEPTH 16
#define POLL_NS (20ull * 1000000000ull)

/* What each side tells the other. */
typedef struct {
    uint8_t addr[SHOAL_IB_ADDR_BYTES];
    uint64_t buf;
    uint32_t rkey;
} card_t;

static int xfer(int fd, void *p, size_t len, int out)
{
    char *c = p;
    while (len > 0) {
        ssize_t r = out ? write(fd, c, len) : read(fd, c, len);
        if (r <= 0)
            return -1;
        c += r;
        len -= (size_t)r;
    }
    return 0;
}

static unsigned char pattern(int side, int round, size_t i)
{
    return (unsigned char)(harness_mix((uint32_t)(side * 7919 + round * 104729) ^ (uint32_t)i) >> 24);
}

/* One completion, within the deadline; -1 on timeout or a poll error. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
    uint64_t deadline = shoal_deadline_after(POLL_NS);
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n == 1)
            return 0;
        if (n < 0 || shoal_deadline_passed(deadline))
            return -1;
    }
}

static int post_recv(struct ibv_qp *qp, uint64_t id)
{
    struct ibv_recv_wr wr = {.wr_id = id}, *bad;
    return ibv_post_recv(qp, &wr, &bad);
}

static int post_write(struct ibv_qp *qp, struct ibv_mr *mr, size_t len, const card_t *peer,
                      uint32_t key, uint32_t imm)
{
    struct ibv_sge sge = {.addr = (uintptr_t)mr->addr, .length = (uint32_t)len,
                          .lkey = mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = imm, .sg_list = &sge, .num_sge = len ? 1 : 0,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(imm),
        .wr = {.rdma = {.remote_addr = peer->buf, .rkey = key}},
    }, *bad;
    return ibv_post_send(qp, &wr, &bad);
}

/* Opens rxe0 (side 0) or rxe1 (side 1); 0 on success. */
static int open_rxe(int side, shoal_ib_dev_t *dev)
{
    const char *name = side ? "rxe1" : "rxe0";
    shoal_ib_list_t list;
    int rc = 1;
    RANK_CHECK(shoal_ib_ports_find(&list) == SHOAL_OK, out, "find");
    const shoal_ib_port_t *port = NULL;
    for (int i = 0; i < list.nports; i++)
        port = !strcmp(list.ports[i].dev, name) ? &list.ports[i] : port;
    RANK_CHECK(port, out_list, "%s not found", name);
    RANK_CHECK(shoal_ib_dev_open(port, dev) == SHOAL_OK, out_list, "open %s", name);
    rc = 0;
out_list:
    shoal_ib_ports_free(&list);
out:
    return rc;
}

/* Connects qp to the peer whose packed address is blob; 0 on success. */
static int connect_to(shoal_ib_qp_t *qp, const uint8_t *blob)
{
    shoal_ib_addr_t remote;
    RANK_CHECK(shoal_ib_addr_unpack(blob, SHOAL_IB_ADDR_BYTES, &remote) == SHOAL_OK, fail,
               "unpack");
    RANK_CHECK(shoal_ib_qp_connect(qp, &remote) == SHOAL_OK, fail, "connect");
    return 0;
fail:
    return 1;
}

/* Both sides got here: a byte each way. */
static int meet(int fd)
{
    char go = 1;
    return xfer(fd, &go, 1, 1) == 0 && xfer(fd, &go, 1, 0) == 0 ? 0 : -1;
}

/* Side 0 (rxe0) writes first each round; side 1 (rxe1) answers. */
static int run_side(int side, int fd)
{
    shoal_ib_dev_t dev = {0};
    shoal_ib_qp_t qp = {0};
    struct ibv_mr *mr = NULL;
    unsigned char *buf = NULL;
    int rc = 1;
    if (open_rxe(side, &dev) != 0)
        return 1;
    RANK_CHECK(shoal_ib_qp_create(&dev, DEPTH, &qp) == SHOAL_OK, out_dev, "qp");
    buf = calloc(1, BUF_BYTES);
    RANK_CHECK(buf, out_qp, "out of memory");
    mr = shoal_ib_mr_reg(&dev, buf, BUF_BYTES);
    RANK_CHECK(mr, out_qp, "reg_mr");
    for (int i = 0; i < DEPTH; i++)
        RANK_CHECK(post_recv(qp.qp, (uint64_t)i) == 0, out_qp, "post_recv");
    card_t mine = {.buf = (uintptr_t)buf, .rkey = mr->rkey}, theirs;
    shoal_ib_addr_pack(&qp.local, mine.addr);
    RANK_CHECK(xfer(fd, &mine, sizeof(mine), 1) == 0 && xfer(fd, &theirs, sizeof(theirs), 0) == 0,
               out_qp, "exchange");
    RANK_CHECK(connect_to(&qp, theirs.addr) == 0, out_qp, "connect");
    /* Both sides are ready to receive before either writes. */
    RANK_CHECK(meet(fd) == 0, out_qp, "ready");
    const size_t sizes[] = {0, 1, 4097, BUF_BYTES};
    /* The peer's answer may complete here before our write's own
     * completion (the device reaps acknowledgements and arrivals apart):
     * kept for the next turn. */
    struct ibv_wc early;
    int have_early = 0;
    for (int round = 0; round < 4; round++) {
        size_t len = sizes[round];
        for (int turn = 0; turn < 2; turn++) {
            struct ibv_wc wc;
            if (turn == side) {
                for (size_t i = 0; i < len; i++)
                    buf[i] = pattern(side, round, i);
                RANK_CHECK(post_write(qp.qp, mr, len, &theirs, theirs.rkey,
                                      (uint32_t)(round * 2 + side)) == 0, out_qp, "post_send");
                RANK_CHECK(poll_one(qp.cq, &wc) == 0, out_qp, "no send completion");
                if (!have_early && wc.status == IBV_WC_SUCCESS &&
                    wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                    early = wc;
                    have_early = 1;
                    RANK_CHECK(poll_one(qp.cq, &wc) == 0, out_qp, "no send completion");
                }
                RANK_CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, out_qp,
                           "send completion: status %d opcode %d", wc.status, wc.opcode);
                /* The other side's answer lands in our buffer only after it
                 * saw this one, so the buffer is free again. */
            } else if (have_early) {
                wc = early;
                have_early = 0;
            } else {
                RANK_CHECK(poll_one(qp.cq, &wc) == 0, out_qp, "no receive completion");
            }
            if (turn != side) {
                RANK_CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM,
                           out_qp, "receive: status %d opcode %d", wc.status, wc.opcode);
                RANK_CHECK(ntohl(wc.imm_data) == (uint32_t)(round * 2 + 1 - side), out_qp,
                           "immediate %u", ntohl(wc.imm_data));
                RANK_CHECK(wc.byte_len == len, out_qp, "%u B, expected %zu", wc.byte_len, len);
                for (size_t i = 0; i < len; i++)
                    RANK_CHECK(buf[i] == pattern(1 - side, round, i), out_qp,
                               "round %d byte %zu", round, i);
                RANK_CHECK(post_recv(qp.qp, wc.wr_id) == 0, out_qp, "post_recv");
            }
        }
    }
    /* A wrong key: the write completes in error on the writer. */
    if (side == 0) {
        struct ibv_wc wc;
        RANK_CHECK(post_write(qp.qp, mr, 64, &theirs, theirs.rkey ^ 0x5a5a5a, 99) == 0, out_qp,
                   "post_send");
        RANK_CHECK(poll_one(qp.cq, &wc) == 0, out_qp, "no completion for the bad key");
        RANK_CHECK(wc.status != IBV_WC_SUCCESS, out_qp, "a write with a wrong key succeeded");
        printf("# a wrong key: completion status %d\n", (int)wc.status);
    }
    RANK_CHECK(meet(fd) == 0, out_qp, "done");
    rc = 0;
out_qp:
    shoal_ib_mr_dereg(&dev, mr);
    free(buf);
    shoal_ib_qp_destroy(&qp);
out_dev:
    shoal_ib_dev_close(&dev);
    return rc;
}

#define FIFO_SLOTS 4
#define FIFO_CHUNK 4096
#define FIFO_MSGS 300

static size_t fifo_len(int side, uint64_t n)
{
    static const size_t sizes[] = {0, 1, 31, 32, 33, 1000, 4095, 4096};
    return sizes[(n + (uint64_t)side * 3) % (sizeof(sizes) / sizeof(sizes[0]))];
}

/* Send nsend messages and take nrecv at once: the next message when a
 * slot is free, the next one in when it came, until both are done; with
 * pace_us, a pause after each message sent. */
static int fifo_stream(shoal_ib_fifo_t *f, int side, uint64_t nsend, uint64_t nrecv,
                       unsigned pace_us);

/* Credits pile up on a side that only sends: side 0 fills side 1's slots
 * and sees its writes complete; side 1 sends FIFO_SLOTS messages that side
 * 0 leaves unread, and releases side 0's, one credit each; side 0 then
 * sends FIFO_SLOTS more, each released at once. A sender that learned its
 * credits from a word the peer writes, not from the credits it reaped,
 * would send those without
 * reaping anything, and the third round of credits would find side 0's
 * receives all used: receiver-not-ready, a failed write on side 1. */
static int fifo_credit_flood(shoal_ib_fifo_t *f, int side, int fd)
{
    if (side == 0) {
        RANK_CHECK(fifo_stream(f, 0, FIFO_SLOTS, 0, 0) == 0, fail, "first messages");
        RANK_CHECK(meet(fd) == 0 && meet(fd) == 0, fail, "meet");
        RANK_CHECK(fifo_stream(f, 0, FIFO_SLOTS, 0, 2000) == 0, fail, "second messages");
        RANK_CHECK(meet(fd) == 0, fail, "meet");
        return fifo_stream(f, 0, 0, FIFO_SLOTS, 0);
    }
    RANK_CHECK(meet(fd) == 0, fail, "meet");
    RANK_CHECK(fifo_stream(f, 1, FIFO_SLOTS, FIFO_SLOTS, 0) == 0, fail, "exchange");
    RANK_CHECK(meet(fd) == 0, fail, "meet");
    RANK_CHECK(fifo_stream(f, 1, 0, FIFO_SLOTS, 0) == 0, fail, "second messages");
    return meet(fd);
fail:
    return 1;
}

static int fifo_stream(shoal_ib_fifo_t *f, int side, uint64_t nsend, uint64_t nrecv,
                       unsigned pace_us)
{
    uint64_t sent = 0, got = 0, deadline = shoal_deadline_after(POLL_NS);
    while (sent < nsend || got < nrecv) {
        RANK_CHECK(!shoal_deadline_passed(deadline), fail, "stuck: sent %llu, got %llu",
                   (unsigned long long)sent, (unsigned long long)got);
        void *out;
        size_t cap;
        shoal_status_t s;
        if (sent < nsend && (s = shoal_ib_fifo_send_slot(f, &out, &cap)) != SHOAL_INPROGRESS) {
            RANK_CHECK(s == SHOAL_OK && cap == FIFO_CHUNK, fail, "send_slot: %d", s);
            size_t len = fifo_len(side, sent);
            unsigned char hdr[24];
            for (size_t i = 0; i < len; i++)
                ((unsigned char *)out)[i] = pattern(side, (int)sent, i);
            for (int i = 0; i < 24; i++)
                hdr[i] = pattern(side + 2, (int)sent, (size_t)i);
            RANK_CHECK(shoal_ib_fifo_send_post(f, len, hdr) == SHOAL_OK, fail, "send_post");
            sent++;
            if (pace_us)
                usleep(pace_us);
        }
        const void *in;
        size_t len;
        unsigned char hdr[24];
        if (got < nrecv &&
            (s = shoal_ib_fifo_recv_slot(f, &in, &len, hdr)) != SHOAL_INPROGRESS) {
            RANK_CHECK(s == SHOAL_OK, fail, "recv_slot: %d", s);
            RANK_CHECK(len == fifo_len(1 - side, got), fail, "message %llu: %zu B",
                       (unsigned long long)got, len);
            for (size_t i = 0; i < len; i++)
                RANK_CHECK(((const unsigned char *)in)[i] == pattern(1 - side, (int)got, i),
                           fail, "message %llu byte %zu", (unsigned long long)got, i);
            for (int i = 0; i < 24; i++)
                RANK_CHECK(hdr[i] == pattern(3 - side, (int)got, (size_t)i), fail,
                           "message %llu header byte %d", (unsigned long long)got, i);
            RANK_CHECK(shoal_ib_fifo_recv_release(f) == SHOAL_OK, fail, "recv_release");
            got++;
        }
    }
    for (;;) {
        shoal_status_t s = shoal_ib_fifo_flush(f);
        if (s == SHOAL_OK)
            return 0;
        RANK_CHECK(s == SHOAL_INPROGRESS && !shoal_deadline_passed(deadline), fail,
                   "flush: %d", s);
    }
fail:
    return 1;
}

static int fifo_side(int side, int fd)
{
    shoal_ib_dev_t dev = {0};
    shoal_ib_qp_t qp = {0};
    shoal_ib_fifo_t fifo = {0};
    int rc = 1;
    if (open_rxe(side, &dev) != 0)
        return 1;
    RANK_CHECK(shoal_ib_qp_create(&dev, shoal_ib_fifo_depth(FIFO_SLOTS), &qp) == SHOAL_OK,
               out_dev, "qp");
    struct {
        uint8_t addr[SHOAL_IB_ADDR_BYTES];
        shoal_ib_fifo_remote_t fifo;
    } mine, theirs;
    RANK_CHECK(shoal_ib_fifo_create(&qp, FIFO_SLOTS, FIFO_CHUNK, &fifo, &mine.fifo) == SHOAL_OK,
               out_qp, "fifo");
    shoal_ib_addr_pack(&qp.local, mine.addr);
    RANK_CHECK(xfer(fd, &mine, sizeof(mine), 1) == 0 && xfer(fd, &theirs, sizeof(theirs), 0) == 0,
               out_fifo, "exchange");
    RANK_CHECK(connect_to(&qp, theirs.addr) == 0, out_fifo, "connect");
    shoal_ib_fifo_attach(&fifo, &theirs.fifo);
    RANK_CHECK(meet(fd) == 0, out_fifo, "ready");
    rc = fifo_stream(&fifo, side, FIFO_MSGS, FIFO_MSGS, 0);
    if (rc == 0)
        rc = meet(fd);
    if (rc == 0)
        rc = fifo_credit_flood(&fifo, side, fd);
    /* Neither side tears down while the other may still write. */
    RANK_CHECK(meet(fd) == 0, out_fifo, "done");
out_fifo:
    shoal_ib_fifo_destroy(&fifo);
out_qp:
    shoal_ib_qp_destroy(&qp);
out_dev:
    shoal_ib_dev_close(&dev);
    return rc;
}

/* Runs side(0) here and side(1) in a child, joined by a socketpair. */
static void run_pair(int (*side_fn)(int, int))
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        _exit(side_fn(1, sv[1]));
    }
    close(sv[1]);
    int mine = side_fn(0, sv[0]);
    close(sv[0]);
    int st = harness_wait(pid, 60);
    assert_int_equal(mine, 0);
    assert_int_equal(st, 0);
}
#endif

static int in_guest(void)
{
    return getenv("SHOAL_TEST_RXE") && !strcmp(getenv("SHOAL_TEST_RXE"), "1");
}

static void test_rxe_fifo(void **state)
{
    (void)state;
    if (!in_guest())
        return; /* needs the RDMA guest */
#if SHOAL_HAVE_IBVERBS
    run_pair(fifo_side);
#else
    fail_msg("built without rdma-core's headers");
#endif
}

static void test_rxe_pair(void **state)
{
    (void)state;
    if (!in_guest())
        return; /* needs the RDMA guest; test_no_such_port covers this host */
#if SHOAL_HAVE_IBVERBS
    run_pair(run_side);
#else
    fail_msg("built without rdma-core's headers");
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr),
        cmocka_unit_test(test_no_such_port),
        cmocka_unit_test(test_rxe_pair),
        cmocka_unit_test(test_rxe_fifo),
    };
    return cmocka_run_group_tests_name("ib_qp", tests, NULL, NULL);
}
