/* allreduce_bench --compress: one row of compressed collectives timed and
 * checked the way the plain rows are, with what compression adds: the
 * bytes on the wire, the compression ratio and the relative error against
 * the exact result. --coll picks the collective: the all-reduce
 * (shoal_allreduce_compressed, or with --mem device
 * shoal_allreduce_compressed_stream), the all-gather, the reduce-scatter
 * or the all-to-all (shoal_allgather_compressed, ..._reduce_scatter_...,
 * ..._alltoall_..., host memory only). The flags are parsed in
 * bench_args.c, and the table and the JSON written by allreduce_bench.c and
 * bench_report.c. */
#ifndef SHOAL_BENCH_COMPRESS_H
#define SHOAL_BENCH_COMPRESS_H

#include "shoal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The compressor every row uses. */
typedef struct {
    int on;                      /* --compress given */
    shoal_compress_options_t opt; /* opt.coll: the collective of --coll */
    size_t shape_rows, shape_cols; /* --shape; 0: the squarest matrix of each count */
    int device;   /* --mem device: the stream-ordered calls on the rank's device buffers */
    int blocking; /* with device, -z: wait for the stream after each timed call (1) or
                   * once after the loop (0) */
} shoal_bench_comp_t;

/* The settings from the --coll name coll and the text of --compress
 * KIND[:SUFFIX] (powersgd:RANK), --compress-opts LIST and --shape RxC (each
 * NULL when absent). A kind the collective does not take, and an item of
 * the list that does not apply to the kind or the collective, are refused.
 * Returns 0, or -1 after saying on stderr what is wrong. */
int shoal_bench_comp_setup(shoal_bench_comp_t *c, const char *coll, const char *kind,
                           const char *opts, const char *shape);

/* --mem device, with -z given as blocking: the rows time
 * shoal_allreduce_compressed_stream on the rank's device buffers. Returns
 * 0, or -1 after saying on stderr why the settings cannot be (another
 * collective, or a kind without device kernels). */
int shoal_bench_comp_on_device(shoal_bench_comp_t *c, int blocking);

/* "int8", "int4", "sign", "majority", "ternary", "powersgd". */
const char *shoal_bench_comp_kind_name(shoal_compress_kind_t kind);

/* The compressed call the rows time ("shoal_allgather_compressed"...). */
const char *shoal_bench_comp_call_name(const shoal_bench_comp_t *c);

/* Whether the rows' results are the same on every rank (the all-reduce,
 * the all-gather), which the check then compares bitwise. */
int shoal_bench_comp_same_everywhere(const shoal_bench_comp_t *c);

/* The settings in words, for the header ("int8, block 64, nearest
 * rounding, algo auto, error feedback on, seed 0"; for a collective other
 * than the all-reduce then the call; with device, the memory and the
 * call). */
void shoal_bench_comp_describe(const shoal_bench_comp_t *c, char *out, size_t len);

/* For the header: what the relative error compares against ("the sum (or
 * average) of the inputs"...) and what the ratio's numerator is ("a
 * full-precision ring's bytes"...). Static strings. */
const char *shoal_bench_comp_exact_text(const shoal_bench_comp_t *c);
const char *shoal_bench_comp_plain_text(const shoal_bench_comp_t *c);

/* The settings as a JSON member ("compression": {...},) on a line of its own. */
void shoal_bench_comp_json(FILE *f, const shoal_bench_comp_t *c);

/* PowerSGD's matrix for a row of count values: --shape, or the squarest
 * rows x cols (rows <= cols) whose product is count. Returns -1 when
 * --shape does not hold count values. */
int shoal_bench_comp_layout(const shoal_bench_comp_t *c, size_t count, size_t *rows_p,
                            size_t *cols_p);

/* One row on one rank, laid out as the plain rows of the collective are
 * (bench_coll.h: nccl-tests' counts). recv has guard bytes after the
 * larger of send_count and recv_count elements (an in-place call's
 * buffer). With the settings' device, send and recv are the rank's device
 * buffers (shoal_bench_bufs_alloc's), whose host mirrors and stream the
 * row takes from there. */
typedef struct {
    shoal_comm_t comm;
    int rank;
    int nranks;
    size_t count;      /* the compressor's count: values per rank (per block) */
    size_t send_count; /* elements of the send buffer: count, or nranks blocks */
    size_t recv_count; /* elements of the receive buffer: count, or nranks blocks */
    shoal_dtype_t dtype;
    shoal_op_t op;     /* SHOAL_SUM for the all-gather and the all-to-all */
    int iters;
    int warmup;
    int check;
    unsigned char *send; /* send_count elements */
    unsigned char *recv; /* recv_count elements (in place: the larger count), then guard bytes */
    size_t guard;        /* bytes after recv's elements that must stay untouched */
} shoal_bench_comp_row_t;

/* What a row measured, the same on every rank: the slowest rank's time,
 * the largest error and wire bytes, the smallest ratio. The error of a
 * collective whose ranks receive different results (reduce-scatter,
 * all-to-all) is that of all their results together. */
typedef struct {
    double us[2];         /* out of place, in place: mean time of one call */
    double rel_error[2];  /* ||result - exact|| / ||exact||; < 0 without -c */
    long long wrong;      /* send-buffer elements changed, in-place input blocks changed,
                           * ranks whose result differs where all must agree */
    long long out_of_bounds; /* guard bytes changed */
    uint64_t bytes_sent;  /* per rank, in one call */
    uint64_t bytes_received;
    double ratio;         /* shoal_compress_info_t's ratio; 0 when nothing was sent */
    size_t rows, cols;    /* PowerSGD's matrix; 0 for the other kinds */
} shoal_bench_comp_result_t;

/* Create the row's compressor (for the settings' collective), time both
 * placements (warm-up, then iters calls), and with check run each once
 * more on fresh inputs to measure the error. With the settings' device
 * the inputs are written on the host and copied onto the device, the
 * calls queued on the rank's stream and timed up to its end, and the
 * results copied back to be checked. SHOAL_OK, or the status of the call
 * that failed (said on stderr). */
shoal_status_t shoal_bench_comp_row(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                                    shoal_bench_comp_result_t *res_p);

#endif
