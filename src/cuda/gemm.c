/* The CUDA module's matrix product (dev_ops.h's gemm): fp32, row-major as
 * cblas_sgemm's CblasRowMajor, queued on the caller's stream through
 * cuBLAS, which is loaded the first time a product is asked for
 * (cublas_api.h).
 *
 * cuBLAS is column-major, and a row-major matrix is its transpose seen
 * column-major. So C = alpha op(A) op(B) + beta C in row-major is, as cuBLAS
 * sees the same memory, C^T = alpha op(B)^T op(A)^T + beta C^T: the
 * operands swap places, the sizes are (n, m, k), and each keeps its own
 * transpose flag and stride. Nothing is copied or transposed.
 *
 * Handles: cuBLAS binds a handle to the context current when it is made,
 * and a handle is not thread-safe. So each context whose streams carry
 * products gets its own handle, made the first time in that context and
 * kept for the life of the process (as the module keeps the primary
 * contexts), with a mutex under which a call sets the handle's stream and
 * queues its product, so that two threads cannot interleave the two. */
#include "module.h"
#include "cublas_api.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct {
    CUcontext ctx;
    cublasHandle_t handle;
    pthread_mutex_t lock; /* the handle's stream and the product queued with it */
} gemm_handle_t;

/* One entry per context, published as stream.c publishes its kernels. */
static gemm_handle_t handles[SHOAL_CUDA_MAX_CONTEXTS];
static atomic_int nhandles;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;

static gemm_handle_t *handle_find(CUcontext ctx, int n)
{
    for (int i = 0; i < n; i++)
        if (handles[i].ctx == ctx)
            return &handles[i];
    return NULL;
}

/* A handle for ctx, which the entry made current. */
static shoal_status_t handle_create(const shoal_cublas_t *cb, CUcontext ctx, gemm_handle_t *h)
{
    shoal_status_t st;
    cublasStatus_t s = cb->cublasCreate(&h->handle);
    if (s != CUBLAS_STATUS_SUCCESS)
        return shoal_cublas_fail("cublasCreate", s);
    int e = pthread_mutex_init(&h->lock, NULL);
    if (e != 0) {
        st = shoal_cuda_failf(SHOAL_ERR_SYSTEM, "gemm: a lock for the cuBLAS handle: %s",
                              strerror(e));
        goto err_destroy_handle;
    }
    h->ctx = ctx;
    return SHOAL_OK;

err_destroy_handle:
    (void)cb->cublasDestroy(h->handle);
    return st;
}

static shoal_status_t handle_get(const shoal_cublas_t *cb, CUcontext ctx, gemm_handle_t **h_p)
{
    gemm_handle_t *h = handle_find(ctx, atomic_load_explicit(&nhandles, memory_order_acquire));
    shoal_status_t st = SHOAL_OK;
    if (!h) {
        pthread_mutex_lock(&handles_lock);
        int n = atomic_load_explicit(&nhandles, memory_order_relaxed);
        h = handle_find(ctx, n);
        if (!h && n == SHOAL_CUDA_MAX_CONTEXTS) {
            st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "gemm: more than %d CUDA contexts",
                                  SHOAL_CUDA_MAX_CONTEXTS);
        } else if (!h) {
            st = handle_create(cb, ctx, &handles[n]);
            if (st == SHOAL_OK) {
                h = &handles[n];
                atomic_store_explicit(&nhandles, n + 1, memory_order_release);
            }
        }
        pthread_mutex_unlock(&handles_lock);
        if (st != SHOAL_OK)
            return st;
    }
    *h_p = h;
    return SHOAL_OK;
}

/* cuBLAS takes int sizes and strides. */
static shoal_status_t check_int(const char *name, size_t v)
{
    if (v > (size_t)INT_MAX)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "gemm: %s %zu is above INT_MAX (cuBLAS "
                                "takes int sizes)", name, v);
    return SHOAL_OK;
}

/* A row-major operand stored with cols columns needs a row stride of at
 * least cols (and 1), which is cuBLAS's own rule for the matrix it sees. */
static shoal_status_t check_stride(const char *name, size_t ld, size_t cols)
{
    if (ld < cols || ld == 0)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "gemm: %s %zu is below the row's %zu values", name, ld, cols);
    return SHOAL_OK;
}

/* Everything but the buffers, which a product of zero size does not
 * need: refused before anything is loaded or queued. */
static shoal_status_t gemm_check_sizes(int trans_a, int trans_b, size_t m, size_t n, size_t k,
                                       size_t lda, size_t ldb, size_t ldc)
{
    if ((trans_a != 0 && trans_a != 1) || (trans_b != 0 && trans_b != 1))
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "gemm: trans_a %d, trans_b %d (0 or 1 each)", trans_a, trans_b);
    shoal_status_t st = check_int("m", m);
    if (st == SHOAL_OK)
        st = check_int("n", n);
    if (st == SHOAL_OK)
        st = check_int("k", k);
    if (st == SHOAL_OK)
        st = check_int("lda", lda);
    if (st == SHOAL_OK)
        st = check_int("ldb", ldb);
    if (st == SHOAL_OK)
        st = check_int("ldc", ldc);
    return st;
}

static shoal_status_t gemm_check_operands(int trans_a, int trans_b, size_t m, size_t n, size_t k,
                                          const float *a, size_t lda, const float *b, size_t ldb,
                                          const float *c, size_t ldc)
{
    /* Stored, A is m x k (k x m transposed) and B k x n (n x k). */
    shoal_status_t st = check_stride("lda", lda, trans_a ? m : k);
    if (st == SHOAL_OK)
        st = check_stride("ldb", ldb, trans_b ? k : n);
    if (st == SHOAL_OK)
        st = check_stride("ldc", ldc, n);
    if (st == SHOAL_OK && (!a || !b || !c))
        st = shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "gemm: NULL matrix");
    return st;
}

shoal_status_t shoal_cuda_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                               const float *a, size_t lda, const float *b, size_t ldb, float beta,
                               float *c, size_t ldc, void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    const shoal_cublas_t *cb;
    shoal_cuda_scope_t s;
    gemm_handle_t *h;
    CUcontext ctx;
    cublasStatus_t r;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = gemm_check_sizes(trans_a, trans_b, m, n, k, lda, ldb, ldc);
    if (st != SHOAL_OK || m == 0 || n == 0 || k == 0)
        return st;
    st = gemm_check_operands(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    if (st == SHOAL_OK)
        st = shoal_cublas_get(&cb);
    if (st != SHOAL_OK)
        return st;
    st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    st = handle_get(cb, ctx, &h);
    if (st != SHOAL_OK)
        goto out_leave;
    /* The row-major product as cuBLAS's column-major one (head comment):
     * B first, then A, C^T of n x m. */
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    pthread_mutex_lock(&h->lock);
    r = cb->cublasSetStream(h->handle, (cudaStream_t)stream);
    if (r != CUBLAS_STATUS_SUCCESS)
        st = shoal_cublas_fail("cublasSetStream", r);
    if (st == SHOAL_OK) {
        r = cb->cublasSgemm(h->handle, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b, (int)ldb,
                            a, (int)lda, &beta, c, (int)ldc);
        if (r != CUBLAS_STATUS_SUCCESS)
            st = shoal_cublas_fail("cublasSgemm", r);
    }
    pthread_mutex_unlock(&h->lock);
out_leave:
    shoal_cuda_leave(&s);
    return st;
}
