/* An unchanged MPI program for the MPI door's compression test: a float
 * sum of 1 Mi elements (4 MiB, above SHOAL_COMPRESS_MIN's default),
 * whose inputs are small integers, so that MPI's own sum is exact in any
 * order. With "exact" every element must be exact; with "lossy" every
 * element must be within the int8 codec's bound (one step of the largest
 * partial sum's scale, size * 50 / 127, for each of the size times a sum
 * may be quantised on its way) and at least one must differ, which shows
 * that the sum went through the codec. Prints
 * "compress_check: ok" on rank 0. */
#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT (1 << 20)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, lossy = argc > 1 && !strcmp(argv[1], "lossy");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    float *in = malloc(COUNT * sizeof(float)), *out = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)((i * 7 + rank * 13) % 101 - 50);
    MPI_Allreduce(in, out, COUNT, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int bad = 0, differ = 0;
    for (int i = 0; i < COUNT && !bad; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += (float)((i * 7 + r * 13) % 101 - 50);
        float err = fabsf(out[i] - want);
        differ += err != 0;
        if (lossy ? err > (float)(size * size) * 50.0f / 127.0f : err != 0) {
            fprintf(stderr, "compress_check: rank %d: element %d is %g, want %g\n", rank, i,
                    (double)out[i], (double)want);
            bad = 1;
        }
    }
    if (lossy && !differ) {
        fprintf(stderr, "compress_check: rank %d: every element exact: not compressed\n", rank);
        bad = 1;
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("compress_check: %s\n", any ? "FAILED" : "ok");
    free(in);
    free(out);
    MPI_Finalize();
    return any;
}
