/* allreduce_bench's header and JSON settings (bench_report.h). */
#include "bench_report.h"

#include "bench_text.h"

#include "base/config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Pid, host and device (-1 for host memory) of every rank, gathered with
 * a sum over zeroed slots. */
typedef struct {
    int64_t pid;
    int64_t device;
    char host[SHOAL_BENCH_HOST_MAX];
} shoal_bench_rank_info_t;

shoal_status_t shoal_bench_header(shoal_comm_t comm, int rank, int nranks,
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
            char desc[384];
            shoal_bench_comp_describe(&o->comp, desc, sizeof(desc));
            printf("# Compression: %s\n# inputs: values spread over [-1, 1); relerr = "
                   "||result - exact|| / ||exact|| of one call from a reset compressor, "
                   "exact: %s; sent: bytes per rank and call; ratio: %s over them\n", desc,
                   shoal_bench_comp_exact_text(&o->comp), shoal_bench_comp_plain_text(&o->comp));
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
FILE *shoal_bench_json_open(const shoal_bench_opts_t *o, int nranks)
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
int shoal_bench_json_close(FILE *f, const char *path, int code)
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
