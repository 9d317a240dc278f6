/* allreduce_bench's collectives (bench_coll.h): their calls and the table
 * that describes each, then the inputs and the expected results that the
 * checker compares against. */
#include "bench_coll.h"

#include "algos/reduce.h"
#include "base/dtype.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

const shoal_bench_type_t shoal_bench_types[SHOAL_DTYPE_COUNT] = {
    [SHOAL_INT8] = {"int8", 127, 6, 1},
    [SHOAL_UINT8] = {"uint8", 255, 7, 0},
    [SHOAL_INT32] = {"int32", 1 << 30, 30, 1},
    [SHOAL_UINT32] = {"uint32", 1 << 30, 31, 0},
    [SHOAL_INT64] = {"int64", 1ull << 40, 62, 1},
    [SHOAL_UINT64] = {"uint64", 1ull << 40, 63, 0},
    [SHOAL_FLOAT16] = {"half", 2048, 15, 1},
    [SHOAL_FLOAT32] = {"float", 1 << 24, 30, 1},
    [SHOAL_FLOAT64] = {"double", 1ull << 40, 30, 1},
    [SHOAL_BFLOAT16] = {"bfloat16", 256, 30, 1},
    [SHOAL_FP8_E4M3] = {"f8e4m3", 16, 8, 1},
    [SHOAL_FP8_E5M2] = {"f8e5m2", 8, 15, 1},
};

const char *const shoal_bench_op_names[SHOAL_OP_COUNT] = {
    [SHOAL_SUM] = "sum", [SHOAL_PROD] = "prod", [SHOAL_MAX] = "max",
    [SHOAL_MIN] = "min", [SHOAL_AVG] = "avg",
};

/* ---- The collectives ------------------------------------------------- */

shoal_status_t shoal_bench_fail(int rank, const char *what, shoal_status_t s, shoal_comm_t comm)
{
    fprintf(stderr, "# rank %d: %s: %s (%s)\n", rank, what, shoal_status_string(s),
            shoal_comm_last_error(comm));
    return s;
}

static shoal_status_t shoal_bench_call_allreduce(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_allreduce_stream(c->send, c->recv, c->count, c->dtype, c->op, c->comm,
                                      c->stream);
    return shoal_allreduce(c->send, c->recv, c->count, c->dtype, c->op, c->comm);
}

static shoal_status_t shoal_bench_call_reduce_scatter(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_reduce_scatter_stream(c->send, c->recv, c->count, c->dtype, c->op,
                                           c->comm, c->stream);
    return shoal_reduce_scatter(c->send, c->recv, c->count, c->dtype, c->op, c->comm);
}

static shoal_status_t shoal_bench_call_allgather(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_allgather_stream(c->send, c->recv, c->count, c->dtype, c->comm, c->stream);
    return shoal_allgather(c->send, c->recv, c->count, c->dtype, c->comm);
}

static shoal_status_t shoal_bench_call_broadcast(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_broadcast_stream(c->send, c->recv, c->count, c->dtype, c->root, c->comm,
                                      c->stream);
    return shoal_broadcast(c->send, c->recv, c->count, c->dtype, c->root, c->comm);
}

static shoal_status_t shoal_bench_call_reduce(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_reduce_stream(c->send, c->recv, c->count, c->dtype, c->op, c->root, c->comm,
                                   c->stream);
    return shoal_reduce(c->send, c->recv, c->count, c->dtype, c->op, c->root, c->comm);
}

static shoal_status_t shoal_bench_call_alltoall(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_alltoall_stream(c->send, c->recv, c->count, c->dtype, c->comm, c->stream);
    return shoal_alltoall(c->send, c->recv, c->count, c->dtype, c->comm);
}

static shoal_status_t shoal_bench_call_gather(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_gather_stream(c->send, c->recv, c->count, c->dtype, c->root, c->comm,
                                   c->stream);
    return shoal_gather(c->send, c->recv, c->count, c->dtype, c->root, c->comm);
}

static shoal_status_t shoal_bench_call_scatter(const shoal_bench_call_t *c)
{
    if (c->stream)
        return shoal_scatter_stream(c->send, c->recv, c->count, c->dtype, c->root, c->comm,
                                    c->stream);
    return shoal_scatter(c->send, c->recv, c->count, c->dtype, c->root, c->comm);
}

/* sendrecv_perf's pattern: each rank sends to the next and receives from
 * the previous, the pair in a group so that the ring cannot deadlock. A
 * send refused on its arguments is refused alike on every rank, so the
 * receive is then left out rather than left waiting for it. */
static shoal_status_t shoal_bench_call_sendrecv(const shoal_bench_call_t *c)
{
    shoal_status_t s = shoal_group_start();
    if (s != SHOAL_OK)
        return s;
    int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    if (c->stream)
        s = shoal_send_stream(c->send, c->count, c->dtype, next, c->comm, c->stream);
    else
        s = shoal_send(c->send, c->count, c->dtype, next, c->comm);
    if (s == SHOAL_OK && c->stream)
        s = shoal_recv_stream(c->recv, c->count, c->dtype, prev, c->comm, c->stream);
    else if (s == SHOAL_OK)
        s = shoal_recv(c->recv, c->count, c->dtype, prev, c->comm);
    shoal_status_t end = shoal_group_end();
    return s != SHOAL_OK ? s : end;
}

static void shoal_bench_expect_reduced(const shoal_bench_row_t *row, unsigned char *out,
                                       unsigned char *tmp);
static void shoal_bench_expect_reduce_scatter(const shoal_bench_row_t *row, unsigned char *out,
                                              unsigned char *tmp);
static void shoal_bench_expect_gathered(const shoal_bench_row_t *row, unsigned char *out,
                                        unsigned char *tmp);
static void shoal_bench_expect_broadcast(const shoal_bench_row_t *row, unsigned char *out,
                                         unsigned char *tmp);
static void shoal_bench_expect_alltoall(const shoal_bench_row_t *row, unsigned char *out,
                                        unsigned char *tmp);
static void shoal_bench_expect_scatter(const shoal_bench_row_t *row, unsigned char *out,
                                       unsigned char *tmp);
static void shoal_bench_expect_sendrecv(const shoal_bench_row_t *row, unsigned char *out,
                                        unsigned char *tmp);

/* In-place placements are nccl-tests': the input and the result share the
 * receive buffer, each at block `rank` where the call's contract puts it. */
const shoal_bench_coll_t shoal_bench_colls[] = {
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "allreduce",
        .perf = "all_reduce_perf",
        .call_name = "shoal_allreduce",
        .reduces = 1,
        .in_place_checked = 1,
        .bus = SHOAL_BENCH_BUS_ALLREDUCE,
        .call = shoal_bench_call_allreduce,
        .expect = shoal_bench_expect_reduced,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "reducescatter",
        .perf = "reduce_scatter_perf",
        .call_name = "shoal_reduce_scatter",
        .reduces = 1,
        .send_blocks = 1,
        .recv_at_rank = 1,
        .in_place_checked = 1,
        .bus = SHOAL_BENCH_BUS_SPREAD,
        .call = shoal_bench_call_reduce_scatter,
        .expect = shoal_bench_expect_reduce_scatter,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "allgather",
        .perf = "all_gather_perf",
        .call_name = "shoal_allgather",
        .recv_blocks = 1,
        .send_at_rank = 1,
        .in_place_checked = 1,
        .bus = SHOAL_BENCH_BUS_SPREAD,
        .call = shoal_bench_call_allgather,
        .expect = shoal_bench_expect_gathered,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "broadcast",
        .perf = "broadcast_perf",
        .call_name = "shoal_broadcast",
        .rooted = 1,
        .in_place_checked = 1,
        .bus = SHOAL_BENCH_BUS_ONE,
        .call = shoal_bench_call_broadcast,
        .expect = shoal_bench_expect_broadcast,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "reduce",
        .perf = "reduce_perf",
        .call_name = "shoal_reduce",
        .reduces = 1,
        .rooted = 1,
        .root_only = 1,
        .in_place_checked = 1,
        .bus = SHOAL_BENCH_BUS_ONE,
        .call = shoal_bench_call_reduce,
        .expect = shoal_bench_expect_reduced,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "alltoall",
        .perf = "alltoall_perf",
        .call_name = "shoal_alltoall",
        .send_blocks = 1,
        .recv_blocks = 1,
        .in_place_checked = 1, /* nccl-tests shows N/A; shoal defines it */
        .bus = SHOAL_BENCH_BUS_SPREAD,
        .call = shoal_bench_call_alltoall,
        .expect = shoal_bench_expect_alltoall,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "gather",
        .perf = "gather_perf",
        .call_name = "shoal_gather",
        .rooted = 1,
        .root_only = 1,
        .recv_blocks = 1,
        .send_at_rank = 1,
        .in_place_checked = 1,
        .bus = SHOAL_BENCH_BUS_SPREAD,
        .call = shoal_bench_call_gather,
        .expect = shoal_bench_expect_gathered,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "scatter",
        .perf = "scatter_perf",
        .call_name = "shoal_scatter",
        .rooted = 1,
        .send_blocks = 1,
        .recv_at_rank = 1,
        .in_place_checked = 1,
        .bus = SHOAL_BENCH_BUS_SPREAD,
        .call = shoal_bench_call_scatter,
        .expect = shoal_bench_expect_scatter,
    },
    {
        .size = sizeof(shoal_bench_coll_t),
        .name = "sendrecv",
        .perf = "sendrecv_perf",
        .call_name = "shoal_send/shoal_recv",
        .in_place_checked = 0, /* sending and receiving one buffer at once */
        .bus = SHOAL_BENCH_BUS_ONE,
        .call = shoal_bench_call_sendrecv,
        .expect = shoal_bench_expect_sendrecv,
    },
};

const size_t shoal_bench_ncolls = sizeof(shoal_bench_colls) / sizeof(shoal_bench_colls[0]);

double shoal_bench_bus_factor(shoal_bench_bus_t bus, int nranks)
{
    double share = (double)(nranks - 1) / (double)nranks;
    switch (bus) {
    case SHOAL_BENCH_BUS_ALLREDUCE: return 2.0 * share;
    case SHOAL_BENCH_BUS_SPREAD: return share;
    case SHOAL_BENCH_BUS_ONE: break;
    }
    return 1.0;
}

/* ---- Inputs and expected results ------------------------------------- */

/* Input of rank r at index i of a reduction of dtype and op. Every value,
 * and every partial result in any order of reduction, is an integer the
 * type represents exactly, so results compare bitwise. */
static double shoal_bench_value(shoal_dtype_t dtype, shoal_op_t op, int r, int n, size_t i)
{
    const shoal_bench_type_t *t = &shoal_bench_types[dtype];
    uint64_t idx = (uint64_t)i;
    switch (op) {
    case SHOAL_PROD: {
        /* Factors 1 and 2 (one -1 on some indices for signed types): the
         * product is +-2^k with k <= the type's limit. */
        int lim = n < t->prod_max_exp ? n : t->prod_max_exp;
        uint64_t twos = idx % (uint64_t)(lim + 1);
        double v = ((idx + (uint64_t)r) % (uint64_t)n) < twos ? 2 : 1;
        if (t->is_signed && idx % 3 == 0 && (uint64_t)r == idx % (uint64_t)n)
            v = -v;
        return v;
    }
    case SHOAL_MAX:
    case SHOAL_MIN: {
        uint64_t m = t->exact_max < 15 ? (uint64_t)t->exact_max : 15;
        double v = (double)((idx * 7 + (uint64_t)r * 3) % (m + 1));
        return t->is_signed ? v - (double)(m / 2) : v;
    }
    case SHOAL_SUM:
    case SHOAL_AVG:
    default: {
        /* n values of magnitude <= a sum to at most exact_max. */
        uint64_t a = (uint64_t)(t->exact_max / n);
        if (a == 0)
            return ((idx + (uint64_t)r) % (uint64_t)n) < (uint64_t)t->exact_max ? 1 : 0;
        double v = (double)((idx * 5 + (uint64_t)r * 3 + 1) % (a + 1));
        return t->is_signed ? v - (double)(a / 2) : v;
    }
    }
}

/* Input of rank r at index i of a collective that only moves data: any
 * integer the type holds exactly. The rank's factor 7 is prime to every
 * type's number of values (9 for f8e5m2 up to 2^40 + 1), so two ranks'
 * elements at one index differ for up to 9 ranks even in the narrowest
 * type: a block delivered from the wrong rank shows. */
static double shoal_bench_move_value(shoal_dtype_t dtype, int r, size_t i)
{
    const shoal_bench_type_t *t = &shoal_bench_types[dtype];
    uint64_t values = (uint64_t)t->exact_max + 1;
    double v = (double)(((uint64_t)i * 5 + (uint64_t)r * 7 + 1) % values);
    return t->is_signed ? v - (double)(values / 2) : v;
}

/* Elements first .. first+n-1 of rank r's send buffer into out. */
void shoal_bench_input(const shoal_bench_row_t *row, int r, size_t first, size_t n,
                       unsigned char *out)
{
    for (size_t k = 0; k < n; k++) {
        size_t i = row->base + first + k;
        double v = row->coll->reduces
                       ? shoal_bench_value(row->dtype, row->op, r, row->nranks, i)
                       : shoal_bench_move_value(row->dtype, r, i);
        shoal_dtype_set_f64(out, k, row->dtype, v);
    }
}

/* Elements first .. first+count-1 reduced over all ranks, folded rank by
 * rank with the scalar reference; exact inputs make the order irrelevant. */
static void shoal_bench_fold(const shoal_bench_row_t *row, size_t first, unsigned char *out,
                             unsigned char *tmp)
{
    shoal_op_t fold = row->op == SHOAL_AVG ? SHOAL_SUM : row->op;
    shoal_bench_input(row, 0, first, row->count, out);
    for (int r = 1; r < row->nranks; r++) {
        shoal_bench_input(row, r, first, row->count, tmp);
        shoal_reduce_ref(out, out, tmp, row->count, row->dtype, fold);
    }
    if (row->op == SHOAL_AVG)
        shoal_avg_finish_ref(out, out, row->count, row->dtype, row->nranks);
}

/* All-reduce, and reduce on its root. */
static void shoal_bench_expect_reduced(const shoal_bench_row_t *row, unsigned char *out,
                                       unsigned char *tmp)
{
    shoal_bench_fold(row, 0, out, tmp);
}

static void shoal_bench_expect_reduce_scatter(const shoal_bench_row_t *row, unsigned char *out,
                                              unsigned char *tmp)
{
    shoal_bench_fold(row, (size_t)row->rank * row->count, out, tmp);
}

/* All-gather, and gather on its root: block j from rank j. */
static void shoal_bench_expect_gathered(const shoal_bench_row_t *row, unsigned char *out,
                                        unsigned char *tmp)
{
    size_t block = row->count * row->esize;
    for (int j = 0; j < row->nranks; j++)
        shoal_bench_input(row, j, 0, row->count, out + (size_t)j * block);
}

static void shoal_bench_expect_broadcast(const shoal_bench_row_t *row, unsigned char *out,
                                         unsigned char *tmp)
{
    shoal_bench_input(row, row->root, 0, row->count, out);
}

/* Block j from block `rank` of rank j's send buffer. */
static void shoal_bench_expect_alltoall(const shoal_bench_row_t *row, unsigned char *out,
                                        unsigned char *tmp)
{
    size_t block = row->count * row->esize;
    for (int j = 0; j < row->nranks; j++)
        shoal_bench_input(row, j, (size_t)row->rank * row->count, row->count,
                          out + (size_t)j * block);
}

static void shoal_bench_expect_scatter(const shoal_bench_row_t *row, unsigned char *out,
                                       unsigned char *tmp)
{
    shoal_bench_input(row, row->root, (size_t)row->rank * row->count, row->count, out);
}

static void shoal_bench_expect_sendrecv(const shoal_bench_row_t *row, unsigned char *out,
                                        unsigned char *tmp)
{
    shoal_bench_input(row, (row->rank + row->nranks - 1) % row->nranks, 0, row->count, out);
}

void shoal_bench_row_init(shoal_bench_row_t *row, const shoal_bench_coll_t *coll, size_t bytes,
                          shoal_dtype_t dtype, shoal_op_t op, int root, int rank, int nranks)
{
    size_t n = (size_t)nranks;
    row->coll = coll;
    row->dtype = dtype;
    row->op = op;
    row->root = root;
    row->rank = rank;
    row->nranks = nranks;
    row->base = 0;
    row->esize = shoal_dtype_bytes(dtype);
    /* A size that is no multiple of the element, or of nranks blocks,
     * rounds down, as in nccl-tests. */
    size_t elems = bytes / row->esize;
    row->count = coll->send_blocks || coll->recv_blocks ? elems / n : elems;
    row->send_count = row->count * (coll->send_blocks ? n : 1);
    row->recv_count = row->count * (coll->recv_blocks ? n : 1);
    size_t larger = row->send_count > row->recv_count ? row->send_count : row->recv_count;
    row->total_bytes = larger * row->esize;
}

/* Byte offsets of the input and of the result inside the receive buffer
 * when the call runs in place. */
size_t shoal_bench_send_offset(const shoal_bench_row_t *row)
{
    return row->coll->send_at_rank ? (size_t)row->rank * row->count * row->esize : 0;
}

size_t shoal_bench_recv_offset(const shoal_bench_row_t *row)
{
    return row->coll->recv_at_rank ? (size_t)row->rank * row->count * row->esize : 0;
}

/* Bytes of the receive buffer a placement may change: out of place the
 * result, in place the whole shared buffer. */
size_t shoal_bench_span(const shoal_bench_row_t *row, int in_place)
{
    return in_place ? row->total_bytes : row->recv_count * row->esize;
}

/* The receive buffer as a checked call finds it: poison, so that a result
 * never written shows; in place, this rank's input where it belongs. */
void shoal_bench_prepare(const shoal_bench_row_t *row, int in_place, unsigned char *buf)
{
    memset(buf, SHOAL_BENCH_POISON_BYTE, shoal_bench_span(row, in_place));
    if (in_place)
        shoal_bench_input(row, row->rank, 0, row->send_count,
                          buf + shoal_bench_send_offset(row));
}

/* The whole span as it must be after the call: the prepared buffer with
 * the result written over it where this rank receives one. Whatever the
 * call must leave alone (a reduce's receive buffer off the root, the input
 * blocks around an in-place result) is compared too. */
void shoal_bench_expect_span(const shoal_bench_row_t *row, int in_place, unsigned char *out,
                             unsigned char *tmp)
{
    shoal_bench_prepare(row, in_place, out);
    if (row->coll->root_only && row->rank != row->root)
        return;
    row->coll->expect(row, out + (in_place ? shoal_bench_recv_offset(row) : 0), tmp);
}
