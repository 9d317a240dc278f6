/* allreduce_bench's command line: nccl-tests' flags and the bench's own
 * (--coll, --mem, --waits, --cpu, --compress...), parsed into the run's
 * settings and checked against each other; the usage text; and the sizes
 * of the rows the settings ask for. */
#ifndef SHOAL_BENCH_ARGS_H
#define SHOAL_BENCH_ARGS_H

#include "bench_coll.h"
#include "bench_compress.h"
#include "bench_mem.h"

#include <stddef.h>
#include <stdio.h>

/* The run's settings: the command line's, and the memcpy baseline. */
typedef struct {
    size_t min_bytes;
    size_t max_bytes;
    size_t step_bytes;
    long step_factor;
    int iters;
    int agg_iters; /* -m: operations per group in a timed iteration */
    int warmup;
    int check;
    int blocking;
    int root; /* -r: a rank, or -1 for every rank in turn */
    const shoal_bench_coll_t *coll;
    int ndtypes;
    shoal_dtype_t dtypes[SHOAL_DTYPE_COUNT];
    int nops;
    shoal_op_t ops[SHOAL_OP_COUNT];
    int nprocs;        /* -np; 0 = ranks from the environment */
    double memcpy_gbs; /* measured baseline; < 0 when it could not be */
    const char *json_path; /* -J: rank 0 writes the results there as JSON */
    shoal_bench_mem_t mem; /* --mem: where the send and receive buffers come from */
    int waits;             /* --waits: each rank prints how long it waited for whom */
    int cpu;               /* --cpu: each rank prints the CPU time of an operation */
    /* --compress, --compress-opts and --shape as given, and what they set. */
    const char *comp_kind;
    const char *comp_opts;
    const char *comp_shape;
    shoal_bench_comp_t comp;
} shoal_bench_opts_t;

/* The flags and what each does, to out. */
void shoal_bench_usage(FILE *out, const char *prog);

/* The flags into o, which holds the defaults. Returns 0 to run, 1 after
 * -h, -1 after saying on stderr what is wrong. */
int shoal_bench_parse_args(int argc, char **argv, shoal_bench_opts_t *o);

/* The size of the row after one of size bytes; 0 after the last. */
size_t shoal_bench_next_size(const shoal_bench_opts_t *o, size_t size);

#endif
