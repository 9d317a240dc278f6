/* init_bench: how long a communicator takes to form, for ranks started by
 * a launcher (shoal_comm_init_env: mpirun, srun, torchrun, SHOAL_RANK...),
 * e.g. by tools/netns_bench.sh with BENCH pointing here.
 *
 * Each rank reads the wall clock (CLOCK_REALTIME: ranks on one machine,
 * in network namespaces or not, share it) before and after
 * shoal_comm_init_env. The job's init time is from the moment the last
 * rank called it to the moment the last rank had it back: the launcher's
 * skew in starting the processes is left out. Then comes one all-reduce
 * of 8 bytes (the ring's neighbours, or the one-shot's every peer, which
 * lazily connected tcp connects then), timed the same way, and a second
 * one, connected. Rank 0 prints the three figures in milliseconds.
 * Arguments are ignored (netns_bench.sh passes bench flags). */
#include "shoal.h"

#include <stdio.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The latest start and the latest end over the ranks, in seconds. */
static shoal_status_t spans(shoal_comm_t comm, double start, double end, double *span_p)
{
    double t[2] = {start, end};
    shoal_status_t s = shoal_allreduce(t, t, 2, SHOAL_FLOAT64, SHOAL_MAX, comm);
    *span_p = t[1] - t[0];
    return s;
}

int main(void)
{
    shoal_comm_t comm;
    double t0 = now_s();
    shoal_status_t s = shoal_comm_init_env(&comm);
    double t1 = now_s();
    if (s != SHOAL_OK) {
        fprintf(stderr, "# init_bench: shoal_comm_init_env: %s (%s)\n", shoal_status_string(s),
                shoal_comm_last_error(NULL));
        return 1;
    }
    int rank = 0, nranks = 0;
    shoal_comm_rank(comm, &rank);
    shoal_comm_size(comm, &nranks);
    double x = 1.0, first[2], second[2], init_s = 0, first_s = 0, second_s = 0;
    first[0] = now_s();
    s = shoal_allreduce(&x, &x, 1, SHOAL_FLOAT64, SHOAL_SUM, comm);
    first[1] = now_s();
    if (s == SHOAL_OK) {
        second[0] = now_s();
        s = shoal_allreduce(&x, &x, 1, SHOAL_FLOAT64, SHOAL_SUM, comm);
        second[1] = now_s();
    }
    if (s == SHOAL_OK)
        s = spans(comm, t0, t1, &init_s);
    if (s == SHOAL_OK)
        s = spans(comm, first[0], first[1], &first_s);
    if (s == SHOAL_OK)
        s = spans(comm, second[0], second[1], &second_s);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# init_bench: rank %d: %s (%s)\n", rank, shoal_status_string(s),
                shoal_comm_last_error(comm));
        shoal_comm_abort(comm);
        return 1;
    }
    if (rank == 0)
        printf("init_ms %.3f first_allreduce_ms %.3f second_allreduce_ms %.3f ranks %d\n",
               init_s * 1e3, first_s * 1e3, second_s * 1e3, nranks);
    return shoal_comm_destroy(comm) == SHOAL_OK ? 0 : 1;
}
