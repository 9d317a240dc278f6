/* mpi_allreduce: MPI_Allreduce (float, sum) timed the way allreduce_bench
 * times shoal_allreduce, with the same flags, table and JSON (-J), so that
 * tools/compare_mpi can set the two side by side. It uses MPI only: build
 * it with the MPI's own wrapper (mpicc.openmpi, mpicc.mpich) and start it
 * with that MPI's launcher; the Makefile does not build it.
 *
 * Each size runs out of place and in place (MPI_IN_PLACE): -w untimed
 * calls, a barrier, then -n timed calls; the time shown is the mean per
 * call on the slowest rank. With -c 1 one more call on fresh inputs is
 * compared with the exact sum, and the wrong elements are summed over ranks.
 *
 * --memcpy runs without MPI (no MPI_Init, one process): the single-thread
 * memcpy bandwidth at each size, median of several runs, as the baseline
 * that compare_mpi divides by. */
#include <mpi.h>

#include "bench_text.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
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

typedef struct {
    size_t min_bytes;
    size_t max_bytes;
    size_t step_factor;
    int iters;
    int warmup;
    int check;
    int memcpy_mode;
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

/* ---- Command line ---------------------------------------------------- */

static void mpib_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: mpirun -np <n> %s [options]   (or %s --memcpy [options])\n"
            "  -b,--minbytes <size>     smallest size (default 8); sizes take K, M, G\n"
            "  -e,--maxbytes <size>     largest size (default 128M)\n"
            "  -f,--stepfactor <n>      multiplication factor between sizes (default 2)\n"
            "  -n,--iters <n>           timed iterations per size (default 20)\n"
            "  -w,--warmup_iters <n>    untimed iterations before each measurement (default 1)\n"
            "  -c,--check <0/1>         compare each result with the exact sum (default 1)\n"
            "  -J,--json <file>         rank 0 also writes the settings and results as\n"
            "                           JSON to <file>\n"
            "  -M,--memcpy              no MPI: single-thread memcpy bandwidth per size,\n"
            "                           median of %d runs\n"
            "  -h,--help                this text\n",
            prog, prog, MPIB_MEMCPY_RUNS);
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

static const struct {
    char key;
    const char *long_name;
    int takes_value;
} mpib_flags[] = {
    {'b', "minbytes", 1}, {'e', "maxbytes", 1}, {'f', "stepfactor", 1}, {'n', "iters", 1},
    {'w', "warmup_iters", 1}, {'c', "check", 1}, {'J', "json", 1}, {'M', "memcpy", 0},
    {'h', "help", 0},
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
    case 'M': o->memcpy_mode = 1; return 0;
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
                if (mpib_flags[k].key == arg[1])
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
    if (o->memcpy_mode) {
        fprintf(f, "  \"collective\": \"memcpy\",\n  \"runs\": %d,\n", MPIB_MEMCPY_RUNS);
    } else {
        fprintf(f, "  \"collective\": \"allreduce\",\n  \"ranks\": %d,\n", nranks);
        fprintf(f, "  \"dtype\": \"float\",\n  \"op\": \"sum\",\n"
                "  \"algorithm\": \"MPI_Allreduce\",\n  \"iterations\": %d,\n"
                "  \"warmup\": %d,\n  \"check\": %d,\n", o->iters, o->warmup, o->check);
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

/* ---- MPI_Allreduce --------------------------------------------------- */

/* Input of rank r at index i: integers of magnitude <= 2^24 / nranks, so
 * that every partial sum, in any order, is exact in float. */
static float mpib_value(int r, int nranks, size_t i)
{
    size_t a = ((size_t)1 << 24) / (size_t)nranks;
    return (float)((double)((i * 5 + (size_t)r * 3 + 1) % (a + 1)) - (double)(a / 2));
}

static void mpib_input(float *buf, size_t count, int rank, int nranks)
{
    for (size_t i = 0; i < count; i++)
        buf[i] = mpib_value(rank, nranks, i);
}

/* Mean seconds per call over o->iters calls on this rank, after the
 * warm-up and a barrier. */
static double mpib_time(const mpib_opts_t *o, mpib_bufs_t *b, size_t count, int in_place)
{
    const void *send = in_place ? MPI_IN_PLACE : (const void *)b->send;
    for (int w = 0; w < o->warmup; w++)
        MPI_Allreduce(send, b->recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = mpib_now_s();
    for (int it = 0; it < o->iters; it++)
        MPI_Allreduce(send, b->recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return (mpib_now_s() - t0) / (double)o->iters;
}

/* One call on fresh inputs (in place: in recv; out of place: recv
 * poisoned), compared with b->expect; returns the wrong elements. */
static long long mpib_check(mpib_bufs_t *b, size_t count, int in_place, int rank, int nranks)
{
    if (in_place)
        mpib_input(b->recv, count, rank, nranks);
    else
        memset(b->recv, MPIB_POISON, count * sizeof(float));
    MPI_Allreduce(in_place ? MPI_IN_PLACE : (const void *)b->send, b->recv, (int)count,
                  MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += memcmp(&b->recv[i], &b->expect[i], sizeof(float)) != 0;
    return wrong;
}

/* One line of the table (and of the JSON): both placements of one size. */
static long long mpib_row(const mpib_opts_t *o, mpib_bufs_t *b, size_t bytes, int rank,
                          int nranks, FILE *json, long row)
{
    size_t count = bytes / sizeof(float);
    double us[2];
    long long wrong[2] = {0, 0};
    mpib_input(b->send, count, rank, nranks);
    if (o->check) {
        for (size_t i = 0; i < count; i++) {
            double sum = 0;
            for (int r = 0; r < nranks; r++)
                sum += mpib_value(r, nranks, i);
            b->expect[i] = (float)sum;
        }
    }
    for (int p = 0; p < 2; p++) {
        if (p)
            mpib_input(b->recv, count, rank, nranks);
        us[p] = mpib_time(o, b, count, p) * 1e6;
        if (o->check)
            wrong[p] = mpib_check(b, count, p, rank, nranks);
    }
    /* Like nccl-tests: a collective lasts as long as its slowest rank. */
    double us_max[2];
    long long wrong_sum[2];
    MPI_Reduce(us, us_max, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(wrong, wrong_sum, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank != 0)
        return 0;
    size_t shown = count * sizeof(float);
    double factor = 2.0 * (double)(nranks - 1) / (double)nranks;
    printf("%12zu  %12zu  %8s  %6s  %6d", shown, count, "float", "sum", -1);
    if (json)
        fprintf(json, "%s\n    {\"bytes\": %zu, \"count\": %zu, \"type\": \"float\", "
                "\"op\": \"sum\", \"root\": -1", row ? "," : "", shown, count);
    for (int p = 0; p < 2; p++) {
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
    printf("# mpi_allreduce: MPI_Allreduce float sum, table of nccl-tests' all_reduce_perf\n");
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
    size_t bytes = o->max_bytes ? o->max_bytes : 1;
    mpib_bufs_t b = {malloc(bytes), calloc(1, bytes), o->check ? malloc(bytes) : NULL};
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
     * allreduce_bench's ranks have run the all-reduces of its header. */
    for (int w = 0; w < 100; w++)
        MPI_Allreduce(MPI_IN_PLACE, b.recv, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
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
    };
    int pr = mpib_parse_args(argc, argv, &o);
    if (pr != 0) {
        mpib_usage(pr > 0 ? stdout : stderr, argv[0]);
        return pr > 0 ? 0 : 2;
    }
    if (o.memcpy_mode)
        return mpib_memcpy_main(&o);
    MPI_Init(&argc, &argv);
    int code = mpib_mpi_main(&o);
    /* Rank 0 alone knows the sum of wrong elements and whether its file
     * was written: every rank exits with its verdict. */
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return code;
}
