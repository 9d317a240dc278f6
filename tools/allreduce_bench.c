/* allreduce_bench: all-reduce bandwidth with the flags and the table of
 * nccl-tests' all_reduce_perf, so figures can be set side by side.
 *
 * Ranks come either from -np N (N processes forked on this machine, the id
 * made in the parent before forking) or from the launcher's environment
 * through shoal_comm_init_env (mpirun, srun, torchrun, SHOAL_RANK...).
 * Rank 0 prints; every rank checks its own results (-c 1) and the counts of
 * wrong elements and clobbered guard bytes are summed over ranks. */
#include "shoal.h"

#include "algos/reduce.h"
#include "core/config.h"
#include "core/dtype.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

typedef struct {
    size_t min_bytes;
    size_t max_bytes;
    size_t step_bytes;
    long step_factor;
    int iters;
    int warmup;
    int check;
    int blocking;
    int ndtypes;
    shoal_dtype_t dtypes[SHOAL_DTYPE_COUNT];
    int nops;
    shoal_op_t ops[SHOAL_OP_COUNT];
    int nprocs;        /* -np; 0 = ranks from the environment */
    double memcpy_gbs; /* measured baseline; < 0 when it could not be */
} shoal_bench_opts_t;

/* Buffers of one rank, sized for the largest row. */
typedef struct {
    unsigned char *send;
    unsigned char *recv; /* max_bytes + guard */
    unsigned char *expect;
    unsigned char *tmp;
} shoal_bench_bufs_t;

/* Totals of a run, summed over ranks on every rank. */
typedef struct {
    double busbw_sum;
    long busbw_count;
    long long wrong;
    long long out_of_bounds;
} shoal_bench_totals_t;

static double shoal_bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void shoal_bench_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [options]\n"
            "  -np <n>                  fork n ranks on this machine (default: ranks from\n"
            "                           the launcher: mpirun, srun, torchrun, SHOAL_RANK...)\n"
            "  -b,--minbytes <size>     smallest size (default 32M); sizes take K, M, G\n"
            "  -e,--maxbytes <size>     largest size (default 32M)\n"
            "  -i,--stepbytes <size>    increment between sizes (default 1M)\n"
            "  -f,--stepfactor <n>      multiply sizes by n instead (default: disabled)\n"
            "  -n,--iters <n>           timed iterations (default 20)\n"
            "  -w,--warmup_iters <n>    untimed iterations before each measurement (default 1)\n"
            "  -c,--check <0/1>         check results on every rank (default 1)\n"
            "  -o,--op <sum/prod/min/max/avg/all>   reduction (default sum)\n"
            "  -d,--datatype <int8,uint8,int32,uint32,int64,uint64,half,float,double,\n"
            "                bfloat16,f8e4m3,f8e5m2,all>   element type (default float)\n"
            "  -z,--blocking <0/1>      accepted for compatibility: shoal calls always\n"
            "                           complete before they return\n"
            "  -h,--help                this text\n",
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

typedef struct {
    char short_name;
    const char *long_name;
} shoal_bench_flag_t;

static const shoal_bench_flag_t shoal_bench_flags[] = {
    {'b', "minbytes"}, {'e', "maxbytes"},     {'i', "stepbytes"}, {'f', "stepfactor"},
    {'n', "iters"},    {'w', "warmup_iters"}, {'c', "check"},     {'o', "op"},
    {'d', "datatype"}, {'z', "blocking"},     {'h', "help"},
};

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
    case 'z':
        if (shoal_bench_parse_long(name, val, 0, &v))
            return -1;
        o->blocking = v != 0;
        return 0;
    case 'o': return shoal_bench_parse_op(val, o);
    case 'd': return shoal_bench_parse_dtype(val, o);
    }
    return -1;
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
            for (size_t f = 0; f < sizeof(shoal_bench_flags) / sizeof(shoal_bench_flags[0]); f++) {
                const char *ln = shoal_bench_flags[f].long_name;
                if (strlen(ln) == len && !strncmp(arg + 2, ln, len))
                    flag = shoal_bench_flags[f].short_name;
            }
            val = eq ? eq + 1 : NULL;
        } else if (arg[0] == '-' && arg[1]) {
            for (size_t f = 0; f < sizeof(shoal_bench_flags) / sizeof(shoal_bench_flags[0]); f++)
                if (shoal_bench_flags[f].short_name == arg[1])
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
    if (o->max_bytes < o->min_bytes) {
        fprintf(stderr, "allreduce_bench: maxbytes %zu is below minbytes %zu\n", o->max_bytes,
                o->min_bytes);
        return -1;
    }
    if (o->step_factor <= 1 && o->step_bytes == 0) {
        fprintf(stderr, "allreduce_bench: stepbytes must be > 0 without a step factor\n");
        return -1;
    }
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

/* Input of rank r at index i for a row of dtype and op. Every value, and
 * every partial result in any order of reduction, is an integer the type
 * represents exactly, so results compare bitwise. */
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

static void shoal_bench_fill(void *buf, size_t count, shoal_dtype_t dtype, shoal_op_t op,
                             int rank, int nranks)
{
    for (size_t i = 0; i < count; i++)
        shoal_dtype_set_f64(buf, i, dtype, shoal_bench_value(dtype, op, rank, nranks, i));
}

/* The result every rank must get, folded rank by rank with the scalar
 * reference; exact inputs make the order irrelevant. */
static void shoal_bench_expect(shoal_bench_bufs_t *b, size_t count, shoal_dtype_t dtype,
                               shoal_op_t op, int nranks)
{
    shoal_op_t fold = op == SHOAL_AVG ? SHOAL_SUM : op;
    shoal_bench_fill(b->expect, count, dtype, op, 0, nranks);
    for (int r = 1; r < nranks; r++) {
        shoal_bench_fill(b->tmp, count, dtype, op, r, nranks);
        shoal_reduce_ref(b->expect, b->expect, b->tmp, count, dtype, fold);
    }
    if (op == SHOAL_AVG)
        shoal_avg_finish_ref(b->expect, b->expect, count, dtype, nranks);
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

static shoal_status_t shoal_bench_fail(int rank, const char *what, shoal_status_t s,
                                       shoal_comm_t comm)
{
    fprintf(stderr, "# rank %d: %s: %s (%s)\n", rank, what, shoal_status_string(s),
            shoal_comm_last_error(comm));
    return s;
}

static shoal_status_t shoal_bench_barrier(shoal_comm_t comm, int rank)
{
    int32_t one = 1;
    shoal_status_t s = shoal_allreduce(&one, &one, 1, SHOAL_INT32, SHOAL_SUM, comm);
    return s == SHOAL_OK ? s : shoal_bench_fail(rank, "barrier", s, comm);
}

/* Warm-up, then the mean time of one call over the timed iterations, in
 * microseconds on this rank. */
static shoal_status_t shoal_bench_time(shoal_comm_t comm, int rank, const shoal_bench_opts_t *o,
                                       const void *send, void *recv, size_t count,
                                       shoal_dtype_t dtype, shoal_op_t op, double *us_p)
{
    shoal_status_t s;
    for (int w = 0; w < o->warmup; w++) {
        s = shoal_allreduce(send, recv, count, dtype, op, comm);
        if (s != SHOAL_OK)
            return shoal_bench_fail(rank, "shoal_allreduce (warm-up)", s, comm);
    }
    s = shoal_bench_barrier(comm, rank);
    if (s != SHOAL_OK)
        return s;
    double t0 = shoal_bench_now_s();
    for (int it = 0; it < o->iters; it++) {
        s = shoal_allreduce(send, recv, count, dtype, op, comm);
        if (s != SHOAL_OK)
            return shoal_bench_fail(rank, "shoal_allreduce", s, comm);
    }
    *us_p = (shoal_bench_now_s() - t0) * 1e6 / o->iters;
    return SHOAL_OK;
}

/* One placement (out-of-place or in-place) of one row on this rank: time
 * it, then with -c run once more on fresh input and count wrong elements.
 * Guard bytes after the result are checked after every call. */
static shoal_status_t shoal_bench_placement(shoal_comm_t comm, int rank,
                                            const shoal_bench_opts_t *o, shoal_bench_bufs_t *b,
                                            int in_place, size_t count, shoal_dtype_t dtype,
                                            shoal_op_t op, double *us_p, long long *wrong_p,
                                            long long *oob_p)
{
    size_t esize = shoal_dtype_bytes(dtype);
    size_t used = count * esize;
    const void *send = in_place ? b->recv : b->send;
    shoal_bench_guard_set(b->recv, used);
    if (in_place)
        memcpy(b->recv, b->send, used);
    shoal_status_t s = shoal_bench_time(comm, rank, o, send, b->recv, count, dtype, op, us_p);
    if (s != SHOAL_OK)
        return s;
    *oob_p += shoal_bench_guard_check(b->recv, used);
    if (!o->check)
        return SHOAL_OK;

    /* The timed calls left a result (or, in place, a reduction of
     * reductions) in recv: start again from the inputs, or from poison
     * where the output must be overwritten, so a call that does nothing
     * cannot pass. */
    if (in_place)
        memcpy(b->recv, b->send, used);
    else
        memset(b->recv, SHOAL_BENCH_POISON_BYTE, used);
    shoal_bench_guard_set(b->recv, used);
    s = shoal_allreduce(send, b->recv, count, dtype, op, comm);
    if (s != SHOAL_OK)
        return shoal_bench_fail(rank, "shoal_allreduce (check)", s, comm);
    *wrong_p += shoal_bench_count_wrong(b->recv, b->expect, count, esize);
    *oob_p += shoal_bench_guard_check(b->recv, used);
    return SHOAL_OK;
}

static void shoal_bench_fmt_time(double us, char out[32])
{
    if (us >= 10000.0)
        snprintf(out, 32, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(out, 32, "%7.1f", us);
    else
        snprintf(out, 32, "%7.2f", us);
}

/* One line of the table: both placements of one size, type and op. */
static shoal_status_t shoal_bench_row(shoal_comm_t comm, int rank, int nranks,
                                      const shoal_bench_opts_t *o, shoal_bench_bufs_t *b,
                                      size_t bytes, shoal_dtype_t dtype, shoal_op_t op,
                                      shoal_bench_totals_t *tot)
{
    size_t esize = shoal_dtype_bytes(dtype);
    size_t count = bytes / esize; /* a size that is no multiple of the element rounds down */
    shoal_bench_fill(b->send, count, dtype, op, rank, nranks);
    if (o->check)
        shoal_bench_expect(b, count, dtype, op, nranks);

    double us[2] = {0, 0};
    long long counts[3] = {0, 0, 0}; /* wrong out-of-place, wrong in-place, out of bounds */
    for (int in_place = 0; in_place < 2; in_place++) {
        shoal_status_t s = shoal_bench_placement(comm, rank, o, b, in_place, count, dtype,
                                                 op, &us[in_place], &counts[in_place], &counts[2]);
        if (s != SHOAL_OK)
            return s;
    }
    /* Like nccl-tests: a collective lasts as long as its slowest rank. */
    shoal_status_t s = shoal_allreduce(us, us, 2, SHOAL_FLOAT64, SHOAL_MAX, comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(counts, counts, 3, SHOAL_INT64, SHOAL_SUM, comm);
    if (s != SHOAL_OK)
        return shoal_bench_fail(rank, "shoal_allreduce (results)", s, comm);

    tot->wrong += counts[0] + counts[1];
    tot->out_of_bounds += counts[2];
    size_t shown = count * esize;
    double factor = nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0;
    if (rank == 0)
        printf("%12zu  %12zu  %8s  %6s  %6d", shown, count, shoal_bench_types[dtype].name,
               shoal_bench_op_names[op], -1);
    for (int p = 0; p < 2; p++) {
        double algbw = us[p] > 0 ? (double)shown / us[p] / 1e3 : 0.0;
        double busbw = algbw * factor;
        tot->busbw_sum += busbw;
        tot->busbw_count++;
        if (rank != 0)
            continue;
        char tbuf[32], wbuf[32];
        shoal_bench_fmt_time(us[p], tbuf);
        if (o->check)
            snprintf(wbuf, sizeof(wbuf), "%lld", counts[p]);
        else
            snprintf(wbuf, sizeof(wbuf), "N/A");
        printf("  %7s  %6.2f  %6.2f  %6s", tbuf, algbw, busbw, wbuf);
    }
    if (rank == 0) {
        printf("\n");
        fflush(stdout);
    }
    return SHOAL_OK;
}

/* Pid and host of every rank, gathered with a sum over zeroed slots. */
typedef struct {
    int64_t pid;
    char host[SHOAL_BENCH_HOST_MAX];
} shoal_bench_rank_info_t;

static shoal_status_t shoal_bench_header(shoal_comm_t comm, int rank, int nranks,
                                         const shoal_bench_opts_t *o)
{
    shoal_bench_rank_info_t *info = calloc((size_t)nranks, sizeof(*info));
    if (!info) {
        fprintf(stderr, "# rank %d: out of memory\n", rank);
        return SHOAL_ERR_NO_MEMORY;
    }
    info[rank].pid = (int64_t)getpid();
    if (gethostname(info[rank].host, sizeof(info[rank].host) - 1) != 0)
        snprintf(info[rank].host, sizeof(info[rank].host), "?");
    shoal_status_t s = shoal_allreduce(info, info, (size_t)nranks * sizeof(*info), SHOAL_UINT8,
                                       SHOAL_SUM, comm);
    if (s != SHOAL_OK) {
        free(info);
        return shoal_bench_fail(rank, "shoal_allreduce (rank info)", s, comm);
    }
    if (rank == 0) {
        printf("# allreduce_bench (shoal %d.%d.%d), flags and table of nccl-tests' "
               "all_reduce_perf\n",
               SHOAL_VERSION_MAJOR, SHOAL_VERSION_MINOR, SHOAL_VERSION_PATCH);
        printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
               "iters: %d validation: %d blocking: %d\n",
               nranks, o->min_bytes, o->max_bytes,
               o->step_factor > 1 ? (size_t)o->step_factor : o->step_bytes,
               o->step_factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check,
               o->blocking);
        printf("# Ranks from: %s; shoal calls complete before they return, whatever -z\n",
               o->nprocs ? "-np (forked on this host)" : "the launcher's environment");
        printf("#\n# Using ranks\n");
        for (int r = 0; r < nranks; r++)
            printf("#  Rank %2d Pid %6lld on %10s host memory\n", r, (long long)info[r].pid,
                   info[r].host);
        printf("#\n");
        if (o->memcpy_gbs > 0)
            printf("# memcpy bandwidth (1 thread, 64 MiB): %.2f GB/s\n", o->memcpy_gbs);
        else
            printf("# memcpy bandwidth (1 thread, 64 MiB): unavailable\n");
        printf("#\n");
        /* Centred over their four columns: the row's first five columns
         * take 52 characters, each placement 33. */
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

static void shoal_bench_bufs_free(shoal_bench_bufs_t *b)
{
    free(b->send);
    free(b->recv);
    free(b->expect);
    free(b->tmp);
    memset(b, 0, sizeof(*b));
}

static int shoal_bench_bufs_alloc(const shoal_bench_opts_t *o, shoal_bench_bufs_t *b)
{
    size_t len = o->max_bytes ? o->max_bytes : 1;
    memset(b, 0, sizeof(*b));
    b->send = malloc(len);
    b->recv = malloc(len + SHOAL_BENCH_GUARD_BYTES);
    if (o->check) {
        b->expect = malloc(len);
        b->tmp = malloc(len);
    }
    if (!b->send || !b->recv || (o->check && (!b->expect || !b->tmp))) {
        shoal_bench_bufs_free(b);
        return -1;
    }
    return 0;
}

/* The whole run on one rank of comm; returns an exit code. */
static int shoal_bench_rank(shoal_comm_t comm, const shoal_bench_opts_t *o)
{
    int rank, nranks;
    if (shoal_comm_rank(comm, &rank) != SHOAL_OK || shoal_comm_size(comm, &nranks) != SHOAL_OK)
        return SHOAL_BENCH_EXIT_ERROR;
    shoal_bench_bufs_t b;
    if (shoal_bench_bufs_alloc(o, &b)) {
        fprintf(stderr, "# rank %d: cannot allocate buffers of %zu bytes\n", rank, o->max_bytes);
        return SHOAL_BENCH_EXIT_ERROR;
    }
    shoal_bench_totals_t tot = {0, 0, 0, 0};
    int code = SHOAL_BENCH_EXIT_ERROR;
    if (shoal_bench_header(comm, rank, nranks, o) != SHOAL_OK)
        goto out_free;
    for (int t = 0; t < o->ndtypes; t++) {
        for (int p = 0; p < o->nops; p++) {
            size_t size = o->min_bytes;
            do {
                if (shoal_bench_row(comm, rank, nranks, o, &b, size, o->dtypes[t], o->ops[p],
                                    &tot) != SHOAL_OK)
                    goto out_free;
                size = shoal_bench_next_size(o, size);
            } while (size != 0);
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
out_free:
    shoal_bench_bufs_free(&b);
    return code;
}

static int shoal_bench_run_comm(shoal_comm_t comm, const shoal_bench_opts_t *o)
{
    int code = shoal_bench_rank(comm, o);
    shoal_status_t s = code == SHOAL_BENCH_EXIT_ERROR ? shoal_comm_abort(comm)
                                                      : shoal_comm_destroy(comm);
    if (s != SHOAL_OK && code == SHOAL_BENCH_EXIT_OK)
        code = SHOAL_BENCH_EXIT_ERROR;
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
    o.warmup = 1;
    o.check = 1;
    o.blocking = 1;
    o.ndtypes = 1;
    o.dtypes[0] = SHOAL_FLOAT32;
    o.nops = 1;
    o.ops[0] = SHOAL_SUM;
    o.memcpy_gbs = -1;

    int pr = shoal_bench_parse_args(argc, argv, &o);
    if (pr != 0) {
        shoal_bench_usage(pr > 0 ? stdout : stderr, argv[0]);
        return pr > 0 ? 0 : SHOAL_BENCH_EXIT_ERROR;
    }
    return o.nprocs ? shoal_bench_fork(&o) : shoal_bench_env(&o);
}
