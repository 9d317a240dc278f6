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
 * form of --coll instead (all-reduce, all-gather, reduce-scatter or
 * all-to-all: bench_compress.c), with the wire bytes, the ratio and the
 * error against the exact result in the table. --mem shared takes the send
 * and receive buffers from shoal_mem_alloc, whose blocks peers can map: the
 * single-copy ("put") collectives then write into them or read from them
 * directly. --mem device puts them in GPU memory and times the
 * stream-ordered forms of the calls (shoal_allreduce_stream...): see
 * shoal_bench_time for how such a loop is timed.
 *
 * The command line is in bench_args.c, the collectives with their inputs
 * and expected results in bench_coll.c, the buffers of each --mem in
 * bench_mem.c, the header and the JSON file's settings in bench_report.c;
 * this file times and checks the rows, prints them and runs the ranks. */
#include "shoal.h"

#include "bench_args.h"
#include "bench_coll.h"
#include "bench_compress.h"
#include "bench_mem.h"
#include "bench_report.h"
#include "bench_text.h"

#include "core/introspect.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHOAL_BENCH_GUARD_BYTE 0xa5
#define SHOAL_BENCH_MEMCPY_BYTES (64u << 20)
#define SHOAL_BENCH_MEMCPY_RUNS 7

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

/* ---- Timing and checking --------------------------------------------- */

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

/* A row of --compress: both placements of the compressed collective, laid
 * out as the plain row of --coll is (the count per rank, the size column
 * the larger buffer, nccl-tests' bus factor), then the wire bytes per rank
 * and the ratio of the check's call (of the last timed one with -c 0). The
 * relative error replaces #wrong; elements of the send buffer (or, in
 * place, input blocks) changed, ranks whose results differ where all must
 * agree, and clobbered guard bytes still count as wrong and out of
 * bounds. */
static shoal_status_t shoal_bench_comp_print(shoal_comm_t comm, const shoal_bench_opts_t *o,
                                             const shoal_bench_row_t *row,
                                             shoal_bench_bufs_t *b, shoal_bench_totals_t *tot)
{
    shoal_bench_comp_row_t cr = {
        .comm = comm,
        .rank = row->rank,
        .nranks = row->nranks,
        .count = row->count,
        .send_count = row->send_count,
        .recv_count = row->recv_count,
        .dtype = row->dtype,
        .op = row->coll->reduces ? row->op : SHOAL_SUM,
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
    const char *redop = row->coll->reduces ? shoal_bench_op_names[row->op] : "none";
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
    /* The compressed rows compute their exact sums as they go. */
    if (shoal_bench_bufs_alloc(comm, o->mem, o->max_bytes, o->check && !o->comp.on, rank,
                               nranks, b))
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
