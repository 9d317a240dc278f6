/* An MPI program for the MPI door's tests of failures: after one right
 * MPI_Allreduce on MPI_COMM_WORLD, the ranks make a call that cannot
 * succeed, and each reports what it got back.
 *
 *   error_check count return|fatal  rank 1 all-reduces 8 ints, the others 4
 *   error_check kind return|fatal   rank 1 takes part in a broadcast of 4
 *                                   ints from rank 0, which all-reduces 4
 *                                   ints with the others
 *   error_check dead D              rank D exits (_exit) once the others
 *                                   are past the first all-reduce; they
 *                                   call the next
 *
 * "return" sets MPI_ERRORS_RETURN on MPI_COMM_WORLD (dead always does),
 * "fatal" leaves MPI_ERRORS_ARE_FATAL, under which the failed call ends
 * the job. Each rank that gets an error code back prints
 * "error_check: rank R: CALL failed after S s: TEXT" and the program ends
 * through MPI_Finalize, exit 0; a rank whose call succeeded prints
 * "... returned MPI_SUCCESS" and exits 1. In dead, the survivors leave
 * with _exit(0) after their report instead: MPI_Finalize waits for every
 * process, the dead one too. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 4096

static int usage(void)
{
    fprintf(stderr, "usage: error_check count|kind return|fatal, or error_check dead RANK\n");
    return 2;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc != 3)
        return usage();
    const char *mode = argv[1];
    int dead = !strcmp(mode, "dead"), count = !strcmp(mode, "count"),
        kind = !strcmp(mode, "kind");
    int fatal = !strcmp(argv[2], "fatal");
    if (!dead && !count && !kind)
        return usage();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!fatal)
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* A right call first: the failure below is the mismatch's or the
     * dead rank's, not one of starting up. */
    int *in = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)
        in[i] = rank + i;
    int rc = MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < N && rc == MPI_SUCCESS; i++) {
        if (out[i] != size * (size - 1) / 2 + size * i) {
            fprintf(stderr, "error_check: rank %d: the first MPI_Allreduce is wrong at %d\n",
                    rank, i);
            return 1;
        }
    }
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "error_check: rank %d: the first MPI_Allreduce failed\n", rank);
        return 1;
    }

    const char *what = "MPI_Allreduce";
    double start = MPI_Wtime();
    if (dead && rank == atoi(argv[2])) {
        /* Gone only once every other rank is past the first call (a
         * rank that died during it could break it for those still in
         * it): each tells by a message of MPI's own. */
        for (int r = 0; r < size; r++)
            if (r != rank)
                MPI_Recv(out, 1, MPI_INT, r, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("error_check: rank %d exits now\n", rank);
        fflush(stdout);
        _exit(0);
    } else if (dead) {
        MPI_Send(&rank, 1, MPI_INT, atoi(argv[2]), 5, MPI_COMM_WORLD);
        rc = MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    } else if (count) {
        rc = MPI_Allreduce(in, out, rank == 1 ? 8 : 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    } else if (kind && rank == 1) {
        /* Not the root: a broadcast's root may finish before the others
         * have their data, and learn of the mismatch only at its next
         * call on the communicator. */
        what = "MPI_Bcast";
        rc = MPI_Bcast(in, 4, MPI_INT, 0, MPI_COMM_WORLD);
    } else {
        rc = MPI_Allreduce(in, out, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }
    double took = MPI_Wtime() - start;

    if (rc == MPI_SUCCESS) {
        printf("error_check: rank %d: %s returned MPI_SUCCESS\n", rank, what);
    } else {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        printf("error_check: rank %d: %s failed after %.1f s: %s\n", rank, what, took, text);
    }
    fflush(stdout);
    free(in);
    free(out);
    if (dead)
        _exit(rc == MPI_SUCCESS);
    MPI_Finalize();
    return rc == MPI_SUCCESS;
}
