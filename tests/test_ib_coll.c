/* Collectives across two hosts of one machine: ranks in two blocks, each
 * block a "host" of its own (harness_split_hosts: SHOAL_HOST_ID), so that
 * ranks of one host share memory and the ranks of the other are reached
 * through the inter-host transport. Without RDMA ports that is tcp; inside
 * the RDMA test guest (SHOAL_TEST_RXE=1) it is the ib transport over the
 * Soft-RoCE devices rxe0 (host 0) and rxe1 (host 1), and every rank then
 * also checks, after init, that each peer of the other host is reached
 * through "ib", and, once its last communicator is released, that no
 * verbs object of the process is left (shoal_ib_live_objects).
 *
 * Every case runs on 2, 3 and 4 ranks unless it says otherwise, on counts
 * 0, 1, 1001 and 64 KiB + 3 elements (16 pieces of SHOAL_CHUNK_SIZE=4096;
 * for the collectives with a block per rank, 64 KiB / n + 3 per block).
 * Emulated RDMA moves a few MB/s, so the data stay small (all ranks of
 * the whole binary put about 25 MB on the links between the hosts):
 * - all-reduce of every dtype with sum, and of every op (pre-multiplied
 *   sum included) on float, in place and out of place (at the largest
 *   count, float sums both, the others one or the other by turns),
 *   against the scalar reference (inputs whose reductions are exact, as
 *   in test_allreduce.c);
 * - reduce-scatter, all-gather, broadcast, all-to-all, reduce, gather,
 *   scatter (in place and out of place where the call has both), at
 *   roots 0 and n - 1 (one on each host), a ring of sends and receives
 *   and a blocking pair across the hosts, barrier; guard bytes behind
 *   every receive buffer, untouched non-root outputs;
 * - the hierarchical algorithms forced with SHOAL_ALGO on 2 x 2 ranks;
 * - the compressed all-reduce (int8, ternary) through the compressor API
 *   on 2 and 4 ranks, within compress_ref.h's bounds of a double
 *   reference, bitwise the same on every rank and in place, residuals
 *   that add up to the error;
 * - 16 non-blocking all-reduces in flight, then shoal_wait_all;
 * - registered buffers: registered, reduced several times, deregistered
 *   and freed; allocated again (at the same address, as a rule) and
 *   reduced unregistered and registered;
 * - a shrink that leaves both hosts in the new communicator (3 and 4
 *   ranks, default and abort flags), and an abort with operations in
 *   flight toward the other host;
 * - a rank of the other host SIGKILLed during a 4 MiB all-reduce: the
 *   survivors get SHOAL_ERR_PEER naming it, before SHOAL_TIMEOUT (20 s);
 * - a process with another job's secret joining at the bootstrap root,
 *   refused with SHOAL_ERR_AUTH, while the job completes.
 * SHOAL_TEST_QUICK=1 runs 2 and 4 ranks only, and fewer dtypes. */
#include "harness.h"

#include "compress_ref.h"

#include "algos/algo.h"
#include "api/compressor.h"
#include "base/auth.h"
#include "base/clock.h"
#include "base/dtype.h"
#include "base/sock.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "transport/ib_qp.h"

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NHOSTS 2
#define CHUNK 4096
#define BIG_BYTES (64 << 10)
#define NCOUNTS 4
#define SIZES "counts 0, 1, 1001, 64 KiB + 3 elements"
#define GUARD 64
#define POISON 0xcd
#define RUN_TIMEOUT_S 120
#define PREMUL_SCALAR 3.0f
#define NB_REQS 16
#define REG_COUNT 40000        /* 160 KB of float: beyond malloc's mmap threshold */
#define KILL_COUNT (1u << 20)  /* 4 MiB of float */
#define CODEC_BIG 24001

/* Element counts of the matrices: 0, 1, odd, several pieces. */
static size_t test_count(int c, size_t es)
{
    static const size_t small[] = {0, 1, 1001};
    return c < 3 ? small[c] : BIG_BYTES / es + 3;
}

static int rxe_run(void)
{
    const char *v = getenv("SHOAL_TEST_RXE");
    return v && !strcmp(v, "1");
}

/* Shared by the parent and the ranks (mapped before the forks), zeroed
 * before every run. */
typedef struct {
    atomic_int barrier;         /* arrivals at the barrier rounds */
    atomic_int warm;            /* kill: survivors past the warm-up */
    _Atomic uint64_t killed_ns; /* kill: when the victim raised SIGKILL */
    int intruder_fd[2];         /* intruder: its verdict wakes the joiners */
} shared_t;

static shared_t *sh;

/* ---- one rank -------------------------------------------------------------- */

/* A rank's scratch: four buffers of the same size, each with GUARD bytes
 * more. */
typedef struct {
    unsigned char *a, *b, *want, *tmp;
} bufs_t;

typedef struct {
    int rank, nranks, host;
    shoal_comm_t comm; /* a body that releases it itself sets it to NULL */
    bufs_t b;          /* BUFS_CAP bytes each, for the whole case */
} rank_ctx_t;

static int bufs_alloc(bufs_t *b, size_t cap)
{
    b->a = malloc(cap + GUARD);
    b->b = malloc(cap + GUARD);
    b->want = malloc(cap + GUARD);
    b->tmp = malloc(cap + GUARD);
    return b->a && b->b && b->want && b->tmp ? 0 : -1;
}

static void bufs_free(bufs_t *b)
{
    free(b->a);
    free(b->b);
    free(b->want);
    free(b->tmp);
}

/* Enough for the largest count of any element size, and for n blocks of
 * the collectives with a block per rank (BIG_BYTES + 12 n in all). */
#define BUFS_CAP ((size_t)BIG_BYTES + 64)

/* The communicator spans both hosts; under SHOAL_TEST_RXE every peer of
 * the other host is reached through ib. */
static int check_hosts(shoal_comm_t comm, int rank)
{
    RANK_CHECK(comm->team.nhosts == NHOSTS, fail, "rank %d sees %d hosts, want %d", rank,
               comm->team.nhosts, NHOSTS);
    if (!rxe_run())
        return 0;
    for (int p = 0; p < comm->team.nranks; p++) {
        if (p == rank || comm->host_of[p] == comm->host_of[rank])
            continue;
        const char *name = shoal_comm_ep(comm, p)->ops->name;
        RANK_CHECK(!strcmp(name, "ib"), fail, "rank %d reaches rank %d of the other host over %s",
                   rank, p, name);
    }
    return 0;
fail:
    return 1;
}

/* Verbs objects this process still holds (0 outside the RDMA guest). */
static size_t ib_objects_left(void)
{
    return rxe_run() ? shoal_ib_live_objects() : 0;
}

static uint32_t word(int from, int to, size_t i)
{
    return harness_mix((uint32_t)(from * 7919 + to * 104729) ^ (uint32_t)i * 2654435761u);
}

/* 0 when got[0..count) holds word(from, to, first + i). */
static int check_words(const rank_ctx_t *x, const uint32_t *got, size_t count, int from, int to,
                       size_t first, const char *what)
{
    for (size_t i = 0; i < count; i++)
        RANK_CHECK(got[i] == word(from, to, first + i), fail,
                   "rank %d/%d: %s of %zu: element %zu is %#x, want %#x", x->rank, x->nranks,
                   what, count, i, got[i], word(from, to, first + i));
    return 0;
fail:
    return 1;
}

/* Receive buffers start poisoned, guard included; nothing may land past
 * the bytes a call owns. */
static void poison(void *p, size_t bytes)
{
    memset(p, POISON, bytes + GUARD);
}

static int check_guard(const rank_ctx_t *x, const void *p, size_t bytes, const char *what)
{
    return harness_check_untouched(p, bytes, bytes + GUARD, POISON, x->rank, what);
}

/* ---- all-reduce -------------------------------------------------------------- */

/* One all-reduce against the scalar reference (test_allreduce.c's inputs
 * and reference). An op past SHOAL_OP_COUNT is a pre-multiplied sum of
 * PREMUL_SCALAR on float. */
static int check_allreduce(const rank_ctx_t *x, const bufs_t *b, shoal_dtype_t dt, shoal_op_t op,
                           size_t count, int in_place)
{
    shoal_op_t ref = op < SHOAL_OP_COUNT ? op : SHOAL_SUM;
    const char *opname = op < SHOAL_OP_COUNT ? shoal_op_name(op) : "premul sum";
    size_t bytes = count * shoal_dtype_bytes(dt);
    harness_fill_exact(b->a, count, x->rank, dt, ref);
    poison(b->b, bytes);
    unsigned char *out = in_place ? b->a : b->b;
    shoal_status_t s = shoal_allreduce(count ? b->a : NULL, count ? out : NULL, count, dt, op,
                                       x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: all-reduce %s %s of %zu: %s (%s)", x->rank,
               x->nranks, shoal_dtype_name(dt), opname, count, shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    harness_expected(b->want, b->tmp, count, x->nranks, dt, ref);
    for (size_t i = 0; ref != op && i < count; i++)
        ((float *)b->want)[i] *= PREMUL_SCALAR;
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(out[i] == b->want[i], fail,
                   "rank %d/%d: all-reduce %s %s of %zu %s: byte %zu is %#x, want %#x", x->rank,
                   x->nranks, shoal_dtype_name(dt), opname, count,
                   in_place ? "in place" : "out of place", i, out[i], b->want[i]);
    return in_place ? 0 : check_guard(x, b->b, bytes, "all-reduce output");
fail:
    return 1;
}

/* Forms of the largest count that allreduce_counts runs (the smaller
 * ones run both): the large count is what takes time under emulated RDMA,
 * and the element math of a dtype is the same at 1001 elements. */
#define OUT_OF_PLACE 1
#define IN_PLACE 2
#define BOTH_FORMS 3

/* check_allreduce over every count, in place and out of place, the
 * largest count in big_forms only. */
static int allreduce_counts(const rank_ctx_t *x, shoal_dtype_t dt, shoal_op_t op, int big_forms)
{
    for (int c = 0; c < NCOUNTS; c++)
        for (int ip = 0; ip < 2; ip++)
            if ((c < NCOUNTS - 1 || (big_forms & (1 << ip))) &&
                check_allreduce(x, &x->b, dt, op, test_count(c, shoal_dtype_bytes(dt)), ip))
                return 1;
    return 0;
}

static int body_allreduce(rank_ctx_t *x)
{
    /* The quick run keeps one type of each element size and way of
     * summing (signed, unsigned, fp8 variants, float widths). */
    static const shoal_dtype_t quick[] = {SHOAL_INT8, SHOAL_UINT32, SHOAL_INT64, SHOAL_FLOAT16,
                                          SHOAL_FLOAT32, SHOAL_BFLOAT16, SHOAL_FP8_E5M2};
    int ndt = harness_quick() ? (int)(sizeof(quick) / sizeof(quick[0])) : SHOAL_DTYPE_COUNT;
    for (int d = 0; d < ndt; d++) {
        shoal_dtype_t dt = harness_quick() ? quick[d] : (shoal_dtype_t)d;
        int forms = dt == SHOAL_FLOAT32 ? BOTH_FORMS : d % 2 ? IN_PLACE : OUT_OF_PLACE;
        if (allreduce_counts(x, dt, SHOAL_SUM, forms))
            return 1;
    }
    for (int op = 0; op < SHOAL_OP_COUNT; op++)
        if (op != SHOAL_SUM && allreduce_counts(x, SHOAL_FLOAT32, (shoal_op_t)op,
                                                op % 2 ? IN_PLACE : OUT_OF_PLACE))
            return 1;
    float scalar = PREMUL_SCALAR;
    shoal_op_t premul;
    RANK_CHECK(shoal_op_create_premul_sum(x->comm, &scalar, SHOAL_FLOAT32, &premul) == SHOAL_OK,
               fail, "premul create: %s", shoal_comm_last_error(x->comm));
    if (allreduce_counts(x, SHOAL_FLOAT32, premul, BOTH_FORMS))
        return 1;
    RANK_CHECK(shoal_op_destroy(premul, x->comm) == SHOAL_OK, fail, "premul destroy");
    return 0;
fail:
    return 1;
}

/* ---- the other collectives ----------------------------------------------------- */

/* One call of a collective on count elements (per rank block where the
 * call has blocks), at root where it has one; in_place 1 for its in-place
 * form. */
typedef int (*coll_check_t)(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place,
                            int root);

static int check_reduce_scatter(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place,
                                int root)
{
    (void)root;
    size_t es = 4, total = (size_t)x->nranks * count;
    harness_fill_exact(b->a, total, x->rank, SHOAL_FLOAT32, SHOAL_SUM);
    poison(b->b, count * es);
    unsigned char *out = in_place ? b->a + (size_t)x->rank * count * es : b->b;
    shoal_status_t s = shoal_reduce_scatter(count ? b->a : NULL, count ? out : NULL, count,
                                            SHOAL_FLOAT32, SHOAL_SUM, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "reduce-scatter: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    harness_expected(b->want, b->tmp, total, x->nranks, SHOAL_FLOAT32, SHOAL_SUM);
    RANK_CHECK(!count || !memcmp(out, b->want + (size_t)x->rank * count * es, count * es), fail,
               "rank %d/%d: reduce-scatter of %zu differs", x->rank, x->nranks, count);
    return in_place ? 0 : check_guard(x, b->b, count * es, "reduce-scatter output");
fail:
    return 1;
}

static int check_allgather(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place,
                           int root)
{
    (void)root;
    size_t total = (size_t)x->nranks * count;
    uint32_t *recv = (uint32_t *)b->b;
    poison(recv, total * 4);
    uint32_t *mine = in_place ? recv + (size_t)x->rank * count : (uint32_t *)b->a;
    for (size_t i = 0; i < count; i++)
        mine[i] = word(x->rank, 0, i);
    shoal_status_t s = shoal_allgather(count ? mine : NULL, count ? recv : NULL, count,
                                       SHOAL_UINT32, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "all-gather: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    for (int r = 0; r < x->nranks; r++)
        if (check_words(x, recv + (size_t)r * count, count, r, 0, 0, "all-gather block"))
            return 1;
    return check_guard(x, recv, total * 4, "all-gather output");
fail:
    return 1;
}

static int check_broadcast(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place,
                           int root)
{
    uint32_t *in = (uint32_t *)b->a, *out = in_place ? in : (uint32_t *)b->b;
    poison(b->b, count * 4);
    for (size_t i = 0; i < count; i++)
        in[i] = x->rank == root ? word(root, 1, i) : 0;
    shoal_status_t s = shoal_broadcast(count ? in : NULL, count ? out : NULL, count,
                                       SHOAL_UINT32, root, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "broadcast from %d: %s (%s)", root, shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    if (check_words(x, out, count, root, 1, 0, "broadcast"))
        return 1;
    return in_place ? 0 : check_guard(x, out, count * 4, "broadcast output");
fail:
    return 1;
}

static int check_alltoall(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place,
                          int root)
{
    (void)root;
    size_t total = (size_t)x->nranks * count;
    uint32_t *send = (uint32_t *)b->a, *recv = in_place ? send : (uint32_t *)b->b;
    poison(b->b, total * 4);
    for (int j = 0; j < x->nranks; j++)
        for (size_t i = 0; i < count; i++)
            send[(size_t)j * count + i] = word(x->rank, j, i);
    shoal_status_t s = shoal_alltoall(count ? send : NULL, count ? recv : NULL, count,
                                      SHOAL_UINT32, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "all-to-all: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    for (int j = 0; j < x->nranks; j++)
        if (check_words(x, recv + (size_t)j * count, count, j, x->rank, 0, "all-to-all block"))
            return 1;
    return in_place ? 0 : check_guard(x, recv, total * 4, "all-to-all output");
fail:
    return 1;
}

/* Reduce has no in-place form; every rank passes a receive buffer, which
 * only the root's call may write. */
static int check_reduce(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place, int root)
{
    (void)in_place;
    size_t bytes = count * 4;
    harness_fill_exact(b->a, count, x->rank, SHOAL_FLOAT32, SHOAL_SUM);
    poison(b->b, bytes);
    shoal_status_t s = shoal_reduce(count ? b->a : NULL, count ? b->b : NULL, count,
                                    SHOAL_FLOAT32, SHOAL_SUM, root, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "reduce to %d: %s (%s)", root, shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    if (x->rank != root)
        return harness_check_untouched(b->b, 0, bytes + GUARD, POISON, x->rank,
                                       "a non-root's reduce output");
    harness_expected(b->want, b->tmp, count, x->nranks, SHOAL_FLOAT32, SHOAL_SUM);
    RANK_CHECK(!memcmp(b->b, b->want, bytes), fail, "rank %d/%d: reduce of %zu to %d differs",
               x->rank, x->nranks, count, root);
    return check_guard(x, b->b, bytes, "reduce output");
fail:
    return 1;
}

static int check_gather(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place, int root)
{
    size_t total = (size_t)x->nranks * count;
    uint32_t *recv = (uint32_t *)b->b;
    poison(recv, total * 4);
    uint32_t *src = in_place && x->rank == root ? recv + (size_t)root * count : (uint32_t *)b->a;
    for (size_t i = 0; i < count; i++)
        src[i] = word(x->rank, 2, i);
    shoal_status_t s = shoal_gather(count ? src : NULL, count ? recv : NULL, count, SHOAL_UINT32,
                                    root, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "gather to %d: %s (%s)", root, shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    if (x->rank != root)
        return harness_check_untouched(b->b, 0, total * 4 + GUARD, POISON, x->rank,
                                       "a non-root's gather output");
    for (int r = 0; r < x->nranks; r++)
        if (check_words(x, recv + (size_t)r * count, count, r, 2, 0, "gather block"))
            return 1;
    return check_guard(x, recv, total * 4, "gather output");
fail:
    return 1;
}

static int check_scatter(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place, int root)
{
    size_t total = (size_t)x->nranks * count;
    uint32_t *send = (uint32_t *)b->a;
    for (size_t i = 0; x->rank == root && i < total; i++)
        send[i] = word(root, 3, i);
    poison(b->b, count * 4);
    uint32_t *dst = in_place && x->rank == root ? send + (size_t)root * count : (uint32_t *)b->b;
    shoal_status_t s = shoal_scatter(count ? send : NULL, count ? dst : NULL, count, SHOAL_UINT32,
                                     root, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "scatter from %d: %s (%s)", root, shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    if (check_words(x, dst, count, root, 3, (size_t)x->rank * count, "scatter block"))
        return 1;
    return dst == send + (size_t)root * count ? 0 : check_guard(x, dst, count * 4,
                                                                 "scatter output");
fail:
    return 1;
}

/* A ring of sends and receives in a group (each rank to the next), then a
 * blocking pair between rank 0 and the last rank (the other host): 0 sends
 * first and receives second, the last rank the other way round. */
static int check_sendrecv(const rank_ctx_t *x, const bufs_t *b, size_t count, int in_place,
                          int root)
{
    (void)in_place;
    (void)root;
    int n = x->nranks, next = (x->rank + 1) % n, prev = (x->rank + n - 1) % n, last = n - 1;
    uint32_t *send = (uint32_t *)b->a, *recv = (uint32_t *)b->b;
    for (size_t i = 0; i < count; i++)
        send[i] = word(x->rank, next, i);
    poison(recv, count * 4);
    shoal_status_t s = shoal_group_start();
    if (s == SHOAL_OK)
        s = shoal_send(send, count, SHOAL_UINT32, next, x->comm);
    if (s == SHOAL_OK)
        s = shoal_recv(recv, count, SHOAL_UINT32, prev, x->comm);
    shoal_status_t e = shoal_group_end();
    RANK_CHECK(s == SHOAL_OK && e == SHOAL_OK, fail, "ring of send/recv: %s / %s (%s)",
               shoal_status_string(s), shoal_status_string(e), shoal_comm_last_error(x->comm));
    if (check_words(x, recv, count, prev, x->rank, 0, "received") ||
        check_guard(x, recv, count * 4, "receive buffer"))
        return 1;
    if (x->rank != 0 && x->rank != last)
        return 0;
    int peer = x->rank ? 0 : last;
    for (size_t i = 0; i < count; i++)
        send[i] = word(x->rank, peer, i);
    poison(recv, count * 4);
    for (int step = 0; step < 2; step++) {
        s = (step == 0) == (x->rank == 0) ? shoal_send(send, count, SHOAL_UINT32, peer, x->comm)
                                          : shoal_recv(recv, count, SHOAL_UINT32, peer, x->comm);
        RANK_CHECK(s == SHOAL_OK, fail, "rank %d: blocking send/recv with %d: %s (%s)", x->rank,
                   peer, shoal_status_string(s), shoal_comm_last_error(x->comm));
    }
    if (check_words(x, recv, count, peer, x->rank, 0, "received across the hosts"))
        return 1;
    return check_guard(x, recv, count * 4, "receive buffer");
fail:
    return 1;
}

static const struct {
    const char *name;
    coll_check_t check;
    int hier;     /* has a hierarchical algorithm */
    int rooted;   /* runs at root 0 and at the last rank (each host's) */
    int in_place; /* has an in-place form */
    int blocks;   /* count is per rank: the largest is BIG_BYTES in all */
} colls[] = {
    {"reduce-scatter", check_reduce_scatter, 1, 0, 1, 1},
    {"all-gather", check_allgather, 1, 0, 1, 1},
    {"broadcast", check_broadcast, 1, 1, 1, 0},
    {"all-to-all", check_alltoall, 1, 0, 1, 1},
    {"reduce", check_reduce, 0, 1, 0, 0},
    {"gather", check_gather, 0, 1, 1, 1},
    {"scatter", check_scatter, 0, 1, 1, 1},
    {"send/recv", check_sendrecv, 0, 0, 0, 0},
};
#define NCOLLS (sizeof(colls) / sizeof(colls[0]))

/* Every collective of colls (those with a hierarchical algorithm only,
 * when hier_only) over every count, root and form. */
static int run_colls(const rank_ctx_t *x, int hier_only)
{
    for (size_t k = 0; k < NCOLLS; k++) {
        if (hier_only && !colls[k].hier)
            continue;
        for (int c = 0; c < NCOUNTS; c++) {
            size_t count = test_count(c, colls[k].blocks ? 4 * (size_t)x->nranks : 4);
            for (int ip = 0; ip <= colls[k].in_place; ip++)
                for (int root = 0; root < x->nranks;
                     root += colls[k].rooted ? x->nranks - 1 : x->nranks)
                    if (colls[k].check(x, &x->b, count, ip, root)) {
                        fprintf(stderr, "# rank %d/%d: %s failed\n", x->rank, x->nranks,
                                colls[k].name);
                        return 1;
                    }
        }
    }
    return 0;
}

/* Each round every rank counts itself in shared memory, then enters the
 * barrier: leaving it, a rank must see every rank's count of that round
 * (test_rooted.c's check). */
static int check_barrier(const rank_ctx_t *x)
{
    enum { ROUNDS = 20 };
    for (int round = 1; round <= ROUNDS; round++) {
        atomic_fetch_add(&sh->barrier, 1);
        shoal_status_t s = shoal_barrier(x->comm);
        RANK_CHECK(s == SHOAL_OK, fail, "barrier %d: %s (%s)", round, shoal_status_string(s),
                   shoal_comm_last_error(x->comm));
        int seen = atomic_load(&sh->barrier);
        RANK_CHECK(seen >= round * x->nranks, fail, "rank %d left barrier %d having seen %d of %d",
                   x->rank, round, seen, round * x->nranks);
    }
    return 0;
fail:
    return 1;
}

static int body_collectives(rank_ctx_t *x)
{
    return run_colls(x, 0) || check_barrier(x);
}

/* ---- hierarchical algorithms ----------------------------------------------------- */

static const char *const all_hier =
    "allreduce:hier,reducescatter:hier,allgather:hier,broadcast:hier,alltoall:hier";

/* SHOAL_ALGO took: each forced collective runs the hierarchical algorithm
 * (shoal_algo_select falls back to the cost model's choice, with a
 * warning, where the forced one cannot serve). */
static int check_hier_chosen(const rank_ctx_t *x)
{
    static const shoal_coll_kind_t kinds[] = {SHOAL_COLL_ALLREDUCE, SHOAL_COLL_REDUCE_SCATTER,
                                              SHOAL_COLL_ALLGATHER, SHOAL_COLL_BROADCAST,
                                              SHOAL_COLL_ALLTOALL};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        shoal_coll_args_t args = {.kind = kinds[k], .count = test_count(3, 4),
                                  .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
        const shoal_algo_ops_t *a = shoal_algo_select(&x->comm->team, &args);
        RANK_CHECK(a && !strcmp(a->name, "hier"), fail, "collective %d runs %s, not hier",
                   (int)kinds[k], a ? a->name : "nothing");
    }
    return 0;
fail:
    return 1;
}

static int body_hier(rank_ctx_t *x)
{
    static const struct {
        shoal_dtype_t dt;
        shoal_op_t op;
    } reductions[] = {{SHOAL_FLOAT32, SHOAL_SUM}, {SHOAL_INT32, SHOAL_MAX},
                      {SHOAL_FLOAT64, SHOAL_AVG}, {SHOAL_BFLOAT16, SHOAL_SUM}};
    if (check_hier_chosen(x))
        return 1;
    for (size_t k = 0; k < sizeof(reductions) / sizeof(reductions[0]); k++)
        if (allreduce_counts(x, reductions[k].dt, reductions[k].op, BOTH_FORMS))
            return 1;
    return run_colls(x, 1);
}

/* ---- compressed all-reduce ------------------------------------------------------- */

/* The smallest bf16 at or above f >= 0, as a float: the ternary codec's
 * shared scale of a block whose largest value is f. */
static float bf16_up(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    u = ((u >> 16) + ((u & 0xffffu) != 0)) << 16;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* One compressor of kind with the default options (error feedback on),
 * one call on b->count values out of place and a twin's in place, checked
 * as compress_ref.h's cref_check does: the same bits on every rank and in
 * place, within the schedule's bound of the exact sum, residuals summed
 * over the ranks equal to the error. */
static int check_compressed(const rank_ctx_t *x, cref_bufs_t *b, shoal_compress_kind_t kind,
                            cref_sched_t sched)
{
    size_t count = b->count;
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, kind);
    const char *name = kind == SHOAL_COMPRESS_INT8 ? "int8" : "ternary";
    shoal_compressor_t comp[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++)
        RANK_CHECK(shoal_compressor_create(x->comm, &o, count, SHOAL_FLOAT32, NULL, &comp[k]) ==
                       SHOAL_OK, fail, "%s compressor: %s", name, shoal_comm_last_error(x->comm));
    for (size_t i = 0; i < count; i++)
        b->x[i] = b->y2[i] = cref_input(x->rank, i);
    shoal_status_t s = shoal_allreduce_compressed(comp[0], b->x, b->y, SHOAL_SUM, NULL);
    if (s == SHOAL_OK)
        s = shoal_allreduce_compressed(comp[1], b->y2, b->y2, SHOAL_SUM, NULL);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s of %zu: %s (%s)", x->rank, x->nranks, name,
               count, shoal_status_string(s), shoal_comm_last_error(x->comm));
    RANK_CHECK(harness_same_bytes(x->comm, b->y, count * sizeof(float)), fail,
               "%s of %zu: results differ between ranks", name, count);
    RANK_CHECK(!memcmp(b->y, b->y2, count * sizeof(float)), fail,
               "rank %d: %s of %zu in place differs", x->rank, name, count);
    const float *res = NULL;
    RANK_CHECK(shoal_compressor_residual(comp[0], &res) == SHOAL_OK && (res || !count), fail,
               "residual");
    s = shoal_allgather(count ? res : NULL, count ? b->all_res : NULL, count, SHOAL_FLOAT32,
                        x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "all-gather of residuals: %s", shoal_status_string(s));

    shoal_codec_t c = {.ops = kind == SHOAL_COMPRESS_INT8 ? &shoal_codec_int8
                                                          : &shoal_codec_ternary,
                       .block = o.block,
                       .round = kind == SHOAL_COMPRESS_INT8 && !o.stochastic
                                    ? SHOAL_ROUND_NEAREST
                                    : SHOAL_ROUND_STOCHASTIC};
    if (kind == SHOAL_COMPRESS_TERNARY) {
        cref_scales(b, o.block);
        for (size_t k = 0; k < (count + o.block - 1) / o.block; k++)
            b->scales[k] = bf16_up(b->scales[k]);
        c.scales = b->scales;
    }
    cref_reference(b, o.block);
    for (size_t i = 0; i < count; i++) {
        double err = (double)b->y[i] - b->exact[i], bound = cref_bound(b, &c, sched, NHOSTS, i);
        RANK_CHECK(fabs(err) <= bound, fail,
                   "rank %d/%d %s of %zu: value %zu is %.9g, exact %.9g, bound %.9g", x->rank,
                   x->nranks, name, count, i, b->y[i], b->exact[i], bound);
        double sum_res = 0;
        for (int r = 0; r < x->nranks; r++)
            sum_res += b->all_res[(size_t)r * count + i];
        RANK_CHECK(fabs(sum_res + err) <= 4 * x->nranks * b->absmax[i] * 0x1p-24, fail,
                   "rank %d/%d %s of %zu: value %zu: residuals sum to %.9g, exact - result %.9g",
                   x->rank, x->nranks, name, count, i, sum_res, -err);
    }
    for (int k = 0; k < 2; k++)
        RANK_CHECK(shoal_compressor_destroy(comp[k]) == SHOAL_OK, fail, "destroy compressor");
    return 0;
fail:
    return 1;
}

static int body_compressed(rank_ctx_t *x)
{
    /* AUTO across hosts: full precision inside a host and the codec ring
     * across, or with one rank per host the flat ring. */
    int hier = x->comm->team.cluster.max_local > 1;
    const char *want = hier ? "hier-codec" : "ring-codec";
    shoal_codec_t probe = {.ops = &shoal_codec_int8, .block = 64};
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .count = CODEC_BIG,
                              .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM, .codec = &probe,
                              .codec_algo = SHOAL_COMPRESS_ALGO_AUTO};
    const shoal_algo_ops_t *a = shoal_codec_algo_select(&x->comm->team, &args);
    RANK_CHECK(a && !strcmp(a->name, want), fail, "AUTO picks %s, not %s",
               a ? a->name : "nothing", want);
    cref_bufs_t b;
    RANK_CHECK(cref_alloc(&b, CODEC_BIG, x->nranks), fail, "out of memory");
    static const size_t counts[] = {0, 1, 1001, CODEC_BIG};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        b.count = counts[k];
        if (check_compressed(x, &b, SHOAL_COMPRESS_INT8, hier ? CREF_HIER : CREF_RING) ||
            check_compressed(x, &b, SHOAL_COMPRESS_TERNARY, hier ? CREF_HIER : CREF_RING))
            return 1;
    }
    cref_free(&b);
    return 0;
fail:
    return 1;
}

/* ---- non-blocking ------------------------------------------------------------------ */

/* Request k of body_nonblocking: float sums and int32 maxima of every
 * count, in place for half of them. */
static void nb_shape(int k, shoal_dtype_t *dt_p, shoal_op_t *op_p, size_t *count_p,
                     int *in_place_p)
{
    *dt_p = k % 2 ? SHOAL_INT32 : SHOAL_FLOAT32;
    *op_p = (k / 2) % 2 ? SHOAL_MAX : SHOAL_SUM;
    *count_p = test_count(k % NCOUNTS, 4);
    *in_place_p = (k / 4) % 2;
}

/* NB_REQS all-reduces in flight at once, then one wait for all. */
static int body_nonblocking(rank_ctx_t *x)
{
    shoal_dtype_t dt;
    shoal_op_t op;
    size_t count;
    int ip;
    bufs_t b[NB_REQS];
    shoal_request_t req[NB_REQS];
    for (int k = 0; k < NB_REQS; k++)
        RANK_CHECK(bufs_alloc(&b[k], BUFS_CAP) == 0, fail, "out of memory");
    for (int k = 0; k < NB_REQS; k++) {
        nb_shape(k, &dt, &op, &count, &ip);
        harness_fill_exact(b[k].a, count, x->rank, dt, op);
        void *out = ip ? b[k].a : b[k].b;
        shoal_status_t s = shoal_iallreduce(count ? b[k].a : NULL, count ? out : NULL, count, dt,
                                            op, x->comm, &req[k]);
        RANK_CHECK(s == SHOAL_OK, fail, "iallreduce %d: %s (%s)", k, shoal_status_string(s),
                   shoal_comm_last_error(x->comm));
    }
    shoal_status_t s = shoal_wait_all(NB_REQS, req);
    RANK_CHECK(s == SHOAL_OK, fail, "wait_all: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    for (int k = 0; k < NB_REQS; k++) {
        nb_shape(k, &dt, &op, &count, &ip);
        harness_expected(b[k].want, b[k].tmp, count, x->nranks, dt, op);
        RANK_CHECK(!memcmp(ip ? b[k].a : b[k].b, b[k].want, count * 4), fail,
                   "rank %d/%d: request %d (%s %s of %zu) differs", x->rank, x->nranks, k,
                   shoal_dtype_name(dt), shoal_op_name(op), count);
        bufs_free(&b[k]);
    }
    return 0;
fail:
    return 1;
}

/* ---- registration ----------------------------------------------------------------- */

/* A float sum of REG_COUNT values from in to out (in place when equal). */
static int reg_allreduce(const rank_ctx_t *x, float *in, float *out, float *want, float *tmp,
                         int k)
{
    harness_fill_exact(in, REG_COUNT, x->rank + k, SHOAL_FLOAT32, SHOAL_SUM);
    shoal_status_t s = shoal_allreduce(in, out, REG_COUNT, SHOAL_FLOAT32, SHOAL_SUM, x->comm);
    RANK_CHECK(s == SHOAL_OK, fail, "all-reduce %d: %s (%s)", k, shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    /* Inputs of ranks k..k+n-1: the reference folds ranks 0..n-1 of a
     * fill shifted by k, so fold by hand. */
    harness_fill_exact(want, REG_COUNT, k, SHOAL_FLOAT32, SHOAL_SUM);
    for (int r = 1; r < x->nranks; r++) {
        harness_fill_exact(tmp, REG_COUNT, r + k, SHOAL_FLOAT32, SHOAL_SUM);
        for (size_t i = 0; i < REG_COUNT; i++)
            want[i] += tmp[i];
    }
    RANK_CHECK(!memcmp(out, want, REG_COUNT * sizeof(float)), fail,
               "rank %d/%d: all-reduce %d on %s buffers differs", x->rank, x->nranks, k,
               in == out ? "in-place" : "separate");
    return 0;
fail:
    return 1;
}

/* Register in and out, reduce several times, deregister, free; allocate
 * again (the allocator tends to hand out the address just freed, now
 * other pages: a registration cache that missed the free would hand the
 * transport a stale region) and reduce unregistered, then registered. */
static int body_register(rank_ctx_t *x)
{
    size_t bytes = REG_COUNT * sizeof(float);
    float *want = malloc(bytes), *tmp = malloc(bytes);
    RANK_CHECK(want && tmp, fail, "out of memory");
    uintptr_t first = 0;
    int k = 0;
    for (int round = 0; round < 2; round++) {
        float *in = malloc(bytes), *out = malloc(bytes);
        RANK_CHECK(in && out, fail, "out of memory");
        if (round == 0)
            first = (uintptr_t)in;
        else if (x->rank == 0)
            printf("# the buffer allocated again %s the freed one's address\n",
                   (uintptr_t)in == first ? "has" : "does not have");
        if (round == 1 && reg_allreduce(x, in, out, want, tmp, k++))
            return 1;
        void *hin, *hout;
        RANK_CHECK(shoal_comm_register(x->comm, in, bytes, &hin) == SHOAL_OK &&
                       shoal_comm_register(x->comm, out, bytes, &hout) == SHOAL_OK,
                   fail, "register: %s", shoal_comm_last_error(x->comm));
        int reps = round ? 2 : 3;
        for (int rep = 0; rep < reps; rep++)
            if (reg_allreduce(x, in, rep == reps - 1 ? in : out, want, tmp, k++))
                return 1;
        RANK_CHECK(shoal_comm_deregister(x->comm, hin) == SHOAL_OK &&
                       shoal_comm_deregister(x->comm, hout) == SHOAL_OK,
                   fail, "deregister: %s", shoal_comm_last_error(x->comm));
        free(in);
        free(out);
    }
    free(want);
    free(tmp);
    return 0;
fail:
    return 1;
}

/* ---- shrink and abort -------------------------------------------------------------- */

/* A checked float sum of 1001 values on comm. */
static int small_allreduce(const rank_ctx_t *x)
{
    return check_allreduce(x, &x->b, SHOAL_FLOAT32, SHOAL_SUM, 1001, 0);
}

/* Rank 1 (host 0) leaves; the survivors still span both hosts, and their
 * new communicator runs the float sums of every count. flags
 * SHOAL_SHRINK_DEFAULT: rank 1 stays in the parent, which all ranks use
 * once more. SHOAL_SHRINK_ABORT: rank 1 aborts its side, the survivors'
 * parent refuses further calls and is released at once. */
static int shrink_out_rank_1(rank_ctx_t *x, int flags)
{
    const int out = 1;
    if (x->rank == out) {
        if (flags == SHOAL_SHRINK_DEFAULT)
            return small_allreduce(x);
        RANK_CHECK(shoal_comm_abort(x->comm) == SHOAL_OK, fail, "abort on the excluded rank");
        x->comm = NULL;
        return 0;
    }
    rank_ctx_t y = {.rank = x->rank - (x->rank > out), .nranks = x->nranks - 1, .host = x->host,
                    .b = x->b};
    shoal_status_t s = shoal_comm_shrink(x->comm, &out, 1, flags, &y.comm);
    RANK_CHECK(s == SHOAL_OK, fail, "shrink: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(x->comm));
    int r = -1, n = -1;
    RANK_CHECK(shoal_comm_rank(y.comm, &r) == SHOAL_OK && r == y.rank &&
                   shoal_comm_size(y.comm, &n) == SHOAL_OK && n == y.nranks,
               fail, "new rank %d of %d, want %d of %d", r, n, y.rank, y.nranks);
    if (check_hosts(y.comm, y.rank) || allreduce_counts(&y, SHOAL_FLOAT32, SHOAL_SUM, BOTH_FORMS))
        return 1;
    RANK_CHECK(shoal_comm_destroy(y.comm) == SHOAL_OK, fail, "destroy the new communicator");
    if (flags == SHOAL_SHRINK_DEFAULT)
        return small_allreduce(x);
    float v = 1;
    s = shoal_allreduce(&v, &v, 1, SHOAL_FLOAT32, SHOAL_SUM, x->comm);
    RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "stopped parent gave %s", shoal_status_string(s));
    RANK_CHECK(shoal_comm_abort(x->comm) == SHOAL_OK, fail, "abort the stopped parent");
    x->comm = NULL;
    return 0;
fail:
    return 1;
}

static int body_shrink_default(rank_ctx_t *x)
{
    return shrink_out_rank_1(x, SHOAL_SHRINK_DEFAULT);
}

static int body_shrink_abort(rank_ctx_t *x)
{
    return shrink_out_rank_1(x, SHOAL_SHRINK_ABORT);
}

/* Rank 0 aborts with three all-reduces and a send to the last rank (the
 * other host) in flight that nobody joins: every request completes with
 * SHOAL_ERR_ABORTED and outlives the communicator. The others wait for
 * its abort in a split that it never joins (its abort breaks the
 * bootstrap link; test_group_nb.c's idiom), then abort theirs. */
static int body_abort(rank_ctx_t *x)
{
    if (x->rank != 0) {
        shoal_comm_t none = NULL;
        RANK_CHECK(shoal_comm_split(x->comm, 0, 0, &none) != SHOAL_OK, fail,
                   "split without rank 0");
        RANK_CHECK(shoal_comm_abort(x->comm) == SHOAL_OK, fail, "abort");
        x->comm = NULL;
        return 0;
    }
    size_t count = test_count(3, 4);
    float *buf = calloc(4 * count, sizeof(float));
    shoal_request_t req[4];
    RANK_CHECK(buf, fail, "out of memory");
    for (int k = 0; k < 3; k++)
        RANK_CHECK(shoal_iallreduce(buf + k * count, buf + k * count, count, SHOAL_FLOAT32,
                                    SHOAL_SUM, x->comm, &req[k]) == SHOAL_OK, fail,
                   "iallreduce %d", k);
    RANK_CHECK(shoal_isend(buf + 3 * count, count, SHOAL_FLOAT32, x->nranks - 1, x->comm,
                           &req[3]) == SHOAL_OK, fail, "isend");
    RANK_CHECK(shoal_comm_abort(x->comm) == SHOAL_OK, fail, "abort");
    x->comm = NULL;
    for (int k = 0; k < 4; k++) {
        shoal_status_t s = shoal_wait(&req[k]);
        RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "request %d after the abort: %s", k,
                   shoal_status_string(s));
    }
    free(buf);
    return 0;
fail:
    return 1;
}

/* ---- a peer killed --------------------------------------------------------------- */

/* The last rank (host 1) starts a 4 MiB all-reduce and dies of SIGKILL
 * once the others are past a warm-up (test_fault.c's case): each survivor's
 * all-reduce fails with SHOAL_ERR_PEER naming it, which, SHOAL_TIMEOUT
 * being 20 s, came before the deadline; the next call fails at once. */
static int body_kill(rank_ctx_t *x)
{
    int victim = x->nranks - 1;
    float one = 1;
    RANK_CHECK(shoal_allreduce(&one, &one, 1, SHOAL_FLOAT32, SHOAL_SUM, x->comm) == SHOAL_OK,
               fail, "warm-up");
    if (x->rank != victim)
        atomic_fetch_add(&sh->warm, 1);
    while (x->rank == victim && atomic_load(&sh->warm) < x->nranks - 1)
        sched_yield();
    float *buf = malloc(KILL_COUNT * sizeof(float));
    RANK_CHECK(buf, fail, "out of memory");
    for (size_t i = 0; i < KILL_COUNT; i++)
        buf[i] = (float)x->rank;
    if (x->rank == victim) {
        shoal_request_t req;
        RANK_CHECK(shoal_iallreduce(buf, buf, KILL_COUNT, SHOAL_FLOAT32, SHOAL_SUM, x->comm,
                                    &req) == SHOAL_OK, fail, "start the all-reduce");
        atomic_store(&sh->killed_ns, shoal_now_ns());
        raise(SIGKILL);
    }
    shoal_status_t s = shoal_allreduce(buf, buf, KILL_COUNT, SHOAL_FLOAT32, SHOAL_SUM, x->comm);
    double after_ms = (double)(shoal_now_ns() - atomic_load(&sh->killed_ns)) / 1e6;
    char named[32];
    snprintf(named, sizeof(named), "rank %d ", victim);
    RANK_CHECK(s == SHOAL_ERR_PEER && strstr(shoal_comm_last_error(x->comm), named), fail,
               "rank %d: all-reduce after rank %d died: %s (%s)", x->rank, victim,
               shoal_status_string(s), shoal_comm_last_error(x->comm));
    printf("# rank %d/%d (host %d): rank %d's death seen after %.1f ms\n", x->rank, x->nranks,
           x->host, victim, after_ms);
    s = shoal_allreduce(&one, &one, 1, SHOAL_FLOAT32, SHOAL_SUM, x->comm);
    RANK_CHECK(s == SHOAL_ERR_PEER, fail, "the next call: %s", shoal_status_string(s));
    free(buf);
    /* Destroy of a broken communicator returns promptly, whatever it says. */
    (void)shoal_comm_destroy(x->comm);
    x->comm = NULL;
    return 0;
fail:
    return 1;
}

/* ---- an intruder ------------------------------------------------------------------ */

/* The process after the ranks: it joins at this job's bootstrap root as
 * rank 1, holding the secret of another job (a unique id of its own), and
 * must be refused with SHOAL_ERR_AUTH (test_bootstrap.c's impostor, through
 * the public init). Its verdict wakes the ranks but 0, which join after
 * it, so that rank 0 is still accepting when it comes. */
static int intruder(const shoal_unique_id_t *id, int nranks)
{
    /* The secret's bytes of an id: those that differ between two ids
     * that differ in the secret alone. */
    shoal_sockaddr_t addr;
    uint8_t s0[SHOAL_SECRET_BYTES], s1[SHOAL_SECRET_BYTES];
    memset(s0, 0x00, sizeof(s0));
    memset(s1, 0xff, sizeof(s1));
    shoal_unique_id_t a, b, other, forged = *id;
    shoal_status_t s = SHOAL_ERR_INTERNAL;
    if (shoal_sock_resolve("127.0.0.1:1", 0, &addr) == SHOAL_OK &&
        shoal_bootstrap_id_make(&addr, s0, &a) == SHOAL_OK &&
        shoal_bootstrap_id_make(&addr, s1, &b) == SHOAL_OK &&
        shoal_get_unique_id(&other) == SHOAL_OK) {
        for (int i = 0; i < SHOAL_UNIQUE_ID_BYTES; i++)
            if (a.bytes[i] != b.bytes[i])
                forged.bytes[i] = other.bytes[i];
        harness_split_hosts(nranks - 1, nranks, NHOSTS);
        shoal_comm_t comm = NULL;
        s = shoal_comm_init(nranks, &forged, 1, &comm);
    }
    /* Whatever happened, the joiners must not wait for ever. */
    for (int r = 1; r < nranks; r++)
        RANK_CHECK(write(sh->intruder_fd[1], "i", 1) == 1, fail, "wake the joiners");
    RANK_CHECK(s == SHOAL_ERR_AUTH, fail, "the intruder's init: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static int body_intruded_job(rank_ctx_t *x)
{
    return allreduce_counts(x, SHOAL_FLOAT32, SHOAL_SUM, BOTH_FORMS);
}

/* ---- cases ---------------------------------------------------------------------- */

typedef int (*case_body_t)(rank_ctx_t *x);

typedef struct {
    const char *what;   /* for the diagnostic line */
    case_body_t body;
    const char *algo;   /* SHOAL_ALGO; NULL: the default */
    int victim;         /* 1: the last rank may die of SIGKILL */
    int intruder;       /* 1: one more process, the intruder */
} ib_case_t;

/* A rank of a case: placed on its host, communicator formed and checked,
 * the body, its communicator released, no verbs object left. */
static int rank_main(int rank, int nprocs, const shoal_unique_id_t *id, void *arg)
{
    const ib_case_t *c = arg;
    int nranks = nprocs - c->intruder;
    if (rank == nranks)
        return intruder(id, nranks);
    rank_ctx_t x = {.rank = rank, .nranks = nranks};
    x.host = harness_split_hosts(rank, nranks, NHOSTS);
    RANK_CHECK(bufs_alloc(&x.b, BUFS_CAP) == 0, fail, "out of memory");
    char byte;
    RANK_CHECK(!c->intruder || rank == 0 || read(sh->intruder_fd[0], &byte, 1) == 1, fail,
               "wait for the intruder");
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &x.comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: init: %s (%s)", rank, shoal_status_string(s),
               shoal_comm_last_error(NULL));
    if (check_hosts(x.comm, rank) || c->body(&x))
        return 1;
    if (x.comm) {
        s = shoal_comm_destroy(x.comm);
        RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    }
    bufs_free(&x.b);
    size_t left = ib_objects_left();
    RANK_CHECK(left == 0, fail, "rank %d: %zu verbs objects left after its communicators", rank,
               left);
    return 0;
fail:
    return 1;
}

/* Case c on nranks ranks over both hosts. */
static void run_case(const ib_case_t *c, int nranks)
{
    int split = (nranks + NHOSTS - 1) / NHOSTS; /* harness_split_hosts' first block */
    printf("# %s: %d ranks, %d + %d on two hosts over %s%s%s\n", c->what, nranks, split,
           nranks - split, rxe_run() ? "ib (rxe0, rxe1)" : "the inter-host transport",
           c->algo ? ", SHOAL_ALGO=" : "", c->algo ? c->algo : "");
    fflush(stdout);
    memset(sh, 0, sizeof(*sh));
    if (c->intruder)
        assert_int_equal(pipe(sh->intruder_fd), 0);
    harness_use_transport("shm", CHUNK);
    harness_setenv("SHOAL_ALGO", c->algo);
    uint64_t t0 = shoal_now_ns();
    int rc = harness_run_ranks_victim(nranks + c->intruder, rank_main, (void *)c, RUN_TIMEOUT_S,
                                      c->victim ? nranks - 1 : -1);
    printf("#   %.2f s\n", (double)(shoal_now_ns() - t0) / 1e9);
    if (c->intruder) {
        close(sh->intruder_fd[0]);
        close(sh->intruder_fd[1]);
    }
    harness_setenv("SHOAL_ALGO", NULL);
    assert_int_equal(rc, 0);
}

/* Case c on each rank count of counts (ended by 0); NULL: 2, 3 and 4 (2
 * and 4 in the quick run). */
static void run_case_over(const ib_case_t *c, const int *counts)
{
    static const int all[] = {2, 3, 4, 0}, quick[] = {2, 4, 0};
    if (!counts)
        counts = harness_quick() ? quick : all;
    for (int k = 0; counts[k]; k++)
        run_case(c, counts[k]);
}

static const int two_and_four[] = {2, 4, 0}, four[] = {4, 0}, three_and_four[] = {3, 4, 0};

#define IB_TEST(name, counts, ...)                                            \
    static void test_##name(void **state)                                     \
    {                                                                         \
        (void)state;                                                          \
        static const ib_case_t c_ = {__VA_ARGS__};                            \
        run_case_over(&c_, counts);                                           \
    }

IB_TEST(allreduce_every_dtype_and_op, NULL,
        .what = "all-reduce: every dtype x sum, every op on float, " SIZES ", in and out of place",
        .body = body_allreduce)
IB_TEST(collectives_against_expected, NULL,
        .what = "reduce-scatter, all-gather, broadcast, all-to-all, reduce, gather, scatter, "
                "send/recv (" SIZES "), barrier",
        .body = body_collectives)
IB_TEST(hier_algorithms_2x2, four,
        .what = "hierarchical all-reduce, reduce-scatter, all-gather, broadcast, all-to-all, "
                SIZES, .body = body_hier, .algo = all_hier)
IB_TEST(compressed_int8_ternary, two_and_four,
        .what = "compressed all-reduce, int8 and ternary, counts 0, 1, 1001, 24001",
        .body = body_compressed)
IB_TEST(nonblocking_16_in_flight, NULL,
        .what = "16 non-blocking all-reduces in flight, " SIZES, .body = body_nonblocking)
IB_TEST(registered_buffers_reused, NULL,
        .what = "registered buffers of 40000 floats, freed and allocated again",
        .body = body_register)
IB_TEST(shrink_keeps_both_hosts, three_and_four,
        .what = "shrink without rank 1 (default), all-reduce " SIZES " across the hosts",
        .body = body_shrink_default)
IB_TEST(shrink_abort_keeps_both_hosts, three_and_four,
        .what = "shrink without rank 1 (abort), all-reduce " SIZES " across the hosts",
        .body = body_shrink_abort)
IB_TEST(abort_with_operations_in_flight, NULL,
        .what = "abort with 3 all-reduces and a send of 64 KiB in flight",
        .body = body_abort)
IB_TEST(peer_killed_during_allreduce, NULL,
        .what = "the last rank killed during a 4 MiB all-reduce", .body = body_kill,
        .victim = 1)
IB_TEST(intruder_refused_job_completes, NULL,
        .what = "another job's secret at the bootstrap root; all-reduce " SIZES,
        .body = body_intruded_job, .intruder = 1)

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce_every_dtype_and_op),
        cmocka_unit_test(test_collectives_against_expected),
        cmocka_unit_test(test_hier_algorithms_2x2),
        cmocka_unit_test(test_compressed_int8_ternary),
        cmocka_unit_test(test_nonblocking_16_in_flight),
        cmocka_unit_test(test_registered_buffers_reused),
        cmocka_unit_test(test_shrink_keeps_both_hosts),
        cmocka_unit_test(test_shrink_abort_keeps_both_hosts),
        cmocka_unit_test(test_abort_with_operations_in_flight),
        cmocka_unit_test(test_peer_killed_during_allreduce),
        cmocka_unit_test(test_intruder_refused_job_completes),
    };
    return cmocka_run_group_tests_name("ib_coll", tests, NULL, NULL);
}
