/* allreduce_bench: bandwidth of shoal's collectives with the flags and the
 * table of nccl-tests, so figures can be set side by side. --coll picks the
 * collective (all-reduce by default, as all_reduce_perf); the sizes, the
 * columns and the bandwidth formulas are those of the matching nccl-tests
 * program (all_gather_perf for --coll allgather, and so on).
 *
 * Ranks come either from -np N (N processes forked on this machine, the id
 * made in the parent before forking) or from the launcher's environment
 * through shoal_comm_init_env (mpirun, srun, torchrun, SHOAL_RANK...).
 * Rank 0 prints; every rank checks its own results (-c 1) and the counts of
 * wrong elements and clobbered guard bytes are summed over ranks. With -J
 * rank 0 also writes the settings and the rows as JSON, for
 * tools/compare_mpi and tools/plot_bench. --compress times the compressed
 * all-reduce instead (bench_compress.c), with the wire bytes, the ratio and
 * the error against the exact sum in the table. --mem shared takes the send
 * and receive buffers from shoal_mem_alloc, whose blocks peers can map: the
 * single-copy ("put") collectives then write into them or read from them
 * directly. --mem device puts them in GPU memory and times the
 * stream-ordered forms of the calls (shoal_allreduce_stream...): see
 * shoal_bench_time for how such a loop is timed. */
#include "shoal.h"

#include "bench_compress.h"
#include "bench_text.h"

#include "algos/reduce.h"
#include "base/config.h"
#include "base/dev.h"
#include "base/dtype.h"
#include "core/introspect.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHOAL_BENCH_GUARD_BYTES 64
#define SHOAL_BENCH_GUARD_BYTE 0xa5
#define SHOAL_BENCH_POISON_BYTE 0xcd
#define SHOAL_BENCH_HOST_MAX 64
#define SHOAL_BENCH_MEMCPY_BYTES (64u << 20)
#define SHOAL_BENCH_MEMCPY_RUNS 7
#define SHOAL_BENCH_MAX_FORKS 1024
#define SHOAL_BENCH_MAX_AGG 1000000

/* Exit codes: every result right, some wrong, or the run failed. */
enum { SHOAL_BENCH_EXIT_OK = 0, SHOAL_BENCH_EXIT_WRONG = 1, SHOAL_BENCH_EXIT_ERROR = 2 };

/* What the checker needs to know of a type to keep every result exact:
 * the largest integer up to which all integers are representable, and the
 * largest power of two (as an exponent) a product may reach. */
typedef struct {
    const char *name; /* nccl-tests' name */
    double exact_max;
    int prod_max_exp;
    int is_signed;
} shoal_bench_type_t;

static const shoal_bench_type_t shoal_bench_types[SHOAL_DTYPE_COUNT] = {
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

static const char *const shoal_bench_op_names[SHOAL_OP_COUNT] = {
    [SHOAL_SUM] = "sum", [SHOAL_PROD] = "prod", [SHOAL_MAX] = "max",
    [SHOAL_MIN] = "min", [SHOAL_AVG] = "avg",
};

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

/* Where the buffers handed to shoal come from (--mem). */
typedef enum {
    SHOAL_BENCH_MEM_HOST,   /* malloc: every algorithm copies through staging */
    SHOAL_BENCH_MEM_SHARED, /* shoal_mem_alloc: peers may write into them */
    SHOAL_BENCH_MEM_DEVICE, /* GPU memory, driven through the _stream forms */
    SHOAL_BENCH_MEM_COUNT
} shoal_bench_mem_t;

static const char *const shoal_bench_mem_names[SHOAL_BENCH_MEM_COUNT] = {
    [SHOAL_BENCH_MEM_HOST] = "host",
    [SHOAL_BENCH_MEM_SHARED] = "shared",
    [SHOAL_BENCH_MEM_DEVICE] = "device",
};

/* What the header says each kind is. */
static const char *const shoal_bench_mem_sources[SHOAL_BENCH_MEM_COUNT] = {
    [SHOAL_BENCH_MEM_HOST] = "malloc",
    [SHOAL_BENCH_MEM_SHARED] = "shoal_mem_alloc",
    [SHOAL_BENCH_MEM_DEVICE] = "the device module's mem_alloc, one stream per rank",
};

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

/* Buffers of one rank, sized for the largest row. send and recv, which
 * shoal sees, come from the allocator of mem; expect and tmp, which only
 * the checker reads, from malloc. The host fills and checks hsend and
 * hrecv: send and recv themselves, but with --mem device, which the host
 * cannot read, mirrors from malloc that shoal_bench_to_dev and
 * shoal_bench_from_dev copy to and from the device buffers. */
typedef struct {
    shoal_bench_mem_t mem;
    unsigned char *send;
    unsigned char *recv; /* max_bytes + guard */
    unsigned char *hsend;
    unsigned char *hrecv;
    unsigned char *expect;
    unsigned char *tmp;
    const shoal_dev_ops_t *dev; /* --mem device: the module's table; NULL otherwise */
    void *stream;               /* --mem device: the stream every call of the rank uses */
    int device;                 /* --mem device: the device of the buffers; -1 otherwise */
} shoal_bench_bufs_t;

/* Totals of a run, summed over ranks on every rank; and on rank 0 with -J
 * the JSON file the rows go to. */
typedef struct {
    double busbw_sum;
    long busbw_count;
    long long wrong;
    long long out_of_bounds;
    FILE *json; /* NULL unless rank 0 with -J */
    long json_rows;
} shoal_bench_totals_t;

static double shoal_bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- The collectives ------------------------------------------------- */

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
static const shoal_bench_coll_t shoal_bench_colls[] = {
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

#define SHOAL_BENCH_NCOLLS (sizeof(shoal_bench_colls) / sizeof(shoal_bench_colls[0]))

static double shoal_bench_bus_factor(shoal_bench_bus_t bus, int nranks)
{
    double share = (double)(nranks - 1) / (double)nranks;
    switch (bus) {
    case SHOAL_BENCH_BUS_ALLREDUCE: return 2.0 * share;
    case SHOAL_BENCH_BUS_SPREAD: return share;
    case SHOAL_BENCH_BUS_ONE: break;
    }
    return 1.0;
}

/* ---- Command line ---------------------------------------------------- */

static void shoal_bench_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [options]\n"
            "  -np <n>                  fork n ranks on this machine (default: ranks from\n"
            "                           the launcher: mpirun, srun, torchrun, SHOAL_RANK...)\n"
            "  --coll <name>            collective (default allreduce): allreduce,\n"
            "                           reducescatter, allgather, broadcast, reduce,\n"
            "                           alltoall, gather, scatter, sendrecv\n"
            "  -b,--minbytes <size>     smallest size (default 32M); sizes take K, M, G\n"
            "  -e,--maxbytes <size>     largest size (default 32M)\n"
            "  -i,--stepbytes <size>    increment between sizes (default 1M)\n"
            "  -f,--stepfactor <n>      multiply sizes by n instead (default: disabled)\n"
            "  -n,--iters <n>           timed iterations (default 20)\n"
            "  -m,--agg_iters <n>       operations per group in each timed iteration; the\n"
            "                           time shown is per operation (default 1: no group)\n"
            "  -w,--warmup_iters <n>    untimed iterations before each measurement (default 1)\n"
            "  -c,--check <0/1>         check results on every rank (default 1)\n"
            "  -o,--op <sum/prod/min/max/avg/all>   reduction (default sum)\n"
            "  -d,--datatype <int8,uint8,int32,uint32,int64,uint64,half,float,double,\n"
            "                bfloat16,f8e4m3,f8e5m2,all>   element type (default float)\n"
            "  -r,--root <rank>         root of broadcast, reduce, gather, scatter\n"
            "                           (default 0; -1: every rank in turn)\n"
            "  -z,--blocking <0/1>      host and shared memory: accepted for compatibility\n"
            "                           (shoal calls complete before they return); device\n"
            "                           memory: 1 waits for the stream after each timed\n"
            "                           iteration, 0 once after the loop (default 1)\n"
            "  -J,--json <file>         rank 0 also writes the settings and results as\n"
            "                           JSON to <file>\n"
            "  --mem <host/shared/device>\n"
            "                           where the send and receive buffers come from:\n"
            "                           host: malloc (the default); shared:\n"
            "                           shoal_mem_alloc (from 256K per rank, the\n"
            "                           collectives but reduce and sendrecv write into or\n"
            "                           read from peers' buffers); device: GPU memory of\n"
            "                           device (local rank %% device count), driven through\n"
            "                           the calls' _stream forms on one stream per rank\n"
            "                           (needs the CUDA module; no --compress)\n"
            "  --waits <0/1>            each rank prints at the end how long its waits\n"
            "                           lasted, for each peer's data and for room in\n"
            "                           each peer's slots (default 0)\n"
            "  --cpu <0/1>              each rank prints at the end the CPU time (user and\n"
            "                           system, every thread) one operation of each timed\n"
            "                           row took, and per byte (default 0)\n"
            "  --compress <kind>        time the compressed all-reduce: int8, ternary,\n"
            "                           powersgd or powersgd:RANK (error feedback on);\n"
            "                           float, half or bfloat16, sum or avg, no -m. The\n"
            "                           table adds the wire bytes per rank, the ratio and\n"
            "                           ||result - exact|| / ||exact|| (with -c 1)\n"
            "  --compress-opts <list>   block=32|64|128, stochastic, nearest, ef, noef,\n"
            "                           clip=SIGMA, rank=N, warmup=N, seed=N,\n"
            "                           algo=auto|ring|two-shot|tree\n"
            "  --shape <RxC>            PowerSGD's matrix (default: the squarest one of\n"
            "                           each size; 64M of float is 4096x4096)\n"
            "  -h,--help                this text\n"
            "SHOAL_ALGO picks the algorithm (shoal_info -a lists them); the header shows it.\n",
            prog);
}

static int shoal_bench_parse_long(const char *flag, const char *text, long min, long *out_p)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min) {
        fprintf(stderr, "allreduce_bench: %s wants an integer >= %ld, not \"%s\"\n", flag, min,
                text);
        return -1;
    }
    *out_p = v;
    return 0;
}

static int shoal_bench_parse_bytes(const char *flag, const char *text, size_t *out_p)
{
    if (shoal_config_parse_size(text, out_p) != 0) {
        fprintf(stderr, "allreduce_bench: %s wants a size such as 8, 1K, 64M, not \"%s\"\n",
                flag, text);
        return -1;
    }
    return 0;
}

static int shoal_bench_parse_op(const char *text, shoal_bench_opts_t *o)
{
    if (!strcmp(text, "all")) {
        o->nops = 0;
        for (int op = 0; op < SHOAL_OP_COUNT; op++)
            o->ops[o->nops++] = (shoal_op_t)op;
        return 0;
    }
    for (int op = 0; op < SHOAL_OP_COUNT; op++) {
        if (!strcmp(text, shoal_bench_op_names[op])) {
            o->ops[0] = (shoal_op_t)op;
            o->nops = 1;
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown op \"%s\" (sum, prod, min, max, avg, all)\n",
            text);
    return -1;
}

static int shoal_bench_parse_dtype(const char *text, shoal_bench_opts_t *o)
{
    if (!strcmp(text, "all")) {
        o->ndtypes = 0;
        for (int t = 0; t < SHOAL_DTYPE_COUNT; t++)
            o->dtypes[o->ndtypes++] = (shoal_dtype_t)t;
        return 0;
    }
    for (int t = 0; t < SHOAL_DTYPE_COUNT; t++) {
        if (!strcmp(text, shoal_bench_types[t].name)) {
            o->dtypes[0] = (shoal_dtype_t)t;
            o->ndtypes = 1;
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown datatype \"%s\" (see -h)\n", text);
    return -1;
}

static int shoal_bench_parse_mem(const char *text, shoal_bench_opts_t *o)
{
    for (int m = 0; m < SHOAL_BENCH_MEM_COUNT; m++) {
        if (!strcmp(text, shoal_bench_mem_names[m])) {
            o->mem = (shoal_bench_mem_t)m;
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown --mem \"%s\" (host: malloc, shared: "
            "shoal_mem_alloc, device: GPU memory)\n", text);
    return -1;
}

static int shoal_bench_parse_coll(const char *text, shoal_bench_opts_t *o)
{
    for (size_t c = 0; c < SHOAL_BENCH_NCOLLS; c++) {
        if (!strcmp(text, shoal_bench_colls[c].name)) {
            o->coll = &shoal_bench_colls[c];
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown collective \"%s\" (", text);
    for (size_t c = 0; c < SHOAL_BENCH_NCOLLS; c++)
        fprintf(stderr, "%s%s", c ? ", " : "", shoal_bench_colls[c].name);
    fprintf(stderr, ")\n");
    return -1;
}

/* key names the flag inside the parser; has_short says whether "-<key>"
 * is accepted too. --coll has no short form: nccl-tests has one program per
 * collective, and the letters it uses (-C is report_cputime) stay free. */
typedef struct {
    char key;
    int has_short;
    const char *long_name;
} shoal_bench_flag_t;

static const shoal_bench_flag_t shoal_bench_flags[] = {
    {'b', 1, "minbytes"}, {'e', 1, "maxbytes"},  {'i', 1, "stepbytes"},
    {'f', 1, "stepfactor"}, {'n', 1, "iters"},   {'m', 1, "agg_iters"},
    {'w', 1, "warmup_iters"}, {'c', 1, "check"}, {'o', 1, "op"},
    {'d', 1, "datatype"}, {'r', 1, "root"},      {'z', 1, "blocking"},
    {'K', 0, "coll"},     {'J', 1, "json"},      {'h', 1, "help"},
    {'X', 0, "compress"}, {'Y', 0, "compress-opts"}, {'S', 0, "shape"},
    {'M', 0, "mem"},      {'W', 0, "waits"},   {'U', 0, "cpu"},
};

#define SHOAL_BENCH_NFLAGS (sizeof(shoal_bench_flags) / sizeof(shoal_bench_flags[0]))

/* Applies one flag with its value. */
static int shoal_bench_apply(char flag, const char *val, shoal_bench_opts_t *o)
{
    char name[3] = {'-', flag, '\0'};
    long v;
    switch (flag) {
    case 'b': return shoal_bench_parse_bytes(name, val, &o->min_bytes);
    case 'e': return shoal_bench_parse_bytes(name, val, &o->max_bytes);
    case 'i': return shoal_bench_parse_bytes(name, val, &o->step_bytes);
    case 'f': return shoal_bench_parse_long(name, val, 1, &o->step_factor);
    case 'n':
        if (shoal_bench_parse_long(name, val, 1, &v) || v > 1000000000)
            return -1;
        o->iters = (int)v;
        return 0;
    case 'm':
        if (shoal_bench_parse_long(name, val, 1, &v))
            return -1;
        if (v > SHOAL_BENCH_MAX_AGG) {
            fprintf(stderr, "allreduce_bench: -m %ld is more than %d\n", v,
                    SHOAL_BENCH_MAX_AGG);
            return -1;
        }
        o->agg_iters = (int)v;
        return 0;
    case 'w':
        if (shoal_bench_parse_long(name, val, 0, &v) || v > 1000000000)
            return -1;
        o->warmup = (int)v;
        return 0;
    case 'c':
        if (shoal_bench_parse_long(name, val, 0, &v))
            return -1;
        o->check = v != 0;
        return 0;
    case 'r':
        if (shoal_bench_parse_long(name, val, -1, &v) || v > INT_MAX)
            return -1;
        o->root = (int)v;
        return 0;
    case 'z':
        if (shoal_bench_parse_long(name, val, 0, &v))
            return -1;
        o->blocking = v != 0;
        return 0;
    case 'o': return shoal_bench_parse_op(val, o);
    case 'd': return shoal_bench_parse_dtype(val, o);
    case 'K': return shoal_bench_parse_coll(val, o);
    case 'J': o->json_path = val; return 0;
    case 'X': o->comp_kind = val; return 0;
    case 'Y': o->comp_opts = val; return 0;
    case 'S': o->comp_shape = val; return 0;
    case 'M': return shoal_bench_parse_mem(val, o);
    case 'W':
        if (shoal_bench_parse_long("--waits", val, 0, &v))
            return -1;
        o->waits = v != 0;
        return 0;
    case 'U':
        if (shoal_bench_parse_long("--cpu", val, 0, &v))
            return -1;
        o->cpu = v != 0;
        return 0;
    }
    return -1;
}

static size_t shoal_bench_next_size(const shoal_bench_opts_t *o, size_t size);

/* What --compress cannot time: another collective, a type or op that the
 * compressors do not take, groups (one call per compressor at a time), a
 * --shape that some row's count does not fill, device buffers (the
 * compressed rows read and write their buffers on the host). */
static int shoal_bench_comp_check(const shoal_bench_opts_t *o)
{
    if (o->mem == SHOAL_BENCH_MEM_DEVICE) {
        fprintf(stderr, "allreduce_bench: --compress times host buffers only, not --mem "
                "device: the compressed rows fill and check their buffers on the host\n");
        return -1;
    }
    if (o->coll != &shoal_bench_colls[0]) {
        fprintf(stderr, "allreduce_bench: --compress times the all-reduce only, not --coll %s\n",
                o->coll->name);
        return -1;
    }
    for (int t = 0; t < o->ndtypes; t++) {
        shoal_dtype_t d = o->dtypes[t];
        if (d != SHOAL_FLOAT32 && d != SHOAL_FLOAT16 && d != SHOAL_BFLOAT16) {
            fprintf(stderr, "allreduce_bench: --compress takes -d float, half or bfloat16, "
                    "not %s\n", shoal_bench_types[d].name);
            return -1;
        }
    }
    for (int p = 0; p < o->nops; p++) {
        if (o->ops[p] != SHOAL_SUM && o->ops[p] != SHOAL_AVG) {
            fprintf(stderr, "allreduce_bench: --compress takes -o sum or avg, not %s\n",
                    shoal_bench_op_names[o->ops[p]]);
            return -1;
        }
    }
    if (o->agg_iters != 1) {
        fprintf(stderr, "allreduce_bench: --compress takes no -m: a compressor runs one call "
                "at a time\n");
        return -1;
    }
    if (!o->comp.shape_rows)
        return 0;
    size_t size = o->min_bytes; /* every row, as shoal_bench_sizes goes through them */
    do {
        for (int t = 0; t < o->ndtypes; t++) {
            size_t count = size / shoal_dtype_bytes(o->dtypes[t]), rows, cols;
            if (shoal_bench_comp_layout(&o->comp, count, &rows, &cols) != 0) {
                fprintf(stderr, "allreduce_bench: --shape %zux%zu is not the %zu elements of "
                        "the %zu-byte row of %s\n", o->comp.shape_rows, o->comp.shape_cols,
                        count, size, shoal_bench_types[o->dtypes[t]].name);
                return -1;
            }
        }
        size = shoal_bench_next_size(o, size);
    } while (size != 0);
    return 0;
}

/* Flags as nccl-tests takes them: "-b 8", "-b8", "--minbytes 8",
 * "--minbytes=8"; and "-np 4", which getopt cannot express.
 * Returns 0 to run, 1 after -h, -1 on a bad command line. */
static int shoal_bench_parse_args(int argc, char **argv, shoal_bench_opts_t *o)
{
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        const char *val = NULL;
        char flag = 0;
        if (!strcmp(arg, "-np") || !strcmp(arg, "--np")) {
            long v;
            if (a + 1 >= argc || shoal_bench_parse_long("-np", argv[++a], 1, &v))
                return -1;
            if (v > SHOAL_BENCH_MAX_FORKS) {
                fprintf(stderr, "allreduce_bench: -np %ld is more than %d\n", v,
                        SHOAL_BENCH_MAX_FORKS);
                return -1;
            }
            o->nprocs = (int)v;
            continue;
        }
        if (arg[0] == '-' && arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            for (size_t f = 0; f < SHOAL_BENCH_NFLAGS; f++) {
                const char *ln = shoal_bench_flags[f].long_name;
                if (strlen(ln) == len && !strncmp(arg + 2, ln, len))
                    flag = shoal_bench_flags[f].key;
            }
            val = eq ? eq + 1 : NULL;
        } else if (arg[0] == '-' && arg[1]) {
            for (size_t f = 0; f < SHOAL_BENCH_NFLAGS; f++)
                if (shoal_bench_flags[f].has_short && shoal_bench_flags[f].key == arg[1])
                    flag = arg[1];
            val = arg[2] ? arg + 2 : NULL;
        }
        if (!flag) {
            fprintf(stderr, "allreduce_bench: unknown argument \"%s\"\n", arg);
            return -1;
        }
        if (flag == 'h')
            return 1;
        if (!val) {
            if (a + 1 >= argc) {
                fprintf(stderr, "allreduce_bench: %s needs a value\n", arg);
                return -1;
            }
            val = argv[++a];
        }
        if (shoal_bench_apply(flag, val, o))
            return -1;
    }
    /* With -np the ranks are known now; from a launcher, each rank checks
     * once it knows their number (shoal_bench_rank). */
    if (o->nprocs && o->coll->rooted && o->root >= o->nprocs) {
        fprintf(stderr, "allreduce_bench: -r %d is no rank of %d\n", o->root, o->nprocs);
        return -1;
    }
    if (o->max_bytes < o->min_bytes) {
        fprintf(stderr, "allreduce_bench: maxbytes %zu is below minbytes %zu\n", o->max_bytes,
                o->min_bytes);
        return -1;
    }
    if (o->step_factor <= 1 && o->step_bytes == 0) {
        fprintf(stderr, "allreduce_bench: stepbytes must be > 0 without a step factor\n");
        return -1;
    }
    if (shoal_bench_comp_setup(&o->comp, o->comp_kind, o->comp_opts, o->comp_shape) ||
        (o->comp.on && shoal_bench_comp_check(o)))
        return -1;
    return 0;
}

/* Next row's size; 0 after the last. Multiplying from 0 starts at 1. */
static size_t shoal_bench_next_size(const shoal_bench_opts_t *o, size_t size)
{
    size_t next;
    if (o->step_factor > 1) {
        if (size > SIZE_MAX / (size_t)o->step_factor)
            return 0;
        next = size ? size * (size_t)o->step_factor : 1;
    } else {
        if (size > SIZE_MAX - o->step_bytes)
            return 0;
        next = size + o->step_bytes;
    }
    return next <= o->max_bytes ? next : 0;
}

/* Single-thread memcpy of 64 MiB, median of several runs after one that
 * faults the pages in: the machine's baseline for busbw. */
static double shoal_bench_memcpy_gbs(void)
{
    size_t len = SHOAL_BENCH_MEMCPY_BYTES;
    char *src = malloc(len);
    char *dst = malloc(len);
    double runs[SHOAL_BENCH_MEMCPY_RUNS];
    double gbs = -1;
    if (!src || !dst)
        goto out_free;
    memset(src, 1, len);
    memset(dst, 2, len);
    memcpy(dst, src, len);
    for (int r = 0; r < SHOAL_BENCH_MEMCPY_RUNS; r++) {
        src[r] = (char)r; /* a different input each time, so no copy can be skipped */
        double t0 = shoal_bench_now_s();
        memcpy(dst, src, len);
        runs[r] = shoal_bench_now_s() - t0;
        if (dst[r] != (char)r)
            goto out_free;
    }
    for (int i = 1; i < SHOAL_BENCH_MEMCPY_RUNS; i++) /* insertion sort: seven values */
        for (int j = i; j > 0 && runs[j] < runs[j - 1]; j--) {
            double t = runs[j];
            runs[j] = runs[j - 1];
            runs[j - 1] = t;
        }
    double median = runs[SHOAL_BENCH_MEMCPY_RUNS / 2];
    if (median > 0)
        gbs = (double)len / median / 1e9;
out_free:
    free(src);
    free(dst);
    return gbs;
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
static void shoal_bench_input(const shoal_bench_row_t *row, int r, size_t first, size_t n,
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

static void shoal_bench_row_init(shoal_bench_row_t *row, const shoal_bench_coll_t *coll,
                                 size_t bytes, shoal_dtype_t dtype, shoal_op_t op, int root,
                                 int rank, int nranks)
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
static size_t shoal_bench_send_offset(const shoal_bench_row_t *row)
{
    return row->coll->send_at_rank ? (size_t)row->rank * row->count * row->esize : 0;
}

static size_t shoal_bench_recv_offset(const shoal_bench_row_t *row)
{
    return row->coll->recv_at_rank ? (size_t)row->rank * row->count * row->esize : 0;
}

/* Bytes of the receive buffer a placement may change: out of place the
 * result, in place the whole shared buffer. */
static size_t shoal_bench_span(const shoal_bench_row_t *row, int in_place)
{
    return in_place ? row->total_bytes : row->recv_count * row->esize;
}

/* The receive buffer as a checked call finds it: poison, so that a result
 * never written shows; in place, this rank's input where it belongs. */
static void shoal_bench_prepare(const shoal_bench_row_t *row, int in_place, unsigned char *buf)
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
static void shoal_bench_expect_span(const shoal_bench_row_t *row, int in_place,
                                    unsigned char *out, unsigned char *tmp)
{
    shoal_bench_prepare(row, in_place, out);
    if (row->coll->root_only && row->rank != row->root)
        return;
    row->coll->expect(row, out + (in_place ? shoal_bench_recv_offset(row) : 0), tmp);
}

static long long shoal_bench_count_wrong(const unsigned char *got, const unsigned char *expect,
                                         size_t count, size_t esize)
{
    long long wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += memcmp(got + i * esize, expect + i * esize, esize) != 0;
    return wrong;
}

static void shoal_bench_guard_set(unsigned char *recv, size_t used)
{
    memset(recv + used, SHOAL_BENCH_GUARD_BYTE, SHOAL_BENCH_GUARD_BYTES);
}

static long long shoal_bench_guard_check(const unsigned char *recv, size_t used)
{
    long long bad = 0;
    for (size_t i = 0; i < SHOAL_BENCH_GUARD_BYTES; i++)
        bad += recv[used + i] != SHOAL_BENCH_GUARD_BYTE;
    return bad;
}

/* ---- Timing and checking --------------------------------------------- */

static shoal_status_t shoal_bench_fail(int rank, const char *what, shoal_status_t s,
                                       shoal_comm_t comm)
{
    fprintf(stderr, "# rank %d: %s: %s (%s)\n", rank, what, shoal_status_string(s),
            shoal_comm_last_error(comm));
    return s;
}

/* --mem device: bytes [off, off + len) of a host mirror onto its device
 * buffer (to_dev) or back (from_dev), waiting for the copy. The copy goes
 * on the rank's stream, so it comes after the calls queued there. Nothing
 * to do for the other kinds, whose mirrors are the buffers. */
static shoal_status_t shoal_bench_dev_copy(shoal_bench_bufs_t *b, int rank, void *dst,
                                           const void *src, size_t len, const char *dir)
{
    if (!b->dev || len == 0)
        return SHOAL_OK;
    shoal_status_t s = b->dev->copy(dst, src, len, b->stream);
    if (s == SHOAL_OK)
        s = b->dev->stream_sync(b->stream);
    if (s != SHOAL_OK)
        fprintf(stderr, "# rank %d: copying %zu bytes %s the device: %s (%s)\n", rank, len, dir,
                shoal_status_string(s), b->dev->why());
    return s;
}

static shoal_status_t shoal_bench_to_dev(shoal_bench_bufs_t *b, int rank, int recv, size_t off,
                                         size_t len)
{
    unsigned char *dst = recv ? b->recv : b->send;
    const unsigned char *src = recv ? b->hrecv : b->hsend;
    return shoal_bench_dev_copy(b, rank, dst + off, src + off, len, "to");
}

static shoal_status_t shoal_bench_from_dev(shoal_bench_bufs_t *b, int rank, int recv, size_t off,
                                           size_t len)
{
    unsigned char *dst = recv ? b->hrecv : b->hsend;
    const unsigned char *src = recv ? b->recv : b->send;
    return shoal_bench_dev_copy(b, rank, dst + off, src + off, len, "from");
}

/* --mem device: wait until the stream has run the work the calls queued,
 * then take a failure of that work from the communicator (a stream-ordered
 * call reports it there, not in its return value). */
static shoal_status_t shoal_bench_sync(shoal_comm_t comm, int rank, shoal_bench_bufs_t *b,
                                       const char *what)
{
    if (!b->dev)
        return SHOAL_OK;
    shoal_status_t s = b->dev->stream_sync(b->stream);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# rank %d: %s: stream_sync: %s (%s)\n", rank, what,
                shoal_status_string(s), b->dev->why());
        return s;
    }
    shoal_status_t err = SHOAL_OK;
    s = shoal_comm_get_async_error(comm, &err);
    if (s == SHOAL_OK)
        s = err;
    return s == SHOAL_OK ? s : shoal_bench_fail(rank, what, s, comm);
}

static shoal_status_t shoal_bench_barrier(shoal_comm_t comm, int rank)
{
    int32_t one = 1;
    shoal_status_t s = shoal_allreduce(&one, &one, 1, SHOAL_INT32, SHOAL_SUM, comm);
    return s == SHOAL_OK ? s : shoal_bench_fail(rank, "barrier", s, comm);
}

/* Slices of the buffers that the -m operations of one group take in turn:
 * as in nccl-tests' agg_iters, each operation gets its own place when the
 * buffers (sized for the largest row) hold them, the way a framework fuses
 * distinct tensors, and they wrap around when not. */
static size_t shoal_bench_slices(const shoal_bench_opts_t *o, const shoal_bench_row_t *row)
{
    size_t fit = row->total_bytes ? o->max_bytes / row->total_bytes : 1;
    size_t agg = (size_t)o->agg_iters;
    return fit < 1 ? 1 : fit < agg ? fit : agg;
}

/* One call at slice `slice` of the buffers, placed as nccl-tests does. */
static shoal_status_t shoal_bench_call(shoal_comm_t comm, const shoal_bench_row_t *row,
                                       shoal_bench_bufs_t *b, int in_place, size_t slice)
{
    size_t shift = slice * row->total_bytes;
    shoal_bench_call_t c = {
        .send = in_place ? b->recv + shift + shoal_bench_send_offset(row) : b->send + shift,
        .recv = b->recv + shift + (in_place ? shoal_bench_recv_offset(row) : 0),
        .count = row->count,
        .dtype = row->dtype,
        .op = row->op,
        .root = row->root,
        .rank = row->rank,
        .nranks = row->nranks,
        .comm = comm,
        .stream = b->stream,
    };
    return row->coll->call(&c);
}

/* A single call, or with -m the nops calls of one group (shoal fuses a
 * group's all-reduces of one dtype and op), call a at slice a % slices. A
 * call refused inside the group stops the recording; the group still
 * ends, so this thread is not left inside it. */
static shoal_status_t shoal_bench_ops(shoal_comm_t comm, const shoal_bench_opts_t *o,
                                      const shoal_bench_row_t *row, shoal_bench_bufs_t *b,
                                      int in_place, size_t nops, size_t slices)
{
    if (o->agg_iters == 1)
        return shoal_bench_call(comm, row, b, in_place, 0);
    shoal_status_t s = shoal_group_start();
    if (s != SHOAL_OK)
        return s;
    for (size_t a = 0; a < nops && s == SHOAL_OK; a++)
        s = shoal_bench_call(comm, row, b, in_place, a % slices);
    shoal_status_t end = shoal_group_end();
    return s != SHOAL_OK ? s : end;
}

/* --cpu: this process's CPU time over each timed loop, kept for the end. */
#define SHOAL_BENCH_CPU_ROWS 256
static struct {
    size_t bytes;
    int in_place;
    double us; /* CPU microseconds of one operation */
} shoal_bench_cpu_log[SHOAL_BENCH_CPU_ROWS];
static int shoal_bench_cpu_rows;

static double shoal_bench_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* Warm-up, then the mean time of one operation over the timed iterations,
 * in microseconds on this rank.
 *
 * With --mem device a call only queues its work on the rank's stream and
 * returns, so the clock would see the queueing alone; the loop therefore
 * waits for the stream before the clock is read: after each iteration
 * with -z 1 (the default), once after the last with -z 0. NCCL's tests
 * time the same span with CUDA events recorded on the stream around the
 * loop; here the host clock is read after the wait, which adds the wait's
 * return to the span. */
static shoal_status_t shoal_bench_time(shoal_comm_t comm, const shoal_bench_opts_t *o,
                                       const shoal_bench_row_t *row, shoal_bench_bufs_t *b,
                                       int in_place, size_t slices, double *us_p)
{
    char what[96];
    shoal_status_t s;
    snprintf(what, sizeof(what), "%s (warm-up)", row->coll->call_name);
    for (int w = 0; w < o->warmup; w++) {
        s = shoal_bench_ops(comm, o, row, b, in_place, (size_t)o->agg_iters, slices);
        if (s != SHOAL_OK)
            return shoal_bench_fail(row->rank, what, s, comm);
    }
    s = shoal_bench_sync(comm, row->rank, b, what);
    if (s != SHOAL_OK)
        return s;
    s = shoal_bench_barrier(comm, row->rank);
    if (s != SHOAL_OK)
        return s;
    double t0 = shoal_bench_now_s(), c0 = o->cpu ? shoal_bench_cpu_s() : 0;
    for (int it = 0; it < o->iters; it++) {
        s = shoal_bench_ops(comm, o, row, b, in_place, (size_t)o->agg_iters, slices);
        if (s != SHOAL_OK)
            return shoal_bench_fail(row->rank, row->coll->call_name, s, comm);
        if (o->blocking) {
            s = shoal_bench_sync(comm, row->rank, b, row->coll->call_name);
            if (s != SHOAL_OK)
                return s;
        }
    }
    if (!o->blocking) {
        s = shoal_bench_sync(comm, row->rank, b, row->coll->call_name);
        if (s != SHOAL_OK)
            return s;
    }
    double nops = (double)o->iters * (double)o->agg_iters;
    *us_p = (shoal_bench_now_s() - t0) * 1e6 / nops;
    if (o->cpu && shoal_bench_cpu_rows < SHOAL_BENCH_CPU_ROWS) {
        shoal_bench_cpu_log[shoal_bench_cpu_rows].bytes = row->total_bytes;
        shoal_bench_cpu_log[shoal_bench_cpu_rows].in_place = in_place;
        shoal_bench_cpu_log[shoal_bench_cpu_rows++].us = (shoal_bench_cpu_s() - c0) * 1e6 / nops;
    }
    return SHOAL_OK;
}

/* Whether a placement's results are checked (else #wrong reads N/A). */
static int shoal_bench_checked(const shoal_bench_opts_t *o, const shoal_bench_row_t *row,
                               int in_place)
{
    return o->check && (!in_place || row->coll->in_place_checked);
}

/* One placement (out-of-place or in-place) of one row on this rank: time
 * it, then with -c run it once more on fresh input and count wrong
 * elements. With -m the check is one group over every slice the timed
 * groups used, each slice with inputs of its own, so that results swapped
 * or lost between the operations of a group show. Guard bytes after the
 * last slice are checked after the timed calls and after the check. With
 * --mem device the inputs, the poison and the guards are written into the
 * host mirrors and copied onto the device before the calls, and the
 * results, the guards and the send buffer copied back before they are
 * looked at. */
static shoal_status_t shoal_bench_placement(shoal_comm_t comm, const shoal_bench_opts_t *o,
                                            const shoal_bench_row_t *row,
                                            shoal_bench_bufs_t *b, int in_place, double *us_p,
                                            long long *wrong_p, long long *oob_p)
{
    size_t slices = shoal_bench_slices(o, row);
    size_t end = (slices - 1) * row->total_bytes + shoal_bench_span(row, in_place);
    size_t send_end = (slices - 1) * row->total_bytes + row->send_count * row->esize;
    int rank = row->rank;
    shoal_bench_prepare(row, in_place, b->hrecv);
    shoal_bench_guard_set(b->hrecv, end);
    shoal_status_t s = shoal_bench_to_dev(b, rank, 1, 0, end + SHOAL_BENCH_GUARD_BYTES);
    if (s == SHOAL_OK)
        s = shoal_bench_time(comm, o, row, b, in_place, slices, us_p);
    if (s == SHOAL_OK)
        s = shoal_bench_from_dev(b, rank, 1, end, SHOAL_BENCH_GUARD_BYTES);
    if (s != SHOAL_OK)
        return s;
    *oob_p += shoal_bench_guard_check(b->hrecv, end);
    if (!shoal_bench_checked(o, row, in_place))
        return SHOAL_OK;

    /* The timed calls left results (or, in place, results of results) in
     * recv: start again from the inputs and poison, so a call that does
     * nothing cannot pass; the poison between out-of-place slices must
     * survive too. */
    memset(b->hrecv, SHOAL_BENCH_POISON_BYTE, end);
    memset(b->expect, SHOAL_BENCH_POISON_BYTE, end);
    for (size_t k = 0; k < slices; k++) {
        shoal_bench_row_t at = *row;
        size_t off = k * row->total_bytes;
        at.base = k * row->send_count;
        if (!in_place)
            shoal_bench_input(&at, at.rank, 0, at.send_count, b->hsend + off);
        shoal_bench_prepare(&at, in_place, b->hrecv + off);
        shoal_bench_expect_span(&at, in_place, b->expect + off, b->tmp);
    }
    shoal_bench_guard_set(b->hrecv, end);
    s = shoal_bench_to_dev(b, rank, 1, 0, end + SHOAL_BENCH_GUARD_BYTES);
    if (s == SHOAL_OK && !in_place)
        s = shoal_bench_to_dev(b, rank, 0, 0, send_end);
    if (s != SHOAL_OK)
        return s;
    char what[96];
    snprintf(what, sizeof(what), "%s (check)", row->coll->call_name);
    s = shoal_bench_ops(comm, o, row, b, in_place, slices, slices);
    if (s != SHOAL_OK)
        return shoal_bench_fail(rank, what, s, comm);
    s = shoal_bench_sync(comm, rank, b, what);
    if (s == SHOAL_OK)
        s = shoal_bench_from_dev(b, rank, 1, 0, end + SHOAL_BENCH_GUARD_BYTES);
    if (s != SHOAL_OK)
        return s;
    *wrong_p += shoal_bench_count_wrong(b->hrecv, b->expect, end / row->esize, row->esize);
    *oob_p += shoal_bench_guard_check(b->hrecv, end);
    if (in_place)
        return SHOAL_OK;
    /* The send buffer is the caller's and read-only to shoal: an element
     * changed there is as wrong as one in the result. */
    s = shoal_bench_from_dev(b, rank, 0, 0, send_end);
    if (s != SHOAL_OK)
        return s;
    for (size_t k = 0; k < slices; k++) {
        shoal_bench_row_t at = *row;
        at.base = k * row->send_count;
        shoal_bench_input(&at, at.rank, 0, at.send_count, b->tmp);
        *wrong_p += shoal_bench_count_wrong(b->hsend + k * row->total_bytes, b->tmp,
                                            at.send_count, at.esize);
    }
    return SHOAL_OK;
}

/* A row of --compress: both placements, then the wire bytes per rank and
 * the ratio of the check's call (of the last timed one with -c 0). The
 * relative error replaces #wrong; elements of the send buffer changed,
 * ranks whose results differ and clobbered guard bytes still count as
 * wrong and out of bounds. */
static shoal_status_t shoal_bench_comp_print(shoal_comm_t comm, const shoal_bench_opts_t *o,
                                             const shoal_bench_row_t *row,
                                             shoal_bench_bufs_t *b, shoal_bench_totals_t *tot)
{
    shoal_bench_comp_row_t cr = {
        .comm = comm,
        .rank = row->rank,
        .nranks = row->nranks,
        .count = row->count,
        .dtype = row->dtype,
        .op = row->op,
        .iters = o->iters,
        .warmup = o->warmup,
        .check = o->check,
        .send = b->send,
        .recv = b->recv,
        .guard = SHOAL_BENCH_GUARD_BYTES,
    };
    shoal_bench_comp_result_t r;
    shoal_status_t s = shoal_bench_comp_row(&o->comp, &cr, &r);
    if (s != SHOAL_OK)
        return s;
    tot->wrong += r.wrong;
    tot->out_of_bounds += r.out_of_bounds;
    size_t shown = row->total_bytes;
    double factor = shoal_bench_bus_factor(row->coll->bus, row->nranks);
    const char *redop = shoal_bench_op_names[row->op];
    const char *type = shoal_bench_types[row->dtype].name;
    int psgd = o->comp.opt.kind == SHOAL_COMPRESS_POWERSGD;
    if (row->rank == 0) {
        if (psgd)
            printf("# %zu bytes: powersgd matrix %zux%zu\n", shown, r.rows, r.cols);
        printf("%12zu  %12zu  %8s  %6s  %6d", shown, row->count, type, redop, row->root);
    }
    if (tot->json) {
        fprintf(tot->json, "%s\n    {\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", "
                "\"op\": \"%s\", \"root\": %d", tot->json_rows++ ? "," : "", shown,
                row->count, type, redop, row->root);
        if (psgd)
            fprintf(tot->json, ", \"shape\": \"%zux%zu\"", r.rows, r.cols);
    }
    for (int p = 0; p < 2; p++) {
        double algbw = r.us[p] > 0 ? (double)shown / r.us[p] / 1e3 : 0.0;
        double busbw = algbw * factor;
        tot->busbw_sum += busbw;
        tot->busbw_count++;
        if (row->rank != 0)
            continue;
        char tbuf[32], ebuf[32];
        bench_fmt_time(r.us[p], tbuf);
        if (r.rel_error[p] >= 0)
            snprintf(ebuf, sizeof(ebuf), "%.2e", r.rel_error[p]);
        else
            snprintf(ebuf, sizeof(ebuf), "N/A");
        printf("  %7s  %6.2f  %6.2f  %8s", tbuf, algbw, busbw, ebuf);
        if (tot->json) {
            fprintf(tot->json, ",\n     \"%s\": {\"time_us\": %.6g, \"algbw\": %.6g, "
                    "\"busbw\": %.6g, \"rel_error\": ", p ? "in_place" : "out_of_place",
                    r.us[p], algbw, busbw);
            if (r.rel_error[p] >= 0 && r.rel_error[p] <= 1e300)
                fprintf(tot->json, "%.6g}", r.rel_error[p]);
            else
                fprintf(tot->json, "%s}", r.rel_error[p] >= 0 ? "\"inf\"" : "null");
        }
    }
    if (row->rank == 0) {
        char rbuf[32];
        if (r.ratio > 0)
            snprintf(rbuf, sizeof(rbuf), "%.2f", r.ratio);
        else
            snprintf(rbuf, sizeof(rbuf), "N/A");
        printf("  %12llu  %6s\n", (unsigned long long)r.bytes_sent, rbuf);
        fflush(stdout);
    }
    if (tot->json) {
        fprintf(tot->json, ",\n     \"bytes_sent\": %llu, \"bytes_received\": %llu, "
                "\"ratio\": ", (unsigned long long)r.bytes_sent,
                (unsigned long long)r.bytes_received);
        if (r.ratio > 0)
            fprintf(tot->json, "%.6g", r.ratio);
        else
            fprintf(tot->json, "null");
        fprintf(tot->json, ", \"wrong\": %lld}", r.wrong + r.out_of_bounds);
    }
    return SHOAL_OK;
}

/* One line of the table: both placements of one size, type, op and root. */
static shoal_status_t shoal_bench_row(shoal_comm_t comm, const shoal_bench_opts_t *o,
                                      const shoal_bench_row_t *row, shoal_bench_bufs_t *b,
                                      shoal_bench_totals_t *tot)
{
    if (o->comp.on)
        return shoal_bench_comp_print(comm, o, row, b, tot);
    shoal_bench_input(row, row->rank, 0, row->send_count, b->hsend);
    shoal_status_t s = shoal_bench_to_dev(b, row->rank, 0, 0, row->send_count * row->esize);
    if (s != SHOAL_OK)
        return s;

    double us[2] = {0, 0};
    long long counts[3] = {0, 0, 0}; /* wrong out-of-place, wrong in-place, out of bounds */
    for (int in_place = 0; in_place < 2; in_place++) {
        s = shoal_bench_placement(comm, o, row, b, in_place, &us[in_place], &counts[in_place],
                                  &counts[2]);
        if (s != SHOAL_OK)
            return s;
    }
    /* Like nccl-tests: a collective lasts as long as its slowest rank. */
    s = shoal_allreduce(us, us, 2, SHOAL_FLOAT64, SHOAL_MAX, comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(counts, counts, 3, SHOAL_INT64, SHOAL_SUM, comm);
    if (s != SHOAL_OK)
        return shoal_bench_fail(row->rank, "shoal_allreduce (results)", s, comm);

    tot->wrong += counts[0] + counts[1];
    tot->out_of_bounds += counts[2];
    /* nccl-tests' getBw formulas all count the larger buffer: the count
     * times nranks for the collectives of blocks, the count otherwise. */
    size_t shown = row->total_bytes;
    double factor = shoal_bench_bus_factor(row->coll->bus, row->nranks);
    const char *redop = row->coll->reduces ? shoal_bench_op_names[row->op] : "none";
    if (row->rank == 0)
        printf("%12zu  %12zu  %8s  %6s  %6d", shown, row->count,
               shoal_bench_types[row->dtype].name, redop, row->root);
    if (tot->json) /* the table's figures unrounded, null where it reads N/A */
        fprintf(tot->json, "%s\n    {\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", "
                "\"op\": \"%s\", \"root\": %d", tot->json_rows++ ? "," : "", shown,
                row->count, shoal_bench_types[row->dtype].name, redop, row->root);
    for (int p = 0; p < 2; p++) {
        double algbw = us[p] > 0 ? (double)shown / us[p] / 1e3 : 0.0;
        double busbw = algbw * factor;
        tot->busbw_sum += busbw;
        tot->busbw_count++;
        if (row->rank != 0)
            continue;
        char tbuf[32], wbuf[32];
        bench_fmt_time(us[p], tbuf);
        int checked = shoal_bench_checked(o, row, p);
        if (checked)
            snprintf(wbuf, sizeof(wbuf), "%lld", counts[p]);
        else
            snprintf(wbuf, sizeof(wbuf), "N/A");
        printf("  %7s  %6.2f  %6.2f  %6s", tbuf, algbw, busbw, wbuf);
        if (tot->json)
            fprintf(tot->json, ",\n     \"%s\": {\"time_us\": %.6g, \"algbw\": %.6g, "
                    "\"busbw\": %.6g, \"wrong\": %s}", p ? "in_place" : "out_of_place",
                    us[p], algbw, busbw, checked ? wbuf : "null");
    }
    if (tot->json)
        fprintf(tot->json, "}");
    if (row->rank == 0) {
        printf("\n");
        fflush(stdout);
    }
    return SHOAL_OK;
}

/* Pid, host and device (-1 for host memory) of every rank, gathered with
 * a sum over zeroed slots. */
typedef struct {
    int64_t pid;
    int64_t device;
    char host[SHOAL_BENCH_HOST_MAX];
} shoal_bench_rank_info_t;

static shoal_status_t shoal_bench_header(shoal_comm_t comm, int rank, int nranks,
                                         const shoal_bench_opts_t *o, int device)
{
    shoal_bench_rank_info_t *info = calloc((size_t)nranks, sizeof(*info));
    if (!info) {
        fprintf(stderr, "# rank %d: out of memory\n", rank);
        return SHOAL_ERR_NO_MEMORY;
    }
    info[rank].pid = (int64_t)getpid();
    info[rank].device = device;
    if (gethostname(info[rank].host, sizeof(info[rank].host) - 1) != 0)
        snprintf(info[rank].host, sizeof(info[rank].host), "?");
    shoal_status_t s = shoal_allreduce(info, info, (size_t)nranks * sizeof(*info), SHOAL_UINT8,
                                       SHOAL_SUM, comm);
    if (s != SHOAL_OK) {
        free(info);
        return shoal_bench_fail(rank, "shoal_allreduce (rank info)", s, comm);
    }
    if (rank == 0) {
        printf("# allreduce_bench (shoal %d.%d.%d), flags and table of nccl-tests' %s\n",
               SHOAL_VERSION_MAJOR, SHOAL_VERSION_MINOR, SHOAL_VERSION_PATCH, o->coll->perf);
        printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
               "iters: %d agg iters: %d validation: %d blocking: %d\n",
               nranks, o->min_bytes, o->max_bytes,
               o->step_factor > 1 ? (size_t)o->step_factor : o->step_bytes,
               o->step_factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg_iters,
               o->check, o->blocking);
        const char *from = o->nprocs ? "-np (forked on this host)" : "the launcher's environment";
        if (o->mem != SHOAL_BENCH_MEM_DEVICE)
            printf("# Ranks from: %s; shoal calls complete before they return, whatever -z\n",
                   from);
        else
            printf("# Ranks from: %s; stream-ordered calls, timed up to the stream's end %s\n",
                   from, o->blocking ? "after each iteration (-z 1)" : "after the loop (-z 0)");
        /* The choice itself is made per call inside shoal; what the bench
         * can show is the setting that steers it. */
        printf("# Collective: %s  SHOAL_ALGO: %s\n", o->coll->name,
               shoal_config_get()->algo.algo);
        printf("# Memory: %s (send and receive buffers from %s)\n",
               shoal_bench_mem_names[o->mem], shoal_bench_mem_sources[o->mem]);
        if (o->comp.on) {
            char desc[256];
            shoal_bench_comp_describe(&o->comp, desc, sizeof(desc));
            printf("# Compression: %s\n# inputs: values spread over [-1, 1); relerr = "
                   "||result - exact|| / ||exact|| of one call from a reset compressor; "
                   "sent: bytes per rank and call; ratio: a full-precision ring's bytes over "
                   "them\n", desc);
        }
        printf("#\n# Using ranks\n");
        for (int r = 0; r < nranks; r++) {
            printf("#  Rank %2d Pid %6lld on %10s %s memory", r, (long long)info[r].pid,
                   info[r].host, shoal_bench_mem_names[o->mem]);
            if (info[r].device >= 0)
                printf(" of device %lld", (long long)info[r].device);
            printf("\n");
        }
        printf("#\n");
        if (o->memcpy_gbs > 0)
            printf("# memcpy bandwidth (1 thread, 64 MiB): %.2f GB/s\n", o->memcpy_gbs);
        else
            printf("# memcpy bandwidth (1 thread, 64 MiB): unavailable\n");
        printf("#\n");
        /* Centred over their four columns: the row's first five columns
         * take 52 characters, each placement 33. */
        if (o->comp.on) {
            printf("#%62s%s%25s%s\n", "", "out-of-place", "", "in-place");
            printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %8s  %7s  %6s  %6s  %8s  "
                   "%12s  %6s\n", "size", "count", "type", "redop", "root", "time", "algbw",
                   "busbw", "relerr", "time", "algbw", "busbw", "relerr", "sent", "ratio");
            printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %8s  %7s  %6s  %6s  %8s  "
                   "%12s  %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)",
                   "", "(us)", "(GB/s)", "(GB/s)", "", "(B/rank)", "");
            fflush(stdout);
            free(info);
            return SHOAL_OK;
        }
        printf("#%61s%s%23s%s\n", "", "out-of-place", "", "in-place");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "");
        fflush(stdout);
    }
    free(info);
    return SHOAL_OK;
}

/* -J on rank 0: the settings the header shows, then the results array
 * left open for the rows. NULL, said why, when the file cannot be made. */
static FILE *shoal_bench_json_open(const shoal_bench_opts_t *o, int nranks)
{
    FILE *f = fopen(o->json_path, "w");
    if (!f) {
        fprintf(stderr, "allreduce_bench: cannot write %s: %s\n", o->json_path,
                strerror(errno));
        return NULL;
    }
    char host[SHOAL_BENCH_HOST_MAX] = "?", date[32] = "?", dtypes[256] = "", ops[64] = "";
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "?");
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    for (int t = 0; t < o->ndtypes; t++)
        snprintf(dtypes + strlen(dtypes), sizeof(dtypes) - strlen(dtypes), "%s%s",
                 t ? "," : "", shoal_bench_types[o->dtypes[t]].name);
    for (int p = 0; p < (o->coll->reduces ? o->nops : 0); p++)
        snprintf(ops + strlen(ops), sizeof(ops) - strlen(ops), "%s%s", p ? "," : "",
                 shoal_bench_op_names[o->ops[p]]);
    fprintf(f, "{\n  \"tool\": \"allreduce_bench\",\n  \"library\": \"shoal %d.%d.%d\",\n",
            SHOAL_VERSION_MAJOR, SHOAL_VERSION_MINOR, SHOAL_VERSION_PATCH);
    bench_json_str(f, "collective", o->coll->name);
    fprintf(f, "  \"ranks\": %d,\n", nranks);
    bench_json_str(f, "dtype", dtypes);
    bench_json_str(f, "op", o->coll->reduces ? ops : "none");
    bench_json_str(f, "algorithm", shoal_config_get()->algo.algo);
    bench_json_str(f, "memory", shoal_bench_mem_names[o->mem]);
    if (o->comp.on)
        shoal_bench_comp_json(f, &o->comp);
    fprintf(f, "  \"iterations\": %d,\n  \"warmup\": %d,\n  \"agg_iters\": %d,\n"
            "  \"check\": %d,\n", o->iters, o->warmup, o->agg_iters, o->check);
    if (o->memcpy_gbs > 0)
        fprintf(f, "  \"memcpy_gbs\": %.6g,\n", o->memcpy_gbs);
    else
        fprintf(f, "  \"memcpy_gbs\": null,\n");
    bench_json_str(f, "host", host);
    bench_json_str(f, "date", date);
    fprintf(f, "  \"results\": [");
    return f;
}

/* Closes the results and the document, with the run's outcome (a failed
 * run keeps the rows it had); returns code, or an error if writing failed. */
static int shoal_bench_json_close(FILE *f, const char *path, int code)
{
    static const char *const outcome[] = {"ok", "wrong", "error"};
    fprintf(f, "\n  ],\n  \"status\": \"%s\"\n}\n", outcome[code]);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "allreduce_bench: writing %s failed: %s\n", path, strerror(errno));
        return SHOAL_BENCH_EXIT_ERROR;
    }
    return code;
}

/* This rank's index among the ranks on its host, from every rank's host
 * name: what launchers call the local rank, which picks the rank's device.
 * Collective over comm. */
static int shoal_bench_local_rank(shoal_comm_t comm, int rank, int nranks, int *local_p)
{
    char(*hosts)[SHOAL_BENCH_HOST_MAX] = calloc((size_t)nranks, sizeof(*hosts));
    if (!hosts) {
        fprintf(stderr, "# rank %d: out of memory\n", rank);
        return -1;
    }
    if (gethostname(hosts[rank], sizeof(hosts[rank]) - 1) != 0)
        snprintf(hosts[rank], sizeof(hosts[rank]), "?");
    shoal_status_t s = shoal_allreduce(hosts, hosts, (size_t)nranks * sizeof(*hosts),
                                       SHOAL_UINT8, SHOAL_SUM, comm);
    if (s != SHOAL_OK) {
        free(hosts);
        shoal_bench_fail(rank, "shoal_allreduce (host names)", s, comm);
        return -1;
    }
    int local = 0;
    for (int r = 0; r < rank; r++)
        local += !strcmp(hosts[r], hosts[rank]);
    free(hosts);
    *local_p = local;
    return 0;
}

/* --mem device: the device module, this rank's device (local rank modulo
 * the devices this process sees) and its stream. This is the first time
 * the process touches CUDA, and it happens in the rank, never in the -np
 * parent before it forks: a child cannot use a driver that its parent
 * initialised before the fork. */
static int shoal_bench_dev_open(shoal_comm_t comm, int rank, int nranks, shoal_bench_bufs_t *b)
{
    int local;
    if (shoal_bench_local_rank(comm, rank, nranks, &local))
        return -1;
    const shoal_dev_ops_t *dev = shoal_dev_get();
    if (!dev) {
        fprintf(stderr, "# rank %d: --mem device needs CUDA: %s\n", rank, shoal_dev_why());
        return -1;
    }
    int count = dev->device_count();
    if (count < 1) {
        fprintf(stderr, "# rank %d: --mem device: the CUDA driver sees no device\n", rank);
        return -1;
    }
    int device = local % count;
    shoal_status_t s = dev->stream_create(device, &b->stream);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# rank %d: --mem device: a stream on device %d: %s (%s)\n", rank,
                device, shoal_status_string(s), dev->why());
        return -1;
    }
    b->dev = dev;
    b->device = device;
    return 0;
}

/* One buffer that shoal will see, from the allocator of mem (zeroed but on
 * the device, where the caller copies zeros in); NULL, said why, when
 * there is none. */
static unsigned char *shoal_bench_buf_alloc(const shoal_bench_bufs_t *b, size_t len, int rank)
{
    void *p = NULL;
    shoal_status_t s;
    switch (b->mem) {
    case SHOAL_BENCH_MEM_HOST:
        p = calloc(1, len);
        if (!p)
            fprintf(stderr, "# rank %d: cannot allocate %zu bytes\n", rank, len);
        return p;
    case SHOAL_BENCH_MEM_SHARED:
        s = shoal_mem_alloc(len, &p); /* zeroed, like calloc */
        if (s != SHOAL_OK) {
            fprintf(stderr, "# rank %d: shoal_mem_alloc(%zu): %s (%s)\n", rank, len,
                    shoal_status_string(s), shoal_comm_last_error(NULL));
            return NULL;
        }
        return p;
    case SHOAL_BENCH_MEM_DEVICE:
    case SHOAL_BENCH_MEM_COUNT:
        break;
    }
    s = b->dev->mem_alloc(b->device, len, &p);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# rank %d: %zu bytes on device %d: %s (%s)\n", rank, len, b->device,
                shoal_status_string(s), b->dev->why());
        return NULL;
    }
    return p;
}

/* shoal_mem_free and the module's mem_free refuse NULL, so the buffers a
 * failed allocation never made are skipped here. */
static void shoal_bench_buf_free(const shoal_bench_bufs_t *b, unsigned char *p)
{
    if (b->mem == SHOAL_BENCH_MEM_HOST)
        free(p);
    else if (p && b->mem == SHOAL_BENCH_MEM_SHARED)
        shoal_mem_free(p);
    else if (p)
        b->dev->mem_free(p);
}

/* Called when no call can still be using the buffers: before any was
 * made, or after the communicator is destroyed or aborted. A
 * stream-ordered call that failed or was aborted still lets its stream go
 * on, and its work may read or write the buffers until it has, so the
 * stream is waited for before anything is freed. */
static void shoal_bench_bufs_free(shoal_bench_bufs_t *b)
{
    if (b->stream)
        b->dev->stream_sync(b->stream);
    shoal_bench_buf_free(b, b->send);
    shoal_bench_buf_free(b, b->recv);
    if (b->hsend != b->send)
        free(b->hsend);
    if (b->hrecv != b->recv)
        free(b->hrecv);
    if (b->stream)
        b->dev->stream_destroy(b->stream);
    free(b->expect);
    free(b->tmp);
    memset(b, 0, sizeof(*b));
    b->device = -1;
}

/* Zeroed, so that the slices -m reaches beyond a row's input hold plain
 * numbers rather than whatever the allocator returned. With --mem shared
 * each buffer is one block, so that every slice and every in-place offset
 * of a row lies inside a block its peers can map. With --mem device the
 * host mirrors are allocated too, and their zeros copied onto the device.
 * Collective over comm with --mem device (the local rank). */
static int shoal_bench_bufs_alloc(shoal_comm_t comm, const shoal_bench_opts_t *o, int rank,
                                  int nranks, shoal_bench_bufs_t *b)
{
    size_t len = o->max_bytes ? o->max_bytes : 1;
    size_t rlen = len + SHOAL_BENCH_GUARD_BYTES;
    memset(b, 0, sizeof(*b));
    b->mem = o->mem;
    b->device = -1;
    if (o->mem == SHOAL_BENCH_MEM_DEVICE && shoal_bench_dev_open(comm, rank, nranks, b))
        goto err_free_bufs;
    b->send = shoal_bench_buf_alloc(b, len, rank);
    if (!b->send)
        goto err_free_bufs;
    b->recv = shoal_bench_buf_alloc(b, rlen, rank);
    if (!b->recv)
        goto err_free_bufs;
    b->hsend = b->send;
    b->hrecv = b->recv;
    if (o->mem == SHOAL_BENCH_MEM_DEVICE) {
        b->hsend = calloc(1, len);
        b->hrecv = calloc(1, rlen);
        if (!b->hsend || !b->hrecv) {
            fprintf(stderr, "# rank %d: cannot allocate host mirrors of %zu bytes\n", rank,
                    len);
            goto err_free_bufs;
        }
        if (shoal_bench_to_dev(b, rank, 0, 0, len) != SHOAL_OK ||
            shoal_bench_to_dev(b, rank, 1, 0, rlen) != SHOAL_OK)
            goto err_free_bufs;
    }
    /* The compressed rows compute their exact sums as they go. */
    if (o->check && !o->comp.on) {
        b->expect = malloc(len);
        b->tmp = malloc(len);
        if (!b->expect || !b->tmp) {
            fprintf(stderr, "# rank %d: cannot allocate 2 x %zu bytes to check results\n",
                    rank, len);
            goto err_free_bufs;
        }
    }
    return 0;

err_free_bufs:
    shoal_bench_bufs_free(b);
    return -1;
}

/* Every size of one type, op and root. */
static shoal_status_t shoal_bench_sizes(shoal_comm_t comm, int rank, int nranks,
                                        const shoal_bench_opts_t *o, shoal_bench_bufs_t *b,
                                        shoal_dtype_t dtype, shoal_op_t op, int root,
                                        shoal_bench_totals_t *tot)
{
    size_t size = o->min_bytes;
    do {
        shoal_bench_row_t row;
        shoal_bench_row_init(&row, o->coll, size, dtype, op, root, rank, nranks);
        shoal_status_t s = shoal_bench_row(comm, o, &row, b, tot);
        if (s != SHOAL_OK)
            return s;
        size = shoal_bench_next_size(o, size);
    } while (size != 0);
    return SHOAL_OK;
}

/* The whole run on one rank of comm; returns an exit code. The rows go as
 * in nccl-tests: by type, then op (reductions) or root (rooted
 * collectives; -r -1 takes every rank in turn), then size. The buffers
 * are allocated into b, which the caller frees once comm is gone. */
static int shoal_bench_rank(shoal_comm_t comm, const shoal_bench_opts_t *o,
                            shoal_bench_bufs_t *b)
{
    int rank, nranks;
    if (shoal_comm_rank(comm, &rank) != SHOAL_OK || shoal_comm_size(comm, &nranks) != SHOAL_OK)
        return SHOAL_BENCH_EXIT_ERROR;
    if (o->coll->rooted && o->root >= nranks) {
        /* Every rank sees the same -r and stops alike; rank 0 says why.
         * (-np refuses it before forking: see shoal_bench_parse_args.) */
        if (rank == 0)
            fprintf(stderr, "allreduce_bench: -r %d is no rank of %d\n", o->root, nranks);
        return SHOAL_BENCH_EXIT_ERROR;
    }
    if (shoal_bench_bufs_alloc(comm, o, rank, nranks, b))
        return SHOAL_BENCH_EXIT_ERROR;
    shoal_bench_totals_t tot = {0, 0, 0, 0, NULL, 0};
    int code = SHOAL_BENCH_EXIT_ERROR;
    /* A file that cannot be written fails rank 0, whose abort stops the
     * others; the header's all-reduce is the first call they wait in. */
    if (rank == 0 && o->json_path && !(tot.json = shoal_bench_json_open(o, nranks)))
        return code;
    if (shoal_bench_header(comm, rank, nranks, o, b->device) != SHOAL_OK)
        goto out_close_json;
    int nops = o->coll->reduces ? o->nops : 1;
    int root_first = !o->coll->rooted ? -1 : o->root < 0 ? 0 : o->root;
    int root_last = !o->coll->rooted ? -1 : o->root < 0 ? nranks - 1 : o->root;
    for (int t = 0; t < o->ndtypes; t++) {
        for (int p = 0; p < nops; p++) {
            for (int root = root_first; root <= root_last; root++) {
                if (shoal_bench_sizes(comm, rank, nranks, o, b, o->dtypes[t], o->ops[p], root,
                                      &tot) != SHOAL_OK)
                    goto out_close_json;
            }
        }
    }
    if (rank == 0) {
        printf("# Out of bounds values : %lld %s\n", tot.out_of_bounds,
               tot.out_of_bounds ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n",
               tot.busbw_count ? tot.busbw_sum / (double)tot.busbw_count : 0.0);
        if (o->check && tot.wrong)
            printf("# Wrong elements       : %lld FAILED\n", tot.wrong);
        printf("#\n");
        fflush(stdout);
    }
    code = tot.wrong || tot.out_of_bounds ? SHOAL_BENCH_EXIT_WRONG : SHOAL_BENCH_EXIT_OK;
out_close_json:
    if (tot.json)
        code = shoal_bench_json_close(tot.json, o->json_path, code);
    return code;
}

/* Each rank's waits, in rank order. */
static void shoal_bench_print_waits(shoal_comm_t comm)
{
    int rank, nranks;
    if (shoal_comm_rank(comm, &rank) != SHOAL_OK || shoal_comm_size(comm, &nranks) != SHOAL_OK)
        return;
    fflush(stdout);
    for (int r = 0; r < nranks; r++) {
        if (r == rank) {
            shoal_introspect_waits(comm, stdout);
            fflush(stdout);
        }
        if (shoal_barrier(comm) != SHOAL_OK)
            return;
    }
}

/* Each rank's CPU time per operation of every timed row, in rank order. */
static void shoal_bench_print_cpu(shoal_comm_t comm)
{
    int rank, nranks;
    if (shoal_comm_rank(comm, &rank) != SHOAL_OK || shoal_comm_size(comm, &nranks) != SHOAL_OK)
        return;
    fflush(stdout);
    for (int r = 0; r < nranks; r++) {
        for (int i = 0; r == rank && i < shoal_bench_cpu_rows; i++) {
            size_t bytes = shoal_bench_cpu_log[i].bytes;
            printf("# cpu of rank %d: %zu B %s: %.1f us per operation, %.3f ns per byte\n",
                   rank, bytes, shoal_bench_cpu_log[i].in_place ? "in-place" : "out-of-place",
                   shoal_bench_cpu_log[i].us,
                   bytes ? shoal_bench_cpu_log[i].us * 1e3 / (double)bytes : 0.0);
        }
        fflush(stdout);
        if (shoal_barrier(comm) != SHOAL_OK)
            return;
    }
}

static int shoal_bench_run_comm(shoal_comm_t comm, const shoal_bench_opts_t *o)
{
    shoal_bench_bufs_t b;
    memset(&b, 0, sizeof(b));
    int code = shoal_bench_rank(comm, o, &b);
    if (code == SHOAL_BENCH_EXIT_OK && o->waits)
        shoal_bench_print_waits(comm);
    if (code == SHOAL_BENCH_EXIT_OK && o->cpu)
        shoal_bench_print_cpu(comm);
    shoal_status_t s = code == SHOAL_BENCH_EXIT_ERROR ? shoal_comm_abort(comm)
                                                      : shoal_comm_destroy(comm);
    if (s != SHOAL_OK && code == SHOAL_BENCH_EXIT_OK)
        code = SHOAL_BENCH_EXIT_ERROR;
    shoal_bench_bufs_free(&b);
    return code;
}

/* Ranks from the launcher: the memcpy baseline is measured by rank 0 while
 * the others wait for it in the header's all-reduce. */
static int shoal_bench_env(shoal_bench_opts_t *o)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init_env(&comm);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# shoal_comm_init_env: %s (%s)\n# start the ranks with a launcher "
                "(mpirun, srun, torchrun) or fork them with -np N\n", shoal_status_string(s),
                shoal_comm_last_error(NULL));
        return SHOAL_BENCH_EXIT_ERROR;
    }
    int rank = 0;
    shoal_comm_rank(comm, &rank);
    if (rank == 0)
        o->memcpy_gbs = shoal_bench_memcpy_gbs();
    return shoal_bench_run_comm(comm, o);
}

/* A forked rank. */
static int shoal_bench_child(const shoal_unique_id_t *id, int rank, const shoal_bench_opts_t *o)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(o->nprocs, id, rank, &comm);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# rank %d: shoal_comm_init: %s (%s)\n", rank, shoal_status_string(s),
                shoal_comm_last_error(NULL));
        return SHOAL_BENCH_EXIT_ERROR;
    }
    return shoal_bench_run_comm(comm, o);
}

static void shoal_bench_kill_rest(const pid_t *pids, int n)
{
    for (int r = 0; r < n; r++)
        if (pids[r] > 0)
            kill(pids[r], SIGKILL);
}

/* -np N: the parent measures memcpy before anyone runs, makes the id, forks
 * the ranks and reports the worst exit. A rank that dies or fails to run
 * takes the others down at once rather than leaving them to time out. */
static int shoal_bench_fork(shoal_bench_opts_t *o)
{
    o->memcpy_gbs = shoal_bench_memcpy_gbs();
    shoal_unique_id_t id;
    shoal_status_t s = shoal_get_unique_id(&id);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# shoal_get_unique_id: %s (%s)\n", shoal_status_string(s),
                shoal_comm_last_error(NULL));
        return SHOAL_BENCH_EXIT_ERROR;
    }
    pid_t *pids = calloc((size_t)o->nprocs, sizeof(*pids));
    if (!pids)
        return SHOAL_BENCH_EXIT_ERROR;
    int code = SHOAL_BENCH_EXIT_OK;
    int killed = 0;
    fflush(NULL);
    for (int r = 0; r < o->nprocs; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = shoal_bench_child(&id, r, o);
            fflush(NULL);
            _exit(rc);
        }
        if (pids[r] < 0) {
            fprintf(stderr, "# fork: %s\n", strerror(errno));
            shoal_bench_kill_rest(pids, r);
            code = SHOAL_BENCH_EXIT_ERROR;
            break;
        }
    }
    for (int left = o->nprocs; left > 0; left--) {
        int st;
        pid_t pid = wait(&st);
        if (pid < 0)
            break;
        int r = 0;
        while (r < o->nprocs && pids[r] != pid)
            r++;
        if (r == o->nprocs)
            continue;
        pids[r] = 0;
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : SHOAL_BENCH_EXIT_ERROR;
        if (WIFSIGNALED(st) && !killed)
            fprintf(stderr, "# rank %d died of signal %d\n", r, WTERMSIG(st));
        if (rc >= SHOAL_BENCH_EXIT_ERROR && !killed) {
            fprintf(stderr, "# rank %d failed: stopping the other ranks\n", r);
            shoal_bench_kill_rest(pids, o->nprocs);
            killed = 1;
        }
        if (rc > code)
            code = rc > SHOAL_BENCH_EXIT_ERROR ? SHOAL_BENCH_EXIT_ERROR : rc;
    }
    free(pids);
    return code;
}

int main(int argc, char **argv)
{
    shoal_bench_opts_t o;
    memset(&o, 0, sizeof(o));
    o.min_bytes = 32u << 20;
    o.max_bytes = 32u << 20;
    o.step_bytes = 1u << 20;
    o.step_factor = 1;
    o.iters = 20;
    o.agg_iters = 1;
    o.warmup = 1;
    o.check = 1;
    o.blocking = 1;
    o.root = 0;
    o.coll = &shoal_bench_colls[0];
    o.ndtypes = 1;
    o.dtypes[0] = SHOAL_FLOAT32;
    o.nops = 1;
    o.ops[0] = SHOAL_SUM;
    o.memcpy_gbs = -1;
    o.mem = SHOAL_BENCH_MEM_HOST;

    int pr = shoal_bench_parse_args(argc, argv, &o);
    if (pr != 0) {
        shoal_bench_usage(pr > 0 ? stdout : stderr, argv[0]);
        return pr > 0 ? 0 : SHOAL_BENCH_EXIT_ERROR;
    }
    return o.nprocs ? shoal_bench_fork(&o) : shoal_bench_env(&o);
}
