/* A CPU stand-in of cuBLAS (libcublas.so.13), for shoal's tests only:
 * built as libcublas_standin.so beside the stand-in of the driver
 * (libcuda_standin.so), never installed. The CUDA module loads it in place
 * of cuBLAS when SHOAL_CUBLAS names it, so the module's gemm entry runs
 * the same code on any machine as on a GPU.
 *
 * It has the four functions the module calls, under the names
 * cublas_v2.h gives them (cublasSgemm is exported as cublasSgemm_v2), and
 * a counter for the tests (shoal_standin_gemms). A handle remembers the
 * context current when it was made and the stream last set on it; a
 * product is checked as cuBLAS checks it and queued on that stream as a
 * host function of the driver stand-in (cuLaunchHostFunc, found through
 * this library's link to libcuda_standin.so, which is the very instance
 * the module opened), so it runs in stream order on the stream's worker.
 * There it is computed column-major, as cuBLAS defines it, in a plain
 * loop: for each element of C, the products over l in increasing order
 * summed in float, then alpha times the sum plus beta times C, each
 * product and sum rounded on its own (never fused), so a test that adds
 * in the same order gets the same bits. As BLAS specifies, C is not read
 * when beta is 0 (NaN there does not spread) and A and B are not read
 * when alpha is 0.
 *
 * What it checks beyond cuBLAS: a handle made with no context current
 * (the module always has one current; cuBLAS would take device 0's), a
 * product on a stream of another context than its handle's (undefined in
 * cuBLAS) and two threads inside one handle's functions at once (a
 * handle is not thread-safe) are refused. What it cannot show: cuBLAS's
 * own summation order, blocking and fused multiply-adds (a real GPU's
 * results differ in the last bits), its speed, its workspace, or a
 * fault on memory the device cannot reach: the host function reads and
 * writes whatever addresses it is given. */
#include <cublas_v2.h>
#include <cuda.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#define STANDIN_TAG_CUBLAS 0x43424c53u /* "CBLS" */
#define STANDIN_TAG_DEAD 0xdeadu

struct cublasContext {
    uint32_t tag;
    CUcontext ctx;   /* current when the handle was made */
    CUstream stream; /* cublasSetStream's; NULL: the legacy stream */
    atomic_int busy; /* 1 while a call is inside the handle */
};

/* One product, copied at the call (cuBLAS reads alpha and beta from host
 * memory before it returns), freed by the host function that runs it. */
typedef struct {
    cublasOperation_t transa, transb;
    int m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
} standin_gemm_t;

static atomic_ulong standin_gemms;

/* Test hook, found by dlsym: products computed so far in this process. */
unsigned long shoal_standin_gemms(void);
unsigned long shoal_standin_gemms(void)
{
    return atomic_load_explicit(&standin_gemms, memory_order_relaxed);
}

/* A handle's functions run one at a time: a second thread that enters
 * while another is inside is refused, which shows a caller without the
 * lock that a real handle needs (it would misbehave there silently). */
static cublasStatus_t standin_enter(cublasHandle_t h)
{
    if (h == NULL || h->tag != STANDIN_TAG_CUBLAS)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (atomic_exchange_explicit(&h->busy, 1, memory_order_acquire))
        return CUBLAS_STATUS_INTERNAL_ERROR;
    return CUBLAS_STATUS_SUCCESS;
}

static void standin_leave(cublasHandle_t h)
{
    atomic_store_explicit(&h->busy, 0, memory_order_release);
}

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    CUcontext ctx = NULL;
    if (handle == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasHandle_t h = calloc(1, sizeof(*h));
    if (h == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->tag = STANDIN_TAG_CUBLAS;
    h->ctx = ctx;
    atomic_init(&h->busy, 0);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    cublasStatus_t s = standin_enter(handle);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    handle->tag = STANDIN_TAG_DEAD;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

/* Kept for the handle's later products, as cuBLAS keeps it: a caller
 * whose threads share a handle must hold a lock from setting the stream
 * to queueing the product, or a product may go to another thread's
 * stream. */
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t streamId)
{
    cublasStatus_t s = standin_enter(handle);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    handle->stream = streamId;
    standin_leave(handle);
    return CUBLAS_STATUS_SUCCESS;
}

/* Column-major, as cuBLAS defines its operands. */
static float standin_op_a(const standin_gemm_t *g, int i, int l)
{
    return g->transa == CUBLAS_OP_N ? g->a[i + (size_t)l * (size_t)g->lda]
                                    : g->a[l + (size_t)i * (size_t)g->lda];
}

static float standin_op_b(const standin_gemm_t *g, int l, int j)
{
    return g->transb == CUBLAS_OP_N ? g->b[l + (size_t)j * (size_t)g->ldb]
                                    : g->b[j + (size_t)l * (size_t)g->ldb];
}

/* The product on the stream's worker (header comment: the order and the
 * rounding of each step). */
static void standin_gemm_run(void *arg)
{
    standin_gemm_t *g = arg;
    for (int j = 0; j < g->n; j++) {
        for (int i = 0; i < g->m; i++) {
            float *cij = &g->c[i + (size_t)j * (size_t)g->ldc];
            float t = 0.0f;
            if (g->alpha != 0.0f) {
                float sum = 0.0f;
                for (int l = 0; l < g->k; l++) {
                    float p = standin_op_a(g, i, l) * standin_op_b(g, l, j);
                    sum += p;
                }
                t = g->alpha * sum;
            }
            if (g->beta != 0.0f) {
                float u = g->beta * *cij;
                t = g->alpha != 0.0f ? t + u : u;
            }
            *cij = t;
        }
    }
    atomic_fetch_add_explicit(&standin_gemms, 1, memory_order_relaxed);
    free(g);
}

static int standin_op_valid(cublasOperation_t op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static int standin_max1(int v)
{
    return v > 1 ? v : 1;
}

/* The stream's context must be the handle's. */
static cublasStatus_t standin_check_stream(cublasHandle_t h)
{
    CUcontext ctx = NULL;
    if (cuStreamGetCtx(h->stream, &ctx) != CUDA_SUCCESS || ctx != h->ctx)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

/* Real operands: CUBLAS_OP_C is CUBLAS_OP_T. */
static cublasStatus_t standin_sgemm(cublasHandle_t handle, cublasOperation_t transa,
                                    cublasOperation_t transb, int m, int n, int k,
                                    const float *alpha, const float *A, int lda, const float *B,
                                    int ldb, const float *beta, float *C, int ldc)
{
    if (!standin_op_valid(transa) || !standin_op_valid(transb) || m < 0 || n < 0 || k < 0 ||
        lda < standin_max1(transa == CUBLAS_OP_N ? m : k) ||
        ldb < standin_max1(transb == CUBLAS_OP_N ? k : n) || ldc < standin_max1(m) ||
        alpha == NULL || beta == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* BLAS's quick return: nothing to compute, C as it is. */
    if (m == 0 || n == 0 || ((*alpha == 0.0f || k == 0) && *beta == 1.0f))
        return CUBLAS_STATUS_SUCCESS;
    cublasStatus_t s = standin_check_stream(handle);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    standin_gemm_t *g = malloc(sizeof(*g));
    if (g == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *g = (standin_gemm_t){
        .transa = transa == CUBLAS_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T,
        .transb = transb == CUBLAS_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T,
        .m = m, .n = n, .k = k,
        .alpha = *alpha, .beta = *beta,
        .a = A, .b = B, .c = C,
        .lda = lda, .ldb = ldb, .ldc = ldc,
    };
    if (cuLaunchHostFunc(handle->stream, standin_gemm_run, g) != CUDA_SUCCESS) {
        free(g);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float *alpha,
                           const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    cublasStatus_t s = standin_enter(handle);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    s = standin_sgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    standin_leave(handle);
    return s;
}
