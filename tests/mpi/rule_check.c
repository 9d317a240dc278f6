/* An unchanged MPI program for the MPI door's SHOAL_MPI_PATH=auto test:
 * MPI_Allreduce, MPI_Bcast, MPI_Allgather and MPI_Alltoall, each CALLS
 * times at each of three sizes (8 B, 4 KiB and 256 KiB a rank's block),
 * MPI_Allreduce in place (which the door cannot run again to learn) CALLS
 * times at 256 B, MPI_Barrier CALLS times, MPI_Iallreduce CALLS times at
 * each size, then DUPS times a duplicate of MPI_COMM_WORLD, on which
 * MPI_Allreduce runs 3 times at 8 B before it is freed (each duplicate
 * learns anew, though MPI may give it the freed one's handle). Every
 * result is checked against a scalar reference: whichever path the door
 * gives each call, the answers must be MPI's. A last MPI_Allreduce of one
 * int gathers the verdict. Prints "rule_check: ok" on rank 0. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALLS 10
#define MAX_INTS (256 * 1024 / 4)

static const int sizes[] = {2, 1024, MAX_INTS}; /* ints: 8 B, 4 KiB, 256 KiB */
#define IN_PLACE_INTS 64                            /* 256 B */
#define DUPS 3

static int rank, size, bad;

static void check(const char *what, int n, int got, int want, int at)
{
    if (got != want && !bad) {
        fprintf(stderr, "rule_check: rank %d: %s of %d ints: element %d is %d, want %d\n",
                rank, what, n, at, got, want);
        bad = 1;
    }
}

/* Rank r's value at element i of call c. */
static int value(int r, int i, int c)
{
    return (r * 31 + i * 7 + c * 3) % 1000 - 500;
}

/* In place when in is NULL; on comm. */
static void allreduce_on(MPI_Comm comm, int n, int c, int *in, int *out, int nb)
{
    for (int i = 0; i < n; i++)
        (in ? in : out)[i] = value(rank, i, c);
    if (!in) {
        MPI_Allreduce(MPI_IN_PLACE, out, n, MPI_INT, MPI_SUM, comm);
    } else if (nb) {
        MPI_Request req;
        MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, comm);
    }
    for (int i = 0; i < n; i++) {
        int want = 0;
        for (int r = 0; r < size; r++)
            want += value(r, i, c);
        check(nb ? "MPI_Iallreduce" : "MPI_Allreduce", n, out[i], want, i);
    }
}

static void allreduce(int n, int c, int *in, int *out, int nb)
{
    allreduce_on(MPI_COMM_WORLD, n, c, in, out, nb);
}

static void bcast(int n, int c, int *buf)
{
    int root = c % size;
    for (int i = 0; i < n; i++)
        buf[i] = rank == root ? value(root, i, c) : 0;
    MPI_Bcast(buf, n, MPI_INT, root, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        check("MPI_Bcast", n, buf[i], value(root, i, c), i);
}

static void allgather(int n, int c, int *in, int *out)
{
    for (int i = 0; i < n; i++)
        in[i] = value(rank, i, c);
    MPI_Allgather(in, n, MPI_INT, out, n, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < n; i++)
            check("MPI_Allgather", n, out[(size_t)r * n + i], value(r, i, c), r * n + i);
}

static void alltoall(int n, int c, int *in, int *out)
{
    for (int d = 0; d < size; d++)
        for (int i = 0; i < n; i++)
            in[(size_t)d * n + i] = value(rank, d * n + i, c);
    MPI_Alltoall(in, n, MPI_INT, out, n, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < n; i++)
            check("MPI_Alltoall", n, out[(size_t)r * n + i], value(r, rank * n + i, c),
                  r * n + i);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *in = malloc((size_t)size * MAX_INTS * sizeof(int));
    int *out = malloc((size_t)size * MAX_INTS * sizeof(int));
    if (!in || !out)
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (int c = 0; c < CALLS; c++) {
            allreduce(sizes[s], c, in, out, 0);
            bcast(sizes[s], c, in);
            allgather(sizes[s], c, in, out);
            alltoall(sizes[s], c, in, out);
        }
    }
    for (int c = 0; c < CALLS; c++)
        allreduce(IN_PLACE_INTS, c, NULL, out, 0);
    for (int c = 0; c < CALLS; c++)
        MPI_Barrier(MPI_COMM_WORLD);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (int c = 0; c < CALLS; c++)
            allreduce(sizes[s], c, in, out, 1);
    for (int d = 0; d < DUPS; d++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        for (int c = 0; c < 3; c++)
            allreduce_on(dup, sizes[0], c, in, out, 0);
        MPI_Comm_free(&dup);
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("rule_check: %s\n", any ? "FAILED" : "ok");
    free(in);
    free(out);
    MPI_Finalize();
    return any;
}
