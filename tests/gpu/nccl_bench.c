/* make test-gpu's comparison with NVIDIA's NCCL: one program, built
 * against the vendor's nccl.h, that times ncclAllReduce on device buffers
 * on every device of this host (one rank per device, one process,
 * ncclCommInitAll) and checks every result. tests/gpu/run.sh runs it
 * twice on the same GPU(s): once on NVIDIA's libnccl.so.2 and once with
 * shoal's libnccl.so.2 preloaded, unchanged, as a user would.
 *
 * Usage: nccl_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
 * Prints one row per size: bytes, time per call (us), algbw and busbw
 * (GB/s, nccl-tests' definitions), and the check's verdict. Exits 1 on a
 * wrong result or a failed call. */
#include <nccl.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXDEV 16

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "nccl_bench: " __VA_ARGS__);                                 \
            fputc('\n', stderr);                                                         \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define CU(call) CHECK((call) == cudaSuccess, "%s failed", #call)
#define NC(call)                                                                         \
    do {                                                                                 \
        ncclResult_t r_ = (call);                                                        \
        CHECK(r_ == ncclSuccess, "%s: %s", #call, ncclGetErrorString(r_));              \
    } while (0)

static size_t arg_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'G': v *= 1024; /* fall through */
    case 'M': v *= 1024; /* fall through */
    case 'K': v *= 1024; break;
    default: break;
    }
    return (size_t)v;
}

/* Rank r's element i: small integers, so the float sum is exact. */
static float elem(int r, size_t i)
{
    return (float)((i * 7 + (size_t)r * 3) % 13);
}

int main(int argc, char **argv)
{
    size_t lo = 8, hi = 256u << 20, factor = 4;
    int iters = 20, warm = 5, opt;
    while ((opt = getopt(argc, argv, "b:e:f:n:w:")) != -1) {
        switch (opt) {
        case 'b': lo = arg_size(optarg); break;
        case 'e': hi = arg_size(optarg); break;
        case 'f': factor = (size_t)atol(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warm = atoi(optarg); break;
        default: fprintf(stderr, "usage: nccl_bench [-b N] [-e N] [-f N] [-n N] [-w N]\n"); return 2;
        }
    }
    CHECK(lo >= 4 && hi >= lo && factor >= 2 && iters > 0 && warm >= 0, "bad arguments");
    int ndev = 0, version = 0;
    CU(cudaGetDeviceCount(&ndev));
    CHECK(ndev > 0, "no device");
    if (ndev > MAXDEV)
        ndev = MAXDEV;
    NC(ncclGetVersion(&version));
    ncclComm_t comm[MAXDEV];
    int devs[MAXDEV];
    for (int d = 0; d < ndev; d++)
        devs[d] = d;
    NC(ncclCommInitAll(comm, ndev, devs));

    size_t maxcount = hi / sizeof(float);
    float *send[MAXDEV], *recv[MAXDEV], *host = malloc(hi), *got = malloc(hi);
    CHECK(host && got, "out of host memory");
    cudaStream_t stream[MAXDEV];
    cudaEvent_t start[MAXDEV], stop[MAXDEV];
    for (int d = 0; d < ndev; d++) {
        CU(cudaSetDevice(d));
        CU(cudaMalloc((void **)&send[d], hi));
        CU(cudaMalloc((void **)&recv[d], hi));
        CU(cudaStreamCreateWithFlags(&stream[d], cudaStreamNonBlocking));
        CU(cudaEventCreate(&start[d]));
        CU(cudaEventCreate(&stop[d]));
        for (size_t i = 0; i < maxcount; i++)
            host[i] = elem(d, i);
        CU(cudaMemcpy(send[d], host, hi, cudaMemcpyHostToDevice));
    }
    /* Which library the calls bind to: the vendor's, or one preloaded. */
    Dl_info info;
    void *fn = (void *)ncclAllReduce;
    const char *lib = dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
    printf("# nccl_bench: %s (NCCL version code %d), %d rank(s), one per device, float sum, "
           "out of place\n", lib, version, ndev);
    printf("# %12s %12s %10s %10s %10s %6s\n", "size(B)", "count", "time(us)", "algbw",
           "busbw", "check");
    int bad = 0;
    for (size_t bytes = lo; bytes <= hi; bytes *= factor) {
        size_t count = bytes / sizeof(float);
        for (int it = -warm; it < iters; it++) {
            if (it == 0)
                for (int d = 0; d < ndev; d++) {
                    CU(cudaSetDevice(d));
                    CU(cudaEventRecord(start[d], stream[d]));
                }
            NC(ncclGroupStart());
            for (int d = 0; d < ndev; d++)
                NC(ncclAllReduce(send[d], recv[d], count, ncclFloat32, ncclSum, comm[d],
                                 stream[d]));
            NC(ncclGroupEnd());
        }
        float ms = 0;
        for (int d = 0; d < ndev; d++) {
            CU(cudaSetDevice(d));
            CU(cudaEventRecord(stop[d], stream[d]));
            CU(cudaEventSynchronize(stop[d]));
            float t;
            CU(cudaEventElapsedTime(&t, start[d], stop[d]));
            if (t > ms)
                ms = t;
        }
        /* Every rank's result against the exact sum. */
        int ok = 1;
        for (int d = 0; d < ndev && ok; d++) {
            CU(cudaSetDevice(d));
            CU(cudaMemcpy(got, recv[d], count * sizeof(float), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < count && ok; i++) {
                float want = 0;
                for (int r = 0; r < ndev; r++)
                    want += elem(r, i);
                ok = got[i] == want;
            }
        }
        bad |= !ok;
        double us = ms * 1e3 / iters;
        double alg = (double)bytes / us / 1e3;
        printf("  %12zu %12zu %10.2f %10.2f %10.2f %6s\n", bytes, count, us, alg,
               alg * 2.0 * (ndev - 1) / ndev, ok ? "ok" : "WRONG");
    }
    for (int d = 0; d < ndev; d++) {
        NC(ncclCommDestroy(comm[d]));
        CU(cudaSetDevice(d));
        CU(cudaFree(send[d]));
        CU(cudaFree(recv[d]));
    }
    free(host);
    free(got);
    return bad;
}
