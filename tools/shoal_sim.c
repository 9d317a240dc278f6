/* shoal_sim: predicted time and bus bandwidth of the real algorithm
 * schedules on a made-up cluster of N hosts x M ranks (src/sim/sim.h),
 * per algorithm and size, in the table layout of allreduce_bench. */
#include "base/config.h"
#include "base/dtype.h"
#include "base/log.h"
#include "sim/sim.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COLS 8

static void usage(FILE *out)
{
    fprintf(out,
            "usage: shoal_sim -N hosts -M ranks_per_host [options]\n"
            "  -c coll     allreduce (default), reducescatter, allgather, broadcast, reduce,\n"
            "              alltoall, gather, scatter\n"
            "  -a list     algorithms, comma-separated, \"auto\" for the cost model's choice,\n"
            "              \"all\" (default) for every one that can serve the call, then auto\n"
            "  -b size     smallest size (default 8), as nccl-tests counts it\n"
            "  -e size     largest size (default 128M)\n"
            "  -f factor   size multiplier (default 4)\n"
            "  -d dtype    element type (default float)\n"
            "  -L links    class:latency:bandwidth,... (SHOAL_TOPO_LINKS syntax)\n"
            "  -i class    link class between hosts (default tcp; rdma, nvlink...)\n"
            "  -u numa     NUMA nodes per host (ranks split evenly)\n"
            "  -C chunk    pipeline piece (default SHOAL_CHUNK_SIZE)\n"
            "  -m          instead of times: tcp's memory per rank after one call of size -b\n"
            "              per algorithm, every peer connected at init (eager) against the\n"
            "              peers the schedule touched with SHOAL_TCP_MEM's slot rule (lazy)\n");
}

static int parse_coll(const char *s, shoal_coll_kind_t *kind_p)
{
    for (int k = 0; k < SHOAL_COLL_SEND; k++) {
        if (k != SHOAL_COLL_ALLTOALLV && !strcmp(s, shoal_coll_kind_name((shoal_coll_kind_t)k))) {
            *kind_p = (shoal_coll_kind_t)k;
            return 0;
        }
    }
    return -1;
}

static int parse_dtype(const char *s, shoal_dtype_t *dtype_p)
{
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++) {
        if (!strcmp(s, shoal_dtype_name((shoal_dtype_t)d))) {
            *dtype_p = (shoal_dtype_t)d;
            return 0;
        }
    }
    return -1;
}

static int parse_class(const char *s, shoal_link_class_t *cls_p)
{
    for (int c = 0; c < SHOAL_LINK_CLASS_COUNT; c++) {
        if (!strcmp(s, shoal_link_class_name((shoal_link_class_t)c))) {
            *cls_p = (shoal_link_class_t)c;
            return 0;
        }
    }
    return -1;
}

static int parse_size(const char *s, size_t *v)
{
    return shoal_config_parse_size(s, v) != 0 ? -1 : 0;
}

/* -m: one call of each column's algorithm, then tcp's memory per rank,
 * the largest over the ranks (sim.h, shoal_sim_memory). */
static int print_memory(shoal_sim_t *sim, shoal_coll_kind_t kind, size_t count,
                        shoal_dtype_t dtype, const char *const *cols, int ncols)
{
    int n = shoal_sim_nranks(sim);
    int rc = 0;
    printf("# tcp slot memory per rank (both directions, the most of any rank) after one "
           "call of %zu x %s\n", count, shoal_dtype_name(dtype));
    printf("%-14s %-10s %6s %11s %11s %11s %11s\n", "collective", "algorithm", "ranks",
           "eager peers", "eager MiB", "lazy peers", "lazy MiB");
    for (int c = 0; c < ncols; c++) {
        const shoal_algo_ops_t *a = shoal_algo_find(kind, cols[c]);
        const char *name = cols[c];
        double t;
        shoal_sim_forget_peers(sim);
        shoal_status_t s = shoal_sim_run(sim, kind, count, dtype, a, &t, &name);
        if (s != SHOAL_OK) {
            printf("%-14s %-10s %6d %11s\n", shoal_coll_kind_name(kind), cols[c], n,
                   shoal_status_string(s));
            rc = 1;
            continue;
        }
        shoal_sim_mem_t most = {0};
        for (int r = 0; r < n; r++) {
            shoal_sim_mem_t m;
            shoal_sim_memory(sim, r, &m);
            if (m.peers_all > most.peers_all)
                most.peers_all = m.peers_all;
            if (m.bytes_eager > most.bytes_eager)
                most.bytes_eager = m.bytes_eager;
            if (m.peers_touched > most.peers_touched)
                most.peers_touched = m.peers_touched;
            if (m.bytes_lazy > most.bytes_lazy)
                most.bytes_lazy = m.bytes_lazy;
        }
        printf("%-14s %-10s %6d %11d %11.1f %11d %11.1f\n", shoal_coll_kind_name(kind), name, n,
               most.peers_all, (double)most.bytes_eager / (1 << 20), most.peers_touched,
               (double)most.bytes_lazy / (1 << 20));
        fflush(stdout);
    }
    return rc;
}

/* The bus bandwidth factor of nccl-tests for kind on n ranks. */
static double bus_factor(shoal_coll_kind_t kind, int n)
{
    switch (kind) {
    case SHOAL_COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case SHOAL_COLL_BROADCAST:
    case SHOAL_COLL_REDUCE:
        return 1.0;
    default:
        return (double)(n - 1) / n;
    }
}

/* Elements per rank of a call whose nccl-tests size is bytes. */
static size_t call_count(shoal_coll_kind_t kind, size_t bytes, size_t es, int n)
{
    switch (kind) {
    case SHOAL_COLL_ALLREDUCE:
    case SHOAL_COLL_BROADCAST:
    case SHOAL_COLL_REDUCE:
        return bytes / es;
    default:
        return bytes / es / (size_t)n;
    }
}

int main(int argc, char **argv)
{
    int nhosts = 0, per_host = 0, numa = 0, memory = 0;
    size_t minb = 8, maxb = (size_t)128 << 20, factor = 4, chunk = 0;
    shoal_coll_kind_t kind = SHOAL_COLL_ALLREDUCE;
    shoal_dtype_t dtype = SHOAL_FLOAT32;
    const char *algos = "all", *links = NULL, *inter = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "N:M:c:a:b:e:f:d:L:i:u:C:mh")) != -1) {
        int bad = 0;
        switch (opt) {
        case 'N': nhosts = atoi(optarg); break;
        case 'M': per_host = atoi(optarg); break;
        case 'c': bad = parse_coll(optarg, &kind); break;
        case 'a': algos = optarg; break;
        case 'b': bad = parse_size(optarg, &minb); break;
        case 'e': bad = parse_size(optarg, &maxb); break;
        case 'f': bad = parse_size(optarg, &factor) || factor < 2; break;
        case 'd': bad = parse_dtype(optarg, &dtype); break;
        case 'L': links = optarg; break;
        case 'i': inter = optarg; break;
        case 'u': numa = atoi(optarg); break;
        case 'C': bad = parse_size(optarg, &chunk); break;
        case 'm': memory = 1; break;
        case 'h': usage(stdout); return 0;
        default: bad = 1;
        }
        if (bad) {
            fprintf(stderr, "shoal_sim: bad -%c %s\n", opt, optarg ? optarg : "");
            usage(stderr);
            return 2;
        }
    }
    if (nhosts < 1 || per_host < 1 || optind != argc) {
        usage(stderr);
        return 2;
    }
    shoal_sim_config_t cfg;
    if (shoal_sim_config_init(&cfg, nhosts, per_host) != SHOAL_OK ||
        (links && shoal_links_parse(links, &cfg.links) != SHOAL_OK)) {
        fprintf(stderr, "shoal_sim: bad link figures (see the log above)\n");
        return 2;
    }
    if (inter && parse_class(inter, &cfg.links.inter) != 0) {
        fprintf(stderr, "shoal_sim: unknown link class %s\n", inter);
        return 2;
    }
    cfg.numa_per_host = numa;
    cfg.chunk_size = chunk;
    shoal_sim_t *sim;
    if (shoal_sim_create(&cfg, &sim) != SHOAL_OK)
        return 1;
    int n = shoal_sim_nranks(sim);

    /* The columns: the named algorithms, or every one of kind, then auto. */
    const char *cols[MAX_COLS + 1];
    int ncols = 0;
    char *list = strdup(algos);
    if (!strcmp(algos, "all")) {
        for (int i = 0; ncols < MAX_COLS; i++) {
            const shoal_algo_ops_t *a = shoal_algo_at(kind, i);
            if (!a)
                break;
            cols[ncols++] = a->name;
        }
        cols[ncols++] = "auto";
    } else {
        for (char *save, *t = strtok_r(list, ",", &save); t && ncols < MAX_COLS + 1;
             t = strtok_r(NULL, ",", &save)) {
            if (strcmp(t, "auto") && !shoal_algo_find(kind, t)) {
                fprintf(stderr, "shoal_sim: no algorithm %s for %s\n", t,
                        shoal_coll_kind_name(kind));
                return 2;
            }
            cols[ncols++] = t;
        }
    }

    size_t es = shoal_dtype_bytes(dtype);
    if (memory) {
        int mrc = print_memory(sim, kind, call_count(kind, minb, es, n), dtype, cols, ncols);
        free(list);
        shoal_sim_destroy(sim);
        return mrc;
    }

    printf("# shoal_sim: %d hosts x %d ranks = %d ranks, %s %s sum, chunk %zu B\n", nhosts,
           per_host, n, shoal_coll_kind_name(kind), shoal_dtype_name(dtype),
           shoal_sim_team(sim, 0)->chunk_size);
    printf("# inside a host %s: %.2f us, %.2f GB/s; between hosts %s: %.2f us, %.2f GB/s\n",
           shoal_link_class_name(cfg.links.intra), cfg.links.cls[cfg.links.intra].lat_s * 1e6,
           cfg.links.cls[cfg.links.intra].bw_Bps / 1e9, shoal_link_class_name(cfg.links.inter),
           cfg.links.cls[cfg.links.inter].lat_s * 1e6,
           cfg.links.cls[cfg.links.inter].bw_Bps / 1e9);
    printf("# predicted time (us) and busbw (GB/s) per algorithm\n");
    printf("%12s", "size");
    for (int c = 0; c < ncols; c++)
        printf(" %11s %7s", cols[c], "busbw");
    printf("  %s\n", ncols && !strcmp(cols[ncols - 1], "auto") ? "auto is" : "");

    int rc = 0;
    for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
        size_t count = call_count(kind, bytes, es, n);
        size_t size = count * es * (bytes / es == count ? 1 : (size_t)n); /* as rounded */
        printf("%12zu", size);
        const char *chosen = "";
        for (int c = 0; c < ncols; c++) {
            const shoal_algo_ops_t *a = shoal_algo_find(kind, cols[c]);
            double t;
            const char *name = NULL;
            /* An algorithm that cannot serve this call gets a dash. */
            if (a && a->cost(shoal_sim_team(sim, 0),
                             &(shoal_coll_args_t){.kind = kind, .count = count,
                                                  .dtype = dtype, .op = SHOAL_SUM}) < 0) {
                printf(" %11s %7s", "-", "-");
                continue;
            }
            shoal_status_t s = shoal_sim_run(sim, kind, count, dtype, a, &t, &name);
            if (s != SHOAL_OK) {
                printf(" %11s %7s", "error", shoal_status_string(s));
                rc = 1;
                continue;
            }
            double algbw = t > 0 ? (double)size / t : 0;
            printf(" %11.1f %7.2f", t * 1e6, algbw * bus_factor(kind, n) / 1e9);
            if (!strcmp(cols[c], "auto"))
                chosen = name;
        }
        printf("  %s\n", chosen);
        fflush(stdout);
        if (bytes > maxb / factor)
            break;
    }
    free(list);
    shoal_sim_destroy(sim);
    return rc;
}
