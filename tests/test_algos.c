/* Every registered algorithm of the collectives that reduce or spread one
 * buffer per rank (all-reduce, reduce-scatter, all-gather, broadcast,
 * reduce), taken from the library's own lists (shoal_algo_at), so that an
 * algorithm is tested as soon as it is registered. Each runs one checked
 * matrix, called directly through shoal_coll_run (a kind's algorithms one
 * after another on one communicator per rank count); the public broadcast and
 * reduce, with the cost model's choice, run the same matrix as one more
 * entry of their lists ("auto"; the public all-reduce, reduce-scatter and
 * all-gather have theirs in test_allreduce.c and test_rsag.c):
 * - the reducing kinds in every dtype, each with every op over the rank
 *   counts, against the scalar reference (inputs exact in every dtype,
 *   harness_fill_exact, so that the expected result does not depend on
 *   the order of reduction); all-gather and broadcast in byte sizes 1, 2,
 *   4 and 8;
 * - rank counts 1..8 over shared memory and 2..8 over tcp; every root of
 *   the rooted kinds, turning over the calls (a tree's or a chain's shape
 *   differs with the root's place);
 * - counts 0, 1, odd and several pipeline pieces, and the counts that an
 *   algorithm has more to show at (the one-shot's one full piece, the
 *   tree's one and three windows of pieces);
 * - in place and out of place: the input of an out-of-place call stays as
 *   it was, nothing is written past the output, nor into a non-root's
 *   receive buffer of a reduce, nor (off the root) into the send buffer of
 *   a broadcast.
 * A count that an algorithm's cost says it cannot serve (the one-shot's
 * several pieces, the zero-copy put over tcp or alone) is skipped; over
 * shared memory with two ranks or more, every algorithm must serve some.
 * The buffers come from shoal_mem_alloc, so that there the put algorithms
 * take their single-copy paths (the transport's put and get counters
 * move) in every dtype and op.
 *
 * Determinism: with inputs whose sums do round, every rank must still get
 * the same all-reduce bits from each algorithm, in place as out of place:
 * each rank leaves a hash of its results in shared memory and the parent
 * compares them. */
#include "harness.h"

#include "algos/algo.h"
#include "base/dtype.h"
#include "core/coll.h"
#include "core/comm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TEST_CHUNK 4096
#define GUARD HARNESS_GUARD
#define GUARD_BYTE HARNESS_GUARD_BYTE
#define UNTOUCHED_BYTE 0x5a
#define MAX_RANKS 8
#define MAX_ALGOS 8

/* One run of the matrix: a collective, the algorithm (NULL: the public
 * call) and whether it must serve some of the calls. */
typedef struct {
    shoal_coll_kind_t kind;
    const shoal_algo_ops_t *algo;
    int must_serve;
} algo_case_t;

static const char *case_name(const algo_case_t *c)
{
    return c->algo ? c->algo->name : "auto";
}

/* The counts of a case in elements of es bytes, into out (at most
 * MAX_COUNTS): 0, 1, odd, several pieces (for the rooted kinds in
 * elements of any size, so that 8-byte ones make many pieces), and an
 * algorithm's own: the one-shot's one full piece, the tree's one window
 * and three windows of pieces with a short last one. */
#define MAX_COUNTS 6
static size_t case_counts(const algo_case_t *c, size_t es, size_t *out)
{
    int rooted = c->kind == SHOAL_COLL_BROADCAST || c->kind == SHOAL_COLL_REDUCE;
    size_t n = 0, piece = TEST_CHUNK / es;
    out[n++] = 0;
    out[n++] = 1;
    out[n++] = 17;
    out[n++] = rooted ? 3 * TEST_CHUNK + 5 : 5 * piece + 333;
    const char *name = case_name(c);
    if (!strcmp(name, "oneshot")) {
        out[n++] = piece;
    } else if (c->kind == SHOAL_COLL_ALLREDUCE && !strcmp(name, "tree")) {
        out[n++] = 2 * piece + 333;
        out[n++] = 19 * piece + 77;
    }
    return n;
}
/* Bytes of the largest buffer: the rooted kinds' several pieces of 8-byte
 * elements, on as many ranks as any run has (more than the tree's three
 * windows, or than the n blocks of a reduce-scatter's input). */
#define MAX_BYTES ((size_t)MAX_RANKS * (3 * TEST_CHUNK + 5) * 8 + GUARD)

/* All-gather and broadcast move bytes: one dtype of each size, and both
 * kinds of 4 bytes. */
static const shoal_dtype_t moving_dtypes[] = {SHOAL_INT8, SHOAL_FLOAT16, SHOAL_INT32,
                                              SHOAL_FLOAT32, SHOAL_FLOAT64};
#define NMOVING (sizeof(moving_dtypes) / sizeof(moving_dtypes[0]))

typedef struct {
    unsigned char *a, *b, *want, *tmp, *orig;
} bufs_t;

static int bufs_alloc(bufs_t *bf)
{
    size_t bytes = MAX_BYTES;
    /* The buffers the collectives see are shareable, so that the put
     * algorithms run their single-copy paths in every dtype and op. */
    void *a = NULL, *b = NULL;
    bf->a = shoal_mem_alloc(bytes, &a) == SHOAL_OK ? a : NULL;
    bf->b = shoal_mem_alloc(bytes, &b) == SHOAL_OK ? b : NULL;
    bf->want = malloc(bytes);
    bf->tmp = malloc(bytes);
    bf->orig = malloc(bytes);
    return bf->a && bf->b && bf->want && bf->tmp && bf->orig;
}

static void bufs_free(bufs_t *bf)
{
    shoal_mem_free(bf->a);
    shoal_mem_free(bf->b);
    free(bf->want);
    free(bf->tmp);
    free(bf->orig);
}

/* In this rank's process: calls the case's algorithm served. */
static int served;

/* Whether the case serves the call args: the public call always does, an
 * algorithm where its cost says so. */
static int serves(shoal_comm_t comm, const algo_case_t *c, const shoal_coll_args_t *args)
{
    if (c->algo && c->algo->cost(&comm->team, args) < 0)
        return 0;
    served += args->count > 0;
    return 1;
}

/* args through the case: the algorithm directly, or the public call. A
 * call of no elements passes NULL buffers, which every path must take. */
static shoal_status_t run_case(shoal_comm_t comm, const algo_case_t *c, shoal_coll_args_t *a)
{
    if (a->count == 0) {
        a->sendbuf = NULL;
        a->recvbuf = NULL;
    }
    if (c->algo)
        return shoal_coll_run(comm, c->algo, shoal_coll_kind_name(a->kind), a, NULL);
    switch (a->kind) {
    case SHOAL_COLL_ALLREDUCE:
        return shoal_allreduce(a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, comm);
    case SHOAL_COLL_REDUCE_SCATTER:
        return shoal_reduce_scatter(a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, comm);
    case SHOAL_COLL_ALLGATHER:
        return shoal_allgather(a->sendbuf, a->recvbuf, a->count, a->dtype, comm);
    case SHOAL_COLL_BROADCAST:
        return shoal_broadcast(a->sendbuf, a->recvbuf, a->count, a->dtype, a->root, comm);
    case SHOAL_COLL_REDUCE:
        return shoal_reduce(a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, a->root, comm);
    default:
        return SHOAL_ERR_INTERNAL;
    }
}

static int check_ar(shoal_comm_t comm, const algo_case_t *c, int rank, int nranks, size_t count,
                    shoal_dtype_t dt, shoal_op_t op, int in_place, bufs_t *bf)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es;
    harness_fill_exact(bf->a, count, rank, dt, op);
    memset(bf->a + bytes, GUARD_BYTE, GUARD);
    memcpy(bf->orig, bf->a, bytes);
    memset(bf->b, GUARD_BYTE, bytes + GUARD);
    unsigned char *recv = in_place ? bf->a : bf->b;
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = bf->a, .recvbuf = recv,
                              .count = count, .dtype = dt, .op = op};
    if (!serves(comm, c, &args))
        return 0;
    shoal_status_t s = run_case(comm, c, &args);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s allreduce %s/%s count %zu: %s (%s)", rank,
               nranks, case_name(c), shoal_dtype_name(dt), shoal_op_name(op), count,
               shoal_status_string(s), shoal_comm_last_error(comm));
    harness_expected(bf->want, bf->tmp, count, nranks, dt, op);
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(recv[i] == bf->want[i], fail,
                   "rank %d/%d %s allreduce %s %s count %zu %s: byte %zu (element %zu) is "
                   "%#x, want %#x",
                   rank, nranks, case_name(c), shoal_dtype_name(dt), shoal_op_name(op), count,
                   in_place ? "in-place" : "out-of-place", i, i / es, recv[i], bf->want[i]);
    if (!in_place)
        RANK_CHECK(memcmp(bf->a, bf->orig, bytes) == 0, fail,
                   "rank %d: out-of-place %s allreduce changed sendbuf", rank, case_name(c));
    return harness_check_untouched(recv, bytes, bytes + GUARD, GUARD_BYTE, rank,
                                   "past the end of the allreduce's recvbuf");
fail:
    return 1;
}

static int check_rs(shoal_comm_t comm, const algo_case_t *c, int rank, int nranks, size_t rc,
                    shoal_dtype_t dt, shoal_op_t op, int in_place, bufs_t *bf)
{
    size_t es = shoal_dtype_bytes(dt), total = (size_t)nranks * rc, bytes = rc * es;
    harness_fill_exact(bf->a, total, rank, dt, op);
    memset(bf->a + total * es, GUARD_BYTE, GUARD);
    memcpy(bf->orig, bf->a, total * es);
    memset(bf->b, GUARD_BYTE, bytes + GUARD);
    unsigned char *recv = in_place ? bf->a + (size_t)rank * bytes : bf->b;
    shoal_coll_args_t args = {.kind = SHOAL_COLL_REDUCE_SCATTER, .sendbuf = bf->a,
                              .recvbuf = recv, .count = rc, .dtype = dt, .op = op};
    if (!serves(comm, c, &args))
        return 0;
    shoal_status_t s = run_case(comm, c, &args);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s reduce_scatter %s/%s count %zu: %s (%s)",
               rank, nranks, case_name(c), shoal_dtype_name(dt), shoal_op_name(op), rc,
               shoal_status_string(s), shoal_comm_last_error(comm));
    harness_expected(bf->want, bf->tmp, total, nranks, dt, op);
    const unsigned char *want = bf->want + (size_t)rank * bytes;
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(recv[i] == want[i], fail,
                   "rank %d/%d %s reduce_scatter %s %s count %zu %s: byte %zu (element %zu) "
                   "is %#x, want %#x",
                   rank, nranks, case_name(c), shoal_dtype_name(dt), shoal_op_name(op), rc,
                   in_place ? "in-place" : "out-of-place", i, i / es, recv[i], want[i]);
    if (in_place)
        return harness_check_untouched(bf->a, total * es, total * es + GUARD, GUARD_BYTE, rank,
                                       "past the end of the in-place reduce_scatter's buffer");
    RANK_CHECK(memcmp(bf->a, bf->orig, total * es) == 0, fail,
               "rank %d: out-of-place %s reduce_scatter changed sendbuf", rank, case_name(c));
    return harness_check_untouched(bf->b, bytes, bytes + GUARD, GUARD_BYTE, rank,
                                   "past the end of the reduce_scatter's recvbuf");
fail:
    return 1;
}

static int check_ag(shoal_comm_t comm, const algo_case_t *c, int rank, int nranks, size_t count,
                    shoal_dtype_t dt, int in_place, bufs_t *bf)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es, total = (size_t)nranks * bytes;
    memset(bf->b, GUARD_BYTE, total + GUARD);
    unsigned char *send = in_place ? bf->b + (size_t)rank * bytes : bf->a;
    harness_fill_exact(send, count, rank, dt, SHOAL_SUM);
    memcpy(bf->orig, send, bytes);
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLGATHER, .sendbuf = send, .recvbuf = bf->b,
                              .count = count, .dtype = dt, .op = SHOAL_SUM};
    if (!serves(comm, c, &args))
        return 0;
    shoal_status_t s = run_case(comm, c, &args);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s allgather %s count %zu: %s (%s)", rank,
               nranks, case_name(c), shoal_dtype_name(dt), count, shoal_status_string(s),
               shoal_comm_last_error(comm));
    for (int r = 0; r < nranks; r++) {
        harness_fill_exact(bf->want, count, r, dt, SHOAL_SUM);
        const unsigned char *got = bf->b + (size_t)r * bytes;
        for (size_t i = 0; i < bytes; i++)
            RANK_CHECK(got[i] == bf->want[i], fail,
                       "rank %d/%d %s allgather %s count %zu %s: block %d byte %zu is %#x, "
                       "want %#x",
                       rank, nranks, case_name(c), shoal_dtype_name(dt), count,
                       in_place ? "in-place" : "out-of-place", r, i, got[i], bf->want[i]);
    }
    if (!in_place)
        RANK_CHECK(memcmp(bf->a, bf->orig, bytes) == 0, fail,
                   "rank %d: out-of-place %s allgather changed sendbuf", rank, case_name(c));
    return harness_check_untouched(bf->b, total, total + GUARD, GUARD_BYTE, rank,
                                   "past the end of the allgather's recvbuf");
fail:
    return 1;
}

/* Root's payload: distinct bytes that depend on the root and the call. */
static void fill_payload(unsigned char *buf, size_t bytes, int root, uint32_t salt)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (unsigned char)harness_mix((uint32_t)i * 31u + (uint32_t)root * 7919u + salt);
}

static int check_bcast(shoal_comm_t comm, const algo_case_t *c, int rank, int nranks, int root,
                       size_t count, shoal_dtype_t dt, int in_place, bufs_t *bf)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es;
    uint32_t salt = (uint32_t)(count * 131 + (size_t)dt * 17 + (size_t)in_place);
    int is_root = rank == root;
    fill_payload(bf->want, bytes, root, salt);
    memset(bf->b, GUARD_BYTE, bytes + GUARD);
    void *send;
    if (is_root) {
        memcpy(in_place ? bf->b : bf->a, bf->want, bytes);
        send = in_place ? bf->b : bf->a;
    } else {
        /* sendbuf is ignored off the root: NULL or a buffer that must stay. */
        memset(bf->a, UNTOUCHED_BYTE, bytes);
        send = in_place ? NULL : bf->a;
    }
    shoal_coll_args_t args = {.kind = SHOAL_COLL_BROADCAST, .sendbuf = send, .recvbuf = bf->b,
                              .count = count, .dtype = dt, .op = SHOAL_SUM, .root = root};
    if (!serves(comm, c, &args))
        return 0;
    shoal_status_t s = run_case(comm, c, &args);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s broadcast %s count %zu root %d: %s (%s)",
               rank, nranks, case_name(c), shoal_dtype_name(dt), count, root,
               shoal_status_string(s), shoal_comm_last_error(comm));
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(bf->b[i] == bf->want[i], fail,
                   "rank %d/%d %s broadcast root %d %s count %zu %s: byte %zu is %#x, want %#x",
                   rank, nranks, case_name(c), root, shoal_dtype_name(dt), count,
                   in_place ? "in-place" : "out-of-place", i, bf->b[i], bf->want[i]);
    if (!is_root && !in_place &&
        harness_check_untouched(bf->a, 0, bytes, UNTOUCHED_BYTE, rank,
                                "non-root sendbuf of broadcast"))
        goto fail;
    if (is_root && !in_place)
        RANK_CHECK(memcmp(bf->a, bf->want, bytes) == 0, fail, "rank %d: root's sendbuf changed",
                   rank);
    return harness_check_untouched(bf->b, bytes, bytes + GUARD, GUARD_BYTE, rank,
                                   "past the end of the broadcast's recvbuf");
fail:
    return 1;
}

static int check_reduce(shoal_comm_t comm, const algo_case_t *c, int rank, int nranks, int root,
                        size_t count, shoal_dtype_t dt, shoal_op_t op, int in_place, bufs_t *bf)
{
    size_t es = shoal_dtype_bytes(dt), bytes = count * es;
    int is_root = rank == root;
    harness_fill_exact(bf->a, count, rank, dt, op);
    memset(bf->b, is_root ? GUARD_BYTE : UNTOUCHED_BYTE, bytes + GUARD);
    /* In place on the root; a non-root's recvbuf is NULL in the in-place
     * variant, which is allowed there. */
    void *recv = is_root ? (in_place ? bf->a : bf->b) : (in_place ? NULL : bf->b);
    shoal_coll_args_t args = {.kind = SHOAL_COLL_REDUCE, .sendbuf = bf->a, .recvbuf = recv,
                              .count = count, .dtype = dt, .op = op, .root = root};
    if (!serves(comm, c, &args))
        return 0;
    shoal_status_t s = run_case(comm, c, &args);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s reduce %s/%s count %zu root %d: %s (%s)",
               rank, nranks, case_name(c), shoal_dtype_name(dt), shoal_op_name(op), count, root,
               shoal_status_string(s), shoal_comm_last_error(comm));
    if (!is_root)
        return harness_check_untouched(bf->b, 0, bytes + GUARD, UNTOUCHED_BYTE, rank,
                                       "non-root recvbuf of reduce");
    harness_expected(bf->want, bf->tmp, count, nranks, dt, op);
    const unsigned char *got = recv ? recv : bf->b;
    for (size_t i = 0; i < bytes; i++)
        RANK_CHECK(got[i] == bf->want[i], fail,
                   "rank %d/%d %s reduce root %d %s %s count %zu %s: byte %zu (element %zu) "
                   "is %#x, want %#x",
                   rank, nranks, case_name(c), root, shoal_dtype_name(dt), shoal_op_name(op),
                   count, in_place ? "in-place" : "out-of-place", i, i / es, got[i],
                   bf->want[i]);
    if (!in_place)
        return harness_check_untouched(bf->b, bytes, bytes + GUARD, GUARD_BYTE, rank,
                                       "past the end of the reduce's recvbuf");
    return 0;
fail:
    return 1;
}

/* The reducing kinds: every dtype at every count, the op turning with the
 * count and the rank count, so that each dtype meets every op over the
 * rank counts (and each op every dtype) without the whole product, which
 * test_reduce checks element by element; in place and out of place
 * alternate, and a reduce's root turns through every rank. */
static int matrix_reducing(shoal_comm_t comm, const algo_case_t *c, int rank, int nranks,
                           bufs_t *bf)
{
    shoal_dtype_t dts[SHOAL_DTYPE_COUNT];
    int ndt = harness_dtypes(dts), turn = 0;
    for (int t = 0; t < ndt; t++) {
        int dt = (int)dts[t];
        size_t counts[MAX_COUNTS];
        size_t ncounts = case_counts(c, shoal_dtype_bytes((shoal_dtype_t)dt), counts);
        for (size_t k = 0; k < ncounts; k++, turn++) {
            shoal_op_t o = (shoal_op_t)((dt + (int)k + nranks) % SHOAL_OP_COUNT);
            int root = turn % nranks;
            int in_place = (int)((dt + (int)o + (int)k + root) % 2);
            shoal_dtype_t d = (shoal_dtype_t)dt;
            int bad = c->kind == SHOAL_COLL_ALLREDUCE
                          ? check_ar(comm, c, rank, nranks, counts[k], d, o, in_place, bf)
                      : c->kind == SHOAL_COLL_REDUCE_SCATTER
                          ? check_rs(comm, c, rank, nranks, counts[k], d, o, in_place, bf)
                          : check_reduce(comm, c, rank, nranks, root, counts[k], d, o,
                                         in_place, bf);
            if (bad)
                return 1;
        }
    }
    return 0;
}

/* All-gather and broadcast: every moving dtype x count, in place and out
 * of place, a broadcast's root turning through every rank. */
static int matrix_moving(shoal_comm_t comm, const algo_case_t *c, int rank, int nranks,
                         bufs_t *bf)
{
    int turn = 0;
    for (size_t d = 0; d < NMOVING; d++) {
        size_t counts[MAX_COUNTS];
        size_t ncounts = case_counts(c, shoal_dtype_bytes(moving_dtypes[d]), counts);
        for (size_t k = 0; k < ncounts; k++) {
            for (int in_place = 0; in_place < 2; in_place++, turn++) {
                int root = turn % nranks;
                int bad = c->kind == SHOAL_COLL_ALLGATHER
                              ? check_ag(comm, c, rank, nranks, counts[k], moving_dtypes[d],
                                         in_place, bf)
                              : check_bcast(comm, c, rank, nranks, root, counts[k],
                                            moving_dtypes[d], in_place, bf);
                if (bad)
                    return 1;
            }
        }
    }
    return 0;
}

/* Single-copy moves of this rank so far: puts into peers, gets from them. */
static uint64_t single_copies(shoal_comm_t comm)
{
    uint64_t n = 0;
    for (int q = 0; q < comm->team.nranks; q++) {
        if (comm->team.eps[q])
            n += comm->team.eps[q]->puts + comm->team.eps[q]->gets;
    }
    return n;
}

/* One run of a kind over a transport: its algorithms (NULL: the public
 * call), one after another on one communicator, which each must serve
 * some of the calls where must_serve. */
typedef struct {
    shoal_coll_kind_t kind;
    const shoal_algo_ops_t *algos[MAX_ALGOS];
    int nalgos;
    int must_serve;
} kind_run_t;

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const kind_run_t *run = arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    bufs_t bf;
    RANK_CHECK(bufs_alloc(&bf), fail, "out of memory");
    int moving = run->kind == SHOAL_COLL_ALLGATHER || run->kind == SHOAL_COLL_BROADCAST;
    for (int i = 0; i < run->nalgos; i++) {
        algo_case_t c = {.kind = run->kind, .algo = run->algos[i], .must_serve = run->must_serve};
        uint64_t copies = single_copies(comm);
        served = 0;
        if (moving ? matrix_moving(comm, &c, rank, nranks, &bf)
                   : matrix_reducing(comm, &c, rank, nranks, &bf))
            goto fail;
        RANK_CHECK(!c.must_serve || served > 0, fail, "%s %s served none of the calls",
                   case_name(&c), shoal_coll_kind_name(c.kind));
        /* With shareable buffers on one host the put algorithms never
         * fall back to slots. */
        RANK_CHECK(!c.must_serve || !c.algo || strcmp(c.algo->name, "put") ||
                       single_copies(comm) > copies,
                   fail, "put %s moved nothing single copy", shoal_coll_kind_name(c.kind));
    }
    bufs_free(&bf);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* The registered algorithms of kind, and for the rooted kinds then the
 * public call (NULL), into algos; returns how many. */
static int kind_algos(shoal_coll_kind_t kind, const shoal_algo_ops_t **algos)
{
    int n = 0;
    const shoal_algo_ops_t *a;
    for (int i = 0; (a = shoal_algo_at(kind, i)) && n < MAX_ALGOS - 1; i++)
        algos[n++] = a;
    assert_null(shoal_algo_at(kind, n)); /* room for every one */
    if (kind == SHOAL_COLL_BROADCAST || kind == SHOAL_COLL_REDUCE)
        algos[n++] = NULL;
    return n;
}

/* Every algorithm of kind over transport at rank counts from..8 (a short
 * run: from, 3, 5 and 8, odd and even, a power of two and not), all of
 * them on one communicator per rank count. */
static void run_kind(shoal_coll_kind_t kind, const char *transport, int from)
{
    kind_run_t run = {.kind = kind};
    run.nalgos = kind_algos(kind, run.algos);
    harness_use_transport(transport, TEST_CHUNK);
    for (int n = from; n <= MAX_RANKS; n++) {
        if (harness_quick() && n != from && n != 3 && n != 5 && n != MAX_RANKS)
            continue;
        run.must_serve = !strcmp(transport, "shm") && n >= 2;
        int rc = harness_run_ranks(n, rank_matrix, &run, 120);
        if (rc != 0)
            print_error("%s over %s with %d ranks failed\n", shoal_coll_kind_name(kind),
                        transport, n);
        assert_int_equal(rc, 0);
    }
}

#define KIND_TEST(name, kind)                                                 \
    static void test_##name##_shm(void **state)                               \
    {                                                                         \
        (void)state;                                                          \
        run_kind(kind, "shm", 1);                                             \
    }                                                                         \
    static void test_##name##_tcp(void **state)                               \
    {                                                                         \
        (void)state;                                                          \
        run_kind(kind, "tcp", 2);                                             \
    }
KIND_TEST(allreduce, SHOAL_COLL_ALLREDUCE)
KIND_TEST(reduce_scatter, SHOAL_COLL_REDUCE_SCATTER)
KIND_TEST(allgather, SHOAL_COLL_ALLGATHER)
KIND_TEST(broadcast, SHOAL_COLL_BROADCAST)
KIND_TEST(reduce, SHOAL_COLL_REDUCE)

/* Determinism. Inputs in [-1, 1] with no short binary expansion, so sums
 * round and a rank that reduced in another order would see other bits;
 * several pieces, and (for the one-shot) up to one piece. */
typedef struct {
    shoal_dtype_t dt;
    shoal_op_t op;
    size_t count;
} det_case_t;

static const det_case_t det_cases[] = {
    {SHOAL_FLOAT32, SHOAL_SUM, 5 * TEST_CHUNK / 4 + 13},
    {SHOAL_FLOAT64, SHOAL_AVG, 3 * TEST_CHUNK / 8 + 5},
    {SHOAL_FLOAT16, SHOAL_SUM, 3 * TEST_CHUNK / 2 + 1},
    {SHOAL_FLOAT32, SHOAL_SUM, TEST_CHUNK / 4},
    {SHOAL_FLOAT64, SHOAL_AVG, TEST_CHUNK / 8 - 3},
    {SHOAL_FLOAT16, SHOAL_SUM, 333},
};
#define NDET (sizeof(det_cases) / sizeof(det_cases[0]))

/* Shared with the ranks: the algorithm, and each rank's hash of each
 * case's result (0 for a case the algorithm cannot serve). */
typedef struct {
    const shoal_algo_ops_t *algo;
    uint64_t hash[NDET][MAX_RANKS];
} det_run_t;

static double det_value(int rank, size_t i)
{
    return (double)(harness_mix((uint32_t)rank * 7919u + (uint32_t)i) % 20001) / 10000.0 - 1;
}

static double decode(const void *buf, size_t i, shoal_dtype_t dt)
{
    switch (dt) {
    case SHOAL_FLOAT64:
        return ((const double *)buf)[i];
    case SHOAL_FLOAT32:
        return ((const float *)buf)[i];
    default:
        return shoal_f16_to_f32(((const uint16_t *)buf)[i]);
    }
}

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Results are also close to the exact sum, so the bits that must agree
 * are those of a real all-reduce. */
static int check_close(const void *got, int nranks, const char *name, const det_case_t *c)
{
    double tol = c->dt == SHOAL_FLOAT64 ? 1e-12 : c->dt == SHOAL_FLOAT32 ? 1e-5 : 1e-2;
    for (size_t i = 0; i < c->count; i++) {
        double sum = 0, mag = 1;
        for (int r = 0; r < nranks; r++) {
            sum += det_value(r, i);
            mag += fabs(det_value(r, i));
        }
        if (c->op == SHOAL_AVG)
            sum /= nranks;
        double g = decode(got, i, c->dt);
        RANK_CHECK(fabs(g - sum) <= tol * mag, fail, "%s %s element %zu is %g, want about %g",
                   name, shoal_dtype_name(c->dt), i, g, sum);
    }
    return 0;
fail:
    return 1;
}

static int rank_determinism(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    det_run_t *run = arg;
    algo_case_t ac = {.kind = SHOAL_COLL_ALLREDUCE, .algo = run->algo};
    const char *name = case_name(&ac);
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    bufs_t bf;
    RANK_CHECK(bufs_alloc(&bf), fail, "out of memory");
    for (size_t k = 0; k < NDET; k++) {
        const det_case_t *c = &det_cases[k];
        size_t bytes = c->count * shoal_dtype_bytes(c->dt);
        for (size_t i = 0; i < c->count; i++)
            shoal_dtype_set_f64(bf.a, i, c->dt, det_value(rank, i));
        shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = bf.a,
                                  .recvbuf = bf.b, .count = c->count, .dtype = c->dt,
                                  .op = c->op};
        if (!serves(comm, &ac, &args))
            continue;
        shoal_status_t s = run_case(comm, &ac, &args);
        RANK_CHECK(s == SHOAL_OK, fail, "%s: %s", name, shoal_status_string(s));
        /* Again, in place: the same bits. */
        args.recvbuf = bf.a;
        s = run_case(comm, &ac, &args);
        RANK_CHECK(s == SHOAL_OK, fail, "%s in place: %s", name, shoal_status_string(s));
        RANK_CHECK(memcmp(bf.a, bf.b, bytes) == 0, fail, "rank %d: %s %s gave other bits in place",
                   rank, name, shoal_dtype_name(c->dt));
        if (check_close(bf.b, nranks, name, c))
            goto fail;
        run->hash[k][rank] = fnv1a(bf.b, bytes);
    }
    bufs_free(&bf);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void determinism(const shoal_algo_ops_t *algo, const char *transport, int nranks)
{
    det_run_t *run = mmap(NULL, sizeof(*run), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
    assert_true(run != MAP_FAILED);
    memset(run, 0, sizeof(*run));
    run->algo = algo;
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_determinism, run, 120), 0);
    for (size_t k = 0; k < NDET; k++) {
        for (int r = 1; r < nranks; r++) {
            if (run->hash[k][r] != run->hash[k][0])
                fail_msg("%s %s over %d ranks (%s): rank %d's result differs from rank 0's",
                         algo->name, shoal_dtype_name(det_cases[k].dt), nranks, transport, r);
        }
    }
    munmap(run, sizeof(*run));
}

/* Every registered all-reduce, over shared memory at 2..8 ranks and over
 * tcp at 5 and 6. */
static void test_determinism(void **state)
{
    (void)state;
    const shoal_algo_ops_t *a;
    for (int i = 0; (a = shoal_algo_at(SHOAL_COLL_ALLREDUCE, i)); i++) {
        for (int n = 2; n <= MAX_RANKS; n++)
            determinism(a, "shm", n);
        determinism(a, "tcp", 5);
        determinism(a, "tcp", 6);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce_shm),      cmocka_unit_test(test_allreduce_tcp),
        cmocka_unit_test(test_reduce_scatter_shm), cmocka_unit_test(test_reduce_scatter_tcp),
        cmocka_unit_test(test_allgather_shm),      cmocka_unit_test(test_allgather_tcp),
        cmocka_unit_test(test_broadcast_shm),      cmocka_unit_test(test_broadcast_tcp),
        cmocka_unit_test(test_reduce_shm),         cmocka_unit_test(test_reduce_tcp),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests_name("algos", tests, NULL, NULL);
}
