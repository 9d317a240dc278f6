/* allreduce_bench's collectives: how each is called (plainly, or in its
 * _stream form with --mem device), how a row lays out its buffers, and the
 * inputs every rank gives it and the result each rank must receive, worked
 * out on the host so that every element compares exactly. allreduce_bench.c
 * times and checks the rows with them. */
#ifndef SHOAL_BENCH_COLL_H
#define SHOAL_BENCH_COLL_H

#include "shoal.h"

#include <stddef.h>

/* What a checked call finds in its receive buffer, so that a result never
 * written shows. */
#define SHOAL_BENCH_POISON_BYTE 0xcd

/* What the checker needs to know of a type to keep every result exact:
 * the largest integer up to which all integers are representable, and the
 * largest power of two (as an exponent) a product may reach. */
typedef struct {
    const char *name; /* nccl-tests' name */
    double exact_max;
    int prod_max_exp;
    int is_signed;
} shoal_bench_type_t;

/* Indexed by dtype and by op; the names are nccl-tests'. */
extern const shoal_bench_type_t shoal_bench_types[SHOAL_DTYPE_COUNT];
extern const char *const shoal_bench_op_names[SHOAL_OP_COUNT];

/* The arguments of one call, wherever in the buffers it lands. */
typedef struct {
    const void *send;
    void *recv;
    size_t count; /* the count argument of the shoal call */
    shoal_dtype_t dtype;
    shoal_op_t op;
    int root;
    int rank;
    int nranks;
    shoal_comm_t comm;
    void *stream; /* --mem device: the rank's stream, for the _stream form; else NULL */
} shoal_bench_call_t;

/* How the bus bandwidth follows from the algorithm bandwidth, as nccl-tests'
 * doc/PERFORMANCE.md derives it: the share of the data that must cross the
 * busiest rank's link. */
typedef enum {
    SHOAL_BENCH_BUS_ALLREDUCE, /* 2(n-1)/n: every element reduced, then spread */
    SHOAL_BENCH_BUS_SPREAD,    /* (n-1)/n: each rank's block leaves it once */
    SHOAL_BENCH_BUS_ONE,       /* 1: everything passes one rank (root, or a pair) */
} shoal_bench_bus_t;

typedef struct shoal_bench_row shoal_bench_row_t;

/* One collective as the bench drives it. The sizes follow nccl-tests: a row
 * of S bytes has S / element-size elements; a collective whose buffers hold
 * one block per rank passes a count of elements / nranks, and its size
 * column shows the larger buffer (nranks blocks). */
typedef struct {
    size_t size; /* sizeof(shoal_bench_coll_t) */
    const char *name;      /* --coll; the same name SHOAL_ALGO uses */
    const char *perf;      /* the nccl-tests program with the same table */
    const char *call_name; /* for error messages */
    int reduces;           /* takes -o; otherwise the redop column reads "none" */
    int rooted;            /* takes -r */
    int root_only;         /* only the root receives a result */
    int send_blocks;       /* the send buffer holds nranks blocks of count */
    int recv_blocks;       /* the receive buffer holds nranks blocks of count */
    int send_at_rank;      /* in place, the input sits at block `rank` of the buffer */
    int recv_at_rank;      /* in place, the result lands at block `rank` of the buffer */
    int in_place_checked;  /* 0: in place has no defined result (N/A, as nccl-tests) */
    shoal_bench_bus_t bus;
    shoal_status_t (*call)(const shoal_bench_call_t *c);
    /* The result this rank must receive (recv_count elements) into out;
     * tmp holds count elements for folding. */
    void (*expect)(const shoal_bench_row_t *row, unsigned char *out, unsigned char *tmp);
} shoal_bench_coll_t;

/* One row of the table on one rank. */
struct shoal_bench_row {
    const shoal_bench_coll_t *coll;
    shoal_dtype_t dtype;
    shoal_op_t op;
    int root; /* -1 for collectives without a root, as nccl-tests prints */
    int rank;
    int nranks;
    size_t base;        /* index of the inputs' first element: each -m slice its own */
    size_t esize;
    size_t count;       /* the call's count argument (nccl-tests' paramcount) */
    size_t send_count;  /* elements of the send buffer */
    size_t recv_count;  /* elements of the receive buffer */
    size_t total_bytes; /* the larger buffer: the size column and what algbw counts */
};

/* Every collective --coll names; the first, the all-reduce, is the default. */
extern const shoal_bench_coll_t shoal_bench_colls[];
extern const size_t shoal_bench_ncolls;

/* busbw / algbw for bus on nranks ranks. */
double shoal_bench_bus_factor(shoal_bench_bus_t bus, int nranks);

/* Says on stderr that `what` failed on rank with s, and why (comm's last
 * error); returns s. */
shoal_status_t shoal_bench_fail(int rank, const char *what, shoal_status_t s, shoal_comm_t comm);

/* The row of coll for a size of bytes of dtype, with op and root (-1 for
 * collectives without one), on rank of nranks. */
void shoal_bench_row_init(shoal_bench_row_t *row, const shoal_bench_coll_t *coll, size_t bytes,
                          shoal_dtype_t dtype, shoal_op_t op, int root, int rank, int nranks);

/* Elements first .. first+n-1 of rank r's send buffer into out. */
void shoal_bench_input(const shoal_bench_row_t *row, int r, size_t first, size_t n,
                       unsigned char *out);

/* In place: the byte offsets of the input and of the result in the
 * receive buffer. */
size_t shoal_bench_send_offset(const shoal_bench_row_t *row);
size_t shoal_bench_recv_offset(const shoal_bench_row_t *row);

/* Bytes of the receive buffer that a placement may change. */
size_t shoal_bench_span(const shoal_bench_row_t *row, int in_place);

/* The receive buffer of a checked call, before it (prepare) and as it must
 * be after it (expect_span, which folds in tmp: count elements). */
void shoal_bench_prepare(const shoal_bench_row_t *row, int in_place, unsigned char *buf);
void shoal_bench_expect_span(const shoal_bench_row_t *row, int in_place, unsigned char *out,
                             unsigned char *tmp);

#endif
