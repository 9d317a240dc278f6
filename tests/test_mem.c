/* Shareable memory and the zero-copy collectives.
 * - shoal_mem_alloc / shoal_mem_free: bad input gets a clear error and
 *   changes nothing (size 0, NULL, double free, foreign pointers).
 * - The registration cache: a buffer inside a shareable block is found by
 *   address, a malloc'd one is not (unless registered), and freeing the
 *   block invalidates the cached entry.
 * - The "put" all-gather, all-to-all, broadcast, gather, scatter,
 *   reduce-scatter and all-reduce (forced with SHOAL_ALGO, so that every
 *   size runs them), against a scalar reference on 1..8 ranks over shm,
 *   counts 0, 1, odd and several pieces, in and out of place: with every
 *   buffer shareable the endpoints' put and get counters show the
 *   single-copy path was taken (the broadcast's and scatter's peers pull,
 *   the reduce-scatter gets every piece of its block from every peer, the
 *   all-reduce does that and puts its block into every peer); with one
 *   rank's buffers malloc'd and cross-memory attach off, every rank falls
 *   back to slots (no put anywhere; the broadcast, gather and scatter still
 *   go single copy with a shareable root) and the results are still right.
 *   The rooted kinds run at rank 1 and at the last rank, the reducing ones
 *   in SUM and AVG.
 * - The same with malloc'd buffers and SHOAL_CMA=on: every move is single
 *   copy, by cross-memory attach (no other way reaches private memory);
 *   with one rank's probe failing (SHOAL_TEST_CMA_FAIL) every rank agrees
 *   at init to go without, and every call falls back to slots together. */
#include "harness.h"

#include "algos/algo.h"
#include "core/comm.h"
#include "core/reg.h"
#include "transport/shm_rmem.h"

#include <sys/wait.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096

static shoal_comm_t one_rank_comm(void)
{
    shoal_unique_id_t id;
    shoal_comm_t comm = NULL;
    assert_int_equal(shoal_get_unique_id(&id), SHOAL_OK);
    assert_int_equal(shoal_comm_init(1, &id, 0, &comm), SHOAL_OK);
    return comm;
}

static void test_mem_alloc_bad_input(void **state)
{
    (void)state;
    void *p = (void *)&p;
    assert_int_equal(shoal_mem_alloc(0, &p), SHOAL_ERR_INVALID_ARG);
    assert_ptr_equal(p, (void *)&p);
    assert_int_equal(shoal_mem_alloc(64, NULL), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_mem_alloc(SIZE_MAX, &p), SHOAL_ERR_INVALID_ARG);
    assert_ptr_equal(p, (void *)&p);
    assert_int_equal(shoal_mem_free(NULL), SHOAL_ERR_INVALID_ARG);

    assert_int_equal(shoal_mem_alloc(10000, &p), SHOAL_OK);
    unsigned char *b = p;
    for (size_t i = 0; i < 10000; i++)
        assert_int_equal(b[i], 0);
    memset(b, 0x5a, 10000);
    /* Not the start of the block, or never from here: refused. */
    assert_int_equal(shoal_mem_free(b + 1), SHOAL_ERR_INVALID_ARG);
    char other[16];
    assert_int_equal(shoal_mem_free(other), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(b[9999], 0x5a); /* still ours */
    assert_int_equal(shoal_mem_free(p), SHOAL_OK);
    assert_int_equal(shoal_mem_free(p), SHOAL_ERR_INVALID_ARG);
}

static void test_reg_cache(void **state)
{
    (void)state;
    shoal_comm_t comm = one_rank_comm();
    void *p;
    assert_int_equal(shoal_mem_alloc(1 << 20, &p), SHOAL_OK);
    char *b = p;
    const shoal_reg_t *reg = shoal_reg_lookup(comm, b + 100, 1000);
    assert_non_null(reg);
    assert_int_equal(reg->user, 0);
    assert_ptr_equal(reg->buf, b);
    assert_true(reg->size >= (1 << 20));
    assert_true(reg->serial != 0);
    /* Found again by any range inside the block, without a new entry. */
    assert_ptr_equal(shoal_reg_lookup(comm, b + 5000, 1), reg);
    assert_null(shoal_reg_lookup(comm, b + (1 << 20) - 1, 2 + reg->size - (1 << 20)));
    /* Cached entries are not the caller's registrations. */
    assert_null(shoal_reg_find(comm, b, 1));

    /* Private memory: only a registration makes it known. */
    char *m = malloc(4096);
    assert_non_null(m);
    assert_null(shoal_reg_lookup(comm, m, 4096));
    void *h;
    assert_int_equal(shoal_comm_register(comm, m, 4096, &h), SHOAL_OK);
    assert_ptr_equal(shoal_reg_lookup(comm, m + 8, 8), h);
    assert_int_equal(((const shoal_reg_t *)h)->serial, 0);
    assert_int_equal(shoal_comm_deregister(comm, h), SHOAL_OK);
    assert_null(shoal_reg_lookup(comm, m, 4096));
    free(m);

    /* A cached entry cannot be deregistered as if it were a handle. */
    reg = shoal_reg_lookup(comm, b, 1);
    assert_int_equal(shoal_comm_deregister(comm, (void *)reg), SHOAL_ERR_INVALID_ARG);

    /* Freed: the entry goes, and a new block is cached afresh. */
    uint64_t serial = reg->serial;
    assert_int_equal(shoal_mem_free(p), SHOAL_OK);
    assert_null(shoal_reg_lookup(comm, b + 100, 1000));
    assert_int_equal(shoal_mem_alloc(4096, &p), SHOAL_OK);
    reg = shoal_reg_lookup(comm, p, 4096);
    assert_non_null(reg);
    assert_true(reg->serial != serial);
    /* A block still cached at destroy is released with the communicator. */
    assert_int_equal(shoal_comm_destroy(comm), SHOAL_OK);
    assert_int_equal(shoal_mem_free(p), SHOAL_OK);
}

/* ---- collectives -------------------------------------------------------- */

/* Every buffer shareable; rank 0's malloc'd; every buffer shareable while
 * the plan skips the exchange (no put due); every buffer malloc'd. */
typedef enum { MODE_SHARED, MODE_MIXED, MODE_SKIPPED, MODE_PRIVATE } mem_mode_t;

/* What a run expects: its memory, and whether private memory is reached
 * (SHOAL_CMA=on and every probe passed). */
typedef struct {
    mem_mode_t mode;
    int cma;
} coll_run_t;

static const size_t counts[] = {0, 1, 1001, 3 * TEST_CHUNK / 4 + 7};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static int32_t val(int src, int dst, size_t i)
{
    return (int32_t)harness_mix((uint32_t)(src * 131 + dst * 7919) ^ (uint32_t)i);
}

/* Buffers of bytes: shareable, except on rank 0 in the mixed mode. */
static int mem_private(mem_mode_t mode, int rank)
{
    return mode == MODE_PRIVATE || (mode == MODE_MIXED && rank == 0);
}

static void *mem_get(mem_mode_t mode, int rank, size_t bytes)
{
    if (mem_private(mode, rank))
        return malloc(bytes ? bytes : 1);
    void *p = NULL;
    return shoal_mem_alloc(bytes ? bytes : 1, &p) == SHOAL_OK ? p : NULL;
}

static void mem_put(mem_mode_t mode, int rank, void *p)
{
    if (mem_private(mode, rank))
        free(p);
    else
        shoal_mem_free(p);
}

/* Single-copy moves of this rank so far: puts into peers, gets from them. */
static uint64_t puts_now(shoal_comm_t comm)
{
    uint64_t n = 0;
    for (int q = 0; q < comm->team.nranks; q++) {
        if (comm->team.eps[q]) {
            n += atomic_load_explicit(&comm->team.eps[q]->puts, memory_order_relaxed);
            n += atomic_load_explicit(&comm->team.eps[q]->gets, memory_order_relaxed);
        }
    }
    return n;
}

/* Whether check_coll checks the single-copy moves (not where a hook
 * changes them); the reducing kinds' op (SUM or AVG); the rooted kinds'
 * root: rank 1 (0 alone), or the last rank. */
static int count_check = 1;
static shoal_op_t coll_op = SHOAL_SUM;
static int root_last;

/* The kinds of check_coll. */
enum { K_ALLGATHER, K_ALLTOALL, K_BROADCAST, K_GATHER, K_SCATTER, K_REDUCE_SCATTER,
       K_ALLREDUCE, K_COUNT };

/* Pieces of bytes through the reads of a reduce: one get per slot piece
 * (TEST_CHUNK, below the reads' 32 KiB cap). */
static uint64_t pieces(size_t bytes)
{
    return (bytes + TEST_CHUNK - 1) / TEST_CHUNK;
}

/* The all-reduce's block of rank r of total elements over n ranks
 * (put_reduce.c): a share rounded up to 16 elements. */
static size_t ar_block(size_t total, int n, int r)
{
    size_t bs = (total + (size_t)n - 1) / (size_t)n;
    bs = (bs + 15) & ~(size_t)15;
    size_t off = (size_t)r * bs < total ? (size_t)r * bs : total;
    return total - off < bs ? total - off : bs;
}

/* What this rank must have moved in one call on the single-copy path: the
 * all-gather and all-to-all put a block into every peer, the broadcast's
 * and scatter's peers each get the root's input, the gather's put into
 * the root's output; the reduce-scatter gets its block from every peer
 * piece by piece, and the all-reduce does that and then puts its block
 * into every peer. */
static uint64_t puts_due(int kind, int rank, int n, size_t count, int root)
{
    if (n == 1 || count == 0)
        return 0;
    uint64_t m = (uint64_t)n - 1;
    switch (kind) {
    case K_BROADCAST:
    case K_GATHER:
    case K_SCATTER:
        return rank == root ? 0 : 1;
    case K_REDUCE_SCATTER:
        return m * pieces(count * sizeof(int32_t));
    case K_ALLREDUCE:
        return m * pieces(ar_block((size_t)n * count, n, rank) * sizeof(int32_t)) + m;
    default:
        return m;
    }
}

/* Whether the call takes the single-copy path: every output must be
 * reachable (all-gather, all-to-all), every input (reduce-scatter), both
 * (all-reduce), or the root's buffer (broadcast, gather, scatter). */
static int single_copy(int kind, mem_mode_t mode, int cma, int root)
{
    if (mode == MODE_SKIPPED)
        return 0;
    if (cma || mode == MODE_SHARED)
        return 1;
    return (kind == K_BROADCAST || kind == K_GATHER || kind == K_SCATTER) &&
           mode == MODE_MIXED && root != 0;
}

/* Addends small enough that n of them never overflow. */
static int32_t sval(int src, int dst, size_t i)
{
    return val(src, dst, i) % 100000;
}

static int32_t want_of(int kind, int rank, int n, size_t count, int root, int j, size_t i)
{
    int64_t sum = 0;
    switch (kind) {
    case K_ALLGATHER:
    case K_GATHER:
        return val(j, 0, i);
    case K_ALLTOALL:
        return val(j, rank, i);
    case K_BROADCAST:
        return val(root, 0, (size_t)j * count + i);
    case K_SCATTER:
        return val(root, rank, i);
    case K_REDUCE_SCATTER:
        for (int q = 0; q < n; q++)
            sum += sval(q, rank, i);
        return (int32_t)(coll_op == SHOAL_AVG ? sum / n : sum);
    default:
        for (int q = 0; q < n; q++)
            sum += sval(q, 0, (size_t)j * count + i);
        return (int32_t)(coll_op == SHOAL_AVG ? sum / n : sum);
    }
}

static shoal_status_t run_coll(shoal_comm_t comm, int kind, int rank, int n, size_t count,
                               int inplace, int root, int32_t *in, int32_t *out)
{
    size_t total = (size_t)n * count;
    switch (kind) {
    case K_ALLGATHER: {
        int32_t *src = inplace ? out + (size_t)rank * count : in;
        for (size_t i = 0; i < count; i++)
            src[i] = val(rank, 0, i);
        return shoal_allgather(src, out, count, SHOAL_INT32, comm);
    }
    case K_ALLTOALL: {
        int32_t *src = inplace ? out : in;
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < count; i++)
                src[(size_t)j * count + i] = val(rank, j, i);
        return shoal_alltoall(src, out, count, SHOAL_INT32, comm);
    }
    case K_BROADCAST: { /* of count * n elements */
        int32_t *buf = inplace ? out : in;
        if (rank == root)
            for (size_t i = 0; i < total; i++)
                buf[i] = val(root, 0, i);
        return shoal_broadcast(buf, out, total, SHOAL_INT32, root, comm);
    }
    case K_GATHER: {
        int32_t *src = inplace && rank == root ? out + (size_t)rank * count : in;
        for (size_t i = 0; i < count; i++)
            src[i] = val(rank, 0, i);
        return shoal_gather(src, out, count, SHOAL_INT32, root, comm);
    }
    case K_SCATTER: {
        if (rank == root)
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < count; i++)
                    in[(size_t)j * count + i] = val(root, j, i);
        int32_t *dst = inplace && rank == root ? in + (size_t)rank * count : out;
        shoal_status_t s = shoal_scatter(in, dst, count, SHOAL_INT32, root, comm);
        if (dst != out)
            memcpy(out, dst, count * sizeof(int32_t));
        return s;
    }
    case K_REDUCE_SCATTER: {
        int32_t *src = inplace ? out : in;
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < count; i++)
                src[(size_t)j * count + i] = sval(rank, j, i);
        int32_t *dst = inplace ? out + (size_t)rank * count : out;
        shoal_status_t s = shoal_reduce_scatter(src, dst, count, SHOAL_INT32, coll_op, comm);
        if (dst != out)
            memmove(out, dst, count * sizeof(int32_t));
        return s;
    }
    default: { /* all-reduce of count * n elements */
        int32_t *src = inplace ? out : in;
        for (size_t i = 0; i < total; i++)
            src[i] = sval(rank, 0, i);
        return shoal_allreduce(src, out, total, SHOAL_INT32, coll_op, comm);
    }
    }
}



static int check_coll(shoal_comm_t comm, int kind, int rank, int n, size_t count, int inplace,
                      mem_mode_t mode, int cma)
{
    size_t total = (size_t)n * count, bytes = total * sizeof(int32_t);
    int root = n == 1 ? 0 : root_last ? n - 1 : 1;
    int32_t *in = mem_get(mode, rank, bytes), *out = mem_get(mode, rank, bytes);
    RANK_CHECK(in && out, fail, "rank %d: no memory", rank);
    for (size_t i = 0; i < total; i++)
        out[i] = -1;
    uint64_t before = puts_now(comm);
    shoal_status_t s = run_coll(comm, kind, rank, n, count, inplace, root, in, out);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: kind %d count %zu: %s", rank, kind, count,
               shoal_status_string(s));
    /* Blocks of the output due on this rank. */
    int blocks = kind == K_SCATTER || kind == K_REDUCE_SCATTER ? 1
               : kind == K_GATHER && rank != root          ? 0
                                                            : n;
    for (int j = 0; j < blocks; j++) {
        for (size_t i = 0; i < count; i++) {
            int32_t want = want_of(kind, rank, n, count, root, j, i);
            int32_t got = out[(size_t)j * count + i];
            RANK_CHECK(got == want, fail, "rank %d: kind %d n %d count %zu inplace %d mode %d: "
                       "block %d element %zu is %d, want %d", rank, kind, n, count, inplace,
                       (int)mode, j, i, got, want);
        }
    }
    uint64_t due = single_copy(kind, mode, cma, root) ? puts_due(kind, rank, n, count, root)
                                                      : 0;
    uint64_t did = puts_now(comm) - before;
    RANK_CHECK(!count_check || did == due, fail, "rank %d: kind %d n %d count %zu mode %d: %llu puts, want %llu",
               rank, kind, n, count, (int)mode, (unsigned long long)did,
               (unsigned long long)due);
    mem_put(mode, rank, in);
    mem_put(mode, rank, out);
    return 0;
fail:
    return 1;
}

static int rank_colls(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const coll_run_t *run = arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    for (int kind = 0; kind < K_COUNT; kind++) {
        int rooted = kind == K_BROADCAST || kind == K_GATHER || kind == K_SCATTER;
        int reducing = kind == K_REDUCE_SCATTER || kind == K_ALLREDUCE;
        /* Rooted kinds at rank 1 and at the last rank; reducing ones in
         * SUM and AVG. */
        for (int var = 0; var < (rooted && nranks > 2) + (reducing) + 1; var++) {
            root_last = rooted && var;
            coll_op = reducing && var ? SHOAL_AVG : SHOAL_SUM;
            for (size_t c = 0; c < NCOUNTS; c++)
                for (int inplace = 0; inplace < 2; inplace++)
                    /* Twice: the second call finds its keys in the caches. */
                    for (int rep = 0; rep < 2; rep++)
                        if (check_coll(comm, kind, rank, nranks, counts[c], inplace,
                                       run->mode, run->cma))
                            return 1;
        }
    }
    root_last = 0;
    coll_op = SHOAL_SUM;
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* cma: the SHOAL_CMA setting; fail: the rank whose probe fails, or -1. */
static void run_colls_cma(int nranks, mem_mode_t mode, const char *cma, int fail)
{
    char f[16];
    snprintf(f, sizeof(f), "%d", fail);
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_ALGO", "allgather:put,alltoall:put,broadcast:put,gather:put,"
                                 "scatter:put,reducescatter:put,allreduce:put");
    harness_setenv("SHOAL_CMA", cma);
    harness_setenv("SHOAL_TEST_CMA_FAIL", fail >= 0 ? f : NULL);
    coll_run_t run = {.mode = mode, .cma = !strcmp(cma, "on") && fail < 0};
    assert_int_equal(harness_run_ranks(nranks, rank_colls, &run, 120), 0);
    harness_setenv("SHOAL_TEST_CMA_FAIL", NULL);
    harness_setenv("SHOAL_CMA", NULL);
    harness_setenv("SHOAL_ALGO", NULL);
}

static void run_colls(int nranks, mem_mode_t mode)
{
    run_colls_cma(nranks, mode, "off", -1);
}

/* A plan whose call fell back (some rank's buffer not shareable) skips the
 * key exchange for the next 16 calls of its shape, every rank alike, and
 * waits twice as long after each further refusal; a call with shareable
 * buffers on every rank after the wait puts again and ends the back-off. */
static int rank_skip(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    const size_t count = 1001;
    if (check_coll(comm, 0, rank, nranks, count, 0, MODE_MIXED, 0))
        return 1;
    shoal_plan_t *plan = comm->team.plans[SHOAL_COLL_ALLGATHER];
    RANK_CHECK(plan && plan->skip == 16 && plan->skip_len == 16, fail,
               "rank %d: after a refusal skip %u of %u, want 16 of 16", rank,
               plan ? plan->skip : 0, plan ? plan->skip_len : 0);
    /* Shareable everywhere, but inside the wait: slots, no put. */
    for (int k = 0; k < 16; k++) {
        if (check_coll(comm, 0, rank, nranks, count, 0, MODE_SKIPPED, 0))
            return 1;
    }
    RANK_CHECK(plan == comm->team.plans[SHOAL_COLL_ALLGATHER] && plan->skip == 0, fail,
               "rank %d: %u calls still to skip", rank, plan->skip);
    if (check_coll(comm, 0, rank, nranks, count, 0, MODE_SHARED, 0))
        return 1;
    RANK_CHECK(plan->skip_len == 0, fail, "rank %d: back-off kept after a put", rank);
    /* Refused twice in a row: the second wait is twice as long. */
    if (check_coll(comm, 0, rank, nranks, count, 0, MODE_MIXED, 0))
        return 1;
    for (int k = 0; k < 16; k++) {
        if (check_coll(comm, 0, rank, nranks, count, 0, MODE_MIXED, 0))
            return 1;
    }
    if (check_coll(comm, 0, rank, nranks, count, 0, MODE_MIXED, 0))
        return 1;
    RANK_CHECK(plan->skip == 32 && plan->skip_len == 32, fail,
               "rank %d: after two refusals skip %u of %u, want 32 of 32", rank, plan->skip,
               plan->skip_len);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_skip(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_ALGO", "allgather:put");
    harness_setenv("SHOAL_CMA", "off");
    assert_int_equal(harness_run_ranks(3, rank_skip, NULL, 60), 0);
    harness_setenv("SHOAL_CMA", NULL);
    harness_setenv("SHOAL_ALGO", NULL);
}

/* An endpoint that cannot attach its peer's keys (as when the peer's /proc
 * is not readable): a hook over the transport's table, as a fault
 * injector would be. */
static shoal_transport_ops_t refuse_ops;

static shoal_status_t refuse_attach(shoal_ep_t *ep, const void *blob, size_t len,
                                    const shoal_rmem_t **rmem_p)
{
    (void)ep, (void)blob, (void)len, (void)rmem_p;
    return SHOAL_ERR_UNSUPPORTED;
}

/* Rank 0 cannot attach rank 1's keys; everyone else can. The pair moves
 * its blocks through slots (a writer's PUT_DATA, a reader's PUT_NOKEY and
 * the block sent back), with no agreement and no fallback of the others:
 * every result is right, and rank 0 moves nothing single copy to or from
 * rank 1. */
static int rank_refuse(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_ep_t *ep = comm->team.eps[1];
    if (rank == 0) {
        refuse_ops = *ep->ops;
        refuse_ops.rkey_attach = refuse_attach;
        ep->ops = &refuse_ops;
    }
    count_check = 0;
    for (int kind = 0; kind < K_COUNT; kind++) {
        int reducing = kind == K_REDUCE_SCATTER || kind == K_ALLREDUCE;
        for (int var = 0; var < reducing + 1; var++) {
            /* AVG: finished after the block asked for has come in. */
            coll_op = var ? SHOAL_AVG : SHOAL_SUM;
            for (size_t c = 0; c < NCOUNTS; c++)
                for (int inplace = 0; inplace < 2; inplace++)
                    if (check_coll(comm, kind, rank, nranks, counts[c], inplace, MODE_SHARED,
                                   0))
                        return 1;
        }
    }
    coll_op = SHOAL_SUM;
    if (rank == 0) {
        RANK_CHECK(ep->puts == 0 && ep->gets == 0, fail, "rank 0: %llu puts and %llu gets "
                   "with rank 1, whose keys it cannot attach", (unsigned long long)ep->puts,
                   (unsigned long long)ep->gets);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_attach_refused(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_ALGO", "allgather:put,alltoall:put,broadcast:put,gather:put,"
                                 "scatter:put,reducescatter:put,allreduce:put");
    for (int n = 2; n <= 4; n++)
        assert_int_equal(harness_run_ranks(n, rank_refuse, NULL, 120), 0);
    harness_setenv("SHOAL_ALGO", NULL);
}

#define COLL_TEST(n)                                                          \
    static void test_shared_##n(void **state)                                 \
    {                                                                         \
        (void)state;                                                          \
        run_colls(n, MODE_SHARED);                                            \
    }                                                                         \
    static void test_mixed_##n(void **state)                                  \
    {                                                                         \
        (void)state;                                                          \
        run_colls(n, MODE_MIXED);                                             \
    }                                                                         \
    static void test_cma_##n(void **state)                                    \
    {                                                                         \
        (void)state;                                                          \
        run_colls_cma(n, MODE_PRIVATE, "on", -1);                             \
    }
COLL_TEST(1) COLL_TEST(2) COLL_TEST(3) COLL_TEST(4) COLL_TEST(5) COLL_TEST(6) COLL_TEST(7)
COLL_TEST(8)

/* Rank 0 private, reached by cross-memory attach, the others shareable
 * and mapped: every move single copy. */
static void test_cma_mixed(void **state)
{
    (void)state;
    run_colls_cma(3, MODE_MIXED, "on", -1);
    run_colls_cma(4, MODE_MIXED, "on", -1);
}

/* One rank's probe fails (as when ptrace is denied): every rank agrees at
 * init to go without, and every call falls back together. */
static void test_cma_probe_fails(void **state)
{
    (void)state;
    run_colls_cma(2, MODE_PRIVATE, "on", 1);
    run_colls_cma(5, MODE_PRIVATE, "on", 4);
    run_colls_cma(4, MODE_MIXED, "on", 2);
}

/* SHOAL_CMA=off: private buffers everywhere take the slots, every rank
 * together, although the probe would pass. */
static void test_cma_off(void **state)
{
    (void)state;
    run_colls_cma(3, MODE_PRIVATE, "off", -1);
}

/* Without cross-memory attach shareable memory keeps its mapped path. */
/* A cross-memory copy with a rank whose process is gone is that rank's
 * failure (SHOAL_ERR_PEER, naming it), not a failed system call here. */
static void test_cma_dead_peer(void **state)
{
    (void)state;
    static char cell[64];
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    char buf[sizeof(cell)];
    uint64_t raddr = (uint64_t)(uintptr_t)cell;
    assert_int_equal(shoal_shm_cma_read(3, (uint32_t)pid, raddr, buf, sizeof(buf)),
                     SHOAL_ERR_PEER);
    assert_int_equal(shoal_shm_cma_write(3, (uint32_t)pid, raddr, buf, sizeof(buf)),
                     SHOAL_ERR_PEER);
    /* A live process that reaches nothing at the address stays a local fault. */
    assert_int_equal(shoal_shm_cma_read(3, (uint32_t)getpid(), 8, buf, sizeof(buf)),
                     SHOAL_ERR_SYSTEM);
}

static void test_cma_probe_fails_shared(void **state)
{
    (void)state;
    run_colls_cma(3, MODE_SHARED, "on", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mem_alloc_bad_input),
        cmocka_unit_test(test_reg_cache),
        cmocka_unit_test(test_shared_1), cmocka_unit_test(test_shared_2),
        cmocka_unit_test(test_shared_3), cmocka_unit_test(test_shared_4),
        cmocka_unit_test(test_shared_5), cmocka_unit_test(test_shared_6),
        cmocka_unit_test(test_shared_7), cmocka_unit_test(test_shared_8),
        cmocka_unit_test(test_mixed_2),  cmocka_unit_test(test_mixed_3),
        cmocka_unit_test(test_mixed_4),  cmocka_unit_test(test_mixed_8),
        cmocka_unit_test(test_skip),
        cmocka_unit_test(test_attach_refused),
        cmocka_unit_test(test_cma_1),    cmocka_unit_test(test_cma_2),
        cmocka_unit_test(test_cma_3),    cmocka_unit_test(test_cma_4),
        cmocka_unit_test(test_cma_5),    cmocka_unit_test(test_cma_6),
        cmocka_unit_test(test_cma_7),    cmocka_unit_test(test_cma_8),
        cmocka_unit_test(test_cma_mixed),
        cmocka_unit_test(test_cma_off),
        cmocka_unit_test(test_cma_probe_fails),
        cmocka_unit_test(test_cma_probe_fails_shared),
        cmocka_unit_test(test_cma_dead_peer),
    };
    (void)test_mixed_1, (void)test_mixed_5, (void)test_mixed_6, (void)test_mixed_7;
    return cmocka_run_group_tests_name("mem", tests, NULL, NULL);
}
