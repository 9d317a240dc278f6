/* Modules and kernels of the CUDA driver stand-in.
 *
 * A module accepts any image (the CUDA module passes its fat binary,
 * which is never parsed) and offers the kernels named in src/cuda/kern.h.
 * A launch copies the argument struct at once, as the driver copies
 * kernel parameters, and queues a call that runs the kernel's range
 * function from kern.h over the whole range on the stream's worker: the
 * same element code the CUDA kernels run, without their grid-stride
 * loops. Every pointer the kernel will touch must lie in memory the
 * device reaches (device, managed, pinned or opened by IPC), checked when
 * the kernel runs; pageable host memory faults, as on most systems.
 *
 * Launches are counted per kernel so that tests can tell the device path
 * from a host fallback (shoal_standin_launches). */
#include "standin.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

/* Limits of a Hopper-class device that a launch is checked against. */
#define STANDIN_MAX_BLOCK_THREADS 1024u
#define STANDIN_MAX_SHARED_BYTES (227u * 1024u)

static const char *const standin_kernel_names[STANDIN_K_COUNT] = {
    [STANDIN_K_REDUCE] = SHOAL_K_REDUCE,
    [STANDIN_K_AVG] = SHOAL_K_AVG,
    [STANDIN_K_WAIT] = SHOAL_K_WAIT,
    [STANDIN_K_WRITE] = SHOAL_K_WRITE,
    [STANDIN_K_CODEC] = SHOAL_K_CODEC,
    [STANDIN_K_CONVERT] = SHOAL_K_CONVERT,
    [STANDIN_K_ORTHO] = SHOAL_K_ORTHO,
};

static atomic_ulong standin_launches[STANDIN_K_COUNT];

unsigned long shoal_standin_launches(const char *name)
{
    unsigned long n = 0;

    for (int i = 0; i < STANDIN_K_COUNT; i++) {
        if (name == NULL || strcmp(name, standin_kernel_names[i]) == 0)
            n += atomic_load_explicit(&standin_launches[i], memory_order_relaxed);
    }
    return n;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUcontext ctx = standin_ctx_current();
    CUmodule m;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (module == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    /* As the driver's: loading waits for all the context's queued work
     * (a wait that the caller itself must release never returns). */
    standin_stream_sync_all(ctx);
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->tag = STANDIN_TAG_MODULE;
    m->ctx = ctx;
    for (int i = 0; i < STANDIN_K_COUNT; i++) {
        m->funcs[i].tag = STANDIN_TAG_FUNC;
        m->funcs[i].which = (standin_kernel_t)i;
        m->funcs[i].module = m;
    }
    *module = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (hmod == NULL || hmod->tag != STANDIN_TAG_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    if (hfunc == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < STANDIN_K_COUNT; i++) {
        if (strcmp(name, standin_kernel_names[i]) == 0) {
            *hfunc = &hmod->funcs[i];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

/* Queued launches copied what they need, so unloading cannot pull
 * anything from under them. */
CUresult cuModuleUnload(CUmodule hmod)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (hmod == NULL || hmod->tag != STANDIN_TAG_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    hmod->tag = STANDIN_TAG_DEAD;
    for (int i = 0; i < STANDIN_K_COUNT; i++)
        hmod->funcs[i].tag = STANDIN_TAG_DEAD;
    free(hmod);
    return CUDA_SUCCESS;
}

static size_t standin_launch_args(standin_kernel_t which)
{
    switch (which) {
    case STANDIN_K_REDUCE: return sizeof(shoal_k_reduce_t);
    case STANDIN_K_AVG: return sizeof(shoal_k_avg_t);
    case STANDIN_K_CODEC: return sizeof(shoal_k_codec_t);
    case STANDIN_K_CONVERT: return sizeof(shoal_k_convert_t);
    case STANDIN_K_ORTHO: return sizeof(shoal_k_ortho_t);
    default: return sizeof(shoal_k_wait_t);
    }
}

/* The module passes its one argument struct through kernelParams[0];
 * the packed-buffer form (extra) is not modelled. A function of one
 * context's module cannot run on another context's stream. */
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    CUstream q;
    CUcontext ctx;
    CUresult res;
    standin_op_t *op;
    unsigned long long threads = (unsigned long long)blockDimX * blockDimY * blockDimZ;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (f == NULL || f->tag != STANDIN_TAG_FUNC || f->module->tag != STANDIN_TAG_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    if (gridDimX == 0 || gridDimY == 0 || gridDimZ == 0 || threads == 0 ||
        threads > STANDIN_MAX_BLOCK_THREADS || sharedMemBytes > STANDIN_MAX_SHARED_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    if (kernelParams == NULL || kernelParams[0] == NULL)
        return extra != NULL ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = standin_stream_resolve(hStream, &q, &ctx);
    if (res != CUDA_SUCCESS)
        return res;
    if (f->module->ctx != ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    op = standin_op_new(STANDIN_OP_KERNEL, ctx);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.kernel.which = f->which;
    memcpy(&op->u.kernel.args, kernelParams[0], standin_launch_args(f->which));
    res = standin_stream_push(q, op);
    if (res != CUDA_SUCCESS) {
        free(op);
        return res;
    }
    atomic_fetch_add_explicit(&standin_launches[f->which], 1, memory_order_relaxed);
    return CUDA_SUCCESS;
}

/* Bytes of one element; 0 for a type the kernels skip. The library's
 * shoal_dtype_bytes is not linked into the stand-in. */
static size_t standin_elem_bytes(int32_t dtype)
{
    switch (dtype) {
    case SHOAL_INT8:
    case SHOAL_UINT8:
    case SHOAL_FP8_E4M3:
    case SHOAL_FP8_E5M2: return 1;
    case SHOAL_FLOAT16:
    case SHOAL_BFLOAT16: return 2;
    case SHOAL_INT32:
    case SHOAL_UINT32:
    case SHOAL_FLOAT32: return 4;
    case SHOAL_INT64:
    case SHOAL_UINT64:
    case SHOAL_FLOAT64: return 8;
    default: return 0;
    }
}

/* Whether count elements of elem bytes at each of the n pointers are
 * all reachable by the device; faults ctx naming the kernel if not. */
static bool standin_kernel_reaches(standin_op_t *op, const void *const *ptrs, int n,
                                   uint64_t count, size_t elem)
{
    char what[160];
    size_t bytes = (size_t)count * elem;

    if (elem != 0 && bytes / elem != count)
        bytes = SIZE_MAX;
    for (int i = 0; i < n; i++) {
        if (!standin_mem_reachable(ptrs[i], bytes, true)) {
            snprintf(what, sizeof(what), "kernel %s: %zu bytes at %p are not device memory",
                     standin_kernel_names[op->u.kernel.which], bytes, ptrs[i]);
            standin_ctx_set_fault(op->ctx, CUDA_ERROR_ILLEGAL_ADDRESS, what);
            return false;
        }
    }
    return true;
}

/* Whether the orthonormalisation reaches its records, and each record's
 * factor and scratch column. */
static bool standin_ortho_reaches(standin_op_t *op, const shoal_k_ortho_t *k)
{
    const void *desc = k->desc;
    if (!standin_kernel_reaches(op, &desc, 1, k->ntensors, sizeof(shoal_dev_psgd_desc_t)))
        return false;
    for (uint64_t t = 0; t < k->ntensors; t++) {
        const shoal_dev_psgd_desc_t *d = &k->desc[t];
        const void *p = k->p + d->off, *col = k->col + d->col;
        if (!standin_kernel_reaches(op, &p, 1, d->rows * d->rank, sizeof(float)) ||
            !standin_kernel_reaches(op, &col, 1, d->rows, sizeof(double)))
            return false;
    }
    return true;
}

/* Bytes of the codec kernel's wire for its count values, in its form. */
static size_t standin_codec_wire_bytes(const shoal_k_codec_t *k)
{
    size_t count = (size_t)k->count;
    if (k->kind == SHOAL_DEV_CODEC_TERNARY)
        return k->packed ? (count + 1) / 2 : count * (k->wide ? 2 : 1);
    return (size_t)shoal_k_codec_units(k) * sizeof(float) + count;
}

/* Whether the codec kernel reaches every buffer its operation touches,
 * each checked for its own length: count floats for the value arrays,
 * the wire's bytes, and for ternary the scales of the blocks of the
 * tensor that the run's values first .. first + count - 1 fall in;
 * ABSMAX's inputs and its one output per block of the run; MOMENTS'
 * inputs and its two doubles per block of the run. */
static bool standin_codec_reaches(standin_op_t *op, const shoal_k_codec_t *k)
{
    if (k->op == SHOAL_DEV_CODEC_MOMENTS) {
        /* count floats in, a sum and a sum of squares out per block */
        const void *in[] = {k->src, k->addend}, *out = k->wire_out;
        for (int i = 0; i < 2; i++)
            if (in[i] && !standin_kernel_reaches(op, &in[i], 1, k->count, sizeof(float)))
                return false;
        return standin_kernel_reaches(op, &out, 1, 2 * shoal_k_codec_units(k), sizeof(double));
    }
    if (k->op == SHOAL_DEV_CODEC_ABSMAX) {
        /* count floats in, one maximum out per block of the run */
        const void *in[] = {k->src, k->addend}, *dst = k->dst;
        for (int i = 0; i < 2; i++)
            if (in[i] && !standin_kernel_reaches(op, &in[i], 1, k->count, sizeof(float)))
                return false;
        return standin_kernel_reaches(op, &dst, 1, shoal_k_codec_units(k), sizeof(float));
    }
    size_t wire = standin_codec_wire_bytes(k);
    const void *floats[] = {k->src, k->addend, k->residual, k->dst};
    const void *wires[] = {k->wire_in, k->wire_out};

    for (int i = 0; i < 4; i++)
        if (floats[i] && !standin_kernel_reaches(op, &floats[i], 1, k->count, sizeof(float)))
            return false;
    for (int i = 0; i < 2; i++)
        if (wires[i] && !standin_kernel_reaches(op, &wires[i], 1, wire, 1))
            return false;
    if (k->kind == SHOAL_DEV_CODEC_TERNARY) {
        uint64_t b0 = k->first / k->block, b1 = (k->first + k->count - 1) / k->block;
        const void *scales = k->scales + b0;
        if (!standin_kernel_reaches(op, &scales, 1, b1 - b0 + 1, sizeof(float)))
            return false;
    }
    return true;
}

void standin_kernel_run(standin_op_t *op)
{
    switch (op->u.kernel.which) {
    case STANDIN_K_REDUCE: {
        const shoal_k_reduce_t *k = &op->u.kernel.args.reduce;
        const void *ptrs[] = {k->dst, k->a, k->b};
        size_t elem = standin_elem_bytes(k->dtype);
        if (elem == 0 || k->count == 0 || standin_kernel_reaches(op, ptrs, 3, k->count, elem))
            shoal_k_reduce_range(k, 0, k->count, 1);
        break;
    }
    case STANDIN_K_AVG: {
        const shoal_k_avg_t *k = &op->u.kernel.args.avg;
        const void *ptrs[] = {k->dst, k->src};
        size_t elem = standin_elem_bytes(k->dtype);
        if (elem == 0 || k->count == 0 || k->n < 1 ||
            standin_kernel_reaches(op, ptrs, 2, k->count, elem))
            shoal_k_avg_range(k, 0, k->count, 1);
        break;
    }
    case STANDIN_K_CODEC: {
        const shoal_k_codec_t *k = &op->u.kernel.args.codec;
        uint64_t units = shoal_k_codec_units(k);
        if (units == 0 || standin_codec_reaches(op, k))
            shoal_k_codec_range(k, 0, units, 1);
        break;
    }
    case STANDIN_K_CONVERT: {
        /* Each side is checked with its own element size. */
        const shoal_k_convert_t *k = &op->u.kernel.args.convert;
        const void *dst = k->dst, *src = k->src;
        size_t dst_elem = shoal_k_convert_bytes(k->dst_dtype),
               src_elem = shoal_k_convert_bytes(k->src_dtype);
        if (dst_elem == 0 || src_elem == 0 || k->count == 0 ||
            (standin_kernel_reaches(op, &dst, 1, k->count, dst_elem) &&
             standin_kernel_reaches(op, &src, 1, k->count, src_elem)))
            shoal_k_convert_range(k, 0, k->count, 1);
        break;
    }
    case STANDIN_K_ORTHO: {
        const shoal_k_ortho_t *k = &op->u.kernel.args.ortho;
        if (k->ntensors == 0 || standin_ortho_reaches(op, k))
            shoal_k_ortho_range(k, 0, k->ntensors, 1);
        break;
    }
    case STANDIN_K_WAIT: {
        const shoal_k_wait_t *k = &op->u.kernel.args.wait;
        const void *ptrs[] = {(const void *)k->flag};
        if (standin_kernel_reaches(op, ptrs, 1, 1, sizeof(uint32_t)))
            standin_wait_value(k->flag, k->value, CU_STREAM_WAIT_VALUE_GEQ, op->ctx);
        break;
    }
    case STANDIN_K_WRITE: {
        const shoal_k_wait_t *k = &op->u.kernel.args.wait;
        const void *ptrs[] = {(const void *)k->flag};
        if (standin_kernel_reaches(op, ptrs, 1, 1, sizeof(uint32_t)))
            atomic_store_explicit((_Atomic uint32_t *)k->flag, k->value, memory_order_release);
        break;
    }
    default: break;
    }
}
