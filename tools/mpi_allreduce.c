/* mpi_allreduce: MPI's collectives timed the way allreduce_bench times
 * shoal's, with the same flags, table and JSON (-J), so that
 * tools/compare_mpi can set the two side by side: MPI_Allreduce (float,
 * sum) by default, MPI_Allgather or MPI_Alltoall (float) with --coll, each
 * with the sizes, counts and bus bandwidth of allreduce_bench --coll of the
 * same name (nccl-tests' conventions). It uses MPI only: build it with the
 * MPI's own wrapper (mpicc.openmpi, mpicc.mpich, with -pthread) and start
 * it with that MPI's launcher. compare_mpi builds its own copy; the
 * Makefile builds one per MPI too ($(BUILD)/tools/mpi/), with -Werror.
 *
 * Each size runs out of place and in place (MPI_IN_PLACE): -w untimed
 * calls, a barrier, then -n timed calls; the time shown is the mean per
 * call on the slowest rank. With -c 1 one more call on fresh inputs is
 * compared with the exact result, and the wrong elements are summed over
 * ranks.
 *
 * Two modes run without MPI (no MPI_Init, one process), as the machine's
 * figures that compare_mpi prints beside the collectives': --memcpy, the
 * single-thread memcpy bandwidth at each size, median of several runs, the
 * baseline that compare_mpi divides by; --cacheline, the round trip of one
 * cache line between two threads pinned to two CPUs, which on a virtual
 * machine varies with where the host places its vCPUs and bounds how fast
 * any two ranks can hand each other a flag. */
#include <mpi.h>

#include "bench_text.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MPIB_HOST_MAX 64
#define MPIB_MEMCPY_RUNS 7
#define MPIB_MEMCPY_RUN_BYTES (32u << 20) /* bytes copied per timed run */
#define MPIB_POISON 0xcd
#define MPIB_RT_RUNS 5
#define MPIB_RT_ROUNDS 100000 /* round trips per run, at most */
#define MPIB_RT_RUN_S 0.5     /* a run that takes longer stops there */

typedef struct mpib_row mpib_row_t;

/* How the bus bandwidth follows from the algorithm bandwidth, as in
 * nccl-tests (and allreduce_bench): the share of the data that crosses
 * the busiest rank's link. */
typedef enum {
    MPIB_BUS_ALLREDUCE, /* 2(n-1)/n: every element reduced, then spread */
    MPIB_BUS_SPREAD,    /* (n-1)/n: each rank's block leaves it once */
} mpib_bus_t;

/* One collective as this program times it. A row of S bytes has S / 4
 * floats; a collective whose buffers hold one block per rank passes a
 * count of floats / nranks (rounded down, as nccl-tests does), and its
 * size column shows the larger buffer, nranks blocks. */
typedef struct {
    size_t size;           /* sizeof(mpib_coll_t) */
    const char *name;      /* --coll, allreduce_bench's name for it */
    const char *call_name; /* the MPI function */
    const char *perf;      /* the nccl-tests program whose table this is */
    int reduces;           /* the inputs are summed; otherwise the redop reads "none" */
    int send_blocks;       /* the send buffer holds nranks blocks of count */
    int recv_blocks;       /* the receive buffer holds nranks blocks of count */
    int send_at_rank;      /* in place, the input sits at block `rank` of the buffer */
    mpib_bus_t bus;
    int (*call)(const void *send, void *recv, int count);
    /* The receive buffer this rank must end with (recv_count floats). */
    void (*expect)(const mpib_row_t *row, float *out);
} mpib_coll_t;

/* One row of the table on one rank. */
struct mpib_row {
    const mpib_coll_t *coll;
    int rank;
    int nranks;
    size_t count;      /* the count argument of the MPI call */
    size_t send_count; /* floats of the send buffer */
    size_t recv_count; /* floats of the receive buffer, the larger one */
};

typedef enum {
    MPIB_MODE_MPI,       /* the collective under MPI */
    MPIB_MODE_MEMCPY,    /* --memcpy */
    MPIB_MODE_CACHELINE, /* --cacheline */
} mpib_mode_t;

typedef struct {
    size_t min_bytes;
    size_t max_bytes;
    size_t step_factor;
    int iters;
    int warmup;
    int check;
    int in_place; /* time in place too */
    mpib_mode_t mode;
    const mpib_coll_t *coll;
    const char *json_path;
} mpib_opts_t;

/* Buffers of one rank, sized for the largest row. */
typedef struct {
    float *send;
    float *recv;
    float *expect;
} mpib_bufs_t;

static double mpib_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- The collectives ------------------------------------------------- */

/* Input of rank r at index i of the all-reduce: integers of magnitude
 * <= 2^24 / nranks, so that every partial sum, in any order, is exact in
 * float. */
static float mpib_value(int r, int nranks, size_t i)
{
    size_t a = ((size_t)1 << 24) / (size_t)nranks;
    return (float)((double)((i * 5 + (size_t)r * 3 + 1) % (a + 1)) - (double)(a / 2));
}

/* Input of rank r at index i of a collective that only moves data: an
 * integer float holds exactly, different on two ranks at one index (the
 * rank's factor 7 is prime to the 2^24 + 1 values), so a block from the
 * wrong rank or offset shows. */
static float mpib_move_value(int r, size_t i)
{
    size_t values = ((size_t)1 << 24) + 1;
    return (float)((double)((i * 5 + (size_t)r * 7 + 1) % values) - (double)(values / 2));
}

/* Rank r's send buffer of the row (send_count floats) into buf. */
static void mpib_input(const mpib_row_t *row, int r, float *buf)
{
    for (size_t i = 0; i < row->send_count; i++)
        buf[i] = row->coll->reduces ? mpib_value(r, row->nranks, i) : mpib_move_value(r, i);
}

static int mpib_call_allreduce(const void *send, void *recv, int count)
{
    return MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static int mpib_call_allgather(const void *send, void *recv, int count)
{
    return MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
}

static int mpib_call_alltoall(const void *send, void *recv, int count)
{
    return MPI_Alltoall(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
}

/* The exact sum, in double: every partial sum is exact anyway. */
static void mpib_expect_allreduce(const mpib_row_t *row, float *out)
{
    for (size_t i = 0; i < row->count; i++) {
        double sum = 0;
        for (int r = 0; r < row->nranks; r++)
            sum += mpib_value(r, row->nranks, i);
        out[i] = (float)sum;
    }
}

/* Block j from rank j. */
static void mpib_expect_allgather(const mpib_row_t *row, float *out)
{
    for (int j = 0; j < row->nranks; j++)
        for (size_t i = 0; i < row->count; i++)
            out[(size_t)j * row->count + i] = mpib_move_value(j, i);
}

/* Block j from block `rank` of rank j's send buffer. */
static void mpib_expect_alltoall(const mpib_row_t *row, float *out)
{
    size_t first = (size_t)row->rank * row->count;
    for (int j = 0; j < row->nranks; j++)
        for (size_t i = 0; i < row->count; i++)
            out[(size_t)j * row->count + i] = mpib_move_value(j, first + i);
}

/* --coll's names; the first, the all-reduce, is the default. In place,
 * the input sits where the MPI standard puts it for MPI_IN_PLACE: the
 * whole receive buffer, or block `rank` of it for the all-gather. */
static const mpib_coll_t mpib_colls[] = {
    {
        .size = sizeof(mpib_coll_t),
        .name = "allreduce",
        .call_name = "MPI_Allreduce",
        .perf = "all_reduce_perf",
        .reduces = 1,
        .bus = MPIB_BUS_ALLREDUCE,
        .call = mpib_call_allreduce,
        .expect = mpib_expect_allreduce,
    },
    {
        .size = sizeof(mpib_coll_t),
        .name = "allgather",
        .call_name = "MPI_Allgather",
        .perf = "all_gather_perf",
        .recv_blocks = 1,
        .send_at_rank = 1,
        .bus = MPIB_BUS_SPREAD,
        .call = mpib_call_allgather,
        .expect = mpib_expect_allgather,
    },
    {
        .size = sizeof(mpib_coll_t),
        .name = "alltoall",
        .call_name = "MPI_Alltoall",
        .perf = "alltoall_perf",
        .send_blocks = 1,
        .recv_blocks = 1,
        .bus = MPIB_BUS_SPREAD,
        .call = mpib_call_alltoall,
        .expect = mpib_expect_alltoall,
    },
};

#define MPIB_NCOLLS (sizeof(mpib_colls) / sizeof(mpib_colls[0]))

static void mpib_row_init(mpib_row_t *row, const mpib_coll_t *coll, size_t bytes, int rank,
                          int nranks)
{
    size_t elems = bytes / sizeof(float), n = (size_t)nranks;
    row->coll = coll;
    row->rank = rank;
    row->nranks = nranks;
    row->count = coll->send_blocks || coll->recv_blocks ? elems / n : elems;
    row->send_count = row->count * (coll->send_blocks ? n : 1);
    row->recv_count = row->count * (coll->recv_blocks ? n : 1);
}

static double mpib_bus_factor(mpib_bus_t bus, int nranks)
{
    double share = (double)(nranks - 1) / (double)nranks;
    return bus == MPIB_BUS_ALLREDUCE ? 2.0 * share : share;
}

/* ---- Command line ---------------------------------------------------- */

static void mpib_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: mpirun -np <n> %s [options]\n"
            "       (or %s --memcpy [options], %s --cacheline [-J <file>])\n"
            "  --coll <name>            collective (default allreduce): allreduce\n"
            "                           (MPI_Allreduce, float sum), allgather (MPI_Allgather,\n"
            "                           float) or alltoall (MPI_Alltoall, float), with\n"
            "                           allreduce_bench's sizes and busbw for each\n"
            "  -b,--minbytes <size>     smallest size (default 8); sizes take K, M, G\n"
            "  -e,--maxbytes <size>     largest size (default 128M)\n"
            "  -f,--stepfactor <n>      multiplication factor between sizes (default 2)\n"
            "  -n,--iters <n>           timed iterations per size (default 20)\n"
            "  -w,--warmup_iters <n>    untimed iterations before each measurement (default 1)\n"
            "  -c,--check <0/1>         compare each result with the exact one (default 1)\n"
            "  --in_place <0/1>         time in place too (default 1); 0: out of place only,\n"
            "                           the in-place columns N/A (null in the JSON)\n"
            "  -J,--json <file>         rank 0 also writes the settings and results as\n"
            "                           JSON to <file>\n"
            "  -M,--memcpy              no MPI: single-thread memcpy bandwidth per size,\n"
            "                           median of %d runs\n"
            "  -L,--cacheline           no MPI: round trip of one cache line between two\n"
            "                           threads on the first two CPUs this process may use\n"
            "                           (ns), median of %d runs\n"
            "  -h,--help                this text\n",
            prog, prog, prog, MPIB_MEMCPY_RUNS, MPIB_RT_RUNS);
}

static int mpib_parse_size(const char *flag, const char *text, size_t *out_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    unsigned shift = 0;
    if (end == text || errno || !isdigit((unsigned char)text[0]))
        goto err_bad;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    default: goto err_bad;
    }
    if (*end || (shift && v > (ULLONG_MAX >> shift)) || (v << shift) > SIZE_MAX / 2)
        goto err_bad;
    *out_p = (size_t)(v << shift);
    return 0;
err_bad:
    fprintf(stderr, "mpi_allreduce: %s wants a size such as 8, 1K, 64M, not \"%s\"\n", flag,
            text);
    return -1;
}

static int mpib_parse_int(const char *flag, const char *text, long min, int *out_p)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > INT_MAX) {
        fprintf(stderr, "mpi_allreduce: %s wants an integer >= %ld, not \"%s\"\n", flag, min,
                text);
        return -1;
    }
    *out_p = (int)v;
    return 0;
}

static int mpib_parse_coll(const char *text, mpib_opts_t *o)
{
    for (size_t c = 0; c < MPIB_NCOLLS; c++) {
        if (!strcmp(text, mpib_colls[c].name)) {
            o->coll = &mpib_colls[c];
            return 0;
        }
    }
    fprintf(stderr, "mpi_allreduce: unknown collective \"%s\" (", text);
    for (size_t c = 0; c < MPIB_NCOLLS; c++)
        fprintf(stderr, "%s%s", c ? ", " : "", mpib_colls[c].name);
    fprintf(stderr, ")\n");
    return -1;
}

/* --coll has no short form, as in allreduce_bench: nccl-tests has one
 * program per collective, and its letters stay free. */
static const struct {
    char key;
    const char *long_name;
    int takes_value;
    int long_only;
} mpib_flags[] = {
    {'b', "minbytes", 1, 0}, {'e', "maxbytes", 1, 0}, {'f', "stepfactor", 1, 0},
    {'n', "iters", 1, 0},    {'w', "warmup_iters", 1, 0}, {'c', "check", 1, 0},
    {'J', "json", 1, 0},     {'M', "memcpy", 0, 0},   {'L', "cacheline", 0, 0},
    {'K', "coll", 1, 1},     {'I', "in_place", 1, 1}, {'h', "help", 0, 0},
};

#define MPIB_NFLAGS (sizeof(mpib_flags) / sizeof(mpib_flags[0]))

static int mpib_apply(char key, const char *flag, const char *val, mpib_opts_t *o)
{
    int factor;
    switch (key) {
    case 'b': return mpib_parse_size(flag, val, &o->min_bytes);
    case 'e': return mpib_parse_size(flag, val, &o->max_bytes);
    case 'f':
        if (mpib_parse_int(flag, val, 2, &factor))
            return -1;
        o->step_factor = (size_t)factor;
        return 0;
    case 'n': return mpib_parse_int(flag, val, 1, &o->iters);
    case 'w': return mpib_parse_int(flag, val, 0, &o->warmup);
    case 'c': return mpib_parse_int(flag, val, 0, &o->check);
    case 'J': o->json_path = val; return 0;
    case 'M': o->mode = MPIB_MODE_MEMCPY; return 0;
    case 'L': o->mode = MPIB_MODE_CACHELINE; return 0;
    case 'K': return mpib_parse_coll(val, o);
    case 'I': return mpib_parse_int(flag, val, 0, &o->in_place);
    }
    return -1;
}

/* "-b 8", "-b8", "--minbytes 8", "--minbytes=8". Returns 0 to run, 1 after
 * -h, -1 on a bad command line. */
static int mpib_parse_args(int argc, char **argv, mpib_opts_t *o)
{
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a], *val = NULL;
        int f = -1;
        if (arg[0] == '-' && arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            for (size_t k = 0; k < MPIB_NFLAGS; k++)
                if (strlen(mpib_flags[k].long_name) == len &&
                    !strncmp(arg + 2, mpib_flags[k].long_name, len))
                    f = (int)k;
            val = eq ? eq + 1 : NULL;
        } else if (arg[0] == '-' && arg[1]) {
            for (size_t k = 0; k < MPIB_NFLAGS; k++)
                if (mpib_flags[k].key == arg[1] && !mpib_flags[k].long_only)
                    f = (int)k;
            val = arg[2] ? arg + 2 : NULL;
        }
        if (f < 0 || (!mpib_flags[f].takes_value && val)) {
            fprintf(stderr, "mpi_allreduce: unknown argument \"%s\"\n", arg);
            return -1;
        }
        if (mpib_flags[f].key == 'h')
            return 1;
        if (mpib_flags[f].takes_value && !val) {
            if (a + 1 >= argc) {
                fprintf(stderr, "mpi_allreduce: %s needs a value\n", arg);
                return -1;
            }
            val = argv[++a];
        }
        if (mpib_apply(mpib_flags[f].key, arg, val, o))
            return -1;
    }
    if (o->max_bytes < o->min_bytes) {
        fprintf(stderr, "mpi_allreduce: maxbytes %zu is below minbytes %zu\n", o->max_bytes,
                o->min_bytes);
        return -1;
    }
    return 0;
}

/* Next row's size; 0 after the last. Multiplying from 0 starts at 1. */
static size_t mpib_next_size(const mpib_opts_t *o, size_t size)
{
    size_t next = size ? size * o->step_factor : 1;
    return next <= o->max_bytes ? next : 0;
}

/* ---- JSON ------------------------------------------------------------ */

/* The settings, as allreduce_bench writes them, then the results array
 * left open for the rows. NULL, said why, when the file cannot be made. */
static FILE *mpib_json_open(const mpib_opts_t *o, const char *library, int nranks)
{
    FILE *f = fopen(o->json_path, "w");
    if (!f) {
        fprintf(stderr, "mpi_allreduce: cannot write %s: %s\n", o->json_path, strerror(errno));
        return NULL;
    }
    char host[MPIB_HOST_MAX] = "?", date[32] = "?";
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "?");
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(f, "{\n  \"tool\": \"mpi_allreduce\",\n");
    bench_json_str(f, "library", library);
    if (o->mode == MPIB_MODE_MEMCPY) {
        fprintf(f, "  \"collective\": \"memcpy\",\n  \"runs\": %d,\n", MPIB_MEMCPY_RUNS);
    } else if (o->mode == MPIB_MODE_CACHELINE) {
        fprintf(f, "  \"collective\": \"cacheline\",\n  \"runs\": %d,\n", MPIB_RT_RUNS);
    } else {
        fprintf(f, "  \"collective\": \"%s\",\n  \"ranks\": %d,\n", o->coll->name, nranks);
        fprintf(f, "  \"dtype\": \"float\",\n  \"op\": \"%s\",\n"
                "  \"algorithm\": \"%s\",\n  \"iterations\": %d,\n"
                "  \"warmup\": %d,\n  \"check\": %d,\n  \"in_place\": %d,\n",
                o->coll->reduces ? "sum" : "none", o->coll->call_name, o->iters, o->warmup,
                o->check, o->in_place ? 1 : 0);
    }
    bench_json_str(f, "host", host);
    bench_json_str(f, "date", date);
    fprintf(f, "  \"results\": [");
    return f;
}

/* Closes the results and the document; returns code, or 2 if writing failed. */
static int mpib_json_close(FILE *f, const char *path, int code)
{
    fprintf(f, "\n  ],\n  \"status\": \"%s\"\n}\n",
            code == 0 ? "ok" : code == 1 ? "wrong" : "error");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "mpi_allreduce: writing %s failed: %s\n", path, strerror(errno));
        return 2;
    }
    return code;
}

/* ---- memcpy baseline ------------------------------------------------- */

/* Called through a volatile pointer so that no copy is elided or merged. */
static void *(*volatile mpib_copy)(void *, const void *, size_t) = memcpy;

/* Single-thread memcpy of len bytes in GB/s: the median of several runs,
 * each repeating the copy until it has moved MPIB_MEMCPY_RUN_BYTES (at
 * least once), after one copy that faults the pages in. Small sizes thus
 * measure the cache the copy stays in, as a collective of that size would. */
static double mpib_memcpy_gbs(char *dst, char *src, size_t len)
{
    size_t reps = len && len < MPIB_MEMCPY_RUN_BYTES ? MPIB_MEMCPY_RUN_BYTES / len : 1;
    double runs[MPIB_MEMCPY_RUNS];
    mpib_copy(dst, src, len);
    for (int r = 0; r < MPIB_MEMCPY_RUNS; r++) {
        if (len)
            src[0] = (char)r; /* a different input each run */
        double t0 = mpib_now_s();
        for (size_t k = 0; k < reps; k++)
            mpib_copy(dst, src, len);
        runs[r] = (mpib_now_s() - t0) / (double)reps;
    }
    for (int i = 1; i < MPIB_MEMCPY_RUNS; i++) /* insertion sort: seven values */
        for (int j = i; j > 0 && runs[j] < runs[j - 1]; j--) {
            double t = runs[j];
            runs[j] = runs[j - 1];
            runs[j - 1] = t;
        }
    double median = runs[MPIB_MEMCPY_RUNS / 2];
    return median > 0 ? (double)len / median / 1e9 : 0.0;
}

static int mpib_memcpy_main(const mpib_opts_t *o)
{
    size_t len = o->max_bytes ? o->max_bytes : 1;
    char *src = malloc(len), *dst = malloc(len);
    FILE *json = NULL;
    int code = 2;
    if (!src || !dst) {
        fprintf(stderr, "mpi_allreduce: cannot allocate 2 x %zu bytes\n", len);
        goto out_free;
    }
    memset(src, 1, len);
    memset(dst, 2, len);
    if (o->json_path && !(json = mpib_json_open(o, "libc memcpy", 1)))
        goto out_free;
    printf("# mpi_allreduce --memcpy: single-thread memcpy, median of %d runs\n#\n"
           "# %10s  %9s  %9s\n# %10s  %9s  %9s\n", MPIB_MEMCPY_RUNS, "size", "time", "memcpy",
           "(B)", "(us)", "(GB/s)");
    size_t size = o->min_bytes;
    for (long row = 0;; row++) {
        double gbs = mpib_memcpy_gbs(dst, src, size);
        double us = gbs > 0 ? (double)size / gbs / 1e3 : 0.0;
        printf("%12zu  %9.3f  %9.2f\n", size, us, gbs);
        if (json)
            fprintf(json, "%s\n    {\"bytes\": %zu, \"time_us\": %.6g, \"gbs\": %.6g}",
                    row ? "," : "", size, us, gbs);
        size = mpib_next_size(o, size);
        if (!size)
            break;
    }
    fflush(stdout);
    code = 0;
    if (json)
        code = mpib_json_close(json, o->json_path, code);
out_free:
    free(src);
    free(dst);
    return code;
}

/* ---- Cache-line round trip ------------------------------------------ */

/* The line the two threads hand each other, alone in its cache line: the
 * pinger writes an odd number, the echo the next even one. */
typedef struct {
    _Alignas(64) atomic_uint line;
    _Alignas(64) atomic_int stop;
} mpib_rt_t;

static void *mpib_rt_echo(void *arg)
{
    mpib_rt_t *rt = arg;
    for (;;) {
        unsigned v = atomic_load_explicit(&rt->line, memory_order_acquire);
        if (v & 1u)
            atomic_store_explicit(&rt->line, v + 1u, memory_order_release);
        else if (atomic_load_explicit(&rt->stop, memory_order_relaxed))
            return NULL;
    }
}

/* One run in ns per round trip: up to MPIB_RT_ROUNDS, fewer when a busy
 * machine makes them slow (the clock is read every 1024). */
static double mpib_rt_run(mpib_rt_t *rt, long *rounds_p)
{
    unsigned v = atomic_load_explicit(&rt->line, memory_order_relaxed);
    double t0 = mpib_now_s(), t = t0;
    long k = 0;
    while (k < MPIB_RT_ROUNDS) {
        atomic_store_explicit(&rt->line, v + 1u, memory_order_release);
        while (atomic_load_explicit(&rt->line, memory_order_acquire) != v + 2u)
            ;
        v += 2u;
        k++;
        if ((k & 1023) == 0 && (t = mpib_now_s()) - t0 > MPIB_RT_RUN_S)
            break;
    }
    if (k & 1023)
        t = mpib_now_s();
    *rounds_p = k;
    return (t - t0) / (double)k * 1e9;
}

static int mpib_double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int mpib_cacheline_main(const mpib_opts_t *o)
{
    static mpib_rt_t rt; /* aligned, and zero: line 0, stop 0 */
    cpu_set_t allowed, set[2];
    int cpus[2], found = 0;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
        fprintf(stderr, "mpi_allreduce: sched_getaffinity: %s\n", strerror(errno));
        return 2;
    }
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++) {
        if (CPU_ISSET(c, &allowed)) {
            CPU_ZERO(&set[found]);
            CPU_SET(c, &set[found]);
            cpus[found++] = c;
        }
    }
    if (found < 2) {
        fprintf(stderr, "mpi_allreduce: --cacheline needs two CPUs; this process may use one\n");
        return 2;
    }
    /* The echo starts pinned (or not at all): the pinger never waits for
     * a thread that could not be placed. */
    pthread_attr_t attr;
    pthread_t echo;
    int err = pthread_setaffinity_np(pthread_self(), sizeof(set[0]), &set[0]);
    if (!err && !(err = pthread_attr_init(&attr))) {
        err = pthread_attr_setaffinity_np(&attr, sizeof(set[1]), &set[1]);
        if (!err)
            err = pthread_create(&echo, &attr, mpib_rt_echo, &rt);
        pthread_attr_destroy(&attr);
    }
    if (err != 0) {
        fprintf(stderr, "mpi_allreduce: cannot run two threads on CPUs %d and %d: %s\n", cpus[0],
                cpus[1], strerror(err));
        return 2;
    }
    double ns[MPIB_RT_RUNS], sorted[MPIB_RT_RUNS];
    long rounds[MPIB_RT_RUNS], first;
    mpib_rt_run(&rt, &first); /* untimed: the echo's start, the caches */
    for (int r = 0; r < MPIB_RT_RUNS; r++)
        sorted[r] = ns[r] = mpib_rt_run(&rt, &rounds[r]);
    atomic_store_explicit(&rt.stop, 1, memory_order_relaxed);
    pthread_join(echo, NULL);
    qsort(sorted, MPIB_RT_RUNS, sizeof(sorted[0]), mpib_double_cmp);
    double median = sorted[MPIB_RT_RUNS / 2];
    printf("# mpi_allreduce --cacheline: one cache line between CPUs %d and %d, median of "
           "%d runs\ncache-line round trip CPU %d <-> %d: %.0f ns (min %.0f, max %.0f)\n",
           cpus[0], cpus[1], MPIB_RT_RUNS, cpus[0], cpus[1], median, sorted[0],
           sorted[MPIB_RT_RUNS - 1]);
    fflush(stdout);
    if (!o->json_path)
        return 0;
    FILE *json = mpib_json_open(o, "C11 atomics", 1);
    if (!json)
        return 2;
    fprintf(json, "\n    {\"cpus\": [%d, %d], \"round_trip_ns\": %.6g, \"min_ns\": %.6g, "
            "\"max_ns\": %.6g, \"runs_ns\": [", cpus[0], cpus[1], median, sorted[0],
            sorted[MPIB_RT_RUNS - 1]);
    for (int r = 0; r < MPIB_RT_RUNS; r++)
        fprintf(json, "%s%.6g", r ? ", " : "", ns[r]);
    fprintf(json, "], \"rounds\": [");
    for (int r = 0; r < MPIB_RT_RUNS; r++)
        fprintf(json, "%s%ld", r ? ", " : "", rounds[r]);
    fprintf(json, "]}");
    return mpib_json_close(json, o->json_path, 0);
}

/* ---- The collective under MPI ---------------------------------------- */

/* Mean seconds per call over o->iters calls on this rank, after the
 * warm-up and a barrier. */
static double mpib_time(const mpib_opts_t *o, const mpib_row_t *row, mpib_bufs_t *b,
                        int in_place)
{
    const void *send = in_place ? MPI_IN_PLACE : (const void *)b->send;
    int count = (int)row->count;
    for (int w = 0; w < o->warmup; w++)
        row->coll->call(send, b->recv, count);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = mpib_now_s();
    for (int it = 0; it < o->iters; it++)
        row->coll->call(send, b->recv, count);
    return (mpib_now_s() - t0) / (double)o->iters;
}

/* The receive buffer of an in-place call: this rank's input where
 * MPI_IN_PLACE takes it from. */
static void mpib_place_input(const mpib_row_t *row, float *recv)
{
    size_t at = row->coll->send_at_rank ? (size_t)row->rank * row->count : 0;
    mpib_input(row, row->rank, recv + at);
}

/* One call on fresh inputs (recv poisoned; in place, this rank's input
 * placed in it), compared with b->expect; returns the wrong elements. */
static long long mpib_check(const mpib_row_t *row, mpib_bufs_t *b, int in_place)
{
    memset(b->recv, MPIB_POISON, row->recv_count * sizeof(float));
    if (in_place)
        mpib_place_input(row, b->recv);
    row->coll->call(in_place ? MPI_IN_PLACE : (const void *)b->send, b->recv, (int)row->count);
    long long wrong = 0;
    for (size_t i = 0; i < row->recv_count; i++)
        wrong += memcmp(&b->recv[i], &b->expect[i], sizeof(float)) != 0;
    return wrong;
}

/* One line of the table (and of the JSON): both placements of one size. */
static long long mpib_row(const mpib_opts_t *o, mpib_bufs_t *b, size_t bytes, int rank,
                          int nranks, FILE *json, long row_no)
{
    mpib_row_t row;
    mpib_row_init(&row, o->coll, bytes, rank, nranks);
    double us[2] = {0, 0};
    long long wrong[2] = {0, 0};
    int placements = o->in_place ? 2 : 1;
    mpib_input(&row, rank, b->send);
    if (o->check)
        o->coll->expect(&row, b->expect);
    for (int p = 0; p < placements; p++) {
        if (p)
            mpib_place_input(&row, b->recv);
        us[p] = mpib_time(o, &row, b, p) * 1e6;
        if (o->check)
            wrong[p] = mpib_check(&row, b, p);
    }
    /* Like nccl-tests: a collective lasts as long as its slowest rank. */
    double us_max[2];
    long long wrong_sum[2];
    MPI_Reduce(us, us_max, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(wrong, wrong_sum, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank != 0)
        return 0;
    size_t shown = row.recv_count * sizeof(float);
    const char *redop = o->coll->reduces ? "sum" : "none";
    double factor = mpib_bus_factor(o->coll->bus, nranks);
    printf("%12zu  %12zu  %8s  %6s  %6d", shown, row.count, "float", redop, -1);
    if (json)
        fprintf(json, "%s\n    {\"bytes\": %zu, \"count\": %zu, \"type\": \"float\", "
                "\"op\": \"%s\", \"root\": -1", row_no ? "," : "", shown, row.count, redop);
    for (int p = 0; p < placements; p++) {
        double algbw = us_max[p] > 0 ? (double)shown / us_max[p] / 1e3 : 0.0;
        double busbw = algbw * factor;
        char tbuf[32], wbuf[32];
        bench_fmt_time(us_max[p], tbuf);
        if (o->check)
            snprintf(wbuf, sizeof(wbuf), "%lld", wrong_sum[p]);
        else
            snprintf(wbuf, sizeof(wbuf), "N/A");
        printf("  %7s  %6.2f  %6.2f  %6s", tbuf, algbw, busbw, wbuf);
        if (json)
            fprintf(json, ",\n     \"%s\": {\"time_us\": %.6g, \"algbw\": %.6g, "
                    "\"busbw\": %.6g, \"wrong\": %s}", p ? "in_place" : "out_of_place",
                    us_max[p], algbw, busbw, o->check ? wbuf : "null");
    }
    if (!o->in_place) {
        printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        if (json)
            fprintf(json, ",\n     \"in_place\": null");
    }
    if (json)
        fprintf(json, "}");
    printf("\n");
    fflush(stdout);
    return wrong_sum[0] + wrong_sum[1];
}

static void mpib_header(const mpib_opts_t *o, const char *library, int nranks)
{
    char host[MPIB_HOST_MAX] = "?";
    gethostname(host, sizeof(host) - 1);
    printf("# mpi_allreduce: %s float%s, table of nccl-tests' %s\n", o->coll->call_name,
           o->coll->reduces ? " sum" : "", o->coll->perf);
    printf("# %s\n", library);
    printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d "
           "iters: %d validation: %d on %s\n#\n", nranks, o->min_bytes, o->max_bytes,
           o->step_factor, o->warmup, o->iters, o->check, host);
    printf("#%61s%s%23s%s\n", "", "out-of-place", "", "in-place");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
           "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
}

/* The whole run on one rank; returns the exit code (0 right, 1 wrong
 * elements, 2 failure). Every rank takes each decision alike, except
 * rank 0's JSON file, whose failure aborts the job. */
static int mpib_mpi_main(const mpib_opts_t *o)
{
    int rank, nranks, len;
    char library[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Get_library_version(library, &len);
    library[strcspn(library, "\n")] = '\0'; /* the first line names it */
    if (o->max_bytes / sizeof(float) > INT_MAX) {
        if (rank == 0)
            fprintf(stderr, "mpi_allreduce: -e %zu is beyond MPI's int count\n", o->max_bytes);
        return 2;
    }
    /* The largest row, and at least one float per rank for the warm-up. */
    size_t bytes = o->max_bytes;
    if (bytes < (size_t)nranks * sizeof(float))
        bytes = (size_t)nranks * sizeof(float);
    mpib_bufs_t b = {calloc(1, bytes), calloc(1, bytes), o->check ? malloc(bytes) : NULL};
    FILE *json = NULL;
    long long wrong = 0;
    int code = 2;
    if (!b.send || !b.recv || (o->check && !b.expect)) {
        fprintf(stderr, "# rank %d: cannot allocate buffers of %zu bytes\n", rank, bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
        goto out_free;
    }
    if (rank == 0 && o->json_path && !(json = mpib_json_open(o, library, nranks))) {
        MPI_Abort(MPI_COMM_WORLD, 2);
        goto out_free;
    }
    if (rank == 0)
        mpib_header(o, library, nranks);
    /* The first calls of a job can take milliseconds (MPICH over UCX here:
     * the first row's time was 1-4 ms per call with -w 1, under a
     * microsecond after these), which the first row would otherwise carry;
     * allreduce_bench's ranks have run the all-reduces of its header.
     * Another collective than the all-reduce makes its first calls here
     * too, one float per rank (a few: with more ranks than cores, a call
     * of MPICH's can take milliseconds). */
    for (int w = 0; w < 100; w++)
        MPI_Allreduce(MPI_IN_PLACE, b.recv, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int w = 0; w < 10 && o->coll->call != mpib_call_allreduce; w++)
        o->coll->call(b.send, b.recv, 1);
    size_t size = o->min_bytes;
    for (long row = 0;; row++) {
        wrong += mpib_row(o, &b, size, rank, nranks, json, row);
        size = mpib_next_size(o, size);
        if (!size)
            break;
    }
    code = wrong ? 1 : 0;
    if (rank == 0) {
        if (o->check)
            printf("# Wrong elements       : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
        printf("#\n");
        fflush(stdout);
    }
    if (json)
        code = mpib_json_close(json, o->json_path, code);
out_free:
    free(b.send);
    free(b.recv);
    free(b.expect);
    return code;
}

int main(int argc, char **argv)
{
    mpib_opts_t o = {
        .min_bytes = 8,
        .max_bytes = 128u << 20,
        .step_factor = 2,
        .iters = 20,
        .warmup = 1,
        .check = 1,
        .in_place = 1,
        .mode = MPIB_MODE_MPI,
        .coll = &mpib_colls[0],
    };
    int pr = mpib_parse_args(argc, argv, &o);
    if (pr != 0) {
        mpib_usage(pr > 0 ? stdout : stderr, argv[0]);
        return pr > 0 ? 0 : 2;
    }
    if (o.mode == MPIB_MODE_MEMCPY)
        return mpib_memcpy_main(&o);
    if (o.mode == MPIB_MODE_CACHELINE)
        return mpib_cacheline_main(&o);
    MPI_Init(&argc, &argv);
    int code = mpib_mpi_main(&o);
    /* Rank 0 alone knows the sum of wrong elements and whether its file
     * was written: every rank exits with its verdict. */
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return code;
}
