/* The cost of SHOAL_BOOTSTRAP_MAC: time of a bootstrap all-gather of 8 B
 * per rank and of a barrier, with the tags off and on, interleaved over
 * several rounds; prints each round and the medians. Not a test: timings
 * live here, not in tests/ (built as $(BUILD)/tests/bench_bootstrap).
 *
 *   bench_bootstrap [nranks (2)] [rounds (7)] [iterations (2000)] */
#include "harness.h"

#include "base/config.h"
#include "base/clock.h"
#include "core/bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

typedef struct {
    int iters;
    double *us; /* shared: all-gather, barrier (rank 0's, per operation) */
} bench_t;

static int bench_rank(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    bench_t *b = arg;
    shoal_bootstrap_t *bs;
    if (shoal_bootstrap_init(id, rank, nranks, 60ull * 1000000000ull, &bs) != SHOAL_OK)
        return 1;
    uint64_t buf[64] = {0};
    for (int i = 0; i < 200; i++)
        if (shoal_bootstrap_allgather(bs, buf, 8) != SHOAL_OK)
            return 1;
    uint64_t t0 = shoal_now_ns();
    for (int i = 0; i < b->iters; i++) {
        buf[rank] = (uint64_t)i;
        if (shoal_bootstrap_allgather(bs, buf, 8) != SHOAL_OK)
            return 1;
    }
    uint64_t t1 = shoal_now_ns();
    for (int i = 0; i < b->iters; i++)
        if (shoal_bootstrap_barrier(bs) != SHOAL_OK)
            return 1;
    uint64_t t2 = shoal_now_ns();
    if (rank == 0) {
        b->us[0] = (double)(t1 - t0) / 1e3 / b->iters;
        b->us[1] = (double)(t2 - t1) / 1e3 / b->iters;
    }
    shoal_bootstrap_destroy(bs);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int nranks = argc > 1 ? atoi(argv[1]) : 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 7;
    bench_t b = {.iters = argc > 3 ? atoi(argv[3]) : 2000};
    if (nranks < 2 || nranks > 64 || rounds < 1 || rounds > 100 || b.iters < 1)
        return 2;
    b.us = mmap(NULL, 2 * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                -1, 0);
    double (*res)[2][2] = calloc((size_t)rounds, sizeof(*res)); /* [round][mac][op] */
    if (b.us == MAP_FAILED || !res)
        return 2;
    printf("# bootstrap, %d ranks, %d iterations: us per operation (rank 0)\n", nranks, b.iters);
    printf("# round  allgather-8B off  on   barrier off  on\n");
    for (int r = 0; r < rounds; r++) {
        for (int m = 0; m < 2; m++) {
            /* Alternate which goes first, so that drift hits both alike. */
            int mac = (r + m) % 2;
            harness_setenv("SHOAL_BOOTSTRAP_MAC", mac ? "y" : "n");
            if (harness_run_ranks(nranks, bench_rank, &b, 300) != 0)
                return 1;
            res[r][mac][0] = b.us[0];
            res[r][mac][1] = b.us[1];
        }
        printf("%7d  %16.2f %5.2f  %11.2f %5.2f\n", r, res[r][0][0], res[r][1][0], res[r][0][1],
               res[r][1][1]);
    }
    double med[2][2];
    for (int m = 0; m < 2; m++) {
        for (int op = 0; op < 2; op++) {
            double v[100];
            for (int r = 0; r < rounds; r++)
                v[r] = res[r][m][op];
            qsort(v, (size_t)rounds, sizeof(v[0]), cmp);
            med[m][op] = v[rounds / 2];
        }
    }
    printf("median   %16.2f %5.2f  %11.2f %5.2f\n", med[0][0], med[1][0], med[0][1], med[1][1]);
    printf("# MAC cost: all-gather %+.2f us (%+.0f%%), barrier %+.2f us (%+.0f%%)\n",
           med[1][0] - med[0][0], 100 * (med[1][0] / med[0][0] - 1), med[1][1] - med[0][1],
           100 * (med[1][1] / med[0][1] - 1));
    free(res);
    return 0;
}
