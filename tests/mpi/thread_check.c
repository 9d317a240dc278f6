/* An unchanged MPI program for the MPI door's tests of threads: under
 * MPI_THREAD_MULTIPLE (the program fails if MPI does not provide it),
 * THREADS threads per rank, each with a duplicate of MPI_COMM_WORLD made
 * by the main thread, from which the thread makes a communicator of its
 * own (thread 0 by MPI_Comm_split with the ranks reversed, thread 1 by
 * MPI_Comm_dup, thread 2 by MPI_Comm_create from the reversed group) and
 * runs ITERS rounds of MPI_Allreduce (int sum, double max) and MPI_Bcast
 * (from every root in turn) on it, with counts that change each round,
 * and a few all-reduces on the duplicate too. The communicators are freed
 * in an order that differs between threads, some by the main thread after
 * the others are done. Each result is checked against what every rank can
 * compute alone; a thread that found a wrong value goes on calling, so
 * that the others do not wait for it. Every rank makes the same number of
 * collective calls; rank 0 prints "thread_check: ok, N collective calls on
 * every rank", or "thread_check: FAILED" after the first wrong value of
 * each thread, and exits 1. */
#include <mpi.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 3
#define ITERS 24
#define N 777

typedef struct {
    MPI_Comm base; /* a dup of MPI_COMM_WORLD, from the main thread */
    int t;         /* the thread's index */
    int freed_base;
    int calls, bad;
} job_t;

/* Rank r's value at i in round it of thread t: small, so sums stay exact. */
static int val(int r, int i, int it, int t)
{
    return (r * 7 + i * 3 + it + t) % 5 - 2;
}

static int wrong(job_t *j, int rank, const char *what, int it, int i)
{
    fprintf(stderr, "thread_check: rank %d thread %d: %s wrong in round %d at %d\n", rank, j->t,
            what, it, i);
    return 1;
}

/* The thread's own communicator, made from base inside the thread. */
static MPI_Comm make_comm(job_t *j, int rank, int size)
{
    MPI_Comm c = MPI_COMM_NULL;
    if (j->t == 0) {
        MPI_Comm_split(j->base, 0, size - 1 - rank, &c);
    } else if (j->t == 1) {
        MPI_Comm_dup(j->base, &c);
    } else {
        MPI_Group all, reversed;
        int *ranks = malloc((size_t)size * sizeof(int));
        for (int r = 0; r < size; r++)
            ranks[r] = size - 1 - r;
        MPI_Comm_group(j->base, &all);
        MPI_Group_incl(all, size, ranks, &reversed);
        MPI_Comm_create(j->base, reversed, &c);
        MPI_Group_free(&reversed);
        MPI_Group_free(&all);
        free(ranks);
    }
    return c;
}

static void *run(void *arg)
{
    job_t *j = arg;
    int rank, size;
    MPI_Comm_rank(j->base, &rank);
    MPI_Comm_size(j->base, &size);
    MPI_Comm mine = make_comm(j, rank, size);
    int me, n;
    MPI_Comm_rank(mine, &me);
    MPI_Comm_size(mine, &n);
    if (n != size || me != (j->t == 1 ? rank : size - 1 - rank)) {
        fprintf(stderr, "thread_check: rank %d thread %d: rank %d of %d in its communicator\n",
                rank, j->t, me, n);
        j->bad = 1;
    }
    int *in = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));
    double *din = malloc(N * sizeof(double)), *dout = malloc(N * sizeof(double));

    for (int it = 0; it < ITERS; it++) {
        int count = 1 + (it * 37 + j->t * 101) % N;
        for (int i = 0; i < count; i++) {
            in[i] = val(me, i, it, j->t);
            din[i] = val(me, i, it, j->t) / 4.0;
        }
        MPI_Allreduce(in, out, count, MPI_INT, MPI_SUM, mine);
        MPI_Allreduce(din, dout, count, MPI_DOUBLE, MPI_MAX, mine);
        j->calls += 2;
        for (int i = 0; i < count && !j->bad; i++) {
            int sum = 0, max = val(0, i, it, j->t);
            for (int r = 0; r < n; r++) {
                int v = val(r, i, it, j->t);
                sum += v;
                max = v > max ? v : max;
            }
            if (out[i] != sum)
                j->bad = wrong(j, rank, "MPI_Allreduce (int sum)", it, i);
            else if (dout[i] != max / 4.0)
                j->bad = wrong(j, rank, "MPI_Allreduce (double max)", it, i);
        }

        int root = it % n;
        for (int i = 0; i < count; i++)
            in[i] = me == root ? val(root, i, it, j->t) : -100;
        MPI_Bcast(in, count, MPI_INT, root, mine);
        j->calls++;
        for (int i = 0; i < count && !j->bad; i++)
            if (in[i] != val(root, i, it, j->t))
                j->bad = wrong(j, rank, "MPI_Bcast", it, i);

        /* Now and then, the duplicate the thread was given. */
        if (it % 20 == 0) {
            int one = 1, all = 0;
            MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_SUM, j->base);
            j->calls++;
            if (all != size)
                j->bad = wrong(j, rank, "MPI_Allreduce on the duplicate", it, 0);
        }
    }

    /* Thread 0 frees its own communicator first, thread 1 the duplicate
     * first; thread 2 leaves the duplicate to the main thread. */
    if (j->t == 1) {
        MPI_Comm_free(&j->base);
        j->freed_base = 1;
    }
    MPI_Comm_free(&mine);
    if (j->t == 0) {
        MPI_Comm_free(&j->base);
        j->freed_base = 1;
    }
    free(in);
    free(out);
    free(din);
    free(dout);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "thread_check: rank %d: MPI_THREAD_MULTIPLE not provided (%d)\n", rank,
                provided);
        MPI_Finalize();
        return 1;
    }

    job_t jobs[THREADS] = {{0}};
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t].t = t;
        MPI_Comm_dup(MPI_COMM_WORLD, &jobs[t].base);
    }
    for (int t = 0; t < THREADS; t++) {
        if (pthread_create(&threads[t], NULL, run, &jobs[t]) != 0) {
            fprintf(stderr, "thread_check: rank %d: no thread\n", rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    int bad = 0, calls = 1;
    for (int t = THREADS - 1; t >= 0; t--) {
        pthread_join(threads[t], NULL);
        if (!jobs[t].freed_base)
            MPI_Comm_free(&jobs[t].base);
        bad |= jobs[t].bad;
        calls += jobs[t].calls;
    }

    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        if (any)
            printf("thread_check: FAILED\n");
        else
            printf("thread_check: ok, %d collective calls on every rank\n", calls);
    }
    MPI_Finalize();
    return any;
}
