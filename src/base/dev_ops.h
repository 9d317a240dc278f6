/* The device module's table: what libshoal asks of a GPU runtime. The
 * CUDA module (libshoal_cuda.so, built from src/cuda/ when nvcc is found)
 * exports shoal_cuda_module(), which returns this table; libshoal loads
 * the module with dlopen the first time it meets a device pointer or a
 * stream (core/dev.c), so the library builds, runs and tests without CUDA.
 *
 * Every entry returns a shoal status. On failure the module keeps a
 * message for the calling thread (why()) that names the cause and the
 * driver's own words ("cuMemAlloc: out of memory"); libshoal logs it once.
 * Streams are the driver's (CUstream = cudaStream_t), passed as void *; a
 * NULL stream is the legacy default stream. Work queued on a stream runs
 * in stream order and the entry returns at once.
 *
 * Thread-safe: any thread may call any entry after open returned SHOAL_OK.
 * The entries that take a device make that device's primary context
 * current on the calling thread when no context is; the stream entries use
 * the stream's own context. */
#ifndef SHOAL_BASE_DEV_OPS_H
#define SHOAL_BASE_DEV_OPS_H

#include "shoal.h"

#include <stddef.h>
#include <stdint.h>

#define SHOAL_DEV_ABI 9

typedef enum {
    SHOAL_DEV_MEM_HOST = 0,  /* pageable host memory, or memory the driver does not know */
    SHOAL_DEV_MEM_PINNED,    /* page-locked host memory known to the driver */
    SHOAL_DEV_MEM_DEVICE,    /* device memory: the host cannot read it */
    SHOAL_DEV_MEM_MANAGED,   /* managed (unified) memory: host and device read it */
} shoal_dev_mem_t;

/* An exported device allocation, as bytes that travel through the
 * bootstrap: opened by another process of the same host. */
#define SHOAL_DEV_IPC_BYTES 96
typedef struct {
    unsigned char bytes[SHOAL_DEV_IPC_BYTES];
} shoal_dev_ipc_t;

/* A codec operation on device buffers (the codec entry): what
 * compress/codec.h's encode, add_encode and decode do on the host, with
 * the same wire, residuals and bits. The module does not link libshoal,
 * so the codec travels as its kind and its fields rather than as a
 * shoal_codec_t; a caller fills these from one (kind from c->ops->name:
 * "int8" or "ternary"). */
typedef enum {
    SHOAL_DEV_CODEC_ENCODE = 0, /* wire_out = encode(src (+ addend)) */
    SHOAL_DEV_CODEC_ADD_ENCODE, /* wire_out = wire_in (+) (src (+ addend)); src is local */
    SHOAL_DEV_CODEC_DECODE,     /* dst = decode(wire_in) */
    /* dst[b] = the largest |src[i] (+ addend[i])| of the run's block b (the
     * fp32 sum; NaN ignored; 0 for a block without numbers), for the
     * ceil(count / block) blocks of the run, first a multiple of block:
     * shoal_codec_block_absmax_sum's, the ternary codec's shared scales
     * before their max over the ranks. Any kind. */
    SHOAL_DEV_CODEC_ABSMAX,
    /* The moments of each block b of the run (first a multiple of block),
     * for the ternary codec's clipping bound: with v the values src[i]
     * (+ addend[i]) (the fp32 sum) as doubles, n_b of them,
     * ((double *)wire_out)[2 b] = the sum of v and [2 b + 1] = the sum of
     * (v - sum / n_b)^2, each added in the values' order. Any kind. */
    SHOAL_DEV_CODEC_MOMENTS,
} shoal_dev_codec_op_t;

typedef enum {
    SHOAL_DEV_CODEC_INT8 = 0, /* shoal_codec_int8 */
    SHOAL_DEV_CODEC_TERNARY,  /* shoal_codec_ternary */
} shoal_dev_codec_kind_t;

typedef struct {
    shoal_dev_codec_op_t op;
    shoal_dev_codec_kind_t kind;
    /* shoal_codec_t's fields, as codec.h defines them: block (32, 64 or
     * 128), round (a shoal_round_t), seed and step of stochastic
     * rounding; for ternary, scales (device memory: one per block of the
     * whole tensor, covering the blocks of first .. first + count - 1),
     * wide and packed (not both). */
    size_t block;
    int round;
    uint64_t seed, step;
    const float *scales;
    int wide, packed;
    /* Device memory (or any the device reaches), count values from the
     * run's value `first` of the tensor. wire_out: encode and
     * add_encode, and may be wire_in; wire_in: add_encode and decode;
     * src: encode's input, add_encode's local values; addend and
     * residual: NULL or count floats, residual may be addend (codec.h);
     * dst: decode's output. Pointers an operation does not use are
     * ignored. */
    void *wire_out;
    const void *wire_in;
    const float *src;
    const float *addend;
    float *residual;
    float *dst;
    size_t count;
    size_t first;
} shoal_dev_codec_args_t;

/* One factor P_t for the orthonormalise entry: rows x rank floats,
 * row-major, from float off of the buffer, and rows doubles of scratch
 * from double col of the scratch (no two records' overlap). */
typedef struct {
    uint64_t off, rows, rank, col;
} shoal_dev_psgd_desc_t;

typedef struct shoal_dev_ops {
    size_t size;      /* sizeof(shoal_dev_ops_t) */
    unsigned abi;     /* SHOAL_DEV_ABI */
    const char *name; /* "cuda" */
    /* Thread-local message of this thread's last failure. */
    const char *(*why)(void);

    /* Load the driver library (driver: a path or file name, NULL for the
     * system's libcuda.so.1), initialise it and count the devices. Fails
     * with SHOAL_ERR_UNSUPPORTED and a message that names the cause (no
     * driver library, driver too old, no device). Idempotent: later calls
     * return the first one's result. cublas (NULL: libcublas.so.13) is the
     * library gemm loads on its first use, not now. */
    shoal_status_t (*open)(const char *driver, const char *cublas);
    /* Devices visible to this process (after open). */
    int (*device_count)(void);

    /* Where p lives: its kind and device (-1 for host memory). Memory the
     * driver does not know is SHOAL_DEV_MEM_HOST. */
    shoal_status_t (*classify)(const void *p, shoal_dev_mem_t *kind_p, int *device_p);
    /* The device of the calling thread's current context, or of the
     * stream when stream is not NULL. */
    shoal_status_t (*device_of)(void *stream, int *device_p);
    /* Bytes of the allocation that holds p, from p on. */
    shoal_status_t (*extent)(const void *p, size_t *bytes_p);
    /* Where the calling thread has a current context, load the module's
     * kernels into it now (nothing otherwise): loading waits for all the
     * context's queued work, so it belongs before any stream-ordered call
     * (communicator init), not under a stream that waits for the host.
     * Best effort: a failure shows at the first launch. */
    void (*prepare)(void);

    /* Device memory of device (freed with mem_free), exportable with
     * ipc_get. */
    shoal_status_t (*mem_alloc)(int device, size_t bytes, void **p_p);
    shoal_status_t (*mem_free)(void *p);
    /* Pinned host memory that every device may read and write (also by
     * stream memory operations); freed with host_free. */
    shoal_status_t (*host_alloc)(size_t bytes, void **p_p);
    shoal_status_t (*host_free)(void *p);

    /* Stream work. copy: any kinds on either side (bytes may be 0). */
    shoal_status_t (*copy)(void *dst, const void *src, size_t bytes, void *stream);
    /* dst[i] = a[i] op b[i] (AVG: the sum), on the device; dst may equal a
     * or b. The element math is the host kernels' (algos/reduce_elem.h). */
    shoal_status_t (*reduce)(void *dst, const void *a, const void *b, size_t count,
                             shoal_dtype_t dtype, shoal_op_t op, void *stream);
    /* dst[i] = src[i] / n, as shoal_avg_finish. */
    shoal_status_t (*avg)(void *dst, const void *src, size_t count, shoal_dtype_t dtype, int n,
                          void *stream);
    /* dst[i] = src[i] converted from src_dtype to dst_dtype, for the
     * floating types but float64 (float32, float16, bfloat16, fp8 e4m3
     * and e5m2): through float32, with base/dtype.h's conversions (round
     * to nearest even, as the host's), so the bits are the host's. The
     * same dtype on both sides copies. */
    shoal_status_t (*convert)(void *dst, shoal_dtype_t dst_dtype, const void *src,
                              shoal_dtype_t src_dtype, size_t count, void *stream);
    /* Stream order against the host through a 32-bit flag in host_alloc
     * memory: flag_write stores value when the stream reaches it (after
     * the work queued before it is complete and visible to the host);
     * flag_wait holds the stream's later work until (int32_t)(*flag -
     * value) >= 0, which the host makes true by a release store. */
    shoal_status_t (*flag_write)(uint32_t *flag, uint32_t value, void *stream);
    shoal_status_t (*flag_wait)(uint32_t *flag, uint32_t value, void *stream);
    shoal_status_t (*stream_create)(int device, void **stream_p);
    shoal_status_t (*stream_destroy)(void *stream);
    /* Wait on the host for the stream's queued work. */
    shoal_status_t (*stream_sync)(void *stream);

    /* Export the allocation that holds p (its base and size go with it);
     * open a peer's export in this process (*p_p = the address of the
     * exported base); close what ipc_open returned. Bytes 0..63 of an
     * export name the allocation (equal for every export of it, never
     * for another), 64..71 hold p's offset in it and 72..79 its size.
     * An export may hold a resource of the exporter (a descriptor the
     * peers take a copy of): ipc_put releases it once every peer has
     * opened the export or given up; opening it after that fails. */
    shoal_status_t (*ipc_get)(const void *p, shoal_dev_ipc_t *h_p);
    void (*ipc_put)(const shoal_dev_ipc_t *h);
    shoal_status_t (*ipc_open)(const shoal_dev_ipc_t *h, void **p_p);
    shoal_status_t (*ipc_close)(void *p);

    /* C = alpha op(A) op(B) + beta C in fp32, row-major (as cblas_sgemm
     * with CblasRowMajor): op(A) is m x k, op(B) k x n, C m x n; trans_a
     * and trans_b 1 for the transpose; lda, ldb, ldc the row strides. On
     * the device through cuBLAS, loaded on first use (open's cublas):
     * SHOAL_ERR_UNSUPPORTED with the reason when it cannot be loaded. m,
     * n or k 0 queues nothing (C is not scaled). SHOAL_ERR_INVALID_ARG
     * for a size or stride above INT_MAX (cuBLAS's int), a stride below
     * its row, a flag other than 0 and 1, or a NULL matrix. */
    shoal_status_t (*gemm)(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                           const float *a, size_t lda, const float *b, size_t ldb, float beta,
                           float *c, size_t ldc, void *stream);
    /* Queue the codec operation args describes on the stream (args is
     * read before the entry returns). The element math is the host
     * codecs' own (compress/int8_elem.h, compress/ternary_elem.h), so the
     * wire, dst and residual are bitwise what c->ops->encode, add_encode
     * or decode give on the same inputs, in every wire form (int8;
     * ternary plain, wide and packed). count 0 queues nothing.
     * SHOAL_ERR_INVALID_ARG for an unknown op or kind, a block not 32, 64
     * or 128, an unknown round, a ternary codec both wide and packed, or a
     * NULL buffer the operation needs. */
    shoal_status_t (*codec)(const shoal_dev_codec_args_t *args, void *stream);
    /* Queue PowerSGD's orthonormalisation (compress/psgd_elem.h) of the
     * ntensors factors that desc (device memory, ntensors records) names
     * in p, with col as their scratch, all on the device: the bits are
     * what the host's phase2 gives. ntensors 0 queues nothing;
     * SHOAL_ERR_INVALID_ARG for a NULL buffer. The factors are done in
     * parallel, each by one thread, so a single tall factor runs at one
     * GPU thread's speed. */
    shoal_status_t (*orthonormalise)(float *p, const shoal_dev_psgd_desc_t *desc,
                                     size_t ntensors, double *col, void *stream);
} shoal_dev_ops_t;

/* The module's one export. */
typedef const shoal_dev_ops_t *(*shoal_dev_module_fn_t)(void);
#define SHOAL_DEV_MODULE_SYMBOL "shoal_cuda_module"

#endif
