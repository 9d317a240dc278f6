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

#define SHOAL_DEV_ABI 1

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
     * return the first one's result. */
    shoal_status_t (*open)(const char *driver);
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
     * exported base); close what ipc_open returned. */
    shoal_status_t (*ipc_get)(const void *p, shoal_dev_ipc_t *h_p);
    shoal_status_t (*ipc_open)(const shoal_dev_ipc_t *h, void **p_p);
    shoal_status_t (*ipc_close)(void *p);
} shoal_dev_ops_t;

/* The module's one export. */
typedef const shoal_dev_ops_t *(*shoal_dev_module_fn_t)(void);
#define SHOAL_DEV_MODULE_SYMBOL "shoal_cuda_module"

#endif
