/* An unchanged MPI program for the MPI door's tests: all-reduces of int,
 * long long, float and double with every op the door takes, in place and
 * not, on MPI_COMM_WORLD and on a split of it; broadcasts and barriers.
 * Each result is checked against what every rank can compute alone.
 * Prints "door_check: ok" on rank 0, or the first wrong value, and
 * exits 1. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1001

static int fail(int rank, const char *what, int i)
{
    fprintf(stderr, "door_check: rank %d: %s wrong at %d\n", rank, what, i);
    return 1;
}

/* Rank r's value at i: small, so sums and products stay exact. */
static long long val(int r, int i)
{
    return (long long)((r * 7 + i * 3) % 5) - 2;
}

static int check_comm(MPI_Comm c)
{
    int rank, size, bad = 0;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
    const char *names[] = {"sum", "prod", "min", "max"};
    int *in = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));
    double *din = malloc(N * sizeof(double)), *dout = malloc(N * sizeof(double));
    for (int o = 0; o < 4 && !bad; o++) {
        for (int inplace = 0; inplace < 2 && !bad; inplace++) {
            for (int i = 0; i < N; i++) {
                in[i] = (int)val(rank, i);
                din[i] = (double)val(rank, i);
            }
            if (inplace) {
                memcpy(out, in, N * sizeof(int));
                memcpy(dout, din, N * sizeof(double));
                MPI_Allreduce(MPI_IN_PLACE, out, N, MPI_INT, ops[o], c);
                MPI_Allreduce(MPI_IN_PLACE, dout, N, MPI_DOUBLE, ops[o], c);
            } else {
                MPI_Allreduce(in, out, N, MPI_INT, ops[o], c);
                MPI_Allreduce(din, dout, N, MPI_DOUBLE, ops[o], c);
            }
            for (int i = 0; i < N && !bad; i++) {
                long long want = val(0, i);
                for (int r = 1; r < size; r++) {
                    long long v = val(r, i);
                    want = o == 0 ? want + v : o == 1 ? want * v : o == 2 ? (v < want ? v : want)
                                                                          : (v > want ? v : want);
                }
                if (out[i] != want)
                    bad = fail(rank, names[o], i);
                else if (dout[i] != (double)want)
                    bad = fail(rank, names[o], i);
            }
        }
    }
    for (int root = 0; root < size && !bad; root++) {
        for (int i = 0; i < N; i++)
            in[i] = rank == root ? (int)val(root, i) : -100;
        MPI_Bcast(in, N, MPI_INT, root, c);
        for (int i = 0; i < N && !bad; i++)
            if (in[i] != val(root, i))
                bad = fail(rank, "bcast", i);
    }
    MPI_Barrier(c);
    free(in);
    free(out);
    free(din);
    free(dout);
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, bad;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    bad = check_comm(MPI_COMM_WORLD);
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    bad |= check_comm(half);
    MPI_Comm_free(&half);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("door_check: %s\n", any ? "FAILED" : "ok");
    MPI_Finalize();
    return any;
}
