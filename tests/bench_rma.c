/* One-sided put against send/receive between two ranks of this host: the
 * time of a ping-pong (rank 0 puts size bytes into rank 1's window, rank 1
 * waits for the signal and puts them back), per one-way message, beside
 * the same ping-pong through shoal_send/shoal_recv and a memcpy of the
 * size in the same run. Windows come from shoal_mem_alloc (shm writes
 * into them) or malloc (cross-memory attach or slots, as the probe
 * decided). Rounds alternate the order of the two; prints each round and
 * the medians. Not a test: timings live here (built as
 * $(BUILD)/tests/bench_rma).
 *
 *   bench_rma [rounds (7)] [iterations (200)] [shm|tcp (shm)] */
#include "harness.h"

#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const size_t sizes[] = {8, 65536, 4 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

typedef struct {
    int iters;
    int shared;
    double *us; /* shared with the ranks: [size][0 put, 1 send/recv] */
} bench_t;

static int pingpong(shoal_comm_t comm, int rank, int put, void *src, void *dst, shoal_win_t win,
                    size_t size)
{
    int peer = 1 - rank;
    shoal_signal_wait_t w = {.peer = peer, .count = 1};
    for (int leg = 0; leg < 2; leg++) {
        if (leg == rank) {
            if (put ? shoal_put_signal(src, size, peer, win, 0, comm)
                    : shoal_send(src, size, SHOAL_UINT8, peer, comm))
                return 1;
        } else if (put ? shoal_wait_signal(&w, 1, comm)
                       : shoal_recv(dst, size, SHOAL_UINT8, peer, comm)) {
            return 1;
        }
    }
    return 0;
}

static int bench_rank(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    bench_t *b = arg;
    shoal_comm_t comm;
    if (shoal_comm_init(nranks, id, rank, &comm) != SHOAL_OK)
        return 1;
    size_t max = sizes[NSIZES - 1];
    void *src = NULL, *dst = NULL;
    if (b->shared) {
        if (shoal_mem_alloc(max, &src) || shoal_mem_alloc(max, &dst))
            return 1;
    } else if (!(src = calloc(1, max)) || !(dst = calloc(1, max))) {
        return 1;
    }
    shoal_win_t win, swin;
    if (shoal_win_create(dst, max, comm, &win) || shoal_win_create(src, max, comm, &swin))
        return 1;
    for (size_t z = 0; z < NSIZES; z++) {
        for (int k = 0; k < 2; k++) {
            int put = (k + (int)z) % 2 == 0;
            for (int i = 0; i < 5; i++) /* warm-up */
                if (pingpong(comm, rank, put, src, dst, win, sizes[z]))
                    return 1;
            if (shoal_barrier(comm))
                return 1;
            uint64_t t0 = shoal_now_ns();
            for (int i = 0; i < b->iters; i++)
                if (pingpong(comm, rank, put, src, dst, win, sizes[z]))
                    return 1;
            if (rank == 0)
                b->us[2 * z + (put ? 0 : 1)] = (double)(shoal_now_ns() - t0) / 1e3 / b->iters / 2;
        }
    }
    if (shoal_win_free(win, comm) || shoal_win_free(swin, comm) || shoal_comm_destroy(comm))
        return 1;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double memcpy_us(size_t size)
{
    char *a = malloc(size), *c = malloc(size);
    memset(a, 1, size);
    memset(c, 2, size);
    int n = size < 65536 ? 100000 : 200;
    uint64_t t0 = shoal_now_ns();
    for (int i = 0; i < n; i++) {
        memcpy(c, a, size);
        a[i % size] = c[(i + 1) % size];
    }
    double us = (double)(shoal_now_ns() - t0) / 1e3 / n;
    free(a);
    free(c);
    return us;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    bench_t b = {.iters = argc > 2 ? atoi(argv[2]) : 200};
    const char *tl = argc > 3 ? argv[3] : "shm";
    if (rounds < 1 || rounds > 100 || b.iters < 1 || (strcmp(tl, "shm") && strcmp(tl, "tcp")))
        return 2;
    harness_setenv("SHOAL_SHM_ENABLE", strcmp(tl, "shm") ? "n" : "y");
    b.us = mmap(NULL, 2 * NSIZES * sizeof(double), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double (*res)[2][NSIZES][3] = calloc((size_t)rounds, sizeof(*res)); /* [round][shared] */
    if (b.us == MAP_FAILED || !res)
        return 2;
    printf("# 2 ranks over %s, %d ping-pongs: us per one-way message (rank 0)\n", tl, b.iters);
    printf("# round window    size      put  send/recv  memcpy\n");
    for (int r = 0; r < rounds; r++) {
        for (int shared = 0; shared < 2; shared++) {
            b.shared = shared;
            if (harness_run_ranks(2, bench_rank, &b, 600) != 0)
                return 1;
            for (size_t z = 0; z < NSIZES; z++) {
                res[r][shared][z][0] = b.us[2 * z];
                res[r][shared][z][1] = b.us[2 * z + 1];
                res[r][shared][z][2] = memcpy_us(sizes[z]);
                printf("%7d %-8s %8zu %8.2f %10.2f %7.2f\n", r, shared ? "mem_alloc" : "malloc",
                       sizes[z], res[r][shared][z][0], res[r][shared][z][1],
                       res[r][shared][z][2]);
            }
        }
    }
    printf("# medians          size      put  send/recv  memcpy  put/sendrecv  put GB/s\n");
    for (int shared = 0; shared < 2; shared++) {
        for (size_t z = 0; z < NSIZES; z++) {
            double med[3];
            for (int k = 0; k < 3; k++) {
                double v[100];
                for (int r = 0; r < rounds; r++)
                    v[r] = res[r][shared][z][k];
                qsort(v, (size_t)rounds, sizeof(v[0]), cmp);
                med[k] = v[rounds / 2];
            }
            printf("median %-9s %8zu %8.2f %10.2f %7.2f  %12.2f  %8.2f\n",
                   shared ? "mem_alloc" : "malloc", sizes[z], med[0], med[1], med[2],
                   med[0] / med[1], (double)sizes[z] / med[0] / 1e3);
        }
    }
    free(res);
    return 0;
}
