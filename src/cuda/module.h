/* Inside the CUDA module: the devices and their contexts (module.c), and
 * the entries of the ops table that mem.c and stream.c implement. */
#ifndef SHOAL_CUDA_MODULE_H
#define SHOAL_CUDA_MODULE_H

#include "cu_api.h"
#include "base/dev_ops.h"

#include <stddef.h>
#include <stdint.h>

/* Few contexts ever exist in one process (one primary context per device,
 * and rarely one of the caller's own), so what the module keeps per
 * context (the kernels, a cuBLAS handle) is a short table that only
 * grows: readers scan the published entries without a lock. */
#define SHOAL_CUDA_MAX_CONTEXTS 64

/* What an entry did to the calling thread's context stack, so that it can
 * undo it before returning. */
typedef struct {
    int pushed; /* 1: a context was pushed and must be popped */
} shoal_cuda_scope_t;

/* The loaded driver, or a message and NULL when open has not succeeded
 * (every entry starts here). */
const shoal_cu_t *shoal_cuda_driver(void);

/* Make a context of device current for the rest of the entry: when the
 * thread has none, the device's primary context becomes its current one
 * (and stays so, as the CUDA runtime does); when it has another device's,
 * the primary context is pushed until shoal_cuda_leave. */
shoal_status_t shoal_cuda_enter_device(int device, shoal_cuda_scope_t *s);
/* Any context: the thread's current one, else device 0's primary context
 * made current. For entries whose memory is not tied to one device. */
shoal_status_t shoal_cuda_enter_any(shoal_cuda_scope_t *s);
/* The stream's own context (the thread's for the NULL stream, as
 * shoal_cuda_enter_any), in *ctx_p. */
shoal_status_t shoal_cuda_enter_stream(void *stream, shoal_cuda_scope_t *s, CUcontext *ctx_p);
void shoal_cuda_leave(shoal_cuda_scope_t *s);

/* The ordinal of the current context's device. */
shoal_status_t shoal_cuda_current_device(int *device_p);

/* Whether device runs stream memory operations (cuStreamWaitValue32):
 * 1 until a call has said otherwise, which shoal_cuda_no_memops records
 * for the life of the process. */
int shoal_cuda_has_memops(int device);
void shoal_cuda_no_memops(int device);

/* mem.c */
shoal_status_t shoal_cuda_classify(const void *p, shoal_dev_mem_t *kind_p, int *device_p);
shoal_status_t shoal_cuda_extent(const void *p, size_t *bytes_p);
shoal_status_t shoal_cuda_mem_alloc(int device, size_t bytes, void **p_p);
shoal_status_t shoal_cuda_mem_free(void *p);
shoal_status_t shoal_cuda_host_alloc(size_t bytes, void **p_p);
shoal_status_t shoal_cuda_host_free(void *p);
/* The context p belongs to, entered (shoal_cuda_leave after), and p's
 * kind; what names the entry in the message when the driver does not
 * know p. */
shoal_status_t shoal_cuda_mem_enter(const void *p, const char *what, shoal_cuda_scope_t *s,
                                    shoal_dev_mem_t *kind_p);

/* ipc.c */
shoal_status_t shoal_cuda_ipc_get(const void *p, shoal_dev_ipc_t *h_p);
void shoal_cuda_ipc_put(const shoal_dev_ipc_t *h);
shoal_status_t shoal_cuda_ipc_open(const shoal_dev_ipc_t *h, void **p_p);
shoal_status_t shoal_cuda_ipc_close(void *p);

/* stream.c */
shoal_status_t shoal_cuda_device_of(void *stream, int *device_p);
void shoal_cuda_prepare(void);
shoal_status_t shoal_cuda_copy(void *dst, const void *src, size_t bytes, void *stream);
shoal_status_t shoal_cuda_reduce(void *dst, const void *a, const void *b, size_t count,
                                 shoal_dtype_t dtype, shoal_op_t op, void *stream);
shoal_status_t shoal_cuda_avg(void *dst, const void *src, size_t count, shoal_dtype_t dtype,
                              int n, void *stream);
shoal_status_t shoal_cuda_convert(void *dst, shoal_dtype_t dst_dtype, const void *src,
                                  shoal_dtype_t src_dtype, size_t count, void *stream);
shoal_status_t shoal_cuda_orthonormalise(float *p, const shoal_dev_psgd_desc_t *desc,
                                         size_t ntensors, double *col, void *stream);
shoal_status_t shoal_cuda_flag_write(uint32_t *flag, uint32_t value, void *stream);
shoal_status_t shoal_cuda_flag_wait(uint32_t *flag, uint32_t value, void *stream);
shoal_status_t shoal_cuda_stream_create(int device, void **stream_p);
shoal_status_t shoal_cuda_stream_destroy(void *stream);
shoal_status_t shoal_cuda_stream_sync(void *stream);
/* The codec kernel (SHOAL_K_CODEC) with its argument arg (a
 * shoal_k_codec_t), one thread per unit of the run, on the stream whose
 * context ctx the caller made current. */
shoal_status_t shoal_cuda_launch_codec(const shoal_cu_t *cu, CUcontext ctx, size_t units,
                                       void *arg, void *stream);

/* gemm.c */
shoal_status_t shoal_cuda_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                               const float *a, size_t lda, const float *b, size_t ldb, float beta,
                               float *c, size_t ldc, void *stream);

/* codec.c */
shoal_status_t shoal_cuda_codec(const shoal_dev_codec_args_t *args, void *stream);

/* fatbin.c: the kernels (kernels.cu) as the fat binary nvcc made. */
extern const unsigned char shoal_cuda_fatbin[];
extern const size_t shoal_cuda_fatbin_size;

#endif
