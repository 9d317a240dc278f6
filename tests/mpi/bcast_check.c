/* An MPI program that calls no broadcast, for the MPI door's test: it
 * defines PMPI_Bcast itself (exported: built with -rdynamic), counting
 * the calls and passing them on to MPI's, so that any broadcast the door
 * makes of its own (mapping a communicator to shoal's) is counted. It
 * runs MPI_Allreduce on MPI_COMM_WORLD, a duplicate and a split (each
 * mapped anew), checks the sums and prints "bcast_check: ok" on rank 0
 * when no rank counted a broadcast. Open MPI runs its later all-reduces
 * slower once a process has made one (door.c). */
#define _GNU_SOURCE
#include <mpi.h>

#include <dlfcn.h>
#include <stdio.h>

static int bcasts;

int PMPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm c)
{
    static int (*next)(void *, int, MPI_Datatype, int, MPI_Comm);
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "PMPI_Bcast");
    bcasts++;
    return next ? next(buf, count, t, root, c) : MPI_ERR_INTERN;
}

static int sums(MPI_Comm c)
{
    int rank, size, in[3], out[3], bad = 0;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    for (int i = 0; i < 3; i++)
        in[i] = rank + i;
    MPI_Allreduce(in, out, 3, MPI_INT, MPI_SUM, c);
    for (int i = 0; i < 3; i++)
        bad |= out[i] != size * (size - 1) / 2 + size * i;
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    bad |= sums(MPI_COMM_WORLD) | sums(dup) | sums(half);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    int mine[2] = {bad, bcasts}, all[2];
    PMPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("bcast_check: %s (sums %s, at most %d broadcast%s on a rank)\n",
               all[0] || all[1] ? "FAILED" : "ok", all[0] ? "wrong" : "right", all[1],
               all[1] == 1 ? "" : "s");
    MPI_Finalize();
    return all[0] || all[1];
}
